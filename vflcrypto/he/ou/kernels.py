"""The arithmetic of Okamoto–Uchiyama, as classes and module-level pool workers.

Like :mod:`vflcrypto.he.paillier.kernels`, the process pool of :mod:`vflcrypto.parallel`
sends plain ints, bytes and tuples to module-level functions (``_w_*``), which keep their
per-key tables in the per-process cache of :mod:`vflcrypto.he.paillier.blocks`.

* :class:`_PlainTable`: ``base**e`` for *public* exponents (the plaintext part ``G**m``)
  from rows of powers, 12-bit windows for the low 192 bits and 8-bit above, built lazily as
  far as the exponents need (a packed gradient of ~120 bits: 10 multiplications).
* :class:`_Encryptor`: ``G**m * H**r mod n`` with a fresh ``r`` of ``8 * nbytes`` bits
  drawn through ``fixed_base._random_digits`` (looked up at every call, so the privacy
  mutation seam that replaces it reaches OU too) and ``H**r`` from the growing fixed-base
  table of :class:`~vflcrypto.he.paillier.fixed_base._FixedBase`.
* :class:`_CrtEncryptor`: the key holder's encryption, the same products modulo ``p**2``
  and ``q`` (a 2048- and a 1024-bit modulus for a 3072-bit ``n``, ~1.8x cheaper than one
  modulo ``n``) recombined once per ciphertext.
* :class:`_Decryptor`: ``m = L(c**t mod p**2) * L(G**t mod p**2)**-1 mod p`` with
  ``L(x) = (x - 1) / p``: one exponentiation by the 256-bit ``t`` modulo ``p**2``
  (Coron–Naccache–Paillier), returning residues in ``[0, p)``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import gmpy2
from gmpy2 import mpz

from ..paillier import fixed_base
from ..paillier.blocks import _cached, ciphertexts_from_bytes, ciphertexts_to_bytes
from ..paillier.fixed_base import _ONE, _FixedBase

__all__: list[str] = []

_DIGIT_BATCH = 512  # exponents drawn at a time
_WIDE_BITS = 192  # plaintext exponent bits covered by 12-bit windows (above: 8-bit windows)
_WIDE_MASK = (1 << _WIDE_BITS) - 1


class _PlainTable:
    """``base**e`` modulo one or more moduli for public ``e >= 0`` (the plaintext part ``G**m``).

    The low :data:`_WIDE_BITS` bits of ``e`` use 12-bit windows (a packed gradient of ~120
    bits costs 10 multiplications), the rest 8-bit windows (a dense packing of ~1000 bits
    stays within a few MiB); rows are built on demand, once. Row ``k`` maps a digit ``d`` to
    the tuple of ``base**(d * 2**(w k))`` per modulus, so one table serves the key holder's
    two CRT moduli.
    """

    def __init__(self, base: mpz, mods: Sequence[mpz]) -> None:
        self.mods = tuple(mpz(m) for m in mods)
        self.wide: list[list[tuple[mpz, ...]]] = []
        self.narrow: list[list[tuple[mpz, ...]]] = []
        self._next_wide = tuple(mpz(base) % m for m in self.mods)  # base**(2**(12 * len(wide)))
        self._next_narrow: tuple[mpz, ...] | None = None  # base**(2**(_WIDE_BITS + 8 * len(narrow)))
        self._lock = threading.Lock()

    def _row(self, bases: tuple[mpz, ...], w: int) -> tuple[list[tuple[mpz, ...]], tuple[mpz, ...]]:
        cols, nxt = [], []
        for b, m in zip(bases, self.mods, strict=True):
            col = [_ONE, b]
            x = b
            for _ in range((1 << w) - 2):
                x = x * b % m
                col.append(x)
            cols.append(col)
            nxt.append(x * b % m)
        return list(zip(*cols, strict=True)), tuple(nxt)

    def _grow(self, wide: int, narrow: int) -> None:
        with self._lock:
            while len(self.wide) < wide or (narrow and len(self.wide) < _WIDE_BITS // 12):
                row, self._next_wide = self._row(self._next_wide, 12)
                self.wide.append(row)
            if narrow and self._next_narrow is None:
                self._next_narrow = self._next_wide  # base**(2**_WIDE_BITS)
            while len(self.narrow) < narrow:
                assert self._next_narrow is not None
                row, self._next_narrow = self._row(self._next_narrow, 8)
                self.narrow.append(row)

    @property
    def nbytes_held(self) -> int:
        per = sum((int(m).bit_length() + 7) // 8 for m in self.mods)
        return (len(self.wide) * 4096 + len(self.narrow) * 256) * per

    def terms(self, e: int) -> list[tuple[mpz, ...]]:
        """The entries whose product is ``base**e`` (per modulus)."""
        lo, hi = e & _WIDE_MASK, e >> _WIDE_BITS
        need_w, need_n = -(-lo.bit_length() // 12), -(-hi.bit_length() // 8)
        if need_w > len(self.wide) or need_n > len(self.narrow):
            self._grow(need_w, need_n)
        out, k = [], 0
        while lo:
            d = lo & 0xFFF
            if d:
                out.append(self.wide[k][d])
            lo >>= 12
            k += 1
        k = 0
        while hi:
            d = hi & 0xFF
            if d:
                out.append(self.narrow[k][d])
            hi >>= 8
            k += 1
        return out


class _SignedPow:
    """``G**m`` for signed ``m``: a :class:`_PlainTable` for ``G`` and one for ``G**-1``, per modulus."""

    def __init__(self, G: mpz, mods: Sequence[mpz]) -> None:
        self.pos = _PlainTable(G, mods)
        self.neg = _PlainTable(_inverse(G, mods), mods)

    @property
    def nbytes_held(self) -> int:
        return self.pos.nbytes_held + self.neg.nbytes_held

    def terms(self, m: int) -> list[tuple[mpz, ...]]:
        return self.pos.terms(m) if m >= 0 else self.neg.terms(-m)


def _inverse(G: mpz, mods: Sequence[mpz]) -> mpz:
    """``G**-1`` modulo the product of pairwise coprime ``mods`` (each table entry is reduced per modulus)."""
    n = _ONE
    for m in mods:
        n *= mpz(m)
    return gmpy2.invert(G, n)


class _Encryptor:
    """Public-key encryption ``G**m * H**r mod n`` (fresh ``r`` of ``8 * nbytes`` bits each)."""

    def __init__(self, n: int, G: int, H: int, nbytes: int) -> None:
        self.n = mpz(n)
        self.g = _SignedPow(mpz(G), (self.n,))
        self.fb = _FixedBase(mpz(H), (self.n,), nbytes)
        self.nbytes = nbytes

    @property
    def nbytes_held(self) -> int:
        return self.fb.nbytes_held + self.g.nbytes_held

    def obfuscators(self, count: int) -> list[mpz]:
        """``count`` fresh ``H**r mod n`` (encryptions of zero)."""
        w, (table,) = self.fb.prepare(count)
        n = self.n
        out = []
        for start in range(0, count, _DIGIT_BATCH):
            k = min(_DIGIT_BATCH, count - start)
            for digits in fixed_base._random_digits(k, self.nbytes, w):
                acc = _ONE
                for row, d in zip(table, digits, strict=True):
                    if d:
                        acc = acc * row[d] % n
                out.append(acc)
        return out

    def gpow(self, m: int) -> mpz:
        acc, n = _ONE, self.n
        for (x,) in self.g.terms(m):
            acc = acc * x % n
        return acc

    def encrypt(self, ms: Sequence[int]) -> list[mpz]:
        n, terms = self.n, self.g.terms
        out = []
        for m, r in zip(ms, self.obfuscators(len(ms)), strict=True):
            for (x,) in terms(int(m)):
                r = r * x % n
            out.append(r)
        return out


class _CrtEncryptor:
    """Key-holder encryption: ``G**m * H**r`` modulo ``p**2`` and ``q``, recombined by the CRT."""

    def __init__(self, p: int, q: int, G: int, H: int, nbytes: int) -> None:
        p, q = mpz(p), mpz(q)
        self.p2, self.q = p * p, q
        self.q_inv = gmpy2.invert(q, self.p2)
        self.g = _SignedPow(mpz(G), (self.p2, q))
        self.fb = _FixedBase(mpz(H), (self.p2, q), nbytes)
        self.nbytes = nbytes

    @property
    def nbytes_held(self) -> int:
        return self.fb.nbytes_held + self.g.nbytes_held

    def encrypt(self, ms: Sequence[int]) -> list[mpz]:
        p2, q, q_inv = self.p2, self.q, self.q_inv
        terms = self.g.terms
        w, (tp, tq) = self.fb.prepare(len(ms))
        out = []
        for start in range(0, len(ms), _DIGIT_BATCH):
            batch = ms[start : start + _DIGIT_BATCH]
            for m, digits in zip(batch, fixed_base._random_digits(len(batch), self.nbytes, w), strict=True):
                rp = rq = _ONE
                for row_p, row_q, d in zip(tp, tq, digits, strict=True):
                    if d:
                        rp = rp * row_p[d] % p2
                        rq = rq * row_q[d] % q
                for x, y in terms(int(m)):
                    rp = rp * x % p2
                    rq = rq * y % q
                out.append(rq + q * ((rp - rq) * q_inv % p2))
        return out


class _Decryptor:
    """``m = L(c**t mod p**2) / L(G**t mod p**2) mod p``: residues in ``[0, p)``."""

    def __init__(self, p: int, t: int, G: int) -> None:
        self.p, self.t = mpz(p), mpz(t)
        self.p2 = self.p * self.p
        gp = gmpy2.powmod(mpz(G) % self.p2, self.t, self.p2)
        self.gp_inv = gmpy2.invert((gp - 1) // self.p, self.p)

    def decrypt(self, cts: Sequence[mpz]) -> list[int]:
        p, p2, t, inv = self.p, self.p2, self.t, self.gp_inv
        powmod = gmpy2.powmod
        return [int((powmod(c % p2, t, p2) - 1) // p * inv % p) for c in cts]


def _w_encrypt_public(n: int, G: int, H: int, nbytes: int, ms: tuple[int, ...]) -> bytes:
    enc = _cached(("ou-pub", n, G, H, nbytes), lambda: _Encryptor(n, G, H, nbytes))
    return ciphertexts_to_bytes(enc.encrypt(ms), (n.bit_length() + 7) // 8)


def _w_encrypt_private(p: int, q: int, G: int, H: int, nbytes: int, ms: tuple[int, ...]) -> bytes:
    enc = _cached(("ou-crt", p, q, G, H, nbytes), lambda: _CrtEncryptor(p, q, G, H, nbytes))
    return ciphertexts_to_bytes(enc.encrypt(ms), ((p * p * q).bit_length() + 7) // 8)


def _w_decrypt(p: int, t: int, G: int, width: int, blob: bytes) -> tuple[int, ...]:
    dec = _cached(("ou-dec", p, t, G), lambda: _Decryptor(p, t, G))
    return tuple(dec.decrypt(ciphertexts_from_bytes(blob, width)))
