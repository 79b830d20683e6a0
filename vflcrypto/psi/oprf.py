"""ECDH-OPRF on X25519 for unbalanced PSI: ``F_a(x) = SHA-256(u(a·H(x)))``, blind evaluation.

The large party's long-term key ``a`` (32 random bytes, clamped on use as X25519 does)
defines the OPRF ``F_a(x) = SHA-256(domain ‖ u(a·H(x)))[:16]`` with ``H`` the
domain-separated SHA-256 of the canonical ID read as a u-coordinate (as in
:mod:`.primitives`, with its own domain string). The large party evaluates it over its
whole set once, offline (:func:`evaluate_ids`). The small party evaluates it on its own
IDs *obliviously*, the ECDH-OPRF of SecretFlow's unbalanced PSI (after Jarecki–Liu,
TCC 2009; Kiss et al., PETS 2017, "Private set intersection for unequal set sizes
with mobile applications"): it sends ``b·H(y)`` (:meth:`Blinder.blind`), the large party
returns ``a·(b·H(y))`` (:func:`apply_key`), and it removes ``b`` (:meth:`Blinder.unblind`).

Unblinding on X25519. The ladder computes ``u(k·P)`` for any u-coordinate, on the curve
(order 8·ℓ) or on its quadratic twist (order 4·ℓ', ℓ' a 253-bit prime), and every
scalar it accepts is *clamped*: ``2²⁵⁴ + 8t`` with ``0 ≤ t < 2²⁵¹``. A clamped ``b``
kills the small-order component, so ``b·H(y)`` lies in the subgroup of order ℓ (curve) or
ℓ' (twist). To undo ``b`` the small party needs clamped scalars ``c ≡ b⁻¹ (mod ℓ)`` and
``c' ≡ b⁻¹ (mod ℓ')``: ``c = 2²⁵⁴ + 8t`` with ``t = (b⁻¹ − 2²⁵⁴)·8⁻¹ mod ℓ`` exists when
that ``t`` is below 2²⁵¹ (probability ≈ ½ for ℓ, ¼ for ℓ'), so :class:`Blinder` draws
``b`` until both exist (≈ 8 tries of a few modular inversions). Which one applies to
``y`` is public to the small party (a Legendre symbol of ``u³ + Au² + u``). Then
``c·a·b·H(y) = a·(cb mod ℓ)·H_ℓ(y) = a·H(y)``, the value the large party computed
offline: the small party learns ``F_a(y)`` and nothing of ``a`` (one-more-DH).

The large party's key is long-lived, so its answers are checked like any peer input:
every point must be a canonical u-coordinate of large order (:func:`apply_key`), and it
answers no more points than the small party declared (the protocol layer). The Legendre
symbol (gmpy2) and the hash-to-u retry are not constant-time; both run on the small
party's own machine over its own IDs and nothing of their timing reaches the large party
beyond the run's total time.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
from collections.abc import Sequence

import gmpy2
import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from .. import parallel
from ..errors import ConfigurationError, ProtocolError
from . import x25519mb
from .x25519mb import minus_one_rows, noncanonical, zero_rows

__all__ = ["FALSE_MATCH_BITS", "OUTPUT_BYTES", "POINT_BYTES", "Blinder", "apply_key", "canonical_u", "clamp",
           "evaluate_ids", "false_match_bound", "key_id", "oprf_hash", "output_of_point", "truncation_bytes"]

POINT_BYTES = 32
OUTPUT_BYTES = 16  # the cache keeps 128-bit outputs; transfers truncate them (truncation_bytes)
FALSE_MATCH_BITS = 40  # a false match anywhere in one online run has probability <= 2**-40
P25519 = 2**255 - 19
ELL = 2**252 + 27742317777372353535851937790883648493  # order of the curve's prime subgroup
ELL_TWIST = (2 * P25519 + 2 - 8 * ELL) // 4  # order of the twist's prime subgroup (253 bits)
_A = 486662
_CHUNK = 4096
_H2U_DOMAIN = b"vflcrypto/psi/oprf-hash-to-u/v1\x00"
_OUT_DOMAIN = b"vflcrypto/psi/oprf-output/v1\x00"
_KEY_ID_DOMAIN = b"vflcrypto/psi/oprf-key-id/v1\x00"
_MAX_TRIES = 16


def clamp(secret: bytes) -> int:
    """The scalar X25519 multiplies by for the 32-byte ``secret`` (RFC 7748 clamping)."""
    k = bytearray(secret)
    k[0] &= 248
    k[31] &= 127
    k[31] |= 64
    return int.from_bytes(k, "little")


def key_id(secret: bytes) -> str:
    """A public name of the OPRF key: a hash of its public key ``a·G`` (reveals nothing of ``a``)."""
    pub = X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes_raw()
    return hashlib.sha256(_KEY_ID_DOMAIN + pub).hexdigest()[:32]


def oprf_hash(id_bytes: bytes, counter: int = 0) -> bytes:
    """``H(x)``: domain-separated SHA-256 of the canonical ID (and a retry counter) as a u-coordinate."""
    return hashlib.sha256(_H2U_DOMAIN + counter.to_bytes(1, "big") + id_bytes).digest()


def canonical_u(u: bytes) -> bytes:
    """The canonical encoding of a u-coordinate as X25519 reads it (top bit masked, reduced mod p)."""
    return ((int.from_bytes(u, "little") & ((1 << 255) - 1)) % P25519).to_bytes(32, "little")


def output_of_point(point: bytes) -> bytes:
    """``F = SHA-256(domain ‖ u(a·H(x)))`` truncated to :data:`OUTPUT_BYTES`."""
    return hashlib.sha256(_OUT_DOMAIN + point).digest()[:OUTPUT_BYTES]


def _mul(key: X25519PrivateKey, id_bytes: bytes) -> tuple[bytes, bytes]:
    """``(u(k·H(x)), H(x))``; a small-order ``H(x)`` (probability 2⁻²⁵⁰) retries with the next counter.

    Small order does not depend on the (clamped) scalar, so both parties pick the same counter.
    """
    for counter in range(_MAX_TRIES):
        u = oprf_hash(id_bytes, counter)
        try:
            return key.exchange(X25519PublicKey.from_public_bytes(u)), u
        except ValueError:
            continue
    raise ProtocolError("hash-to-curve failed repeatedly (this should never happen)")


def _batched(secret: bytes, points: bytes) -> bytes | None:
    """``X25519(secret, u)`` for every 32-byte u by the batched library (:mod:`.x25519mb`, eight per call), or
    ``None`` where it is not available or refuses the batch: the caller then makes one ``cryptography`` call per
    point, with the same bytes. The library's small-order quirks are the caller's to check (u = p − 1 gives a
    non-zero output there; other small-order inputs make it refuse the batch)."""
    if not points or not x25519mb.available():
        return None
    try:
        return x25519mb.scalarmult(secret, points)
    except OSError:
        return None


def _mul_all(secret: bytes, ids: Sequence[bytes]) -> tuple[list[bytes], list[bytes]]:
    """:func:`_mul` for every ID: ``([u(k·H(x))], [H(x)])``, batched where it can be; an ID whose first hash is
    of small order is redone by :func:`_mul` (its retry counter), as is every ID if the batch is refused."""
    key = X25519PrivateKey.from_private_bytes(secret)
    us = b"".join([oprf_hash(i) for i in ids])
    out = _batched(secret, us)
    if out is None:
        pairs = [_mul(key, i) for i in ids]
        return [pt for pt, _ in pairs], [u for _, u in pairs]
    points = [out[o : o + POINT_BYTES] for o in range(0, len(out), POINT_BYTES)]
    hashes = [us[o : o + POINT_BYTES] for o in range(0, len(us), POINT_BYTES)]
    for j in set(zero_rows(out)) | set(minus_one_rows(us)):
        points[j], hashes[j] = _mul(key, ids[j])
    return points, hashes


def _evaluate_chunk(secret: bytes, ids: Sequence[bytes]) -> bytes:
    return b"".join([output_of_point(pt) for pt in _mul_all(secret, ids)[0]])


def evaluate_ids(secret: bytes, ids: Sequence[bytes]) -> np.ndarray:
    """``F_a(x)`` for each canonical ID (the offline evaluation), as an ``S16`` array in input order.

    Runs over the process pool in chunks of 4096 IDs (the key goes to local workers only).
    """
    chunks = [(secret, list(ids[s : s + _CHUNK])) for s in range(0, len(ids), _CHUNK)]
    blocks = parallel.parallel_map(_evaluate_chunk, chunks, cost=len(ids) * 8, secret=True)
    return np.frombuffer(b"".join(blocks), dtype=f"S{OUTPUT_BYTES}").copy()


def _check_point(pt: bytes) -> X25519PublicKey:
    if int.from_bytes(pt, "little") >= P25519:
        raise ProtocolError("peer sent a non-canonical curve point")
    return X25519PublicKey.from_public_bytes(pt)


def _check_received(points: bytes) -> None:
    """Refuse a non-canonical u or u = p − 1 before the batched library sees them (one call per point refuses
    them itself)."""
    if noncanonical(points):
        raise ProtocolError("peer sent a non-canonical curve point")
    if minus_one_rows(points):
        raise ProtocolError("peer sent a small-order curve point")


def _apply_chunk(secret: bytes, points: bytes) -> bytes:
    _check_received(points)
    shared = _batched(secret, points)
    if shared is not None:
        if zero_rows(shared):
            raise ProtocolError("peer sent a small-order curve point")
        return shared
    key = X25519PrivateKey.from_private_bytes(secret)
    out = []
    for off in range(0, len(points), POINT_BYTES):
        try:
            out.append(key.exchange(_check_point(points[off : off + POINT_BYTES])))
        except ValueError:
            raise ProtocolError("peer sent a small-order curve point") from None
    return b"".join(out)


def apply_key(secret: bytes, points: bytes) -> bytes:
    """The large party's online step: ``a·P`` for each received 32-byte point, in order.

    A non-canonical u-coordinate or a point of small order is a :class:`ProtocolError`.
    """
    if len(points) % POINT_BYTES:
        raise ProtocolError("blinded points are not a whole number of 32-byte values")
    step = _CHUNK * POINT_BYTES
    chunks = [(secret, points[s : s + step]) for s in range(0, len(points), step)]
    return b"".join(parallel.parallel_map(_apply_chunk, chunks, cost=len(points), secret=True))


def _on_twist(u: bytes) -> bool:
    """Whether the u-coordinate (top bit masked, reduced mod p, as X25519 reads it) lies on the twist."""
    x = (int.from_bytes(u, "little") & ((1 << 255) - 1)) % P25519
    rhs = (x * x * x + _A * x * x + x) % P25519
    return bool(gmpy2.legendre(rhs, P25519) == -1)


def _clamped_inverse(b: int, order: int) -> int | None:
    """A clamped scalar ``c ≡ b⁻¹ (mod order)``, or ``None`` when no clamped scalar is."""
    t = (pow(b, -1, order) - 2**254) * pow(8, -1, order) % order
    return 2**254 + 8 * t if t < 2**251 else None


def _blind_chunk(secret: bytes, ids: Sequence[bytes]) -> tuple[bytes, bytes]:
    pts, us = _mul_all(secret, ids)
    return b"".join(pts), bytes([_on_twist(u) for u in us])


def _unblind_chunk(c_curve: bytes, c_twist: bytes, points: bytes, flags: bytes) -> bytes:
    _check_received(points)
    which = np.frombuffer(flags, np.uint8)
    rows = np.frombuffer(points, np.uint8).reshape(-1, POINT_BYTES)
    if len(rows) == len(which) and bool(np.all(which <= 1)) and x25519mb.available():
        shared = np.empty_like(rows)
        for flag, scalar in ((0, c_curve), (1, c_twist)):  # each point by the inverse of its own group's order
            sel = np.nonzero(which == flag)[0]
            out = _batched(scalar, rows[sel].tobytes()) if len(sel) else b""
            if out is None:
                break
            if zero_rows(out):
                raise ProtocolError("peer answered with a small-order curve point")
            shared[sel] = np.frombuffer(out, np.uint8).reshape(-1, POINT_BYTES)
        else:
            return b"".join([output_of_point(shared[j].tobytes()) for j in range(len(which))])
    return _unblind_slow(c_curve, c_twist, points, flags)


def _unblind_slow(c_curve: bytes, c_twist: bytes, points: bytes, flags: bytes) -> bytes:
    keys = (X25519PrivateKey.from_private_bytes(c_curve), X25519PrivateKey.from_private_bytes(c_twist))
    out = []
    for j, off in enumerate(range(0, len(points), POINT_BYTES)):
        try:
            pt = keys[flags[j]].exchange(_check_point(points[off : off + POINT_BYTES]))
        except ValueError:
            raise ProtocolError("peer answered with a small-order curve point") from None
        out.append(output_of_point(pt))
    return b"".join(out)


class Blinder:
    """The small party's per-run blinding scalar ``b`` and its clamped inverses (curve and twist)."""

    def __init__(self, secret: bytes | None = None) -> None:
        for _ in range(256):
            s = secret if secret is not None else os.urandom(32)
            b = clamp(s)
            c, c2 = _clamped_inverse(b, ELL), _clamped_inverse(b, ELL_TWIST)
            if c is not None and c2 is not None:
                self.secret = s
                self._inverses = (c.to_bytes(32, "little"), c2.to_bytes(32, "little"))
                return
            if secret is not None:
                raise ConfigurationError("this blinding scalar has no clamped inverse; draw another")
        raise ProtocolError("no invertible blinding scalar in 256 draws (this should never happen)")

    def blind(self, ids: Sequence[bytes]) -> tuple[bytes, bytes]:
        """``b·H(y)`` for each ID (32 bytes each, concatenated) and one byte per ID: 1 if ``H(y)`` is on the twist."""
        chunks = [(self.secret, list(ids[s : s + _CHUNK])) for s in range(0, len(ids), _CHUNK)]
        parts = parallel.parallel_map(_blind_chunk, chunks, cost=len(ids) * 8, secret=True)
        return b"".join(p for p, _ in parts), b"".join(f for _, f in parts)

    def unblind(self, points: bytes, flags: bytes) -> np.ndarray:
        """``F_a(y)`` from the answers ``a·b·H(y)`` (same order as :meth:`blind`), as an ``S16`` array."""
        if len(points) != POINT_BYTES * len(flags):
            raise ProtocolError("the answer does not have one point per query")
        step = _CHUNK
        chunks = [(*self._inverses, points[s * POINT_BYTES : (s + step) * POINT_BYTES], flags[s : s + step])
                  for s in range(0, len(flags), step)]
        out = parallel.parallel_map(_unblind_chunk, chunks, cost=len(flags) * 8, secret=True)
        return np.frombuffer(b"".join(out), dtype=f"S{OUTPUT_BYTES}").copy()

    def __repr__(self) -> str:
        return "Blinder(<secret>)"


def truncation_bytes(n_large: int, n_small: int, bits: int = FALSE_MATCH_BITS) -> int:
    """Bytes of ``F`` to keep so that any false match in one run has probability ≤ 2^-bits.

    A small-set value falsely equals one of the large set's truncated values with
    probability ≤ ``n_large·n_small / 2^(8·t)`` (union bound over pairs, outputs modelled
    as random); the smallest whole ``t`` with that ≤ ``2^-bits`` (at least 5 bytes).
    """
    pairs = max(1, n_large) * max(1, n_small)
    t = math.ceil((bits + math.log2(pairs)) / 8)
    if t > OUTPUT_BYTES:
        raise ConfigurationError(f"{n_large} × {n_small} IDs need {t} bytes per value; the cache keeps "
                                 f"{OUTPUT_BYTES}")
    return max(5, t)


def false_match_bound(n_large: int, n_small: int, value_bytes: int) -> float:
    """The union bound ``n_large·n_small / 2^(8·value_bytes)`` on a false match in one run."""
    return n_large * n_small / 2.0 ** (8 * value_bytes)


def mac(key: bytes, *parts: bytes | memoryview) -> bytes:
    """HMAC-SHA256 over length-prefixed ``parts`` (the cache's integrity tag under a key derived from ``a``)."""
    h = hmac.new(key, digestmod="sha256")
    for p in parts:
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
    return h.digest()
