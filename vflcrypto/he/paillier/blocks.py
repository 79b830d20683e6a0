"""Serialized ciphertext blocks, work-size helpers and the per-process worker caches.

Everything here is over plain ints and bytes, shared by the key, vector, compression and
pool-worker modules: the fixed-width wire/worker block format (:func:`ciphertext_width`,
:func:`ciphertexts_to_bytes`, :func:`ciphertexts_from_bytes`), the DJN exponent size
(:func:`_exp_bytes`), the cost model for :mod:`vflcrypto.parallel` (:func:`_cost_scale`,
:data:`_CHUNKS_PER_WORKER`), Montgomery batch inversion (:func:`batch_invert`) and the
caches a pool worker keeps between calls: per-key tables (:func:`_cached`, bounded by
:data:`~.fixed_base._CACHE_MAX_BYTES`) and recently shipped ciphertext chunks
(:func:`_chunk_cts`). It sits just above :mod:`.fixed_base`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import gmpy2
from gmpy2 import mpz

from .fixed_base import _CACHE_MAX_BYTES, _ONE

__all__ = ["batch_invert", "ciphertext_width", "ciphertexts_from_bytes", "ciphertexts_to_bytes"]

# Work sizes for vflcrypto.parallel, in "4096-bit modular multiplications".
_CHUNKS_PER_WORKER = 2


def _cost_scale(bits: int) -> float:
    """Relative cost of a mulmod mod n**2 for a ``bits``-bit n versus a 2048-bit n."""
    return (bits / 2048) ** 2


def ciphertext_width(n: int) -> int:
    """Bytes per serialized ciphertext: ``2 * ceil(bits/8)``."""
    return 2 * ((int(n).bit_length() + 7) // 8)


_MPZ_TO_BYTES = hasattr(mpz, "to_bytes")  # gmpy2 >= 2.2: no detour through a Python int (~1.5x faster)


def ciphertexts_to_bytes(cts: Sequence[Any], width: int) -> bytes:
    """Fixed-width big-endian block of ciphertexts (the wire and worker format; ``mpz`` or ``int``)."""
    if _MPZ_TO_BYTES:
        return b"".join(c.to_bytes(width, "big") for c in cts)
    return b"".join(int(c).to_bytes(width, "big") for c in cts)


def ciphertexts_from_bytes(blob: bytes, width: int) -> list[mpz]:
    """Inverse of :func:`ciphertexts_to_bytes` (no validation: see :meth:`PaillierVector.from_bytes`)."""
    fb = getattr(mpz, "from_bytes", None)  # gmpy2 >= 2.2: ~20% faster than via int
    if fb is None:
        ib = int.from_bytes
        return [mpz(ib(blob[i : i + width], "big")) for i in range(0, len(blob), width)]
    return [fb(blob[i : i + width], "big") for i in range(0, len(blob), width)]


def _exp_bytes(bits: int) -> int:
    """Bytes of the DJN exponent: ``ceil(bits/2)`` bits, rounded up to whole bytes."""
    return (math.ceil(bits / 2) + 7) // 8


_worker_cache: dict[tuple[Any, ...], Any] = {}
_worker_lock = threading.Lock()


def _cached(key: tuple[Any, ...], build: Any) -> Any:
    """Per-process cache of per-key objects (tables), bounded by count and table bytes."""
    with _worker_lock:
        hit = _worker_cache.get(key)
    if hit is None:
        hit = build()
        with _worker_lock:
            _worker_cache[key] = hit
    with _worker_lock:  # evict the oldest other entries while over budget
        for k in list(_worker_cache):
            held = sum(getattr(v, "nbytes_held", 0) for v in _worker_cache.values())
            if len(_worker_cache) <= 6 and held <= _CACHE_MAX_BYTES:
                break
            if k != key:
                del _worker_cache[k]
    return hit



_chunk_cache: dict[tuple[str, int], list[mpz]] = {}


def _chunk_cts(token: str, start: int, count: int, blob: bytes, width: int) -> list[mpz] | None:
    """Parse a ciphertext chunk, remembering the last few (a vector is often reused:
    SecureBoost bins the same gradient vector once per feature; a dot and a histogram
    share the vector). An empty ``blob`` asks for the cached chunk: ``None`` on a miss
    (the caller then sends the bytes)."""
    key = (token, start)
    with _worker_lock:
        hit = _chunk_cache.get(key)
    if hit is not None and len(hit) == count:
        return hit
    if not blob:
        return None
    cts = ciphertexts_from_bytes(blob, width)
    with _worker_lock:
        while len(_chunk_cache) >= 4:
            _chunk_cache.pop(next(iter(_chunk_cache)))
        _chunk_cache[key] = cts
    return cts



def batch_invert(cts: Sequence[mpz], mod: mpz) -> list[mpz]:
    """Montgomery's trick: all inverses for one inversion and 3 multiplications each."""
    if not cts:
        return []
    prefix = []
    acc = _ONE
    for c in cts:
        acc = acc * c % mod
        prefix.append(acc)
    inv = gmpy2.invert(acc, mod)
    out: list[mpz] = [_ONE] * len(cts)
    for i in range(len(cts) - 1, 0, -1):
        out[i] = inv * prefix[i - 1] % mod
        inv = inv * cts[i] % mod
    out[0] = inv
    return out

