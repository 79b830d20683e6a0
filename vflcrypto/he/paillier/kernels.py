"""The arithmetic kernels of Paillier, as module-level functions the process pool can run.

:mod:`vflcrypto.parallel` sends plain ints, bytes and tuples to module-level functions
(nothing else crosses to a worker), so every worker entry point (``_w_*``) lives here at
module level, next to the in-process kernels they share with the key and vector classes:
DJN obfuscation (:func:`_obfuscate_public`, :class:`_CrtEncryptor` for the key holder),
CRT decryption (:class:`_CrtDecryptor`), scalar powers, histogram sums
(:func:`_sum_by_group`), the bucket-method multi-exponentiation of dot products (signed
digits, one shared batch inversion: :func:`_multiexp`, :func:`_dot`), the fixed-base
matrix–vector product (:func:`_matvec`) and the Horner fold of compression (:func:`_w_fold`).
Workers keep per-key tables and shipped chunks in the caches of :mod:`.blocks`.

The secret exponents are drawn with ``fixed_base._random_digits`` looked up through the
:mod:`.fixed_base` module at every call (not imported by name), so replacing that one
global reaches the public and the key-holder paths alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from . import fixed_base
from .blocks import _cached, _chunk_cts, batch_invert, ciphertext_width, ciphertexts_from_bytes, ciphertexts_to_bytes
from .fixed_base import _ONE, _FixedBase

__all__: list[str] = []

_DIGIT_BATCH = 512  # exponents drawn (and digit lists held) at a time


def _obfuscate_public(fb: _FixedBase, n: mpz, nsq: mpz, ms: Sequence[int]) -> list[mpz]:
    """``(1 + m*n) * hs**a mod n**2`` for each ``m``, fresh ``a`` each."""
    w, (table,) = fb.prepare(len(ms))
    out = []
    for start in range(0, len(ms), _DIGIT_BATCH):
        batch = ms[start : start + _DIGIT_BATCH]
        for m, digits in zip(batch, fixed_base._random_digits(len(batch), fb.nbytes, w), strict=True):
            acc = _ONE
            for row, d in zip(table, digits, strict=True):
                if d:
                    acc = acc * row[d] % nsq
            out.append((1 + m * n) * acc % nsq)
    return out


class _CrtEncryptor:
    """Key-holder obfuscation: ``hs**a`` mod ``p**2`` and ``q**2`` (2048-bit numbers for a
    2048-bit key, ~3.4x cheaper per multiplication than mod ``n**2``), recombined by CRT
    once per ciphertext."""

    def __init__(self, p: int, q: int, hs: int, nbytes: int) -> None:
        self.p2 = mpz(p) ** 2
        self.q2 = mpz(q) ** 2
        self.n = mpz(p) * mpz(q)
        self.q2_inv = gmpy2.invert(self.q2, self.p2)
        self.nbytes = nbytes
        self.fb = _FixedBase(mpz(hs), (self.p2, self.q2), nbytes)

    @property
    def nbytes_held(self) -> int:
        return self.fb.nbytes_held

    def encrypt(self, ms: Sequence[int]) -> list[mpz]:
        p2, q2, n, q2_inv = self.p2, self.q2, self.n, self.q2_inv
        w, (tp, tq) = self.fb.prepare(len(ms))
        out = []
        one = _ONE
        for start in range(0, len(ms), _DIGIT_BATCH):
            batch = ms[start : start + _DIGIT_BATCH]
            for m, digits in zip(batch, fixed_base._random_digits(len(batch), self.nbytes, w), strict=True):
                rp = rq = one
                for row_p, row_q, d in zip(tp, tq, digits, strict=True):
                    if d:  # one loop for both halves: the Python overhead is paid once
                        rp = rp * row_p[d] % p2
                        rq = rq * row_q[d] % q2
                g = 1 + m * n
                cp = g * rp % p2
                cq = g * rq % q2
                out.append(cq + q2 * ((cp - cq) * q2_inv % p2))
        return out


class _CrtDecryptor:
    """CRT decryption with python-paillier's ``hp``/``hq`` precomputation."""

    def __init__(self, p: int, q: int) -> None:
        p, q = mpz(p), mpz(q)
        if q < p:  # canonical order, like phe
            p, q = q, p
        self.p, self.q = p, q
        self.p2, self.q2 = p * p, q * q
        self.n = p * q
        self.pm1, self.qm1 = p - 1, q - 1
        self.p_inv_q = gmpy2.invert(p, q)
        g = self.n + 1
        self.hp = gmpy2.invert((gmpy2.powmod(g, self.pm1, self.p2) - 1) // p, p)
        self.hq = gmpy2.invert((gmpy2.powmod(g, self.qm1, self.q2) - 1) // q, q)

    def decrypt(self, cts: Sequence[Any]) -> list[int]:
        p, q, p2, q2, pm1, qm1 = self.p, self.q, self.p2, self.q2, self.pm1, self.qm1
        hp, hq, p_inv_q = self.hp, self.hq, self.p_inv_q
        powmod = gmpy2.powmod
        out = []
        for c in cts:
            mp = (powmod(c, pm1, p2) - 1) // p * hp % p
            mq = (powmod(c, qm1, q2) - 1) // q * hq % q
            out.append(int(mp + p * ((mq - mp) * p_inv_q % q)))
        return out


def _pub_fixed_base(n: int, hs: int, nbytes: int) -> _FixedBase:
    return _cached(("pub", n, hs, nbytes), lambda: _FixedBase(mpz(hs), (mpz(n) ** 2,), nbytes))


def _w_encrypt_public(n: int, hs: int, nbytes: int, ms: tuple[int, ...]) -> bytes:
    nn = mpz(n)
    out = _obfuscate_public(_pub_fixed_base(n, hs, nbytes), nn, nn * nn, ms)
    return ciphertexts_to_bytes(out, ciphertext_width(n))


def _w_encrypt_private(p: int, q: int, hs: int, nbytes: int, ms: tuple[int, ...]) -> bytes:
    enc = _cached(("crt-enc", p, q, hs, nbytes), lambda: _CrtEncryptor(p, q, hs, nbytes))
    return ciphertexts_to_bytes(enc.encrypt(ms), ciphertext_width(p * q))


def _w_decrypt(p: int, q: int, blob: bytes) -> tuple[int, ...]:
    dec = _cached(("crt-dec", p, q), lambda: _CrtDecryptor(p, q))
    return tuple(dec.decrypt(ciphertexts_from_bytes(blob, ciphertext_width(p * q))))


def _w_mul(nsq: int, width: int, blob: bytes, ks: tuple[int, ...]) -> bytes:
    m = mpz(nsq)
    powmod = gmpy2.powmod
    out = [powmod(c, k, m) if k else _ONE for c, k in zip(ciphertexts_from_bytes(blob, width), ks, strict=True)]
    return ciphertexts_to_bytes(out, width)


def _sum_by_group(cts: Sequence[mpz], groups: Sequence[int], n_groups: int, nsq: mpz) -> list[mpz]:
    acc: list[Any] = [None] * n_groups
    for c, g in zip(cts, groups, strict=True):
        a = acc[g]
        acc[g] = c if a is None else a * c % nsq
    return [_ONE if a is None else a for a in acc]



def _w_sum_by_group(nsq: int, width: int, token: str, start: int, count: int, blob: bytes,
                    groups: bytes, n_groups: int) -> bytes | None:
    cts = _chunk_cts(token, start, count, blob, width)
    if cts is None:
        return None
    g = np.frombuffer(groups, dtype=np.int64).tolist()
    return ciphertexts_to_bytes(_sum_by_group(cts, g, n_groups, mpz(nsq)), width)


def _choose_window(nnz: int, bits: int) -> int:
    """Signed-digit window ``c`` minimising ``W*(nnz + 2**c)`` multiplications, ``W = ceil(bits/c)``.

    Per window: one multiplication per nonzero digit into its bucket and two per bucket
    (``2**(c-1)`` buckets) to total them.
    """
    best_c, best = 2, None
    for c in range(2, 18):
        cost = -(-bits // c) * (nnz + (1 << c))
        if best is None or cost < best:
            best_c, best = c, cost
    return best_c


def _bucket_total(buckets: list[Any], nsq: mpz) -> Any:
    """``prod_d buckets[d]**d`` by running products (2 multiplications per bucket)."""
    running = total = None
    for d in range(len(buckets) - 1, 0, -1):
        b = buckets[d]
        if b is not None:
            running = b if running is None else running * b % nsq
        if running is not None:
            total = running if total is None else total * running % nsq
    return total


def _unsigned_window(nnz: int, bits: int, signs: int) -> int:
    """Pippenger window minimising ``W*(nnz + signs*2**(c+1))`` multiplications."""
    best_c, best = 1, None
    for c in range(1, 17):
        w = -(-bits // c)
        cost = w * (nnz + signs * (2 << c)) + bits
        if best is None or cost < best:
            best_c, best = c, cost
    return best_c


def _multiexp_unsigned(cts: Sequence[mpz], col: np.ndarray, nsq: mpz) -> tuple[mpz, mpz]:
    """Unsigned-digit bucket multi-exponentiation ``prod_i cts[i]**col[i]`` for int64 ``col``
    (cheaper than :func:`_multiexp` for a single column: no inversions).

    Returns ``(P, Q)`` with ``P = prod over col>0`` and ``Q = prod over col<0`` of
    ``cts[i]**|col[i]|``; the caller divides (one inversion per column rather than huge
    exponents ``n - k``).
    """
    neg = col < 0
    mag = np.abs(col).astype(np.uint64)
    top = int(mag.max()) if mag.size else 0
    if top == 0:
        return _ONE, _ONE
    bits = top.bit_length()
    nnz = int(np.count_nonzero(mag))
    signs = 1 + int(bool(neg.any()))
    c = _unsigned_window(nnz, bits, signs)
    mask = np.uint64((1 << c) - 1)
    windows = -(-bits // c)
    powmod = gmpy2.powmod
    out = []
    for sel in (~neg, neg):
        if not sel.any():
            out.append(_ONE)
            continue
        m_sel = np.where(sel, mag, np.uint64(0))
        acc: Any = None
        for k in range(windows - 1, -1, -1):
            if acc is not None:
                acc = powmod(acc, 1 << c, nsq)
            dig = (m_sel >> np.uint64(k * c)) & mask
            idx = np.flatnonzero(dig)
            if idx.size == 0:
                continue
            buckets: list[Any] = [None] * (1 << c)
            for i, d in zip(idx.tolist(), dig[idx].tolist(), strict=True):
                b = buckets[d]
                buckets[d] = cts[i] if b is None else b * cts[i] % nsq
            t = _bucket_total(buckets, nsq)
            acc = t if acc is None else acc * t % nsq
        out.append(_ONE if acc is None else acc)
    return out[0], out[1]


def _signed_digits(mag: np.ndarray, c: int, windows: int) -> np.ndarray:
    """(windows, n) digits with ``sum_k d_k 2**(k c) = mag`` (int64 ``0 <= mag < 2**(windows c)``).

    Every digit but the top one lies in ``[-2**(c-1), 2**(c-1))``; the top one takes the
    remaining carry unsigned (``0 <= d <= 2**c``), so no extra window is needed.
    """
    half, full = 1 << (c - 1), 1 << c
    m = mag.astype(np.int64)
    out = np.empty((windows, len(m)), dtype=np.int64)
    for k in range(windows - 1):
        d = m & (full - 1)
        d = np.where(d >= half, d - full, d)
        out[k] = d
        m = (m - d) >> c
    out[windows - 1] = m
    return out


def _multiexp(bases: Sequence[mpz], n: int, col: np.ndarray, nsq: mpz) -> mpz:
    """Signed-digit bucket multi-exponentiation ``prod_i c_i**col[i]`` for int64 ``col``.

    ``bases`` holds the ``n`` ciphertexts and then (when ``col`` has negative entries)
    their inverses, so a negative digit multiplies the inverse into its bucket: one
    squaring chain per column for both signs, and half as many buckets as unsigned digits.
    """
    mag = np.abs(col)
    top = int(mag.max()) if mag.size else 0
    if top == 0:
        return _ONE
    bits = top.bit_length()
    c = _choose_window(int(np.count_nonzero(mag)), bits)
    windows = -(-bits // c)
    digits = _signed_digits(mag, c, windows) * np.sign(col)[None, :]
    powmod = gmpy2.powmod
    acc: Any = None
    for k in range(windows - 1, -1, -1):
        if acc is not None:
            acc = powmod(acc, 1 << c, nsq)
        dig = digits[k]
        idx = np.flatnonzero(dig)
        if idx.size == 0:
            continue
        d = dig[idx]
        ad = np.abs(d)
        buckets: list[Any] = [None] * (int(ad.max()) + 1)
        for src, a in zip(np.where(d > 0, idx, idx + n).tolist(), ad.tolist(), strict=True):
            b = buckets[a]
            buckets[a] = bases[src] if b is None else b * bases[src] % nsq
        t = _bucket_total(buckets, nsq)
        if t is not None:
            acc = t if acc is None else acc * t % nsq
    return _ONE if acc is None else acc


def _dot(cts: Sequence[mpz], X: np.ndarray, nsq: mpz) -> list[mpz]:
    """``prod_i cts[i]**X[i, j]`` per column ``j``: one batch inversion (Montgomery's trick)
    shared by all columns when ``X`` has negative entries, then :func:`_multiexp`."""
    if X.dtype == object:
        res = []
        for j in range(X.shape[1]):
            pos, neg = _ONE, _ONE
            for c, k in zip(cts, X[:, j].tolist(), strict=True):
                k = int(k)
                if k > 0:
                    pos = pos * gmpy2.powmod(c, k, nsq) % nsq
                elif k < 0:
                    neg = neg * gmpy2.powmod(c, -k, nsq) % nsq
            res.append(pos if neg == 1 else pos * gmpy2.invert(neg, nsq) % nsq)
        return res
    if not X.size or not np.any(X):
        return [_ONE] * X.shape[1]
    if not _signed_pays(X):
        out = []
        for j in range(X.shape[1]):
            pos, neg = _multiexp_unsigned(cts, X[:, j], nsq)
            out.append(pos if neg == 1 else pos * gmpy2.invert(neg, nsq) % nsq)
        return out
    bases = list(cts) + batch_invert(list(cts), nsq)  # a signed digit of either sign may occur anywhere
    return [_multiexp(bases, len(cts), X[:, j], nsq) for j in range(X.shape[1])]


def _signed_pays(X: np.ndarray) -> bool:
    """Whether the batch inversion (3 multiplications per row, once) is repaid by the columns'
    cheaper signed-digit products (estimated by the two window cost models)."""
    rows, cols = X.shape
    bits = max(1, int(np.abs(X).max()).bit_length())
    signs = 1 + int(bool((X < 0).any()))
    cu = _unsigned_window(rows, bits, signs)
    unsigned = -(-bits // cu) * (rows + signs * (2 << cu)) + (signs - 1) * bits
    cs = _choose_window(rows, bits)
    signed = -(-bits // cs) * (rows + (1 << cs))
    return 3 * rows + cols * signed < cols * unsigned


def _w_dot(nsq: int, width: int, token: str, start: int, count: int, blob: bytes, xbytes: bytes,
           rows: int, cols: int) -> bytes | None:
    cts = _chunk_cts(token, start, count, blob, width)
    if cts is None:
        return None
    X = np.frombuffer(xbytes, dtype=np.int64).reshape(rows, cols)
    return ciphertexts_to_bytes(_dot(cts, X, mpz(nsq)), width)



def _matvec_window(bits: int, rows: int, per: int) -> int:
    """The table window minimising ``windows · (per · 2^w table entries + rows lookups)`` per base."""
    return min(range(1, 11), key=lambda w: -(-bits // w) * (per * (1 << w) + rows))


def _matvec(cts: Sequence[mpz], M: np.ndarray, nsq: mpz, fold_bits: int, per: int) -> list[mpz]:
    """``out[g] = prod_j cts[j] ** (sum_p M[g*per + p, j] * 2**(fold_bits*p)) mod nsq``.

    Every ciphertext is a fixed base for all rows: a table of ``cts[j] ** (v * 2**s)`` for
    every ``w``-bit digit ``v`` at every window ``s`` (and fold position ``p``), so an
    entry costs ``ceil(bits(M)/w)`` multiplications and folding costs nothing. Negative
    entries: ``M + K >= 0`` is used and ``(prod_j cts[j]) ** K`` divided out once per group.
    """
    rows, cols = M.shape
    if rows == 0:
        return []
    lo = int(M.min()) if M.size else 0
    K = -lo if lo < 0 else 0
    Mp = M.astype(np.int64) + K
    bits = max(1, int(Mp.max()).bit_length()) if M.size else 1
    w = _matvec_window(bits, rows, per)
    nwin, mask = -(-bits // w), (1 << w) - 1
    tables: list[list[list[list[mpz]]]] = []
    for c in cts:
        per_pos, base = [], c
        for p in range(per):
            if p:
                base = gmpy2.powmod(base, mpz(1) << fold_bits, nsq)
            b, wins = base, []
            for _ in range(nwin):
                row = [_ONE, b]
                for _ in range(mask - 1):
                    row.append(row[-1] * b % nsq)
                wins.append(row)
                b = gmpy2.powmod(b, 1 << w, nsq)
            per_pos.append(wins)
        tables.append(per_pos)
    digits = [((Mp >> (w * k)) & mask).tolist() for k in range(nwin)]
    corr: dict[int, mpz] = {}
    if K:
        inv = _ONE
        for c in cts:
            inv = inv * c % nsq
        inv = gmpy2.invert(inv, nsq)
        for q in {per, rows % per or per}:
            corr[q] = gmpy2.powmod(inv, K * sum(1 << (fold_bits * p) for p in range(q)), nsq)
    out = []
    for start in range(0, rows, per):
        q = min(per, rows - start)
        acc = corr.get(q, _ONE)
        for p in range(q):
            i = start + p
            for j in range(cols):
                tj = tables[j][p]
                for k in range(nwin):
                    d = digits[k][i][j]
                    if d:
                        acc = acc * tj[k][d] % nsq
        out.append(acc)
    return out


def _w_matvec(nsq: int, width: int, blob: bytes, mbytes: bytes, rows: int, cols: int, fold_bits: int,
              per: int) -> bytes:
    """Worker: :func:`_matvec` of a chunk of rows (whole fold groups)."""
    M = np.frombuffer(mbytes, dtype=np.int64).reshape(rows, cols)
    return ciphertexts_to_bytes(_matvec(ciphertexts_from_bytes(blob, width), M, mpz(nsq), fold_bits, per), width)


def _w_fold(nsq: int, width: int, blob: bytes, bits: int, per: int) -> bytes:
    """Worker: fold groups of ``per`` ciphertexts, ``acc = acc**(2**bits) * c`` (last first)."""
    m = mpz(nsq)
    cts = ciphertexts_from_bytes(blob, width)
    e = mpz(1) << bits
    out = []
    powmod = gmpy2.powmod
    for start in range(0, len(cts), per):
        group = cts[start : start + per]
        acc = group[-1]
        for c in reversed(group[:-1]):
            acc = powmod(acc, e, m) * c % m
        out.append(acc)
    return ciphertexts_to_bytes(out, width)

