"""The native group-product kernel: per-group ciphertext products (histograms) in C.

Summing encrypted values under Paillier or Okamoto–Uchiyama is multiplying ciphertexts
modulo the ciphertext modulus; a histogram multiplies each row's ciphertext into its bin.
In Python every step is a gmpy2 ``a * c % m`` (a multiplication, a division and two object
allocations, ~1.26 µs at 2048 bits here). The C extension ``_groupprod`` does the same
products in Montgomery arithmetic on GMP's mpn layer, reading the rows straight from the
wire format, with the GIL released (so :func:`group_products` spreads rows over threads of
this process: nothing is serialized or shipped). Its output is the same bytes as the Python
kernel's (``tests/test_native_groupprod.py`` checks both ways and GMP's own ``powmod``).

GMP comes from gmpy2: its wheel bundles a libgmp that is already loaded in this process,
and :func:`_libgmp` finds its path (or the system's libgmp) for the extension's ``dlopen``.
Where the extension was not built (no C compiler at install time) or no libgmp is found,
:func:`available` is false, :func:`why_not` says why, and every caller keeps its Python
kernel; nothing else changes.
"""

from __future__ import annotations

import ctypes.util
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["available", "group_products", "group_products_threaded", "why_not"]

_lock = threading.Lock()
_state: dict[str, Any] = {}
#: rows below which one thread does the whole call (thread hand-off costs ~50 µs)
_THREAD_MIN_ROWS = 512


def _libgmp() -> str | None:
    """The libgmp gmpy2 loaded (its wheel's ``gmpy2.libs``), else the system's, else ``None``."""
    import gmpy2

    here = Path(gmpy2.__file__).resolve().parent
    for libs in (here.parent / "gmpy2.libs", here / ".dylibs", here):
        found = sorted(libs.glob("libgmp*.so*")) if libs.is_dir() else []
        if found:
            return str(found[0])
    return ctypes.util.find_library("gmp")


def _load() -> Any:
    with _lock:
        if "mod" not in _state:
            _state["mod"], _state["why"] = None, ""
            if os.environ.get("VFLCRYPTO_NATIVE", "").strip().lower() in ("0", "off", "no", "false"):
                _state["why"] = "switched off by VFLCRYPTO_NATIVE=0"
                return None
            try:
                from . import _groupprod  # type: ignore[attr-defined]
            except ImportError as exc:
                _state["why"] = f"the C extension was not built ({exc})"
                return None
            path = _libgmp()
            if path is None:
                _state["why"] = "no libgmp found beside gmpy2 or on the system"
                return None
            try:
                _groupprod.init(path)
            except OSError as exc:
                _state["why"] = str(exc)
                return None
            _state["mod"], _state["path"] = _groupprod, path
        return _state["mod"]


def available() -> bool:
    """Whether the C kernel is in use (built, and GMP's functions found)."""
    return _load() is not None


def why_not() -> str:
    """Why the C kernel is not in use (empty when it is)."""
    _load()
    return str(_state.get("why", ""))


def _reset() -> None:
    """Forget the load (tests switch the kernel off and on with ``VFLCRYPTO_NATIVE``)."""
    with _lock:
        _state.clear()


def group_products(modulus: int, width: int, blob: bytes | memoryview, keys: np.ndarray,
                   n_groups: int) -> bytes | None:
    """Products modulo the odd ``modulus`` of the rows of ``blob`` (big-endian, ``width`` bytes
    each) by group: ``keys`` (rows × columns, int64) names each row's group in each column,
    ``-1`` for none; empty groups give 1. The ``n_groups × width`` bytes of the results, or
    ``None`` when the kernel is not in use or a row is not below the modulus (the caller's
    Python kernel then decides). A group index out of range raises ``ValueError``."""
    mod = _load()
    if mod is None:
        return None
    k = np.ascontiguousarray(keys, dtype=np.int64)
    cols = k.shape[1] if k.ndim == 2 else 1
    m = int(modulus).to_bytes(max(1, (int(modulus).bit_length() + 7) // 8), "big")  # C checks it fits the width
    out: bytes | None = mod.group_products(m, width, blob, k, cols, n_groups)
    return out


_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def group_products_threaded(modulus: int, width: int, blob: bytes | memoryview, keys: np.ndarray,
                            n_groups: int, threads: int) -> bytes | None:
    """:func:`group_products` over ``threads`` threads of this process, each on a share of the
    rows; their partial products are multiplied by the same kernel."""
    global _pool, _pool_size
    rows = len(keys)
    threads = max(1, min(threads, rows // _THREAD_MIN_ROWS))
    if threads == 1 or _load() is None:
        return group_products(modulus, width, blob, keys, n_groups)
    with _lock:
        if _pool is None or _pool_size < threads:
            _pool, _pool_size = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="vfl-groupprod"), threads
        pool = _pool
    view = memoryview(blob)
    bounds = np.linspace(0, rows, threads + 1).astype(int)
    futures = [pool.submit(group_products, modulus, width, view[a * width : b * width], keys[a:b], n_groups)
               for a, b in itertools.pairwise(bounds.tolist())]
    parts = [f.result() for f in futures]
    if any(p is None for p in parts):
        return None
    merge = np.tile(np.arange(n_groups, dtype=np.int64), threads).reshape(-1, 1)
    return group_products(modulus, width, b"".join(p for p in parts if p is not None), merge, n_groups)
