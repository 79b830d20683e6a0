"""Tests of vflcrypto.sharing.masking: ranges, uniformity, shares, pairwise cancellation, seeds."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from vflcrypto.errors import EncodingOverflowError, InsecureParameterError, ProtocolError
from vflcrypto.sharing import masking
from vflcrypto.sharing.masking import (
    STAT_SECURITY_BITS,
    additive_shares,
    agree_seed,
    mask_fixed,
    pairwise_mask,
    pairwise_masks,
    reconstruct,
    seed_context,
    share,
    signed_pairwise_mask,
    statistical_mask,
    statistical_mask_bits,
    statistical_masks,
    uniform_mod,
    unmask_fixed,
)

# chi-square critical value, 15 degrees of freedom, p = 0.001 (false alarm 1 in 1000 runs)
CHI2_15_CRIT = 37.70


def _chi2_uniform(values: list[int], modulus: int, buckets: int = 16) -> float:
    counts = np.bincount([v * buckets // modulus for v in values], minlength=buckets)
    expected = len(values) / buckets
    return float(((counts - expected) ** 2 / expected).sum())


def test_uniform_mod_is_in_range_uniform_and_fresh_per_call() -> None:
    n = (1 << 127) - 1
    vals = uniform_mod(n, 4000)
    assert all(0 <= v < n for v in vals) and len(set(vals)) == 4000
    assert set(uniform_mod(n, 4000)).isdisjoint(vals)  # fresh across calls too (a repeat: p < 2^-103)
    assert _chi2_uniform(vals, n) < CHI2_15_CRIT
    # The test can fail: a visibly biased generator is rejected.
    assert _chi2_uniform([v // 2 for v in vals], n) > CHI2_15_CRIT


def test_statistical_masks_use_their_bits_uniformly_and_are_fresh_per_call() -> None:
    assert STAT_SECURITY_BITS == 40 and statistical_mask_bits(20) == 60
    masks = statistical_masks(4000, 20)
    assert all(0 <= m < 1 << 60 for m in masks)
    assert max(masks).bit_length() == 60  # top bit used (fails with probability 2^-4000)
    assert _chi2_uniform(masks, 1 << 60) < CHI2_15_CRIT
    assert set(statistical_masks(4000, 20)).isdisjoint(masks)  # fresh across calls (a repeat: p < 2^-36)
    arr = statistical_mask((3, 2), 10, 16)
    assert arr.shape == (3, 2) and arr.dtype == object
    assert all(0 <= int(v) < 1 << 66 for v in arr.ravel())


def test_insecure_sec_bits_refused() -> None:
    with pytest.raises(InsecureParameterError):
        statistical_masks(3, 20, sec_bits=39)
    with pytest.raises(InsecureParameterError):
        mask_fixed(np.zeros(2), 16, 4, sec_bits=20)
    assert len(statistical_masks(3, 20, sec_bits=8, allow_insecure=True)) == 3


def test_mask_fixed_round_trip() -> None:
    x = np.array([-3.25, 0.0, 7.5, 1e-3])
    masked, masks = mask_fixed(x, frac_bits=20, value_bits=4)
    np.testing.assert_allclose(unmask_fixed(masked, masks, 20), x, atol=2 ** -20)
    with pytest.raises(EncodingOverflowError):
        mask_fixed(np.array([16.0]), 20, 4)


def test_masked_distribution_independent_of_secret() -> None:
    # Two secrets at the extremes of the range; masked values must be indistinguishable
    # in a bucket test. With sec_bits = 40 the true distance is <= 2^-40.
    k, n = 8, 6000
    lo, hi = -(1 << k) + 1, (1 << k) - 1
    width = 1 << (k + STAT_SECURITY_BITS)
    a = np.array([lo + m for m in statistical_masks(n, k)], dtype=float) / width
    b = np.array([hi + m for m in statistical_masks(n, k)], dtype=float) / width
    edges = np.linspace(0, 1, 17)
    ca, _ = np.histogram(a, edges)
    cb, _ = np.histogram(b, edges)
    chi2 = float((((ca - cb) ** 2) / np.maximum(ca + cb, 1)).sum())  # two-sample chi-square
    assert chi2 < CHI2_15_CRIT
    # Sanity: the same test catches a mask too short to hide (sec_bits = 1).
    weak_w = 1 << (k + 1)
    wa = [lo + m for m in statistical_masks(n, k, sec_bits=1, allow_insecure=True)]
    wb = [hi + m for m in statistical_masks(n, k, sec_bits=1, allow_insecure=True)]
    e = np.linspace(lo, hi + weak_w, 17)
    ca, _ = np.histogram(wa, e)
    cb, _ = np.histogram(wb, e)
    assert float((((ca - cb) ** 2) / np.maximum(ca + cb, 1)).sum()) > CHI2_15_CRIT


def test_shares_reconstruct() -> None:
    n = (1 << 64) + 13
    vals = [0, 1, -1, 12345, -(n // 2) + 1, n // 2]
    s0, s1 = share(vals, n)
    assert all(0 <= v < n for v in s0 + s1)
    assert reconstruct(s0, s1, n) == vals
    a0, a1 = additive_shares([5, -5], 97)
    assert reconstruct(a0, a1, 97) == [5, -5]
    assert reconstruct(a0, a1, 97, signed=False) == [5, 92]


def _keys() -> tuple[X25519PrivateKey, X25519PrivateKey]:
    return X25519PrivateKey.generate(), X25519PrivateKey.generate()


def test_agreed_seeds() -> None:
    ka, kb = _keys()
    ctx = seed_context("alice", "bob", "run-1")
    assert ctx == seed_context("bob", "alice", "run-1")
    sa = agree_seed(ka, kb.public_key(), ctx)
    sb = agree_seed(kb, ka.public_key(), ctx)
    assert sa == sb and len(sa) == 32
    assert agree_seed(ka, kb.public_key(), seed_context("alice", "bob", "run-2")) != sa
    assert agree_seed(ka, kb.public_key(), seed_context("alice", "carol", "run-1")) != sa
    with pytest.raises(ProtocolError):
        agree_seed(ka, kb.public_key(), b"")


def test_pairwise_masks_cancel_over_three_parties() -> None:
    names = ["p0", "p1", "p2"]
    keys = {n: X25519PrivateKey.generate() for n in names}
    modulus, length = (1 << 61) - 1, 50
    rng = np.random.default_rng(1)
    inputs = {n: [int(v) for v in rng.integers(0, 1000, length)] for n in names}
    masked = {}
    for me in names:
        out = list(inputs[me])
        for peer in names:
            if peer == me:
                continue
            seed = agree_seed(keys[me], keys[peer].public_key(), seed_context(me, peer, "r"))
            pm = signed_pairwise_mask(me, peer, seed, length, modulus)
            out = [(o + m) % modulus for o, m in zip(out, pm, strict=True)]
        masked[me] = out
        assert out != inputs[me]
    total = [sum(col) % modulus for col in zip(*masked.values(), strict=True)]
    assert total == [sum(col) for col in zip(*inputs.values(), strict=True)]


def test_pairwise_prg_deterministic_and_uniform() -> None:
    seed = bytes(range(32))
    m = (1 << 40) + 15
    a = pairwise_masks(seed, 3000, m)
    assert a == pairwise_masks(seed, 3000, m) and a != pairwise_masks(bytes(32), 3000, m)
    assert all(0 <= v < m for v in a)
    assert _chi2_uniform(a, m) < CHI2_15_CRIT
    assert pairwise_mask(seed, 5, m, -1) == [(-v) % m for v in a[:5]]
    assert pairwise_mask(seed, 5, 64, 1) == pairwise_masks(seed, 5, 1 << 64)
    with pytest.raises(ProtocolError):
        signed_pairwise_mask("a", "a", seed, 3, m)


def test_randomness_seam_for_known_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(masking, "_randbelow", lambda n: n - 1)
    assert uniform_mod(10, 3) == [9, 9, 9]
    assert share([4], 10) == ([9], [5])
