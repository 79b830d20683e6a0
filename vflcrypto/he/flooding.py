"""Noise flooding of CKKS decryptions that leave their key holder (the IND-CPA^D fix).

A CKKS decryption is the message *plus* an error that depends on the secret key; a party
that receives decryptions of ciphertexts whose message it knows recovers the key (Li and
Micciancio, "On the Security of Homomorphic Encryption on Approximate Numbers", EUROCRYPT
2021, §4–5). The fix is to add, before a decryption leaves its key holder, fresh Gaussian
noise much wider than that error (Li–Micciancio §5; Li, Micciancio, Schultz, Sorrell,
"Securing Approximate Homomorphic Encryption Using Differential Privacy", CRYPTO 2022).

**Where the noise goes.** OpenFHE (``NOISE_FLOODING_DECRYPT``) adds a discrete Gaussian to
each coefficient of the decrypted plaintext polynomial before decoding. TenSEAL's decryption
returns decoded values only (the real parts of the first ``len`` slots), so this module adds
the noise to those decoded values. That is the same release: decoding is linear, i.i.d.
Gaussian coefficient noise of deviation σ_c decodes to i.i.d. Gaussian noise of deviation
σ_c·√(N/2) on every slot's real part, and the values not released (imaginary parts, other
slots) are not seen. The flooded release is y = v + δ + g with v the exact result, δ the
CKKS error (key-dependent, float rounding of the decoding included) and g ~ N(0, σ²) drawn
here; the ideal release v + g reveals nothing about the key, and
KL(y ‖ v + g) = ‖δ‖² / (2σ²).

**How wide.** With V values released under one key in all (τ decryptions of k values each),
t a bound on the root mean square of their errors, and s bits of statistical security:
σ = 2^(s/2) · √(12·V) · t (:func:`flooding_sigma`), so the total divergence is at most
V·t²/(2σ²) = 2^-s / 24. This is OpenFHE's σ = √(12τ)·2^(s/2)·t (openfhe-development,
``src/pke/examples/CKKS_NOISE_FLOODING.md``; ``gen-cryptocontext-ckksrns``:
``logstd = s/2 + log2(sqrt(12·numAdversarialQueries))``, defaults s = 30 and τ = 1), with
OpenFHE's per-coefficient noise carried to the released slot values (V = τ·k; with all N/2
slots released the two coincide). For key recovery, a search problem, a divergence of
2^-s gives s bits of statistical security (Micciancio–Walter, EUROCRYPT 2018; LMSS 2022 §4),
which is why the noise grows as 2^(s/2), not 2^s.

**The statistical security parameter** is :data:`DEFAULT_STAT_BITS` = 30: OpenFHE's default
(``statisticalSecurity = 30``) and the value LMSS and OpenFHE's maintainers recommend (any
adversary, however strong, succeeds with probability at most 2^-30). 40 bits would cost
5 more bits of precision, which the toolkit's CKKS parameters cannot spare
(SECURITY.md, "CKKS noise flooding").

**The error bound t** is estimated, never measured on the key holder's own ciphertexts (its
size would itself depend on the key): :class:`ErrorModel` gives each slot's error variance
from the ring degree N, the scale Δ, the coefficient moduli and the operations, in the
central-limit (average-case) model of Costache, Curtis, Hales, Murphy, Ogilvie and Player,
"On the precision loss in approximate homomorphic encryption" (SAC 2023), for SEAL's
ternary secrets and errors of deviation 3.2:

* one rounding (a rescale, SEAL's modulus switch after encrypting at the key level):
  (1 + 2N/3)/12 per coefficient, times N/2 in a slot;
* encoding: 1/12 per coefficient; a fresh encryption: one rounding plus the encoding;
* a plaintext multiplication by p, then a rescale: Σ p²·(input) + Σ m²·(encoding) + rounding;
* a key switch (rotation) at primes q_i with special prime P: N·3.2²/3·Σ(q_i/P)² per
  coefficient (SEAL decomposes into residues in [0, q_i)), plus a rounding;
* :meth:`~vflcrypto.he.ckks.CKKSVector.dot` and ``sum``: the rotate-and-sum adds the N/2 slots'
  errors and (N/2 − 1) key-switch errors; the indicator multiply adds a rounding.

At the default parameters the measured error of a masked gradient of secure linear regression
varies from key to key between 0.4 and 1.8 times the model's deviation (the median over 12 dots
per key, 4 keys: 0.56, 0.63, 0.77, 1.67; tests/test_ckks_flooding.py). t is then the model's
deviation times :data:`MODEL_MARGIN` (two bits, above the worst key measured) times :func:`tail_factor`: the χ² tail
factor by which the mean square of V Gaussian errors exceeds their variance with
probability at most 2^-s (a failure probability added to the adversary's advantage).

**Randomness.** :func:`gaussian` draws from ``os.urandom`` (Box–Muller on 53-bit uniforms),
never from numpy's generator. Its tails end at 8.57σ (the 2^-53 granularity), which moves
the divergence by far less than 2^-s.

Imports: :mod:`vflcrypto.errors` only.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import EncodingError

__all__ = ["DEFAULT_STAT_BITS", "ERROR_STD_DEV", "MODEL_MARGIN", "ErrorModel", "Flooding", "chi2_cdf", "chi2_sf",
           "flooding_sigma", "gaussian", "tail_factor"]

DEFAULT_STAT_BITS = 30
ERROR_STD_DEV = 3.2  # SEAL's error distribution (seal_he_std_parms_error_std_dev)
MODEL_MARGIN = 4.0  # the error model's deviation times this (two bits: keys measured up to 1.8x) before the tail factor


def gaussian(size: int, sigma: float) -> np.ndarray:
    """``size`` i.i.d. N(0, σ²) samples from the OS CSPRNG (Box–Muller on 53-bit uniforms in (0, 1])."""
    if size < 0 or not sigma >= 0:
        raise EncodingError("gaussian needs size >= 0 and sigma >= 0")
    raw = np.frombuffer(os.urandom(16 * size), dtype=np.uint64).reshape(2, size) >> np.uint64(11)
    u1 = (raw[0].astype(np.float64) + 1.0) / 2.0**53
    u2 = raw[1].astype(np.float64) / 2.0**53
    return sigma * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)


def _gamma_tails(x: float, dof: int) -> tuple[float, float]:
    """(P, Q) of χ²_dof at x: the regularized incomplete gamma of dof/2 at x/2, each computed where it is
    accurate (the series for P below the mean, Lentz's continued fraction for Q above it)."""
    if x <= 0:
        return 0.0, 1.0
    a, z = dof / 2.0, x / 2.0
    front = math.exp(a * math.log(z) - z - math.lgamma(a))
    if z < a + 1.0:
        term = total = 1.0 / a
        k = a
        while abs(term) > 1e-17 * abs(total):
            k += 1.0
            term *= z / k
            total += term
        lower = min(1.0, front * total)
        return lower, 1.0 - lower
    tiny = 1e-300
    b = z + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    upper = min(1.0, front * h)
    return 1.0 - upper, upper


def chi2_cdf(x: float, dof: int) -> float:
    """P(χ²_dof <= x)."""
    return _gamma_tails(x, dof)[0]


def chi2_sf(x: float, dof: int) -> float:
    """P(χ²_dof > x), accurate far into the upper tail."""
    return _gamma_tails(x, dof)[1]


@functools.lru_cache(maxsize=1024)
def tail_factor(values: int, stat_bits: int = DEFAULT_STAT_BITS) -> float:
    """The factor c with P(mean square of ``values`` N(0, 1) draws > c²) = 2^-stat_bits.

    The exact χ²_V upper quantile (bisection on :func:`chi2_sf`): 6.1 for one value at 30
    bits, 1.22 for 400, 1.01 for 10^5.
    """
    if values < 1:
        raise EncodingError("tail_factor needs at least one value")
    target = 2.0**-stat_bits
    lo, hi = 1.0, 2.0 + 4.0 * stat_bits
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chi2_sf(values * mid, values) > target else (lo, mid)
    return math.sqrt(hi)


def flooding_sigma(error_rms: float, values: int, stat_bits: int = DEFAULT_STAT_BITS) -> float:
    """σ = 2^(stat_bits/2) · √(12·values) · error_rms: V·t²/(2σ²) = 2^-stat_bits / 24 (module docstring)."""
    if values < 1 or not error_rms > 0:
        raise EncodingError("flooding needs values >= 1 and a positive error bound")
    return 2.0 ** (stat_bits / 2) * math.sqrt(12.0 * values) * error_rms


@dataclass(frozen=True)
class Flooding:
    """How to flood the decryptions one key releases.

    ``error_std``: the error model's deviation of one released value (value units, from
    :class:`ErrorModel`); ``values``: how many values the key releases in all (V = τ·k: every
    decryption of the run, not only this one); ``stat_bits``: s.
    """

    error_std: float
    values: int
    stat_bits: int = DEFAULT_STAT_BITS

    def __post_init__(self) -> None:
        if not self.error_std > 0 or self.values < 1 or self.stat_bits < 1:
            raise EncodingError("flooding needs error_std > 0, values >= 1 and stat_bits >= 1")

    @property
    def error_bound(self) -> float:
        """t: the bound on the released errors' root mean square (deviation × margin × χ² tail factor)."""
        return self.error_std * MODEL_MARGIN * tail_factor(self.values, self.stat_bits)

    @property
    def sigma(self) -> float:
        """The flooding noise's standard deviation (value units)."""
        return flooding_sigma(self.error_bound, self.values, self.stat_bits)

    @property
    def bits(self) -> float:
        """log2(σ / error_std): the bits of precision flooding costs beyond the CKKS error itself."""
        return math.log2(self.sigma / self.error_std)

    def apply(self, values: np.ndarray) -> np.ndarray:
        """``values`` plus fresh N(0, σ²) noise per value."""
        arr = np.asarray(values, dtype=np.float64)
        return arr + gaussian(arr.size, self.sigma).reshape(arr.shape)


class ErrorModel:
    """Per-slot error variances of CKKS operations (units of 1/Δ², i.e. coefficient units squared).

    ``degree`` N, ``moduli`` the data primes q_0..q_L (in chain order), ``special`` the key-switch
    prime P, ``scale_bits`` log2 Δ. Formulas: module docstring.
    """

    def __init__(self, degree: int, moduli: Sequence[int], special: int, scale_bits: int) -> None:
        self.n, self.moduli, self.special, self.scale = degree, tuple(moduli), special, 2.0**scale_bits
        self.slots = degree // 2

    def rounding(self) -> float:
        """One rounding of (c0, c1): a rescale, or the modulus switch after encryption."""
        return (1.0 + 2.0 * self.n / 3.0) / 12.0 * self.slots

    def encoding(self) -> float:
        """Rounding a plaintext's coefficients to integers."""
        return self.slots / 12.0

    def fresh(self) -> float:
        """A fresh public-key encryption (SEAL encrypts at the key level and switches down)."""
        return self.rounding() + self.encoding()

    def keyswitch(self, primes: int) -> float:
        """One rotation of a ciphertext over the first ``primes`` data primes."""
        ratio = sum((q / self.special) ** 2 for q in self.moduli[:primes])
        return self.n * ERROR_STD_DEV**2 / 3.0 * ratio * self.slots + self.rounding()

    def multiply(self, variance: float, factor_sq: float, value_sq: float) -> float:
        """A slot after a plaintext multiplication and rescale (``factor_sq``: p², ``value_sq``: m²)."""
        return factor_sq * variance + value_sq * self.encoding() + self.rounding()

    def dot(self, variance: float, primes: int, factor_sq: float, value_sq: float) -> float:
        """One output of :meth:`~vflcrypto.he.ckks.CKKSVector.dot` on a ciphertext over ``primes`` data primes
        whose slots each carry ``variance``; ``factor_sq`` bounds Σ_i X_ij² (the plaintext column's squared
        norm), ``value_sq`` Σ_i v_i² (the encrypted values')."""
        rotations = self.slots.bit_length() - 1
        summed = (factor_sq * variance + value_sq * self.encoding() + self.slots * self.rounding()
                  + (self.slots - 1) * self.keyswitch(primes - 1))
        # the indicator multiply (TenSEAL's mm: a rotation per step of its replication) and its rescale
        return summed + rotations * self.keyswitch(primes - 1) + self.rounding()

    def std(self, variance: float) -> float:
        """A variance in coefficient units as a deviation in value units (divided by Δ)."""
        return math.sqrt(variance) / self.scale
