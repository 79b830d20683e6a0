"""Vertical logistic regression: plain = centralized GD, secure = plain, Titanic figures,
label-leakage audit, and hostile inputs (missing/extra party, misaligned IDs, stalls)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from vflcrypto.protocols import logreg as lr

from vflcrypto.audit.ledger import audit
from vflcrypto.errors import (
    EncodingOverflowError,
    InputDataError,
    PeerTimeoutError,
    ProtocolError,
)
from vflcrypto.runtime.channel import Endpoint, LocalNetwork, run_parties


@pytest.fixture(scope="module")
def titanic() -> lr.TitanicSplit:
    return lr.titanic_parties()


def _synthetic(n: int = 60, dims: tuple[int, ...] = (2, 3, 1), seed: int = 3):
    rng = np.random.default_rng(seed)
    blocks = [rng.normal(size=(n, d)) for d in dims]
    blocks[0] = np.column_stack([blocks[0], np.ones(n)])
    X = np.hstack(blocks)
    w_true = rng.normal(size=X.shape[1])
    y = (rng.random(n) < lr.sigmoid(X @ w_true)).astype(float)
    return blocks, X, y


# --------------------------------------------------------------------------- correctness


def test_plain_equals_centralized_gradient_descent() -> None:
    blocks, X, y = _synthetic()
    run = lr.run_local(blocks, y, steps=25, learning_rate=0.3)
    w_ref, losses = lr.centralized_gd(X, y, 25, 0.3)
    np.testing.assert_allclose(run.weights, w_ref, atol=1e-9, rtol=0)
    np.testing.assert_allclose(run.active.loss_history, losses, atol=1e-9, rtol=0)
    p_ref = lr.sigmoid(X @ w_ref)
    assert run.active.train_loss == pytest.approx(lr.bce_loss(y, p_ref), abs=1e-9)


def test_secure_equals_plain_within_fixed_point(small_paillier_keys) -> None:
    blocks, _, y = _synthetic(n=40)
    plain = lr.run_local(blocks, y, steps=6, learning_rate=0.5)
    secure = lr.run_local(blocks, y, secure=True, steps=6, learning_rate=0.5,
                          keys=small_paillier_keys, allow_insecure=True)
    # z: 3 parties x 2^-33 rounding; gradient: 2^-40 per encoded factor, 40 rows.
    np.testing.assert_allclose(secure.weights, plain.weights, atol=1e-7, rtol=0)
    np.testing.assert_allclose(secure.active.loss_history, plain.active.loss_history, atol=1e-7)
    assert secure.active.train_loss == pytest.approx(plain.active.train_loss, abs=1e-7)


def test_titanic_figures(titanic: lr.TitanicSplit) -> None:
    assert [len(c) for c in titanic.columns] == [3, 2, 2]
    assert len(titanic.y_train) == 713 and len(titanic.y_test) == 178
    run = lr.run_local(list(titanic.X_train), titanic.y_train, list(titanic.X_test),
                       titanic.y_test, steps=20, learning_rate=0.5)
    a = run.active
    assert a.loss_history[0] == pytest.approx(math.log(2), abs=1e-12)
    assert a.loss_history[-1] == pytest.approx(0.4524, abs=5e-4)
    assert a.train_loss == pytest.approx(0.4510, abs=5e-4)
    assert a.test_loss == pytest.approx(0.4692, abs=5e-4)
    assert a.test_accuracy == pytest.approx(138 / 178)


def test_titanic_preprocessing_uses_training_rows_only(titanic: lr.TitanicSplit) -> None:
    for block in titanic.X_train:
        feats = block[:, : (block.shape[1] - 1 if block is titanic.X_train[0] else block.shape[1])]
        np.testing.assert_allclose(feats.mean(axis=0), 0, atol=1e-12)
        np.testing.assert_allclose(feats.std(axis=0), 1, atol=1e-12)
    assert np.all(titanic.X_train[0][:, -1] == 1.0)
    assert not np.all(np.abs(titanic.X_test[1].mean(axis=0)) < 1e-12)


def test_masked_logits_cancel_hide_and_are_fresh_per_step() -> None:
    """The masks cancel in the sum of one step; a party's masked logits are not its logits; and
    the masks are fresh per step (across calls): with a mask repeated, the difference of two
    steps' masked logits would be exactly the difference of the logits."""
    seeds = {("a", "b"): b"\x01" * 32, ("a", "c"): b"\x02" * 32, ("b", "c"): b"\x03" * 32}
    names = ["a", "b", "c"]
    zs = [np.array([0.5, -1.25, 3.0]), np.array([-0.5, 2.0, 0.0]), np.array([1e-3, 0.0, -7.5])]
    masked, later = [], []
    for me, z in zip(names, zs, strict=True):
        mine = {p: seeds[tuple(sorted((me, p)))] for p in names if p != me}
        masked.append(lr.mask_logits(z, me, mine, "step:0"))
        later.append(lr.mask_logits(z[::-1], me, mine, "step:1"))
    np.testing.assert_allclose(lr.unmask_sum(masked), sum(zs), atol=3 * 2.0**-32)
    np.testing.assert_allclose(lr.unmask_sum(later), sum(zs)[::-1], atol=3 * 2.0**-32)
    assert not np.allclose(lr.decode_ring(masked[0]), zs[0], atol=1)
    for m0, m1, z in zip(masked, later, zs, strict=True):
        # uint64 wraps mod 2^64, the ring: an equal entry has probability 2^-64
        assert ((m1 - m0) != (lr.encode_ring(z[::-1]) - lr.encode_ring(z))).all()
    with pytest.raises(EncodingOverflowError):
        lr.encode_ring(np.array([1e12]))


# --------------------------------------------------------------------------- audit


def test_audit_plain_recovers_every_label_secure_only_base_rate() -> None:
    outcome = lr.audit_run(key_bits=512, allow_insecure=True, steps=3)
    plain = outcome.finding("label recovery from logreg.residual")
    assert plain.value == 1.0 and plain.flagged and plain.by_design
    for k in range(3):
        secure = outcome.finding("label recovery from logreg.encrypted_residual", f"passive-{k}")
        assert not secure.flagged and secure.protection is not None
        assert secure.baseline < 0.7 and secure.samples == 713
    # 3 parties x (3 steps + the train predictions) x 713 rows, plus the 178 test rows each
    assert outcome.finding("masked logits: uniform over Z_M").samples == 3 * (3 + 1) * 713 + 3 * 178
    outcome.report.check()


def test_secure_transcript_kinds_per_role(small_paillier_keys) -> None:
    blocks, _, y = _synthetic(n=20)
    run = lr.run_local(blocks, y, blocks and [b[:5] for b in blocks], y[:5], secure=True,
                       steps=2, keys=small_paillier_keys, allow_insecure=True)
    rep = audit(run.transcript)
    rep.check()
    assert rep.kinds_received("active") == {"logreg.masked_logits", "logreg.masked_gradient",
                                            "logreg.ack"}
    for k in range(3):
        assert rep.kinds_received(f"passive-{k}") == {
            "logreg.setup", "logreg.key_share", "logreg.request",
            "logreg.encrypted_residual", "logreg.gradient_reply"}
    kinds = set(run.transcript.kinds())
    assert "logreg.residual" not in kinds and "logreg.logits" not in kinds


def test_plain_transcript_kinds_per_role() -> None:
    blocks, _, y = _synthetic(n=20)
    run = lr.run_local(blocks, y, steps=2)
    rep = audit(run.transcript)
    rep.check()
    assert rep.kinds_received("active") == {"logreg.logits", "logreg.ack"}
    assert rep.kinds_received("passive-1") == {"logreg.setup", "logreg.request", "logreg.residual"}


# --------------------------------------------------------------------------- hostile cases


def _net(names: list[str], **kw) -> LocalNetwork:
    eps = [Endpoint("active", "active")] + [Endpoint(n, "passive") for n in names]
    return LocalNetwork(eps, links=[("active", n) for n in names], timeout=kw.pop("timeout", 2.0),
                        run_id="t", **kw)


def test_missing_party_is_a_clear_error() -> None:
    _, _, y = _synthetic(n=10)
    net = _net(["passive-0", "passive-1"])
    with pytest.raises(ProtocolError, match=r"no channel to configured party \['passive-2'\]"):
        lr.run_active(net.channels("active"), y, parties=["passive-0", "passive-1", "passive-2"])


def test_extra_party_is_a_clear_error() -> None:
    _, _, y = _synthetic(n=10)
    net = _net(["passive-0", "passive-1", "intruder"])
    with pytest.raises(ProtocolError, match=r"unexpected party \['intruder'\]"):
        lr.run_active(net.channels("active"), y, parties=["passive-0", "passive-1"])


def test_no_feature_party_is_refused() -> None:
    with pytest.raises(InputDataError):
        lr.run_local([], np.array([0.0, 1.0]))


def test_mismatched_ids_fail_before_training() -> None:
    blocks, _, y = _synthetic(n=10)
    ids = [str(i) for i in range(10)]
    other = list(reversed(ids))
    with pytest.raises(InputDataError, match="not aligned"):
        lr.run_local(blocks, y, steps=2, ids_train=[ids, ids, other, ids], timeout=5)


def test_mismatched_row_count() -> None:
    blocks, _, y = _synthetic(n=10)
    blocks[1] = blocks[1][:9]
    with pytest.raises(InputDataError, match="passive-1 has 9 training rows"):
        lr.run_local(blocks, y, steps=2, timeout=5)


def test_stalled_party_times_out() -> None:
    blocks, _, y = _synthetic(n=10)

    def stall(channels):
        time.sleep(5)

    # generous timeout: the active party (waiting 2 s) must report before the feature
    # parties (waiting twice as long) even on a loaded machine
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match="passive-2"):
        lr.run_local(blocks, y, steps=2, timeout=2.0, overrides={"passive-2": stall})
    assert time.monotonic() - t0 < 15


def test_party_vanishing_mid_run_fails_fast(small_paillier_keys) -> None:
    blocks, _, y = _synthetic(n=10)

    def vanish(channels):
        channels["active"].recv(lr.Setup)
        raise RuntimeError("node crashed")

    with pytest.raises(RuntimeError, match="node crashed"):
        lr.run_local(blocks, y, steps=2, timeout=5, overrides={"passive-1": vanish})


def test_forged_key_share_is_rejected() -> None:
    blocks, _, y = _synthetic(n=10)
    names = ["passive-0", "passive-1"]
    eps = [Endpoint("active", "active")] + [Endpoint(n, "passive") for n in names]
    net = LocalNetwork(eps, timeout=5, run_id="r", allow_insecure=True)
    ident = {n: Ed25519PrivateKey.generate() for n in names}
    wrong = Ed25519PrivateKey.generate().public_key()
    tasks = {
        "active": lambda: lr.run_active(net.channels("active"), y, parties=names, secure=True,
                                        steps=1, key_bits=512, allow_insecure=True),
        "passive-0": lambda: lr.run_passive(net.channels("passive-0"), "passive-0", blocks[0],
                                            identity=ident["passive-0"],
                                            peer_identities={"passive-1": wrong}),
        "passive-1": lambda: lr.run_passive(net.channels("passive-1"), "passive-1", blocks[1],
                                            identity=ident["passive-1"],
                                            peer_identities={"passive-0": ident["passive-0"].public_key()}),
    }
    with pytest.raises(ProtocolError, match="fails authentication"):
        run_parties(tasks, network=net, timeout=20)


def test_non_binary_labels_refused() -> None:
    blocks, _, y = _synthetic(n=10)
    with pytest.raises(InputDataError, match="0/1"):
        lr.run_local(blocks, y * 2, steps=1, timeout=5)
