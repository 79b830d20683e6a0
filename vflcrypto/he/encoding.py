"""Fixed-point encoding of real numbers into Z_n, and packing of many values per plaintext.

Paillier encrypts integers modulo ``n``. A real ``x`` is encoded as the integer
``round(x * 2**frac_bits)`` and a negative integer ``v`` as ``n + v`` (two's-complement
style modulo ``n``). Following python-paillier, only the lower and upper thirds of
``Z_n`` are valid encodings (``|v| <= n // 3``): a decrypted value that lands in the
middle third can only come from an overflow, so :func:`decode_fixed` raises
:class:`~vflcrypto.errors.EncodingOverflowError` instead of returning garbage. Overflows
that wrap all the way around cannot be detected; callers size ``frac_bits`` and the number
of additions so that results stay within ``n // 3`` (for 2048-bit keys that is ~2045
bits, far more than float64 data needs).

**Packing** (:class:`PackingSpec`) places several fixed-point values in one plaintext,
each in its own ``slot_bits``-wide slot. A slot stores ``v + offset`` with
``offset = 2**value_bits``, so slots are never negative and sums never borrow from the
neighbouring slot. After ``t`` packed encodings have been added (``terms``), a slot holds
``sum(v) + t * offset`` in ``[0, t * 2**(value_bits + 1))``; the ``headroom_bits`` above
``value_bits + 1`` make room for up to ``max_terms <= 2**headroom_bits`` additions.
Decoding subtracts ``t * offset`` and checks every slot lies in the range implied by
``t`` (detecting misuse where possible).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import EncodingError, EncodingOverflowError

__all__ = [
    "DEFAULT_FRAC_BITS",
    "PackingSpec",
    "decode_fixed",
    "encode_fixed",
    "encode_ints",
    "exceeds_bits",
    "max_int",
    "pack",
    "significant_frac_bits",
    "to_fixed_ints",
    "unpack",
]

DEFAULT_FRAC_BITS = 32  # ~1e-10 resolution: below float32 noise of gradients and features


def exceeds_bits(values: np.ndarray, bits: int) -> bool:
    """Whether some finite |value| >= 2^bits, for any ``bits`` (no float 2^bits: it overflows past 1023)."""
    arr = np.abs(np.asarray(values, dtype=np.float64))
    if arr.size == 0:
        return False
    return math.frexp(float(arr.max()))[1] > bits  # m * 2^e with m in [0.5, 1): >= 2^bits iff e > bits


def max_int(modulus: int) -> int:
    """Largest magnitude a signed encoding may have under ``modulus`` (``modulus // 3``)."""
    return int(modulus) // 3


def _check_finite(x: np.ndarray) -> None:
    if x.dtype.kind not in "fiub":
        raise EncodingError(f"cannot encode dtype {x.dtype}")
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        raise EncodingError("cannot encode NaN or infinity")


def _float_to_fixed(v: float, frac_bits: int) -> int:
    """Exact ``round(v * 2**frac_bits)`` for any finite float and any ``frac_bits >= 0``."""
    mant, exp = math.frexp(v)  # v = mant * 2**exp, 0.5 <= |mant| < 1
    m = int(mant * (1 << 53))  # exact: 53-bit integer mantissa
    shift = exp - 53 + frac_bits
    if shift >= 0:
        return m << shift
    # round half to even, like numpy.rint
    q, r = divmod(m, 1 << -shift)
    half = 1 << (-shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return q


def significant_frac_bits(X: np.ndarray, significant: int = 24, lo: int = 8, hi: int = DEFAULT_FRAC_BITS) -> int:
    """Fractional bits that give every column of ``X`` at least ``significant`` bits at its
    largest magnitude, within ``[lo, hi]``.

    Fewer bits than the fixed default make smaller exponents, and a plaintext-by-ciphertext
    dot product costs about one modular multiplication per ``c`` exponent bits: standardized
    features (|x| up to ~8) need 21 bits instead of 32. A column of zeros asks nothing; the
    column with the smallest top magnitude decides, so no column loses precision to another.
    """
    arr = np.abs(np.asarray(X, dtype=np.float64))
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.size == 0:
        return hi
    tops = arr.max(axis=0)
    tops = tops[np.isfinite(tops) & (tops > 0)]
    if tops.size == 0:
        return lo
    need = significant - math.floor(math.log2(float(tops.min())))
    return int(min(hi, max(lo, need)))


def to_fixed_ints(x: np.ndarray | Sequence[float] | float, frac_bits: int) -> np.ndarray:
    """``round(x * 2**frac_bits)`` as an int64 array when it fits, else an object array.

    Raises :class:`EncodingError` on NaN/inf or a non-numeric dtype.
    """
    if frac_bits < 0:
        raise EncodingError("frac_bits must be >= 0")
    arr = np.asarray(x)
    if arr.dtype == object:  # Python ints beyond int64 (or mixed numbers)
        flat = arr.ravel().tolist()
        if all(isinstance(v, int | np.integer) for v in flat):
            return np.array([int(v) << frac_bits for v in flat] or [], dtype=object).reshape(arr.shape)
        arr = arr.astype(np.float64)
    _check_finite(arr)
    if arr.dtype.kind in "iub":
        if arr.dtype.kind == "u" and arr.size and int(arr.max()) >= 2**62:
            arr = arr.astype(object)
        else:
            arr = arr.astype(np.int64)
        if frac_bits == 0:
            return arr
        if arr.dtype != object and (arr.size == 0 or int(np.abs(arr).max()) < 2 ** (62 - frac_bits)):
            return arr << frac_bits
        return np.vectorize(lambda v: int(v) << frac_bits, otypes=[object])(arr)
    arr = arr.astype(np.float64, copy=False)
    bound = float(np.abs(arr).max()) if arr.size else 0.0
    if bound * 2.0**frac_bits < 2.0**62:
        return np.rint(np.ldexp(arr, frac_bits)).astype(np.int64)
    return np.vectorize(lambda v: _float_to_fixed(float(v), frac_bits), otypes=[object])(arr)


def encode_ints(values: np.ndarray | Sequence[int], modulus: int) -> list[int]:
    """Signed integers to residues mod ``modulus``; |v| > modulus // 3 raises EncodingOverflowError."""
    bound = max_int(modulus)
    arr = np.asarray(values)
    if arr.dtype == np.int64 or (arr.dtype.kind in "iu" and arr.dtype.itemsize <= 8):
        ints = arr.ravel().tolist()  # magnitudes < 2**64 always fit under a >= 512-bit key
        if bound < 2**64 and any(abs(v) > bound for v in ints):
            raise EncodingOverflowError("value exceeds the encodable range")
    else:
        ints = [int(v) for v in arr.ravel().tolist()]
        if any(abs(v) > bound for v in ints):
            raise EncodingOverflowError("value exceeds the encodable range")
    n = int(modulus)
    return [v if v >= 0 else v + n for v in ints]


def encode_fixed(x: np.ndarray | Sequence[float] | float, frac_bits: int, modulus: int) -> list[int]:
    """Encode reals as signed fixed-point residues mod ``modulus`` (flattened, C order).

    Raises :class:`EncodingError` on NaN/inf and :class:`EncodingOverflowError` when
    ``|x| * 2**frac_bits`` exceeds ``modulus // 3`` (it never wraps).
    """
    return encode_ints(to_fixed_ints(x, frac_bits), modulus)


def decode_fixed(ints: Sequence[int], frac_bits: int, modulus: int) -> np.ndarray:
    """Inverse of :func:`encode_fixed`: residues mod ``modulus`` to float64.

    Raises :class:`EncodingOverflowError` for a residue in the middle third of ``Z_n`` (an
    overflow happened), for ``frac_bits`` the modulus cannot hold, or a result beyond
    float64's range.
    """
    n = int(modulus)
    bound = max_int(n)
    if frac_bits < 0 or frac_bits >= bound.bit_length():
        raise EncodingOverflowError(f"frac_bits={frac_bits} exceeds what the modulus can hold")
    signed = []
    for r in ints:
        r = int(r)
        if r <= bound:
            signed.append(r)
        elif r >= n - bound:
            signed.append(r - n)
        else:
            raise EncodingOverflowError("decoded value overflowed the encodable range")
    return ints_to_float(signed, frac_bits)


def ints_to_float(signed: Sequence[int], frac_bits: int) -> np.ndarray:
    """Signed fixed-point integers to float64 (correctly rounded)."""
    if not signed:
        return np.zeros(0, dtype=np.float64)
    lim = 2**62
    if all(-lim < v < lim for v in signed):
        return np.ldexp(np.asarray(signed, dtype=np.int64).astype(np.float64), -frac_bits)
    scale = 1 << frac_bits
    try:
        return np.asarray([v / scale for v in signed], dtype=np.float64)
    except OverflowError:
        raise EncodingOverflowError("decoded value exceeds the float64 range") from None


# --------------------------------------------------------------------------- packing


@dataclass(frozen=True)
class PackingSpec:
    """Layout of several fixed-point values in one plaintext.

    ``value_bits`` bounds the fixed-point integer of one value: ``|x| * 2**frac_bits <
    2**value_bits`` (so ``|x| < 2**(value_bits - frac_bits)``). A slot is ``slot_bits``
    wide and must hold ``value_bits + 1 + headroom_bits`` bits; up to ``max_terms``
    (default ``2**headroom_bits``) packed encodings may be summed into one ciphertext.
    Build one from the number of additions with :meth:`create`.
    """

    slot_bits: int
    frac_bits: int
    value_bits: int
    headroom_bits: int
    max_terms: int | None = None

    def __post_init__(self) -> None:
        if min(self.frac_bits, self.headroom_bits) < 0 or self.value_bits < 1:
            raise EncodingError("packing parameters must be non-negative")
        if self.frac_bits >= self.value_bits + 64:
            raise EncodingError("frac_bits leaves no room for the value")
        if self.slot_bits < self.value_bits + 1 + self.headroom_bits:
            raise EncodingError("slot_bits must be >= value_bits + 1 + headroom_bits")
        if self.max_terms is not None and not 1 <= self.max_terms <= 2**self.headroom_bits:
            raise EncodingError("max_terms must be in [1, 2**headroom_bits]")

    @classmethod
    def create(cls, *, max_terms: int, frac_bits: int = 24, value_bits: int | None = None,
               bound: float = 2.0**15) -> PackingSpec:
        """Spec for values with ``|x| < bound`` summed up to ``max_terms`` times.

        ``value_bits`` defaults to ``frac_bits + ceil(log2(bound))``.
        """
        if max_terms < 1:
            raise EncodingError("max_terms must be >= 1")
        if value_bits is None:
            value_bits = frac_bits + max(1, math.ceil(math.log2(bound)))
        headroom = max(0, (max_terms - 1).bit_length())
        return cls(value_bits + 1 + headroom, frac_bits, value_bits, headroom, max_terms)

    @property
    def terms_limit(self) -> int:
        """Most packed encodings one ciphertext may sum (``max_terms`` or ``2**headroom_bits``)."""
        return self.max_terms if self.max_terms is not None else 2**self.headroom_bits

    @property
    def offset(self) -> int:
        return 1 << self.value_bits

    def slots_for(self, modulus: int) -> int:
        """How many slots fit a plaintext below ``modulus`` (never touching its top bit)."""
        return self.slots_in(int(modulus).bit_length() - 1)

    def slots_in(self, plaintext_bits: int) -> int:
        """How many slots fit a plaintext of ``plaintext_bits`` bits (a key's ``plaintext_bits``)."""
        return plaintext_bits // self.slot_bits

    def offset_block(self, slots: int) -> int:
        """``sum_j offset << (j * slot_bits)`` for ``slots`` slots: one encoding of all zeros."""
        return sum(self.offset << (j * self.slot_bits) for j in range(slots))

    def to_tuple(self) -> tuple[int, int, int, int, int]:
        return (self.slot_bits, self.frac_bits, self.value_bits, self.headroom_bits,
                0 if self.max_terms is None else self.max_terms)

    @classmethod
    def from_tuple(cls, t: Sequence[int]) -> PackingSpec:
        if len(t) != 5 or not all(isinstance(v, int) for v in t):
            raise EncodingError("malformed packing spec")
        return cls(t[0], t[1], t[2], t[3], t[4] or None)


def pack(x: np.ndarray, spec: PackingSpec, modulus: int) -> list[int]:
    """Pack rows of ``x`` (shape (records, slots)) into one plaintext per row.

    Slot ``j`` of a row sits at bit ``j * slot_bits``. Raises :class:`EncodingError` on
    NaN/inf and :class:`EncodingOverflowError` if a value needs more than ``value_bits``
    or the row needs more slots than fit under ``modulus``.
    """
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise EncodingError("pack expects a 2-D array (records, slots)")
    if arr.shape[1] > spec.slots_for(modulus):
        raise EncodingOverflowError(
            f"{arr.shape[1]} slots of {spec.slot_bits} bits do not fit a "
            f"{int(modulus).bit_length()}-bit modulus"
        )
    fixed = to_fixed_ints(arr, spec.frac_bits)
    limit = 1 << spec.value_bits
    if fixed.size and fixed.dtype != object and spec.value_bits < 63:
        if int(np.abs(fixed).max()) >= limit:
            raise EncodingOverflowError("value exceeds the packing's value_bits")
        shifted = (fixed + limit).tolist()
    else:
        rows = fixed.tolist()
        if any(abs(int(v)) >= limit for r in rows for v in r):
            raise EncodingOverflowError("value exceeds the packing's value_bits")
        shifted = [[int(v) + limit for v in r] for r in rows]
    sb = spec.slot_bits
    out = []
    for row in shifted:
        acc = 0
        for v in reversed(row):
            acc = (acc << sb) | v
        out.append(acc)
    return out


def unpack(plaintexts: Sequence[int], spec: PackingSpec, slots: int, terms: int) -> np.ndarray:
    """Inverse of :func:`pack` after ``terms`` packed encodings were summed: (len, slots) floats.

    Raises :class:`EncodingOverflowError` when a slot lies outside the range ``terms``
    allows or bits are set above the last slot (a misuse or an overflow).
    """
    if terms < 0 or terms > spec.terms_limit:
        raise EncodingOverflowError("more additions than the packing's headroom allows")
    sb = spec.slot_bits
    mask = (1 << sb) - 1
    base = terms * spec.offset
    limit = terms << spec.value_bits  # |sum of terms values| < terms * 2**value_bits
    rows = []
    for p in plaintexts:
        p = int(p)
        if p >> (sb * slots):
            raise EncodingOverflowError("packed plaintext has bits above its last slot")
        row = []
        for _ in range(slots):
            v = (p & mask) - base
            if not -limit < v < limit and not (terms == 0 and v == 0):
                raise EncodingOverflowError("packed slot outside its range (overflow or misuse)")
            row.append(v)
            p >>= sb
        rows.append(row)
    flat = ints_to_float([v for r in rows for v in r], spec.frac_bits)
    return flat.reshape(len(rows), slots)
