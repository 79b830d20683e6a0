"""Integer arrays that cross the wire narrowed and zlib-compressed (codec tag ``"zarray"``).

A message field annotated :class:`ZArray` carries an integer (or bool) array whose content is
the same as a plain ``numpy.ndarray`` field's: only its encoding differs. The sender stores it in
the narrowest integer dtype that holds its values (a tree level's node of every row, -1..7 at depth
3, needs int8, not int32) and deflates that (RFC 1950 zlib, level 6); the receiver gets the
declared dtype back, value for value. Meant for plaintext index lists and memberships, which are
small-alphabet and repetitive; ciphertexts are uniformly random and are never compressed.

Decoding refuses, each with a one-line :class:`~vflcrypto.errors.DecodeError`, before it allocates
more than the array's declared size: a header naming a dtype not allowed on the wire or a
narrowing that could change values, a shape whose bytes exceed :data:`MAX_INFLATED_BYTES` (the
limit on what one compressed array may inflate to), a stream that inflates beyond its declared
shape (a decompression bomb: inflation stops at the declared size plus one byte), a malformed,
truncated or over-long stream, or one that inflates to fewer bytes than its shape.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from ..errors import DecodeError

__all__ = ["MAX_INFLATED_BYTES", "ZArray", "decode_zarray", "encode_zarray"]

MAX_INFLATED_BYTES = 1 << 28  # 256 MiB per array: 268M rows of int8 node ids
LEVEL = 6

_INT_DTYPES = tuple(np.dtype(t) for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"))
_ALLOWED = frozenset(d.str for d in (*_INT_DTYPES, np.dtype(bool)))


class ZArray(np.ndarray[Any, np.dtype[Any]]):
    """An integer or bool ``numpy`` array sent narrowed and deflated; otherwise a plain array.

    ``ZArray.of(a)`` views ``a`` (no copy); a message's ``__post_init__`` can wrap a field with it, so
    code that builds or reads the message keeps using ``numpy`` arrays.
    """

    @classmethod
    def of(cls, values: Any) -> ZArray:
        arr = np.asarray(values)
        if arr.dtype.str not in _ALLOWED:
            raise TypeError(f"a compressed wire array holds integers or bools, not {arr.dtype}")
        return arr if isinstance(arr, ZArray) else arr.view(cls)


def _narrowest(arr: np.ndarray) -> np.dtype[Any]:
    """The smallest integer dtype that holds every value of ``arr`` (its own for bools and empty arrays)."""
    if arr.dtype.kind == "b" or arr.size == 0:
        return arr.dtype
    lo, hi = int(arr.min()), int(arr.max())
    for dt in _INT_DTYPES:
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max and dt.itemsize <= arr.dtype.itemsize:
            return dt
    return arr.dtype


def encode_zarray(arr: ZArray) -> list[Any]:
    """``[dtype, wire dtype, shape, deflated bytes of the array in its wire dtype]``."""
    plain = np.ascontiguousarray(arr).view(np.ndarray)
    wire = _narrowest(plain)
    return [plain.dtype.str, wire.str, list(plain.shape), zlib.compress(plain.astype(wire).tobytes(), LEVEL)]


def decode_zarray(value: Any, limit: int = MAX_INFLATED_BYTES) -> ZArray:
    """Inflate and check an :func:`encode_zarray` value; raise a one-line :class:`DecodeError` otherwise."""
    if not (isinstance(value, list) and len(value) == 4):
        raise DecodeError("malformed compressed array")
    dtype_str, wire_str, shape, blob = value
    if dtype_str not in _ALLOWED or wire_str not in _ALLOWED or not isinstance(blob, bytes):
        raise DecodeError("compressed array dtype not allowed on the wire")
    dtype, wire = np.dtype(dtype_str), np.dtype(wire_str)
    if wire != dtype and not (wire.kind in "iu" and dtype.kind in "iu" and np.can_cast(wire, dtype, "safe")):
        raise DecodeError(f"compressed array narrowed from {dtype} to {wire}: not a lossless narrowing")
    if not (isinstance(shape, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                            for s in shape)):
        raise DecodeError("malformed compressed array shape")
    size = wire.itemsize
    for s in shape:
        size *= s
        if size > limit:
            break
    if size > limit:
        raise DecodeError(f"compressed array declares more than {limit} bytes inflated: refused")
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(blob, size + 1)
    except zlib.error as exc:
        raise DecodeError(f"malformed compressed array (zlib: {exc})") from None
    if len(raw) > size or inflater.unconsumed_tail:
        raise DecodeError(f"compressed array inflates beyond its declared {size} bytes (decompression bomb): refused")
    if not inflater.eof:
        raise DecodeError("compressed array stream is truncated")
    if inflater.unused_data:
        raise DecodeError("trailing bytes after the compressed array stream")
    if len(raw) != size:
        raise DecodeError(f"compressed array inflates to {len(raw)} bytes, its shape needs {size}")
    return np.frombuffer(raw, dtype=wire).reshape(shape).astype(dtype).view(ZArray)
