"""``vflcrypto predict logreg|poisson|sshelr``: a model directory of ``train ... --model-dir`` on new rows.

Each prediction is checked against references that share no code with the prediction path:
the training run's own predictions (its test probabilities, fitted means and logits, caught
from the run itself; its reported test metrics recomputed by scikit-learn), and a
recomputation with scikit-learn's imputer and scaler fitted on the training rows and the
weights the training run reported. The query files are shuffled and hold rows of their own
(PSI aligns them, as in training). Damaged, foreign or mismatched models and query files are
refused in one line naming the file.
"""

from __future__ import annotations

import csv
import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.impute import SimpleImputer
from sklearn.metrics import accuracy_score, mean_poisson_deviance, roc_auc_score
from sklearn.preprocessing import StandardScaler
from vflcrypto.protocols import logreg as lr
from vflcrypto.protocols import poisson, sshelr
from vflcrypto.protocols._linear import LinearParty, save_parties

from vflcrypto.cli import main
from vflcrypto.data.files import MANIFEST, load_model, save_model, write_csv_atomic
from vflcrypto.errors import ConfigurationError, ModelFileError
from vflcrypto.ml.preprocess import LocalScaling
from vflcrypto.runtime.channel import AuditTap

SMALL_KEYS = ["--key-bits", "512", "--allow-insecure"]


def _write(path: Path, ids: list[str], head: list[str], columns: np.ndarray, order: Any = None) -> str:
    """A CSV of the ID column and ``columns`` (rows in ``order``; NaN written as an empty cell)."""
    order = range(len(ids)) if order is None else order

    def cell(v: float) -> Any:
        return "" if np.isnan(v) else repr(float(v))

    write_csv_atomic(path, ["id", *head], [[ids[i], *(cell(v) for v in columns[i])] for i in order])
    return str(path)


def _query(path: Path, ids: list[str], head: list[str], X: np.ndarray, seed: int) -> str:
    """The rows shuffled, with three rows of IDs no other file has (PSI drops them)."""
    extra = [f"only-{path.stem}-{j}" for j in range(3)]
    rows = np.vstack([X, X[:3] + 1.0])
    return _write(path, [*ids, *extra], head, rows, np.random.default_rng(seed).permutation(len(ids) + 3))


def _read(path: Path) -> dict[str, list[float]]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return {r[0]: [float(v) for v in r[1:]] for r in rows[1:]}


def _spy(monkeypatch: pytest.MonkeyPatch, module: str, name: str = "run_local") -> dict[str, Any]:
    """Keep what the training command's ``name`` returned (the training run itself)."""
    mod = importlib.import_module(module)
    real, caught = getattr(mod, name), {}

    def spy(*args: Any, **kwargs: Any) -> Any:
        caught["args"], caught["kwargs"] = args, kwargs
        caught["result"] = real(*args, **kwargs)
        return caught["result"]

    monkeypatch.setattr(mod, name, spy)
    return caught


def _scaled(X: np.ndarray, train: np.ndarray, *, impute: bool = False) -> np.ndarray:
    """scikit-learn's median imputer and standard scaler fitted on the training rows, applied to every row."""
    if impute:
        X = SimpleImputer(strategy="median").fit(X[train]).transform(X)
    return StandardScaler().fit(X[train]).transform(X)


# --------------------------------------------------------------------------- logistic regression


@pytest.mark.parametrize("mode", ["--secure", "--plain"])
def test_logreg_predictions_are_the_training_runs_and_scikit_learns(
        mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)  # example data, not a secret
    n = 64
    ids = [f"r{i:03d}" for i in range(n)]
    X0, X1 = rng.normal(size=(n, 2)), rng.normal(2.0, 3.0, size=(n, 2))
    X0[rng.choice(n, 6, replace=False), 1] = np.nan  # imputed with the training median, at training and prediction
    y = (X0[:, 0] + 0.4 * X1[:, 1] + rng.normal(size=n) > 0.5).astype(float)
    coord = _write(tmp_path / "y.csv", ids, ["y"], y[:, None])
    parties = [_write(tmp_path / "p0.csv", ids, ["a", "b"], X0), _write(tmp_path / "p1.csv", ids, ["c", "d"], X1)]
    caught = _spy(monkeypatch, "vflcrypto.protocols.logreg.cli")
    model = tmp_path / "model"
    assert main(["train", "logreg", "--coordinator", coord, *(a for p in parties for a in ("--party", p)),
                 "--id-column", "id", "--label", "y", "--aligned", "--test-fraction", "0.25", "--steps", "4", mode,
                 *SMALL_KEYS, "--model-dir", str(model), "--json"]) == 0
    trained = json.loads(capsys.readouterr().out)
    run = caught["result"]
    query = [_query(tmp_path / "q0.csv", ids, ["b", "a"], X0[:, ::-1], 1),  # columns in another order too
             _query(tmp_path / "q1.csv", ids, ["c", "d"], X1, 2)]
    out = tmp_path / "pred.csv"
    assert main(["predict", "logreg", "--coordinator", coord, *(a for q in query for a in ("--party", q)),
                 "--id-column", "id", "--model-dir", str(model), "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == n and summary["query_rows"] == [n, n + 3, n + 3]
    assert summary["mode"] == mode[2:]
    got = _read(out)
    assert sorted(got) == ids and out.read_text().splitlines()[0] == "id,prediction,probability"
    prob = np.asarray([got[i][1] for i in ids])
    assert [got[i][0] for i in ids] == (prob >= 0.5).astype(float).tolist()

    # the training run's own predictions: its test rows (the IDs it did not train on) and its training rows
    train_ids = set(caught["kwargs"]["ids_train"][0])
    train = np.asarray([i in train_ids for i in ids])
    np.testing.assert_allclose(prob[~train], run.active.test_probabilities, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(prob[train], run.active.train_probabilities, rtol=1e-12, atol=1e-15)
    assert trained["test_accuracy"] == pytest.approx(accuracy_score(y[~train], prob[~train] >= 0.5))

    # scikit-learn's imputer and scaler on the training rows, and the weights in the model files
    w = [load_model(model / f"passive-{k}.npz")[1]["weights"] for k in range(2)]
    np.testing.assert_allclose(np.concatenate(w), run.weights, rtol=0, atol=0)
    z = np.hstack([_scaled(X0, train, impute=True), np.ones((n, 1))]) @ w[0] + _scaled(X1, train) @ w[1]
    np.testing.assert_allclose(prob, 1 / (1 + np.exp(-z)), rtol=1e-6, atol=1e-9)  # secure: fixed point, 2^-24


def test_logreg_prediction_reveals_only_the_summed_logits_and_keeps_the_models_mode(tmp_path: Path) -> None:
    """Secure mode: each feature party's logits reach the label holder under pairwise masks that cancel only in
    the sum; the feature parties receive no value of any row. A feature party of a secure model refuses a plain
    prediction (its score would travel in the clear)."""
    rng = np.random.default_rng(3)  # example data, not a secret
    n = 20
    ids = tuple(f"q{i}" for i in range(n))
    Xs = [rng.normal(size=(n, 2)) for _ in range(3)]
    scalings = [LocalScaling(X.mean(axis=0), X.std(axis=0), None, k == 0) for k, X in enumerate(Xs)]
    ws = [rng.normal(size=s.width) for s in scalings]
    names = lr.passive_names(3)

    def models(secure: bool) -> list[LinearParty]:
        active = LinearParty("logreg", "active", "active", (), np.zeros(0), LocalScaling.identity(0),
                             {"secure": secure, "parties": names})
        return [active, *(LinearParty("logreg", nm, "passive", ("u", "v"), w, s, {"secure": True})
                          for nm, w, s in zip(names, ws, scalings, strict=True))]

    from vflcrypto.data.tables import PartyTable

    def block(k: int) -> np.ndarray:  # party k's preprocessed rows (passive-0 holds the intercept)
        Z = (Xs[k] - scalings[k].mean) / scalings[k].scale
        return np.hstack([Z, np.ones((n, 1))]) if k == 0 else Z

    scores = [block(k) @ ws[k] for k in range(3)]
    tables = [PartyTable(ids, (), np.zeros((n, 0))), *(PartyTable(ids, ("u", "v"), X) for X in Xs)]
    tap = AuditTap()
    p, transcript = lr.predict_local(models(True), tables, tap=tap)
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-sum(scores))), rtol=1e-6, atol=1e-9)
    received = {(e.receiver, e.kind) for e in transcript.entries() if e.event == "recv"}
    assert {k for r, k in received if r == "active"} == {"logreg.masked_logits"}
    assert {k for r, k in received if r != "active"} == {"logreg.setup", "logreg.request", "logreg.key_share"}
    for k, nm in enumerate(names):  # one party's masked logits alone are not its scores in fixed point
        (masked,) = tap.received("active", lr.MaskedLogits, sender=nm)
        assert not np.any(masked.values == lr.encode_ring(scores[k]))
    with pytest.raises(ConfigurationError, match=r"passive-\d: its model predicts in secure mode"):
        lr.predict_local(models(False), tables, timeout=5)


# --------------------------------------------------------------------------- Poisson and SSHE-LR


def _pair_files(tmp_path: Path, Xa: np.ndarray, y: np.ndarray, ca: tuple[str, ...], Xp: np.ndarray,
                cp: tuple[str, ...]) -> tuple[list[str], str, str, str, str]:
    """Training files (aligned) and query files (shuffled, rows of their own): ids, a, p, query a, query p."""
    ids = [f"c{i:03d}" for i in range(len(y))]
    a = _write(tmp_path / "a.csv", ids, ["y", *ca], np.column_stack([y, Xa]))
    p = _write(tmp_path / "p.csv", ids, list(cp), Xp)
    return ids, a, p, _query(tmp_path / "qa.csv", ids, list(ca), Xa, 4), _query(tmp_path / "qp.csv", ids, list(cp),
                                                                                Xp, 5)


def _train_and_predict(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], files: tuple[str, ...],
                       flags: list[str]) -> tuple[dict[str, Any], dict[str, list[float]], dict[str, Any]]:
    _, a, p, qa, qp = files
    model = tmp_path / "model"
    assert main(["train", name, "--active", a, "--passive", p, "--id-column", "id", "--label", "y", "--aligned",
                 "--test-fraction", "0.25", *flags, *SMALL_KEYS, "--model-dir", str(model), "--json"]) == 0
    trained = json.loads(capsys.readouterr().out)
    out = tmp_path / "pred.csv"
    assert main(["predict", name, "--active", qa, "--passive", qp, "--id-column", "id", "--model-dir", str(model),
                 "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    return trained, _read(out), summary


def test_poisson_predictions_are_the_training_runs_and_scikit_learns(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    Xa, y, ca, Xp, cp = poisson.example(80)
    files = _pair_files(tmp_path, Xa, y, ca, Xp, cp)
    ids = files[0]
    caught = _spy(monkeypatch, "vflcrypto.protocols.poisson.cli")
    trained, got, summary = _train_and_predict("poisson", tmp_path, capsys, files, ["--epochs", "3"])
    assert sorted(got) == ids and summary["rows"] == 80 and set(summary["bytes_sent"]) == {"alignment", "active",
                                                                                          "passive-0"}
    mu = np.asarray([got[i][0] for i in ids])
    run = caught["result"]
    Xa_tr, y_tr, Xp_tr = caught["args"]
    train = np.isin(Xa[:, 0], Xa_tr[:, 0])
    assert train.sum() == 60 == len(y_tr)
    # the training run's own means on its rows, and its reported test deviance (scikit-learn's on these rows)
    np.testing.assert_allclose(mu[train], poisson.fitted_mean(run, Xa_tr, y_tr, Xp_tr), rtol=1e-12)
    assert trained["test_deviance"] == pytest.approx(mean_poisson_deviance(y[~train], mu[~train]), rel=1e-12)
    # scikit-learn's scaler on the training rows and the weights the training run reported
    wa, wp = trained["active_weights"], trained["passive_weights"]
    eta = (_scaled(Xa, train) @ [wa[c] for c in ca] + wa["(intercept)"]
           + _scaled(Xp, train) @ [wp[c] for c in cp])
    np.testing.assert_allclose(mu, np.exp(eta), rtol=1e-12)


def test_sshelr_predictions_are_the_training_runs_and_scikit_learns(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    Xa, y, ca, Xp, cp = sshelr.example(80)
    files = _pair_files(tmp_path, Xa, y, ca, Xp, cp)
    ids = files[0]
    caught = _spy(monkeypatch, "vflcrypto.protocols.sshelr.cli")
    trained, got, _ = _train_and_predict("sshelr", tmp_path, capsys, files, ["--epochs", "2"])
    assert sorted(got) == ids
    pred, prob = np.asarray([got[i][0] for i in ids]), np.asarray([got[i][1] for i in ids])
    run = caught["result"]
    Xa_tr, y_tr, Xp_tr = caught["args"]
    train = np.isin(Xa[:, 0], Xa_tr[:, 0])
    # the training run's own logits on its rows; its reported test metrics are scikit-learn's on these rows
    z_train = sshelr.logits(run, Xa_tr, y_tr, Xp_tr)
    np.testing.assert_allclose(prob[train], 1 / (1 + np.exp(-z_train)), rtol=1e-12)
    assert trained["test_auc"] == pytest.approx(roc_auc_score(y[~train], prob[~train]), rel=1e-12)
    assert trained["test_accuracy"] == pytest.approx(accuracy_score(y[~train], pred[~train]))

    # scikit-learn's scaler on the training rows, the protocol's 20-bit grid, the reported weights
    def grid(Z: np.ndarray) -> np.ndarray:
        return np.rint(Z * 2.0 ** 20) / 2.0 ** 20

    wa, wp = trained["active_weights"], trained["passive_weights"]
    z = (grid(_scaled(Xa, train)) @ [wa[c] for c in ca] + wa["(intercept)"]
         + grid(_scaled(Xp, train)) @ [wp[c] for c in cp])
    np.testing.assert_allclose(prob, 1 / (1 + np.exp(-z)), rtol=1e-12)
    assert pred.tolist() == (z > 0).astype(float).tolist()


# --------------------------------------------------------------------------- the model and the query files


def _models(tmp_path: Path) -> dict[str, Path]:
    """Small saved models of each protocol (weights given, not trained): logreg with two feature parties."""
    dirs = {}
    for name in ("logreg", "poisson", "sshelr"):
        if name == "logreg":
            parties = [LinearParty(name, "active", "active", (), np.zeros(0), LocalScaling.identity(0),
                                   {"secure": False, "parties": ["passive-0", "passive-1"]}),
                       LinearParty(name, "passive-0", "passive", ("a", "b"), np.ones(3),
                                   LocalScaling(np.zeros(2), np.ones(2), np.zeros(2), True), {"secure": False}),
                       LinearParty(name, "passive-1", "passive", ("c",), np.ones(1), LocalScaling.identity(1),
                                   {"secure": False})]
        else:
            parties = [LinearParty(name, "active", "active", ("a",), np.ones(2), LocalScaling.identity(1,
                                                                                                    intercept=True)),
                       LinearParty(name, "passive-0", "passive", ("c",), np.ones(1), LocalScaling.identity(1))]
        save_parties(name, parties, tmp_path / name)
        dirs[name] = tmp_path / name
    return dirs


def test_a_damaged_foreign_or_mismatched_model_or_query_is_refused_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dirs = _models(tmp_path)
    ids = [f"r{i}" for i in range(12)]
    X = np.arange(24.0).reshape(12, 2)
    ya = _write(tmp_path / "ya.csv", ids, ["y", "a"], X)
    pab = _write(tmp_path / "pab.csv", ids, ["a", "b"], X)
    pc = _write(tmp_path / "pc.csv", ids, ["c"], X[:, :1])
    out = tmp_path / "pred.csv"

    def fails(name: str, *args: str) -> str:
        capsys.readouterr()
        assert main(["predict", name, "--id-column", "id", "--out", str(out), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and not out.exists(), err
        return err[0]

    logreg = ["--coordinator", ya, "--party", pab, "--party", pc, "--model-dir", str(dirs["logreg"])]
    pair = ["--active", ya, "--passive", pc]
    assert main(["predict", "logreg", "--id-column", "id", "--out", str(out), *logreg]) == 0  # the intact models
    assert main(["predict", "poisson", "--id-column", "id", "--out", str(out), *pair, "--model-dir",
                 str(dirs["poisson"])]) == 0
    out.unlink()
    # a wrong number of party files
    assert "has 3 parties" in fails("logreg", *logreg[:4], "--model-dir", str(dirs["logreg"]))
    assert "has 2 parties" in fails("sshelr", *pair, "--passive", pc, "--model-dir", str(dirs["sshelr"]))
    # another protocol's model directory
    assert "holds a sshelr model, not a poisson model" in fails("poisson", *pair, "--model-dir", str(dirs["sshelr"]))
    # a query file without one of the model's columns, or with a missing value where the model cannot impute
    line = fails("logreg", *logreg[:2], "--party", pc, *logreg[4:])
    assert "pc.csv: missing feature columns ['a', 'b']" in line
    gap = tmp_path / "gap.csv"
    gap.write_text("id,c\n" + "".join(f"r{i},{'' if i == 4 else i}\n" for i in range(12)))
    line = fails("sshelr", "--active", ya, "--passive", str(gap), "--model-dir", str(dirs["sshelr"]))
    assert "gap.csv" in line and "'c'" in line and "line 6" in line
    # a bit-flipped and a truncated party file: the manifest's digest names it
    f = dirs["poisson"] / "passive-0.npz"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 1
    f.write_bytes(bytes(data))
    assert f"{f} does not match its SHA-256" in fails("poisson", *pair, "--model-dir", str(dirs["poisson"]))
    f = dirs["logreg"] / "passive-1.npz"
    f.write_bytes(f.read_bytes()[:100])
    assert f"{f} does not match its SHA-256" in fails("logreg", *logreg)


def test_a_party_file_of_another_protocol_or_inconsistent_is_one_model_file_error(tmp_path: Path) -> None:
    """Loading a party file on its own (no manifest beside it) checks what it holds."""
    model = LinearParty("poisson", "passive-0", "passive", ("c", "d"), np.ones(2), LocalScaling.identity(2))
    model.save(tmp_path / "p.npz")
    back = LinearParty.load(tmp_path / "p.npz", "poisson")
    assert back.columns == ("c", "d") and back.weights.tolist() == [1.0, 1.0]
    with pytest.raises(ModelFileError, match=r"p\.npz holds a poisson model, not a sshelr model"):
        LinearParty.load(tmp_path / "p.npz", "sshelr")
    meta, arrays = load_model(tmp_path / "p.npz")
    save_model(tmp_path / "short.npz", meta, {**arrays, "weights": np.ones(1)})  # a weight short
    with pytest.raises(ModelFileError, match=r"short\.npz is not a consistent poisson party model"):
        LinearParty.load(tmp_path / "short.npz", "poisson")
    (tmp_path / "text.npz").write_text("weights: 1, 1\n")
    with pytest.raises(ModelFileError, match=r"text\.npz is a text file"):
        LinearParty.load(tmp_path / "text.npz", "poisson")
    assert not (tmp_path / MANIFEST).exists()
