"""A party's local preprocessing of its own columns (never communicated).

Fitted on the party's own training rows only, so nothing about test rows or other
parties leaks into it.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputDataError

__all__ = ["local_features", "standardize_columns"]


def standardize_columns(X: np.ndarray, name: str) -> np.ndarray:
    """A party's columns centred and scaled to unit population variance (as ``numpy.corrcoef`` does).

    Strict, for protocols whose math needs exact z-scores: non-finite values and constant
    columns are refused (``name`` says whose); a matrix without rows or columns passes.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or not np.isfinite(X).all():
        raise InputDataError(f"{name}: needs a 2-D matrix of finite values (impute missing ones first)")
    if X.shape[0] == 0 or X.shape[1] == 0:
        return X
    std = X.std(axis=0)
    if (std == 0).any():
        raise InputDataError(f"{name}: column {int(np.argmax(std == 0))} (counting from 0) is constant")
    return (X - X.mean(axis=0)) / std


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
