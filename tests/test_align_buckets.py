"""Bucketed alignment (``--memory-budget``): the unbucketed run's bytes, resumable, in process and as processes.

A bucketed run writes byte-identical outputs to the unbucketed run (ECDH, KKRT, keyed hash; duplicates kept
first; mode left); a run that fails mid-way resumes (``--resume``) at its first unfinished bucket to the same
bytes; a resume with another input is refused in one line; two party processes, one killed with SIGKILL
mid-run, resume to the same bytes.
"""

from __future__ import annotations

import csv
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from test_party_processes import finish, make_config, party, pki
from vflcrypto.protocols.align import align_files
from vflcrypto.protocols.align import buckets as bk

from vflcrypto.errors import InputDataError

__all__ = ["pki"]  # the module-scoped PKI fixture of the party-process tests

MIB = 4 << 20  # a budget below buckets.FIXED_BYTES plans for a quarter of it: 1 MiB of buckets


def _write(path: Path, ids: list[str]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["id", "x"])
        for i in ids:
            w.writerow([i, f"v,{i}\n" if i.endswith("7") else f"{i}z"])  # quoted cells with commas and newlines


def _data(d: Path, n: int = 4000, seed: int = 5) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)  # example data only
    a = [f"u{i}" for i in rng.choice(3 * n, n, replace=False)] + ["17", "Ã©"]
    b = [f"u{i}" for i in rng.choice(3 * n, n, replace=False)] + ["17", "x"]
    _write(d / "left.csv", a)
    _write(d / "right.csv", b)
    return d / "left.csv", d / "right.csv"


def _outputs(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.aligned.csv"))}


@pytest.mark.parametrize(("protocol", "reveal"), [("kkrt", "both"), ("rr22", "both"), ("ecdh", "left"),
                                                  ("hash", "both")])
def test_bucketed_outputs_equal_the_unbucketed_bytes(tmp_path: Path, protocol: str, reveal: str) -> None:
    left, right = _data(tmp_path)
    whole = align_files(left, right, id_column="id", protocol=protocol, reveal=reveal, out_dir=tmp_path / "whole")
    run = align_files(left, right, id_column="id", protocol=protocol, reveal=reveal, out_dir=tmp_path / "b",
                      memory_budget=MIB)
    assert run["buckets"] == bk.plan_buckets(4002, MIB) > 1
    assert run["intersection"] == whole["intersection"] > 0
    assert _outputs(tmp_path / "b") == _outputs(tmp_path / "whole") != {}
    assert not (tmp_path / "b" / ".align-buckets").exists()  # the work directory goes once the outputs are written


def test_duplicates_kept_first_and_refused_as_without_buckets(tmp_path: Path) -> None:
    _write(tmp_path / "l.csv", ["a1", "a2", "a1", "a3"])
    _write(tmp_path / "r.csv", ["a1", "a3", "a4"])
    kw = {"id_column": "id", "protocol": "kkrt", "memory_budget": MIB}
    with pytest.raises(InputDataError, match=r"line 4: duplicate ID \(first seen at line 2\).*--keep-first"):
        align_files(tmp_path / "l.csv", tmp_path / "r.csv", out_dir=tmp_path / "e", **kw)
    align_files(tmp_path / "l.csv", tmp_path / "r.csv", out_dir=tmp_path / "w", id_column="id", protocol="kkrt",
                duplicates="keep_first")
    align_files(tmp_path / "l.csv", tmp_path / "r.csv", out_dir=tmp_path / "b", duplicates="keep_first", **kw)
    assert _outputs(tmp_path / "b") == _outputs(tmp_path / "w")


def test_a_failed_run_resumes_at_its_first_unfinished_bucket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    left, right = _data(tmp_path)
    align_files(left, right, id_column="id", protocol="kkrt", out_dir=tmp_path / "whole")
    real = bk.write_result

    def failing(work: Path, b: int, *args: object) -> None:
        if work.name == "left" and b == 2:
            raise RuntimeError("stopped")  # the test's stand-in for a kill, in the active party
        real(work, b, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(bk, "write_result", failing)
    kw = {"id_column": "id", "protocol": "kkrt", "out_dir": tmp_path / "b", "memory_budget": MIB}
    with pytest.raises(RuntimeError, match="stopped"):
        align_files(left, right, **kw)
    assert not _outputs(tmp_path / "b")
    work = tmp_path / "b" / ".align-buckets"
    assert sorted(p.name for p in (work / "left" / "done").iterdir()) == ["000000.bin", "000001.bin"]
    assert all(stat_mode(p) == 0o600 for p in (work / "left" / "spill").iterdir())
    with pytest.raises(InputDataError, match="holds an unfinished bucketed run: pass --resume"):
        align_files(left, right, **kw)
    monkeypatch.setattr(bk, "write_result", real)
    run = align_files(left, right, resume=True, **kw)
    assert run["resumed_from"] == 2
    assert _outputs(tmp_path / "b") == _outputs(tmp_path / "whole")


def stat_mode(p: Path) -> int:
    return p.stat().st_mode & 0o777


def test_a_resume_with_another_input_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    left, right = _data(tmp_path)
    monkeypatch.setattr(bk, "write_result", lambda *a: (_ for _ in ()).throw(RuntimeError("stopped")))
    kw = {"id_column": "id", "protocol": "kkrt", "out_dir": tmp_path / "b", "memory_budget": MIB}
    with pytest.raises(RuntimeError):
        align_files(left, right, **kw)
    _write(left, ["u1", "u2"])
    with pytest.raises(InputDataError) as err:
        align_files(left, right, resume=True, **kw)
    assert "cannot resume" in str(err.value) and "another input file" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_killed_party_process_resumes_to_the_same_bytes(tmp_path: Path, pki: Path) -> None:
    left, right = _data(tmp_path, n=15000)
    align_files(left, right, id_column="id", protocol="ecdh", out_dir=tmp_path / "whole")
    files = {"active": left, "passive-0": right}

    def start(run: str, *extra: str) -> dict:
        (tmp_path / run).mkdir(exist_ok=True)
        cfg = make_config(tmp_path / run, pki, list(files), timeout=8.0)
        return {n: party(cfg, n, "align", "--data", str(f), "--id-column", "id", "--protocol", "ecdh",
                         "--memory-budget", "4MiB", "--work-dir", str(tmp_path / f"work-{n}"), *extra,
                         "--out", str(tmp_path / "out" / f"{n}.aligned.csv")) for n, f in files.items()}

    (tmp_path / "out").mkdir()
    procs = start("killed")
    done = tmp_path / "work-active" / "done"
    deadline = time.monotonic() + 60
    while not (done.exists() and len(list(done.glob("*.bin"))) >= 2):
        assert time.monotonic() < deadline and procs["active"].poll() is None, finish(procs)
        time.sleep(0.01)
    os.kill(procs["active"].pid, signal.SIGKILL)
    res = finish(procs, timeout=30)
    assert res["active"][0] == -signal.SIGKILL and res["passive-0"][0] != 0
    held = len(list(done.glob("*.bin")))
    buckets = bk.plan_buckets(15002, MIB)
    assert 2 <= held < buckets, "the run ended before the kill"
    res = finish(start("resumed", "--resume"), timeout=60)
    for n, (rc, rec, err) in res.items():
        assert rc == 0, f"{n}: {err}"
        assert rec is not None and rec["summary"]["buckets"] == buckets
        assert rec["summary"]["resumed_from"] <= held
    whole = _outputs(tmp_path / "whole")
    out = tmp_path / "out"
    assert (out / "active.aligned.csv").read_bytes() == whole["left.aligned.csv"]
    assert (out / "passive-0.aligned.csv").read_bytes() == whole["right.aligned.csv"]


def test_a_spilled_line_is_the_csv_writers_line() -> None:
    """``spill.csv_line`` joins a row directly when no field needs quotes: every row of up to three fields drawn
    from delimiters, quotes, line breaks, spaces, empty and non-ASCII text comes out as ``csv.writer`` writes it."""
    import io
    import itertools

    from vflcrypto.protocols.align.spill import csv_line

    def writer(row: tuple[str, ...]) -> bytes:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerow(row)
        return out.getvalue().encode("utf-8")

    fields = ["", "a", ",", '"', "\n", "\r", " ", "é", "a,b", 'x"y', " z "]
    rows = [r for k in (1, 2, 3) for r in itertools.product(fields, repeat=k)]
    assert [csv_line(r) for r in rows] == [writer(r) for r in rows]


def test_a_block_of_lines_is_the_csv_writers_lines() -> None:
    """``spill.csv_lines`` formats a block at once when no field needs quotes, else row by row: blocks of every
    width up to three, all plain or with one field that needs quotes (or one empty one-field row), give
    ``csv_line``'s bytes for every row."""
    import itertools

    from vflcrypto.protocols.align.spill import csv_line, csv_lines

    fields = ["", "a", ",", '"', "\n", "\r", " ", "é", "a,b", 'x"y', " z "]
    plain = ["a", " ", "é", " z ", "user-7"]
    for width in (1, 2, 3):
        base = [r for r in itertools.product(plain, repeat=width)]
        assert csv_lines(base) == [csv_line(r) for r in base]
        for odd in fields:
            for at in (0, len(base) // 2, len(base) - 1):
                block = [*base[:at], (odd,) * width, *base[at:]]
                assert csv_lines(block) == [csv_line(r) for r in block], (width, odd, at)
    assert csv_lines([]) == []


def test_counting_a_bucket_reads_only_its_keys_and_refuses_duplicates_as_parsing_does() -> None:
    from vflcrypto.protocols.align import spill

    rows = [(f"id-{i % 5}", str(i)) for i in range(8)]  # id-0 .. id-2 twice
    data = b"".join(spill.spill_block(rows, 0, 0, False, b"k" * 32, 1))
    assert spill.count_bucket(data, "keep_first", "f.csv", "--keep-first") == 5 == \
        len(spill.parse_bucket(data, "keep_first", "f.csv", "--keep-first")[0])
    with pytest.raises(InputDataError, match=r"f.csv: line 7: duplicate ID \(first seen at line 2\)"):
        spill.count_bucket(data, "refuse", "f.csv", "--keep-first")
    assert spill.count_bucket(b"".join(spill.spill_block(rows[:5], 0, 0, False, b"k" * 32, 1)), "refuse", "f.csv",
                              "--keep-first") == 5
