"""Okamoto–Uchiyama keys, parameters and vectors.

Holds :class:`OUParams` (key size, randomness and decryption-factor lengths, with the
conservative default and HEU's parameters by explicit choice), :class:`OUPublicKey`
(``n, G, H``; public-key encryption; the ``PublicKeyLike`` interface that
:class:`~vflcrypto.he.paillier.CipherVector` needs), :class:`OUPrivateKey` (decryption with
range checks, faster key-holder encryption), :class:`OUVector` and
:func:`generate_keypair`. See :mod:`vflcrypto.he.ou` for the scheme and the security argument.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from ...errors import DecodeError, EncodingOverflowError, InsecureParameterError, KeyMismatchError
from ..encoding import ints_to_float, unpack
from ..paillier.compress import CompressedVector
from ..paillier.keys import _random_prime
from ..paillier.plain import Encrypting, pooled_decrypt, pooled_encrypt
from ..paillier.vector import CipherVector, _group_cost
from .kernels import _CrtEncryptor, _Decryptor, _Encryptor, _w_decrypt, _w_encrypt_private, _w_encrypt_public

__all__ = ["DEFAULT_KEY_BITS", "DETECTION_BITS", "MIN_KEY_BITS", "MIN_RANDOM_BITS", "OUParams", "OUPrivateKey",
           "OUPublicKey", "OUVector", "generate_keypair", "security_bits"]

DEFAULT_KEY_BITS = 3072  # >= Paillier-2048's level even if OU's p**2 q needs 500-600 more bits (see vflcrypto.he.ou)
MIN_KEY_BITS = 2048  # HEU's size, accepted only through OUParams.heu() or from another party's key
MIN_RANDOM_BITS = 110  # HEU's randomness at 2048 bits: the floor a received key may state
# Plaintexts stay 40 bits below p/2, so a value that wrapped modulo p (an overflow, or a
# ciphertext pushed past p on purpose) decrypts outside the bound except with probability
# ~2**-40, and decryption refuses it (HEU's bound sits at p/4: a wrap passes half the time).
DETECTION_BITS = 40


def security_bits(key_bits: int) -> int:
    """The symmetric-equivalent strength NIST SP 800-57 gives a factoring modulus of ``key_bits``."""
    for bits, kappa in ((15360, 256), (7680, 192), (3072, 128), (2048, 112)):
        if key_bits >= bits:
            return kappa
    return 80


@dataclass(frozen=True)
class OUParams:
    """Sizes of an OU key pair.

    ``random_bits``: length of the encryption randomness ``r`` (``H**r``); a short interval
    for ``r`` falls to a kangaroo search in ~``2**(random_bits/2)`` group operations, which
    confirms a guessed plaintext, hence ``2κ`` by default. ``factor_bits``: the prime ``t``
    dividing ``p - 1`` (the decryption exponent; the order of ``H`` modulo ``p**2``),
    ``2κ`` against a rho search in that subgroup. ``profile="heu"`` takes SecretFlow
    HEU's own sizes, below these; only :meth:`heu` makes one. ``profile="standard"``
    (:meth:`standard`) is a 2048-bit modulus with ``2κ = 224``-bit randomness and ``t``:
    112-bit strength on every known attack, SecureBoost's default (see SECURITY.md).
    """

    key_bits: int = DEFAULT_KEY_BITS
    random_bits: int = 2 * security_bits(DEFAULT_KEY_BITS)
    factor_bits: int = 2 * security_bits(DEFAULT_KEY_BITS)
    profile: str = "conservative"

    @classmethod
    def conservative(cls, key_bits: int = DEFAULT_KEY_BITS) -> OUParams:
        kappa = security_bits(max(key_bits, DEFAULT_KEY_BITS))
        return cls(key_bits, 2 * kappa, 2 * kappa)

    @classmethod
    def heu(cls, key_bits: int = 2048) -> OUParams:
        """HEU's parameters (``heu/library/algorithms/ou``): ``|t|`` 224 bits at 2048 and 256 at
        3072, ``r`` of 110 bits at 2048 and 128 at 3072 (rounded up to whole bytes: 112, 128)."""
        if key_bits >= 2560:
            return cls(key_bits, 128, 256, "heu")
        return cls(key_bits, 112, 224, "heu")

    @classmethod
    def standard(cls) -> OUParams:
        """A 2048-bit modulus with 224-bit randomness and decryption factor: NIST's 112-bit level for
        the modulus (the number field sieve; see :mod:`vflcrypto.he.ou`) and ``2 * 112`` bits against the
        kangaroo search for ``r`` and the rho search for ``t`` (HEU's 110-bit ``r`` gives ``2**55``)."""
        return cls(MIN_KEY_BITS, 2 * security_bits(MIN_KEY_BITS), 2 * security_bits(MIN_KEY_BITS), "standard")

    def validate(self, allow_insecure: bool = False) -> None:
        if self.profile not in ("conservative", "heu", "standard"):
            raise InsecureParameterError(f"unknown OU parameter profile {self.profile!r}")
        if self.key_bits < 96 or self.random_bits < 8 or self.factor_bits < 8:
            raise InsecureParameterError("OU keys need at least 96 bits and 8-bit exponents even for tests")
        if allow_insecure:
            return
        if self.profile == "standard":
            kappa = security_bits(self.key_bits)
            if self.key_bits < MIN_KEY_BITS or self.random_bits < 2 * kappa or self.factor_bits < 2 * kappa:
                raise InsecureParameterError(f"standard OU parameters need >= {MIN_KEY_BITS}-bit moduli and "
                                             f"{2 * kappa}-bit randomness and decryption factor")
            return
        if self.profile == "heu":
            floor = OUParams.heu(self.key_bits)
            if self.key_bits < MIN_KEY_BITS or self.random_bits < floor.random_bits or \
                    self.factor_bits < floor.factor_bits:
                raise InsecureParameterError("OU parameters below even HEU's")
            return
        kappa = security_bits(DEFAULT_KEY_BITS)
        if self.key_bits < DEFAULT_KEY_BITS:
            raise InsecureParameterError(
                f"{self.key_bits}-bit OU moduli are below the default minimum of {DEFAULT_KEY_BITS} "
                "(OUParams.heu() takes HEU's 2048-bit parameters explicitly)")
        if self.random_bits < 2 * kappa or self.factor_bits < 2 * kappa:
            raise InsecureParameterError(f"OU randomness and decryption factor need >= {2 * kappa} bits")


def _fingerprint(n: int, G: int, H: int, plaintext_bits: int, random_bits: int) -> str:
    h = hashlib.sha256(b"vflcrypto.ou.pk\x00")
    for v in (n, G, H):
        h.update(int(v).to_bytes((int(v).bit_length() + 7) // 8 + 1, "big"))
    h.update(f"{plaintext_bits}:{random_bits}".encode())
    return h.hexdigest()[:32]


class OUPublicKey(Encrypting["OUVector"]):
    """An OU public key ``(n = p**2 q, G, H)`` with the plaintext bound and randomness length.

    Plaintexts are signed integers with ``|m| < 2**plaintext_bits`` (below ``p/2``);
    ciphertexts are units modulo ``n`` (``cmod = n``), ``ceil(bits/8)`` bytes each.
    Equality and hashing are by all five values.
    """

    def __init__(self, n: int, G: int, H: int, plaintext_bits: int, random_bits: int, *,
                 allow_insecure: bool = False) -> None:
        n, G, H = mpz(n), mpz(G), mpz(H)
        bits = int(n).bit_length()
        if n < 15 or n % 2 == 0:
            raise InsecureParameterError("OU modulus must be an odd integer > 15")
        if bits < MIN_KEY_BITS and not allow_insecure:
            raise InsecureParameterError(f"{bits}-bit OU modulus is below the minimum of {MIN_KEY_BITS}")
        if random_bits < MIN_RANDOM_BITS and not allow_insecure:
            raise InsecureParameterError(f"OU randomness of {random_bits} bits is below the minimum of "
                                         f"{MIN_RANDOM_BITS}")
        if not 1 <= plaintext_bits < bits // 3 or not 8 <= random_bits <= bits:
            raise InsecureParameterError("OU plaintext bound or randomness length inconsistent with the modulus")
        if not (1 < G < n and 1 < H < n) or gmpy2.gcd(G * H, n) != 1:
            raise InsecureParameterError("OU generators must be units modulo n")
        self.n, self.G, self.H = n, G, H
        self.cmod = n  # the ciphertext group: units modulo n
        self.bits = bits
        self.plaintext_bits = int(plaintext_bits)
        self.random_bits = int(random_bits)
        self.fingerprint = _fingerprint(int(n), int(G), int(H), self.plaintext_bits, self.random_bits)
        self._nbytes = (self.random_bits + 7) // 8
        self._enc: _Encryptor | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OUPublicKey(bits={self.bits}, fingerprint={self.fingerprint})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OUPublicKey) and self.fingerprint == other.fingerprint and self.n == other.n

    def __hash__(self) -> int:
        return hash(("ou.pk", self.fingerprint))

    @property
    def ciphertext_bytes(self) -> int:
        """Width of one serialized ciphertext: ``ceil(bits/8)``."""
        return (self.bits + 7) // 8

    def to_tuple(self) -> tuple[bytes, bytes, bytes, int, int]:
        """``(n, G, H, plaintext_bits, random_bits)`` with the integers as big-endian bytes."""
        w = self.ciphertext_bytes
        return (int(self.n).to_bytes(w, "big"), int(self.G).to_bytes(w, "big"), int(self.H).to_bytes(w, "big"),
                self.plaintext_bits, self.random_bits)

    @classmethod
    def from_tuple(cls, value: Sequence[Any], *, allow_insecure: bool = False) -> OUPublicKey:
        """Parse :meth:`to_tuple`; refuses weak or inconsistent parameters."""
        if len(value) != 5 or not all(isinstance(v, bytes) and v for v in value[:3]) or \
                not all(isinstance(v, int) and not isinstance(v, bool) for v in value[3:]):
            raise DecodeError("malformed OU public key")
        n, G, H = (int.from_bytes(v, "big") for v in value[:3])
        return cls(n, G, H, value[3], value[4], allow_insecure=allow_insecure)

    # ----------------------------------------------------------------- plaintexts
    def _check_range(self, ms: Sequence[int]) -> None:
        lim = 1 << self.plaintext_bits
        if any(not -lim < m < lim for m in ms):
            raise EncodingOverflowError(f"OU plaintexts must lie within +-2^{self.plaintext_bits}")

    def _encode(self, ints: np.ndarray) -> list[int]:
        """Signed integers stay signed (negative exponents use ``G**-1``), range-checked."""
        ms = [int(v) for v in ints.ravel().tolist()]
        self._check_range(ms)
        return ms

    def _gpow(self, ms: Sequence[int]) -> list[mpz]:
        """``G**m mod n`` for signed ``m``: the plaintext ``m`` in the ciphertext group."""
        ms = [int(m) for m in ms]
        self._check_range(ms)
        enc = self._encryptor()
        return [enc.gpow(m) for m in ms]

    # ----------------------------------------------------------------- encryption
    def _encryptor(self) -> _Encryptor:
        if self._enc is None:
            with self._lock:
                if self._enc is None:
                    self._enc = _Encryptor(int(self.n), int(self.G), int(self.H), self._nbytes)
        return self._enc

    def _raw_encrypt(self, ms: Sequence[int]) -> list[mpz]:
        """Encrypt signed plaintexts already range-checked."""
        return self._raw_encrypt_blob(ms)[0]

    def _raw_encrypt_blob(self, ms: Sequence[int]) -> tuple[list[mpz], bytes | None]:
        cost = int(len(ms) * (self._nbytes + 14) * _group_cost(self))
        return pooled_encrypt(ms, cost, _w_encrypt_public, (int(self.n), int(self.G), int(self.H), self._nbytes),
                              self.ciphertext_bytes, lambda xs: self._encryptor().encrypt(xs))

    # ----------------------------------------------------------------- encryption API (Encrypting)
    def _vector_type(self) -> type[OUVector]:
        return OUVector

    def _public(self) -> OUPublicKey:
        return self


class OUVector(CipherVector):
    """A vector of OU ciphertexts (``cmod = n``), built by :class:`OUPublicKey` or its private key."""

    __slots__ = ()


class OUPrivateKey(Encrypting["OUVector"]):
    """An OU private key ``(p, q, t)``: decryption and fast key-holder encryption.

    ``repr`` shows only the fingerprint; there is no wire codec. Decryption refuses any
    plaintext outside ``+-2**plaintext_bits`` (:class:`EncodingOverflowError`): a value
    that wrapped modulo ``p`` lands there except with probability ~``2**-DETECTION_BITS``
    (keys made here), so the residue that would reveal ``p`` is not handed out (see
    :mod:`vflcrypto.he.ou`).
    """

    def __init__(self, public_key: OUPublicKey, p: int, q: int, t: int) -> None:
        p, q, t = mpz(p), mpz(q), mpz(t)
        p2 = p * p
        if p2 * q != public_key.n or p == q or p < 3 or q < 3 or t < 2 or (p - 1) % t:
            raise InsecureParameterError("(p, q, t) do not match the OU public key")
        gp = gmpy2.powmod(public_key.G % p2, t, p2)
        if gp == 1 or gmpy2.powmod(gp, p, p2) != 1 or gmpy2.powmod(public_key.H % p2, t, p2) != 1 or \
                (gp - 1) % p:
            raise InsecureParameterError("the OU generators do not fit (p, t)")
        if public_key.plaintext_bits > int(p).bit_length() - 2:
            raise InsecureParameterError("the OU plaintext bound exceeds p/2")
        self.public_key = public_key
        self._p, self._q, self._t = p, q, t
        self._dec = _Decryptor(p, t, public_key.G)
        self._enc: _CrtEncryptor | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OUPrivateKey(fingerprint={self.public_key.fingerprint})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OUPrivateKey) and self.public_key == other.public_key

    def __hash__(self) -> int:
        return hash(("ou.sk", self.public_key.fingerprint))

    @property
    def fingerprint(self) -> str:
        return self.public_key.fingerprint

    def secret_numbers(self) -> tuple[int, int, int]:
        """``(p, q, t)``, for the owner's own storage only."""
        return int(self._p), int(self._q), int(self._t)

    # ----------------------------------------------------------------- decryption
    def _check(self, vec: CipherVector | CompressedVector) -> None:
        if vec.public_key != self.public_key:
            raise KeyMismatchError("vector is encrypted under another key")

    def _raw_decrypt(self, cts: Sequence[mpz]) -> list[int]:
        """Residues ``m mod p`` in ``[0, p)``."""
        pk = self.public_key
        cost = int(len(cts) * self._t.bit_length() * 1.2 * (2 * pk.bits / 3 / 4096) ** 2)
        w = pk.ciphertext_bytes
        return pooled_decrypt(cts, cost, _w_decrypt, (int(self._p), int(self._t), int(pk.G), w), w,
                              self._dec.decrypt)

    def _signed(self, raw: Sequence[int]) -> list[int]:
        """Centre residues mod ``p`` and refuse any outside ``+-2**plaintext_bits`` (terse: no oracle)."""
        p, half, lim = int(self._p), int(self._p) // 2, 1 << self.public_key.plaintext_bits
        out = [r - p if r > half else r for r in raw]
        if any(not -lim < v < lim for v in out):
            raise EncodingOverflowError("decrypted value outside the plaintext range")
        return out

    def decrypt(self, vec: CipherVector) -> list[int]:
        """Signed plaintexts of ``vec`` (for a packed vector: the packed plaintexts, non-negative)."""
        self._check(vec)
        out = self._signed(self._raw_decrypt(vec._c))
        if vec.packing is not None and any(v < 0 for v in out):
            raise EncodingOverflowError("packed plaintext out of range")
        return out

    def decrypt_fixed(self, vec: CipherVector) -> np.ndarray:
        """Decode ``vec`` to float64 using its ``frac_bits`` (and packing); see
        :meth:`vflcrypto.he.paillier.PaillierPrivateKey.decrypt_fixed`."""
        return _finish_fixed(self.decrypt(vec), vec)

    def decompress_decrypt(self, cvec: CompressedVector) -> list[int]:
        """Decrypt a :func:`~vflcrypto.he.paillier.compress`-ed vector: as :meth:`decrypt` of the original."""
        self._check(cvec)
        return self._expand(cvec)

    def decompress_decrypt_fixed(self, cvec: CompressedVector) -> np.ndarray:
        self._check(cvec)
        return _finish_fixed(self._expand(cvec), cvec.source_meta())

    def _expand(self, cvec: CompressedVector) -> list[int]:
        b, per, count, offset = cvec.value_bits, cvec.per_ciphertext, cvec.count, cvec.offset
        mask = (1 << b) - 1
        out: list[int] = []
        for p in self._signed(self._raw_decrypt(cvec._c)):
            k = min(per, count - len(out))
            if p < 0 or p >> (b * k):
                raise EncodingOverflowError("compressed plaintext exceeds its declared width")
            for _ in range(k):
                v = p & mask
                if offset:
                    if v >> (b - 1):
                        raise EncodingOverflowError("compressed value outside its declared bound")
                    v -= offset
                out.append(v)
                p >>= b
        return out

    # ----------------------------------------------------------------- key-holder encryption
    def _crt(self) -> _CrtEncryptor:
        if self._enc is None:
            with self._lock:
                if self._enc is None:
                    pk = self.public_key
                    self._enc = _CrtEncryptor(int(self._p), int(self._q), int(pk.G), int(pk.H), pk._nbytes)
        return self._enc

    def _raw_encrypt_blob(self, ms: Sequence[int]) -> tuple[list[mpz], bytes | None]:
        pk = self.public_key
        cost = int(len(ms) * (pk._nbytes + 14) * 0.6 * _group_cost(pk))
        return pooled_encrypt(ms, cost, _w_encrypt_private,
                              (int(self._p), int(self._q), int(pk.G), int(pk.H), pk._nbytes), pk.ciphertext_bytes,
                              lambda xs: self._crt().encrypt(xs), secret=True)

    def _vector_type(self) -> type[OUVector]:
        return OUVector

    def _public(self) -> OUPublicKey:
        return self.public_key


def _finish_fixed(signed: list[int], meta: Any) -> np.ndarray:
    if meta.packing is None:
        return ints_to_float(signed, meta.frac_bits)
    vals = unpack(signed, meta.packing, meta.slots, meta.terms)
    if meta.size is not None:
        return vals.ravel()[: meta.size]
    return vals


def _prime_with_factor(bits: int, tbits: int) -> tuple[mpz, mpz]:
    """``(p, t)``: a ``bits``-bit prime ``p = t u + 1`` with a ``tbits``-bit prime ``t`` (``u`` even,
    all from ``secrets``)."""
    ubits = bits - tbits
    while True:
        t = _random_prime(tbits)
        for _ in range(4 * bits):  # ~ 0.35 bits candidates are needed on average
            u = (mpz(secrets.randbits(ubits)) | (mpz(1) << (ubits - 1))) & ~mpz(1)
            p = t * u + 1
            if p.bit_length() == bits and gmpy2.is_prime(p, 40):
                return p, t


def _unit(n: mpz) -> mpz:
    while True:
        x = mpz(secrets.randbelow(int(n) - 2) + 2)
        if gmpy2.gcd(x, n) == 1:
            return x


def generate_keypair(params: OUParams | int | None = None, *,
                     allow_insecure: bool = False) -> tuple[OUPublicKey, OUPrivateKey]:
    """A fresh key pair: ``n = p**2 q`` of exactly ``key_bits`` bits, ``|p| = |q| = key_bits/3``,
    ``p = t u + 1`` with a prime ``t`` of ``factor_bits``, ``G = g**u`` and ``H = g'**(n u)``
    (Coron–Naccache–Paillier; HEU's construction), all from :mod:`secrets`.

    ``params`` is an :class:`OUParams` or a key size (conservative sizes); weak values raise
    :class:`InsecureParameterError` unless ``allow_insecure=True`` (tests only).
    """
    if params is None or isinstance(params, int):
        params = OUParams.conservative(DEFAULT_KEY_BITS if params is None else params)
    params.validate(allow_insecure)
    bits = params.key_bits
    pbits = bits // 3
    qbits = bits - 2 * pbits
    tbits = min(params.factor_bits, pbits // 2)  # only small test keys are ever capped
    while True:
        p, t = _prime_with_factor(pbits, tbits)
        q = _random_prime(qbits)
        n = p * p * q
        if p != q and n.bit_length() == bits and gmpy2.gcd(p, q - 1) == 1 and gmpy2.gcd(q, p - 1) == 1:
            break
    u = (p - 1) // t
    p2 = p * p
    while True:
        g = _unit(n)
        gp = gmpy2.powmod(g, p - 1, p2)
        if gp != 1:
            break
    G = gmpy2.powmod(g, u, n)
    H = gmpy2.powmod(_unit(n), n * u, n)
    bound = pbits - 2 - DETECTION_BITS if pbits > 4 * DETECTION_BITS else pbits - 2  # tiny test keys: no margin
    pk = OUPublicKey(int(n), int(G), int(H), bound, params.random_bits, allow_insecure=allow_insecure)
    return pk, OUPrivateKey(pk, p, q, t)
