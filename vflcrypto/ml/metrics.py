"""Plain evaluation metrics (numpy only, so the runtime needs no scikit-learn)."""

from __future__ import annotations

import numpy as np

from ..errors import InputDataError

__all__ = ["accuracy", "adjusted_rand_index", "log_loss", "multiclass_accuracy", "r2_score", "rmse", "roc_auc"]


def rmse(y: np.ndarray, pred: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(y) - np.asarray(pred)) ** 2)))


def r2_score(y: np.ndarray, pred: np.ndarray) -> float:
    y = np.asarray(y, dtype=np.float64)
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0


def roc_auc(y: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve via the rank-sum statistic (ties get average ranks)."""
    y = np.asarray(y).astype(bool)
    score = np.asarray(score, dtype=np.float64)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score), dtype=np.float64)
    sorted_scores = score[order]
    i = 0
    while i < len(score):
        j = i
        while j + 1 < len(score) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def log_loss(y: np.ndarray, p: np.ndarray, eps: float = 1e-15) -> float:
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1 - eps)
    y = np.asarray(y, dtype=np.float64)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def accuracy(y: np.ndarray, p: np.ndarray, threshold: float = 0.5) -> float:
    return float(np.mean((np.asarray(p) >= threshold) == np.asarray(y).astype(bool)))


def multiclass_accuracy(y: np.ndarray, pred: np.ndarray) -> float:
    """Fraction of rows whose predicted class equals the label."""
    y, pred = np.asarray(y).ravel(), np.asarray(pred).ravel()
    if len(y) != len(pred) or len(y) == 0:
        raise InputDataError("need equally many labels and predictions, at least one")
    return float(np.mean(y == pred))


def adjusted_rand_index(a: np.ndarray, b: np.ndarray) -> float:
    """Adjusted Rand index of two partitions of the same rows (Hubert and Arabie, 1985).

    1 for identical partitions (whatever the cluster names), about 0 for independent ones.
    """
    a, b = np.asarray(a).ravel(), np.asarray(b).ravel()
    if len(a) != len(b) or len(a) == 0:
        raise InputDataError("need two labelings of the same (non-empty) rows")
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    table = np.zeros((ia.max() + 1, ib.max() + 1), dtype=np.int64)
    np.add.at(table, (ia, ib), 1)

    def pairs(x: np.ndarray) -> float:
        return float((x * (x - 1) // 2).sum())

    index, rows, cols = pairs(table), pairs(table.sum(1)), pairs(table.sum(0))
    total = len(a) * (len(a) - 1) / 2
    expected = rows * cols / total if total else 0.0
    best = (rows + cols) / 2
    if best == expected:  # both partitions trivial (one cluster, or all singletons): identical
        return 1.0
    return (index - expected) / (best - expected)
