"""Secure Poisson regression: equal to the same iterations in the clear, within 1 % of
scikit-learn's PoissonRegressor deviance (on generated counts and on FATE's dvisits), and
hostile peers get specific errors."""

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
from sklearn.linear_model import PoissonRegressor
from vflcrypto.protocols import poisson

from vflcrypto.cli import main
from vflcrypto.data.files import write_csv_atomic
from vflcrypto.errors import InputDataError, KeyMismatchError, PeerTimeoutError, ProtocolError, TrainingDivergedError
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.runtime.channel import Channel

FATE = Path(__file__).resolve().parents[2] / "shared" / "data" / "fate"


@pytest.fixture(scope="module")
def keys() -> Any:
    return generate_keypair(512, allow_insecure=True)


def _sklearn_deviance(Xa: np.ndarray, y: np.ndarray, Xp: np.ndarray) -> float:
    X = np.hstack([Xa, Xp])
    return poisson.deviance(y, PoissonRegressor(alpha=0, max_iter=2000, tol=1e-10).fit(X, y).predict(X))


def test_secure_iterations_equal_the_plaintext_ones(keys: Any) -> None:
    Xa, y, _, Xp, _ = poisson.example(250)
    params = poisson.PoissonParams(epochs=6)
    run = poisson.run_local(Xa, y, Xp, params=params, keys=keys, allow_insecure=True)
    Za, yy = poisson.prepare_active(Xa, y)
    wa, wp, losses = poisson.plaintext_fit(Za, yy, poisson.prepare_passive(Xp), params)
    np.testing.assert_allclose(run.active, wa, atol=1e-9)
    np.testing.assert_allclose(run.passive, wp, atol=1e-9)
    np.testing.assert_allclose(run.losses, losses, atol=1e-7)


def test_deviance_within_one_percent_of_scikit_learn(keys: Any) -> None:
    Xa, y, _, Xp, _ = poisson.example(400)
    run = poisson.run_local(Xa, y, Xp, keys=keys, allow_insecure=True)
    dev = poisson.deviance(y, poisson.fitted_mean(run, Xa, y, Xp))
    assert dev <= 1.01 * _sklearn_deviance(Xa, y, Xp)


@pytest.mark.skipif(not (FATE / "dvisits_hetero_guest.csv").exists(), reason="../shared data absent")
def test_dvisits_deviance_within_one_percent(keys: Any) -> None:
    guest = pd.read_csv(FATE / "dvisits_hetero_guest.csv")
    host = pd.read_csv(FATE / "dvisits_hetero_host.csv")
    joined = guest.merge(host, on="id")
    y = joined["doctorco"].to_numpy(float)
    Xa = joined[["hscore", "chcond1", "chcond2"]].to_numpy(float)
    Xp = joined[[c for c in host.columns if c != "id"]].to_numpy(float)
    run = poisson.run_local(Xa, y, Xp, keys=keys, allow_insecure=True)
    dev = poisson.deviance(y, poisson.fitted_mean(run, Xa, y, Xp))
    assert dev <= 1.01 * _sklearn_deviance(Xa, y, Xp)


def test_bad_labels_misalignment_and_divergence(keys: Any) -> None:
    Xa, y, _, Xp, _ = poisson.example(60)
    with pytest.raises(InputDataError, match="non-negative integer counts"):
        poisson.run_local(Xa, y - 0.5, Xp, keys=keys, allow_insecure=True)
    with pytest.raises(InputDataError, match="not aligned"):
        poisson.run_local(Xa, y, Xp[:-1], keys=keys, allow_insecure=True)
    with pytest.raises(TrainingDivergedError, match="lower the learning rate"):
        poisson.run_local(Xa, y * 50, Xp, params=poisson.PoissonParams(epochs=30, learning_rate=50.0), keys=keys,
                          allow_insecure=True)


def _tamper(kind: type, fn: Any) -> Any:
    """An override of the passive party that alters one kind of its outgoing messages."""
    def task(channels: dict[str, Channel]) -> Any:
        from vflcrypto.runtime.steps import drive

        Xp = poisson.example(60)[3]
        tamper_sends(channels, kind, fn)
        return drive(poisson.PassiveRole(Xp), channels)
    return task


def test_hostile_passive_messages(keys: Any) -> None:
    Xa, y, _, Xp, _ = poisson.example(60)
    other = generate_keypair(512, allow_insecure=True)[0]
    with pytest.raises(InputDataError, match="not aligned"):
        poisson.run_local(Xa, y, Xp, keys=keys, allow_insecure=True, overrides={"passive-0": _tamper(
            poisson.EncryptedExp, lambda m: dataclasses.replace(m, exp_u=m.exp_u[:-1]))})
    with pytest.raises(KeyMismatchError):
        poisson.run_local(Xa, y, Xp, keys=keys, allow_insecure=True, overrides={"passive-0": _tamper(
            poisson.EncryptedExp, lambda m: dataclasses.replace(m, u=other.encrypt_fixed(np.zeros(60), 32)))})
    with pytest.raises(ProtocolError, match="returned"):
        def short(channels: dict[str, Channel]) -> Any:
            from vflcrypto.runtime.steps import drive

            role = poisson.CoordinatorRole(epochs=50, keys=keys)
            honest = role._reveal
            role._reveal = lambda msg: type(honest(msg))(list(honest(msg))[:-1])  # type: ignore[method-assign]
            return drive(role, channels)
        poisson.run_local(Xa, y, Xp, keys=keys, allow_insecure=True, overrides={"coordinator": short})


def test_a_plan_other_than_the_passive_partys_is_refused(keys: Any) -> None:
    Xa, y, _, Xp, _ = poisson.example(60)

    def strict(channels: dict[str, Channel]) -> Any:
        from vflcrypto.runtime.steps import drive

        return drive(poisson.PassiveRole(Xp, expected=poisson.PoissonParams(epochs=7)), channels)
    with pytest.raises(ProtocolError, match="differs from this party's"):
        poisson.run_local(Xa, y, Xp, keys=keys, allow_insecure=True, overrides={"passive-0": strict})


def test_a_stalled_passive_party_times_out(keys: Any) -> None:
    Xa, y, _, Xp, _ = poisson.example(40)
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match=r"poisson\.(exp_u|loss)"):
        poisson.run_local(Xa, y, Xp, keys=keys, allow_insecure=True, timeout=0.3,
                          overrides={"passive-0": lambda ch: time.sleep(1.0)})
    assert time.monotonic() - t0 < 5


def test_cli_json_reports_the_deviance_of_its_own_weights_near_the_optimum(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    Xa, y, ca, Xp, cp = poisson.example(200)
    ids = [f"p{i:04d}" for i in range(200)]
    write_csv_atomic(tmp_path / "a.csv", ["id", "claims", *ca],
                     [[ids[i], int(y[i]), *Xa[i].tolist()] for i in range(200)])
    write_csv_atomic(tmp_path / "p.csv", ["id", *cp], [[ids[i], *Xp[i].tolist()] for i in range(200)])
    assert main(["train", "poisson", "--active", str(tmp_path / "a.csv"), "--passive", str(tmp_path / "p.csv"),
                 "--id-column", "id", "--label", "claims", "--epochs", "20", "--key-bits", "512", "--allow-insecure",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["passive_weights"]) == set(cp) and "(intercept)" in out["active_weights"]
    assert "deviance" not in out  # named after the rows it was evaluated on: train_deviance
    # the reported deviance is that of the reported weights (on z-scored columns, intercept last at
    # the active party), computed here; 20 epochs bring it within 5 % of scikit-learn's optimum
    # (measured 2.8 %), well below the intercept-only model's (measured 0.978 < 0.951 * 1.05 < 1.070)
    X = np.hstack([Xa, Xp])
    Z = (X - X.mean(axis=0)) / X.std(axis=0)
    wa, wp = out["active_weights"], out["passive_weights"]
    eta = Z @ np.array([wa[c] for c in ca] + [wp[c] for c in cp]) + wa["(intercept)"]

    def mean_deviance(mu: np.ndarray) -> float:
        return float(2 * np.mean(np.where(y > 0, y * np.log(np.where(y > 0, y, 1.0) / mu), 0.0) - (y - mu)))

    assert out["train_deviance"] == pytest.approx(mean_deviance(np.exp(eta)), rel=1e-9)
    optimum = mean_deviance(PoissonRegressor(alpha=0, max_iter=1000, tol=1e-12).fit(Z, y).predict(Z))
    assert optimum <= out["train_deviance"] <= 1.05 * optimum < mean_deviance(np.full_like(y, y.mean()))
    assert len(out["coordinator_losses"]) == 20 and out["coordinator_losses"][-1] < out["coordinator_losses"][0]
