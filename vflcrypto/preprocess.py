"""A party's local preprocessing of its own columns (never communicated).

Fitted on the party's own training rows only, so nothing about test rows or other
parties leaks into it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["local_features"]


def local_features(X: np.ndarray, train_rows: np.ndarray, *, intercept: bool = False) -> np.ndarray:
    """A feature party's local preprocessing, fitted on its own training rows only.

    Median imputation of missing values (a column with no value at all becomes 0), then
    standardization to mean 0 / standard deviation 1, and, for the party that holds it
    (party 0), an intercept column of ones. Never communicated: it only shapes the
    party's own block ``X_k``.
    """
    X = np.array(X, dtype=np.float64)
    tr = X[train_rows]
    all_nan = np.all(np.isnan(tr), axis=0) if len(tr) else np.ones(X.shape[1], dtype=bool)
    med = np.where(all_nan, 0.0, np.nanmedian(np.where(all_nan, 0.0, tr), axis=0))
    X = np.where(np.isnan(X), med, X)
    mu, sd = X[train_rows].mean(axis=0), X[train_rows].std(axis=0)
    X = (X - mu) / np.where(sd > 0, sd, 1.0)
    return np.column_stack([X, np.ones(len(X))]) if intercept else X
