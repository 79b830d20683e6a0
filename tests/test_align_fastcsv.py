"""The simple-CSV fast path of alignment (protocols/align/fastcsv.py) against the csv path it replaces.

For every file the fast path accepts, the IDs, their canonical order and the aligned output
bytes must equal the csv path's; every file it refuses goes the csv path, whose error it
must not change.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vflcrypto.protocols.align import fastcsv
from vflcrypto.protocols.align.files import align_files
from vflcrypto.protocols.align.idtable import canon_table, read_id_table
from vflcrypto.protocols.align.tables import canonical_order

from vflcrypto.errors import InputDataError
from vflcrypto.psi import kkrt
from vflcrypto.psi import primitives as psi


def _write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def _both(path: Path, column: str = "id") -> tuple[psi.CanonicalIds, psi.CanonicalIds]:
    fast_table, slow_table = read_id_table(path, column, load=True), read_id_table(path, column)
    assert fast_table.loaded is not None and slow_table.loaded is None
    assert (fast_table.header, fast_table.n_rows) == (slow_table.header, slow_table.n_rows)
    fast, slow = canon_table(fast_table, "error", False), canon_table(slow_table, "error", False)
    assert isinstance(fast.encoded, psi.PackedIds)
    assert list(fast.encoded) == list(slow.encoded) and np.array_equal(fast.rows, slow.rows)
    return fast, slow


@pytest.mark.parametrize("text", [
    "id,x\nb,1\na,2\nab,3\n",
    "x,id\n1,b\n2,a\n3,ab\n",  # the ID column last
    "x,id,y\n1,b,q\n2,a,r\n3,ab,s\n",  # in the middle
    "id\nb\na\nab\n",  # alone
    " id , x \nb,1\na,2\n",  # header names are stripped (cells are not)
    "id,x\n b,1\nb,\n",  # a leading space is part of the ID; an empty cell elsewhere is fine
])
def test_simple_files_read_as_the_csv_path_reads_them(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path / "t.csv", text)
    fast, slow = _both(path)
    rows = np.arange(len(slow.encoded))[::-1].copy()
    assert np.array_equal(canonical_order(fast, rows), canonical_order(slow, rows))


@pytest.mark.parametrize(("text", "why"), [
    ('id,x\n"a",1\n', "a quote"), ("id,x\r\na,1\r\n", "CR"), ("id,x\né,1\n", "non-ASCII"),
    ("id,x\na,1\n\nb,2\n", "a blank line"), ("id,x\na,1", "no final newline"), ("id,x\na,1,2\nb,2\n", "3 fields"),
    ("id,x\na\nb,2,3\n", "1 field then 3"), ("id,x\n,1\n", "an empty ID"), ("id,x\n", "no rows"),
    ("id,x\na,\x00\n", "NUL"), ("id,x\na," + "y" * 200_000 + "\n", "a line past the csv field limit"),
])
def test_other_files_go_the_csv_way(tmp_path: Path, text: str, why: str) -> None:
    assert fastcsv.load(_write(tmp_path / "t.csv", text), "id") is None, why


@pytest.mark.parametrize("text", ["id,x\na,1\n\nb,2\n", "id,x\na,1,2\n", "id,x\n,1\n", "id,x\na,1\na,2\n",
                                  "id,x\na," + "y" * 200_000 + "\n"])
def test_errors_are_the_csv_paths(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path / "t.csv", text)
    with pytest.raises(InputDataError) as slow:
        canon_table(read_id_table(path, "id"), "error", False)
    with pytest.raises(InputDataError) as fast:
        canon_table(read_id_table(path, "id", load=True), "error", False)
    assert str(fast.value) == str(slow.value)


def test_a_repeated_id_goes_the_csv_way_which_keeps_the_first_or_refuses(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", "id,x\na,1\nb,2\na,3\n")
    table = read_id_table(path, "id", load=True)
    assert table.loaded is not None and fastcsv.canonical(table.loaded) is None
    kept = canon_table(table, "keep_first", False)
    assert list(kept.encoded) == [b"a", b"b"] and kept.rows.tolist() == [0, 1]


def test_header_errors_are_raised_as_the_csv_path_raises_them(tmp_path: Path) -> None:
    for text in ("id,id\na,b\n", "x,y\na,b\n"):
        path = _write(tmp_path / "t.csv", text)
        with pytest.raises(InputDataError) as slow:
            read_id_table(path, "id")
        with pytest.raises(InputDataError) as fast:
            read_id_table(path, "id", load=True)
        assert str(fast.value) == str(slow.value)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40).filter(lambda b: b"\x00" not in b), unique=True, max_size=60),
       st.sampled_from([b"", b"customer-0000-", b"x" * 8, b"\x01" * 31]))
def test_canonical_order_is_the_byte_order_over_several_words(ids: list[bytes], prefix: bytes) -> None:
    """IDs longer than 8 bytes and sharing long prefixes (several rounds of tie-breaking, reading bits across
    word boundaries): the integer sorts order them as their bytes."""
    ids = list(dict.fromkeys(prefix + i for i in ids))
    offsets = np.zeros(len(ids) + 1, np.int64)
    np.cumsum([len(i) for i in ids], out=offsets[1:])
    packed = psi.PackedIds(b"".join(ids), offsets)
    rows = np.arange(len(ids))[::-1].copy()
    order = packed.order_of(rows)
    assert [ids[r] for r in rows[order]] == sorted(ids)


def test_the_packed_ids_are_a_sequence_of_bytes() -> None:
    ids = psi.PackedIds(b"abcdef", np.array([0, 1, 3, 6]))
    assert len(ids) == 3 and list(ids) == [b"a", b"bc", b"def"] and ids[-1] == b"def" and ids[0:2] == [b"a", b"bc"]
    with pytest.raises(IndexError):
        ids[3]
    assert np.array_equal(kkrt.item_hashes(ids), kkrt.item_hashes([b"a", b"bc", b"def"]))


cell = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126, exclude_characters=',"'), max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(cell.filter(bool), cell), min_size=1, max_size=30, unique_by=lambda r: r[0]),
       other=st.lists(cell.filter(bool), max_size=30, unique=True))
def test_aligned_outputs_are_the_csv_paths_bytes(tmp_path_factory: pytest.TempPathFactory,
                                                   rows: list[tuple[str, str]], other: list[str]) -> None:
    d = tmp_path_factory.mktemp("f")
    left = _write(d / "l.csv", "id,v\n" + "".join(f"{a},{b}\n" for a, b in rows))
    right_ids = dict.fromkeys(other + [r[0] for r in rows[::2]])  # distinct, half of them common
    right = _write(d / "r.csv", "id\n" + "".join(f"{a}\n" for a in right_ids))
    fast = align_files(left, right, id_column="id", protocol="hash", out_dir=d / "fast")
    slow = align_files(read_id_table(left, "id"), read_id_table(right, "id"), id_column="id", protocol="hash",
                       out_dir=d / "slow")
    assert fast["intersection"] == slow["intersection"]
    for name in ("l.aligned.csv", "r.aligned.csv"):
        assert (d / "fast" / name).read_bytes() == (d / "slow" / name).read_bytes()


_native_scan = pytest.mark.skipif(fastcsv._native() is None, reason="the compiled scan (vflcrypto.data._csvscan) "
                                  "is not built here or VFLCRYPTO_NATIVE=0: only the numpy path runs")


def _loads(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[fastcsv.Loaded | None, fastcsv.Loaded | None]:
    """The file loaded by the compiled scan and by the numpy path."""
    native = fastcsv.load(path, "id")
    with monkeypatch.context() as m:
        m.setattr(fastcsv, "_native", lambda: None)
        return native, fastcsv.load(path, "id")


def _same(a: fastcsv.Loaded | None, b: fastcsv.Loaded | None) -> None:
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert np.array_equal(a.starts, b.starts) and np.array_equal(a.ends, b.ends)
        assert a.ids.data == b.ids.data and np.array_equal(a.ids.offsets, b.ids.offsets)
        assert (a.header, a.header_line) == (b.header, b.header_line)


@_native_scan
@pytest.mark.parametrize("text", [
    "id,x\nb,1\na,2\nab,3\n", "x,id\n1,b\n2,a\n", "x,id,y\n1,b,q\n", "id\nb\na\n", "id,x\n b,1\nb,\n",
    'id,x\n"a",1\n', "id,x\r\na,1\r\n", "id,x\né,1\n", "id,x\na,1\n\nb,2\n", "id,x\na,1", "id,x\na,1,2\nb,2\n",
    "id,x\na\nb,2,3\n", "id,x\n,1\n", "id,x\n", "id,x\na,\x00\n", "id,x\na," + "y" * 200_000 + "\n",
    "x,id\n1,\n", "x,id,y\n1,,2\n", "id,x\na,1\nb,2,\n",
])
def test_the_compiled_scan_reads_what_the_numpy_path_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            text: str) -> None:
    native, plain = _loads(_write(tmp_path / "t.csv", text), monkeypatch)
    _same(native, plain)


@_native_scan
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.sampled_from(["id,x", "x,id", "x,id,y", "id"]),
       body=st.text(st.sampled_from("ab,\n\r\"é\x00"), max_size=60))
def test_the_compiled_scan_agrees_on_any_bytes(tmp_path_factory: pytest.TempPathFactory,
                                               monkeypatch: pytest.MonkeyPatch, header: str, body: str) -> None:
    path = _write(tmp_path_factory.mktemp("scan") / "t.csv", header + "\n" + body)
    native, plain = _loads(path, monkeypatch)
    _same(native, plain)


@_native_scan
@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200)), max_size=30))
def test_the_compiled_gather_is_the_numpy_gather(data: bytes, ranges: list[tuple[int, int]]) -> None:
    arr = np.frombuffer(data, np.uint8)
    ranges = [(s, min(n, len(data) - s)) for s, n in ranges if s <= len(data)]
    starts = np.array([s for s, _ in ranges], np.int64)
    lengths = np.array([n for _, n in ranges], np.int64)
    expected = b"".join(data[s : s + n] for s, n in ranges)
    assert fastcsv.gather(arr, starts, lengths) == expected
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fastcsv, "_native", lambda: None)
        assert fastcsv.gather(arr, starts, lengths, chunk=3) == expected
    with pytest.raises(ValueError, match="outside"):
        fastcsv.gather(arr, np.array([len(data)], np.int64), np.array([1], np.int64))
