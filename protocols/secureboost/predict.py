"""Joint prediction with a SecureBoost model: the active party walks the trees, the owners answer.

The active party sends one ``secureboost.predict_query`` per passive party per level at which
rows reach that party's nodes (record ids and the rows at each node; a level without any is
skipped: one round trip less, and an empty query would say the same); the owner answers
left/right bits in ``secureboost.predict_answer``. Plain loops over Channels (prediction has no secret state
worth resuming; the Flower App trains only).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.runtime.channel import DEFAULT_TIMEOUT, Channel, Endpoint, LocalNetwork, Transcript, run_parties

from .messages import ACTIVE, PASSIVE, PredictAnswer, PredictQuery
from .model import ActiveModel, PassiveModel, link
from .tree import as_matrix

__all__ = ["network", "predict_active", "predict_local", "predict_passive"]


def network(names: list[str], timeout: float, allow_insecure: bool, transcript: Transcript | None = None
            ) -> LocalNetwork:
    eps = [Endpoint("active", ACTIVE)] + [Endpoint(p, PASSIVE) for p in names]
    """The in-process network of the active party and ``names`` (a fresh run id)."""
    return LocalNetwork(eps, links=[("active", p) for p in names], timeout=timeout,
                        allow_insecure=allow_insecure, transcript=transcript, run_id=secrets.token_hex(8))


def predict_active(channels: dict[str, Channel], model: ActiveModel, X: np.ndarray, *,
                   timeout: float | None = None) -> np.ndarray:
    """Walk all trees level by level; one query per passive party per level that reaches its nodes. Returns
    probabilities (binary: (n,); multiclass: (n, K)) or values (regression)."""
    X = as_matrix(X, "active party")
    if X.shape[1] != len(model.columns):
        raise InputDataError(f"active party has {X.shape[1]} features, the model {len(model.columns)}")
    names = list(model.passive_parties)
    if set(channels) != set(names):
        raise InputDataError(f"model was trained with passive parties {names}, got {sorted(channels)}")
    n = X.shape[0]
    margin = np.tile(np.asarray(model.base_score, np.float64), (n, 1))
    frontier = [(t, 0, np.arange(n)) for t in range(model.n_trees)]
    depth = 0
    while frontier:
        if depth > model.max_depth:
            raise InputDataError("model has a path deeper than its max_depth")
        nxt = []
        queries: dict[int, list[tuple[int, int, np.ndarray]]] = {p: [] for p in range(len(names))}
        for t, idx, rows in frontier:
            g = int(model.offsets[t]) + idx
            kind = int(model.kind[g])
            if kind == 0:
                margin[rows] += model.learning_rate * model.value[g]
            elif kind == 1:
                mask = X[rows, int(model.feature[g])] <= float(model.threshold[g])
                nxt += [(t, int(model.left[g]), rows[mask]), (t, int(model.right[g]), rows[~mask])]
            else:
                queries[int(model.party[g])].append((t, idx, rows))
        asked = [p for p in range(len(names)) if queries[p]]  # a level without rows at a party's nodes: no query
        for p in asked:
            name = names[p]
            q = queries[p]
            recs = np.asarray([model.record[int(model.offsets[t]) + i] for t, i, _ in q], np.int64)
            offs = np.cumsum([0] + [len(r) for _, _, r in q]).astype(np.int64)
            rows_all = np.concatenate([r for _, _, r in q]).astype(np.int32)
            channels[name].send(PredictQuery(model.model_id, n, depth, False, recs, offs, rows_all))
        for p in asked:
            name = names[p]
            ans = channels[name].recv(PredictAnswer, timeout=timeout)
            q = queries[p]
            bits = np.asarray(ans.left_bits, dtype=np.uint8)
            sizes = [(len(r) + 7) // 8 for _, _, r in q]
            if ans.depth != depth or len(bits) != sum(sizes):
                raise ProtocolError(f"{name} answered a prediction query with the wrong layout")
            start = 0
            for (t, idx, rows), size in zip(q, sizes, strict=True):
                g = int(model.offsets[t]) + idx
                mask = np.unpackbits(bits[start : start + size], count=len(rows)).astype(bool)
                start += size
                nxt += [(t, int(model.left[g]), rows[mask]), (t, int(model.right[g]), rows[~mask])]
        frontier = [f for f in nxt if len(f[2])]
        depth += 1
    empty = PredictQuery(model.model_id, n, depth, True, np.zeros(0, np.int64), np.zeros(1, np.int64),
                         np.zeros(0, np.int32))
    for name in names:
        channels[name].send(empty)
    return link(model.objective, margin)


def predict_passive(channels: dict[str, Channel], model: PassiveModel, X: np.ndarray, *,
                    timeout: float | None = None) -> int:
    """Answer left/right for the queried rows at this party's nodes; returns rows answered."""
    ch = next(iter(channels.values()))
    X = as_matrix(X, model.party)
    if X.shape[1] != len(model.columns):
        raise InputDataError(f"{model.party} has {X.shape[1]} features, its model {len(model.columns)}")
    lookup = {int(r): k for k, r in enumerate(model.record_ids.tolist())}
    answered = 0
    while True:
        q = ch.recv(PredictQuery, timeout=timeout)
        if not secrets.compare_digest(q.model_id.encode(), model.model_id.encode()):
            raise ProtocolError(f"{model.party}: prediction query for another model (its record ids "
                                "would be meaningless): stale or mismatched passive model")
        if q.n_rows != X.shape[0]:
            raise InputDataError(f"{model.party} has {X.shape[0]} rows, the active party {q.n_rows}")
        if q.done:
            return answered
        recs = np.asarray(q.record_ids).tolist()
        offs = np.asarray(q.offsets).astype(np.int64)
        rows = np.asarray(q.rows).astype(np.int64)
        if len(offs) != len(recs) + 1 or offs[0] != 0 or offs[-1] != len(rows) or \
                (np.diff(offs) < 0).any() or (len(rows) and (rows.min() < 0 or rows.max() >= X.shape[0])):
            raise ProtocolError("malformed prediction query")
        parts = []
        for k, rec in enumerate(recs):
            j = lookup.get(int(rec))
            if j is None:
                raise ProtocolError(f"{model.party}: unknown record id {rec} (stale or mismatched "
                                    "passive model)")
            r = rows[offs[k] : offs[k + 1]]
            parts.append(np.packbits(X[r, int(model.feature[j])] <= float(model.threshold[j])))
            answered += len(r)
        ch.send(PredictAnswer(q.depth, np.concatenate(parts) if parts else np.zeros(0, np.uint8)))


def predict_local(active_model: ActiveModel, X_active: np.ndarray,
                  passive: Sequence[tuple[PassiveModel, np.ndarray]], *,
                  timeout: float = DEFAULT_TIMEOUT, transcript: Transcript | None = None) -> np.ndarray:
    """Joint prediction with every party in this process (e.g. after loading saved models).

    ``passive`` lists ``(model, X)`` per passive party, in any order (matched by party name).
    """
    names = list(active_model.passive_parties)
    by_name = {m.party: (m, X) for m, X in passive}
    if set(by_name) != set(names):
        raise InputDataError(f"model needs passive parties {names}, got {sorted(by_name)}")
    net = network(names, timeout, True, transcript)
    tasks: dict[str, Any] = {"active": lambda: predict_active(net.channels("active"), active_model,
                                                              X_active, timeout=timeout)}
    for name in names:
        m, X = by_name[name]
        tasks[name] = (lambda m=m, X=X, name=name: predict_passive(net.channels(name), m, X,
                                                                   timeout=timeout))
    return run_parties(tasks, network=net)["active"]
