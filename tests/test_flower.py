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
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from vflcrypto.protocols import logreg as lr

from vflcrypto.cli import main
from vflcrypto.ml.metrics import accuracy

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
VENV_BIN = Path(sys.prefix) / "bin"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all((VENV_BIN / tool).exists() for tool in ("flwr", "flower-superlink", "flower-supernode")),
        reason="Flower binaries not installed (pip install -e '.[flower]')",
    ),
]


def expected_lines(steps: int, mode: str, learning_rate: float = 0.5) -> list[str]:
    """The ServerApp's printed lines, from the protocol's plaintext math (no Flower)."""
    data = lr.titanic_parties(seed=0)
    w = [np.zeros(x.shape[1]) for x in data.X_train]
    lines = []
    for t in range(steps):
        z = np.sum([lr.partial_logits(x, wk) for x, wk in zip(data.X_train, w, strict=True)], axis=0)
        _, r, loss = lr.residuals(z, data.y_train)
        w = [lr.sgd_update(wk, lr.local_gradient(x, r), learning_rate) for x, wk in zip(data.X_train, w, strict=True)]
        lines.append(f"[vflcrypto] step {t:2d} loss {loss:.4f}")
    p = lr.sigmoid(np.sum([lr.partial_logits(x, wk) for x, wk in zip(data.X_train, w, strict=True)], axis=0))
    pt = lr.sigmoid(np.sum([lr.partial_logits(x, wk) for x, wk in zip(data.X_test, w, strict=True)], axis=0))
    lines.append(f"[vflcrypto] {mode}: train loss {lr.bce_loss(data.y_train, p):.4f}, "
                 f"test loss {lr.bce_loss(data.y_test, pt):.4f}, test accuracy {accuracy(data.y_test, pt):.4f}")
    return lines


def run_script(name: str, *overrides: str, tmp: Path, timeout: float = 240, nodes: int = 3) -> tuple[int, str]:
    """Run scripts/<name> with run-config overrides; return (exit code, stdout+stderr).

    ``tmp`` holds the script's private FLWR_HOME (kept on failure). Not via TMPDIR: Ray
    creates AF_UNIX sockets (max 107 bytes) under TMPDIR and pytest's paths are long.
    """
    env = dict(os.environ, VENV=sys.prefix, FLWR_WORKDIR=str(tmp), FLWR_TIMEOUT=str(int(timeout - 60)),
               NODES=str(nodes))
    proc = subprocess.Popen(["bash", str(SCRIPTS / name), *overrides], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the script's trap kills what it started
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"{name} did not finish within {timeout:g} s:\n{out[-3000:]}")
    return proc.returncode, out


def _outputs(tmp: Path) -> dict[str, object]:
    return {p.stem: json.loads(p.read_text()) for p in (tmp / "out").glob("*.json")}


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
    got = _outputs(tmp_path)
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
    np.testing.assert_allclose(_outputs(tmp_path)["passive"], X.T @ d, rtol=1e-8)


def test_simulation_woe_matches_run_local(tmp_path: Path) -> None:
    """The feature party a SuperNode, returned results: its IVs equal run_local's on the same data."""
    from vflcrypto.protocols import woe

    rc, out = run_script("flower_simulate.sh", "protocol='woe'", "key-bits=1024", "allow-insecure=true", "rows=300",
                         "return-results=true", f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=1)
    assert rc == 0, out[-3000:]
    y, Xa, ca, Xp, cp = woe.example(300)
    local = woe.run_local(y, Xa, [Xp], key_bits=1024, allow_insecure=True, params=woe.WoeParams(return_results=True),
                          active_columns=ca, passive_columns=[cp])
    got = _outputs(tmp_path)
    np.testing.assert_allclose(got["passive-0"]["iv"], local.passive["passive-0"].iv, rtol=1e-12)
    assert "[vflcrypto] woe:" in out


def test_simulation_pearson_matches_numpy(tmp_path: Path) -> None:
    from vflcrypto.protocols import pearson

    rc, out = run_script("flower_simulate.sh", "protocol='pearson'", "key-bits=1024", "allow-insecure=true",
                         "rows=200", "reveal='both'", f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=1)
    assert rc == 0, out[-3000:]
    Xa, _, Xp, _ = pearson.example(200)
    ref = np.corrcoef(Xa.T, Xp.T)[:3, 3:]
    got = _outputs(tmp_path)
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
    got = _outputs(tmp_path)
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
    got = _outputs(tmp_path)
    np.testing.assert_allclose(got["active"]["result"], wa, atol=1e-8)
    np.testing.assert_allclose(got["passive-0"], wp, atol=1e-8)
    assert "[vflcrypto] sshelr:" in out


def test_simulation_failure_is_reported(tmp_path: Path) -> None:
    # 4 parties configured, 3 SuperNodes: the ServerApp raises PeerTimeoutError.
    rc, out = run_script("flower_simulate.sh", "num-parties=4", "timeout=1.0", "steps=1", tmp=tmp_path)
    assert rc == 1, out[-3000:]
    assert "status: finished:failed" in out, out[-3000:]
    assert "only 3 of 4 SuperNodes joined" in out, out[-3000:]


def test_deployment_on_loopback(tmp_path: Path) -> None:
    # One step (5 message rounds): a deployed SuperNode polls every 3 s and starts a
    # ClientApp process per message, so each round costs seconds.
    rc, out = run_script("flower_deploy.sh", "steps=1", tmp=tmp_path, timeout=300)
    assert rc == 0, out[-3000:]
    for line in expected_lines(1, "plain"):
        assert line in out, f"missing {line!r} in:\n{out[-3000:]}"
    assert "status: finished:completed" in out


@pytest.mark.parametrize("psi", ["ecdh", "kkrt"])
def test_simulation_align_matches_run_local(tmp_path: Path, psi: str) -> None:
    from vflcrypto.protocols import align

    rc, out = run_script("flower_simulate.sh", "protocol='align'", f"psi='{psi}'", f"out-dir='{tmp_path / 'out'}'",
                         tmp=tmp_path, nodes=1)
    assert rc == 0, out[-3000:]
    bank, shop = align.audit.demo_ids()
    local = align.run_local(bank, shop, protocol=psi)
    got = _outputs(tmp_path)
    rows_a, rows_p = got["active"]["result"]["rows"], got["passive"]["rows"]
    # the same common rows as run_local; the canonical order is the digests' (per-run secrets)
    assert sorted(rows_a) == sorted(local.results["active"].rows.tolist())
    assert [bank[i] for i in rows_a] == [shop[j] for j in rows_p]
    assert f"[vflcrypto] align ({psi}, both):" in out and "intersection 800" in out


def test_simulation_keyed_hash_align_with_pinned_identities(tmp_path: Path) -> None:
    """Keyed-hash PSI: each party reads its own identity key; the pins come from a party config."""
    from vflcrypto.protocols import align

    assert main(["certs", "--out", str(tmp_path / "pki"), "--party", "active", "--party", "passive-0"]) == 0
    cfg = tmp_path / "pki" / "parties.example.toml"
    rc, out = run_script("flower_simulate.sh", "protocol='align'", "psi='hash'", f"party-config='{cfg}'",
                         f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=1)
    assert rc == 0, out[-3000:]
    bank, shop = align.audit.demo_ids()
    local = align.run_local(bank, shop, protocol="hash")
    got = _outputs(tmp_path)
    assert sorted(got["active"]["result"]["rows"]) == sorted(local.results["active"].rows.tolist())
    assert "[vflcrypto] align (hash, both):" in out and "intersection 800" in out
    assert {e["kind"] for e in got["transcript"]["transcript"]} >= {"align.hello", "align.tags"}


def test_keyed_hash_align_without_pins_is_refused(tmp_path: Path) -> None:
    rc, out = run_script("flower_simulate.sh", "protocol='align'", "psi='hash'", tmp=tmp_path, nodes=1)
    assert rc != 0
    assert "party-config" in out


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
    got = _outputs(tmp_path)
    np.testing.assert_allclose(got["active"]["result"]["model"]["weights"], local.active.model.weights,
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got["passive-0"]["model"]["weights"], local.passives[0].model.weights,
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got["coordinator"]["losses"], local.losses, rtol=1e-9)
    relayed = {e["kind"] for e in got["transcript"]["transcript"] if e["step_name"] == "relay"}
    assert relayed == {"linreg.public_key", "linreg.masked_gradient", "linreg.gradient_return", "linreg.control"}


def test_simulation_secureboost_matches_run_local(tmp_path: Path) -> None:
    """The active party is the ServerApp, passive-0 a ClientApp whose state (the encrypted
    bin sums of the previous level, kept for histogram subtraction) goes through
    ``context.state`` between messages; the trees equal run_local's on the same data."""
    from vflcrypto.protocols import secureboost as sb

    overrides = ("protocol='secureboost'", "key-bits=1024", "allow-insecure=true", "trees=2", "depth=3", "rows=150")
    rc, out = run_script("flower_simulate.sh", *overrides, f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=1)
    assert rc == 0, out[-3000:]
    Xa, y, ca, Xp, cp = sb.example(n=150)
    local = sb.run_local(Xa, y, [Xp], params=sb.BoostParams(n_trees=2, max_depth=3, max_bin=16), key_bits=1024,
                         allow_insecure=True, active_columns=ca, passive_columns=[cp])
    got = _outputs(tmp_path)
    model = got["active"]["result"]["model"]
    for name in ("kind", "feature", "bin", "left", "right", "party"):
        assert model[name] == getattr(local.active.model, name).tolist(), name
    np.testing.assert_allclose(model["value"], local.active.model.value, rtol=0, atol=1e-12)
    passive = got["passive-0"]["model"]
    assert passive["feature"] == local.passive["passive-0"].model.feature.tolist()
    assert passive["bin"] == local.passive["passive-0"].model.bin.tolist()
    assert "[vflcrypto] secureboost: 2 trees" in out
    relayed = {e["kind"] for e in got["transcript"]["transcript"] if e["step_name"] == "relay"}
    assert relayed == set()


@pytest.mark.parametrize("protocol", ["oneshot", "fewshot", "split"])
def test_simulation_representation_vfl_matches_run_local(tmp_path: Path, protocol: str) -> None:
    """The server is the ServerApp, party-0 and party-1 SuperNodes (their extractors, and for split
    learning Adam's moments, in context.state between messages); the same accuracy as run_local."""
    pytest.importorskip("torch")
    from vflcrypto.protocols import get

    overrides = (f"protocol='{protocol}'", "overlap=60", "ssl-epochs=3", "head-epochs=10", "epochs=2",
                 "fewshot-mode='client'")
    rc, out = run_script("flower_simulate.sh", *overrides, f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=2)
    assert rc == 0, out[-3000:]
    run_config = {"overlap": 60, "ssl-epochs": 3, "head-epochs": 10, "epochs": 2, "fewshot-mode": "client"}
    fl = get(protocol).flower
    assert fl is not None
    server = fl.make_role("server", run_config)
    parties = [fl.make_role(p, run_config) for p in ("party-0", "party-1")]
    local = get(protocol).run_local(server.data, [p.data for p in parties], config=server.cfg)
    got = _outputs(tmp_path)
    assert got["server"]["result"]["test_accuracy"] == pytest.approx(local.test_accuracy, abs=1e-12)
    assert f"[vflcrypto] {protocol}: test accuracy" in out


def test_simulation_protovfl_matches_run_local(tmp_path: Path) -> None:
    """Prototype VFL: the server is the ServerApp, three parties SuperNodes (their extractors and the secagg
    secrets in context.state); identities pinned in a party config; the same predictions as run_local."""
    pytest.importorskip("torch")
    from vflcrypto.protocols import protovfl

    names = ["server", "party-0", "party-1", "party-2"]
    assert main(["certs", "--out", str(tmp_path / "pki"), *[a for n in names for a in ("--party", n)]]) == 0
    cfg = tmp_path / "pki" / "parties.example.toml"
    overrides = ("protocol='protovfl'", "rounds=1", "local-epochs=2", "head-epochs=20", f"party-config='{cfg}'")
    rc, out = run_script("flower_simulate.sh", *overrides, f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=3)
    assert rc == 0, out[-3000:]
    server, parties = protovfl.digits_example(20, seed=0)
    local = protovfl.run_local(server, parties, config=protovfl.ProtoConfig(rounds=1, local_epochs=2, head_epochs=20))
    got = _outputs(tmp_path)
    assert got["server"]["result"]["test_accuracy"] == pytest.approx(local.test_accuracy, abs=1e-12)
    kinds = {e["kind"] for e in got["transcript"]["transcript"]}
    assert {"protovfl.global_model", "secagg.masked_input"} <= kinds
    assert "[vflcrypto] protovfl: test accuracy" in out


@pytest.mark.parametrize("protocol", ["secagg", "hfl"])
def test_simulation_secure_aggregation_survives_a_dropout(tmp_path: Path, protocol: str) -> None:
    """Four clients on SuperNodes, the last vanishes mid-round; identities pinned in a party config;
    the server (ServerApp) sees the node finish and recovers the survivors' sum."""
    from vflcrypto.protocols import hfl, secagg
    from vflcrypto.protocols.secagg.flower import example_vector

    names = ["server", *[f"client-{i}" for i in range(4)]]
    assert main(["certs", "--out", str(tmp_path / "pki"), *[a for n in names for a in ("--party", n)]]) == 0
    cfg = tmp_path / "pki" / "parties.example.toml"
    overrides = (f"protocol='{protocol}'", "clients=4", "drop=1", "length=500", "hfl-rounds=2",
                 f"party-config='{cfg}'")
    rc, out = run_script("flower_simulate.sh", *overrides, f"out-dir='{tmp_path / 'out'}'", tmp=tmp_path, nodes=4)
    assert rc == 0, out[-3000:]
    got = _outputs(tmp_path)
    if protocol == "secagg":
        res = got["server"]["result"][-1]
        assert res["survivors"] == names[1:4]
        want = np.sum([example_vector(i, 500) for i in range(3)], 0)
        np.testing.assert_allclose(res["total"], want, atol=1e-5)
        local = secagg.run_local([example_vector(i, 500) for i in range(4)], vanish={"client-3": (0, "masked")})
        np.testing.assert_array_equal(np.asarray(res["raw"], np.uint64), local.rounds[0].raw)
    else:
        clients = hfl.digits_clients(4, seed=0)
        local = hfl.run_local(clients, 10, config=hfl.HFLConfig(rounds=2), vanish={"client-3": (0, "masked")},
                              timeout=5)
        np.testing.assert_array_equal(np.asarray(got["server"]["result"]["w"]), local.result.w)
    assert f"[vflcrypto] {protocol}:" in out


def test_process_lookup_in_cleanup_prints_nothing_for_processes_that_ended(tmp_path: Path) -> None:
    """``_pids_with_arg`` (the scripts' cleanup) reads /proc/N/cmdline of processes that may end meanwhile
    (its own pipelines' among them): the shell's "No such file or directory" must not reach the user."""
    script = (f'source "{SCRIPTS / "flower_common.sh"}"\n'
              'for i in 1 2 3 4 5 6 7 8; do found=($(_pids_with_arg "no-such-argument-$$")); done\n'
              'echo "found ${#found[@]}"\n')
    env = dict(os.environ, VENV=sys.prefix, FLWR_WORKDIR=str(tmp_path))
    proc = subprocess.run(["bash", "-c", script], env=env, text=True, capture_output=True, timeout=120)
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "found 0", "")
