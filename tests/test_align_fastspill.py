"""The bucketed path's simple-CSV fast path: the streamed check (fastcsv.blocks, count_rows) and
the numpy spill (spill._spill_simple) against the csv path they replace, byte for byte."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vflcrypto.protocols.align import fastcsv, results, spill
from vflcrypto.protocols.align.idtable import IdTable, read_id_table

from vflcrypto.errors import InputDataError

KEY = bytes(range(32))


def _csv_table(path: Path, column: str, monkeypatch: pytest.MonkeyPatch) -> IdTable:
    """The table as the csv path reads it (the streamed check switched off)."""
    with monkeypatch.context() as m:
        m.setattr(fastcsv, "count_rows", lambda *_a: None)
        table = read_id_table(path, column)
    assert not table.simple
    return table


def _spilled(table: IdTable, work: Path, buckets: int, **kw: int) -> list[bytes]:
    work.mkdir()
    spill.spill_rows(table, work, KEY, buckets, strip=False, **kw)
    return [spill.spill_bytes(work, b) for b in range(buckets)]


def _same_as_csv(path: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch, column: str = "id",
                 buckets: int = 5) -> IdTable:
    fast, slow = read_id_table(path, column), _csv_table(path, column, monkeypatch)
    assert fast.simple and (fast.header, fast.n_rows) == (slow.header, slow.n_rows)
    want = _spilled(slow, tmp / "slow", buckets)
    assert sum(map(len, want)) > 0
    for i, block in enumerate((7, 64, 1 << 20)):  # lines across block boundaries, and one block
        assert _spilled(fast, tmp / f"fast{i}", buckets, block_bytes=block) == want, block
    return fast


@pytest.mark.parametrize("text", [
    "id,x\nb,1\na,2\nab,3\n",
    "x,id\n1,b\n2,a\n3,ab\n",
    "x,id,y\n1,b,q\n2,a,r\n3,ab,s\n",
    "id\nb\na\nab\n",
    " id , x \nb,1\na,2\n",
    "id,x\n b,1\nb,\nb,2\n",  # a leading space is part of the ID; a repeat is spilled as the csv path spills it
])
def test_simple_files_spill_as_the_csv_path_spills_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        text: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    _same_as_csv(path, tmp_path, monkeypatch)


_cell = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126, exclude_characters=',"'),
                max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(_cell.filter(bool), _cell), min_size=1, max_size=40), last=st.booleans(),
       buckets=st.integers(1, 9))
def test_random_simple_files(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
                             rows: list[tuple[str, str]], last: bool, buckets: int) -> None:
    tmp = tmp_path_factory.mktemp("r")
    lines = [f"{v},{i}" if last else f"{i},{v}" for i, v in rows]
    path = tmp / "t.csv"
    path.write_text(("v,id\n" if last else "id,v\n") + "".join(line + "\n" for line in lines))
    _same_as_csv(path, tmp, monkeypatch, buckets=buckets)


@pytest.mark.parametrize(("text", "why"), [
    ('id,x\n"a",1\n', "a quote"), ("id,x\r\na,1\r\n", "CR"), ("id,x\né,1\n", "non-ASCII"),
    ("id,x\na,1\n\nb,2\n", "a blank line"), ("id,x\na,1", "no final newline"), ("id,x\na,1,2\nb,2\n", "3 fields"),
    ("id,x\n,1\n", "an empty ID"), ("id,x\n", "no rows"), ("id,x\na,\x00\n", "NUL"),
    ("id,x\na," + "y" * 200_000 + "\n", "a line past the csv field limit"),
])
def test_other_files_are_read_the_csv_way(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    assert fastcsv.count_rows(path, "id") is None, why
    with pytest.raises(fastcsv.NotSimple):
        for _ in fastcsv.blocks(path, "id", 5):
            pass
    try:
        assert not read_id_table(path, "id").simple
    except InputDataError:
        pass  # the csv path's own error (a bad row)


def test_a_file_changed_after_its_check_is_spilled_the_csv_way_or_refused(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.csv"
    path.write_text("id,x\na,1\nb,2\n")
    table = read_id_table(path, "id")
    assert table.simple
    path.write_text("id,x\na,1\nb,\"2\"\n")  # no longer simple, same rows: the csv way spills it
    assert _spilled(table, tmp_path / "w1", 3) == _spilled(dataclasses.replace(table, simple=False),
                                                           tmp_path / "w2", 3)
    path.write_text("id,x\na,1\nb,2\nc,3\n")  # a row more
    with pytest.raises(InputDataError, match="changed while it was being aligned"):
        _spilled(table, tmp_path / "w3", 3)


def _walked(work: Path, b: int, duplicates: str = "error") -> tuple[list[bytes], list[bytes], list[int]]:
    return spill.parse_bucket(spill.spill_bytes(work, b), duplicates, "t.csv", "--keep-first")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.binary(min_size=1, max_size=9).map(lambda b: b.hex()), min_size=1, max_size=60, unique=True),
       buckets=st.integers(1, 6), data=st.data())
def test_an_indexed_bucket_counts_loads_and_sorts_as_the_walked_records(
        tmp_path_factory: pytest.TempPathFactory, ids: list[str], buckets: int, data: st.DataObject) -> None:
    """The simple-CSV spill's index: the counts, IDs, rows and result files of the record walk, byte for byte."""
    tmp = tmp_path_factory.mktemp("i")
    path = tmp / "t.csv"
    path.write_text("id,v\n" + "".join(f"{x},{i}\n" for i, x in enumerate(ids)))
    table = read_id_table(path, "id")
    _spilled(table, tmp / "w", buckets, block_bytes=50)
    for b in range(buckets):
        keys, lines, rows = _walked(tmp / "w", b)
        assert spill.count_spilled(tmp / "w", b, "error", "t.csv", "--k") == len(keys)
        got = spill.load_bucket(tmp / "w", b, duplicates="error", path=path, keep_first_flag="--k")
        assert isinstance(got, spill.IndexedBucket)
        assert list(got.keys) == keys and got.rows.tolist() == rows
        positions = np.asarray(data.draw(st.lists(st.integers(0, max(len(keys) - 1, 0)), unique=True,
                                                   max_size=len(keys))), np.int64)
        assert got.result(positions) == spill.result_records(keys, lines, positions)
        assert got.result(None) == b""


def test_a_repeated_id_goes_the_walk_which_keeps_the_first_or_names_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("id,v\na,1\nb,2\na,3\n")
    table = read_id_table(path, "id")
    _spilled(table, tmp_path / "w", 1)
    got = spill.load_bucket(tmp_path / "w", 0, duplicates="keep_first", path=path, keep_first_flag="--k")
    assert isinstance(got, spill.BucketRows) and got.keys == [b"a", b"b"] and got.rows == [0, 1]
    assert spill.count_spilled(tmp_path / "w", 0, "keep_first", "t.csv", "--k") == 2
    with pytest.raises(InputDataError, match="line 4: duplicate ID"):
        spill.count_spilled(tmp_path / "w", 0, "error", "t.csv", "--k")


def test_an_index_that_disagrees_with_its_spill_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("id,v\na,1\nb,2\n")
    _spilled(read_id_table(path, "id"), tmp_path / "w", 1)
    with (tmp_path / "w" / "spill" / "000000.bin").open("ab") as fh:
        fh.write(b"x")
    with pytest.raises(InputDataError, match="disagree"):
        spill.load_bucket(tmp_path / "w", 0, duplicates="error", path=path, keep_first_flag="--k")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.text(alphabet="ab\x01~ 09", min_size=1, max_size=18), min_size=1, max_size=80, unique=True),
       buckets=st.integers(1, 7), chunk=st.sampled_from([1, 2, 5, 1 << 14]), data=st.data())
def test_the_numpy_merge_writes_the_heap_merges_bytes(tmp_path_factory: pytest.TempPathFactory, ids: list[str],
                                                      buckets: int, chunk: int, data: st.DataObject) -> None:
    """Results of indexed buckets (IDs sharing long prefixes, one a prefix of another, bytes below the
    comma) merged in numpy, any chunk size, equal the heap merge of the same files, and count as they do."""
    tmp = tmp_path_factory.mktemp("m")
    path = tmp / "t.csv"
    path.write_text("id,v\n" + "".join(f"{x},{i}\n" for i, x in enumerate(ids)))
    work = tmp / "w"
    _spilled(read_id_table(path, "id"), work, buckets)
    for b in range(buckets):
        got = spill.load_bucket(work, b, duplicates="error", path=path, keep_first_flag="--k")
        n = len(got.canon())
        picked = data.draw(st.lists(st.integers(0, max(n - 1, 0)), unique=True, max_size=n)) if n else []
        spill.write_result(work, b, got, np.asarray(picked, np.int64))
    with (tmp / "fast.csv").open("wb") as fh:
        count = results._merge_indexed(work, buckets, fh, chunk=chunk)
    indexes = [spill.result_index(work, b) for b in range(buckets)]
    for f in (work / "done").glob("*.idx"):
        f.unlink()  # the walk's way: the heap merge, and each result's index from its records
    assert [spill.result_index(work, b).tolist() for b in range(buckets)] == [i.tolist() for i in indexes]
    (work / "spill" / "indexed").unlink()
    assert spill.merge_results(work, buckets, tmp / "heap.csv", ("id", "v")) == count
    assert (tmp / "heap.csv").read_bytes() == b"id,v\n" + (tmp / "fast.csv").read_bytes()


def test_a_truncated_result_file_is_refused_by_the_numpy_merge(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("id,v\n" + "".join(f"u{i},{i}\n" for i in range(50)))
    work = tmp_path / "w"
    _spilled(read_id_table(path, "id"), work, 2)
    for b in range(2):
        got = spill.load_bucket(work, b, duplicates="error", path=path, keep_first_flag="--k")
        spill.write_result(work, b, got, np.arange(len(got.canon()), dtype=np.int64))
    result = spill.result_path(work, 1)
    result.write_bytes(result.read_bytes()[:-1])
    with pytest.raises(InputDataError, match="truncated"):
        spill.merge_results(work, 2, tmp_path / "out.csv", ("id", "v"))
    assert not (tmp_path / "out.csv").exists()  # all or nothing
