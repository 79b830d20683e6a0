"""Cross-party Pearson correlation: equal to numpy's corrcoef on the joined table to fixed-point
precision, on generated data and on FATE's files; each reveal mode gives the matrix only to the
parties it names; hostile peers get specific errors."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import tamper_sends
from vflcrypto.protocols import pearson

from vflcrypto.cli import main
from vflcrypto.data.files import write_csv_atomic
from vflcrypto.errors import InputDataError, PeerTimeoutError, ProtocolError
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.runtime.channel import Endpoint, LocalNetwork, run_parties

FATE = Path(__file__).resolve().parents[2] / "shared" / "data" / "fate"
TOL = 1e-6  # 24 fractional bits per z-score


@pytest.fixture(scope="module")
def keys() -> Any:
    return generate_keypair(512, allow_insecure=True)


def _ref(Xa: np.ndarray, Xp: np.ndarray) -> np.ndarray:
    return np.corrcoef(Xa.T, Xp.T)[: Xa.shape[1], Xa.shape[1] :]


@pytest.mark.parametrize(("reveal", "active_gets", "passive_gets"),
                         [("active", True, False), ("passive", False, True), ("both", True, True)])
def test_each_reveal_mode_gives_numpys_matrix_to_exactly_its_parties(keys: Any, reveal: str, active_gets: bool,
                                                                    passive_gets: bool) -> None:
    Xa, _, Xp, _ = pearson.example(300)
    run = pearson.run_local(Xa, [Xp, Xp[:, :2] ** 2], reveal=reveal, keys=keys, allow_insecure=True)
    for k, X in enumerate([Xp, Xp[:, :2] ** 2]):
        name = f"passive-{k}"
        assert (name in run.active) == active_gets
        assert (run.passive[name] is not None) == passive_gets
        if active_gets:
            np.testing.assert_allclose(run.active[name], _ref(Xa, X), atol=TOL)
        if passive_gets:
            np.testing.assert_allclose(run.passive[name], _ref(Xa, X), atol=TOL)
    kinds = set(run.transcript.kinds())
    assert ("pearson.mask" in kinds) == active_gets and ("pearson.decrypted_masked" in kinds) == passive_gets


@pytest.mark.skipif(not (FATE / "breast_hetero_guest.csv").exists(), reason="../shared data absent")
def test_breast_equals_numpy(keys: Any) -> None:
    guest, host = pd.read_csv(FATE / "breast_hetero_guest.csv"), pd.read_csv(FATE / "breast_hetero_host.csv")
    host = host.rename(columns={c: f"h_{c}" for c in host.columns if c != "id"})
    joined = guest.merge(host, on="id")
    Xa = joined[[c for c in guest.columns if c not in ("id", "y")]].to_numpy(float)
    Xp = joined[[c for c in host.columns if c != "id"]].to_numpy(float)
    run = pearson.run_local(Xa, [Xp], reveal="active", keys=keys, allow_insecure=True)
    np.testing.assert_allclose(run.active["passive-0"], _ref(Xa, Xp), atol=TOL)


def test_constant_or_missing_columns_are_refused(keys: Any) -> None:
    Xa, _, Xp, _ = pearson.example(50)
    with pytest.raises(InputDataError, match="constant"):
        pearson.run_local(Xa, [np.ones((50, 2))], keys=keys, allow_insecure=True)
    bad = Xp.copy()
    bad[3, 1] = np.nan
    with pytest.raises(InputDataError, match="finite"):
        pearson.run_local(Xa, [bad], keys=keys, allow_insecure=True)
    with pytest.raises(InputDataError, match="not aligned"):
        pearson.run_local(Xa, [Xp[:-1]], keys=keys, allow_insecure=True)


def _pair(timeout: float = 5.0) -> LocalNetwork:
    return LocalNetwork([Endpoint(pearson.ACTIVE, pearson.ACTIVE), Endpoint("passive-0", pearson.PASSIVE)],
                        timeout=timeout, allow_insecure=True)


def _tampered(keys: Any, who: str, kind: type, fn: Any, reveal: str = "both", expected: str | None = None) -> None:
    Xa, _, Xp, _ = pearson.example(60)
    net = _pair()
    chans = net.channels(who)
    tamper_sends(chans, kind, fn)
    run_parties({pearson.ACTIVE: lambda: pearson.run_active(
                    chans if who == pearson.ACTIVE else net.channels(pearson.ACTIVE), Xa, keys=keys, reveal=reveal),
                 "passive-0": lambda: pearson.run_passive(chans if who == "passive-0" else net.channels("passive-0"),
                                                          Xp, name="passive-0", expected_reveal=expected)},
                network=net)


def test_hostile_messages_get_specific_errors(keys: Any) -> None:
    with pytest.raises(ProtocolError, match="masked products for 3 active columns"):
        _tampered(keys, "passive-0", pearson.MaskedProducts, lambda m: dataclasses.replace(m, values=m.values[:-1]))
    with pytest.raises(ProtocolError, match="masks for 9 products"):
        _tampered(keys, "passive-0", pearson.ProductMask,
                  lambda m: dataclasses.replace(m, values=type(m.values)(list(m.values)[:-1])))
    with pytest.raises(ProtocolError, match="unknown reveal mode"):
        _tampered(keys, pearson.ACTIVE, pearson.Setup, lambda m: dataclasses.replace(m, reveal="everyone"))
    with pytest.raises(ProtocolError, match=r"runs reveal 'both'; this party expects 'passive'"):
        _tampered(keys, pearson.ACTIVE, pearson.Setup, lambda m: m, expected="passive")


def test_a_stalled_passive_party_times_out(keys: Any) -> None:
    Xa, _, _, _ = pearson.example(30)
    net = _pair(timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match=r"pearson\.masked_products"):
        run_parties({pearson.ACTIVE: lambda: pearson.run_active(net.channels(pearson.ACTIVE), Xa, keys=keys),
                     "passive-0": lambda: time.sleep(1.0)}, network=net)
    assert time.monotonic() - t0 < 5


def test_cli_json_names_each_partys_view(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Xa, ca, Xp, cp = pearson.example(120)
    ids = [f"c{i:04d}" for i in range(120)]
    order = np.random.default_rng(1).permutation(120)
    write_csv_atomic(tmp_path / "a.csv", ["id", *ca], [[ids[i], *Xa[i].tolist()] for i in range(120)])
    write_csv_atomic(tmp_path / "p.csv", ["id", *cp], [[ids[i], *Xp[i].tolist()] for i in order])
    assert main(["train", "pearson", "--active", str(tmp_path / "a.csv"), "--passive", str(tmp_path / "p.csv"),
                 "--id-column", "id", "--reveal", "passive", "--key-bits", "512", "--allow-insecure", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["active"]["passive-0"] is None  # reveal passive: the bank receives nothing
    got = out["passive-0"]
    ref = _ref(Xa, Xp)
    assert set(got) == set(cp) and got["spend"]["#0"] == pytest.approx(ref[0, 0], abs=TOL)
