"""Sorting many near-uniform 64-bit keys (digest prefixes) fast: a sort of packed keys instead of an argsort."""

from __future__ import annotations

import numpy as np

__all__ = ["prefix_order"]


def prefix_order(keys: np.ndarray) -> np.ndarray:
    """An argsort of uint64 ``keys`` that are close to uniform (digest prefixes), by a plain sort.

    numpy sorts integers several times faster than it argsorts them (vectorised sorting
    networks; 0.1 s against 0.75 s for 10⁷ keys here), so each key's low ``b = bits(n − 1)``
    bits are replaced by its index, the packed keys are sorted, and the order is read off
    the low bits. That sorts by the high ``64 − b`` bits; the rare runs that tie on them
    (about n²/2⁶⁵⁻ᵇ pairs, ~50 at 10⁷) are then sorted by their whole keys. Keys that are
    far from uniform (many ties) get one argsort instead.
    """
    n = len(keys)
    b = max(1, (n - 1).bit_length())
    if b > 40:
        return np.argsort(keys)
    low = np.uint64((1 << b) - 1)
    packed = keys & ~low
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    order = (packed & low).astype(np.int64)
    packed >>= np.uint64(b)  # the high bits, in sorted order
    tie = np.flatnonzero(packed[1:] == packed[:-1])
    if len(tie) > 64 + n // 1024:  # far from uniform: one argsort is cheaper than mending many runs
        return np.argsort(keys)
    if len(tie):
        # runs of equal high bits: [start, end) from the tied neighbours
        begins = tie[np.concatenate([[True], tie[1:] != tie[:-1] + 1])]
        ends = tie[np.concatenate([tie[1:] != tie[:-1] + 1, [True]])] + 2
        for a, z in zip(begins.tolist(), ends.tolist(), strict=True):
            run = order[a:z]
            order[a:z] = run[np.argsort(keys[run], kind="stable")]
    return order
