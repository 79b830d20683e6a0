"""The arithmetic of Okamoto–Uchiyama, as classes and module-level pool workers.

Like :mod:`vflcrypto.paillier.kernels`, the process pool of :mod:`vflcrypto.parallel`
sends plain ints, bytes and tuples to module-level functions (``_w_*``), which keep their
per-key tables in the per-process cache of :mod:`vflcrypto.paillier.blocks`.

* :class:`_PowTable`: ``base**e`` modulo ``mod`` for *public* exponents (the plaintext part
  ``G**m``) from rows of ``base**(d * 2**(8k))``, built lazily as far as the exponents
  need (a packed gradient of ~100 bits touches 13 rows, one multiplication each).
* :class:`_Encryptor`: ``G**m * H**r mod n`` with a fresh ``r`` of ``8 * nbytes`` bits
  drawn through ``fixed_base._random_digits`` (looked up at every call, so the privacy
  mutation seam that replaces it reaches OU too) and ``H**r`` from the growing fixed-base
  table of :class:`~vflcrypto.paillier.fixed_base._FixedBase`.
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
_W = 8  # window of the plaintext tables: one row per exponent byte


class _PowTable:
    """``base**e mod mod`` for non-negative public ``e``: rows ``base**(d * 2**(8k))``, grown on demand."""

    def __init__(self, base: mpz, mod: mpz) -> None:
        self.mod = mpz(mod)
        self.rows: list[list[mpz]] = []
        self._next = mpz(base) % self.mod  # base**(2**(8 * len(rows)))
        self._lock = threading.Lock()

    def _grow(self, rows: int) -> None:
        with self._lock:
            mod = self.mod
            while len(self.rows) < rows:
                b = self._next
                row = [_ONE, b]
                x = b
                for _ in range((1 << _W) - 2):
                    x = x * b % mod
                    row.append(x)
                self.rows.append(row)
                self._next = x * b % mod

    @property
    def nbytes_held(self) -> int:
        return len(self.rows) * (1 << _W) * ((int(self.mod).bit_length() + 7) // 8)

    def pow(self, e: int) -> mpz:
        if e < 0:
            raise ValueError("negative exponent")  # internal: callers pick the inverse table
        need = -(-e.bit_length() // _W)
        if need > len(self.rows):
            self._grow(need)
        acc, rows, mod = _ONE, self.rows, self.mod
        k = 0
        while e:
            d = e & 0xFF
            if d:
                acc = acc * rows[k][d] % mod
            e >>= _W
            k += 1
        return acc


class _SignedPow:
    """``G**m`` for signed ``m`` modulo one modulus: a table for ``G`` and one for ``G**-1``."""

    def __init__(self, G: mpz, mod: mpz) -> None:
        self.pos = _PowTable(G, mod)
        self.neg = _PowTable(gmpy2.invert(G, mod), mod)

    @property
    def nbytes_held(self) -> int:
        return self.pos.nbytes_held + self.neg.nbytes_held

    def pow(self, m: int) -> mpz:
        return self.pos.pow(m) if m >= 0 else self.neg.pow(-m)


class _Encryptor:
    """Public-key encryption ``G**m * H**r mod n`` (fresh ``r`` of ``8 * nbytes`` bits each)."""

    def __init__(self, n: int, G: int, H: int, nbytes: int) -> None:
        self.n = mpz(n)
        self.g = _SignedPow(mpz(G), self.n)
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

    def encrypt(self, ms: Sequence[int]) -> list[mpz]:
        n, gpow = self.n, self.g.pow
        return [gpow(int(m)) * r % n for m, r in zip(ms, self.obfuscators(len(ms)), strict=True)]


class _CrtEncryptor:
    """Key-holder encryption: ``G**m * H**r`` modulo ``p**2`` and ``q``, recombined by the CRT."""

    def __init__(self, p: int, q: int, G: int, H: int, nbytes: int) -> None:
        p, q = mpz(p), mpz(q)
        self.p2, self.q = p * p, q
        self.q_inv = gmpy2.invert(q, self.p2)
        self.gp, self.gq = _SignedPow(mpz(G), self.p2), _SignedPow(mpz(G), q)
        self.fb = _FixedBase(mpz(H), (self.p2, q), nbytes)
        self.nbytes = nbytes

    @property
    def nbytes_held(self) -> int:
        return self.fb.nbytes_held + self.gp.nbytes_held + self.gq.nbytes_held

    def encrypt(self, ms: Sequence[int]) -> list[mpz]:
        p2, q, q_inv = self.p2, self.q, self.q_inv
        gp, gq = self.gp.pow, self.gq.pow
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
                m = int(m)
                cp = gp(m) * rp % p2
                cq = gq(m) * rq % q
                out.append(cq + q * ((cp - cq) * q_inv % p2))
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
