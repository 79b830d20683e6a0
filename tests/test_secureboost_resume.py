"""SecureBoost checkpoint and resume as party processes (``--checkpoint DIR``, ``--resume``).

A run whose active or passive party is killed (SIGKILL) after its checkpoint holds a tree and before
the end resumes with ``--resume`` to the model of an uninterrupted run, bit for bit (fresh keys: the
splits and leaf weights come from exact fixed-point sums); a resume under another plan is refused in one line;
a GOSS run resumes with its checkpoint's sampling secret, tree for tree.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_party_processes import SMALL_KEYS, check_ok, finish, make_config, party, pki, write_table
from vflcrypto.protocols import secureboost as sb
from vflcrypto.protocols.secureboost.checkpoint import CheckpointDir, plan_of, run_active, run_passive
from vflcrypto.protocols.secureboost.predict import network

from vflcrypto.runtime.channel import run_parties

__all__ = ["pki"]  # the module-scoped PKI fixture of the party-process tests

NAMES = ("active", "passive-0")
TREES = 5
PLAN = ["--trees", str(TREES), "--depth", "3", "--max-bin", "16", "--subsample", "0.8", "--colsample-bytree",
        "0.8", "--aligned", *SMALL_KEYS]


def _data(d: Path) -> None:
    Xa, y, ca, Xp, cp = sb.example(n=160)
    ids = [f"r{i}" for i in range(160)]
    write_table(d / "active.csv", ids, list(ca), Xa, y)
    write_table(d / "passive-0.csv", ids, list(cp), Xp)


def _start(d: Path, run: str, pki: Path, *extra: str, plan: list[str] = PLAN) -> dict:
    (d / run).mkdir(exist_ok=True)
    cfg = make_config(d / run, pki, list(NAMES), timeout=8.0)
    return {n: party(cfg, n, "train", "secureboost", "--data", str(d / f"{n}.csv"), "--id-column", "id",
                     *(["--label", "y"] if n == "active" else []), *plan, "--checkpoint", str(d / f"ckpt-{n}"),
                     *extra, "--out", str(d / run / f"{n}.npz")) for n in NAMES}


def _held(directory: Path, name: str) -> int:
    """The trees of ``name``'s newest checkpoint in ``directory`` (0 without one)."""
    return max((int(p.name.split(".tree-")[1][:-4]) for p in directory.glob(f"{name}.tree-*.npz")), default=0)


def _trees(d: Path, name: str) -> int:
    return _held(d / f"ckpt-{name}", name)


def _same_model(a: Path, b: Path, trees: int = TREES) -> None:
    am, bm = sb.ActiveModel.load(a / "active.npz"), sb.ActiveModel.load(b / "active.npz")
    assert am.n_trees == trees
    np.testing.assert_array_equal(am.base_score, bm.base_score)
    for k in ("offsets", "kind", "party", "feature", "bin", "threshold", "record", "left", "right", "value", "gain",
              "cover"):
        np.testing.assert_array_equal(getattr(am, k), getattr(bm, k), err_msg=k)  # bit for bit
    ap, bp = sb.PassiveModel.load(a / "passive-0.npz"), sb.PassiveModel.load(b / "passive-0.npz")
    for k in ("record_ids", "feature", "bin", "threshold"):
        np.testing.assert_array_equal(getattr(ap, k), getattr(bp, k), err_msg=k)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, pki: Path) -> Path:
    """An uninterrupted run (with checkpoints), its models in ``<dir>/whole``."""
    d = tmp_path_factory.mktemp("whole")
    _data(d)
    check_ok(finish(_start(d, "whole", pki), timeout=60))
    return d


@pytest.mark.parametrize("victim", ["active", "passive-0"])
def test_a_killed_party_resumes_to_the_uninterrupted_model(tmp_path: Path, pki: Path, reference: Path,
                                                           victim: str) -> None:
    _data(tmp_path)
    procs = _start(tmp_path, "killed", pki)
    deadline = time.monotonic() + 60
    while min(_trees(tmp_path, n) for n in NAMES) < 1:  # kill once every checkpoint holds a tree
        assert time.monotonic() < deadline and procs[victim].poll() is None, "no checkpoint written"
        time.sleep(0.02)
    assert procs[victim].poll() is None, "the run ended before the kill"
    os.kill(procs[victim].pid, signal.SIGKILL)
    res = finish(procs, timeout=30)
    assert res[victim][0] == -signal.SIGKILL
    assert all(res[n][0] != 0 for n in NAMES)  # the other party stops too: nothing complete
    held = {n: _trees(tmp_path, n) for n in NAMES}
    assert 1 <= held[victim] < TREES and held["passive-0"] <= held["active"]
    for n in NAMES:  # a party's own state: owner-readable only
        for p in (tmp_path / f"ckpt-{n}").glob("*.npz"):
            assert stat.S_IMODE(p.stat().st_mode) == 0o600
    recs = check_ok(finish(_start(tmp_path, "resumed", pki, "--resume"), timeout=60))
    # both resume from the least tree the parties completed (the active party drops a tree it is ahead by)
    assert recs["active"]["summary"]["resumed_from"] == recs["passive-0"]["summary"]["resumed_from"] \
        == min(held.values()) >= 1
    _same_model(reference / "whole", tmp_path / "resumed")


def test_a_resume_under_another_plan_is_refused_in_one_line(pki: Path, reference: Path) -> None:
    assert _trees(reference, "active") >= 1  # the uninterrupted run's checkpoints remain
    plan = [*PLAN]
    plan[plan.index("--depth") + 1] = "2"
    res = finish(_start(reference, "other", pki, "--resume", plan=plan), timeout=30)
    for n in NAMES:
        rc, _, err = res[n]
        lines = [line for line in err.splitlines() if "another training plan" in line]
        assert rc != 0 and len(lines) == 1, err
        assert "max_depth 2 (checkpoint 3)" in lines[0], err


class _Crash(CheckpointDir):
    """A checkpoint directory whose party fails right after writing the state of ``stop`` trees."""

    stop = -1

    def save(self, trees: int, meta: dict, arrays: dict) -> None:
        super().save(trees, meta, arrays)
        if trees == self.stop:
            raise RuntimeError("killed")


def _in_process(d: Path, Xa: np.ndarray, y: np.ndarray, Xp: np.ndarray, params: sb.BoostParams, *,
                resume: bool = False, stop: int = -1, **active: Any) -> sb.ActiveModel:
    plan = plan_of(params, True, False)
    ckpt = {n: (_Crash if n == "active" else CheckpointDir)(d / f"ckpt-{n}", n, plan, "rows") for n in NAMES}
    ckpt["active"].stop = stop
    net = network(["passive-0"], 20.0, True)
    res = run_parties({"active": lambda: run_active(net.channels("active"), Xa, y, params=params, plaintext=True,
                                                     checkpoint=ckpt["active"], resume=resume, **active),
                       "passive-0": lambda: run_passive(net.channels("passive-0"), Xp, checkpoint=ckpt["passive-0"],
                                                        resume=resume)}, network=net)
    assert res["active"].resumed_from == res["passive-0"].resumed_from
    return res["active"].model


def test_a_one_tree_per_class_run_with_early_stopping_resumes_mid_round(tmp_path: Path) -> None:
    """In one process (plaintext): the active party fails right after its checkpoint of 5 trees (mid-round of a
    3-class, one-tree-per-class model with subsampling and early stopping on a validation split); the passive
    party holds 4, so the active party steps back one tree, and the resumed model equals the uninterrupted one."""
    rng = np.random.default_rng(3)  # example data, not a secret
    Xa, Xp = rng.normal(size=(150, 2)), rng.normal(size=(150, 3))
    y = np.argmax(np.column_stack([Xa[:, 0], Xp[:, 1], 0.5 * rng.normal(size=150)]), axis=1).astype(float)
    params = sb.BoostParams(objective="multiclass", multi_strategy="one_output_per_tree", n_trees=4, max_depth=2,
                            max_bin=8, subsample=0.8, validation_fraction=0.2, early_stopping_rounds=3)
    whole = _in_process(tmp_path / "whole", Xa, y, Xp, params)
    with pytest.raises(RuntimeError, match="killed"):  # the test's own stand-in for a kill, raised in the active role
        _in_process(tmp_path / "killed", Xa, y, Xp, params, stop=5)
    assert _trees(tmp_path / "killed", "active") == 5 and _trees(tmp_path / "killed", "passive-0") == 4
    resumed = _in_process(tmp_path / "killed", Xa, y, Xp, params, resume=True)
    assert resumed.model_id != whole.model_id and resumed.best_iteration == whole.best_iteration
    for k in ("offsets", "kind", "party", "feature", "bin", "threshold", "record", "left", "right", "value"):
        np.testing.assert_array_equal(getattr(resumed, k), getattr(whole, k), err_msg=k)


def test_a_goss_run_resumes_tree_for_tree_with_its_own_sampling_secret(tmp_path: Path) -> None:
    """GOSS (top 20 %, other 10 %) draws its random rows from the active party's secret key: a run killed after
    its checkpoint of 2 trees resumes (in a process that would draw a fresh key) with the key of its checkpoint,
    and its model equals, tree for tree, an uninterrupted run under that key. The key matters: another key
    grows other trees, so a resume that lost it would be caught."""
    import secrets

    rng = np.random.default_rng(5)  # example data, not a secret
    Xa, Xp = rng.normal(size=(300, 2)), rng.normal(size=(300, 3))
    y = (Xa[:, 0] + Xp[:, 1] + 0.5 * rng.normal(size=300) > 0).astype(float)
    params = sb.BoostParams(n_trees=5, max_depth=3, max_bin=8, top_rate=0.2, other_rate=0.1)
    key = secrets.token_bytes(32)
    with pytest.raises(RuntimeError, match="killed"):
        _in_process(tmp_path / "killed", Xa, y, Xp, params, stop=2, goss_key=key)
    assert _trees(tmp_path / "killed", "active") == 2
    resumed = _in_process(tmp_path / "killed", Xa, y, Xp, params, resume=True)  # a fresh key, overridden
    whole = _in_process(tmp_path / "whole", Xa, y, Xp, params, goss_key=key)
    other = _in_process(tmp_path / "other", Xa, y, Xp, params, goss_key=secrets.token_bytes(32))
    fields = ("offsets", "kind", "party", "feature", "bin", "threshold", "record", "left", "right", "value")
    for k in fields:
        np.testing.assert_array_equal(getattr(resumed, k), getattr(whole, k), err_msg=k)
    assert any(not np.array_equal(getattr(other, k), getattr(whole, k)) for k in fields)


CLI_TREES = 40  # one process grows a tree in tens of milliseconds here: enough trees to kill it mid-run


def _cli(d: Path, *extra: str) -> list[str]:
    """``vflcrypto train secureboost`` in one process: unaligned files (alignment by PSI runs again on resume)."""
    plan = [*PLAN[:-4]]
    plan[plan.index("--trees") + 1] = str(CLI_TREES)
    return [sys.executable, "-m", "vflcrypto", "train", "secureboost", "--active", str(d / "active.csv"),
            "--passive", str(d / "passive-0.csv"), "--id-column", "id", "--label", "y", *plan,
            "--scheme", "paillier", *SMALL_KEYS, "--test-fraction", "0.2", "--json", *extra]


def test_the_in_process_command_killed_mid_run_resumes_to_the_uninterrupted_model(tmp_path: Path) -> None:
    """``vflcrypto train secureboost --checkpoint DIR``, every party in one process, is killed (SIGKILL) once DIR
    holds a tree; ``--resume`` aligns and splits the rows again, goes on from the checkpoints and saves the
    model files of an uninterrupted run, bit for bit; the same test metric; a resume with other flags is refused
    in one line."""
    Xa, y, ca, Xp, cp = sb.example(n=160)
    ids = [f"r{i}" for i in range(160)]
    keep = np.r_[0:150, 155:160]  # the passive party misses some of the active party's IDs: PSI matters
    write_table(tmp_path / "active.csv", ids, list(ca), Xa, y)
    write_table(tmp_path / "passive-0.csv", [ids[i] for i in keep[::-1]], list(cp), Xp[keep[::-1]])
    whole = subprocess.run(_cli(tmp_path, "--model-dir", str(tmp_path / "whole")), capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr[-3000:]
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen(_cli(tmp_path, "--checkpoint", str(ckpt), "--model-dir", str(tmp_path / "killed")),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while min(_held(ckpt, n) for n in NAMES) < 1:
        assert time.monotonic() < deadline and proc.poll() is None, "no checkpoint written before the run ended"
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before the kill"
    proc.kill()
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL and not (tmp_path / "killed").exists()
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in ckpt.glob("*.npz"))
    resumed = subprocess.run(_cli(tmp_path, "--checkpoint", str(ckpt), "--resume", "--model-dir",
                                  str(tmp_path / "resumed")), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got, want = json.loads(resumed.stdout), json.loads(whole.stdout)
    assert 1 <= got["resumed_from"] < CLI_TREES and "resumed_from" not in want
    assert got["test_auc"] == want["test_auc"] and got["plaintext_test_auc"] == want["plaintext_test_auc"]
    _same_model(tmp_path / "whole", tmp_path / "resumed", CLI_TREES)
    other = subprocess.run(_cli(tmp_path, "--checkpoint", str(ckpt), "--resume", "--depth", "2"),
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert other.returncode == 2 and other.stderr.count("\n") == 1, other.stderr
    assert "another training plan" in other.stderr and "max_depth 2 (checkpoint 3)" in other.stderr


def test_a_flower_party_keeps_its_resume_in_its_state_and_resume_needs_a_directory(tmp_path: Path) -> None:
    """A Flower ClientApp may handle each message in a fresh process: what a passive party's resume agreed (the
    tree, the model id) is part of the state it dumps and loads; ``resume=true`` without ``checkpoint-dir`` is
    refused in one line."""
    from vflcrypto.protocols.secureboost import _flower_role

    from vflcrypto.errors import ConfigurationError

    cfg = {"checkpoint-dir": str(tmp_path), "resume": True, "rows": 60}
    role = _flower_role("passive-0", cfg)
    assert role.resumed_from is None
    role.state.resumed_from, role.state.resumed_model = 2, "m-1"
    again = _flower_role("passive-0", cfg)
    again.load_state(role.dump_state())
    assert (again.resumed_from, again.state.resumed_model) == (2, "m-1")
    with pytest.raises(ConfigurationError, match="resume=true needs checkpoint-dir"):
        _flower_role("active", {"resume": True, "rows": 60})


def test_the_flower_output_of_a_result_leaves_out_its_secret_fields() -> None:
    """The Flower App writes each party's result as JSON (``jsonable``): the active party's GOSS key is part of its
    result (a resumed run's reference needs it) and marked secret, so it is left out, and nothing else is."""
    import dataclasses
    import importlib.util

    pytest.importorskip("flwr")
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("flower_task", root / "flower" / "vflcrypto_flower" / "task.py")
    assert spec is not None and spec.loader is not None
    task = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(task)
    Xa, y, _, Xp, _ = sb.example(n=60)
    run = sb.run_local(Xa, y, [Xp], params=sb.BoostParams(n_trees=1, max_depth=2, max_bin=4), plaintext=True,
                       goss_key=b"k" * 32)
    assert run.active.goss_key == b"k" * 32
    out = task.jsonable(run.active)
    assert set(out) == {f.name for f in dataclasses.fields(run.active)} - {"goss_key"}
    assert "k" * 32 not in repr(out)
