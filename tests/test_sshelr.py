"""Two-party SSHE logistic regression: equal to the same Taylor gradient descent in the clear
(to fixed-point precision), close to scikit-learn's LogisticRegression in accuracy and AUC (on
generated data and on FATE's breast), and hostile peers get specific errors."""

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
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from vflcrypto.protocols import sshelr

from vflcrypto.cli import main
from vflcrypto.data.files import write_csv_atomic
from vflcrypto.errors import InputDataError, KeyMismatchError, PeerTimeoutError, ProtocolError
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.runtime.channel import Channel
from vflcrypto.runtime.steps import drive

FATE = Path(__file__).resolve().parents[2] / "shared" / "data" / "fate"


@pytest.fixture(scope="module")
def keys() -> Any:
    return generate_keypair(512, allow_insecure=True), generate_keypair(512, allow_insecure=True)


def _sklearn(Za: np.ndarray, y: np.ndarray, Zp: np.ndarray) -> tuple[float, float]:
    Z = np.hstack([Za, Zp])
    z = LogisticRegression(max_iter=5000).fit(Z, y).decision_function(Z)
    return float(np.mean((z > 0) == (y == 1))), float(roc_auc_score(y, z))


def _scores(run: Any, Xa: np.ndarray, y: np.ndarray, Xp: np.ndarray) -> tuple[float, float]:
    z = sshelr.logits(run, Xa, y, Xp)
    return float(np.mean((z > 0) == (y == 1))), float(roc_auc_score(y, z))


def test_secure_iterations_equal_the_plaintext_taylor_descent(keys: Any) -> None:
    Xa, y, _, Xp, _ = sshelr.example(200)
    params = sshelr.SSHELRParams(epochs=6)
    run = sshelr.run_local(Xa, y, Xp, params=params, keys=keys, allow_insecure=True)
    Za, yy = sshelr.prepare_active(Xa, y)
    wa, wp = sshelr.plaintext_fit(Za, yy, sshelr.prepare_passive(Xp), params)
    # local truncation: at most 2^-32 per weight and epoch, propagated by the descent
    np.testing.assert_allclose(run.active, wa, atol=1e-8)
    np.testing.assert_allclose(run.passive, wp, atol=1e-8)
    assert not np.allclose(wa, 0)


def test_accuracy_and_auc_close_to_scikit_learn(keys: Any) -> None:
    Xa, y, _, Xp, _ = sshelr.example(400)
    run = sshelr.run_local(Xa, y, Xp, params=sshelr.SSHELRParams(epochs=10), keys=keys, allow_insecure=True)
    acc, auc = _scores(run, Xa, y, Xp)
    ref_acc, ref_auc = _sklearn(sshelr.prepare_active(Xa, y)[0], y, sshelr.prepare_passive(Xp))
    assert acc >= ref_acc - 0.03 and auc >= ref_auc - 0.01, (acc, ref_acc, auc, ref_auc)


@pytest.mark.skipif(not (FATE / "breast_hetero_guest.csv").exists(), reason="../shared data absent")
def test_fate_breast_close_to_scikit_learn(keys: Any) -> None:
    guest = pd.read_csv(FATE / "breast_hetero_guest.csv")
    host = pd.read_csv(FATE / "breast_hetero_host.csv").add_prefix("h_").rename(columns={"h_id": "id"})
    joined = guest.merge(host, on="id")
    y = joined["y"].to_numpy(float)
    Xa = joined[[c for c in guest.columns if c not in ("id", "y")]].to_numpy(float)
    Xp = joined[[c for c in host.columns if c != "id"]].to_numpy(float)
    run = sshelr.run_local(Xa, y, Xp, params=sshelr.SSHELRParams(epochs=8), keys=keys, allow_insecure=True)
    acc, auc = _scores(run, Xa, y, Xp)
    ref_acc, ref_auc = _sklearn(sshelr.prepare_active(Xa, y)[0], y, sshelr.prepare_passive(Xp))
    assert acc >= ref_acc - 0.04 and auc >= ref_auc - 0.01, (acc, ref_acc, auc, ref_auc)


def test_bad_labels_misalignment_and_a_too_small_modulus(keys: Any) -> None:
    Xa, y, _, Xp, _ = sshelr.example(60)
    with pytest.raises(InputDataError, match="labels 0 and 1"):
        sshelr.run_local(Xa, y * 2, Xp, keys=keys, allow_insecure=True)
    with pytest.raises(InputDataError, match="not aligned"):
        sshelr.run_local(Xa, y, Xp[:-1], keys=keys, allow_insecure=True)
    small = generate_keypair(256, allow_insecure=True)
    with pytest.raises(ProtocolError, match="cannot hold"):
        sshelr.run_local(Xa, y, Xp, keys=(keys[0], small), allow_insecure=True)


def _tamper(kind: type, fn: Any, keys: Any = None, n: int = 60) -> Any:
    """An override of the passive party (key pair ``keys``) that alters one kind of its outgoing messages."""
    def task(channels: dict[str, Channel]) -> Any:
        tamper_sends(channels, kind, fn)
        return drive(sshelr.PassiveRole(sshelr.example(n)[3], allow_insecure=True,
                                        keys=keys or generate_keypair(512, allow_insecure=True)), channels)
    return task


def test_hostile_passive_messages(keys: Any) -> None:
    Xa, y, _, Xp, _ = sshelr.example(60)
    cases: list[tuple[type, Any, type[Exception], str]] = [
        (sshelr.MaskedForActive, lambda m: dataclasses.replace(m, count=m.count - 1), InputDataError, "aligned"),
        (sshelr.MaskedForActive, lambda m: dataclasses.replace(m, values=m.values[:-1]), ProtocolError, "cannot hold"),
        (sshelr.MaskedForActive, lambda m: dataclasses.replace(m, stage=1 - m.stage), ProtocolError, "expected"),
        (sshelr.MaskedForActive, lambda m: dataclasses.replace(m, values=m.values + m.values.public_key.encrypt(
            [1 << 400] * len(m.values))), ProtocolError, "out of range"),
        (sshelr.WeightShare, lambda m: dataclasses.replace(m, values=type(m.values)([-1, *m.values])),
         ProtocolError, "outside"),
        (sshelr.RevealShare, lambda m: dataclasses.replace(m, values=type(m.values)(m.values[:-1])),
         ProtocolError, "revealed"),
    ]
    for kind, fn, exc, match in cases:
        with pytest.raises(exc, match=match):
            sshelr.run_local(Xa, y, Xp, params=sshelr.SSHELRParams(epochs=1), keys=keys, allow_insecure=True,
                             overrides={"passive-0": _tamper(kind, fn)})


def test_ciphertexts_under_the_wrong_key_are_refused(keys: Any) -> None:
    """Under a key nobody announced: refused on decoding; under an accepted key but the wrong
    one (the receiver's own for the peer's shares, the peer's for a masked product): by the step."""
    Xa, y, _, Xp, _ = sshelr.example(60)
    stranger, active_key, passive_key = generate_keypair(512, allow_insecure=True)[0], keys[0][0], keys[1][0]
    cases: list[tuple[type, Any, str]] = [
        (sshelr.PassiveCiphertexts, stranger, "has not accepted"),
        (sshelr.PassiveCiphertexts, active_key, "not under its own key"),
        (sshelr.MaskedForActive, passive_key, "not under this party's key"),
    ]
    for kind, key, match in cases:
        with pytest.raises(KeyMismatchError, match=match):
            sshelr.run_local(Xa, y, Xp, params=sshelr.SSHELRParams(epochs=1), keys=keys, allow_insecure=True,
                             overrides={"passive-0": _tamper(kind, lambda m, key=key: dataclasses.replace(
                                 m, values=key.encrypt([0] * len(m.values))), keys[1])})


def test_a_plan_other_than_the_passive_partys_is_refused(keys: Any) -> None:
    Xa, y, _, Xp, _ = sshelr.example(60)

    def strict(channels: dict[str, Channel]) -> Any:
        return drive(sshelr.PassiveRole(Xp, keys=keys[1], expected=sshelr.SSHELRParams(epochs=7)), channels)
    with pytest.raises(ProtocolError, match="differs from this party's"):
        sshelr.run_local(Xa, y, Xp, keys=keys, allow_insecure=True, overrides={"passive-0": strict})


def test_a_stalled_passive_party_times_out(keys: Any) -> None:
    Xa, y, _, Xp, _ = sshelr.example(40)
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match=r"sshelr\.public_key"):
        sshelr.run_local(Xa, y, Xp, keys=keys, allow_insecure=True, timeout=0.3,
                         overrides={"passive-0": lambda ch: time.sleep(1.0)})
    assert time.monotonic() - t0 < 5


def test_the_weights_never_travel_in_the_clear(keys: Any) -> None:
    """What each party received: shares and ciphertexts; the only plaintext is the owner's reveal."""
    from vflcrypto.runtime.channel import AuditTap

    Xa, y, _, Xp, _ = sshelr.example(80)
    tap = AuditTap()
    run = sshelr.run_local(Xa, y, Xp, params=sshelr.SSHELRParams(epochs=2), keys=keys, allow_insecure=True, tap=tap)
    for me, other_weights in (("active", run.passive), ("passive-0", run.active)):
        kinds = {type(m).__name__ for m in tap.received(me)}
        assert kinds == {"PublicKey", "WeightShare", "RevealShare", "Plan" if me != "active" else "PublicKey",
                         "ActiveCiphertexts" if me != "active" else "PassiveCiphertexts",
                         "MaskedForPassive" if me != "active" else "MaskedForActive"}
        revealed = [v for m in tap.received(me, sshelr.RevealShare) for v in m.values]
        encoded = {round(w * 2 ** sshelr.WEIGHT_FRAC) % sshelr.RING for w in other_weights}
        assert not encoded & set(revealed)


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Xa, y, ca, Xp, cp = sshelr.example(150)
    ids = [f"c{i:04d}" for i in range(150)]
    write_csv_atomic(tmp_path / "a.csv", ["id", "default", *ca],
                     [[ids[i], int(y[i]), *Xa[i].tolist()] for i in range(150)])
    write_csv_atomic(tmp_path / "p.csv", ["id", *cp], [[ids[i], *Xp[i].tolist()] for i in range(150)])
    assert main(["train", "sshelr", "--active", str(tmp_path / "a.csv"), "--passive", str(tmp_path / "p.csv"),
                 "--id-column", "id", "--label", "default", "--epochs", "4", "--key-bits", "512", "--allow-insecure",
                 "--aligned", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["passive_weights"]) == set(cp) and "(intercept)" in out["active_weights"]
    assert out["train_accuracy"] > 0.7 and out["train_auc"] > 0.75  # no held-out rows: named as training figures
    # the plaintext reference beside them: the same Taylor descent in the clear, to fixed-point precision
    assert out["train_auc"] == pytest.approx(out["plaintext_train_auc"], abs=1e-3)
    assert not {"accuracy", "auc"} & set(out)
