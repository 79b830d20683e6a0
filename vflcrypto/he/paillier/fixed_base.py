"""DJN fixed-base tables: ``hs**a`` modulo ``n**2`` (or ``p**2``, ``q**2``) for fresh short ``a``.

This is the bottom layer of :mod:`vflcrypto.he.paillier` (it imports nothing from the package):
the window arithmetic (:func:`_table_shape`, :func:`_pick_window`), the table builder, the
draw of the secret exponents (:func:`_random_digits`, from :mod:`secrets`) and
:class:`_FixedBase`, which holds the tables of one base and grows its window with use,
plus the table size limits (:data:`TABLE_WINDOW`, :data:`TABLE_MAX_WINDOW`,
:data:`TABLE_MAX_BYTES`) and the per-process cache cap. It is separate because it is the
one place the obfuscation randomness comes from: every encryptor (:mod:`.kernels`) calls
``fixed_base._random_digits`` through this module's global, so a test can replace it here
(the privacy mutation suite does) and reach every encryption path.

Sizes for a 2048-bit key: w = 8 costs 128 multiplications per encryption (16 MiB, built
in ~0.2 s); the window grows once the exponentiations done so far would have paid for a
larger table, to w = 10 after ~4k encryptions (103 multiplications, 51 MiB), 11 after
~10k (94, 93 MiB), 12 after ~20k (86, 170 MiB, ~1.5 s to build), i.e. a third fewer
multiplications for long runs. The key holder's two tables (modulo ``p**2`` and
``q**2``) hold half-size entries: same total bytes and digits.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Sequence

import numpy as np
from gmpy2 import mpz

__all__ = ["TABLE_MAX_BYTES", "TABLE_MAX_WINDOW", "TABLE_WINDOW"]

_ONE = mpz(1)

# Fixed-base tables (DJN obfuscation). A table for window ``w`` has ``ceil(E/w)`` rows of
# ``2**w`` powers (the top row only as many as its digit can take) for an ``E``-bit
# exponent; one encryption then costs ``ceil(E/w)`` modular multiplications and building
# the table one multiplication per entry. The window grows with use (see
# :func:`_pick_window`), bounded by :data:`TABLE_MAX_BYTES` of ciphertext-sized entries.
TABLE_WINDOW = 8  # initial window: one row of 256 powers per exponent byte
TABLE_MAX_WINDOW = 14  # reached only by short exponents (OU's 256-bit r): Paillier's tables hit the byte cap at 12
try:
    TABLE_MAX_BYTES = int(float(os.environ.get("VFLCRYPTO_TABLE_MB", "192")) * 2**20)
except ValueError:
    TABLE_MAX_BYTES = 192 * 2**20
_CACHE_MAX_BYTES = 3 * TABLE_MAX_BYTES  # per process, over all cached tables


def _table_shape(ebits: int, w: int) -> tuple[int, int]:
    """``(rows, entries)`` of a window-``w`` table for ``ebits``-bit exponents."""
    rows = -(-ebits // w)
    top = ebits - (rows - 1) * w
    return rows, (rows - 1) * (1 << w) + (1 << top)


def _pick_window(ebits: int, entry_bytes: int, current: int, used: int) -> int:
    """Window minimising build + use cost, ``rows*(entries/rows + used)``, under the memory cap.

    ``used`` (exponentiations done so far with this base in this process, including the
    current request) stands for the work still to come (ski-rental: the table grows once
    the work seen so far would have paid for it, so building never costs more than a
    small multiple of the work). ``current`` is kept unless a larger window pays for its
    own build.
    """
    best, best_cost = current, _table_shape(ebits, current)[0] * used if current else None
    for w in range(TABLE_WINDOW, TABLE_MAX_WINDOW + 1):
        rows, entries = _table_shape(ebits, w)
        if w != TABLE_WINDOW and entries * entry_bytes > TABLE_MAX_BYTES:
            break
        cost = entries + rows * used
        if best_cost is None or cost < best_cost:
            best, best_cost = w, cost
    return best


def _fixed_base_table(base: mpz, ebits: int, w: int, mod: mpz) -> list[list[mpz]]:
    """``table[k][d] = base**(d * 2**(w*k)) mod mod`` for ``k < ceil(ebits/w)``."""
    rows, _ = _table_shape(ebits, w)
    table = []
    b = mpz(base) % mod
    for k in range(rows):
        size = 1 << (w if k < rows - 1 else ebits - k * w)
        row = [_ONE, b]
        x = b
        for _ in range(size - 2):
            x = x * b % mod
            row.append(x)
        table.append(row)
        if k < rows - 1:
            b = x * b % mod  # base**(2**(w*(k+1)))
    return table


def _random_digits(count: int, nbytes: int, w: int) -> list[list[int]]:
    """``count`` fresh uniform ``8*nbytes``-bit exponents (``secrets``), as base-``2**w`` digits
    (little-endian, ``ceil(8*nbytes/w)`` per exponent)."""
    if count == 0:
        return []
    raw = np.frombuffer(secrets.token_bytes(count * nbytes), dtype=np.uint8).reshape(count, nbytes)
    if w == 8:
        return raw.tolist()
    bits = np.unpackbits(raw, axis=1, bitorder="little")
    rows = -(-bits.shape[1] // w)
    pad = rows * w - bits.shape[1]
    if pad:
        bits = np.pad(bits, ((0, 0), (0, pad)))
    weights = np.left_shift(1, np.arange(w, dtype=np.int64))
    return (bits.reshape(count, rows, w).astype(np.int64) @ weights).tolist()


class _FixedBase:
    """``base**a`` modulo one or more moduli for fresh random exponents ``a``.

    Holds one table per modulus (same digits); the window starts at :data:`TABLE_WINDOW`
    and grows as the number of exponentiations done with it grows (:func:`_pick_window`).
    Built lazily, once per (key, process); thread-safe.
    """

    def __init__(self, base: mpz, mods: Sequence[mpz], nbytes: int) -> None:
        self.base = mpz(base)
        self.mods = [mpz(m) for m in mods]
        self.nbytes = nbytes
        self.ebits = 8 * nbytes
        self.entry_bytes = sum((int(m).bit_length() + 7) // 8 for m in self.mods)
        self.used = 0
        self.state: tuple[int, list[list[list[mpz]]]] = (0, [])
        self._lock = threading.Lock()

    @property
    def nbytes_held(self) -> int:
        w = self.state[0]
        return _table_shape(self.ebits, w)[1] * self.entry_bytes if w else 0

    def prepare(self, count: int) -> tuple[int, list[list[list[mpz]]]]:
        """Account for ``count`` exponentiations; grow the table if that now pays."""
        with self._lock:
            self.used += count
            w = _pick_window(self.ebits, self.entry_bytes, self.state[0], self.used)
            if w != self.state[0]:
                self.state = (0, [])  # free the old table before building the new one
                self.state = (w, [_fixed_base_table(self.base % m, self.ebits, w, m)
                                  for m in self.mods])
            return self.state

    def table(self) -> list[list[mpz]]:
        """The (first modulus's) table, built if needed (no use accounted)."""
        return self.prepare(0)[1][0]

