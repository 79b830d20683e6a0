"""Unbalanced PSI with an offline OPRF cache (protocols/upsi, vflcrypto/psi/oprf.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from vflcrypto.protocols.upsi import audit as upsi_audit
from vflcrypto.protocols.upsi import store
from vflcrypto.protocols.upsi.messages import LARGE, SMALL, UnbalancedResult
from vflcrypto.protocols.upsi.roles import run_local

from vflcrypto.cli import main
from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.psi import oprf
from vflcrypto.psi import primitives as psi


@pytest.fixture(autouse=True)
def _in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "1")


def _ids(lo: int, hi: int) -> list[str]:
    return [f"u{i}" for i in range(lo, hi)]


def _common(res: UnbalancedResult, small: list[str]) -> set[str]:
    assert res.rows is not None
    return {small[int(r)] for r in res.rows}


def test_oprf_unblinds_to_the_offline_value_on_curve_and_twist() -> None:
    key = os.urandom(32)
    ids = [f"id-{i}".encode() for i in range(200)]
    offline = oprf.evaluate_ids(key, ids)
    b = oprf.Blinder()
    points, flags = b.blind(ids)
    assert 0 < sum(flags) < len(ids)  # both the curve and the twist are exercised
    online = b.unblind(oprf.apply_key(key, points), flags)
    assert (online == offline).all()
    other = oprf.Blinder()
    assert other.blind(ids[:1])[0] != points[:32]  # a fresh blinding per run


def test_result_equals_the_plain_intersection_and_sizes_are_the_only_other_output() -> None:
    large, small = _ids(0, 3000), [*_ids(2900, 3100), "x1", "x2"]
    run = run_local(large, small, chunk_size=64, max_small=500)
    res, big = run.results[SMALL], run.results[LARGE]
    assert _common(res, small) == set(large) & set(small)
    assert res.peer_size == len(large) and big.peer_size == len(small)
    assert big.rows is None and big.size is None
    # canonical-ID order of the output rows
    assert [small[int(r)].encode() for r in res.rows] == sorted(small[int(r)].encode() for r in res.rows)


def test_truncation_meets_two_to_the_minus_40() -> None:
    for n_large, n_small in ((10**6, 10**4), (10**8, 10**5), (10**3, 10)):
        t = oprf.truncation_bytes(n_large, n_small)
        assert oprf.false_match_bound(n_large, n_small, t) <= 2.0**-40
        assert t == 5 or oprf.false_match_bound(n_large, n_small, t - 1) > 2.0**-40
    assert oprf.truncation_bytes(10**6, 10**4) == 10 and oprf.truncation_bytes(10**8, 10**5) == 11


def test_incremental_update_equals_a_fresh_build() -> None:
    key = store.new_key()
    base, added = _ids(0, 2000), _ids(1990, 2300)  # 10 already present
    enc = psi.canonicalize_ids(base).encoded
    new = psi.canonicalize_ids(added).encoded
    cache, n = store.update_cache(store.build_cache(key, enc), key, new)
    fresh = store.build_cache(key, psi.canonicalize_ids(_ids(0, 2300)).encoded)
    assert n == 300 and cache.generation == 1 and int((cache.gens == 1).sum()) == 300
    assert (cache.values == fresh.values).all() and cache.set_digest == fresh.set_digest
    streamed = store.build_cache_stream(key, [enc[:700], enc[700:], new[10:]])
    assert (streamed.values == fresh.values).all() and streamed.set_digest == fresh.set_digest
    with pytest.raises(InputDataError, match="repeats 1 ID"):
        store.build_cache_stream(key, [enc[:5], enc[4:6]])
    same, zero = store.update_cache(cache, key, new)
    assert zero == 0 and same is cache


def test_refresh_after_adding_ids_ships_a_delta(tmp_path: Path) -> None:
    key = store.new_key()
    large, small = _ids(0, 2000), _ids(1950, 2100)
    cache = store.build_cache(key, psi.canonicalize_ids(large).encoded)
    first = run_local(large, small, key=key, cache=cache, chunk_size=100, max_small=1000)
    t1 = first.results[SMALL].transfer
    assert first.results[SMALL].received_values == 2000 and first.results[SMALL].size == 50
    cache2, _ = store.update_cache(cache, key, psi.canonicalize_ids(_ids(2000, 2020)).encoded)
    second = run_local(large, small, key=key, cache=cache2, transfer=t1, chunk_size=100)
    res = second.results[SMALL]
    assert res.received_values == 20 and res.size == 70 and res.transfer.n_large == 2020
    assert _common(res, small) == set(_ids(1950, 2020))
    # the merged transfer equals a fresh export; a third run sends no values at all
    fresh = store.export_transfer(cache2, 1000)
    assert (res.transfer.values == fresh.values).all()
    third = run_local(large, small, key=key, cache=cache2, transfer=res.transfer, chunk_size=100)
    assert third.results[SMALL].received_values == 0 and third.results[SMALL].size == 70
    # file round trip of a delta
    store.save_transfer(tmp_path / "t", t1)
    store.save_transfer(tmp_path / "d", store.export_transfer(cache2, 1000, since=0, value_bytes=t1.value_bytes),
                        since=0)
    base, _ = store.load_transfer(tmp_path / "t")
    delta, since = store.load_transfer(tmp_path / "d")
    assert (store.merge_transfer(base, delta, since).values == fresh.values).all()


def test_cache_file_is_owner_only_and_refuses_another_key_or_tampering(tmp_path: Path) -> None:
    key, other = store.new_key(), store.new_key()
    cache = store.build_cache(key, psi.canonicalize_ids(_ids(0, 500)).encoded)
    path = tmp_path / "c.cache"
    store.save_cache(path, cache, key)
    store.save_key(tmp_path / "k.key", key)
    for p in (path, tmp_path / "k.key"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    back = store.load_cache(path, store.load_key(tmp_path / "k.key"))
    assert (back.values == cache.values).all() and back.set_digest == cache.set_digest
    with pytest.raises(InputDataError, match="cache built with OPRF key") as exc:
        store.load_cache(path, other)
    assert "\n" not in str(exc.value)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(InputDataError, match="fails its integrity check") as exc:
        store.load_cache(path, key)
    assert "\n" not in str(exc.value)


def test_peer_input_is_checked() -> None:
    key = os.urandom(32)
    with pytest.raises(ProtocolError, match="non-canonical"):
        oprf.apply_key(key, b"\xff" * 32)
    with pytest.raises(ProtocolError, match="small-order"):
        oprf.apply_key(key, bytes(32))


def test_honest_audit_finds_nothing_beyond_the_declared_outputs() -> None:
    outcome = upsi_audit.audit_run()
    assert not outcome.failures(), outcome.failures()
    assert not outcome.broken_protections()
    assert {f.name for f in outcome.findings} >= {c.name for c in upsi_audit.CHECKS}


def _csv(path: Path, ids: list[str]) -> Path:
    path.write_text("id,x\n" + "".join(f"{i},{n}\n" for n, i in enumerate(ids)), encoding="utf-8")
    return path


def test_cli_build_update_export_and_online_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big, small = _csv(tmp_path / "big.csv", _ids(0, 1000)), _csv(tmp_path / "small.csv", _ids(990, 1030))
    k, c, t = tmp_path / "big.key", tmp_path / "big.cache", tmp_path / "small.transfer"
    assert main(["align-cache", "build", "--data", str(big), "--id-column", "id", "--oprf-key", str(k),
                 "--cache", str(c), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 1000
    out = tmp_path / "out"
    out.mkdir()
    assert main(["align-unbalanced", "--oprf-key", str(k), "--cache", str(c), "--small", str(small), "--id-column",
                 "id", "--transfer", str(t), "--out-dir", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["intersection"] == 10 and s["values_received"] == 1000 and t.exists()
    rows = (out / "small.aligned.csv").read_text().splitlines()
    assert rows[0] == "id,x" and len(rows) == 11
    added = _csv(tmp_path / "added.csv", _ids(1000, 1010))
    assert main(["align-cache", "update", "--data", str(added), "--id-column", "id", "--oprf-key", str(k),
                 "--cache", str(c), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["added"] == 10
    both = _csv(tmp_path / "both.csv", _ids(0, 1010))
    assert main(["align-cache", "verify", "--data", str(both), "--id-column", "id", "--oprf-key", str(k),
                 "--cache", str(c), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["matches"] is True
    assert main(["align-cache", "verify", "--data", str(big), "--id-column", "id", "--oprf-key", str(k),
                 "--cache", str(c)]) != 0
    assert "does not hold the IDs" in capsys.readouterr().err
    (out / "small.aligned.csv").unlink()
    assert main(["align-unbalanced", "--oprf-key", str(k), "--cache", str(c), "--small", str(small), "--id-column",
                 "id", "--transfer", str(t), "--out-dir", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["intersection"] == 20 and s["values_received"] == 10
    assert main(["align-cache", "export", "--oprf-key", str(k), "--cache", str(c), "--max-small", "100",
                 "--out", str(tmp_path / "x.transfer"), "--json"]) == 0
    e = json.loads(capsys.readouterr().out)
    assert e["count"] == 1010 and e["false_match_bound"] <= 2**-40
    other = tmp_path / "other.key"
    store.save_key(other, store.new_key())
    assert main(["align-cache", "update", "--data", str(added), "--id-column", "id", "--oprf-key", str(other),
                 "--cache", str(c)]) != 0
    assert "cache built with OPRF key" in capsys.readouterr().err


def test_mutation_seam_unkeyed_values_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oprf, "evaluate_ids", lambda secret, ids: np.array(
        [oprf.output_of_point(oprf.oprf_hash(i)) for i in ids], dtype=f"S{oprf.OUTPUT_BYTES}"))
    outcome = upsi_audit.audit_run()
    hit = [f for f in outcome.findings if f.name == upsi_audit.DICTIONARY]
    assert hit and hit[0].flagged


def test_party_processes_over_mutual_tls(tmp_path: Path) -> None:
    """``vflcrypto party ... align-unbalanced``: the large and the small party each in its own process."""
    from test_party_processes import check_ok, finish, make_config, party, write_ids

    from vflcrypto.runtime.certs import write_dev_pki

    pki = tmp_path / "pki"
    write_dev_pki(pki, ["large", "small"])
    large, small = _ids(0, 1500), _ids(1400, 1600)
    write_ids(tmp_path / "small.csv", small)
    key = store.new_key()
    store.save_key(tmp_path / "big.key", key)
    store.save_cache(tmp_path / "big.cache", store.build_cache(key, psi.canonicalize_ids(large).encoded), key)
    cfg = make_config(tmp_path, pki, ["large", "small"])  # roles: the names
    transfer = tmp_path / "small.transfer"
    for expected_values in (1500, 0):  # the first run ships the transfer, the second finds it current
        procs = {
            "large": party(cfg, "large", "align-unbalanced", "--oprf-key", str(tmp_path / "big.key"),
                            "--cache", str(tmp_path / "big.cache"), "--chunk-size", "64",
                            "--out", str(tmp_path / "large.out")),
            "small": party(cfg, "small", "align-unbalanced", "--data",
                               str(tmp_path / "small.csv"), "--transfer", str(transfer), "--chunk-size", "64",
                               "--out", str(tmp_path / "small.aligned.csv")),
        }
        recs = check_ok(finish(procs, timeout=60))
        s = recs["small"]["summary"]
        assert s["intersection"] == 100 and s["values_received"] == expected_values and s["peer_size"] == 1500
        assert recs["large"]["summary"]["peer_size"] == 200
        rows = [r.split(",")[0] for r in (tmp_path / "small.aligned.csv").read_text().splitlines()[1:]]
        assert set(rows) == set(_ids(1400, 1500)) and transfer.exists()
