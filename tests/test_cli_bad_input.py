"""User errors end in one clear line and a non-zero exit, never a traceback (a table of bad inputs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bad")
    (d / "long.csv").write_text("id,x\n" + "a" * 200_000 + ",1\nb,2\n")
    (d / "ok.csv").write_text("id,y,x\nb,3,1\nc,4,2\n")
    (d / "ragged.csv").write_text("id,x\nb,1,9\n")
    (d / "empty.csv").write_text("")
    for sub in ("a", "b"):  # the same file name in two folders
        (d / sub).mkdir()
        (d / sub / "x.csv").write_text("id,v\nb,1\nc,2\n")
    (d / "out").mkdir()
    (d / "out" / "stale.aligned.csv").write_text("id,y,x\nold,0,0\n")
    (d / "stale.csv").write_text("id,v\nb,1\n")
    (d / "out" / "ok.aligned.csv").write_text("id,v\nb,1\n")  # an input that an output would overwrite
    (d / "afile").write_text("not a directory")
    (d / "oldmodel").mkdir()
    (d / "oldmodel" / "passive-1.npz").write_bytes(b"an earlier run's model")
    rows = range(40)
    (d / "lin_a.csv").write_text("id,y,x\n" + "".join(f"r{i},{3 * i + 7},{i % 7}\n" for i in rows))
    (d / "lin_b.csv").write_text("id,z\n" + "".join(f"r{i},{(i * 5) % 11}\n" for i in rows))
    (d / "two_a.csv").write_text("id,y,x\nb,3,1\nc,4,2\n")
    (d / "two_b.csv").write_text("id,z\nb,1\nc,2\n")
    (d / "one_class.csv").write_text("id,y\n" + "".join(f"r{i},0\n" for i in rows))
    (d / "nan_a.csv").write_text("id,y,x\n" + "".join(f"r{i},{i},{'' if i == 10 else i}\n" for i in rows))
    (d / "dup_a.csv").write_text("id,y,x\n" + "".join(f"r{i},{i},{i}\n" for i in [*rows[:5], 3, *rows[5:]]))
    subprocess.run([sys.executable, "-m", "vflcrypto", "certs", "--out", str(d / "pki"), "--party", "active",
                    "--party", "passive-0"], check=True, capture_output=True)
    return d


def _align(left: str, *extra: str) -> list[str]:
    return ["align", "--left", left, "--right", "ok.csv", "--id-column", "id", "--out-dir", "out", *extra]


def _linreg(*extra: str) -> list[str]:
    return ["train", "linreg", "--active", "ok.csv", "--passive", "ok.csv", "--id-column", "id", "--label", "y", *extra]


CASES = {
    "field past the csv limit": (_align("long.csv"), "long.csv: line 2"),
    "negative align timeout": (_align("ok.csv", "--timeout", "-5"), "positive number of seconds"),
    "negative train timeout": (_linreg("--timeout", "-1"), "positive number of seconds"),
    "test fraction of 1": (_linreg("--test-fraction", "1"), "test-fraction"),
    "ragged row": (_align("ragged.csv"), "line 2 has 3 fields"),
    "empty file": (_align("empty.csv"), "empty"),
    "missing file": (_align("nothere.csv"), "nothere.csv"),
    "security-md missing": (["audit", "--security-md", "nothere.md"], "no such file"),
    "outputs collide": (["align", "--left", "a/x.csv", "--right", "b/x.csv", "--id-column", "id", "--out-dir", "o"],
                        "the same file"),
    "output overwrites an input": (["align", "--left", "ok.csv", "--right", "out/ok.aligned.csv", "--id-column", "id",
                                    "--out-dir", "out"], "is the input"),
    "stale output of the other side": (["align", "--left", "ok.csv", "--right", "stale.csv", "--id-column", "id",
                                        "--out-dir", "out", "--reveal", "left"], "earlier run"),
    "party output overwrites its data": (["party", "--config", "pki/parties.example.toml", "--as", "active", "align",
                                          "--data", "stale.csv", "--id-column", "id", "--out", "stale.csv"],
                                         "is the input"),
    "linreg diverges": (["train", "linreg", "--active", "lin_a.csv", "--passive", "lin_b.csv", "--id-column", "id",
                         "--label", "y", "--lr", "1000", "--epochs", "5", "--preprocess", "none", "--label-scaling",
                         "none", "--key-bits", "512", "--allow-insecure"], "training diverged at epoch 2"),
    "logreg with one class": (["train", "logreg", "--coordinator", "one_class.csv", "--party", "lin_b.csv",
                               "--party", "lin_b.csv", "--id-column", "id", "--label", "y", "--aligned"],
                              "needs both classes"),
    "a NaN names its file and line": (["train", "linreg", "--active", "nan_a.csv", "--passive", "lin_b.csv",
                                       "--id-column", "id", "--label", "y", "--key-bits", "512", "--allow-insecure"],
                                      "nan_a.csv: line 12: feature 'x' is missing"),
    "a duplicate ID names its lines": (["train", "linreg", "--active", "dup_a.csv", "--passive", "lin_b.csv",
                                        "--id-column", "id", "--label", "y", "--key-bits", "512",
                                        "--allow-insecure"], "dup_a.csv: line 7: duplicate ID 'r3' (first on line 5)"),
    "model-dir under a file": ([*_linreg("--key-bits", "512", "--allow-insecure"), "--model-dir", "afile/models"],
                               "is not a writable directory"),
    "model-dir is a file": ([*_linreg("--key-bits", "512", "--allow-insecure"), "--model-dir", "afile"],
                            "--model-dir afile is a file"),
    "model-dir holds an earlier model": (
        [*_linreg("--key-bits", "512", "--allow-insecure"), "--model-dir", "oldmodel"],
        "--model-dir oldmodel already holds model files (passive-1.npz): pass --overwrite"),
    "one training row": (["train", "linreg", "--active", "two_a.csv", "--passive", "two_b.csv", "--id-column", "id",
                          "--label", "y", "--test-fraction", "0.5", "--key-bits", "512", "--allow-insecure"],
                         "only 1 training row(s) of 2 common rows after the split: too few to train"),
    "out-dir is a file": ([*_align("ok.csv")[:-2], "--out-dir", "afile/sub"], "cannot create the output directory"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_user_error_is_one_clear_line(case: str, files: Path) -> None:
    args, expect = CASES[case]
    proc = subprocess.run([sys.executable, "-m", "vflcrypto", *args], cwd=files, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    assert expect in proc.stderr, proc.stderr[-2000:]
    # nothing written, nothing lost
    assert not list(files.glob("o/*")) and (files / "out" / "stale.aligned.csv").read_text().startswith("id,y,x\nold")
    assert (files / "out" / "ok.aligned.csv").read_text() == "id,v\nb,1\n"
    assert (files / "stale.csv").read_text() == "id,v\nb,1\n"
