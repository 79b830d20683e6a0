"""The Flower App (flower/) end to end, through the same scripts the README documents.

One app runs every protocol of the registry (run config ``protocol``):

* ``scripts/flower_simulate.sh``: ``flwr run`` local simulation (``NODES`` simulated
  SuperNodes). Small keys go through the run config (``key-bits``, ``allow-insecure``),
  which reaches the ClientApps under ``flwr run``.
* ``scripts/flower_deploy.sh``: a real SuperLink + SuperNodes on loopback.

Each test compares the run with ``run_local`` of the same protocol on the same example
data (the printed lines, and every party's own output file in ``out-dir``), and checks
that a failed run makes the script exit non-zero (``flwr run --stream`` itself exits 0).
The scripts kill everything they start; on a timeout the test sends SIGTERM (the
script's trap cleans up) before SIGKILL.

The alignment, representation-VFL and secure-aggregation apps are in
tests/test_flower_align_repvfl_secagg.py (helpers: tests/flower_support.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from flower_support import FLOWER_MARKS, SCRIPTS, expected_lines, outputs, run_script, start_script
from vflcrypto.protocols import logreg as lr

from vflcrypto.cli import main

pytestmark = FLOWER_MARKS


def test_simulation_secure_logreg_matches_run_local(tmp_path: Path) -> None:
    rc, out = run_script("flower_simulate.sh", "secure=true", "key-bits=1024", "allow-insecure=true", "steps=3",
                         f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path)
    assert rc == 0, out[-3000:]
    for line in expected_lines(3, "secure"):
        assert line in out, f"missing {line!r} in:\n{out[-3000:]}"
    assert "status: finished:completed" in out
    data = lr.titanic_parties(seed=0)
    local = lr.run_local(list(data.X_train), data.y_train, list(data.X_test), data.y_test, secure=True,
                         steps=3, key_bits=1024, allow_insecure=True)
    got = outputs(tmp_path)
    for k in range(3):  # every feature party's own weights, as run_local's
        np.testing.assert_allclose(got[f"passive-{k}"]["weights"], local.passives[f"passive-{k}"].weights,
                                   rtol=1e-9, atol=1e-12)
    steps = [e["step_name"] for e in got["transcript"]["transcript"] if e["event"] == "send"]
    assert {"start", "collect_logits", "mask_gradient", "apply_gradient"} <= set(steps)
    assert main(["audit", "--transcript", str(tmp_path / "out" / "transcript.json")]) == 0


def test_simulation_exchange_matches_run_local(tmp_path: Path) -> None:
    from vflcrypto.protocols import exchange

    rc, out = run_script("flower_simulate.sh", "protocol='exchange'", "key-bits=1024", "allow-insecure=true",
                         "rows=120", "features=4", f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=1)
    assert rc == 0, out[-3000:]
    d, X = exchange.example(120, 4)
    np.testing.assert_allclose(outputs(tmp_path)["passive"], X.T @ d, rtol=1e-8)


def test_simulation_woe_matches_run_local(tmp_path: Path) -> None:
    """The feature party a SuperNode, returned results: its IVs equal run_local's on the same data."""
    from vflcrypto.protocols import woe

    rc, out = run_script("flower_simulate.sh", "protocol='woe'", "key-bits=1024", "allow-insecure=true", "rows=300",
                         "return-results=true", f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=1)
    assert rc == 0, out[-3000:]
    y, Xa, ca, Xp, cp = woe.example(300)
    local = woe.run_local(y, Xa, [Xp], key_bits=1024, allow_insecure=True, params=woe.WoeParams(return_results=True),
                          active_columns=ca, passive_columns=[cp])
    got = outputs(tmp_path)
    np.testing.assert_allclose(got["passive-0"]["iv"], local.passive["passive-0"].iv, rtol=1e-12)
    assert "[vflcrypto] woe:" in out


def test_simulation_pearson_matches_numpy(tmp_path: Path) -> None:
    from vflcrypto.protocols import pearson

    rc, out = run_script("flower_simulate.sh", "protocol='pearson'", "key-bits=1024", "allow-insecure=true",
                         "rows=200", "reveal='both'", f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=1)
    assert rc == 0, out[-3000:]
    Xa, _, Xp, _ = pearson.example(200)
    ref = np.corrcoef(Xa.T, Xp.T)[:3, 3:]
    got = outputs(tmp_path)
    np.testing.assert_allclose(got["passive-0"], ref, atol=1e-6)  # the passive party's own result
    assert "[vflcrypto] pearson:" in out


def test_simulation_poisson_matches_run_local(tmp_path: Path) -> None:
    """The active party is the ServerApp; the passive party and the coordinator talk through it."""
    from vflcrypto.protocols import poisson

    rc, out = run_script("flower_simulate.sh", "protocol='poisson'", "key-bits=1024", "allow-insecure=true",
                         "rows=150", "epochs=3", f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=2)
    assert rc == 0, out[-3000:]
    Xa, y, _, Xp, _ = poisson.example(150)
    local = poisson.run_local(Xa, y, Xp, params=poisson.PoissonParams(epochs=3), key_bits=1024, allow_insecure=True)
    got = outputs(tmp_path)
    np.testing.assert_allclose(got["active"]["result"], local.active, atol=1e-9)
    np.testing.assert_allclose(got["passive-0"], local.passive, atol=1e-9)


def test_simulation_sshelr_matches_the_plaintext_descent(tmp_path: Path) -> None:
    """Two parties, no coordinator: the active party is the ServerApp, the passive party a ClientApp
    whose key pair and shares live in its saved state between messages."""
    from vflcrypto.protocols import sshelr

    rc, out = run_script("flower_simulate.sh", "protocol='sshelr'", "key-bits=512", "allow-insecure=true",
                         "rows=120", "epochs=2", f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=1)
    assert rc == 0, out[-3000:]
    Xa, y, _, Xp, _ = sshelr.example(120)
    Za, yy = sshelr.prepare_active(Xa, y)
    wa, wp = sshelr.plaintext_fit(Za, yy, sshelr.prepare_passive(Xp), sshelr.SSHELRParams(epochs=2))
    got = outputs(tmp_path)
    np.testing.assert_allclose(got["active"]["result"], wa, atol=1e-8)
    np.testing.assert_allclose(got["passive-0"], wp, atol=1e-8)
    assert "[vflcrypto] sshelr:" in out


def test_simulation_failure_is_reported(tmp_path: Path) -> None:
    # 4 parties configured, 3 SuperNodes: the ServerApp raises PeerTimeoutError.
    rc, out = run_script("flower_simulate.sh", "num-parties=4", "timeout=1.0", "steps=1", tmp=tmp_path)
    assert rc == 1, out[-3000:]
    assert "status: finished:failed" in out, out[-3000:]
    # one line from Flower's log (the simulation says "Simulation raised ...", a deployment "ServerApp raised ...")
    assert "raised an exception: PeerTimeoutError: only 3 of 4 SuperNodes joined" in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]  # the library's own error is one line


def test_deployment_on_loopback(tmp_path: Path) -> None:
    # One step (5 message rounds): a deployed SuperNode polls every 3 s and starts a
    # ClientApp process per message, so each round costs seconds.
    rc, out = run_script("flower_deploy.sh", "steps=1", tmp=tmp_path, timeout=300)
    assert rc == 0, out[-3000:]
    for line in expected_lines(1, "plain"):
        assert line in out, f"missing {line!r} in:\n{out[-3000:]}"
    assert "status: finished:completed" in out


def test_simulation_linreg_matches_run_local(tmp_path: Path) -> None:
    """B is the ServerApp; passive-0 and the coordinator are SuperNodes (C's traffic to
    passive-0 is relayed through B, which sees only what it may: SECURITY.md)."""
    from vflcrypto.protocols import linreg

    overrides = ("protocol='linreg'", "key-bits=1024", "allow-insecure=true", "epochs=3", "rows=80")
    rc, out = run_script("flower_simulate.sh", *overrides, f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=2)
    assert rc == 0, out[-3000:]
    run_config = {"epochs": 3, "rows": 80, "key-bits": 1024}
    active, passives = linreg.flower_data(run_config)
    local = linreg.run_local(active, passives, config=linreg.flower_config(run_config), allow_insecure=True)
    got = outputs(tmp_path)
    np.testing.assert_allclose(got["active"]["result"]["model"]["weights"], local.active.model.weights,
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got["passive-0"]["model"]["weights"], local.passives[0].model.weights,
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got["coordinator"]["losses"], local.coordinator.losses, rtol=1e-9)  # C's own scale
    relayed = {e["kind"] for e in got["transcript"]["transcript"] if e["step_name"] == "relay"}
    assert relayed == {"linreg.public_key", "linreg.masked_gradient", "linreg.gradient_return", "linreg.control"}


def test_simulation_secureboost_killed_mid_run_resumes_to_run_local(tmp_path: Path) -> None:
    """The active party is the ServerApp, passive-0 a ClientApp whose state (the encrypted bin sums of the
    previous level, kept for histogram subtraction, and what its resume agreed) goes through ``context.state``
    between messages. Run config ``checkpoint-dir``: each party writes its state after every tree. The
    simulation is stopped (the script and everything it started) once both parties hold a tree; a new run with
    ``resume=true`` goes on from the least tree either holds and grows run_local's trees on the same data."""
    from vflcrypto.protocols import secureboost as sb

    ckpt = tmp_path / "ckpt"
    overrides = ("protocol='secureboost'", "key-bits=1024", "allow-insecure=true", "trees=4", "depth=3", "rows=150",
                 f"checkpoint-dir='{ckpt}'")
    proc = start_script("flower_simulate.sh", *overrides, tmp=tmp_path, nodes=1)
    deadline = time.monotonic() + 180
    while not all(list(ckpt.glob(f"{n}.tree-*.npz")) for n in ("active", "passive-0")):
        assert time.monotonic() < deadline and proc.poll() is None, "no checkpoint before the run ended"
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before it was stopped"
    proc.send_signal(signal.SIGTERM)  # the script's trap stops the SuperLink, the simulation and the ClientApps
    proc.communicate(timeout=60)
    rc, out = run_script("flower_simulate.sh", *overrides, "resume=true", f"out-dir='{tmp_path / 'out'}'",
                         tmp=tmp_path, nodes=1)
    assert rc == 0, out[-3000:]
    got = outputs(tmp_path)
    resumed = got["active"]["result"]["resumed_from"]
    assert "goss_key" not in got["active"]["result"]  # a secret: never in an output file
    assert 1 <= resumed < 4 and got["passive-0"]["resumed_from"] == resumed, got["passive-0"]
    assert "[vflcrypto] secureboost: 4 trees, training AUC" in out and f"(resumed from tree {resumed})" in out
    Xa, y, ca, Xp, cp = sb.example(n=150)
    local = sb.run_local(Xa, y, [Xp], params=sb.BoostParams(n_trees=4, max_depth=3, max_bin=16), key_bits=1024,
                         allow_insecure=True, active_columns=ca, passive_columns=[cp])
    model = got["active"]["result"]["model"]
    for name in ("kind", "feature", "bin", "left", "right", "party"):
        assert model[name] == getattr(local.active.model, name).tolist(), name
    np.testing.assert_allclose(model["value"], local.active.model.value, rtol=0, atol=1e-12)
    passive = got["passive-0"]["model"]
    assert passive["feature"] == local.passive["passive-0"].model.feature.tolist()
    assert passive["bin"] == local.passive["passive-0"].model.bin.tolist()
    relayed = {e["kind"] for e in got["transcript"]["transcript"] if e["step_name"] == "relay"}
    assert relayed == set()


def test_process_lookup_in_cleanup_prints_nothing_for_processes_that_ended(tmp_path: Path) -> None:
    """``_pids_with_arg`` (the scripts' cleanup) reads /proc/N/cmdline of processes that may end meanwhile
    (its own pipelines' among them): the shell's "No such file or directory" must not reach the user."""
    script = (f'source "{SCRIPTS / "flower_common.sh"}"\n'
              'for i in 1 2 3 4 5 6 7 8; do found=($(_pids_with_arg "no-such-argument-$$")); done\n'
              'echo "found ${#found[@]}"\n')
    env = dict(os.environ, VENV=sys.prefix, FLWR_WORKDIR=str(tmp_path))
    proc = subprocess.run(["bash", "-c", script], env=env, text=True, capture_output=True, timeout=120)
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "found 0", "")
