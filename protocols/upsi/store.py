"""The large party's OPRF key file and cache file, and the small party's transfer file.

* **Key file** (large party only, owner-only ``0600``): a JSON object with the 32-byte
  X25519 OPRF key ``a`` in hex and its key id (a hash of ``a·G``). Kept apart from the cache
  so that the cache can be copied, backed up or inspected without the key.
* **Cache file** (large party, owner-only): ``F_a(x)`` (16 bytes) of every ID of its set,
  sorted, with the generation each was added in, compressed (zlib over the byte-transposed
  array: the leading bytes of sorted values compress), under a header with the key id, the
  set's size and its digest (an additive multiset hash: Σ SHA-256(x) mod 2²⁵⁶, Clarke et
  al., ASIACRYPT 2003, so adding IDs updates it without the rest), and an HMAC-SHA256 tag
  under a key derived from ``a``: a cache of another key, or one altered by anyone without
  the key, is refused in one line. No pickle anywhere: JSON and raw byte arrays.
* **Transfer file** (what the small party keeps): the cache's values truncated to
  :func:`~vflcrypto.psi.oprf.truncation_bytes` of ``(|large set|, max_small)`` bytes, so a
  false match in a run with up to ``max_small`` IDs has probability ≤ 2⁻⁴⁰, sorted,
  compressed, with a SHA-256 checksum (corruption; the small party holds no key). A delta
  (the values added after the small party's generation) merges into it.

Files are written atomically (temporary file + fsync + rename).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.files import PRIVATE, atomic_write_bytes
from vflcrypto.errors import ConfigurationError, InputDataError
from vflcrypto.psi import oprf

__all__ = ["OprfCache", "OprfKey", "Transfer", "build_cache", "build_cache_stream", "digest_of", "export_transfer",
           "load_cache", "load_key", "load_transfer", "merge_transfer", "new_key", "save_cache", "save_key",
           "save_transfer", "update_cache"]

_KEY_FORMAT = "vflcrypto-oprf-key"
_CACHE_MAGIC = b"VFLCRYPTO-OPRF-CACHE-1\n"
_TRANSFER_MAGIC = b"VFLCRYPTO-OPRF-TRANSFER-1\n"
_DIGEST_DOMAIN = b"vflcrypto/upsi/set-digest/v1\x00"
_MAC_INFO = b"vflcrypto/upsi/cache-mac/v1"
_VALUE = np.dtype(f"S{oprf.OUTPUT_BYTES}")


@dataclass(frozen=True)
class OprfKey:
    """The large party's long-term OPRF key ``a`` and its public id."""

    secret: bytes
    key_id: str

    def __repr__(self) -> str:
        return f"OprfKey(key_id={self.key_id}, <secret>)"

    def mac_key(self) -> bytes:
        return hmac.digest(self.secret, _MAC_INFO, "sha256")


def new_key() -> OprfKey:
    """A fresh OPRF key (32 bytes of ``os.urandom``)."""
    secret = os.urandom(32)
    return OprfKey(secret, oprf.key_id(secret))


def save_key(path: str | os.PathLike[str], key: OprfKey) -> None:
    text = json.dumps({"format": _KEY_FORMAT, "version": 1, "key_id": key.key_id, "secret": key.secret.hex()})
    atomic_write_bytes(path, text.encode(), permissions=PRIVATE, exact_mode=0o600)


def load_key(path: str | os.PathLike[str]) -> OprfKey:
    try:
        data = json.loads(Path(path).read_text("utf-8"))
        secret = bytes.fromhex(data["secret"])
        ok = data.get("format") == _KEY_FORMAT and len(secret) == 32
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise InputDataError(f"{path}: not a vflcrypto OPRF key file")
    key = OprfKey(secret, oprf.key_id(secret))
    if key.key_id != data.get("key_id"):
        raise InputDataError(f"{path}: key id does not match the key (the file was altered)")
    return key


def digest_of(ids: Sequence[bytes]) -> int:
    """The additive multiset hash Σ SHA-256(domain ‖ x) mod 2²⁵⁶ of canonical IDs."""
    total = 0
    for i in ids:
        total += int.from_bytes(hashlib.sha256(_DIGEST_DOMAIN + i).digest(), "big")
    return total % (1 << 256)


@dataclass(frozen=True)
class OprfCache:
    """``F_a`` of every ID of the large set, sorted (``values``), the generation each was added in (``gens``)."""

    key_id: str
    generation: int
    set_digest: int
    values: np.ndarray  # S16, sorted
    gens: np.ndarray  # uint32, aligned with values

    @property
    def count(self) -> int:
        return len(self.values)


def _merge(values: np.ndarray, gens: np.ndarray, new: np.ndarray, gen: int) -> tuple[np.ndarray, np.ndarray]:
    allv = np.concatenate([values, new])
    allg = np.concatenate([gens, np.full(len(new), gen, np.uint32)])
    order = np.argsort(allv, kind="stable")
    return allv[order], allg[order]


def build_cache(key: OprfKey, ids: Sequence[bytes]) -> OprfCache:
    """The offline evaluation: ``F_a(x)`` of every canonical ID (distinct), sorted; generation 0."""
    values = oprf.evaluate_ids(key.secret, ids)
    order = np.argsort(values, kind="stable")
    return OprfCache(key.key_id, 0, digest_of(ids), values[order], np.zeros(len(values), np.uint32))


def build_cache_stream(key: OprfKey, chunks: Iterable[Sequence[bytes]]) -> OprfCache:
    """:func:`build_cache` over chunks of canonical IDs (a CSV streamed in): memory holds the 16-byte values only.

    A repeated ID gives a repeated value (different IDs share a value with probability
    ≤ n²/2¹²⁹), so repeats are found after the sort and refused: the set must be distinct.
    """
    parts, digest = [], 0
    for chunk in chunks:
        parts.append(oprf.evaluate_ids(key.secret, chunk))
        digest += digest_of(chunk)
    values = np.concatenate(parts) if parts else np.zeros(0, _VALUE)
    del parts
    values.sort(kind="stable")
    repeats = int(np.count_nonzero(values[1:] == values[:-1])) if len(values) > 1 else 0
    if repeats:
        raise InputDataError(f"the large set repeats {repeats} ID(s): every ID must appear once")
    return OprfCache(key.key_id, 0, digest % (1 << 256), values, np.zeros(len(values), np.uint32))


def update_cache(cache: OprfCache, key: OprfKey, ids: Sequence[bytes]) -> tuple[OprfCache, int]:
    """Add canonical IDs (those already cached are skipped): only the new IDs are evaluated.

    Returns the new cache (generation + 1; unchanged when nothing was new) and the number added.
    """
    if cache.key_id != key.key_id:
        raise InputDataError(f"the cache was built with OPRF key {cache.key_id}, the key file holds {key.key_id}")
    ids = list(dict.fromkeys(ids))  # distinct, first occurrence kept
    values = oprf.evaluate_ids(key.secret, ids)
    fresh = ~_isin(values, cache.values)
    if not fresh.any():
        return cache, 0
    new_ids = [i for i, f in zip(ids, fresh.tolist(), strict=True) if f]
    gen = cache.generation + 1
    merged, gens = _merge(cache.values, cache.gens, values[fresh], gen)
    digest = (cache.set_digest + digest_of(new_ids)) % (1 << 256)
    return OprfCache(cache.key_id, gen, digest, merged, gens), len(new_ids)


def _isin(a: np.ndarray, sorted_b: np.ndarray) -> np.ndarray:
    if not len(sorted_b) or not len(a):
        return np.zeros(len(a), bool)
    idx = np.minimum(np.searchsorted(sorted_b, a), len(sorted_b) - 1)
    return np.asarray(sorted_b[idx] == a)


_TRANSPOSE_COLUMNS = 1 << 16  # values per transposed block: its rows stay in the caches and the TLB


def _transposed(src: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``src.T`` (2-D bytes) in one new array, filled block by block (blocks of 2¹⁶
    columns keep a strided copy's rows in the caches). Loading a 10⁸-value cache and its transfer made three
    copies of each before (peak RSS 8.2 GiB for the online command), one now (4.8 GiB)."""
    out = np.empty(src.shape[::-1], np.uint8)
    for a in range(0, src.shape[1], _TRANSPOSE_COLUMNS):
        out[a : a + _TRANSPOSE_COLUMNS] = src[:, a : a + _TRANSPOSE_COLUMNS].T
    return out


def _pack(values: np.ndarray, width: int) -> bytes:
    """Sorted fixed-width values, byte-transposed (leading bytes together), zlib-compressed."""
    raw = np.frombuffer(values.tobytes(), np.uint8).reshape(-1, width) if len(values) \
        else np.zeros((0, width), np.uint8)
    return zlib.compress(_transposed(raw).data, 6)


def _unpack(blob: bytes | memoryview, width: int, count: int, where: Path) -> np.ndarray:
    try:
        raw = zlib.decompress(blob)
    except zlib.error:
        raise InputDataError(f"{where}: compressed values are corrupt") from None
    if len(raw) != width * count:
        raise InputDataError(f"{where}: {len(raw)} bytes of values, expected {width * count}")
    return _transposed(np.frombuffer(raw, np.uint8).reshape(width, count)).reshape(-1).view(f"S{width}")


def _frame(magic: bytes, header: dict[str, Any], payload: bytes) -> bytes:
    head = json.dumps(header, sort_keys=True).encode()
    return magic + len(head).to_bytes(4, "big") + head + payload


def _unframe(path: Path, magic: bytes, what: str) -> tuple[dict[str, Any], memoryview, memoryview, bytes]:
    """(header, payload, the framed bytes before the tag, the trailing 32-byte tag): views, not copies."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputDataError(f"{path}: cannot read the {what} ({exc.strerror})") from None
    if not data.startswith(magic) or len(data) < len(magic) + 36:
        raise InputDataError(f"{path}: not a vflcrypto {what} file")
    n = int.from_bytes(data[len(magic) : len(magic) + 4], "big")
    start = len(magic) + 4
    try:
        header = json.loads(data[start : start + n])
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise InputDataError(f"{path}: the {what} header is corrupt")
    view = memoryview(data)
    return header, view[start + n : -32], view[:-32], data[-32:]


def save_cache(path: str | os.PathLike[str], cache: OprfCache, key: OprfKey) -> None:
    """Write the cache (owner-only, atomically), tagged with an HMAC under the key."""
    if cache.key_id != key.key_id:
        raise ConfigurationError("a cache is saved with the key it was built with")
    header = {"format": "vflcrypto-oprf-cache", "version": 1, "key_id": cache.key_id,
              "generation": cache.generation, "count": cache.count, "set_digest": f"{cache.set_digest:064x}",
              "value_bytes": oprf.OUTPUT_BYTES, "compression": "zlib, byte-transposed"}
    packed = _pack(cache.values, oprf.OUTPUT_BYTES)
    payload = packed + zlib.compress(cache.gens.astype("<u4").tobytes(), 6)
    # the header's values_length splits the two compressed parts
    framed = _frame(_CACHE_MAGIC, {**header, "values_length": len(packed)}, payload)
    atomic_write_bytes(path, framed + oprf.mac(key.mac_key(), framed), permissions=PRIVATE, exact_mode=0o600)


def load_cache(path: str | os.PathLike[str], key: OprfKey) -> OprfCache:
    """Read a cache; another key's cache or an altered one is an :class:`InputDataError` of one line."""
    path = Path(path)
    header, payload, framed, tag = _unframe(path, _CACHE_MAGIC, "OPRF cache")
    if header.get("key_id") != key.key_id:
        raise InputDataError(f"{path}: cache built with OPRF key {header.get('key_id')}, but the key file holds "
                             f"{key.key_id}: rebuild the cache with this key or use its own key file")
    if not hmac.compare_digest(tag, oprf.mac(key.mac_key(), framed)):
        raise InputDataError(f"{path}: cache fails its integrity check (altered or corrupted): rebuild it")
    count, split = int(header["count"]), int(header["values_length"])
    values = _unpack(payload[:split], oprf.OUTPUT_BYTES, count, path)
    gens = np.frombuffer(zlib.decompress(payload[split:]), "<u4").astype(np.uint32)
    return OprfCache(key.key_id, int(header["generation"]), int(header["set_digest"], 16), values, gens)


@dataclass(frozen=True)
class Transfer:
    """What the small party holds: the large set's truncated OPRF values, sorted."""

    key_id: str
    generation: int
    n_large: int
    value_bytes: int
    max_small: int
    values: np.ndarray  # S<value_bytes>, sorted

    @property
    def false_match_bound(self) -> float:
        return oprf.false_match_bound(self.n_large, self.max_small, self.value_bytes)

    def covers(self, n_small: int) -> bool:
        """Whether a run with ``n_small`` IDs keeps the false-match probability ≤ 2⁻⁴⁰ with this truncation."""
        return oprf.false_match_bound(self.n_large, n_small, self.value_bytes) <= 2.0 ** -oprf.FALSE_MATCH_BITS

    def contains(self, values: np.ndarray) -> np.ndarray:
        """Which of the small party's full OPRF values (``S16``) are in the transfer."""
        short = np.frombuffer(np.ascontiguousarray(np.frombuffer(values.tobytes(), np.uint8)
                                                   .reshape(-1, oprf.OUTPUT_BYTES)[:, : self.value_bytes]).tobytes(),
                              dtype=f"S{self.value_bytes}") if len(values) else np.zeros(0, f"S{self.value_bytes}")
        return _isin(short, self.values)


def export_transfer(cache: OprfCache, max_small: int, *, since: int = -1, value_bytes: int | None = None) -> Transfer:
    """The values to ship: all (``since=-1``) or those added after generation ``since`` (a delta).

    ``value_bytes`` is chosen from ``(|large set|, max_small)`` for a full transfer; a delta
    keeps its base's and is refused when the grown set no longer meets the 2⁻⁴⁰ bound with it.
    """
    width = value_bytes if value_bytes is not None else oprf.truncation_bytes(cache.count, max_small)
    t = Transfer(cache.key_id, cache.generation, cache.count, width, max_small, np.zeros(0, f"S{width}"))
    if not t.covers(max_small):
        raise ConfigurationError(f"{cache.count} cached IDs and up to {max_small} small-set IDs need more than "
                                 f"{width} bytes per value: send a full transfer")
    chosen = cache.values if since < 0 else cache.values[cache.gens > since]
    raw = np.frombuffer(chosen.tobytes(), np.uint8).reshape(-1, oprf.OUTPUT_BYTES)[:, :width]
    vals = np.frombuffer(np.ascontiguousarray(raw).tobytes(), dtype=f"S{width}").copy()
    return replace(t, values=vals)  # truncating sorted values keeps them sorted


def merge_transfer(base: Transfer, delta: Transfer, since: int) -> Transfer:
    """``base`` with the values of a delta exported after generation ``since`` merged in."""
    if delta.key_id != base.key_id or delta.value_bytes != base.value_bytes or since != base.generation:
        raise InputDataError(f"the delta (key {delta.key_id}, after generation {since}, {delta.value_bytes}-byte "
                             f"values) does not continue this transfer (key {base.key_id}, generation "
                             f"{base.generation}, {base.value_bytes}-byte values)")
    merged = np.sort(np.concatenate([base.values, delta.values]))
    if len(merged) != delta.n_large:
        raise InputDataError(f"after the delta the transfer holds {len(merged)} values, the large party "
                             f"reports {delta.n_large}")
    return replace(delta, values=merged, max_small=base.max_small)


def save_transfer(path: str | os.PathLike[str], t: Transfer, *, since: int = -1) -> None:
    """Write a transfer (``since`` ≥ 0: a delta after that generation) with a SHA-256 checksum."""
    header = {"format": "vflcrypto-oprf-transfer", "version": 1, "key_id": t.key_id, "generation": t.generation,
              "n_large": t.n_large, "value_bytes": t.value_bytes, "max_small": t.max_small, "since": since,
              "count": len(t.values), "false_match_bound": t.false_match_bound}
    framed = _frame(_TRANSFER_MAGIC, header, _pack(t.values, t.value_bytes))
    atomic_write_bytes(path, framed + hashlib.sha256(framed).digest(), permissions=PRIVATE, exact_mode=0o600)


def load_transfer(path: str | os.PathLike[str]) -> tuple[Transfer, int]:
    """A transfer file and its ``since`` (-1: a full transfer; g: a delta after generation g)."""
    path = Path(path)
    header, payload, framed, tag = _unframe(path, _TRANSFER_MAGIC, "OPRF transfer")
    if not hmac.compare_digest(tag, hashlib.sha256(framed).digest()):
        raise InputDataError(f"{path}: transfer fails its checksum (corrupted or truncated): ask for it again")
    width = int(header["value_bytes"])
    values = _unpack(payload, width, int(header["count"]), path)
    t = Transfer(str(header["key_id"]), int(header["generation"]), int(header["n_large"]), width,
                 int(header["max_small"]), values)
    return t, int(header["since"])
