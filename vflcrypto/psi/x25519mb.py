"""Batched X25519: eight scalar multiplications per call with Intel's multi-buffer library.

ECDH-PSI's time is its X25519 scalar multiplications (two per ID per party; hashing and
serialisation are < 10 %). One call per ID through ``cryptography`` (OpenSSL) costs
~25-80 µs depending on load; Intel® Cryptography Primitives Library's ``crypto_mb``
(``mbx_x25519_mb8``, AVX-512 IFMA, eight independent multiplications per call; PyPI
``ipp-crypto``, Apache 2.0, with its compiler runtime ``intel-cmplr-lib-rt``) computes the
same RFC 7748 function several times faster per ID. This module loads it with ``ctypes``
when the package is installed and the CPU has AVX-512 IFMA (checked once against RFC 7748's
test vector); otherwise :func:`available` is false and :mod:`.primitives` keeps
``cryptography``. Outputs are bit-identical either way (tests compare them).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from pathlib import Path

import numpy as np

__all__ = ["available", "minus_one_rows", "noncanonical", "scalarmult", "zero_rows"]

_LANES = 8
POINT_BYTES = 32
# RFC 7748 § 5.2, first test vector: scalar, u-coordinate, output
_K = bytes.fromhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4")
_U = bytes.fromhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c")
_OUT = bytes.fromhex("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552")


def _lib_dirs() -> list[Path]:
    """Where pip puts the wheels' shared libraries (``<prefix>/lib``), and LD_LIBRARY_PATH."""
    dirs = [Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"]
    dirs += [Path(d) for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    return dirs


def _cpu_has_ifma() -> bool:
    """Whether the CPU reports AVX-512 F and IFMA (``/proc/cpuinfo``'s flags; false where it is unreadable)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return {"avx512f", "avx512ifma"} <= set(flags)


@functools.cache
def _function() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """``mbx_x25519_mb8`` if the library loads and computes RFC 7748's test vector, else ``None``."""
    if os.environ.get("VFLCRYPTO_X25519") == "openssl":  # force the one-call-per-ID path (benchmarks)
        return None
    if not _cpu_has_ifma():  # never call the AVX-512 code on a CPU without it (an illegal instruction kills us)
        return None
    for d in _lib_dirs():
        lib = d / "libcrypto_mb.so"
        if not lib.exists():
            continue
        try:
            for dep in ("libintlc.so.5", "libimf.so", "libsvml.so", "libirng.so"):  # the Intel compiler runtime
                if (d / dep).exists():
                    ctypes.CDLL(str(d / dep), mode=ctypes.RTLD_GLOBAL)
            fn = ctypes.CDLL(str(lib)).mbx_x25519_mb8
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        try:
            if _run(fn, _K, _U * _LANES) == _OUT * _LANES:
                return fn
        except OSError:
            continue
    return None


def available() -> bool:
    """True when batched X25519 is in use (the library loaded and passed the test vector)."""
    return _function() is not None


def _run(fn: ctypes._CFuncPtr, scalar: bytes, points: bytes) -> bytes:  # type: ignore[name-defined]
    n = len(points) // 32
    if n == 0:
        return b""
    src = np.frombuffer(points, np.uint8)
    out = np.zeros(n * 32, np.uint8)
    key = np.frombuffer(scalar, np.uint8).copy()
    lanes = -(-n // _LANES) * _LANES
    # each call takes three arrays of eight pointers; a short last batch repeats its first lane
    idx = np.arange(lanes, dtype=np.uint64)
    idx[n:] = (n - 1) // _LANES * _LANES
    out_ptrs = (out.ctypes.data + 32 * idx).astype(np.uint64)
    src_ptrs = (src.ctypes.data + 32 * idx).astype(np.uint64)
    key_ptrs = np.full(_LANES, key.ctypes.data, np.uint64)
    kp = key_ptrs.ctypes.data
    status = 0
    for b in range(0, lanes, _LANES):
        status |= fn(out_ptrs.ctypes.data + 8 * b, kp, src_ptrs.ctypes.data + 8 * b)
    if status:
        raise OSError(f"mbx_x25519_mb8 status {status:#x}")
    return out.tobytes()


def scalarmult(scalar: bytes, points: bytes) -> bytes:
    """X25519(scalar, u) for each 32-byte u in ``points`` (RFC 7748: the scalar clamped, u's top bit ignored).

    Small-order inputs differ from RFC 7748: u = 0, 1 and the two points of order 8 make the
    library report an error, and u = p − 1 gives a non-zero output where RFC 7748 gives zero
    (the library goes through the Edwards form, where u = −1 has no image); callers check
    u = p − 1 themselves and fall back on an error. Random inputs match ``cryptography`` bit
    for bit (tests). Raises :class:`OSError` if the library reports an error (callers
    fall back to ``cryptography``) and :class:`RuntimeError` if it is not available.
    """
    fn = _function()
    if fn is None:
        raise RuntimeError("batched X25519 is not available (pip install ipp-crypto intel-cmplr-lib-rt)")
    if len(scalar) != 32 or len(points) % 32:
        raise ValueError("X25519 takes a 32-byte scalar and whole 32-byte u-coordinates")
    return _run(fn, scalar, points)


def zero_rows(points: bytes | bytearray) -> list[int]:
    """Indices of all-zero 32-byte outputs (small-order inputs)."""
    rows = np.frombuffer(points, np.uint8).reshape(-1, POINT_BYTES)
    return np.nonzero(~rows.any(axis=1))[0].tolist()


def minus_one_rows(points: bytes) -> list[int]:
    """Indices of u = p − 1 (top bit ignored): small order, where the batched library's Edwards
    form gives a non-zero output and RFC 7748 zero (every other small-order u it refuses)."""
    rows = np.frombuffer(points, np.uint8).reshape(-1, POINT_BYTES)
    hit = (rows[:, 0] == 0xEC) & np.all(rows[:, 1:31] == 0xFF, axis=1) & ((rows[:, 31] & 0x7F) == 0x7F)
    return np.nonzero(hit)[0].tolist()


def noncanonical(points: bytes) -> bool:
    """Is any 32-byte little-endian u ≥ 2²⁵⁵ − 19 (top bit set, or in [p, 2²⁵⁵))?"""
    rows = np.frombuffer(points, np.uint8).reshape(-1, POINT_BYTES)
    top = rows[:, 31] >= 0x80
    high = (rows[:, 31] == 0x7F) & np.all(rows[:, 1:31] == 0xFF, axis=1) & (rows[:, 0] >= 0xED)
    return bool(np.any(top | high))
