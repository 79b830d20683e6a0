"""The plaintext side of encryption, shared by every additively homomorphic scheme here.

Integers and reals become the scheme's plaintexts before a raw encryptor turns them into
ciphertexts: :func:`as_int_array` (what ``encrypt`` accepts), :func:`encrypt_fixed` and
:func:`encrypt_packed` (fixed-point values, one per ciphertext or packed into slots).
A scheme supplies its raw encryptor (plaintexts to ciphertexts, plus the serialized block
when the pool made one), its encoding of signed integers (Paillier: residues modulo
``n``; Okamoto–Uchiyama: the signed integers themselves) and its vector class. Packed
plaintexts are non-negative and below ``2**plaintext_bits``, valid under both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from gmpy2 import mpz

from ..encoding import DEFAULT_FRAC_BITS, PackingSpec, pack, to_fixed_ints
from ..errors import EncodingError, EncodingOverflowError
from .vector import CipherVector, PublicKeyLike

__all__ = ["RawEncrypt", "as_int_array", "encrypt_fixed", "encrypt_packed"]

V = TypeVar("V", bound=CipherVector)
RawEncrypt = Callable[[Sequence[int]], tuple[list[mpz], bytes | None]]


def as_int_array(values: Sequence[int] | np.ndarray) -> np.ndarray:
    """``values`` as a flat integer array; floats are refused (they need a fixed-point scale)."""
    arr = np.asarray(values) if not isinstance(values, np.ndarray) else values
    if arr.dtype.kind == "f":
        raise EncodingError("encrypt() takes integers; use encrypt_fixed() for floats")
    if arr.dtype.kind not in "iuOb":
        raise EncodingError(f"cannot encrypt dtype {arr.dtype}")
    return arr.ravel()


def encrypt_fixed(cls: type[V], pk: PublicKeyLike, raw: RawEncrypt, encode: Callable[[np.ndarray], list[int]],
                  x: Any, frac_bits: int | None, packing: PackingSpec | None) -> V:
    """Reals as fixed-point with ``frac_bits`` fractional bits (default 32), or packed per ``packing``."""
    if packing is not None:
        if frac_bits is not None and frac_bits != packing.frac_bits:
            raise EncodingError("frac_bits differs from the packing's frac_bits")
        return encrypt_packed(cls, pk, raw, np.asarray(x).ravel(), packing)
    fb = DEFAULT_FRAC_BITS if frac_bits is None else frac_bits
    cts, blob = raw(encode(to_fixed_ints(np.asarray(x).ravel(), fb)))
    return cls._make(pk, cts, frac_bits=fb, blob=blob)


def encrypt_packed(cls: type[V], pk: PublicKeyLike, raw: RawEncrypt, x: Any, spec: PackingSpec) -> V:
    """One ciphertext per row of ``x`` (records, slots); a 1-D ``x`` is packed densely."""
    arr = np.asarray(x)
    size = None
    if arr.ndim == 1:
        size = arr.shape[0]
        per = spec.slots_in(pk.plaintext_bits)
        if per < 1:
            raise EncodingOverflowError("packing slot wider than the key's plaintext space")
        rows = -(-size // per)
        padded = np.zeros(rows * per, dtype=np.float64 if arr.dtype.kind == "f" else arr.dtype)
        padded[:size] = arr
        arr = padded.reshape(rows, per)
    elif arr.ndim != 2:
        raise EncodingError("encrypt_packed expects a 1-D or 2-D array")
    cts, blob = raw(pack(arr, spec, 1 << pk.plaintext_bits))
    return cls._make(pk, cts, blob=blob, frac_bits=spec.frac_bits, packing=spec,
                     slots=arr.shape[1], terms=1, size=size)
