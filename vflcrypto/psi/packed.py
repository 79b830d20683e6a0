"""Canonical IDs held as one buffer and offsets, and their byte order (the fast path of alignment).

:class:`PackedIds` stands for the tuple of canonical IDs of
:class:`~vflcrypto.psi.primitives.CanonicalIds` when a party's IDs come from a simple CSV
(:mod:`vflcrypto.protocols.align.fastcsv`): no Python object per ID, the item hashes kept
once computed, and an integer sort of the IDs' bytes for the output's canonical order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

__all__ = ["PackedIds"]


class PackedIds(Sequence[bytes]):
    """Canonical IDs held as one buffer and offsets (ID ``i`` is ``data[offsets[i]:offsets[i+1]]``).

    A sequence of ``bytes`` like the tuple it stands for, without one Python object per ID:
    10⁷ IDs read from a CSV stay ~100 MB of bytes and an offset array. ``h0`` caches the
    IDs' 16-byte item hashes once computed (:func:`vflcrypto.psi.kkrt.item_hashes`).
    """

    def __init__(self, data: bytes, offsets: np.ndarray) -> None:
        self.data = data
        self.offsets = np.ascontiguousarray(offsets, np.int64)
        self.h0: np.ndarray | None = None
        self._order: np.ndarray | None = None  # byte order of all IDs, once made (:meth:`byte_order`)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, i: int) -> bytes: ...

    @overload
    def __getitem__(self, i: slice) -> list[bytes]: ...

    def __getitem__(self, i: int | slice) -> bytes | list[bytes]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError("ID index out of range")
        i %= n
        return self.data[int(self.offsets[i]) : int(self.offsets[i + 1])]

    def __iter__(self) -> Iterator[bytes]:
        data, off = self.data, self.offsets.tolist()
        return (data[a:b] for a, b in itertools.pairwise(off))

    def byte_order(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The permutation that sorts IDs ``rows`` (default: all, then cached) by their bytes.

        The IDs, zero-padded (they must hold no NUL: padding then keeps the byte order), are
        read as big-endian 64-bit words, folded left to right into one integer key per ID:
        each step replaces ``(key so far, next word)`` by its rank among the distinct pairs,
        so every sort is an integer sort (a string sort of the padded bytes costs several
        times more). Distinct IDs give distinct keys.
        """
        if rows is None:
            if self._order is None:
                self._order = self.byte_order(np.arange(len(self), dtype=np.int64))
            return self._order
        if not len(rows):
            return np.zeros(0, np.int64)
        lengths = self.offsets[rows + 1] - self.offsets[rows]
        words = -(-int(lengths.max()) // 8)
        arr = np.frombuffer(self.data, np.uint8)
        first = self.offsets[rows]
        key = np.zeros(len(rows), np.uint64)
        for w in range(words):
            chunk = np.zeros((len(rows), 8), np.uint8)
            for j in range(8):  # byte 8w + j of every ID (zero past its end): one gather per byte
                has = lengths > 8 * w + j
                chunk[has, j] = arr[first[has] + 8 * w + j]
            word = chunk.view(">u8").ravel().astype(np.uint64)
            if w == 0:
                key = word
                continue
            _, rank_key = np.unique(key, return_inverse=True)
            _, rank_word = np.unique(word, return_inverse=True)
            key = rank_key.astype(np.uint64) * np.uint64(int(rank_word.max()) + 1) + rank_word.astype(np.uint64)
        return np.argsort(key)  # distinct IDs: distinct keys

    def order_of(self, rows: np.ndarray) -> np.ndarray:
        """The permutation that sorts IDs ``rows`` by their bytes, from the cached order of all IDs when made
        (one pass, no sort), else by :meth:`byte_order`."""
        if self._order is None:
            return self.byte_order(rows)
        mark = np.full(len(self), -1, np.int64)
        mark[rows] = np.arange(len(rows))
        picked = mark[self._order]
        return picked[picked >= 0]
