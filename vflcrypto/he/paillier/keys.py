"""Paillier keys: generation, the public key (DJN encryption) and the private key (CRT).

Holds :class:`PaillierPublicKey` (``n``, fingerprint, modulus checks, the per-key-object
obfuscation base ``hs``, public-key encryption), :class:`PaillierPrivateKey` (CRT
decryption, decompression, faster key-holder encryption, ``phe`` interop),
:func:`generate_keypair` with :func:`_random_prime`, and the key sizes
:data:`DEFAULT_KEY_BITS` / :data:`MIN_KEY_BITS`. Keys build and decrypt vectors, so this
is the top module of the package: it imports :mod:`.vector` and :mod:`.compress`, never
the other way round.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Sequence
from typing import Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from ...errors import DecodeError, EncodingOverflowError, InsecureParameterError, KeyMismatchError
from ..encoding import decode_fixed, encode_ints, unpack
from .blocks import _cost_scale, _exp_bytes, ciphertext_width
from .compress import CompressedVector
from .fixed_base import _FixedBase
from .kernels import (
    _CrtDecryptor,
    _CrtEncryptor,
    _obfuscate_public,
    _w_decrypt,
    _w_encrypt_private,
    _w_encrypt_public,
)
from .plain import Encrypting, pooled_decrypt, pooled_encrypt
from .vector import CipherVector, PaillierVector

__all__ = ["DEFAULT_KEY_BITS", "MIN_KEY_BITS", "PaillierPrivateKey", "PaillierPublicKey", "generate_keypair"]

DEFAULT_KEY_BITS = 2048  # ~112-bit security (NIST SP 800-57 for 2048-bit factoring moduli)
MIN_KEY_BITS = 2048


def _fingerprint(n: int) -> str:
    nb = int(n).to_bytes((int(n).bit_length() + 7) // 8, "big")
    return hashlib.sha256(b"vflcrypto.paillier.pk\x00" + nb).hexdigest()[:32]


def _check_modulus(n: int, allow_insecure: bool) -> None:
    if not isinstance(n, int | type(mpz(0))) or n < 15 or n % 2 == 0:
        raise InsecureParameterError("Paillier modulus must be an odd integer > 15")
    if int(n).bit_length() < MIN_KEY_BITS and not allow_insecure:
        raise InsecureParameterError(
            f"{int(n).bit_length()}-bit Paillier modulus is below the minimum of {MIN_KEY_BITS}"
        )


class PaillierPublicKey(Encrypting[PaillierVector]):
    """A Paillier public key ``n`` (``g = n + 1``), with lazily built DJN tables.

    Equality and hashing are by ``n``. Each key *object* draws its own obfuscation base
    ``hs`` on first use, so a received key never imports another party's randomness.
    """

    def __init__(self, n: int, *, allow_insecure: bool = False) -> None:
        _check_modulus(n, allow_insecure)
        self.n = mpz(n)
        self.nsquare = self.n * self.n
        self.cmod = self.nsquare  # the ciphertext group: units modulo n**2
        self.bits = int(n).bit_length()
        self.plaintext_bits = self.bits - 1
        self.fingerprint = _fingerprint(int(n))
        self.max_int = int(self.n) // 3
        self._exp_bytes = _exp_bytes(self.bits)
        self._lock = threading.Lock()
        self._hs: mpz | None = None
        self._fb: _FixedBase | None = None

    # ----------------------------------------------------------------- basics
    def __repr__(self) -> str:
        return f"PaillierPublicKey(bits={self.bits}, fingerprint={self.fingerprint})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PaillierPublicKey) and self.n == other.n

    def __hash__(self) -> int:
        return hash(("paillier.pk", int(self.n)))

    @property
    def ciphertext_bytes(self) -> int:
        """Width of one serialized ciphertext."""
        return ciphertext_width(self.n)

    def to_bytes(self) -> bytes:
        """``n`` as big-endian bytes."""
        return int(self.n).to_bytes((self.bits + 7) // 8, "big")

    @classmethod
    def from_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> PaillierPublicKey:
        """Parse :meth:`to_bytes`; refuses even or undersized moduli."""
        if not isinstance(data, bytes | bytearray) or not data:
            raise DecodeError("malformed Paillier public key")
        return cls(int.from_bytes(data, "big"), allow_insecure=allow_insecure)

    # ----------------------------------------------------------------- plaintexts
    def _encode(self, ints: np.ndarray) -> list[int]:
        """Signed integers as residues modulo ``n`` (``|v| <= n // 3``)."""
        return encode_ints(ints, self.n)

    def _gpow(self, ms: Sequence[int]) -> list[mpz]:
        """``g**m = 1 + m n mod n**2`` for signed ``m``: the plaintext ``m`` in the ciphertext group."""
        n, nsq = self.n, self.nsquare
        return [(1 + (m % n) * n) % nsq for m in ms]

    # ----------------------------------------------------------------- DJN base
    @property
    def hs(self) -> mpz:
        """The obfuscation base ``(-x**2)**n mod n**2`` (drawn once per key object)."""
        if self._hs is None:
            with self._lock:
                if self._hs is None:
                    while True:
                        x = mpz(secrets.randbelow(int(self.n) - 2) + 2)
                        if gmpy2.gcd(x, self.n) == 1:
                            break
                    h = (-x * x) % self.n
                    self._hs = gmpy2.powmod(h, self.n, self.nsquare)
        return self._hs

    def _fixed_base(self) -> _FixedBase:
        if self._fb is None:
            hs = self.hs
            with self._lock:
                if self._fb is None:
                    self._fb = _FixedBase(hs, (self.nsquare,), self._exp_bytes)
        return self._fb

    def _fixed_table(self) -> list[list[mpz]]:
        """The in-process fixed-base table (built now if needed, at its current window)."""
        return self._fixed_base().table()

    def _obfuscator(self) -> mpz:
        return _obfuscate_public(self._fixed_base(), self.n, self.nsquare, [0])[0]

    # ----------------------------------------------------------------- raw encryption
    def _raw_encrypt(self, ms: Sequence[int]) -> list[mpz]:
        """Encrypt plaintexts already reduced to ``[0, n)``."""
        return self._raw_encrypt_blob(ms)[0]

    def _raw_encrypt_blob(self, ms: Sequence[int]) -> tuple[list[mpz], bytes | None]:
        """:meth:`_raw_encrypt`, plus the serialized ciphertexts when the pool made them."""
        cost = int(len(ms) * self._exp_bytes * _cost_scale(self.bits))
        return pooled_encrypt(ms, cost, _w_encrypt_public, (int(self.n), int(self.hs), self._exp_bytes),
                              ciphertext_width(self.n),
                              lambda xs: _obfuscate_public(self._fixed_base(), self.n, self.nsquare, xs))

    # ----------------------------------------------------------------- encryption API (Encrypting)
    def _vector_type(self) -> type[PaillierVector]:
        return PaillierVector

    def _public(self) -> PaillierPublicKey:
        return self


class PaillierPrivateKey(Encrypting[PaillierVector]):
    """A Paillier private key ``(p, q)``: CRT decryption and fast key-holder encryption.

    ``repr`` shows only the fingerprint; there is no wire codec (the key never leaves its
    owner through a Channel).
    """

    def __init__(self, public_key: PaillierPublicKey, p: int, q: int) -> None:
        p, q = mpz(p), mpz(q)
        if p * q != public_key.n or p == q or p < 3 or q < 3:
            raise InsecureParameterError("p * q does not match the public key")
        if q < p:
            p, q = q, p
        self.public_key = public_key
        self._p, self._q = p, q
        self._dec = _CrtDecryptor(p, q)
        self._enc: _CrtEncryptor | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PaillierPrivateKey(fingerprint={self.public_key.fingerprint})"

    def secret_numbers(self) -> tuple[int, int]:
        """``(p, q)``, for the owner's own storage only (e.g. a role state kept on its node)."""
        return int(self._p), int(self._q)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PaillierPrivateKey) and self.public_key == other.public_key

    def __hash__(self) -> int:
        return hash(("paillier.sk", int(self.public_key.n)))

    @property
    def fingerprint(self) -> str:
        return self.public_key.fingerprint

    # ----------------------------------------------------------------- phe interop
    @classmethod
    def from_phe(cls, phe_private_key: Any, *, allow_insecure: bool = False) -> PaillierPrivateKey:
        """Build from a ``phe.PaillierPrivateKey`` (same primes, same ``g = n + 1``)."""
        pk = PaillierPublicKey(int(phe_private_key.public_key.n), allow_insecure=allow_insecure)
        return cls(pk, int(phe_private_key.p), int(phe_private_key.q))

    def to_phe(self) -> tuple[Any, Any]:
        """``(phe.PaillierPublicKey, phe.PaillierPrivateKey)`` over the same primes."""
        import phe

        pub = phe.PaillierPublicKey(int(self.public_key.n))
        return pub, phe.PaillierPrivateKey(pub, int(self._p), int(self._q))

    # ----------------------------------------------------------------- decryption
    def _check(self, vec: CipherVector | CompressedVector) -> None:
        if vec.public_key != self.public_key:
            raise KeyMismatchError("vector is encrypted under another key")

    def _raw_decrypt(self, cts: Sequence[mpz]) -> list[int]:
        pk = self.public_key
        cost = int(len(cts) * 1.2 * pk.bits * _cost_scale(pk.bits))  # ~2 half-size powmods
        return pooled_decrypt(cts, cost, _w_decrypt, (int(self._p), int(self._q)), ciphertext_width(pk.n),
                              self._dec.decrypt)

    def decrypt(self, vec: CipherVector) -> list[int]:
        """Plaintexts of ``vec``: signed ints centred in ``(-n/2, n/2]``.

        For a packed vector, the raw packed plaintexts in ``[0, n)`` (use
        :meth:`decrypt_fixed` to unpack them).
        """
        self._check(vec)
        raw = self._raw_decrypt(vec._c)
        return _finish_ints(raw, vec, int(self.public_key.n))

    def decrypt_fixed(self, vec: CipherVector) -> np.ndarray:
        """Decode ``vec`` to float64 using its ``frac_bits`` (and packing).

        Packed vectors give shape ``(len(vec), slots)``, or the flat values for a vector
        made by dense packing. Raises :class:`EncodingOverflowError` on detectable
        overflow (middle-third residues, slots outside their range, too many additions).
        """
        self._check(vec)
        return _finish_fixed(self._raw_decrypt(vec._c), vec, int(self.public_key.n))

    def decompress_decrypt(self, cvec: CompressedVector) -> list[int]:
        """Decrypt a :func:`compress`-ed vector: same result as :meth:`decrypt` of the original."""
        self._check(cvec)
        return _finish_ints(self._expand(cvec), cvec.source_meta(), int(self.public_key.n))

    def decompress_decrypt_fixed(self, cvec: CompressedVector) -> np.ndarray:
        """Same result as :meth:`decrypt_fixed` of the vector that was compressed."""
        self._check(cvec)
        return _finish_fixed(self._expand(cvec), cvec.source_meta(), int(self.public_key.n))

    def _expand(self, cvec: CompressedVector) -> list[int]:
        n = int(self.public_key.n)
        b, per, count, offset = cvec.value_bits, cvec.per_ciphertext, cvec.count, cvec.offset
        mask = (1 << b) - 1
        out: list[int] = []
        for p in self._raw_decrypt(cvec._c):
            k = min(per, count - len(out))
            if p >> (b * k):
                raise EncodingOverflowError("compressed plaintext exceeds its declared width")
            for _ in range(k):
                v = p & mask
                if offset:
                    if v >> (b - 1):  # guard bit: the value broke its declared bound
                        raise EncodingOverflowError("compressed value outside its declared bound")
                    v = (v - offset) % n
                out.append(v)
                p >>= b
        return out

    # ----------------------------------------------------------------- key-holder encryption
    def _crt(self) -> _CrtEncryptor:
        if self._enc is None:
            hs = self.public_key.hs
            with self._lock:
                if self._enc is None:
                    self._enc = _CrtEncryptor(self._p, self._q, hs, self.public_key._exp_bytes)
        self._enc.fb.prepare(0)  # the initial table (no-op once built)
        return self._enc

    def _raw_encrypt(self, ms: Sequence[int]) -> list[mpz]:
        return self._raw_encrypt_blob(ms)[0]

    def _raw_encrypt_blob(self, ms: Sequence[int]) -> tuple[list[mpz], bytes | None]:
        pk = self.public_key
        cost = int(len(ms) * pk._exp_bytes * 0.6 * _cost_scale(pk.bits))
        return pooled_encrypt(ms, cost, _w_encrypt_private, (int(self._p), int(self._q), int(pk.hs), pk._exp_bytes),
                              ciphertext_width(pk.n), lambda xs: self._crt().encrypt(xs), secret=True)

    def _vector_type(self) -> type[PaillierVector]:
        return PaillierVector

    def _public(self) -> PaillierPublicKey:
        return self.public_key


def _finish_ints(raw: list[int], meta: Any, n: int) -> list[int]:
    if meta.packing is not None:
        return raw
    half = n // 2
    return [v - n if v > half else v for v in raw]


def _finish_fixed(raw: list[int], meta: Any, n: int) -> np.ndarray:
    if meta.packing is None:
        return decode_fixed(raw, meta.frac_bits, n)
    vals = unpack(raw, meta.packing, meta.slots, meta.terms)
    if meta.size is not None:
        return vals.ravel()[: meta.size]
    return vals


def _random_prime(bits: int) -> mpz:
    while True:
        start = mpz(secrets.randbits(bits)) | (mpz(3) << (bits - 2)) | 1
        p = gmpy2.next_prime(start)
        if p.bit_length() == bits:
            return p


def generate_keypair(bits: int = DEFAULT_KEY_BITS, *,
                     allow_insecure: bool = False) -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    """A fresh keypair with an exactly ``bits``-bit ``n`` (primes from ``secrets``).

    ``bits < MIN_KEY_BITS`` raises :class:`InsecureParameterError` unless
    ``allow_insecure=True`` (tests only).
    """
    if bits < MIN_KEY_BITS and not allow_insecure:
        raise InsecureParameterError(f"{bits}-bit Paillier keys are below the minimum of {MIN_KEY_BITS}")
    if bits < 128:
        raise InsecureParameterError("Paillier keys need at least 128 bits even for tests")
    pb = bits // 2
    while True:
        p = _random_prime(pb)
        q = _random_prime(bits - pb)
        n = p * q
        if p != q and n.bit_length() == bits and gmpy2.gcd(n, (p - 1) * (q - 1)) == 1:
            break
    pk = PaillierPublicKey(int(n), allow_insecure=allow_insecure)
    return pk, PaillierPrivateKey(pk, p, q)

