"""``vflcrypto predict hfl``: a client applies the global model of a horizontal run to its own rows, locally."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from scipy.special import softmax

from vflcrypto.cli import main
from vflcrypto.data.files import load_model


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hfl")
    assert main(["examples", str(d / "ex")]) == 0
    clients = [str(d / "ex" / "hfl" / f"client{k}.csv") for k in range(3)]
    assert main(["train", "fedavg", *(a for c in clients for a in ("--client", c)), "--label", "digit",
                 "--rounds", "3", "--model-dir", str(d / "model")]) == 0
    return d


def test_predictions_are_the_global_softmax_model_on_the_clients_rows(trained: Path) -> None:
    out = trained / "pred.csv"
    data = trained / "ex" / "hfl" / "client1.csv"
    assert main(["predict", "hfl", "--model-dir", str(trained / "model"), "--data", str(data), "--out", str(out)]) == 0
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(data, newline="") as f:
        given = list(csv.DictReader(f))
    meta, arrays = load_model(trained / "model" / "server.npz")
    W = arrays["w"].reshape(65, 10)
    X = np.array([[float(r[c]) for c in meta["columns"]] for r in given])
    p = softmax(X @ W[:-1] + W[-1], axis=1)  # scipy's softmax, the reference
    assert [r["row"] for r in rows] == [str(i + 1) for i in range(len(given))]
    np.testing.assert_array_equal([int(r["prediction"]) for r in rows], p.argmax(axis=1))
    np.testing.assert_allclose([float(r["probability"]) for r in rows], p.max(axis=1), rtol=1e-12)
    accuracy = np.mean([int(r["prediction"]) == int(g["digit"]) for r, g in zip(rows, given, strict=True)])
    assert accuracy > 0.5  # a trained model, not chance (0.1)


def test_a_foreign_or_damaged_model_and_missing_columns_are_refused_in_one_line(
        trained: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = trained / "model"
    bank = trained / "ex" / "bank.csv"
    assert main(["predict", "hfl", "--model-dir", str(model), "--data", str(bank), "--out",
                 str(trained / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bank.csv: missing feature columns" in err, err
    broken = trained / "broken"
    broken.mkdir()
    for f in model.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "server.npz").write_bytes((broken / "server.npz").read_bytes()[:100])
    assert main(["predict", "hfl", "--model-dir", str(broken), "--data", str(trained / "ex" / "hfl" / "client0.csv"),
                 "--out", str(trained / "y.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ModelFileError" in err and "server.npz" in err, err
    assert not (trained / "x.csv").exists() and not (trained / "y.csv").exists()
