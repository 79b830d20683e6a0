"""A party's local preprocessing of its own columns (never communicated).

Fitted on the party's own training rows only, so nothing about test rows or other
parties leaks into it. :class:`LocalScaling` is the fitted transform itself, which a party
keeps with its weights so that new rows are transformed exactly as its training rows were.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputDataError

__all__ = ["LocalScaling", "fit_local_features", "fit_standardize", "local_features", "standardize_columns"]


@dataclass(frozen=True)
class LocalScaling:
    """A party's fitted column transform: impute, standardize, append an intercept.

    ``medians``: each column's missing values become its training median (``None``: a
    missing or infinite value is refused instead); then ``(X − mean) / scale`` per column; with
    ``intercept`` a column of ones is appended. Never communicated: it only shapes the
    party's own block.
    """

    mean: np.ndarray
    scale: np.ndarray
    medians: np.ndarray | None = None
    intercept: bool = False

    @classmethod
    def identity(cls, columns: int, *, intercept: bool = False) -> LocalScaling:
        """The transform that leaves ``columns`` finite columns as they are."""
        return cls(np.zeros(columns), np.ones(columns), None, intercept)

    @property
    def width(self) -> int:
        """The number of columns the transform produces (the party's weights)."""
        return len(self.mean) + int(self.intercept)

    def apply(self, X: np.ndarray, name: str = "the party") -> np.ndarray:
        """The transformed block of ``X`` (rows × the fitted columns)."""
        X = np.array(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.mean):
            raise InputDataError(f"{name}: values of shape {X.shape}, the transform was fitted on "
                                 f"{len(self.mean)} columns")
        if self.medians is not None:
            X = np.where(np.isnan(X), self.medians, X)
        if not np.isfinite(X).all():
            raise InputDataError(f"{name}: needs finite values (impute missing ones first)")
        X = (X - self.mean) / self.scale
        return np.column_stack([X, np.ones(len(X))]) if self.intercept else X


def fit_standardize(X: np.ndarray, name: str, *, intercept: bool = False) -> LocalScaling:
    """The strict transform of :func:`standardize_columns` (its mean and standard deviation), fitted on ``X``."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or not np.isfinite(X).all():
        raise InputDataError(f"{name}: needs a 2-D matrix of finite values (impute missing ones first)")
    if X.shape[0] == 0 or X.shape[1] == 0:
        return LocalScaling.identity(X.shape[1], intercept=intercept)
    std = X.std(axis=0)
    if (std == 0).any():
        raise InputDataError(f"{name}: column {int(np.argmax(std == 0))} (counting from 0) is constant")
    return LocalScaling(X.mean(axis=0), std, None, intercept)


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
    return fit_standardize(X, name).apply(X, name)


def fit_local_features(X: np.ndarray, train_rows: np.ndarray, *, intercept: bool = False) -> LocalScaling:
    """The transform of :func:`local_features`, fitted on the party's own training rows ``train_rows`` of ``X``.

    Median imputation of missing values (a column with no value at all becomes 0), then the
    training rows' mean and standard deviation (a constant column keeps scale 1).
    """
    X = np.array(X, dtype=np.float64)
    tr = X[train_rows]
    all_nan = np.all(np.isnan(tr), axis=0) if len(tr) else np.ones(X.shape[1], dtype=bool)
    med = np.where(all_nan, 0.0, np.nanmedian(np.where(all_nan, 0.0, tr), axis=0))
    X = np.where(np.isnan(X), med, X)
    mu, sd = X[train_rows].mean(axis=0), X[train_rows].std(axis=0)
    return LocalScaling(mu, np.where(sd > 0, sd, 1.0), med, intercept)


def local_features(X: np.ndarray, train_rows: np.ndarray, *, intercept: bool = False) -> np.ndarray:
    """A feature party's local preprocessing, fitted on its own training rows only.

    Median imputation of missing values (a column with no value at all becomes 0), then
    standardization to mean 0 / standard deviation 1, and, for the party that holds it
    (party 0), an intercept column of ones. Never communicated: it only shapes the
    party's own block ``X_k`` (:func:`fit_local_features` keeps the fitted transform).
    """
    return fit_local_features(X, train_rows, intercept=intercept).apply(X)
