"""Alignment as the first step of training: in-process tables, or one party over the network."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.data.tables import PartyTable, require_same_ids
from vflcrypto.errors import InputDataError
from vflcrypto.psi.primitives import IdentityKey, PackedIds
from vflcrypto.spec import TaskContext

from .messages import ACTIVE, PASSIVE
from .roles import run_active, run_active_multiparty, run_local, run_multiparty_local, run_passive

__all__ = ["align_rows", "align_tables", "canonical_order", "sorted_rows"]


def sorted_rows(ids: Sequence[Any], rows: Any) -> np.ndarray:
    """``rows`` (a party's aligned rows, in the PSI's order) sorted by their canonical IDs.

    The PSI's common order depends on its per-run secrets; every party holds the same
    IDs for the aligned rows, so sorting them gives every party the same order on its
    own, and the same order in every run (the train/test split and the batches follow).
    """
    from vflcrypto.psi.primitives import canonical_id

    rows = np.asarray(rows, np.int64)
    keys = [canonical_id(ids[i]) for i in rows]
    return rows[np.asarray(sorted(range(len(rows)), key=keys.__getitem__), np.int64)]


def canonical_order(canon: Any, rows: Any) -> np.ndarray:
    """``rows`` (input row indices of the common IDs, in the PSI's order) sorted by their canonical IDs.

    ``canon`` is the party's :class:`~vflcrypto.psi.primitives.CanonicalIds` (``encoded[i]``
    came from input row ``rows[i]``). The PSI's order depends on the run's keys; sorting
    by the canonical bytes, which every party holds alike for a common ID, gives the same
    order at every party and in every run, so the same inputs give byte-identical
    outputs. One vectorised sort of fixed-width byte strings.
    """
    rows = np.asarray(rows, np.int64)
    if not len(rows):
        return rows
    if len(canon.rows) == canon.n_input:  # no row dropped: canon.rows is 0 … n-1, a row is its own position
        pos = rows
        if rows.min() < 0 or rows.max() >= len(canon.rows):
            raise InputDataError("aligned rows that are not among the party's canonical IDs")
    else:
        pos = np.searchsorted(canon.rows, rows)
        if np.any(pos >= len(canon.rows)) or np.any(canon.rows[np.minimum(pos, len(canon.rows) - 1)] != rows):
            raise InputDataError("aligned rows that are not among the party's canonical IDs")
    if isinstance(canon.encoded, PackedIds):  # a simple CSV's IDs (:mod:`.fastcsv`): an integer sort, or one pass
        return rows[canon.encoded.order_of(pos)]
    # numpy's fixed-width bytes drop trailing NULs: a constant end byte keeps every key distinct
    keys = np.asarray([canon.encoded[i] + b"\x01" for i in pos.tolist()], dtype=bytes)
    return rows[np.argsort(keys, kind="stable")]


def align_tables(tables: list[PartyTable], names: Sequence[str], *,
                 aligned: bool) -> tuple[list[PartyTable], int]:
    """Tables restricted to the common IDs in one shared order (sorted by canonical ID: the
    same in every run), and the PSI bytes sent.

    With ``aligned=True`` the files must already list the same IDs in the same order
    (checked, no PSI, 0 bytes).
    """
    for t in tables:
        t.check_unique_ids()  # before any PSI: the error names the file and its lines
    if aligned:
        require_same_ids(tables, names)
        return tables, 0
    ids = [list(t.ids) for t in tables]
    if len(tables) == 2:
        run = run_local(ids[0], ids[1], mode="both")
        results = [run.results[ACTIVE], run.results[PASSIVE]]
    else:
        run = run_multiparty_local(ids)
        results = [run.results[ACTIVE]] + [run.results[f"passive-{j}"] for j in range(len(tables) - 1)]
    out = []
    for t, res, name in zip(tables, results, names, strict=True):
        if res.rows is None or len(res.rows) == 0:
            raise InputDataError(f"{name}: no common IDs with the other parties")
        out.append(t.take(sorted_rows(t.ids, res.rows)))
    return out, run.transcript.total_bytes


def align_rows(ctx: TaskContext, ids: Any, *, protocol: str = "ecdh", mode: str = "both",
               chunk_size: int | None = None, progress: Any = None) -> Any:
    """Entity alignment between the active party and every passive party over the network (a
    coordinator, if any, takes no part); returns this party's AlignmentResult.

    ``progress`` (two parties) is called with the number of items each step finished."""
    actives, passives = ctx.names(ACTIVE), ctx.names(PASSIVE)
    if len(actives) != 1 or not passives:
        raise InputDataError("alignment needs one 'active' and at least one 'passive' party")
    multi = len(passives) > 1
    kw: dict[str, Any] = {"protocol": protocol}
    if chunk_size is not None:
        kw["chunk_size"] = chunk_size

    def pins(peers: list[str]) -> tuple[Any, dict[str, bytes]]:
        return IdentityKey(ctx.identity()), {p: ctx.peer_identity(p) for p in peers}

    if ctx.role == ACTIVE:
        chans = ctx.only(passives)
        if multi:
            if protocol == "hash":
                kw["identities"] = pins(passives)
            return run_active_multiparty(chans, ids, **kw)
        if protocol == "hash":
            own, pinned = pins(passives)
            kw.update(identity=own, peer_identity=pinned[passives[0]])
        return run_active(chans, ids, mode=mode, progress=progress, **kw)
    if ctx.role != PASSIVE:
        raise InputDataError(f"{ctx.me}: role {ctx.role!r} takes no part in alignment")
    chans = ctx.only(actives)
    if protocol == "hash":
        own, pinned = pins(actives)
        kw.update(identity=own, peer_identity=pinned[actives[0]])
    return run_passive(chans, ids, mode="all" if multi else mode, progress=None if multi else progress, **kw)
