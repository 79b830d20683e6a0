"""``vflcrypto align``: files written, same order, --json, reveal modes, clean errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import vflcrypto.protocols.align as al

from vflcrypto.cli import main
from vflcrypto.errors import InputDataError


def _write(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    left = _write(tmp_path / "bank.csv", ["id", "income", "note"],
                  [["A-1", "10", "x"], ["B-2", "20", "café"], ["007", "30", ""], ["D-4", "40", "q"]])
    right = _write(tmp_path / "shop.csv", ["cust", "visits"],
                   [["D-4", "4"], ["007", "7"], ["Z-9", "9"], ["A-1", "1"]])
    return left, right


def _read(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


@pytest.mark.parametrize("protocol", ["ecdh", "hash", "kkrt"])
def test_align_both_writes_files_and_json(files: tuple[Path, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str], protocol: str) -> None:
    left, right = files
    out = tmp_path / "out"
    code = main(["align", "--left", str(left), "--right", str(right), "--id-column", "id",
                 "--right-id-column", "cust", "--protocol", protocol, "--out-dir", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert {"protocol", "left_size", "right_size", "intersection", "bytes_sent", "seconds"} <= set(summary)
    assert (summary["protocol"], summary["left_size"], summary["right_size"], summary["intersection"]) \
        == (protocol, 4, 4, 3)
    assert summary["bytes_sent"] > 0
    lrows, rrows = _read(out / "bank.aligned.csv"), _read(out / "shop.aligned.csv")
    assert lrows[0] == ["id", "income", "note"] and rrows[0] == ["cust", "visits"]
    assert [r[0] for r in lrows[1:]] == [r[0] for r in rrows[1:]]
    assert sorted(r[0] for r in lrows[1:]) == ["007", "A-1", "D-4"]
    assert ["007", "30", ""] in lrows  # verbatim: leading zeros and empty cells kept
    assert not list(out.glob(".*.part"))


def test_align_left_and_size_modes(files: tuple[Path, Path], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    left, right = files
    base = ["align", "--left", str(left), "--right", str(right), "--id-column", "id",
            "--right-id-column", "cust", "--json"]
    assert main([*base, "--reveal", "left", "--out-dir", str(tmp_path / "l")]) == 0
    assert json.loads(capsys.readouterr().out)["intersection"] == 3
    assert [p.name for p in (tmp_path / "l").iterdir()] == ["bank.aligned.csv"]
    assert main([*base, "--reveal", "size", "--out-dir", str(tmp_path / "s")]) == 0
    assert json.loads(capsys.readouterr().out)["intersection"] == 3
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").iterdir())


def test_align_text_output(files: tuple[Path, Path], tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    left, right = files
    assert main(["align", "--left", str(left), "--right", str(right), "--id-column", "id",
                 "--right-id-column", "cust", "--out-dir", str(tmp_path / "o")]) == 0
    assert "intersection: 3" in capsys.readouterr().out


def test_non_utf8_and_duplicates_are_clean_errors(tmp_path: Path, files: tuple[Path, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _, right = files
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"id,v\nA-1,1\nB\xff2,2\n")
    assert main(["align", "--left", str(bad), "--right", str(right), "--id-column", "id",
                 "--right-id-column", "cust", "--out-dir", str(tmp_path / "o")]) == 2
    assert "line 3 is not valid UTF-8" in capsys.readouterr().err
    dup = _write(tmp_path / "dup.csv", ["id"], [["a"], ["b"], ["a"]])
    args = ["align", "--left", str(dup), "--right", str(right), "--id-column", "id",
            "--right-id-column", "cust", "--out-dir", str(tmp_path / "o")]
    assert main(args) == 2
    assert "line 4: duplicate ID (first seen at line 2)" in capsys.readouterr().err
    assert main([*args, "--keep-first"]) == 0
    assert main(["align", "--left", str(dup), "--right", str(right), "--id-column", "nope",
                 "--out-dir", str(tmp_path / "o")]) == 2
    assert "no ID column 'nope'" in capsys.readouterr().err


def test_aligned_rows_are_streamed_from_the_input_and_a_changed_input_is_refused(tmp_path: Path) -> None:
    from vflcrypto.protocols.align.files import write_aligned

    src = tmp_path / "a.csv"
    src.write_text('id,x\na,1\n"b,\nwith a newline",2\nc,"3"\n', encoding="utf-8")
    table = al.read_id_table(src, "id")
    assert table.n_rows == 3 and table.ids == ["a", "b,\nwith a newline", "c"]
    assert not hasattr(table, "rows")  # no cells are held: the file is streamed again to write
    write_aligned(table, tmp_path / "o.csv", np.array([2, 1]))
    assert (tmp_path / "o.csv").read_text(encoding="utf-8") == 'id,x\nc,3\n"b,\nwith a newline",2\n'
    src.write_text("id,x\na,1\n", encoding="utf-8")  # the input changes between the PSI and the write
    with pytest.raises(InputDataError, match="changed while it was being aligned"):
        write_aligned(table, tmp_path / "p.csv", np.array([0]))
    assert not (tmp_path / "p.csv").exists()


def test_a_bad_byte_after_a_quoted_newline_names_its_physical_line(tmp_path: Path) -> None:
    src = tmp_path / "a.csv"
    src.write_bytes(b'id,x\n"a\nb",1\nc,\xff\n')
    with pytest.raises(InputDataError, match="line 4 is not valid UTF-8"):
        al.read_id_table(src, "id")


def test_the_same_inputs_give_byte_identical_outputs_whatever_the_run_or_protocol(tmp_path: Path) -> None:
    """The common rows come out in the canonical order of their IDs, not in an order set by the run's keys."""
    rng = np.random.default_rng(11)  # example IDs
    ids = [f"C-{v}" for v in rng.choice(10**6, size=300, replace=False)]
    left = _write(tmp_path / "bank.csv", ["id", "x"], [[i, str(k)] for k, i in enumerate(ids[:200])])
    right = _write(tmp_path / "shop.csv", ["id", "y"], [[i, str(k)] for k, i in enumerate(ids[100:][::-1])])
    outputs = []
    for run, protocol in enumerate(["ecdh", "ecdh", "kkrt", "hash"]):
        out = tmp_path / f"out{run}"
        assert main(["align", "--left", str(left), "--right", str(right), "--id-column", "id", "--protocol",
                     protocol, "--out-dir", str(out), "--no-progress"]) == 0
        outputs.append(((out / "bank.aligned.csv").read_bytes(), (out / "shop.aligned.csv").read_bytes()))
    assert all(o == outputs[0] for o in outputs[1:])
    bank, shop = (_read(tmp_path / "out0" / f) for f in ("bank.aligned.csv", "shop.aligned.csv"))
    assert [r[0] for r in bank[1:]] == [r[0] for r in shop[1:]] == sorted(ids[100:200])
