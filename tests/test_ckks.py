"""Tests of vflcrypto.he.ckks: accuracy against numpy and TenSEAL, keys, depth, wire.

Accuracy is checked on raw decryptions (``flood=False``, the key holder's own view); the
flooding that :meth:`CKKSVector.decrypt` adds by default is tested in tests/test_ckks_flooding.py."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from vflcrypto.errors import (
    DecodeError,
    EncodingError,
    InsecureParameterError,
    KeyMismatchError,
)
from vflcrypto.he.ckks import CKKSContext, CKKSVector, mask_bound, mask_hiding_bits, uniform_real_mask
from vflcrypto.runtime import wire
from vflcrypto.runtime.channel import Endpoint, LocalNetwork
from vflcrypto.runtime.declarations import Protection, declare

TOL = 1e-3  # observed raw errors are ~1e-9 or smaller at scale 2^54


@declare("test.ckks_vec", sender="active", receiver="passive",
         protection=Protection.CIPHERTEXT, key_owner="active",
         reveals="nothing without the active party's secret key")
@dataclass(frozen=True)
class CkksVecMsg:
    vec: CKKSVector


@declare("test.ckks_ctx", sender="active", receiver="passive",
         protection=Protection.PUBLIC, reveals="the public CKKS context")
@dataclass(frozen=True)
class CkksCtxMsg:
    ctx: CKKSContext


@pytest.fixture(scope="module")
def ctx() -> CKKSContext:
    return CKKSContext.generate()


@pytest.fixture(scope="module")
def other_ctx() -> CKKSContext:
    return CKKSContext.generate(galois_keys=False)


@pytest.fixture()
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def test_parameters_and_public(ctx: CKKSContext) -> None:
    assert ctx.has_secret_key and ctx.slots == 8192 and ctx.max_depth == 3
    assert ctx.coeff_mod_bit_sizes == (60, 54, 54, 54, 60) and ctx.global_scale_bits == 54
    assert len(ctx.coeff_moduli) == 5 and all(q % (2 * 16384) == 1 for q in ctx.coeff_moduli)
    pub = ctx.public()
    assert not pub.has_secret_key
    assert pub.fingerprint == ctx.fingerprint == CKKSContext.from_bytes(pub.to_bytes()).fingerprint
    assert repr(ctx) == f"CKKSContext(secret, fingerprint={ctx.fingerprint})"


def test_insecure_parameters_refused() -> None:
    with pytest.raises(InsecureParameterError, match="218"):
        CKKSContext.generate(8192, (60, 40, 40, 40, 60), 40, galois_keys=False)
    small = {"poly_modulus_degree": 4096, "coeff_mod_bit_sizes": (40, 20, 40),
             "global_scale_bits": 20, "galois_keys": False}
    with pytest.raises(InsecureParameterError, match="8192"):
        CKKSContext.generate(**small)
    insecure = CKKSContext.generate(allow_insecure=True, **small)
    with pytest.raises(InsecureParameterError):
        CKKSContext.from_bytes(insecure.public().to_bytes())


def test_arithmetic_matches_numpy_across_chunks(ctx: CKKSContext, rng: np.random.Generator) -> None:
    n = 17000  # three ciphertexts of 8192 slots
    x, y, z = rng.normal(size=(3, n))
    v = CKKSVector.encrypt(ctx.public(), x)
    w = CKKSVector.encrypt(ctx.public(), y)
    assert len(v) == n and len(v._parts) == 3
    np.testing.assert_allclose(v.decrypt(ctx, flood=False), x, atol=TOL)
    np.testing.assert_allclose((v + w).decrypt(ctx, flood=False), x + y, atol=TOL)
    np.testing.assert_allclose((v - w + z).decrypt(ctx, flood=False), x - y + z, atol=TOL)
    np.testing.assert_allclose((v + 2.5).decrypt(ctx, flood=False), x + 2.5, atol=TOL)
    np.testing.assert_allclose((v * z).decrypt(ctx, flood=False), x * z, atol=TOL)
    np.testing.assert_allclose((-v * 3.0).decrypt(ctx, flood=False), -3 * x, atol=TOL)
    np.testing.assert_allclose(v.sum().decrypt(ctx, flood=False), [x.sum()], atol=TOL)


def test_dot_matches_numpy_and_tenseal(ctx: CKKSContext, rng: np.random.Generator) -> None:
    n, m = 5000, 4
    x = rng.normal(size=n)
    X = rng.normal(size=(n, m))
    v = CKKSVector.encrypt(ctx.public(), x)
    d = v.dot(X)
    assert len(d) == m
    np.testing.assert_allclose(d.decrypt(ctx, flood=False), X.T @ x, atol=TOL)
    # Reference: TenSEAL's own decryption of the raw ciphertext; the slots beyond the
    # result hold zeros, not partial sums a key owner could read.
    raw = np.array(d._parts[0].decrypt(ctx._ts.secret_key()))
    np.testing.assert_allclose(raw[:m], X.T @ x, atol=TOL)
    assert np.abs(raw[m:]).max() < 1e-4
    raw_sum = np.array(v.sum()._parts[0].decrypt(ctx._ts.secret_key()))
    assert np.abs(raw_sum[1:]).max() < 1e-4


def test_depth_exhaustion_is_a_clear_error(ctx: CKKSContext) -> None:
    v = CKKSVector.encrypt(ctx, np.ones(4))
    with pytest.raises(EncodingError, match="level"):
        (v * 2.0 * 2.0).dot(np.ones((4, 2)))
    with pytest.raises(EncodingError, match="level"):
        v * 2.0 * 2.0 * 2.0 * 2.0
    with pytest.raises(EncodingError):
        v + CKKSVector.encrypt(ctx, np.ones(5))
    with pytest.raises(EncodingError):
        CKKSVector.encrypt(ctx, [1.0, np.nan])


def test_keys(ctx: CKKSContext, other_ctx: CKKSContext) -> None:
    v = CKKSVector.encrypt(ctx.public(), np.arange(3.0))
    with pytest.raises(KeyMismatchError):
        v.decrypt(ctx.public())
    with pytest.raises(KeyMismatchError):
        v.decrypt(other_ctx)
    with pytest.raises(KeyMismatchError):
        v + CKKSVector.encrypt(other_ctx, np.arange(3.0))


def test_wire_round_trip_over_channel(ctx: CKKSContext, rng: np.random.Generator) -> None:
    x = rng.normal(size=10)
    net = LocalNetwork([Endpoint("a", "active"), Endpoint("p", "passive")], timeout=30)
    to_p, to_a = net.channels("a")["p"], net.channels("p")["a"]
    with pytest.raises(KeyMismatchError, match="refusing to serialize a CKKS context holding a secret key"):
        to_p.send(CkksCtxMsg(ctx))
    to_p.send(CkksCtxMsg(ctx.public()))
    pub = to_a.recv(CkksCtxMsg).ctx
    assert pub.fingerprint == ctx.fingerprint and not pub.has_secret_key
    to_p.send(CkksVecMsg(CKKSVector.encrypt(ctx, x)))
    with pytest.raises(KeyMismatchError):
        to_a.recv(CkksVecMsg)  # the passive party has not accepted the context yet
    to_a.keyring.add(pub)
    to_p2 = LocalNetwork([Endpoint("a", "active"), Endpoint("p", "passive")], timeout=30)
    to_p2.keyrings["p"].add(pub)
    to_p2.channels("a")["p"].send(CkksVecMsg(CKKSVector.encrypt(ctx, x)))
    got = to_p2.channels("p")["a"].recv(CkksVecMsg).vec
    np.testing.assert_allclose((got * 2.0).decrypt(ctx, flood=False), 2 * x, atol=TOL)


def test_tampered_bytes_raise_decode_error(ctx: CKKSContext) -> None:
    v = CKKSVector.encrypt(ctx, np.arange(4.0))
    dctx = wire.DecodeContext(wire.KeyRing([ctx.public()]))
    data = wire.encode_value(v)
    assert wire.decode_value(data, CKKSVector, dctx).decrypt(ctx, flood=False)[3] == pytest.approx(3.0)
    parts = v.to_parts_bytes()
    for bad in ([parts[0][:200]], [b"\x00" * 64], [], [parts[0], parts[0]]):
        with pytest.raises(DecodeError):
            CKKSVector.from_parts_bytes(ctx.public(), 4, bad)
    with pytest.raises(DecodeError):
        wire.decode_value(data[:-50], CKKSVector, dctx)
    with pytest.raises(DecodeError):
        CKKSContext.from_bytes(ctx.public().to_bytes()[:1000])


def test_mask_hiding_is_honest(ctx: CKKSContext) -> None:
    # the last level (q0 alone: 60 - 54 - 1 bits); one level left (q0 q1: 59 bits, capped at 2^32 by float64)
    assert mask_bound(ctx) == 2.0 ** 5 and mask_bound(ctx, 1) == mask_bound(ctx, 3) == 2.0 ** 32
    assert mask_hiding_bits(ctx, 1.0) == 4 and mask_hiding_bits(ctx, 1.0, 1) == 31
    assert mask_hiding_bits(ctx, 64.0, 1) == 25 and mask_hiding_bits(ctx, 2.0 ** 4) == 0
    with pytest.raises(EncodingError):
        mask_bound(ctx, 4)
    r = uniform_real_mask(ctx, 1000, 1.0, 1)
    assert np.abs(r).max() <= mask_bound(ctx, 1) and r.std() > 2.0 ** 30
    v = CKKSVector.encrypt(ctx, np.full(1000, 0.5)) + r
    np.testing.assert_allclose(v.decrypt(ctx, flood=False) - r, 0.5, atol=TOL)
