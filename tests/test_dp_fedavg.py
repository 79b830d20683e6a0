"""DP-FedAvg over secure aggregation (``protocols/hfl/defence.py``): clipping, distributed noise, accounting.

* each client's update is clipped to C before its noise, with weight 1 instead of n_i;
* the noise in every sum the server obtains has the announced standard deviation σC √(s/m)
  (s survivors, m the clients the noise is shared for), and each plaintext update σC;
* (ε, δ) is ``dp-accounting``'s own figure, announced and realised (with the survivors);
* plain and secure modes give the same guarantee (the plain clients add √m times the noise);
* at ε = 1 the round-difference attack (So et al., AAAI 2023) is at its baseline;
* parameters that break the guarantee or the ring's bound are refused; the CLI reports it.

Small runs only (five clients, two or three rounds): the file takes a few seconds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from vflcrypto.protocols import hfl
from vflcrypto.protocols.hfl import audit as hfl_audit
from vflcrypto.protocols.hfl.defence import DEFENCE, DpFedAvg
from vflcrypto.protocols.secagg.math import SecAggConfig, decode_ring

from vflcrypto.cli import main
from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.runtime.channel import AuditTap

P = 65 * 10  # softmax regression on the digits: (64 pixels + bias) x 10 classes


@pytest.fixture(scope="module")
def clients() -> list[hfl.ClientData]:
    return hfl.digits_clients(5, seed=0, skew=hfl_audit.SKEW)


@pytest.fixture(autouse=True)
def _in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "1")


def _run(clients: list[hfl.ClientData], *, drop: bool = True, **cfg: object) -> tuple[hfl.HFLRun, AuditTap]:
    tap = AuditTap()
    vanish = {"client-4": (2, "masked")} if drop else None
    config = hfl.HFLConfig(**{"rounds": 3, **cfg})  # type: ignore[arg-type]
    return hfl.run_local(clients, 10, config=config, tap=tap, vanish=vanish, timeout=10), tap


def test_each_update_is_clipped_to_c_with_weight_one(clients: list[hfl.ClientData]) -> None:
    dp = DpFedAvg(2.0, 0.3, 1e-5, 5)
    w = np.zeros(P)
    big, small = np.full(P, 0.1), np.full(P, 0.001)  # L2 norms 2.55 and 0.0255
    clean, noise = dp.noised(w, big)
    assert np.linalg.norm(clean[:P]) == pytest.approx(0.3) and clean[P] == 1.0 and noise.shape == (P,)
    assert np.allclose(clean[:P] / np.linalg.norm(clean[:P]), big / np.linalg.norm(big))  # scaled, not bent
    assert np.array_equal(dp.noised(w, small)[0][:P], small)  # within the bound: unchanged
    _, tap = _run(clients, dp_noise=2.0, dp_clip=0.2)
    for name in [f"client-{i}" for i in range(5)]:
        held = tap.held(name, "update")
        assert len(held) == 3  # client-4 trains in round 2 too, then drops before its masked input
        for u in held:  # the digits' raw updates have norm ~1: every one is clipped to exactly C
            assert np.linalg.norm(u[:P]) == pytest.approx(0.2, rel=1e-9) and u[P] == 1.0


def test_the_sums_carry_the_announced_noise_and_each_plain_update_its_own(clients: list[hfl.ClientData]) -> None:
    """Each round's sum minus the survivors' clipped updates is N(0, σ²C² s/m) per coordinate. The pooled sample
    variance over k coordinates, divided by the announced one, is within 5 √(2/k) of 1 (k = 1950: ±0.16); its
    mean within 5 standard errors of 0. In plain mode each received update carries N(0, σ²C²) itself."""
    sigma, clip = 2.0, 0.5
    _, tap = _run(clients, dp_noise=sigma, dp_clip=clip)
    ratios, noise = [], []
    for r, (total, alive) in enumerate(zip(tap.held("server", "aggregate"), tap.held("server", "survivors"),
                                           strict=True)):
        resid = np.asarray(total)[:P] - np.sum([tap.held(c, "update")[r][:P] for c in alive], axis=0)
        var = (sigma * clip) ** 2 * len(alive) / 5
        ratios.append(float(np.mean(resid**2)) / var)
        noise.append(resid / math.sqrt(var))
    z = np.concatenate(noise)
    assert [len(a) for a in tap.held("server", "survivors")] == [5, 5, 4]
    assert abs(float(np.mean(z**2)) - 1) < 5 * math.sqrt(2 / z.size), ratios
    assert abs(float(np.mean(z))) < 5 / math.sqrt(z.size)
    _, ptap = _run(clients, drop=False, dp_noise=sigma, dp_clip=clip, secure=False)
    rows = []
    for i in range(5):
        sent = [decode_ring(m.y, 24) for m in ptap.received("server", hfl.PlainUpdate, sender=f"client-{i}")]
        rows += [y[:P] - u[:P] for y, u in zip(sent, ptap.held(f"client-{i}", "update"), strict=True)]
    zp = np.concatenate(rows) / (sigma * clip)
    assert abs(float(np.mean(zp**2)) - 1) < 5 * math.sqrt(2 / zp.size)


def test_epsilon_is_dp_accountings_own_figure() -> None:
    """(ε, δ) for stated (σ, rounds, δ) equals the library's RDP accountant composing the Gaussian mechanism itself;
    after a dropout the realised ε composes each round's own multiplier σ √(s/m)."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    sigma, rounds, delta = 1.3, 10, 1e-5
    dp = DpFedAvg(sigma, 1.0, delta, 5)
    acc = RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), rounds))
    assert dp.guarantee(rounds).epsilon == pytest.approx(acc.get_epsilon(delta), rel=1e-12)
    assert dp.guarantee(rounds, [5] * rounds).epsilon == pytest.approx(acc.get_epsilon(delta), rel=1e-12)
    acc = RdpAccountant()
    acc.compose(dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(sigma)] * 9 +
                                              [dp_accounting.GaussianDpEvent(sigma * math.sqrt(4 / 5))]))
    realised = dp.guarantee(rounds, [5] * 9 + [4])
    assert realised.epsilon == pytest.approx(acc.get_epsilon(delta), rel=1e-12)
    assert realised.epsilon > realised.params["announced_epsilon"]  # less noise in the round with a dropout
    calibrated = hfl.HFLConfig(rounds=rounds, dp_epsilon=2.0).dp(5)
    assert calibrated is not None and calibrated.guarantee(rounds).epsilon == pytest.approx(2.0, rel=1e-4)
    assert calibrated.guarantee(rounds).epsilon <= 2.0


def test_plain_and_secure_modes_give_the_same_guarantee(clients: list[hfl.ClientData]) -> None:
    secure, _ = _run(clients, drop=False, dp_epsilon=2.0)
    plain, _ = _run(clients, drop=False, dp_epsilon=2.0, secure=False)
    gs, gp = secure.result.privacy[DEFENCE], plain.result.privacy[DEFENCE]
    assert gs["epsilon"] == pytest.approx(gp["epsilon"], rel=1e-12) and gs["epsilon"] == pytest.approx(2.0, rel=1e-4)
    assert (gs["delta"], gs["covers"]) == (gp["delta"], gp["covers"])
    assert (gs["mode"], gp["mode"]) == ("secure", "plain")
    assert gp["params"]["client_noise_std"] == pytest.approx(math.sqrt(5) * gs["params"]["client_noise_std"])


def test_at_epsilon_1_the_round_difference_attack_is_at_its_baseline(clients: list[hfl.ClientData]) -> None:
    """The audit's scenario (client-4 drops out of round 2 of 3): undefended the difference of two rounds' sums
    has r > 0.9 with client-4's update and its n_i exactly; at ε = 1 (realised 1.04 with the dropout) r is at
    most 0.15 above its baseline (two rounds with the same survivors, |r|) and |r| < 0.15, and the count entry no
    longer carries n_i. Tolerance: the noise of a difference has std ~7 per coordinate against a clipped update of
    norm 1 over 650 coordinates; over 40 runs r had mean 0.001 and standard deviation 0.031, its baseline mean
    0.042 (sd 0.027): 0.15 is about four standard deviations of r − baseline above its mean."""
    front = hfl_audit.frontier(DEFENCE, [1.0], clients=5)
    undefended, tight = front.points
    assert undefended.scores["round_difference_r"] > 0.9 and undefended.scores["sample_count"] == 1.0
    assert tight.epsilon is not None and 1.0 < tight.epsilon < 1.1 and tight.delta == 1e-5
    r, base = tight.scores["round_difference_r"], tight.baselines["round_difference_r"]
    assert r - base < 0.15 and abs(r) < 0.15, (r, base)
    assert tight.scores["sample_count"] == 0.0 and tight.scores["round_difference_r2"] < 0
    assert "round_difference_r" in front.to_text() and front.to_dict()["points"][1]["epsilon"] == tight.epsilon


def test_parameters_that_break_the_guarantee_or_the_ring_are_refused(clients: list[hfl.ClientData]) -> None:
    with pytest.raises(InputDataError, match="SCAFFOLD"):
        hfl.HFLConfig(algorithm="scaffold", dp_noise=1.0)
    with pytest.raises(InputDataError, match="not both"):
        hfl.HFLConfig(dp_noise=1.0, dp_epsilon=1.0)
    with pytest.raises(InputDataError, match="noise multiplier"):
        hfl.HFLConfig(dp_noise=0.0)
    with pytest.raises(InputDataError, match="dp-min-clients"):
        hfl.HFLConfig(dp_noise=1.0, dp_min_clients=6).dp(5)
    # a 32-bit ring with 28 value bits holds |x| < 16: C + 12 x sigma*C/sqrt(5) = 54.7 at sigma = 10 does not fit
    with pytest.raises(InputDataError, match="fixed-point bound"):
        DpFedAvg(10.0, 1.0, 1e-5, 5).check_ring(24, 28)
    DpFedAvg(1.0, 1.0, 1e-5, 5).check_ring(24, 28)  # 6.4 fits
    with pytest.raises(InputDataError, match="fixed-point bound"):
        hfl.run_local(clients, 10, config=hfl.HFLConfig(rounds=1, dp_noise=10.0),
                      secagg=SecAggConfig(ring_bits=32, value_bits=28), timeout=5)


def test_a_client_refuses_a_server_that_announces_other_noise(clients: list[hfl.ClientData]) -> None:
    def weaker(**kw: object) -> hfl.ServerRole:
        return hfl.ServerRole(**{**kw, "config": hfl.HFLConfig(rounds=2, dp_noise=0.5)})  # type: ignore[arg-type]

    with pytest.raises(ProtocolError, match="DP-FedAvg noise"):
        hfl.run_local(clients, 10, config=hfl.HFLConfig(rounds=2, dp_noise=2.0), timeout=5, server=weaker)


def test_the_cli_reports_the_guarantee_in_json_and_the_model_file(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "fedavg", "--dataset", "digits", "--rounds", "2", "--dp-epsilon", "2", "--drop", "1",
                 "--model-dir", str(tmp_path / "m"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    g = out["privacy"][DEFENCE]
    assert out["survivors"] == [5, 4] and g["survivors"] == [5, 4] and g["epsilon"] > 2.0  # realised, one dropout
    assert g["params"]["announced_epsilon"] == pytest.approx(2.0, rel=1e-4) and g["delta"] == 1e-5
    with np.load(tmp_path / "m" / "server.npz") as z:
        meta = json.loads(bytes(z["__meta__"]))
        assert meta["privacy"][DEFENCE]["epsilon"] == g["epsilon"] and z["a_w"].shape == (P,)
