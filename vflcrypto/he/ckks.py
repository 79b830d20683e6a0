"""CKKS approximate homomorphic encryption (TenSEAL) behind the vflcrypto vector interface.

CKKS (Cheon, Kim, Kim, Song, ASIACRYPT 2017) encrypts vectors of reals approximately:
a ciphertext at ``poly_modulus_degree`` N holds N/2 slots, supports slot-wise addition
and multiplication by plaintexts, and each multiplication consumes one *level* (one
prime of the coefficient modulus chain). Raw results carry an absolute error of about
2^-(scale_bits - 12) fresh and 2^-(scale_bits - 21) after a ``dot`` at the defaults
(:class:`~vflcrypto.he.flooding.ErrorModel`); a decryption that leaves its key holder
carries the flooding noise on top, about 23.5 bits wider.

Parameters (explicit, never implicit):

* ``poly_modulus_degree`` N = 16384 (slots = 8192) and ``coeff_mod_bit_sizes``
  (60, 54, 54, 54, 60): total 282 bits, below the 438-bit bound of the Homomorphic
  Encryption Standard (Albrecht et al., 2018, table for 128-bit classical security,
  ternary secret). Three multiplicative levels: a ``dot`` (two) leaves one, at the
  moduli q0·q1 (114 bits), which is what holds the masks of :func:`uniform_real_mask`;
  the last level (q0 alone) holds values below 2^5.
* ``global_scale_bits`` = 54: the encoding scale Δ = 2^54 (each rescale prime is 54 bits).
  The scale is this large because every decryption that leaves its key holder is
  flooded (below): flooding costs about 22 bits of precision at 30-bit statistical
  security, and a dot's error at this scale is about 2^-33, so a flooded dot result keeps
  about 2^-11 absolute precision. The former parameters (N = 8192, (60, 40, 40, 60), Δ = 2^40)
  leave a dot result with about 2^-21 before flooding, i.e. none after it: N = 8192's
  218-bit bound cannot hold a larger scale beside the room masks need.

Security notes (read before building a protocol on this module):

* **The secret context stays with its owner.** :meth:`CKKSContext.public` is the only
  form that may be sent (wire codec ``"ckks.ctx"`` refuses a context with a secret key).
* **IND-CPA^D (Li & Micciancio, EUROCRYPT 2021): decryptions are flooded by default.** A
  CKKS decryption is the message *plus the noise*, and the noise depends on the secret
  key: a decrypted result shared raw with a party that knows the message lets it recover
  the key. :meth:`CKKSVector.decrypt` therefore adds fresh Gaussian noise from the OS
  CSPRNG whose width follows from the ciphertext's estimated error and 30 bits of
  statistical security (:mod:`vflcrypto.he.flooding`). A protocol passes a
  :class:`~vflcrypto.he.flooding.Flooding` that counts every value its key releases;
  ``flood=False`` (the raw decryption) is for the key holder's own use, tests and
  benchmarks only.
* **Unused slots.** TenSEAL's rotate-and-sum leaves partial sums of individual products
  in the other slots, which a key owner could decrypt directly. :meth:`CKKSVector.sum`
  and :meth:`CKKSVector.dot` therefore always select the result slots with an indicator
  plaintext, so every ciphertext from this module holds exactly its logical values and
  zeros elsewhere. This costs one level.
* **Masks under CKKS are statistically hiding only to a bound.** CKKS has no modular
  wrap-around in the message space: a real mask r uniform on [-R, R] hides |v| <= B only
  up to statistical distance B/R, and R is capped by the ciphertext's moduli and by the
  float64 precision of a decoded value (:func:`mask_bound`: 2^32 after a ``dot``).
  :func:`mask_hiding_bits` gives the honest figure (25 bits for |v| <= 64 after a ``dot``
  at the default parameters), which protocols declare as their ``hiding_bits``; below the
  40 bits of :mod:`vflcrypto.sharing.masking`, so use Paillier where that is needed.
* Ciphertexts are not re-randomized and TenSEAL is not audited for side channels.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
import tenseal as ts
import tenseal.sealapi  # registers seal::Modulus so the coefficient moduli can be read

from ..errors import DecodeError, EncodingError, InsecureParameterError, KeyMismatchError
from .flooding import ErrorModel, Flooding

__all__ = [
    "DEFAULT_COEFF_MOD_BIT_SIZES",
    "DEFAULT_GLOBAL_SCALE_BITS",
    "DEFAULT_POLY_MODULUS_DEGREE",
    "HE_STANDARD_MAX_MODULUS_BITS",
    "MASK_MAX_BITS",
    "MIN_POLY_MODULUS_DEGREE",
    "CKKSContext",
    "CKKSVector",
    "mask_bound",
    "mask_hiding_bits",
    "uniform_real_mask",
]

DEFAULT_POLY_MODULUS_DEGREE = 16384
DEFAULT_COEFF_MOD_BIT_SIZES = (60, 54, 54, 54, 60)
DEFAULT_GLOBAL_SCALE_BITS = 54
MIN_POLY_MODULUS_DEGREE = 8192
# a mask's magnitude: a decoded float64 near 2^32 keeps 2^-20 absolute precision, far below the flooding noise
MASK_MAX_BITS = 32
# the default flooding model's assumptions for a ciphertext of unknown history (CKKSVector.default_flooding)
DEFAULT_FRESH_TERMS, DEFAULT_FACTOR_SQ, DEFAULT_VALUE_SQ = 16, 2.0**10, 2.0**20

# Homomorphic Encryption Standard (2018), 128-bit classical security, ternary secret:
# the largest total coefficient modulus (bits) for each ring degree.
HE_STANDARD_MAX_MODULUS_BITS = {
    1024: 27, 2048: 54, 4096: 109, 8192: 218, 16384: 438, 32768: 881,
}
FINGERPRINT_HEX = 32


def _check_parameters(degree: int, bit_sizes: Sequence[int], scale_bits: int,
                      allow_insecure: bool) -> None:
    if degree not in HE_STANDARD_MAX_MODULUS_BITS:
        raise InsecureParameterError(f"poly_modulus_degree must be a power of two in "
                                     f"{sorted(HE_STANDARD_MAX_MODULUS_BITS)}")
    if len(bit_sizes) < 2 or any(not 10 <= b <= 60 for b in bit_sizes):
        raise EncodingError("coeff_mod_bit_sizes needs >= 2 primes of 10..60 bits")
    if not 10 <= scale_bits < bit_sizes[0]:
        raise EncodingError("global_scale_bits must be below the first prime's bits")
    total = sum(bit_sizes)
    bound = HE_STANDARD_MAX_MODULUS_BITS[degree]
    if allow_insecure:
        return
    if degree < MIN_POLY_MODULUS_DEGREE:
        raise InsecureParameterError(
            f"poly_modulus_degree {degree} < {MIN_POLY_MODULUS_DEGREE} (allow_insecure=True for tests)")
    if total > bound:
        raise InsecureParameterError(
            f"total coefficient modulus {total} bits exceeds the HE standard's {bound} bits "
            f"for N={degree} (128-bit security)")


class CKKSContext:
    """A TenSEAL CKKS context: secret (owner's) or public (what others receive).

    Build with :meth:`generate` (owner) or :meth:`from_bytes` (receiver of a public
    context). ``fingerprint`` is the SHA-256 (first 32 hex digits) of the serialized
    public context; it is the same for the owner's secret context and every copy of its
    public context, and it is what a :class:`~vflcrypto.runtime.wire.KeyRing` indexes.
    """

    __slots__ = ("_public", "_public_bytes", "_ts", "fingerprint")

    def __init__(self, tscontext: ts.Context, public_bytes: bytes) -> None:
        """Internal; use :meth:`generate` or :meth:`from_bytes`."""
        self._ts = tscontext
        self._public_bytes = public_bytes
        self._public: CKKSContext | None = None
        self.fingerprint = hashlib.sha256(public_bytes).hexdigest()[:FINGERPRINT_HEX]

    @classmethod
    def generate(
        cls,
        poly_modulus_degree: int = DEFAULT_POLY_MODULUS_DEGREE,
        coeff_mod_bit_sizes: Sequence[int] = DEFAULT_COEFF_MOD_BIT_SIZES,
        global_scale_bits: int = DEFAULT_GLOBAL_SCALE_BITS,
        *,
        galois_keys: bool = True,
        allow_insecure: bool = False,
    ) -> CKKSContext:
        """Generate a fresh secret context (keys from SEAL's CSPRNG).

        ``galois_keys`` (rotation keys, ~135 MB at the defaults) are needed by :meth:`CKKSVector.sum`
        and :meth:`CKKSVector.dot`. Parameters beyond the HE standard's bound for the degree,
        or a degree below 8192, raise :class:`InsecureParameterError` unless
        ``allow_insecure``.
        """
        bit_sizes = [int(b) for b in coeff_mod_bit_sizes]
        _check_parameters(int(poly_modulus_degree), bit_sizes, int(global_scale_bits),
                          allow_insecure)
        try:
            tsctx = ts.context(ts.SCHEME_TYPE.CKKS, int(poly_modulus_degree),
                               coeff_mod_bit_sizes=bit_sizes)
        except ValueError as exc:  # SEAL enforces its own 128-bit bounds as well
            raise InsecureParameterError(f"SEAL rejected the parameters: {exc}") from None
        tsctx.global_scale = 2.0 ** int(global_scale_bits)
        if galois_keys:
            tsctx.generate_galois_keys()
        public_bytes = tsctx.serialize(save_secret_key=False)
        return cls(tsctx, public_bytes)

    @classmethod
    def from_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> CKKSContext:
        """Load a *public* context (as sent by its owner); validate its parameters."""
        if not isinstance(data, bytes):
            raise DecodeError("CKKS context must be bytes")
        try:
            tsctx = ts.context_from(data)
        except Exception:
            raise DecodeError("malformed CKKS context") from None
        if tsctx.has_secret_key():
            raise DecodeError("a CKKS context on the wire must not hold a secret key")
        ctx = cls(tsctx, data)
        _check_parameters(ctx.poly_modulus_degree, ctx.coeff_mod_bit_sizes,
                          ctx.global_scale_bits, allow_insecure)
        return ctx

    # -- properties ---------------------------------------------------------------

    @property
    def has_secret_key(self) -> bool:
        return bool(self._ts.has_secret_key())

    @property
    def poly_modulus_degree(self) -> int:
        return int(self._ts.seal_context().data.key_context_data().parms().poly_modulus_degree())

    @property
    def coeff_mod_bit_sizes(self) -> tuple[int, ...]:
        parms = self._ts.seal_context().data.key_context_data().parms()
        return tuple(int(q.bit_count()) for q in parms.coeff_modulus())

    @property
    def global_scale_bits(self) -> int:
        return round(math.log2(self._ts.global_scale))

    @property
    def slots(self) -> int:
        """Values per ciphertext: N / 2."""
        return self.poly_modulus_degree // 2

    @property
    def coeff_moduli(self) -> tuple[int, ...]:
        """The primes of the coefficient modulus, the special (key-switching) prime last."""
        parms = self._ts.seal_context().data.key_context_data().parms()
        return tuple(int(q.value()) for q in parms.coeff_modulus())

    def error_model(self) -> ErrorModel:
        """The per-slot error model of this context's ciphertexts (:class:`~vflcrypto.he.flooding.ErrorModel`)."""
        moduli = self.coeff_moduli
        return ErrorModel(self.poly_modulus_degree, moduli[:-1], moduli[-1], self.global_scale_bits)

    @property
    def max_depth(self) -> int:
        """Multiplicative levels of a fresh ciphertext."""
        return int(self._ts.seal_context().data.first_context_data().chain_index())

    def public(self) -> CKKSContext:
        """The public context (public, relinearization and Galois keys; no secret key), loaded once."""
        if not self.has_secret_key:
            return self
        if self._public is None:  # ~135 MB of keys at the defaults: deserialized on first use only
            self._public = CKKSContext(ts.context_from(self._public_bytes), self._public_bytes)
        return self._public

    def to_bytes(self) -> bytes:
        """Serialized public context. Never includes the secret key."""
        return self._public_bytes

    def secret_bytes(self) -> bytes:
        """The whole context *with* its secret key, for the owner's own storage only (never sent)."""
        if not self.has_secret_key:
            raise KeyMismatchError("this CKKS context holds no secret key")
        return bytes(self._ts.serialize(save_secret_key=True))

    @classmethod
    def from_secret_bytes(cls, data: bytes, public_bytes: bytes) -> CKKSContext:
        """Restore :meth:`secret_bytes` (with the public context it belongs to)."""
        try:
            tsctx = ts.context_from(data)
        except Exception:
            raise DecodeError("malformed CKKS secret context") from None
        return cls(tsctx, public_bytes)

    def _level(self, vec: ts.CKKSVector) -> int:
        ct = vec.ciphertext()[0]
        return int(self._ts.seal_context().data.get_context_data(ct.parms_id()).chain_index())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CKKSContext) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        kind = "secret" if self.has_secret_key else "public"
        return f"CKKSContext({kind}, fingerprint={self.fingerprint})"


def _as_float_array(x: Any, what: str) -> np.ndarray:
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise EncodingError(f"{what} must be numeric") from None
    if not np.all(np.isfinite(arr)):
        raise EncodingError(f"{what} contains NaN or infinity")
    return arr


class CKKSVector:
    """An immutable encrypted vector of reals, chunked over ciphertexts of N/2 slots.

    Layout invariant: every chunk is a TenSEAL vector of full size N/2 holding its values
    in slots [0, n) and (approximate) zeros elsewhere, so plaintext operands are zero-padded
    and no slot ever holds anything but the logical values.
    """

    __slots__ = ("_length", "_parts", "context")

    def __init__(self, context: CKKSContext, parts: list[ts.CKKSVector], length: int) -> None:
        """Internal; use :meth:`encrypt` or the wire codec."""
        if length < 0 or len(parts) != -(-length // context.slots):
            raise EncodingError("CKKS vector parts do not match its length")
        self.context = context
        self._parts = parts
        self._length = length

    # -- construction ---------------------------------------------------------------

    @classmethod
    def encrypt(cls, context: CKKSContext, x: np.ndarray | Sequence[float]) -> CKKSVector:
        """Encrypt a 1-D float array under ``context`` (secret or public)."""
        arr = _as_float_array(x, "plaintext").ravel()
        s = context.slots
        parts = []
        for start in range(0, len(arr), s):
            chunk = np.zeros(s)
            piece = arr[start:start + s]
            chunk[: len(piece)] = piece
            parts.append(ts.ckks_vector(context._ts, chunk.tolist()))
        return cls(context, parts, len(arr))

    # -- structure ------------------------------------------------------------------

    def __len__(self) -> int:
        return self._length

    @property
    def levels_left(self) -> int:
        """Multiplications still possible (0: no further multiply)."""
        return min((self.context._level(p) for p in self._parts), default=self.context.max_depth)

    def __repr__(self) -> str:
        return (f"CKKSVector(len={self._length}, levels_left={self.levels_left}, "
                f"context={self.context.fingerprint})")

    def _same(self, other: CKKSVector) -> None:
        if other.context.fingerprint != self.context.fingerprint:
            raise KeyMismatchError("CKKS vectors under different contexts")
        if len(other) != len(self):
            raise EncodingError(f"length mismatch: {len(self)} vs {len(other)}")

    def _padded_chunks(self, x: Any, what: str) -> list[list[float]] | float:
        """A plaintext operand as a scalar or as zero-padded chunks matching the layout."""
        arr = _as_float_array(x, what)
        if arr.ndim == 0:
            return float(arr)
        arr = arr.ravel()
        if len(arr) != self._length:
            raise EncodingError(f"{what} of length {len(arr)} vs vector of length {self._length}")
        s = self.context.slots
        out = []
        for start in range(0, self._length, s):
            chunk = np.zeros(s)
            piece = arr[start:start + s]
            chunk[: len(piece)] = piece
            out.append(chunk.tolist())
        return out

    def _need_level(self, op: str, levels: int = 1) -> None:
        if self.levels_left < levels:
            raise EncodingError(
                f"{op} needs {levels} multiplicative level(s) but the ciphertext has "
                f"{self.levels_left} left; generate the context with more 40-bit primes "
                "(and N=16384 if the HE standard's bound requires it)")

    # -- arithmetic -----------------------------------------------------------------

    def __add__(self, other: Any) -> CKKSVector:
        if isinstance(other, CKKSVector):
            self._same(other)
            parts = [a + b for a, b in zip(self._parts, other._parts, strict=True)]
        else:
            plain = self._padded_chunks(other, "addend")
            if isinstance(plain, float):
                # A scalar would fill the padding slots too: add it as a padded vector.
                plain = self._padded_chunks(np.full(self._length, plain), "addend")
                assert not isinstance(plain, float)  # a 1-D operand gives chunks
            parts = [a + p for a, p in zip(self._parts, plain, strict=True)]
        return CKKSVector(self.context, parts, self._length)

    __radd__ = __add__

    def rerandomize(self) -> CKKSVector:
        """Same values plus a fresh encryption of zero (public context suffices).

        A ciphertext derived from ciphertexts its receiver knows (e.g. its own [[u]] plus a
        plaintext) must be re-randomized before it is sent, or the receiver subtracts what
        it knows and reads the rest. This hides the values from a receiver without the key;
        the key holder, which decrypts, still sees an error shaped by how the ciphertext was
        computed (circuit privacy toward the key holder is not claimed: that would need the
        *sender* to flood; the decryptions the key holder releases are flooded, see :meth:`decrypt`).
        """
        return self + CKKSVector.encrypt(self.context, np.zeros(self._length))

    def __neg__(self) -> CKKSVector:
        return CKKSVector(self.context, [-p for p in self._parts], self._length)

    def __sub__(self, other: Any) -> CKKSVector:
        if isinstance(other, CKKSVector):
            self._same(other)
            parts = [a - b for a, b in zip(self._parts, other._parts, strict=True)]
            return CKKSVector(self.context, parts, self._length)
        return self + (-_as_float_array(other, "subtrahend"))

    def __rsub__(self, other: Any) -> CKKSVector:
        return (-self) + other

    def __mul__(self, other: Any) -> CKKSVector:
        """Multiply by a plaintext scalar or vector (consumes one level)."""
        if isinstance(other, CKKSVector):
            raise EncodingError("ciphertext-ciphertext multiplication is not offered")
        self._need_level("multiplication")
        plain = self._padded_chunks(other, "factor")
        if isinstance(plain, float):
            parts = [a * plain for a in self._parts]
        else:
            parts = [a * p for a, p in zip(self._parts, plain, strict=True)]
        return CKKSVector(self.context, parts, self._length)

    __rmul__ = __mul__

    def _select(self, totals: list[ts.CKKSVector], count: int) -> CKKSVector:
        """Place scalar ciphertexts (every slot = value) at slots 0..count-1, zeros elsewhere."""
        s = self.context.slots
        parts: list[ts.CKKSVector] = []
        for start in range(0, count, s):
            acc = None
            for j in range(start, min(start + s, count)):
                row = [0.0] * s
                row[j - start] = 1.0
                # (1 x s) plaintext matmul of a size-1 vector: multiplies by the indicator.
                placed = totals[j].mm([row])
                acc = placed if acc is None else acc + placed
            parts.append(acc)
        return CKKSVector(self.context, parts, count)

    def sum(self) -> CKKSVector:
        """Encrypted sum of all values, a vector of length 1 (one level, log2(N/2) rotations)."""
        if self._length == 0:
            raise EncodingError("sum of an empty vector")
        self._need_level("sum")
        acc = self._parts[0]
        for p in self._parts[1:]:
            acc = acc + p
        return self._select([acc.sum()], 1)

    def dot(self, X: np.ndarray) -> CKKSVector:
        """Xᵀv for a plaintext matrix X of shape (len(v), m): a vector of length m.

        Per column: slot-wise plaintext products over all chunks, added, one full
        rotate-and-sum (every slot then holds the column's total, so no partial sums
        remain), then an indicator multiply that places it in its output slot. Two levels;
        cost per column is (chunks) plaintext multiplies + log2(N/2) rotations.
        """
        mat = _as_float_array(X, "matrix")
        if mat.ndim != 2 or mat.shape[0] != self._length:
            raise EncodingError(f"matrix of shape {mat.shape} vs vector of length {self._length}")
        if self._length == 0 or mat.shape[1] == 0:
            raise EncodingError("dot with an empty vector or matrix")
        self._need_level("dot", 2)
        s = self.context.slots
        totals = []
        for j in range(mat.shape[1]):
            acc = None
            for c, part in enumerate(self._parts):
                col = np.zeros(s)
                piece = mat[c * s:(c + 1) * s, j]
                col[: len(piece)] = piece
                prod = part * col.tolist()
                acc = prod if acc is None else acc + prod
            assert acc is not None  # a non-empty vector has at least one part
            totals.append(acc.sum())
        return self._select(totals, mat.shape[1])

    # -- decryption -----------------------------------------------------------------

    @property
    def levels_used(self) -> int:
        """Multiplicative levels this vector has consumed since its encryption."""
        return self.context.max_depth - self.levels_left

    def default_flooding(self) -> Flooding:
        """The flooding :meth:`decrypt` applies when the caller knows nothing of the ciphertext's history.

        The error is modelled as ``ceil(levels_used / 2)`` chained :meth:`dot` products (a ``sum`` or
        a plaintext multiply counts as one), the first on a sum of 16 fresh encryptions, with
        plaintext columns of squared norm <= 2^10 and values of squared norm <= 2^20; the release
        is one decryption of ``len(self)`` values (OpenFHE's default of one adversarial query). A
        protocol that releases more, or knows its circuit, passes its own
        :class:`~vflcrypto.he.flooding.Flooding`.
        """
        model, depth = self.context.error_model(), self.context.max_depth
        var = DEFAULT_FRESH_TERMS * model.fresh()
        for step in range(-(-self.levels_used // 2)):
            var = model.dot(var, depth + 1 - 2 * step, DEFAULT_FACTOR_SQ, DEFAULT_VALUE_SQ)
        return Flooding(model.std(var), max(1, self._length))

    def decrypt(self, secret_context: CKKSContext, *, flood: bool | Flooding = True) -> np.ndarray:
        """Decrypt with the owner's secret context (approximate values, float64), flooded by default.

        ``flood=True`` adds the noise of :meth:`default_flooding`; a
        :class:`~vflcrypto.he.flooding.Flooding` adds its own (a protocol that counts the values its
        key releases); ``False`` returns the raw decryption, whose error depends on the secret key
        (IND-CPA^D): only for the key holder's own use, tests and benchmarks, never to be sent.
        """
        if (not isinstance(secret_context, CKKSContext)
                or secret_context.fingerprint != self.context.fingerprint
                or not secret_context.has_secret_key):
            raise KeyMismatchError("this context cannot decrypt the vector")
        sk = secret_context._ts.secret_key()
        out = np.empty(self._length)
        s = self.context.slots
        for c, part in enumerate(self._parts):
            n = min(s, self._length - c * s)
            out[c * s:c * s + n] = np.asarray(part.decrypt(sk)[:n])
        if flood is False:
            return out
        spec = self.default_flooding() if flood is True else flood
        if not isinstance(spec, Flooding):
            raise EncodingError("flood must be True, False or a Flooding")
        return spec.apply(out)

    # -- serialization --------------------------------------------------------------

    def to_parts_bytes(self) -> list[bytes]:
        """Serialized TenSEAL ciphertexts, one per chunk."""
        return [p.serialize() for p in self._parts]

    @classmethod
    def from_parts_bytes(cls, context: CKKSContext, length: int,
                         parts: Sequence[bytes]) -> CKKSVector:
        """Rebuild from :meth:`to_parts_bytes`; malformed input raises :class:`DecodeError`."""
        s = context.slots
        if not isinstance(length, int) or length < 0 or len(parts) != -(-length // s):
            raise DecodeError("CKKS vector length does not match its ciphertexts")
        out = []
        for data in parts:
            if not isinstance(data, bytes):
                raise DecodeError("CKKS ciphertext must be bytes")
            try:
                vec = ts.ckks_vector_from(context._ts, data)
                ok = vec.size() == s and len(vec.ciphertext()) == 1
                if ok:
                    context._level(vec)
            except Exception:
                raise DecodeError("malformed CKKS ciphertext") from None
            if not ok:
                raise DecodeError("CKKS ciphertext has an unexpected layout")
            out.append(vec)
        return cls(context, out, length)


# --------------------------------------------------------------------------- masks


def mask_bound(context: CKKSContext, levels_left: int = 0) -> float:
    """Largest magnitude a (masked) value may reach in a ciphertext with ``levels_left`` levels left.

    Such a ciphertext lives modulo the first ``levels_left + 1`` primes at scale 2^scale_bits,
    so |value| < 2^(their bits - scale_bits - 1); and a decoded float64 of magnitude 2^b keeps
    only 2^(b - 52) absolute precision, so the bound is capped at 2^MASK_MAX_BITS (32: the
    float then keeps 2^-20, far below the flooding noise of a decryption).
    """
    if not 0 <= levels_left <= context.max_depth:
        raise EncodingError(f"levels_left must be in 0..{context.max_depth}")
    bits = sum(context.coeff_mod_bit_sizes[:levels_left + 1]) - context.global_scale_bits - 1
    return 2.0 ** min(bits, MASK_MAX_BITS)


def mask_hiding_bits(context: CKKSContext, value_bound: float, levels_left: int = 0) -> int:
    """Statistical hiding (bits) of a uniform real mask on [-R, R] over |v| <= value_bound.

    R is :func:`mask_bound` (at ``levels_left``) minus the value range (so the sum cannot
    overflow); the statistical distance between masked values of two inputs is at most
    value_bound / R, i.e. ``log2(R / value_bound)`` bits, floored. Returns 0 when there
    is no room at all. This is what a protocol should declare as ``hiding_bits``.
    """
    if not value_bound > 0:
        raise EncodingError("value_bound must be positive")
    room = mask_bound(context, levels_left) - value_bound
    if room <= value_bound:
        return 0
    return max(0, math.floor(math.log2(room / value_bound)))


def uniform_real_mask(context: CKKSContext, size: int, value_bound: float, levels_left: int = 0) -> np.ndarray:
    """A mask uniform on [-R, R] (R = mask_bound(levels_left) - value_bound) from ``secrets``.

    53 random bits per value; hiding is :func:`mask_hiding_bits`, not 40 bits.
    """
    room = mask_bound(context, levels_left) - value_bound
    if room <= 0:
        raise EncodingError("value_bound leaves no room for a mask")
    u = np.array([secrets.randbits(53) for _ in range(size)], dtype=np.float64) / 2.0 ** 53
    return (2.0 * u - 1.0) * room
