"""``vflcrypto train logreg`` on CSV files: JSON output, alignment, and clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vflcrypto.cli import main
from vflcrypto.data.files import write_csv_atomic


def _write(tmp: Path, n: int = 40, shuffle: bool = False) -> list[str]:
    rng = np.random.default_rng(7)
    ids = [f"id{i:03d}" for i in range(n)]
    X = rng.normal(size=(n, 4))
    y = (X @ np.array([1.0, -1.0, 0.5, 0.0]) + rng.normal(size=n) > 0).astype(int)
    specs = {"y.csv": [("label", y)], "a.csv": [("f0", X[:, 0]), ("f1", X[:, 1])],
             "b.csv": [("f2", X[:, 2]), ("f3", X[:, 3])]}
    paths = []
    for k, (name, cols) in enumerate(specs.items()):
        order = list(range(n))
        if shuffle:
            order = list(np.random.default_rng(k).permutation(n))[: n - k]
        write_csv_atomic(tmp / name, ["id", *(c for c, _ in cols)],
                         ([ids[i], *(v[i] for _, v in cols)] for i in order))
        paths.append(str(tmp / name))
    return paths


def _args(paths: list[str], *extra: str) -> list[str]:
    return ["train", "logreg", "--coordinator", paths[0], "--party", paths[1], "--party", paths[2],
            "--id-column", "id", "--label", "label", *extra]


def test_plain_aligned_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _write(tmp_path)
    assert main(_args(paths, "--plain", "--aligned", "--steps", "5", "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"train_loss", "test_loss", "test_accuracy", "steps", "seconds", "bytes_sent"}
    assert out["steps"] == 5 and 0 < out["train_loss"] < np.log(2)
    assert set(out["bytes_sent"]) == {"coordinator", "passive-0", "passive-1"}


def test_secure_matches_plain_and_psi_alignment(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    paths = _write(tmp_path)
    main(_args(paths, "--plain", "--aligned", "--steps", "3", "--json"))
    plain = json.loads(capsys.readouterr().out)
    main(_args(paths, "--secure", "--aligned", "--steps", "3", "--json", "--key-bits", "512",
               "--allow-insecure-key"))
    secure = json.loads(capsys.readouterr().out)
    assert secure["train_loss"] == pytest.approx(plain["train_loss"], abs=1e-7)
    shuffled = _write(tmp_path / "u", shuffle=True)
    assert main(_args(shuffled, "--plain", "--steps", "3", "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    common = set.intersection(*({line.split(",")[0] for line in Path(p).read_text().split()[1:]}
                                for p in shuffled))
    assert out["rows"]["train"] + out["rows"]["test"] == len(common) < 40
    # ECDH PSI: every party sends each of its IDs (40 + 39 + 38) at least once as a 32-byte blinded point
    n_ids = sum(len(Path(p).read_text().split()) - 1 for p in shuffled)
    assert n_ids == 117 and out["alignment_bytes"] >= 32 * n_ids, out["alignment_bytes"]


def test_misaligned_ids_with_aligned_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _write(tmp_path, shuffle=True)
    assert main(_args(paths, "--plain", "--aligned", "--steps", "1")) == 2
    err = capsys.readouterr().err
    assert "InputDataError" in err and "not aligned" in err


def test_missing_label_and_small_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _write(tmp_path)
    args = _args(paths, "--aligned")
    args[args.index("label")] = "nope"
    assert main(args) == 2
    assert "no label column" in capsys.readouterr().err
    assert main(_args(paths, "--aligned", "--key-bits", "512")) == 2
    assert "InsecureParameterError" in capsys.readouterr().err
