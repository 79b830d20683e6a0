"""Party CSV reading, atomic outputs and pickle-free model files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from vflcrypto.data.files import (
    PRIVATE,
    atomic_open,
    atomic_write_bytes,
    atomic_write_text,
    load_model,
    save_model,
    write_csv_atomic,
)
from vflcrypto.data.tables import read_csv_strings, read_party_csv, require_same_ids, train_test_split
from vflcrypto.errors import InputDataError


def _write(tmp_path: Path, text: bytes | str, name: str = "p.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def test_reads_ids_features_label_and_missing_cells(tmp_path: Path) -> None:
    t = read_party_csv(_write(tmp_path, "id,y,a,b\nx1,1,0.5,\nx2,0,-1,2\n"), "id", label="y")
    assert t.ids == ("x1", "x2") and t.columns == ("a", "b")
    np.testing.assert_array_equal(t.label, [1.0, 0.0])
    assert np.isnan(t.X[0, 1]) and t.X[1, 0] == -1.0
    sub = t.take([1])
    assert sub.ids == ("x2",) and sub.X.shape == (1, 2)


@pytest.mark.parametrize("text, match", [
    (b"id,a\nx1,1\n\xff\xfe,2\n", "line 3 is not valid UTF-8"),
    ("id,a\nx1,1,3\n", "line 2 has 3 fields"),
    ("id,a\nx1,abc\n", r"line 2, column 'a'"),
    ("", "empty"),
    ("key,a\nx1,1\n", "no ID column"),
])
def test_bad_files_name_the_problem(tmp_path: Path, text: bytes | str, match: str) -> None:
    with pytest.raises(InputDataError, match=match):
        read_party_csv(_write(tmp_path, text), "id")


def test_nan_can_be_refused(tmp_path: Path) -> None:
    with pytest.raises(InputDataError, match="line 3, column 'a' is missing"):
        read_party_csv(_write(tmp_path, "id,a\nx1,1\nx2,\n"), "id", allow_nan=False)


def test_csv_strings_keep_cells_verbatim(tmp_path: Path) -> None:
    header, rows = read_csv_strings(_write(tmp_path, "id , name\n 007 ,Ana\n\n008,Bo\n"))
    assert header == ("id", "name")
    assert rows == [(2, (" 007 ", "Ana")), (3, ("", "")), (4, ("008", "Bo"))]  # a blank line: empty cells


def test_require_same_ids(tmp_path: Path) -> None:
    a = read_party_csv(_write(tmp_path, "id,a\n1,1\n2,2\n", "a.csv"), "id")
    b = read_party_csv(_write(tmp_path, "id,b\n2,1\n1,2\n", "b.csv"), "id")
    c = read_party_csv(_write(tmp_path, "id,b\n1,1\n", "c.csv"), "id")
    require_same_ids([a, a], ["a", "a2"])
    with pytest.raises(InputDataError, match=r"b \(.*b.csv: line 2\) has ID '2' where a \(.*a.csv: line 2\) has '1'"):
        require_same_ids([a, b], ["a", "b"])
    with pytest.raises(InputDataError, match="has 1 rows"):
        require_same_ids([a, c], ["a", "c"])


def test_split_is_deterministic_and_disjoint() -> None:
    tr, te = train_test_split(100, 0.2, seed=3)
    tr2, te2 = train_test_split(100, 0.2, seed=3)
    assert np.array_equal(tr, tr2) and np.array_equal(te, te2)
    assert len(te) == 20 and not set(tr) & set(te) and len(tr) + len(te) == 100
    with pytest.raises(InputDataError):
        train_test_split(10, 1.0)


def test_atomic_write_leaves_nothing_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.bin"
    atomic_write_bytes(target, b"old")

    def boom(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        atomic_write_bytes(target, b"new contents")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_model_files_round_trip_without_pickle(tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    save_model(path, {"kind": "test", "n": 3}, {"w": np.arange(3.0)})
    meta, arrays = load_model(path)
    assert meta == {"kind": "test", "n": 3}
    np.testing.assert_array_equal(arrays["w"], [0.0, 1.0, 2.0])
    with pytest.raises(InputDataError, match="pickle"):
        save_model(path, {}, {"bad": np.array([object()])})
    _write(tmp_path, b"not a model", "bad.npz")
    with pytest.raises(InputDataError, match="not a vflcrypto model"):
        load_model(tmp_path / "bad.npz")


def test_rows_keep_their_file_lines_through_take(tmp_path: Path) -> None:
    from vflcrypto.data.tables import read_party_csv

    p = tmp_path / "t.csv"
    p.write_text('id,x\na,1\n"b\nc",2\nd,3\n')  # a quoted newline: b's row spans lines 3-4, d is on line 5
    t = read_party_csv(p, "id")
    assert t.lines == (2, 4, 5)  # a record's line is the one it ends on, as the csv module counts
    sub = t.take([2, 0])
    assert sub.where(0) == f"{p}: line 5" and sub.where(1) == f"{p}: line 2"
    from vflcrypto.data.tables import PartyTable

    assert PartyTable(("a",), (), np.zeros((1, 0))).where(0) == "row 0"


def test_duplicate_ids_are_found_in_canonical_form_with_their_lines(tmp_path: Path) -> None:
    from vflcrypto.data.tables import read_party_csv
    from vflcrypto.errors import InputDataError

    p = tmp_path / "t.csv"
    p.write_text("id,x\ncafe\u0301,1\nb,2\ncaf\u00e9,3\n")  # NFD and NFC spellings of one ID
    with pytest.raises(InputDataError, match=r"line 4: duplicate ID .* \(first on line 2\)"):
        read_party_csv(p, "id").check_unique_ids()


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_outputs_get_the_mode_a_plain_open_gives_under_the_umask(
        tmp_path: Path, umask: int, expected: int) -> None:
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "report.html", "<html></html>")
        write_csv_atomic(tmp_path / "rows.csv", ["a"], [[1]])
        with open(tmp_path / "plain.txt", "w", encoding="utf-8") as fh:  # what the atomic writer must match
            fh.write("x")
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"report.html": expected, "rows.csv": expected, "plain.txt": expected}


def test_private_atomic_outputs_are_owner_only_even_under_an_open_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        with atomic_open(tmp_path / "secret.key", permissions=PRIVATE) as fh:
            assert os.fstat(fh.fileno()).st_mode & 0o777 == 0o600  # owner-only before the first byte
            fh.write(b"k")
        atomic_write_bytes(tmp_path / "public.pem", b"p")
    finally:
        os.umask(old)
    assert (tmp_path / "secret.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "public.pem").stat().st_mode & 0o777 == 0o666
