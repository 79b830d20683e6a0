"""The check that decryptions leaving a CKKS key holder carry their declared flooding noise.

A flooded release is the raw decryption plus fresh N(0, σ²) noise
(:mod:`vflcrypto.he.flooding`). The audit decrypts, with the key holder's own key, the same
ciphertexts raw and subtracts them from what the receiver got: the differences, divided by
each release's declared σ, must look like N(0, 1) draws. Flooding switched off leaves
differences of zero (or of rounding only); flooding below its declared width leaves them
too narrow. The test is one-sided on the variance: with n differences, Σz² ~ χ²_n, and
the check flags when P(χ²_n <= Σz²) < ALPHA. Its finding's value is the variance
shortfall 1 − Σz²/n (0 when the noise is as declared, 1 when there is none); it flags any
shortfall above 1 − q_n/n, q_n the ALPHA-quantile of χ²_n: 0.39 at n = 176, 0.65 at
n = 48. Noise wider than declared is no privacy failure and is not flagged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..he.flooding import chi2_cdf
from ..runtime.declarations import Protection
from .attacks import ALPHA, not_measured
from .ledger import EmpiricalFinding

__all__ = ["chi2_cdf", "chi2_quantile", "flooding_finding"]


def chi2_quantile(p: float, dof: int) -> float:
    """The x with P(χ²_dof <= x) = p (bisection)."""
    lo, hi = 0.0, dof + 20.0 * math.sqrt(2.0 * dof) + 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chi2_cdf(mid, dof) < p else (lo, mid)
    return hi


def flooding_finding(observer: str, name: str, kind: str, released: Sequence[np.ndarray],
                     raw: Sequence[np.ndarray], sigmas: Sequence[float]) -> EmpiricalFinding:
    """Whether ``observer``'s releases (``released``, one array per message) carry noise of the declared
    ``sigmas`` around the key holder's raw decryptions ``raw`` of the same ciphertexts (module docstring)."""
    if len(released) != len(raw) or len(raw) != len(sigmas):
        return not_measured(observer, name, (kind,), Protection.FLOODED,
                            f"{len(released)} releases, {len(raw)} raw decryptions and {len(sigmas)} widths to pair")
    z = [(np.asarray(a, dtype=np.float64).ravel() - np.asarray(b, dtype=np.float64).ravel()) / s
         for a, b, s in zip(released, raw, sigmas, strict=True)]
    flat = np.concatenate(z) if z else np.zeros(0)
    if flat.size < 2:
        return not_measured(observer, name, (kind,), Protection.FLOODED,
                            f"{observer} received {flat.size} flooded values (a variance test needs at least 2)")
    n = int(flat.size)
    stat = float(np.sum(flat**2))
    p = chi2_cdf(stat, n)
    critical = 1.0 - chi2_quantile(ALPHA, n) / n
    shortfall = 1.0 - stat / n
    return EmpiricalFinding(
        observer, name, shortfall, 0.0,
        f"the {n} values {observer} received in {kind} minus C's raw decryptions of the same ciphertexts, over "
        f"their declared flooding σ (2^{math.log2(min(sigmas)):.1f} .. 2^{math.log2(max(sigmas)):.1f}): variance "
        f"{stat / n:.3g} of the declared (χ² lower tail p = {p:.3g}); too little noise leaves C's key-dependent "
        "decryption error readable (IND-CPA^D)",
        attacks=(kind,), protection=Protection.FLOODED, flagged=p < ALPHA, p_value=p, samples=n,
        detects=f"a noise variance short of the declared by >= {critical:.2f}", min_effect=critical)
