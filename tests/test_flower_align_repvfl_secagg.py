"""The Flower App end to end for alignment (ECDH, KKRT, keyed hash), representation VFL (split, one-shot,
few-shot, prototype VFL) and secure aggregation (secagg, HFL), compared with run_local.

See tests/test_flower.py for how the scripts run; helpers in tests/flower_support.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flower_support import FLOWER_MARKS, outputs, run_script

from vflcrypto.cli import main

pytestmark = FLOWER_MARKS


@pytest.mark.parametrize("psi", ["ecdh", "kkrt", "rr22"])
def test_simulation_align_matches_run_local(tmp_path: Path, psi: str) -> None:
    from vflcrypto.protocols import align

    rc, out = run_script("flower_simulate.sh", "protocol='align'", f"psi='{psi}'", f"out-dir='{tmp_path / 'out'}'",
                         tmp=tmp_path, nodes=1)
    assert rc == 0, out[-3000:]
    bank, shop = align.audit.demo_ids()
    local = align.run_local(bank, shop, protocol=psi)
    got = outputs(tmp_path)
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
    got = outputs(tmp_path)
    assert sorted(got["active"]["result"]["rows"]) == sorted(local.results["active"].rows.tolist())
    assert "[vflcrypto] align (hash, both):" in out and "intersection 800" in out
    assert {e["kind"] for e in got["transcript"]["transcript"]} >= {"align.hello", "align.tags"}


def test_keyed_hash_align_without_pins_is_refused(tmp_path: Path) -> None:
    rc, out = run_script("flower_simulate.sh", "protocol='align'", "psi='hash'", tmp=tmp_path, nodes=1)
    assert rc != 0
    assert "party-config" in out


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
    got = outputs(tmp_path)
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
    got = outputs(tmp_path)
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
    got = outputs(tmp_path)
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
