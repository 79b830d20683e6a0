"""Private set intersection primitives: ID hygiene, ECDH (X25519) blinding, keyed hashing.

Two families, both used by :mod:`vflcrypto.protocols.align`:

**ECDH-PSI** (Meadows 1986; Huberman–Franklin–Hogg 1999; the DH-PSI of Pinkas et al.).
Each ID is hashed with a domain-separated SHA-256 to a 32-byte X25519 u-coordinate
``H(x)``; a party blinds it with its per-run secret scalar ``k`` (``X25519(k, H(x))`` =
``clamp(k)·H(x)``) and re-blinds the peer's points. Clamped scalars commute, so
``k_a·(k_b·H(x)) = k_b·(k_a·H(x))``: equal IDs give equal double-blinded values. The
double-blinded u-coordinate is hashed once more and truncated to :data:`DIGEST_BYTES`
(96 bits) for the comparison set: with ``n_a`` and ``n_b`` IDs the probability that any
two *different* IDs share a digest is at most ``n_a·n_b / 2**96`` (≈1.3e-15 for 10⁷ × 10⁷).

Hash-to-curve note: ``H`` maps to a *u-coordinate*, not to a uniform point of the
prime-order subgroup. About half of all u-coordinates lie on the quadratic twist of
Curve25519; the Montgomery ladder works there too and the twist's order is 4·(prime of
253 bits), so commutativity and DDH-hardness hold on both. Clamping makes every scalar a
multiple of 8, which removes any cofactor component, so ``k·H(x)`` always lies in a
prime-order subgroup. A u-coordinate of small order gives the all-zero output, which
``cryptography`` refuses; :func:`hash_to_u` then retries with the next counter value
(identically on both sides, since small order does not depend on the secret). The chance
of that is about 2⁻²⁵¹ per ID.

**Keyed-hash PSI**: HMAC-SHA256 under a key both parties derive from an *authenticated*
ephemeral X25519 exchange (:class:`IdentityKey` signs each ephemeral public key together
with the run's transcript; :func:`derive_psi_key` runs HKDF-SHA256 with a
transcript-bound ``info``). Much faster than ECDH, but both parties hold the key, so each
can dictionary-attack the other's tags (see SECURITY.md). Plain unkeyed hashing is not
offered at all: anyone could test guesses against it.

ID hygiene (:func:`canonicalize_ids`): IDs are ``str`` or ``int`` (``bytes`` must be
UTF-8); strings are NFC-normalised and UTF-8 encoded, integers written in decimal, so
the integer ``1`` and the string ``"1"`` are the *same* ID while ``"01"`` is not;
``bool`` and ``float`` are refused. Nothing is stripped unless ``strip=True``. Empty IDs
are refused; duplicates are an error unless ``duplicates="keep_first"``.

Work on many IDs runs in chunks over the shared process pool (:mod:`vflcrypto.parallel`)
with a bounded number of chunks in flight, so memory stays proportional to the chunk
size plus the compact digest arrays. Everything a party sends is shuffled with a
permutation from ``os.urandom`` (:func:`random_permutation`). Secret scalars are passed
to local worker processes over pipes; Python does not wipe memory (see SECURITY.md).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from .. import parallel
from ..errors import ConfigurationError, InputDataError, ProtocolError
from . import x25519mb
from .packed import PackedIds
from .sorting import prefix_order
from .x25519mb import minus_one_rows, noncanonical, zero_rows

__all__ = [
    "CHUNK_SIZE",
    "DIGEST_BYTES",
    "DIGEST_DTYPE",
    "POINT_BYTES",
    "CanonicalIds",
    "EphemeralKey",
    "IdentityKey",
    "PackedIds",
    "blind_ids",
    "blind_stream",
    "canonical_id",
    "canonicalize_ids",
    "collision_bound",
    "derive_psi_key",
    "digest_order",
    "digests_to_array",
    "generate_secret",
    "hash_to_u",
    "keyed_digests",
    "match_digests",
    "match_pairs",
    "point_digest",
    "prefix_order",
    "random_permutation",
    "reblind_chunk",
    "reblind_points",
    "reblind_stream",
    "value_order",
    "verify_identity",
]

POINT_BYTES = 32
DIGEST_BYTES = 12  # 96-bit comparison digests; see collision_bound() (match_digests joins on 8 + 4 bytes)
DIGEST_DTYPE = np.dtype(f"S{DIGEST_BYTES}")
CHUNK_SIZE = 4096  # IDs per pool task and per message (~0.2 s of X25519 work)
_PARALLEL_MIN_ITEMS = 2048  # below this, work stays in-process (no pool start-up)
_P25519 = 2**255 - 19

_H2U_DOMAIN = b"vflcrypto/psi/x25519-hash-to-u/v1\x00"
_DIGEST_DOMAIN = b"vflcrypto/psi/x25519-digest/v1\x00"
_HMAC_DOMAIN = b"vflcrypto/psi/hmac-id/v1\x00"
_HKDF_INFO = b"vflcrypto/psi/hmac-key/v1\x00"
_IDENTITY_DOMAIN = b"vflcrypto/psi/identity-signature/v1\x00"
_MAX_H2U_TRIES = 16


# --------------------------------------------------------------------------- ID hygiene


def canonical_id(value: Any, *, strip: bool = False) -> bytes:
    """The canonical byte encoding of one ID (UTF-8 of NFC text; integers in decimal).

    Raises :class:`InputDataError` for types other than ``str``/``int``/``bytes``, for
    bytes that are not UTF-8, and for an empty ID.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | bytes | np.integer):
        raise InputDataError(f"ID of type {type(value).__name__} (use str or int)")
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise InputDataError("ID is not valid UTF-8") from None
    text = str(int(value)) if isinstance(value, int | np.integer) else value
    if strip:
        text = text.strip()
    if not text:
        raise InputDataError("empty ID")
    try:
        return unicodedata.normalize("NFC", text).encode("utf-8")
    except UnicodeEncodeError:
        raise InputDataError("ID is not valid Unicode text (lone surrogate)") from None


@dataclass(frozen=True)
class CanonicalIds:
    """A party's IDs after hygiene: ``encoded[i]`` came from input row ``rows[i]``."""

    encoded: tuple[bytes, ...] | PackedIds
    rows: np.ndarray  # int64, original row index of each kept ID
    n_input: int  # number of input rows (kept + dropped duplicates)

    def __len__(self) -> int:
        return len(self.encoded)


def canonicalize_ids(
    ids: Iterable[Any],
    *,
    duplicates: str = "error",
    strip: bool = False,
    row_label: str = "row",
    first_row: int = 0,
) -> CanonicalIds:
    """Canonicalise a party's IDs and enforce uniqueness.

    ``duplicates``: ``"error"`` (refuse repeated IDs) or ``"keep_first"``; anything else
    raises :class:`ConfigurationError` (callers pass the command line's value as it is).

    Error messages name the row as ``f"{row_label} {first_row + i}"`` (the CLI passes
    ``"line", 2`` so they match the CSV file). Duplicates are judged on the canonical
    form, so NFC/NFD variants and ``1`` vs ``"1"`` count as the same ID.
    """
    if duplicates not in ("error", "keep_first"):
        raise ConfigurationError("duplicates must be 'error' or 'keep_first'")
    fast = _canonical_texts_fast(ids, strip)
    if fast is not None:
        return fast
    seen: dict[bytes, int] = {}
    encoded: list[bytes] = []
    rows: list[int] = []
    n = 0
    normalize = unicodedata.normalize
    for i, value in enumerate(ids):
        n += 1
        try:
            if type(value) is str and value and not strip:  # the common case, inlined
                enc = normalize("NFC", value).encode("utf-8")
            else:
                enc = canonical_id(value, strip=strip)
        except UnicodeEncodeError:
            raise InputDataError(f"{row_label} {first_row + i}: ID is not valid Unicode text "
                                 "(lone surrogate)") from None
        except InputDataError as exc:
            raise InputDataError(f"{row_label} {first_row + i}: {exc}") from None
        first = seen.get(enc)
        if first is not None:
            if duplicates == "error":
                raise InputDataError(
                    f"{row_label} {first_row + i}: duplicate ID (first seen at {row_label} "
                    f"{first_row + first}): every ID must appear once"
                )
            continue
        seen[enc] = i
        encoded.append(enc)
        rows.append(i)
    return CanonicalIds(tuple(encoded), np.asarray(rows, dtype=np.int64), n)


def _canonical_texts_fast(ids: Iterable[Any], strip: bool) -> CanonicalIds | None:
    """The common case in one pass: a list or tuple of non-empty, distinct ``str`` IDs.

    Returns ``None`` (and the caller's row-by-row loop produces the exact error or drops
    duplicates) for anything else: other types, an empty or invalid ID, a repeated ID.
    """
    if strip or not isinstance(ids, list | tuple) or not all(type(v) is str for v in ids):
        return None
    normalize = unicodedata.normalize
    try:
        encoded = tuple([normalize("NFC", v).encode("utf-8") for v in ids])
    except UnicodeEncodeError:
        return None
    if len(set(encoded)) != len(encoded) or (encoded and not min(map(len, encoded))):
        return None
    return CanonicalIds(encoded, np.arange(len(encoded), dtype=np.int64), len(encoded))


# --------------------------------------------------------------------------- shuffling


def random_permutation(n: int) -> np.ndarray:
    """A uniformly random permutation of ``range(n)``: sort by 64-bit keys from ``os.urandom``.

    Ties among 64-bit keys (probability ≤ n²/2⁶⁵) only make the permutation very slightly
    non-uniform; they never break correctness. The sort need not be stable (introsort is
    about twice as fast as a stable sort on 64-bit keys).
    """
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    keys = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
    return np.argsort(keys).astype(np.int64)


# --------------------------------------------------------------------------- ECDH-PSI


def generate_secret() -> bytes:
    """A fresh per-run X25519 scalar (32 bytes from ``os.urandom``; clamped on use)."""
    return os.urandom(32)


def hash_to_u(id_bytes: bytes, counter: int = 0) -> bytes:
    """Domain-separated SHA-256 of a canonical ID (and a retry counter) as a u-coordinate."""
    return hashlib.sha256(_H2U_DOMAIN + counter.to_bytes(1, "big") + id_bytes).digest()


def _blind_one(key: X25519PrivateKey, id_bytes: bytes) -> bytes:
    for counter in range(_MAX_H2U_TRIES):
        try:
            return key.exchange(X25519PublicKey.from_public_bytes(hash_to_u(id_bytes, counter)))
        except ValueError:  # small-order u-coordinate: all-zero output; try the next counter
            continue
    raise ProtocolError("hash-to-curve failed repeatedly (this should never happen)")


def blind_ids(secret: bytes, ids: Sequence[bytes]) -> bytes:
    """``k·H(x)`` for each canonical ID, concatenated (32 bytes each). Pool worker function.

    Batched (:mod:`.x25519mb`, eight per call) when available; an ID whose hash is a
    small-order u (all-zero output, probability ~2⁻²⁵²) is redone one by one with the retry
    counter, as is the whole chunk if the library reports an error: the same bytes either way.
    """
    key = X25519PrivateKey.from_private_bytes(secret)
    if ids and x25519mb.available():
        us = b"".join([hash_to_u(i) for i in ids])
        try:
            out = bytearray(x25519mb.scalarmult(secret, us))
        except OSError:
            return b"".join([_blind_one(key, i) for i in ids])
        for j in sorted(set(zero_rows(out)) | set(minus_one_rows(us))):
            out[j * POINT_BYTES : (j + 1) * POINT_BYTES] = _blind_one(key, ids[j])
        return bytes(out)
    return b"".join([_blind_one(key, i) for i in ids])


def reblind_points(secret: bytes, points: bytes) -> bytes:
    """Re-blind the peer's points and return their comparison digests, concatenated.

    Each 32-byte point must be a canonical u-coordinate (< 2²⁵⁵ − 19) of large order;
    anything else is a :class:`ProtocolError` (an honest peer never sends it).
    """
    if len(points) % POINT_BYTES:
        raise ProtocolError("blinded points are not a whole number of 32-byte values")
    if points and x25519mb.available():
        if noncanonical(points):
            raise ProtocolError("peer sent a non-canonical curve point")
        if minus_one_rows(points):
            raise ProtocolError("peer sent a small-order curve point")
        try:
            shared = x25519mb.scalarmult(secret, points)
        except OSError:
            shared = b""  # the library refused a batch: one call per point below
        if shared:
            if zero_rows(shared):
                raise ProtocolError("peer sent a small-order curve point")
            return b"".join([point_digest(shared[o : o + POINT_BYTES]) for o in range(0, len(shared), POINT_BYTES)])
    key = X25519PrivateKey.from_private_bytes(secret)
    out = []
    for off in range(0, len(points), POINT_BYTES):
        pt = points[off : off + POINT_BYTES]
        if int.from_bytes(pt, "little") >= _P25519:
            raise ProtocolError("peer sent a non-canonical curve point")
        try:
            shared = key.exchange(X25519PublicKey.from_public_bytes(pt))
        except ValueError:
            raise ProtocolError("peer sent a small-order curve point") from None
        out.append(point_digest(shared))
    return b"".join(out)


def point_digest(point: bytes) -> bytes:
    """The comparison digest of a double-blinded value (domain-separated SHA-256, truncated)."""
    return hashlib.sha256(_DIGEST_DOMAIN + point).digest()[:DIGEST_BYTES]


def _pipeline(fn: Callable[..., bytes], args: Iterable[tuple[Any, ...]], *,
              parallel_ok: bool) -> Iterator[bytes]:
    """Yield ``fn(*a)`` for each ``a`` in order, over the pool with a bounded window.

    ``args`` is consumed lazily, so a generator that receives chunks from a channel is
    drained only as fast as the pool keeps up (memory stays bounded).
    """
    ex = parallel.get_executor(secret=True) if parallel_ok else None  # every chunk carries the secret scalar
    if ex is None:
        for a in args:
            yield fn(*a)
        return
    yield from parallel.ordered_map(ex, fn, args, window=2 * max(1, parallel.worker_count(secret=True)) + 1)


def blind_stream(secret: bytes, ids: Sequence[bytes], order: np.ndarray,
                 chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """Blinded points of ``ids[order]``, one bytes block per ``chunk_size`` IDs."""
    n = len(order)
    args = ((secret, [ids[j] for j in order[s : s + chunk_size]]) for s in range(0, n, chunk_size))
    return _pipeline(blind_ids, args, parallel_ok=n >= _PARALLEL_MIN_ITEMS)


def reblind_chunk(secret: bytes, points: bytes, total: int) -> bytes:
    """Digests of one received chunk of points, split over the pool when ``total`` is large."""
    n = len(points) // POINT_BYTES
    parts = max(1, min(parallel.worker_count(secret=True), n // 512)) if total >= _PARALLEL_MIN_ITEMS else 1
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    subs = [points[a * POINT_BYTES : b * POINT_BYTES] for a, b in itertools.pairwise(bounds)]
    return b"".join(reblind_stream(secret, subs, total))


def reblind_stream(secret: bytes, chunks: Iterable[bytes], total: int) -> Iterator[bytes]:
    """Digests of the re-blinded peer points, one block per incoming chunk (lazily consumed)."""
    args = ((secret, c) for c in chunks)
    return _pipeline(reblind_points, args, parallel_ok=total >= _PARALLEL_MIN_ITEMS)


# --------------------------------------------------------------------------- comparison


def digests_to_array(data: bytes | bytearray | memoryview) -> np.ndarray:
    """View concatenated digests as a fixed-width array (exact byte comparison and order)."""
    if len(data) % DIGEST_BYTES:
        raise ProtocolError(f"digest block is not a multiple of {DIGEST_BYTES} bytes")
    return np.frombuffer(bytes(data), dtype=DIGEST_DTYPE)


def value_order(digests: np.ndarray) -> np.ndarray:
    """The order an OT PSI sender sends its values in: sorted by value (their first 8 bytes, as
    :func:`match_pairs` sorts them), so the receiver need not sort them again.

    As private as a random shuffle: the order is a function of the set of values alone, which
    the receiver receives anyway (pseudorandom, independent of the sender's file order)."""
    return digest_order(digests)


def digest_order(digests: np.ndarray) -> np.ndarray:
    """The argsort of the digests' first 8 bytes (little-endian integers): :func:`match_digests`'s index of them."""
    return prefix_order(_prefix64(digests))


def match_digests(own: np.ndarray, peer: np.ndarray, own_order: np.ndarray | None = None) -> np.ndarray:
    """Positions ``i`` with ``own[i]`` in ``peer``, ordered by the digest value.

    Both parties hold the same digests for the common IDs, so sorting by digest gives
    both the *same* canonical order without either revealing anything new. ``own_order``
    is :func:`digest_order` of ``own`` when the caller made it earlier (while it waited).
    """
    return match_pairs(own, peer, own_order)[0]


def match_pairs(own: np.ndarray, peer: np.ndarray, own_order: np.ndarray | None = None, *, ordered: bool = True
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(i, j)`` for every ``own[i] == peer[j]``, both ordered by the digest value (see :func:`match_digests`).

    ``ordered=False`` skips that last sort: for a caller that sends the pairs' order to its peer
    (the OT PSIs' ``align.common_values``) rather than relying on both sides sorting alike.
    """
    empty = np.zeros(0, dtype=np.int64)
    if len(own) == 0 or len(peer) == 0:
        return empty, empty
    # Join on the first 8 bytes as integers (integer sorts), then compare the last 4 bytes of each pair.
    own_p, peer_p = _prefix64(own), _prefix64(peer)
    by_peer: np.ndarray | None = None  # None: the peer's values came sorted (:func:`value_order`)
    if own_order is not None:
        # a peer that sent its values in value_order needs no sort (checked in one pass)
        if not bool(np.all(peer_p[1:] >= peer_p[:-1])):
            by_peer = np.argsort(peer_p)
        by_own = own_order
    else:
        with ThreadPoolExecutor(2) as pool:  # numpy sorts without the GIL: both at once
            sorting = pool.submit(np.argsort, own_p)
            by_peer = np.argsort(peer_p)
            by_own = sorting.result()
    sp = peer_p if by_peer is None else peer_p[by_peer]
    if np.any(sp[1:] == sp[:-1]):  # two peer digests share 8 bytes (≈ n²/2⁶⁵): join on the whole digests
        cand = np.nonzero(_members(own_p, peer_p))[0]
        pos = cand[_members(own[cand], peer[_members(peer_p, own_p[cand])])]
        wanted = [bytes(d) for d in _raw(own[pos])]
        where = dict.fromkeys(wanted, -1)
        for j, d in enumerate(_raw(peer)):
            key = bytes(d)
            if key in where:
                where[key] = j
        theirs = np.asarray([where[k] for k in wanted], np.int64)
    else:
        so = own_p[by_own]
        at = np.minimum(np.searchsorted(sp, so), len(sp) - 1)
        hit = sp[at] == so
        mine, their = by_own[hit], (at[hit] if by_peer is None else by_peer[at[hit]])
        same = _suffix(own)[mine] == _suffix(peer)[their]  # the first 8 bytes are equal already
        pos, theirs = mine[same], their[same]
    if len(pos) < 2 or not ordered:
        return pos.astype(np.int64), theirs.astype(np.int64)
    # the digest order: by the first 8 bytes read big-endian (one integer sort) when those are distinct,
    # which is the byte order itself; else by the whole digests
    raw = np.ascontiguousarray(own[pos]).view(np.uint8).reshape(len(pos), DIGEST_BYTES)
    head = np.ascontiguousarray(raw[:, :8]).view(">u8").ravel()
    order = np.argsort(head)
    heads = head[order]
    if np.any(heads[1:] == heads[:-1]):
        order = np.argsort(own[pos], kind="stable")
    return pos[order].astype(np.int64), theirs[order].astype(np.int64)


def _members(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.isin(a, b)``: sort both, binary-search the sorted queries (cache-friendly), scatter back."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros(len(a), bool)
    sb = np.sort(b)
    order = np.argsort(a)
    sa = a[order]
    idx = np.minimum(np.searchsorted(sb, sa), len(sb) - 1)
    out = np.empty(len(a), bool)
    out[order] = sb[idx] == sa
    return out


def _raw(digests: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(digests).view(np.uint8).reshape(len(digests), DIGEST_BYTES)


def _suffix(digests: np.ndarray) -> np.ndarray:
    """Bytes 8..11 of each digest as one integer (the digests are 12 bytes)."""
    return _field(digests, "<u4", 8)


def _prefix64(digests: np.ndarray) -> np.ndarray:
    """Bytes 0..7 of each digest as one little-endian integer."""
    return _field(digests, "<u8", 0)


def _field(digests: np.ndarray, dtype: str, offset: int) -> np.ndarray:
    """The integer at byte ``offset`` of each digest, copied through a strided view of that dtype (one unaligned
    load per digest: several times faster than copying a ``[:, a:b]`` slice of the bytes)."""
    if not len(digests):
        return np.zeros(0, dtype)
    raw = np.ascontiguousarray(digests).view(np.uint8).reshape(-1)
    if len(raw) != len(digests) * DIGEST_BYTES:
        raise ValueError(f"digests must be {DIGEST_BYTES} bytes each")
    return np.ndarray((len(digests),), dtype=dtype, buffer=raw, offset=offset, strides=(DIGEST_BYTES,)).copy()


def collision_bound(n_a: int, n_b: int, digest_bytes: int = DIGEST_BYTES) -> float:
    """Upper bound on the chance that two different IDs share a comparison digest."""
    return n_a * n_b / 2.0 ** (8 * digest_bytes)


# --------------------------------------------------------------------------- keyed-hash PSI


class IdentityKey:
    """A party's long-term Ed25519 identity; its public half is pinned by the peer.

    "Authenticated" key agreement here means: each party signs its *ephemeral* X25519
    public key together with the run's nonces, protocol, mode and role; the peer checks
    the signature against the identity public key it already trusts (pinned out of band:
    a configuration file, a certificate, or, for the in-process run, handed over by the
    code that creates both parties). It relies on the pinned key being genuine and the
    identity private key staying secret; it does not give forward secrecy beyond the
    ephemeral keys being discarded after the run.
    """

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public_bytes = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    @classmethod
    def generate(cls) -> IdentityKey:
        return cls(Ed25519PrivateKey.generate())

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.public_bytes).hexdigest()[:32]

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(_IDENTITY_DOMAIN + message)

    def __repr__(self) -> str:
        return f"IdentityKey(fingerprint={self.fingerprint})"


def verify_identity(public_bytes: bytes, signature: bytes, message: bytes) -> None:
    """Check ``signature`` on ``message`` under a pinned identity; :class:`ProtocolError` if bad."""
    try:
        Ed25519PublicKey.from_public_bytes(public_bytes).verify(signature, _IDENTITY_DOMAIN + message)
    except (InvalidSignature, ValueError):
        raise ProtocolError("peer's hello is not signed by its pinned identity key") from None


class EphemeralKey:
    """A per-run X25519 key pair for agreeing on the keyed-hash PSI key."""

    def __init__(self, key: X25519PrivateKey | None = None) -> None:
        self._key = key if key is not None else X25519PrivateKey.generate()
        self.public_bytes = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def private_bytes(self) -> bytes:
        """The secret half (a role state that must survive between messages keeps it)."""
        return self._key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())

    @classmethod
    def from_private_bytes(cls, data: bytes) -> EphemeralKey:
        try:
            return cls(X25519PrivateKey.from_private_bytes(data))
        except ValueError:
            raise ProtocolError("malformed ephemeral key") from None

    def exchange(self, peer_public: bytes) -> bytes:
        try:
            return self._key.exchange(X25519PublicKey.from_public_bytes(peer_public))
        except ValueError:
            raise ProtocolError("peer's ephemeral key is invalid or of small order") from None

    def __repr__(self) -> str:
        return "EphemeralKey(<secret>)"


def derive_psi_key(shared_secret: bytes, transcript: bytes) -> bytes:
    """HKDF-SHA256 of the X25519 shared secret, bound to the hash of the hello transcript."""
    info = _HKDF_INFO + hashlib.sha256(transcript).digest()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared_secret)


def keyed_digests(key: bytes, ids: Sequence[bytes]) -> bytes:
    """HMAC-SHA256(key, domain ‖ id) truncated to :data:`DIGEST_BYTES`, concatenated."""
    d = hmac.digest
    return b"".join([d(key, _HMAC_DOMAIN + i, "sha256")[:DIGEST_BYTES] for i in ids])
