"""k-means (Lloyd's algorithm with k-means++ seeding), deterministic for a given seed.

Used by one-shot VFL: a party clusters the rows of the gradient it received into as
many clusters as there are classes, and the clusters become its temporary labels
(Sun et al., ICCV 2023, Algorithm 1). The seed is the party's own and not secret: the
clustering is a deterministic function of data the party already holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputDataError

__all__ = ["KMeansResult", "canonical_labels", "kmeans"]


@dataclass(frozen=True)
class KMeansResult:
    """Cluster of every row, the centers and the within-cluster sum of squares."""

    labels: np.ndarray
    centers: np.ndarray
    inertia: float


def _plus_plus(X: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding (Arthur and Vassilvitskii, SODA 2007)."""
    centers = [X[rng.integers(len(X))]]
    d2 = ((X - centers[0]) ** 2).sum(1)
    for _ in range(1, k):
        total = d2.sum()
        i = rng.choice(len(X), p=d2 / total) if total > 0 else rng.integers(len(X))
        centers.append(X[i])
        d2 = np.minimum(d2, ((X - X[i]) ** 2).sum(1))
    return np.asarray(centers)


def _lloyd(X: np.ndarray, centers: np.ndarray, max_iter: int) -> KMeansResult:
    for _ in range(max_iter):
        dist = ((X[:, None, :] - centers[None, :, :]) ** 2).sum(2)
        labels = dist.argmin(1)
        new = np.array([X[labels == j].mean(0) if (labels == j).any() else centers[j] for j in range(len(centers))])
        if np.allclose(new, centers, rtol=0, atol=1e-12):
            break
        centers = new
    dist = ((X[:, None, :] - centers[None, :, :]) ** 2).sum(2)
    labels = dist.argmin(1)
    return KMeansResult(labels.astype(np.int64), centers, float(dist[np.arange(len(X)), labels].sum()))


def kmeans(X: np.ndarray, k: int, *, seed: int = 0, n_init: int = 10, max_iter: int = 300) -> KMeansResult:
    """The best of ``n_init`` k-means++ runs (lowest inertia) of ``X`` (rows) into ``k`` clusters."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or not np.isfinite(X).all():
        raise InputDataError("k-means needs a finite 2-D array")
    if not 1 <= k <= len(X):
        raise InputDataError(f"k-means needs 1 <= k <= rows ({len(X)}), got k = {k}")
    rng = np.random.default_rng(seed)  # not secret: a deterministic function of the party's own data
    best: KMeansResult | None = None
    for _ in range(max(1, n_init)):
        res = _lloyd(X, _plus_plus(X, k, rng), max_iter)
        if best is None or res.inertia < best.inertia - 1e-12:
            best = res
    assert best is not None  # n_init >= 1
    return best


def canonical_labels(labels: np.ndarray) -> np.ndarray:
    """Rename clusters by first appearance (0, 1, ...): the ids then carry only the partition."""
    labels = np.asarray(labels).ravel()
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    return rank[inverse]
