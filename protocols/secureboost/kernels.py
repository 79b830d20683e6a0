"""Encrypted per-bin sums: the histogram kernel of SecureBoost's passive party (and of WOE's).

A bin's encrypted sum is the product of its rows' ciphertexts modulo the ciphertext modulus.
Every row of a node falls in exactly one bin of each feature, so the product of one feature's
bin sums is the node's total, the same group element whichever feature forms it. The kernel
forms one feature of each node in full (the one whose largest bin is smallest, the *anchor*)
and, for every other feature, leaves out the rows of its largest bin: that bin's sum is the
total times the inverse of the feature's other bins (:func:`fill_skipped`, one modular
inversion for all of them by Montgomery's trick). The result is the same ciphertext, byte for
byte, as the product over the bin's rows: the group operation is exact, nothing is
approximated, and what is sent does not change. LightGBM recovers its most frequent bin from
the leaf's sums in the same way (``Dataset::FixHistogram``).

It pays where features have a dominant value, as credit data's categorical and payment-status
columns do: on default_credit's host file (10 features in 32-quantile bins) the largest bins
hold 5-60 % of the rows, and the root's sums multiply in 56 % of the row-feature pairs (44 %
fewer multiplications); bench/secureboost_bench.py's histogram phase fell by 38 % with it. A bin
is left out only when it saves more multiplications than its recovery costs. The work, and so a
level's response time, now falls with those bins' row counts: SECURITY.md (SecureBoost, *Response
time*) states what that can tell the active party.

The products themselves run in the C kernel of :mod:`vflcrypto.he.native` where it is built
(on this process's threads under the process backend; inside each Ray task under Ray), else in
Python on the process pool. Worker functions (``_w_*``) are module-level and take only ints and
bytes, as :mod:`vflcrypto.parallel` requires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gmpy2 import mpz

from vflcrypto import parallel
from vflcrypto.errors import ProtocolError
from vflcrypto.he import native
from vflcrypto.he.paillier import batch_invert, ciphertexts_from_bytes, ciphertexts_to_bytes
from vflcrypto.he.schemes import PublicKey

__all__ = ["SkipPlan", "encrypted_bin_sums", "fill_skipped", "plan_skip"]

#: multiplications a left-out bin's recovery costs beyond one per other bin of its feature (its share
#: of the batch inversion and the final product)
_RECOVERY_COST = 4


@dataclass(frozen=True)
class SkipPlan:
    """Which rows the kernel leaves out and how their bins are recovered.

    ``keys``: the group of each (row, column), ``-1`` where the row is left out; ``anchors``: per
    node, the groups of its anchor column (their product is the node's total); ``skipped``: per
    left-out bin, ``(node, its group, the other groups of its column)``.
    """

    keys: np.ndarray
    anchors: dict[int, list[int]]
    skipped: list[tuple[int, int, list[int]]]

    @property
    def multiplications(self) -> int:
        """Row ciphertexts the kernel multiplies in (the work this plan leaves)."""
        return int((self.keys >= 0).sum())


def plan_skip(keys: np.ndarray, n_groups: int, row_node: np.ndarray | None = None) -> SkipPlan:
    """The plan for ``keys`` (rows × columns, group ids < ``n_groups``), rows of node ``row_node[r]`` (one
    node when ``None``). Needs each group to belong to one (node, column), as SecureBoost's and WOE's
    layouts give; for any other layout (or a single column) nothing is left out."""
    rows, cols = keys.shape
    none = SkipPlan(keys, {}, [])
    if rows == 0 or cols < 2:
        return none
    node = np.zeros(rows, np.int64) if row_node is None else np.asarray(row_node, np.int64)
    counts = np.bincount(keys.ravel(), minlength=n_groups)
    g_node = np.full(n_groups, -1, np.int64)
    g_col = np.full(n_groups, -1, np.int64)
    g_node[keys] = np.broadcast_to(node[:, None], keys.shape)
    g_col[keys] = np.broadcast_to(np.arange(cols, dtype=np.int64)[None, :], keys.shape)
    if not ((g_node[keys] == node[:, None]).all() and (g_col[keys] == np.arange(cols)[None, :]).all()):
        return none  # a group shared by two nodes or columns: no total to recover from
    columns: dict[int, dict[int, list[int]]] = {}
    for g, s, c in zip(np.flatnonzero(counts).tolist(), g_node[counts > 0].tolist(), g_col[counts > 0].tolist(),
                       strict=True):
        columns.setdefault(s, {}).setdefault(c, []).append(g)
    anchors: dict[int, list[int]] = {}
    skipped: list[tuple[int, int, list[int]]] = []
    for s, by_col in columns.items():
        largest = {c: max(gs, key=lambda g: (counts[g], -g)) for c, gs in by_col.items()}
        anchor = min(by_col, key=lambda c: (counts[largest[c]], c))
        mine = [(s, largest[c], [g for g in gs if g != largest[c]]) for c, gs in by_col.items()
                if c != anchor and counts[largest[c]] > len(gs) - 1 + _RECOVERY_COST]
        if mine:
            anchors[s] = by_col[anchor]
            skipped += mine
    if not skipped:
        return none
    out = np.zeros(n_groups, bool)
    out[[g for _, g, _ in skipped]] = True
    return SkipPlan(np.where(out[keys], -1, keys), anchors, skipped)


def _product(values: list[Any], mod: Any) -> Any:
    acc: Any = None
    for v in values:
        if v != 1:
            acc = v if acc is None else acc * v % mod
    return mpz(1) if acc is None else acc


def fill_skipped(sums: list[Any], plan: SkipPlan, mod: Any) -> list[Any]:
    """``sums`` with each left-out bin recovered: the node's total over the product of its column's others."""
    if not plan.skipped:
        return sums
    totals = {s: _product([sums[g] for g in gs], mod) for s, gs in plan.anchors.items()}
    try:
        inverses = batch_invert([_product([sums[g] for g in others], mod) for _, _, others in plan.skipped], mod)
    except ZeroDivisionError:
        raise ProtocolError("a received ciphertext is not invertible modulo the ciphertext modulus") from None
    out = list(sums)
    for (s, g, _), inv in zip(plan.skipped, inverses, strict=True):
        out[g] = totals[s] * inv % mod
    return out


def _w_bin_sums(nsq: int, width: int, blob: bytes, keys: bytes, n_cols: int, n_groups: int) -> bytes:
    """Per-group products of row ciphertexts: ``keys`` (rows, n_cols) int64 group ids, ``-1`` left out.

    Empty groups give 1 (the neutral element; never sent on its own).
    """
    k = np.frombuffer(keys, dtype=np.int64).reshape(len(blob) // width, n_cols)
    raw = native.group_products(nsq, width, blob, k, n_groups)  # the C kernel where it is built
    if raw is not None:
        return raw
    m = mpz(nsq)
    cts = ciphertexts_from_bytes(blob, width)
    acc: list[Any] = [None] * n_groups
    for j in range(n_cols):
        col = k[:, j]
        kept = np.flatnonzero(col >= 0)
        rows = cts if len(kept) == len(cts) else [cts[i] for i in kept.tolist()]
        for c, g in zip(rows, col[kept].tolist(), strict=True):
            a = acc[g]
            acc[g] = c if a is None else a * c % m
    return ciphertexts_to_bytes([1 if a is None else a for a in acc], width)


def encrypted_bin_sums(pk: PublicKey, row_blob: bytes, keys: np.ndarray, n_groups: int,
                       row_node: np.ndarray | None = None, *, skip: bool = True) -> list[mpz]:
    """Sum row ciphertexts into groups ``keys[r, f]`` (every feature of every node) in parallel.

    ``row_node``: each row's node, when the rows are several nodes'; ``skip``: leave out each
    feature's largest bin where that saves work (:func:`plan_skip`; the same ciphertexts either way).
    """
    w = pk.ciphertext_bytes
    rows, cols = keys.shape
    plan = plan_skip(keys, n_groups, row_node) if skip else SkipPlan(keys, {}, [])
    nsq = int(pk.cmod)
    cost = int(plan.multiplications * (int(pk.cmod).bit_length() / 4096) ** 2)
    workers = max(1, parallel.worker_count())
    if rows and parallel.backend() == "process" and native.available():  # this process's threads, no shipping
        raw = native.group_products_threaded(nsq, w, row_blob, plan.keys, n_groups, workers)
        if raw is not None:
            return fill_skipped(ciphertexts_from_bytes(raw, w), plan, pk.cmod)
    ranges = parallel.chunk_ranges(rows, workers) if rows else []
    chunks = [(nsq, w, row_blob[a * w : b * w], np.ascontiguousarray(plan.keys[a:b], dtype=np.int64).tobytes(),
               cols, n_groups) for a, b in ranges]
    parts = [ciphertexts_from_bytes(p, w) for p in parallel.parallel_map(_w_bin_sums, chunks, cost=cost)]
    if not parts:
        return [mpz(1)] * n_groups
    m = pk.cmod
    out = parts[0]
    for part in parts[1:]:
        out = [x if y == 1 else (y if x == 1 else x * y % m) for x, y in zip(out, part, strict=True)]
    return fill_skipped(out, plan, m)
