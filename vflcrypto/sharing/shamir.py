"""Shamir secret sharing over the prime field GF(2^521 − 1).

A secret s (an integer below 2^512: 32-byte keys and seeds fit) becomes points
(x, f(x)) of a random polynomial f of degree t − 1 with f(0) = s; any t points give s by
Lagrange interpolation at 0, and any t − 1 points are independent of s (A. Shamir, "How
to share a secret", CACM 1979). The coefficients come from :mod:`secrets`. Secure
aggregation (``protocols/secagg``) shares each client's mask key and self-mask seed this
way, so the server can remove the masks of clients that drop out.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence

from ..errors import InputDataError, ProtocolError

__all__ = ["PRIME", "SECRET_BITS", "reconstruct", "split"]

PRIME = (1 << 521) - 1  # the Mersenne prime M521
SECRET_BITS = 512  # secrets must be below 2^512 (well inside the field)
SHARE_BYTES = 66  # ceil(521 / 8): a share's value as fixed-width bytes


def split(secret: int, xs: Sequence[int], threshold: int) -> dict[int, int]:
    """Shares ``{x: f(x)}`` of ``secret`` at the distinct nonzero points ``xs``; any ``threshold`` recover it."""
    if not 0 <= secret < 1 << SECRET_BITS:
        raise InputDataError(f"a Shamir secret must lie in [0, 2^{SECRET_BITS})")
    if len(set(xs)) != len(xs) or any(not 0 < x < PRIME for x in xs):
        raise InputDataError("share points must be distinct and nonzero")
    if not 1 <= threshold <= len(xs):
        raise InputDataError(f"threshold {threshold} must lie in 1..{len(xs)} (the number of shares)")
    coeffs = [secret] + [secrets.randbelow(PRIME) for _ in range(threshold - 1)]
    out = {}
    for x in xs:
        y = 0
        for c in reversed(coeffs):  # Horner
            y = (y * x + c) % PRIME
        out[x] = y
    return out


def reconstruct(shares: Mapping[int, int], threshold: int) -> int:
    """The secret from at least ``threshold`` shares (the first ``threshold`` by point are used)."""
    pts = sorted(shares.items())
    if len(pts) < threshold:
        raise ProtocolError(f"{len(pts)} shares cannot reconstruct a secret of threshold {threshold}")
    pts = pts[:threshold]
    if any(not 0 < x < PRIME or not 0 <= y < PRIME for x, y in pts):
        raise ProtocolError("a share lies outside the field")
    secret = 0
    for i, (xi, yi) in enumerate(pts):
        num, den = 1, 1
        for j, (xj, _) in enumerate(pts):
            if i != j:
                num = num * (-xj) % PRIME
                den = den * (xi - xj) % PRIME
        secret = (secret + yi * num * pow(den, -1, PRIME)) % PRIME
    if secret >= 1 << SECRET_BITS:  # a random wrong share lands here with probability 1 - 2^-9
        raise ProtocolError("the shares do not interpolate to a valid secret (a wrong share)")
    return secret
