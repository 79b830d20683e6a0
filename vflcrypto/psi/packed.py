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
        read as big-endian bit strings and sorted by integer sorts only (a string sort of the
        padded bytes costs several times more): first by their first 64 bits; then, while some
        IDs tie, by one 64-bit key per ID made of its tie group's rank (in the high bits) and as
        many of its next bits as fit below, each round consuming those bits. IDs that share
        their first 8 bytes (a common prefix) are thus told apart in one more sort.
        """
        if rows is None:
            if self._order is None:
                self._order = self.byte_order(np.arange(len(self), dtype=np.int64))
            return self._order
        if not len(rows):
            return np.zeros(0, np.int64)
        lengths = self.offsets[rows + 1] - self.offsets[rows]
        bits_in_all = 8 * int(lengths.max())
        words = -(-bits_in_all // 64)
        padded = np.concatenate([np.frombuffer(self.data, np.uint8), np.zeros(8 * words + 8, np.uint8)])
        rows8 = np.lib.stride_tricks.as_strided(padded, (len(padded) - 7, 8), (1, 1), writeable=False)
        first = self.offsets[rows]
        key = _word(rows8, first, lengths, 0)
        order = np.argsort(key)
        key = key[order]
        pos = 64
        while pos < bits_in_all:
            tie = key[1:] == key[:-1]
            if not tie.any():
                break
            group = np.concatenate([[0], np.cumsum(~tie)]).astype(np.uint64)  # nondecreasing along `order`
            gbits = int(group[-1]).bit_length()
            width = 64 - gbits
            chunk = _bits(rows8, first[order], lengths[order], pos, width)
            packed = (group << np.uint64(width)) | chunk if gbits else chunk
            sub = np.argsort(packed)
            order, key, pos = order[sub], packed[sub], pos + width
        return order

    def order_of(self, rows: np.ndarray) -> np.ndarray:
        """The permutation that sorts IDs ``rows`` by their bytes, from the cached order of all IDs when made
        (one pass, no sort), else by :meth:`byte_order`."""
        if self._order is None:
            return self.byte_order(rows)
        mark = np.full(len(self), -1, np.int64)
        mark[rows] = np.arange(len(rows))
        picked = mark[self._order]
        return picked[picked >= 0]


_TOP_BYTES = np.array([0] + [((1 << (8 * r)) - 1) << (8 * (8 - r)) for r in range(1, 9)], np.uint64)


def _word(rows8: np.ndarray, first: np.ndarray, lengths: np.ndarray, w: int) -> np.ndarray:
    """Bytes ``8w … 8w + 7`` of each ID (from byte ``first[i]``, ``lengths[i]`` long), zero past its end, as one
    big-endian integer. ``rows8`` is the IDs' buffer seen as overlapping 8-byte rows (one per byte offset, the
    buffer padded so every read stays inside): one 8-byte row gathered per ID."""
    value = rows8[first + 8 * w].view(">u8").ravel().astype(np.uint64)
    return value & _TOP_BYTES[np.clip(lengths - 8 * w, 0, 8)]


def _bits(rows8: np.ndarray, first: np.ndarray, lengths: np.ndarray, pos: int, width: int) -> np.ndarray:
    """The ``width`` bits (1 … 64) from bit ``pos`` of each zero-padded ID, as an integer below ``2**width``."""
    w, r = divmod(pos, 64)
    value = _word(rows8, first, lengths, w)
    if r:
        value = (value << np.uint64(r)) | (_word(rows8, first, lengths, w + 1) >> np.uint64(64 - r))
    return value >> np.uint64(64 - width) if width < 64 else value
