"""``vflcrypto party ... predict logreg|poisson|sshelr|secureboost``: one process per party over mutual-TLS gRPC.

Each test trains in-process with ``--model-dir`` on a small example, then runs every party of the
prediction as its own process (``python -m vflcrypto party``) on shuffled query files that hold
rows of their own (the parties align them by PSI, as in training), each party with only its own
model file and its own rows. The label holder's predictions must equal those of the in-process
``vflcrypto predict NAME`` on the same files, and the messages the parties exchange must be the
protocol's declared prediction messages (those of the in-process prediction). A party given
another party's model file is refused in one line naming the file.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_party_processes import finish, make_config, party, pki  # noqa: F401  (pki: the module's fixture)
from vflcrypto.protocols import poisson, sshelr
from vflcrypto.protocols import secureboost as sb

from vflcrypto.cli import main
from vflcrypto.data.files import write_csv_atomic

SMALL_KEYS = ["--key-bits", "512", "--allow-insecure"]


def _write(path: Path, ids: list[str], head: list[str], columns: np.ndarray, order: Any = None) -> str:
    order = range(len(ids)) if order is None else order
    write_csv_atomic(path, ["id", *head], [[ids[i], *(repr(float(v)) for v in columns[i])] for i in order])
    return str(path)


def _query(path: Path, ids: list[str], head: list[str], X: np.ndarray, seed: int) -> str:
    """The rows shuffled, with three rows of IDs no other file has (PSI drops them)."""
    extra = [f"only-{path.stem}-{j}" for j in range(3)]
    rng = np.random.default_rng(seed)  # test data layout, not a secret
    return _write(path, [*ids, *extra], head, np.vstack([X, X[:3] + 1.0]), rng.permutation(len(ids) + 3))


def _read(path: Path) -> dict[str, list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return {r[0]: r[1:] for r in rows[1:]}


def _in_process(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], *files: str) -> dict[str, list[str]]:
    """``vflcrypto predict NAME`` with every party in this process: the reference."""
    out = tmp_path / "reference.csv"
    capsys.readouterr()
    assert main(["predict", name, *files, "--id-column", "id", "--model-dir", str(tmp_path / "model"),
                 "--out", str(out)]) == 0, capsys.readouterr().err
    return _read(out)


def _run(cfg: Path, name: str, tmp_path: Path, tasks: dict[str, list[str]]) -> dict[str, tuple[int, Any, str]]:
    """Every party's ``party ... predict NAME`` as its own process; the label holder writes ``active.csv``."""
    procs = {n: party(cfg, n, "predict", name, *t, "--out", str(tmp_path / (f"{n}.csv" if n == "active" else
                                                                           f"{n}.json")))
             for n, t in tasks.items()}
    return finish(procs, timeout=60)


def _own(query: str, model: Path, owner: str) -> list[str]:
    return ["--data", query, "--id-column", "id", "--model", str(model / f"{owner}.npz")]


def _check(name: str, tmp_path: Path, res: dict[str, tuple[int, Any, str]], reference: dict[str, list[str]],
           kinds: set[str], *, exact: bool = True) -> None:
    """Every party finished; the label holder's file is the reference; only ``kinds`` of the protocol were sent."""
    assert {n: r[0] for n, r in res.items()} == {n: 0 for n in res}, {n: r[2][-2000:] for n, r in res.items()}
    got = _read(tmp_path / "active.csv")
    assert sorted(got) == sorted(reference) and len(got) == 40  # only the IDs on every file
    if exact:
        assert got == reference
    else:
        np.testing.assert_allclose([[float(v) for v in got[i]] for i in sorted(got)],
                                   [[float(v) for v in reference[i]] for i in sorted(got)], rtol=0, atol=1e-9)
    sent = {e["kind"] for _, rec, _ in res.values() for e in rec["transcript"]
            if e["event"] == "send" and e["kind"].startswith(f"{name}.")}
    assert sent == kinds
    assert all(rec["task"] == f"predict-{name}" and rec["status"] == "complete" for _, rec, _ in res.values())


def _refused(cfg: Path, name: str, tmp_path: Path, tasks: dict[str, list[str]], wrong: str, owner: str) -> None:
    """``wrong`` given ``owner``'s model file: refused in one line naming the file; no party writes an output."""
    for p in tmp_path.glob("active.csv*"):
        p.unlink()
    res = _run(cfg, name, tmp_path, tasks)
    code, _, err = res[wrong]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0 and len(lines) == 1, err
    assert f"{owner}.npz is the model of" in lines[0] and f"not of {wrong}" in lines[0], lines[0]
    assert all(r[0] != 0 for r in res.values()) and not (tmp_path / "active.csv").exists()


# --------------------------------------------------------------------------- logistic regression


@pytest.mark.parametrize("mode", ["--secure", "--plain"])
def test_party_predict_logreg_equals_in_process(mode: str, tmp_path: Path, pki: Path,  # noqa: F811
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Two feature parties in the model's mode: secure, pairwise-masked logits (the masks agreed with the pinned
    identity keys); plain, each party's logits."""
    rng = np.random.default_rng(11)  # example data, not a secret
    n = 40
    ids = [f"r{i:03d}" for i in range(n)]
    X0, X1 = rng.normal(size=(n, 2)), rng.normal(2.0, 3.0, size=(n, 2))
    y = (X0[:, 0] + 0.4 * X1[:, 1] + rng.normal(size=n) > 0.5).astype(float)
    coord = _write(tmp_path / "y.csv", ids, ["y"], y[:, None])
    parties = [_write(tmp_path / "p0.csv", ids, ["a", "b"], X0), _write(tmp_path / "p1.csv", ids, ["c", "d"], X1)]
    model = tmp_path / "model"
    assert main(["train", "logreg", "--coordinator", coord, *(a for p in parties for a in ("--party", p)),
                 "--id-column", "id", "--label", "y", "--aligned", "--steps", "3", mode, *SMALL_KEYS,
                 "--model-dir", str(model), "--json"]) == 0
    qy = _query(tmp_path / "qy.csv", ids, ["y"], y[:, None], 0)
    q = [_query(tmp_path / "q0.csv", ids, ["b", "a"], X0[:, ::-1], 1), _query(tmp_path / "q1.csv", ids, ["c", "d"],
                                                                               X1, 2)]
    reference = _in_process("logreg", tmp_path, capsys, "--coordinator", qy, "--party", q[0], "--party", q[1])
    names = ["active", "passive-0", "passive-1"]
    secure = mode == "--secure"
    cfg = make_config(tmp_path, pki, names, identities=secure)
    tasks = {"active": _own(qy, model, "active"), "passive-0": _own(q[0], model, "passive-0"),
             "passive-1": _own(q[1], model, "passive-1")}
    res = _run(cfg, "logreg", tmp_path, tasks)
    logits = "logreg.masked_logits" if secure else "logreg.logits"
    _check("logreg", tmp_path, res, reference, {"logreg.setup", "logreg.request", logits,
                                                *(["logreg.key_share"] if secure else [])})
    received = {e["kind"] for e in res["active"][1]["transcript"] if e["event"] == "recv"
                and e["kind"].startswith("logreg.")}
    assert received == {logits}  # secure: never a party's logits in the clear
    if secure:
        return  # the refusal once (plain), keeping each test short on a shared machine
    _refused(cfg, "logreg", tmp_path, {**tasks, "passive-0": _own(q[0], model, "passive-1")}, "passive-0",
             "passive-1")


# --------------------------------------------------------------------------- Poisson and SSHE-LR


def _pair(name: str, tmp_path: Path, flags: list[str]) -> tuple[Path, str, str]:
    """Train ``name`` in-process on 40 aligned rows; the shuffled query files of both parties."""
    Xa, y, ca, Xp, cp = (poisson if name == "poisson" else sshelr).example(40)
    ids = [f"c{i:03d}" for i in range(len(y))]
    a = _write(tmp_path / "a.csv", ids, ["y", *ca], np.column_stack([y, Xa]))
    p = _write(tmp_path / "p.csv", ids, list(cp), Xp)
    model = tmp_path / "model"
    assert main(["train", name, "--active", a, "--passive", p, "--id-column", "id", "--label", "y", "--aligned",
                 *flags, *SMALL_KEYS, "--model-dir", str(model), "--json"]) == 0
    return model, _query(tmp_path / "qa.csv", ids, list(ca), Xa, 4), _query(tmp_path / "qp.csv", ids, list(cp), Xp, 5)


def test_party_predict_poisson_equals_in_process(tmp_path: Path, pki: Path,  # noqa: F811
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The configuration of training (with its coordinator, which takes no part in a prediction)."""
    model, qa, qp = _pair("poisson", tmp_path, ["--epochs", "2"])
    reference = _in_process("poisson", tmp_path, capsys, "--active", qa, "--passive", qp)
    cfg = make_config(tmp_path, pki, ["active", "passive-0", "coordinator"])
    tasks = {"active": _own(qa, model, "active"), "passive-0": _own(qp, model, "passive-0"), "coordinator": []}
    res = _run(cfg, "poisson", tmp_path, tasks)
    _check("poisson", tmp_path, res, reference, {"poisson.predict_plan", "poisson.predict_score"})
    assert json.loads((tmp_path / "passive-0.json").read_text())["rows"] == 40
    _refused(cfg, "poisson", tmp_path, {**tasks, "active": _own(qa, model, "passive-0")}, "active", "passive-0")


def test_party_predict_sshelr_equals_in_process(tmp_path: Path, pki: Path,  # noqa: F811
                                                capsys: pytest.CaptureFixture[str]) -> None:
    model, qa, qp = _pair("sshelr", tmp_path, ["--epochs", "2"])
    reference = _in_process("sshelr", tmp_path, capsys, "--active", qa, "--passive", qp)
    cfg = make_config(tmp_path, pki, ["active", "passive-0"])
    tasks = {"active": _own(qa, model, "active"), "passive-0": _own(qp, model, "passive-0")}
    res = _run(cfg, "sshelr", tmp_path, tasks)
    _check("sshelr", tmp_path, res, reference, {"sshelr.predict_plan", "sshelr.predict_score"})
    _refused(cfg, "sshelr", tmp_path, {**tasks, "passive-0": _own(qp, model, "active")}, "passive-0", "active")


# --------------------------------------------------------------------------- SecureBoost


def test_party_predict_secureboost_equals_in_process(tmp_path: Path, pki: Path,  # noqa: F811
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    Xa, y, ca, Xp, cp = sb.example(40, seed=3)
    ids = [f"s{i:03d}" for i in range(40)]
    a = _write(tmp_path / "a.csv", ids, ["y", *ca], np.column_stack([y, Xa]))
    p = _write(tmp_path / "p.csv", ids, list(cp), Xp)
    model = tmp_path / "model"
    assert main(["train", "secureboost", "--active", a, "--passive", p, "--id-column", "id", "--label", "y",
                 "--aligned", "--trees", "2", "--depth", "3", "--no-first-tree-active-only", *SMALL_KEYS,
                 "--model-dir", str(model), "--json"]) == 0
    qa = _query(tmp_path / "qa.csv", ids, list(ca), Xa, 6)
    qp = _query(tmp_path / "qp.csv", ids, list(cp), Xp, 7)
    reference = _in_process("secureboost", tmp_path, capsys, "--active", qa, "--passive", qp)
    cfg = make_config(tmp_path, pki, ["active", "passive-0"])
    tasks = {"active": _own(qa, model, "active"), "passive-0": _own(qp, model, "passive-0")}
    res = _run(cfg, "secureboost", tmp_path, tasks)
    _check("secureboost", tmp_path, res, reference, {"secureboost.predict_query", "secureboost.predict_answer"})
    assert json.loads((tmp_path / "passive-0.json").read_text())["answered"] > 0  # the passive party's own nodes
    _refused(cfg, "secureboost", tmp_path, {**tasks, "active": _own(qa, model, "passive-0")}, "active", "passive-0")


# --------------------------------------------------------------------------- linear regression


def test_party_predict_linreg_refuses_another_partys_model_file(tmp_path: Path, pki: Path) -> None:  # noqa: F811
    """The refusal of the other tasks holds for ``predict linreg`` too: a passive party given another passive
    party's file (same role, another name) is refused in one line."""
    from vflcrypto.protocols import linreg as lr

    active, passives = lr.synthetic_split(n_rows=20, p_active=2, p_passive=(2, 2), seed=9)
    names = ["active", "passive-0", "passive-1"]
    models = [lr.PartyModel(n, n.split("-")[0], tuple(t.columns), np.asarray([0.5, -1.0]), lr.fit_preprocessing(t.X))
              for n, t in zip(names, [active, *passives], strict=True)]
    lr.save_models(models, tmp_path / "model")
    files = [_write(tmp_path / f"{n}.in.csv", list(t.ids), list(t.columns), t.X)
             for n, t in zip(names, [active, *passives], strict=True)]
    cfg = make_config(tmp_path, pki, [*names, "coordinator"])
    tasks = {n: [*_own(f, tmp_path / "model", n), "--aligned"] for n, f in zip(names, files, strict=True)}
    tasks["passive-0"] = [*_own(files[1], tmp_path / "model", "passive-1"), "--aligned"]
    _refused(cfg, "linreg", tmp_path, {**tasks, "coordinator": [*SMALL_KEYS]}, "passive-0", "passive-1")
