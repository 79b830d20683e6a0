"""Random-band OKVS (RB-OKVS): an oblivious key-value store over 16-byte values.

After A. Bienstock, S. Patel, J. Y. Seo, K. Yeo, "Near-Optimal Oblivious Key-Value Stores
for Efficient PSI, PSU and Volume-Hiding Multi-Maps", USENIX Security 2023 (eprint 2023/903).

An OKVS encodes ``n`` key-value pairs into a vector ``P`` of ``m`` values (here elements of
GF(2)^128, 16 bytes, addition = XOR) such that decoding ``P`` at a key gives its value back.
In the random-band construction each key ``x`` gets, from a PRF, a start column
``s(x) ∈ [0, m - w]`` and a ``w``-bit band ``b(x)``, and::

    decode(P, x) = ⊕ { P[s(x) + k] : bit k of b(x) is set }

Encoding solves these ``n`` linear equations over GF(2) for ``P``: Gaussian elimination on
the band matrix with the rows sorted by start, in C (``vflcrypto/psi/_okvs.c``, whose
comments give the algorithm and why it is correct); decoding is about ``w/2`` XORs per key.

Parameters
    ``m = ⌈(1 + ε)·n⌉ + w`` columns with :data:`EPSILON` ε = 0.1 and :data:`BAND` w = 256.
    Encoding fails when the rows are linearly dependent. BPSY23 fit the failure probability
    experimentally: for ε = 0.1 it is about ``2^-λ`` with ``λ ≈ 0.2691·w − 15.21``, so
    w = 256 gives ≈ 2⁻⁵³ (the statistical security of this package's other hashing steps is
    2⁻⁴⁰, e.g. KKRT's cuckoo table). The fit comes from their experiments at n up to about
    2²⁰; it is an empirical bound, not a proof, and is taken to hold beyond. A smaller ε
    (fewer columns, less to send) needs a wider band for the same λ, hence more XORs per
    decode; ε = 0.1 and w = 256 send 1.1·n + 256 values and cost about 128 XORs per key.
    A failure reveals only that this key set's rows are dependent under this PRF key (the
    probability above): :class:`OkvsFailure` asks for a rerun with a fresh PRF key.

Keys to rows (:func:`rows`): each key is first hashed by the caller to 16 bytes ``h0``
(e.g. :func:`vflcrypto.psi.kkrt.item_hashes`); then AES-128 under a fresh 16-byte key, as a
PRF, gives four blocks ``B_c = AES_key(h0 ⊕ c·e₀)`` (``c`` = 0..3 XORed into ``h0``'s first
byte): ``B_0`` the start, ``B_1 ‖ B_2`` the band, ``B_3`` a pseudorandom value per key.

Caveats
    Columns that are no row's pivot are zero unless ``fill`` is given, so ``P`` on its own
    shows which columns the keys' bands left free: protocols that send ``P`` mask it (the
    VOLE PSI adds a one-time pad from the VOLE) or pass random ``fill``. Duplicate keys give
    identical rows and fail: the caller deduplicates. Decoding at a key that was not encoded
    gives an unrelated value. The C code is not constant-time in the band bits (encoding and
    the portable decoding skip zero bits; the AVX2 and AVX-512 decodings do not branch on
    them, but every path visits rows in the order of their starts) and memory is not wiped.

Needs the compiled extension ``vflcrypto.psi._okvs``: :func:`available` and
:func:`why_not` say whether it is usable here (it is not built without a C compiler, and
``VFLCRYPTO_NATIVE=0`` switches it off); without it :func:`encode` and :func:`decode`
raise :class:`~vflcrypto.errors.ProtocolError`.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import ProtocolError
from .kkrt import aes_prf, native_module, native_off

__all__ = ["BAND", "EPSILON", "VALUE_BYTES", "OkvsFailure", "available", "columns", "decode", "encode", "rows",
           "why_not"]

BAND = 256  # band width w in bits: failure ≈ 2^-(0.2691·w − 15.21) ≈ 2^-53 at ε = 0.1 (BPSY23's fit)
EPSILON = 0.1  # column overhead: m = ⌈(1 + ε)·n⌉ + w
VALUE_BYTES = 16  # one element of GF(2)^128
_MAX_WORDS = 8  # the C code takes bands of 64..512 bits
_CHUNK = 1 << 16  # items per PRF call in rows(): 4 MiB of AES input at the default width


_SPLIT = 1 << 17  # rows from which decode runs on two threads


class OkvsFailure(ProtocolError):
    """The band system is singular: no encoding exists (≈ 2⁻⁵³ for distinct keys at the default width)."""


def _native() -> tuple[Any, str | None]:
    """The extension module and ``None``, or ``None`` and the reason it is unusable here."""
    if native_off():
        return None, "switched off by VFLCRYPTO_NATIVE=0"
    mod = native_module("_okvs")
    if mod is None:
        return None, "the C extension vflcrypto.psi._okvs is not built (no C compiler at install?)"
    return mod, None


def available() -> bool:
    """Whether the compiled OKVS can be used in this process."""
    return _native()[0] is not None


def why_not() -> str | None:
    """Why the compiled OKVS is unusable here, or ``None`` when it is usable."""
    return _native()[1]


def _require() -> Any:
    mod, why = _native()
    if mod is None:
        raise ProtocolError(f"the VOLE PSI needs the compiled OKVS extension vflcrypto.psi._okvs: {why}")
    return mod


def columns(n: int) -> int:
    """``m = ⌈(1 + ε)·n⌉ + w``: the OKVS size for ``n`` keys (``n ≥ 0``)."""
    if n < 0:
        raise ProtocolError(f"an OKVS holds a non-negative number of keys, not {n}")
    return math.ceil((1 + EPSILON) * n) + BAND


def rows(h0: np.ndarray, key: bytes, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each key's row from its 16-byte hash: ``(starts, bands, values)``.

    ``h0``: ``n × 16`` uint8 item hashes; ``key``: the 16-byte AES-128 PRF key; ``m``: the
    columns (:func:`columns`). With ``B_c = AES_key(h0 ⊕ c·e₀)`` (``c`` XORed into byte 0):
    ``starts`` (``n`` int64) = ``B_0``'s first 8 bytes, little-endian, mod ``m − BAND + 1``
    (bias ≤ m/2⁶⁴); ``bands`` (``n × BAND/64`` uint64, bit k in word k // 64) = ``B_1 ‖ B_2``
    read as little-endian words, bit 0 forced to 1 (no band is empty and every row has a
    set bit at its start); ``values`` (``n × 16`` uint8) = ``B_3``. Distinct hashes give
    distinct PRF inputs unless two differ only by 1..3 in byte 0 (probability ≤ 3n²/2¹²⁸).
    In C with the CPU's AES instructions where the extension and the CPU have them (one pass,
    several times faster), else in numpy over OpenSSL's AES; the same rows either way.
    """
    if not isinstance(h0, np.ndarray) or h0.dtype != np.uint8 or h0.ndim != 2 or h0.shape[1] != 16:
        raise ProtocolError(f"item hashes must be an n × 16 uint8 array, got {_describe(h0)}")
    if not isinstance(key, bytes) or len(key) != 16:
        raise ProtocolError("the OKVS row key must be 16 bytes (AES-128)")
    if m < BAND:
        raise ProtocolError(f"an OKVS of band width {BAND} needs at least {BAND} columns, not {m}")
    native, _ = _native()
    if native is not None and BAND % 128 == 0:  # in C with AES-NI: one pass, the same rows
        made = native.rows(np.ascontiguousarray(h0), key, m, BAND)
        if made is not None:
            return (np.frombuffer(made[0], np.int64), np.frombuffer(made[1], np.uint64).reshape(len(h0), BAND // 64),
                    np.frombuffer(made[2], np.uint8).reshape(len(h0), VALUE_BYTES))
    n, blocks = len(h0), 2 + BAND // 128  # B_0, the band's blocks, the value's
    starts = np.empty(n, np.int64)
    bands = np.empty((n, BAND // 64), np.uint64)
    values = np.empty((n, VALUE_BYTES), np.uint8)
    tweak = np.arange(blocks, dtype=np.uint8)
    for lo in range(0, n, _CHUNK):  # chunks keep the PRF's temporaries small (cache, peak memory)
        part = h0[lo : lo + _CHUNK]
        inputs = np.empty((len(part), blocks, 16), np.uint8)  # each item's blocks side by side
        inputs[:] = part[:, np.newaxis, :]
        inputs[:, :, 0] ^= tweak
        out = aes_prf(key, inputs)
        first = np.ascontiguousarray(out[:, 0, :8]).view("<u8").reshape(-1)
        starts[lo : lo + len(part)] = first % np.uint64(m - BAND + 1)
        bands[lo : lo + len(part)] = out[:, 1 : blocks - 1].reshape(len(part), BAND // 8).view("<u8")
        values[lo : lo + len(part)] = out[:, blocks - 1]
    bands[:, 0] |= np.uint64(1)
    return starts, bands, values


def _describe(a: object) -> str:
    if isinstance(a, np.ndarray):
        return f"{a.dtype} array of shape {a.shape}"
    return type(a).__name__


def _check_rows(starts: np.ndarray, bands: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Contiguous copies-if-needed of the rows and the band width ``w``, or :class:`ProtocolError`."""
    if not isinstance(starts, np.ndarray) or starts.dtype != np.int64 or starts.ndim != 1:
        raise ProtocolError(f"starts must be a 1-D int64 array, got {_describe(starts)}")
    if (not isinstance(bands, np.ndarray) or bands.dtype != np.uint64 or bands.ndim != 2
            or not 1 <= bands.shape[1] <= _MAX_WORDS or len(bands) != len(starts)):
        raise ProtocolError(f"bands must be an n × w/64 uint64 array (n = {len(starts)}, w = 64..512), "
                            f"got {_describe(bands)}")
    return np.ascontiguousarray(starts), np.ascontiguousarray(bands), 64 * bands.shape[1]


def encode(starts: np.ndarray, bands: np.ndarray, values: np.ndarray, m: int,
           fill: np.ndarray | None = None) -> np.ndarray:
    """``P`` (``m × 16`` uint8, read-only) with ``decode(P, starts, bands) == values``.

    The rows may come in any order; the inputs are not modified. Columns that are no row's
    pivot are zero, or those of ``fill`` (``m × 16`` uint8, e.g. random) when given. Raises
    :class:`OkvsFailure` when the rows are linearly dependent (duplicate keys included) and
    :class:`~vflcrypto.errors.ProtocolError` for malformed rows or starts outside ``0..m−w``.
    """
    starts, bands, w = _check_rows(starts, bands)
    if not isinstance(values, np.ndarray) or values.dtype != np.uint8 or values.shape != (len(starts), VALUE_BYTES):
        raise ProtocolError(f"values must be an n × 16 uint8 array (n = {len(starts)}), got {_describe(values)}")
    extra: tuple[np.ndarray, ...] = ()
    if fill is not None:
        if not isinstance(fill, np.ndarray) or fill.dtype != np.uint8 or fill.shape != (m, VALUE_BYTES):
            raise ProtocolError(f"fill must be an m × 16 uint8 array (m = {m}), got {_describe(fill)}")
        extra = (np.ascontiguousarray(fill),)
    native = _require()
    try:
        out = native.encode(starts, bands, np.ascontiguousarray(values), m, w, *extra)
    except native.SingularError as exc:
        raise OkvsFailure("the band system is singular, an event of probability about 2^-53 for distinct keys at "
                          "the default width; rerun with a fresh key") from exc
    except (ValueError, OverflowError) as exc:
        raise ProtocolError(f"OKVS encode: {exc}") from exc
    return np.frombuffer(out, np.uint8).reshape(m, VALUE_BYTES)


def decode(P: np.ndarray, starts: np.ndarray, bands: np.ndarray) -> np.ndarray:
    """Each row's value (``n × 16`` uint8, read-only): the XOR of ``P[s + k]`` over its band's set bits ``k``."""
    starts, bands, w = _check_rows(starts, bands)
    if not isinstance(P, np.ndarray) or P.dtype != np.uint8 or P.ndim != 2 or P.shape[1] != VALUE_BYTES:
        raise ProtocolError(f"the OKVS must be an m × 16 uint8 array, got {_describe(P)}")
    native = _require()
    P = np.ascontiguousarray(P)
    half = len(starts) // 2 if len(starts) >= _SPLIT else 0
    try:
        if not half:
            out = native.decode(P, starts, bands, w)
        else:  # two halves on two threads (the C code releases the GIL): a receiver decodes while its peer waits
            with ThreadPoolExecutor(2) as pool:
                first = pool.submit(native.decode, P, starts[:half], bands[:half], w)
                second = native.decode(P, starts[half:], bands[half:], w)
                out = first.result() + second
    except (ValueError, OverflowError) as exc:
        raise ProtocolError(f"OKVS decode: {exc}") from exc
    return np.frombuffer(out, np.uint8).reshape(len(starts), VALUE_BYTES)
