"""The native group-product kernel: per-group ciphertext products (histograms) in C.

Summing encrypted values under Paillier or Okamoto–Uchiyama is multiplying ciphertexts
modulo the ciphertext modulus; a histogram multiplies each row's ciphertext into its bin.
In Python every step is a gmpy2 ``a * c % m`` (a multiplication, a division and two object
allocations, ~1.26 µs at 2048 bits here). The C extension ``_groupprod`` does the same
products in Montgomery arithmetic on GMP's mpn layer (~0.85 µs), reading the rows straight
from the wire format or from gmpy2's own ``mpz`` objects, so nothing is serialized, with the
GIL released, so :func:`group_products_threaded` spreads the rows over threads of this
process and nothing is shipped to a pool. Its output is the same bytes as the Python
kernel's (``tests/test_native_groupprod.py`` checks it against that kernel, GMP's own
``powmod`` and generated malformed inputs).

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

__all__ = ["available", "group_products", "group_products_threaded", "reads_mpz", "why_not"]

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
            _state["mpz"] = _probe_mpz(_groupprod)
        return _state["mod"]


def _probe_mpz(mod: Any) -> bool:
    """Whether the kernel reads gmpy2's mpz objects in place correctly: their struct layout is
    checked once against the bytes path on values of one, two and three limbs."""
    import gmpy2

    mod.set_mpz_type(gmpy2.mpz)
    m, w = (1 << 131) - 1, 17  # odd (a Mersenne number), three limbs
    probe = [gmpy2.mpz((1 << 130) + 12345), gmpy2.mpz(3), gmpy2.mpz((1 << 64) - 1)]
    keys = np.zeros((3, 1), dtype=np.int64)
    mb = m.to_bytes(w, "big")
    try:
        direct = mod.group_products_mpz(mb, w, probe, keys, 1, 1)
    except Exception:  # a layout this code does not know: keep to the bytes path
        return False
    return bool(direct is not None and direct == mod.group_products(
        mb, w, b"".join(int(x).to_bytes(w, "big") for x in probe), keys, 1, 1))


def reads_mpz() -> bool:
    """Whether :func:`group_products` takes a list of gmpy2 ``mpz`` (read in place, not serialized)."""
    return _load() is not None and bool(_state.get("mpz"))


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


Rows = bytes | memoryview | list[Any]


def group_products(modulus: int, width: int, rows: Rows, keys: np.ndarray, n_groups: int) -> bytes | None:
    """Products modulo the odd ``modulus`` of ``rows`` by group: a blob of big-endian fields of
    ``width`` bytes, or a list of gmpy2 ``mpz`` (:func:`reads_mpz`). ``keys`` (rows × columns,
    int64) names each row's group in each column, ``-1`` for none; empty groups give 1. The
    ``n_groups × width`` bytes of the results, or ``None`` when the kernel is not in use or a
    row is not an ``mpz`` below the modulus (the caller's Python kernel then decides). A group
    index out of range raises ``ValueError``."""
    mod = _load()
    if mod is None:
        return None
    k = np.ascontiguousarray(keys, dtype=np.int64)
    cols = k.shape[1] if k.ndim == 2 else 1
    m = int(modulus).to_bytes(max(1, (int(modulus).bit_length() + 7) // 8), "big")  # C checks it fits the width
    if isinstance(rows, list):
        if not _state.get("mpz"):
            return None
        listed: bytes | None = mod.group_products_mpz(m, width, rows, k, cols, n_groups)
        return listed
    out: bytes | None = mod.group_products(m, width, rows, k, cols, n_groups)
    return out


_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_pid = 0  # a forked child inherits the pool object but not its threads: it makes its own


def group_products_threaded(modulus: int, width: int, rows: Rows, keys: np.ndarray,
                            n_groups: int, threads: int) -> bytes | None:
    """:func:`group_products` over ``threads`` threads of this process, each on a share of the
    rows; their partial products are multiplied by the same kernel."""
    global _pool, _pool_size, _pool_pid
    count = len(keys)
    threads = max(1, min(threads, count // _THREAD_MIN_ROWS))
    if threads == 1 or _load() is None:
        return group_products(modulus, width, rows, keys, n_groups)
    with _lock:
        if _pool is None or _pool_size < threads or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="vfl-groupprod")
            _pool_size, _pool_pid = threads, os.getpid()
        pool = _pool
    bounds = np.linspace(0, count, threads + 1).astype(int).tolist()
    if isinstance(rows, list):
        shares: list[Rows] = [rows[a:b] for a, b in itertools.pairwise(bounds)]
    else:
        view = memoryview(rows)
        shares = [view[a * width : b * width] for a, b in itertools.pairwise(bounds)]
    futures = [pool.submit(group_products, modulus, width, share, keys[a:b], n_groups)
               for share, (a, b) in zip(shares, itertools.pairwise(bounds), strict=True)]
    parts = [f.result() for f in futures]
    if any(p is None for p in parts):
        return None
    merge = np.tile(np.arange(n_groups, dtype=np.int64), threads).reshape(-1, 1)
    return group_products(modulus, width, b"".join(p for p in parts if p is not None), merge, n_groups)
