"""Published attacks on tree-based and linear vertical FL, run on one role's view and scored against a baseline.

The companion of :mod:`vflcrypto.audit.literature` (same contract: one role's view in, an
:class:`~vflcrypto.audit.ledger.EmpiricalFinding` naming its paper out; the truth only
scores):

* :func:`id2graph` — label inference by a passive party of a tree-based model from the
  instance spaces it received in every tree (:data:`~vflcrypto.audit.literature.TAKAHASHI_2023`);
* :func:`first_split` — the same party labels the two sides of the first tree's root split
  (the first tree fits the labels alone, so its root split separates them best);
* :func:`residual_recovery` — a party that learns its own plaintext gradient ``X_b^T d`` of a
  batch of ``m <= F`` rows (``F`` its feature count) solves for the batch's residuals ``d``
  (:data:`~vflcrypto.audit.literature.WENG_2020`'s reverse multiplication; SecretFlow's
  warning that a batch must have more rows than any party's features).

Randomness here only simulates which rows the attacker knows and the community search's
visiting order: a seeded numpy generator, no secret.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import AuditError
from ..runtime.declarations import Protection
from .attacks import accuracy_finding
from .ledger import EmpiricalFinding
from .literature import TAKAHASHI_2023, WENG_2020, auc_finding

__all__ = ["first_split", "id2graph", "instance_space_graph", "louvain", "recover_residuals", "residual_recovery"]


# --------------------------------------------------------------------------- Takahashi et al. (2023): ID2Graph


def instance_space_graph(partitions: Sequence[np.ndarray], *, decay: float = 1.0) -> np.ndarray:
    """ID2Graph's graph: ``A[i, j] = Σ_t decay^t [rows i and j share a cell of partitions[t]]`` (no self-loops).

    Each partition gives one cell id per row (the node a row reached in tree ``t``, as deep
    as the attacker saw it; a negative id puts the row in no cell). Rows that keep falling in
    the same nodes across trees get heavy edges: the paper's premise is that they share labels.
    """
    parts = [np.asarray(p, np.int64).ravel() for p in partitions]
    if not parts or len({len(p) for p in parts}) != 1:
        raise AuditError("instance_space_graph needs >= 1 partition, all over the same rows")
    n = len(parts[0])
    A = np.zeros((n, n))
    for t, cell in enumerate(parts):
        ok = cell >= 0
        _, inv = np.unique(cell[ok], return_inverse=True)
        H = np.zeros((n, int(inv.max(initial=-1)) + 1))
        H[np.flatnonzero(ok), inv] = 1.0
        A += decay**t * (H @ H.T)
    np.fill_diagonal(A, 0.0)
    return A


def _local_moving(A: np.ndarray, rng: np.random.Generator, sweeps: int) -> np.ndarray:
    """Louvain's first phase on a dense weighted graph (self-loops allowed): move each vertex to the
    neighbouring community of largest modularity gain until no vertex moves."""
    n = len(A)
    k = A.sum(1)
    m2 = float(k.sum()) or 1.0
    comm = np.arange(n)
    tot = k.copy()
    for _ in range(sweeps):
        moved = 0
        for i in rng.permutation(n):
            c = comm[i]
            tot[c] -= k[i]
            w = np.bincount(comm, weights=A[i], minlength=n)
            w[c] -= A[i, i]
            gain = w - k[i] * tot / m2
            best = int(np.argmax(gain))
            if gain[best] <= gain[c] + 1e-12:
                best = int(c)
            comm[i] = best
            tot[best] += k[i]
            moved += best != c
        if not moved:
            break
    return np.unique(comm, return_inverse=True)[1]


def louvain(A: np.ndarray, *, seed: int = 0, sweeps: int = 20) -> np.ndarray:
    """Communities of the weighted graph ``A`` by the Louvain method (Blondel et al. 2008), the community
    detection ID2Graph uses: local moving, then the communities collapsed into vertices, until nothing moves."""
    rng = np.random.default_rng(seed)  # the visiting order only: not secret
    A = np.asarray(A, np.float64)
    label = np.arange(len(A))
    while True:
        comm = _local_moving(A, rng, sweeps)
        if comm.max() + 1 == len(A):
            return np.unique(label, return_inverse=True)[1]
        label = comm[label]
        H = np.eye(comm.max() + 1)[comm]
        A = H.T @ A @ H


def _majority_per_group(group: np.ndarray, rows: np.ndarray, labels: np.ndarray, fallback: object) -> np.ndarray:
    """Every row's guess: the majority of the known ``labels`` (of rows ``rows``) in its group, else ``fallback``."""
    guess = np.full(len(group), fallback)
    for g in np.unique(group):
        mine = labels[group[rows] == g]
        if len(mine):
            v, k = np.unique(mine, return_counts=True)
            guess[group == g] = v[k.argmax()]
    return guess


def id2graph(observer: str, name: str, partitions: Sequence[np.ndarray], truth: np.ndarray,
             known: Mapping[int, int], *, attacks: Sequence[str], protection: Protection | None = None,
             decay: float = 1.0) -> EmpiricalFinding:
    """ID2Graph (Takahashi et al. 2023, section 4): label inference from the instance spaces of every tree.

    The passive party turns the instance spaces it received (``partitions``: per tree, the
    node each row reached) into the co-occurrence graph :func:`instance_space_graph`, finds its
    communities by Louvain, and — where the paper then clusters its own features with the
    communities as extra features and reports clustering quality — labels each community by
    the majority of the labels it knows (``known``: row -> label; the rows of a community it
    knows none of get the majority of all its known labels). The value is the accuracy on the
    rows it did not know, against the majority class's share among them (exact binomial test).
    Cost: O(T n²) for the graph, O(n²) per Louvain sweep (dense), n rows, T trees.
    """
    y = np.asarray(truth).ravel()
    rows = np.asarray(sorted(known), dtype=np.int64)
    rest = np.setdiff1d(np.arange(len(y)), rows)
    if not len(rows) or len(rest) < 2 or rows.max() >= len(y):
        raise AuditError(f"{name}: need known rows inside the {len(y)} rows and >= 2 others")
    comm = louvain(instance_space_graph(partitions, decay=decay))
    labels = np.asarray([known[int(r)] for r in rows])
    values, counts = np.unique(labels, return_counts=True)
    guess = _majority_per_group(comm, rows, labels, values[counts.argmax()])
    majority = float(np.max(np.unique(y[rest], return_counts=True)[1]) / len(rest))
    found = accuracy_finding(observer, name, guess[rest], y[rest], majority, attacks=attacks, protection=protection,
                             description=f"ID2Graph: the rows' co-occurrence in the nodes of {len(partitions)} "
                                         f"tree(s) as a graph, {int(comm.max()) + 1} Louvain communities, each "
                                         f"labelled by the majority of the {len(rows)} labels it knows; accuracy "
                                         f"on the other {len(rest)} rows; baseline: the majority class's share")
    return dataclasses.replace(found, paper=TAKAHASHI_2023)


def first_split(observer: str, name: str, sides: np.ndarray, truth: np.ndarray, known: Mapping[int, int], *,
                attacks: Sequence[str], protection: Protection | None = None) -> EmpiricalFinding:
    """The first-split leak: the two sides of the first tree's root split, scored by a few known labels.

    The first tree of a boosted model fits gradients that depend on the labels alone
    (``g = p0 - y``), so its root split is the one feature threshold that best separates the
    classes, and every passive party learns which rows went left (``sides``: one cell id per
    row, its instance space after the root split; negative = unknown) whoever owned the split
    (Takahashi et al. 2023 discuss the instance space of the top nodes; the anchors' users
    report it). Binary labels: each row is scored by the share of positives (the larger label)
    among the known rows on its side; the value is the leak AUC on the rows it did not know,
    against chance. More classes: each side gets the majority of its known labels; accuracy
    against the majority class's share.
    """
    y, side = np.asarray(truth).ravel(), np.asarray(sides, np.int64).ravel()
    rows = np.asarray(sorted(known), dtype=np.int64)
    rest = np.setdiff1d(np.arange(len(y)), rows)
    if len(side) != len(y) or not len(rows) or len(rest) < 2:
        raise AuditError(f"{name}: need one side per row and known rows among the {len(y)} rows")
    labels = np.asarray([known[int(r)] for r in rows])
    classes = np.unique(y)
    if len(classes) == 2:
        pos = classes.max()
        rate = {int(s): float(np.mean(labels[side[rows] == s] == pos)) if np.any(side[rows] == s) else 0.5
                for s in np.unique(side)}
        return auc_finding(observer, name, np.asarray([rate[int(s)] for s in side[rest]]), y[rest] == pos,
                           f"leak AUC of the side of the first tree's root split each row fell on, scored by the "
                           f"share of label {pos:g} among the {len(rows)} known rows on that side, on the "
                           f"{len(rest)} rows it did not know; baseline: chance", paper=TAKAHASHI_2023,
                           attacks=attacks, protection=protection)
    guess = _majority_per_group(side, rows, labels, labels[0])
    majority = float(np.max(np.unique(y[rest], return_counts=True)[1]) / len(rest))
    found = accuracy_finding(observer, name, guess[rest], y[rest], majority, attacks=attacks, protection=protection,
                             description="each side of the first tree's root split gets the majority of the labels "
                                         "known on it; baseline: the majority class's share")
    return dataclasses.replace(found, paper=TAKAHASHI_2023)


# --------------------------------------------------------------------------- Weng et al. (2020): residuals


def recover_residuals(Xb: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The residuals ``d`` of a batch from its gradient ``g = X_b^T d`` (``X_b``: m rows × F features).

    The minimum-norm solution of the F equations in m unknowns: exactly ``d`` when ``X_b``
    has rank m (so m <= F), a projection of it otherwise.
    """
    Xb, g = np.asarray(Xb, np.float64), np.asarray(g, np.float64).ravel()
    return np.linalg.lstsq(Xb.T, g, rcond=None)[0]


def residual_recovery(observer: str, name: str, batches: Sequence[np.ndarray], gradients: Sequence[np.ndarray],
                      truth: Sequence[np.ndarray], *, attacks: Sequence[str], protection: Protection | None = None,
                      tol: float = 1e-6) -> EmpiricalFinding:
    """Reverse multiplication (Weng et al. 2020; SecretFlow's batch-size warning): residuals from own gradients.

    A party of a linear model learns, each iteration, its own gradient ``g = X_b^T d`` (``d``
    the batch's residuals, or ``σ(z) - y`` in logistic regression), and holds ``X_b`` (its own
    columns on the public batch rows). ``batches`` holds its ``X_b`` per iteration,
    ``gradients`` the ``g`` it learned (scaled as ``X_b^T d``), ``truth`` the true ``d``
    (scoring only). With m <= F rows of full rank the F equations determine every residual;
    at the first iteration (weights 0) ``d = -y``: the labels themselves. The value is the
    share of residuals recovered to ``tol`` (relative to max(1, |d|)), against 0: an exact check
    (any residual recovered flags). With m > F it stays at 0 unless rows are degenerate.
    Cost: one least-squares solve per batch, O(m F min(m, F)).
    """
    if not batches or len(batches) != len(gradients) or len(batches) != len(truth):
        raise AuditError(f"{name}: need one gradient and one truth per batch, got {len(batches)}, "
                         f"{len(gradients)}, {len(truth)}")
    hit = total = small = 0
    for Xb, g, d in zip(batches, gradients, truth, strict=True):
        d = np.asarray(d, np.float64).ravel()
        est = recover_residuals(Xb, g)
        hit += int(np.sum(np.abs(est - d) <= tol * np.maximum(1.0, np.abs(d))))
        total += len(d)
        small += int(np.asarray(Xb).shape[0] <= np.asarray(Xb).shape[1])
    F = int(np.asarray(batches[0]).shape[1])
    return EmpiricalFinding(observer, name, hit / max(1, total), 0.0,
                            f"residuals solved from its own gradient X_b^T d and its own {F} columns over "
                            f"{len(batches)} batches ({small} with no more rows than its features): {hit} of "
                            f"{total} recovered to {tol:g}; baseline 0 (a batch of more rows than features "
                            "leaves d undetermined)", attacks=tuple(attacks), protection=protection,
                            flagged=hit > 0, samples=total, min_effect=0.0,
                            detects="any residual recovered", paper=WENG_2020)
