"""``vflcrypto predict NAME``: a saved model directory applied to new rows gives the training run's own
predictions on the same rows (linreg, SecureBoost, split, one-shot, few-shot, prototype VFL), after a PSI
alignment of shuffled files; the manifest is checked before any message."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vflcrypto.protocols import linreg as lr
from vflcrypto.protocols import secureboost as sb

from vflcrypto.cli import main
from vflcrypto.data.files import MANIFEST, write_csv_atomic, write_model_dir

SMALL_KEYS = ["--key-bits", "512", "--allow-insecure"]


def _write(path: Path, ids: Any, columns: list[str], X: np.ndarray, *, order: Any = None,
           label: tuple[str, Any] | None = None) -> str:
    """A party's CSV (rows in ``order``; ``label`` = (name, values) as the second column)."""
    order = np.arange(len(ids)) if order is None else order
    head = ["id", *([label[0]] if label else []), *columns]
    write_csv_atomic(path, head, [[ids[i], *([label[1][i]] if label else []), *np.asarray(X)[i].tolist()]
                                  for i in order])
    return str(path)


def _read(path: Path) -> dict[str, list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return {r[0]: r[1:] for r in rows[1:]}


def _predict(name: str, *args: str, capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    capsys.readouterr()
    out = Path(args[args.index("--out") + 1])
    code = main(["predict", name, *args])
    assert code == 0, capsys.readouterr().err
    return _read(out)


# --------------------------------------------------------------------------- linear and tree models


def test_linreg_predictions_are_the_training_runs_on_the_same_rows(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    active, passives = lr.synthetic_split(n_rows=40, p_active=2, p_passive=(1, 2), seed=7)
    rng = np.random.default_rng(1)  # test data layout, not a secret
    files = [_write(tmp_path / "a.csv", active.ids, list(active.columns), active.X, label=("y", active.label))]
    for k, t in enumerate(passives):  # shuffled: the prediction aligns them by PSI, like training
        files.append(_write(tmp_path / f"p{k}.csv", t.ids, list(t.columns), t.X, order=rng.permutation(40)))
    model = tmp_path / "model"
    flags = ["--active", files[0], "--passive", files[1], "--passive", files[2], "--id-column", "id"]
    assert main(["train", "linreg", *flags, "--label", "y", *SMALL_KEYS, "--epochs", "3", "--model-dir", str(model),
                 "--json"]) == 0
    trained = json.loads(capsys.readouterr().out)
    got = _predict("linreg", *flags, "--model-dir", str(model), "--out", str(tmp_path / "pred.csv"), *SMALL_KEYS,
                   capsys=capsys)
    assert sorted(got) == sorted(active.ids)
    pred = np.asarray([float(got[i][0]) for i in active.ids])
    # the training run's own secure predictions on these rows had this RMSE
    y = np.asarray(active.label, np.float64)
    assert np.sqrt(np.mean((pred - y) ** 2)) == pytest.approx(trained["train_rmse"], rel=1e-9)
    # and each prediction is the plaintext sum of the parties' scores (fixed point: 2^-32 per party)
    models = [lr.PartyModel.load(model / f"{n}.npz") for n in ("active", "passive-0", "passive-1")]
    np.testing.assert_allclose(pred, lr.predict_plain(models, [active, *passives]), atol=1e-6)


@pytest.mark.parametrize("objective", ["binary", "regression"])
def test_secureboost_predictions_are_the_training_runs_on_the_same_rows(
        objective: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Xa, y, _, Xp, _ = sb.example(60, seed=3)
    if objective == "regression":
        y = Xa[:, 0] + 2 * Xp[:, 1]
    ids = [f"r{i:03d}" for i in range(60)]
    ca, cp = [f"a{j}" for j in range(Xa.shape[1])], [f"p{j}" for j in range(Xp.shape[1])]
    run = sb.run_local(Xa, y, [Xp], params=sb.BoostParams(n_trees=2, max_depth=3, objective=objective),
                       plaintext=objective == "regression", key_bits=512, allow_insecure=True, ids=ids,
                       active_columns=ca, passive_columns=[cp])
    model = tmp_path / "model"
    write_model_dir(model, "secureboost", {"active.npz": run.active.model.save,
                                           "passive-0.npz": run.passive["passive-0"].model.save})
    a = _write(tmp_path / "a.csv", ids, ca, Xa)
    p = _write(tmp_path / "p.csv", ids, cp, Xp, order=np.random.default_rng(2).permutation(60))
    got = _predict("secureboost", "--active", a, "--passive", p, "--id-column", "id", "--model-dir", str(model),
                   "--out", str(tmp_path / "pred.csv"), capsys=capsys)
    train = np.asarray(run.active.train_predictions())
    column = 1 if objective == "binary" else 0  # binary: prediction (class), probability
    np.testing.assert_allclose([float(got[i][column]) for i in ids], train, rtol=1e-12, atol=1e-12)
    if objective == "binary":
        assert [int(got[i][0]) for i in ids] == (train >= 0.5).astype(int).tolist()


# --------------------------------------------------------------------------- representation models


def _rep_files(tmp_path: Path, parties: list[Any], extra: int = 5) -> tuple[list[str], list[str], str]:
    """The held-out rows as files: the server's IDs and each party's columns (shuffled, with rows of its own)."""
    n = len(parties[0].X_test)
    ids = [f"t{i:03d}" for i in range(n)]
    rng = np.random.default_rng(5)  # test data layout, not a secret
    server = str(tmp_path / "server.csv")
    write_csv_atomic(server, ["id"], [[i] for i in ids])
    files = []
    for k, p in enumerate(parties):
        X = np.vstack([p.X_test, p.X_test[:extra] + 1.0])
        own = [*ids, *(f"only{k}-{j}" for j in range(extra))]
        files.append(_write(tmp_path / f"party{k}.csv", own, [f"c{j}" for j in range(X.shape[1])], X,
                            order=rng.permutation(len(own))))
    return ids, files, server


@pytest.mark.parametrize("name", ["split", "oneshot", "fewshot", "protovfl"])
def test_representation_predictions_are_the_training_runs_test_predictions(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from vflcrypto.protocols import get
    from vflcrypto.protocols._repvfl import digits_example
    from vflcrypto.protocols._repvfl_cli import save_rep_model

    spec = get(name)
    if name == "protovfl":
        from vflcrypto.protocols import protovfl

        server, parties = protovfl.digits_example(12, pools=(60, 200, 2), seed=1)
        cfg: Any = protovfl.ProtoConfig(rounds=1, local_epochs=2, head_epochs=20)
    else:
        server, parties = digits_example(30, seed=1)
        cfg = spec.config(**({"epochs": 2} if name == "split" else {"ssl_epochs": 3, "head_epochs": 10}))
    run = spec.run_local(server, parties, config=cfg)
    model = tmp_path / "model"
    columns = [tuple(f"c{j}" for j in range(p.X_test.shape[1])) for p in parties]
    save_rep_model(str(model), name, run.server.head, [r.extractor for r in run.parties], columns,
                   head_prefix="fusion_" if name == "protovfl" else "head_")
    ids, files, server_file = _rep_files(tmp_path, parties)
    args = ["--server", server_file, *(a for f in files for a in ("--party", f)), "--id-column", "id",
            "--model-dir", str(model), "--out", str(tmp_path / "pred.csv")]
    got = _predict(name, *args, capsys=capsys)
    assert sorted(got) == ids  # the IDs on every file, nothing else
    assert [int(got[i][0]) for i in ids] == np.asarray(run.server.test_predictions).tolist()


# --------------------------------------------------------------------------- the model is checked first


def test_prediction_refuses_a_model_of_another_shape_protocol_or_a_damaged_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    active, passives = lr.synthetic_split(n_rows=12, p_active=1, p_passive=(1,), seed=3)
    a = _write(tmp_path / "a.csv", active.ids, list(active.columns), active.X)
    p = _write(tmp_path / "p.csv", passives[0].ids, list(passives[0].columns), passives[0].X)
    models = [lr.PartyModel(n, n, tuple(t.columns), np.ones(1), lr.fit_preprocessing(t.X))
              for n, t in (("active", active), ("passive-0", passives[0]))]
    d = tmp_path / "lin"
    lr.save_models(models, d)
    out = tmp_path / "pred.csv"

    def fails(name: str, *args: str) -> str:
        capsys.readouterr()
        assert main(["predict", name, "--id-column", "id", "--out", str(out), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and not out.exists(), err
        return err[0]

    assert "2 parties" in fails("linreg", "--active", a, "--passive", p, "--passive", p, "--model-dir", str(d))
    assert "holds a linreg model, not a secureboost model" in fails("secureboost", "--active", a, "--passive", p,
                                                                   "--model-dir", str(d))
    assert "is the input" in fails("linreg", "--active", a, "--passive", p, "--model-dir", str(d), "--out", a)
    bad = tmp_path / "bad.csv"
    _write(bad, passives[0].ids, ["other"], passives[0].X)
    assert "missing feature columns ['a0_0']" in fails("linreg", "--active", a, "--passive", str(bad), "--model-dir",
                                                       str(d))
    data = (d / "passive-0.npz").read_bytes()
    (d / "passive-0.npz").write_bytes(data[: len(data) // 2])
    assert "SHA-256" in fails("linreg", "--active", a, "--passive", p, "--model-dir", str(d))
    (d / MANIFEST).unlink()
    assert "no vflcrypto manifest.json" in fails("linreg", "--active", a, "--passive", p, "--model-dir", str(d))


def test_party_tables_keep_their_order_when_already_aligned(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``--aligned``: no PSI; the rows are predicted in the files' own order."""
    active, passives = lr.synthetic_split(n_rows=10, p_active=1, p_passive=(1,), seed=4)
    models = [lr.PartyModel(n, n, tuple(t.columns), np.asarray([0.5]), lr.fit_preprocessing(t.X))
              for n, t in (("active", active), ("passive-0", passives[0]))]
    lr.save_models(models, tmp_path / "m")
    a = _write(tmp_path / "a.csv", active.ids, list(active.columns), active.X)
    p = _write(tmp_path / "p.csv", passives[0].ids, list(passives[0].columns), passives[0].X)
    out = tmp_path / "pred.csv"
    assert main(["predict", "linreg", "--active", a, "--passive", p, "--id-column", "id", "--aligned",
                 "--model-dir", str(tmp_path / "m"), "--out", str(out), *SMALL_KEYS, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 10 and "alignment" not in summary["bytes_sent"]
    assert [r.split(",")[0] for r in out.read_text().splitlines()[1:]] == list(active.ids)
    expected = lr.predict_plain(models, [active, passives[0]])
    np.testing.assert_allclose([float(r.split(",")[1]) for r in out.read_text().splitlines()[1:]], expected,
                               atol=1e-6)


# --------------------------------------------------------------------------- one process per party


def test_party_predict_linreg_over_the_network(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``vflcrypto party ... predict linreg``: the active party, a passive party and the coordinator (here
    threads of this process, over real mutual-TLS gRPC links), each with only its own model file; the rows
    are aligned by PSI over the network; the active party's predictions equal the plaintext reference."""
    import socket
    import threading

    from vflcrypto.runtime.certs import write_dev_pki
    from vflcrypto.runtime.partyconfig import render_config_toml

    active, passives = lr.synthetic_split(n_rows=30, p_active=2, p_passive=(2,), seed=9)
    models = [lr.PartyModel(n, r, tuple(t.columns), np.asarray([0.5, -1.0]), lr.fit_preprocessing(t.X),
                            label_offset=3.0, label_scale=2.0 if r == "active" else 1.0)
              for n, r, t in (("active", "active", active), ("passive-0", "passive", passives[0]))]
    lr.save_models(models, tmp_path / "models")
    a = _write(tmp_path / "a.csv", active.ids, list(active.columns), active.X, order=np.arange(25))  # 25 rows
    p = _write(tmp_path / "p.csv", passives[0].ids, list(passives[0].columns), passives[0].X,
               order=np.random.default_rng(3).permutation(30))
    names = ["active", "passive-0", "coordinator"]
    write_dev_pki(tmp_path / "pki", names)

    def port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    cfg = tmp_path / "parties.toml"
    cfg.write_text(render_config_toml({n: (n.split("-")[0], f"127.0.0.1:{port()}") for n in names},
                                      ca=str(tmp_path / "pki" / "ca.pem"),
                                      certs={n: (str(tmp_path / "pki" / f"{n}.pem"), str(tmp_path / "pki" / f"{n}.key"))
                                             for n in names},
                                      network={"connect_timeout": 10.0, "timeout": 20.0, "linger": 1.0}))
    task = {"active": ["--data", a, "--id-column", "id", "--model", str(tmp_path / "models" / "active.npz")],
            "passive-0": ["--data", p, "--id-column", "id", "--model", str(tmp_path / "models" / "passive-0.npz")],
            "coordinator": []}
    codes: dict[str, int] = {}

    def run(name: str) -> None:
        codes[name] = main(["party", "--config", str(cfg), "--as", name, "--json", "predict", "linreg", *task[name],
                            "--out", str(tmp_path / f"{name}.out"), *SMALL_KEYS])

    threads = [threading.Thread(target=run, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert codes == {n: 0 for n in names}, (codes, capsys.readouterr().err)
    got = _read(tmp_path / "active.out")
    assert sorted(got) == sorted(active.ids[:25])  # only the IDs on both files
    expected = dict(zip(active.ids, lr.predict_plain(models, [active, passives[0]]), strict=True))
    np.testing.assert_allclose([float(got[i][0]) for i in sorted(got)], [expected[i] for i in sorted(got)],
                               atol=1e-6)
    record = json.loads((tmp_path / "active.out.run.json").read_text())
    assert record["status"] == "complete" and record["task"] == "predict-linreg"
    assert json.loads((tmp_path / "passive-0.out").read_text())["rows"] == 25
