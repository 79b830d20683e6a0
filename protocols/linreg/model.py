"""A party's share of the linear model: its local preprocessing and its weights (saved without pickle)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vflcrypto.data.files import load_model, save_model, write_model_dir
from vflcrypto.data.tables import PartyTable
from vflcrypto.errors import InputDataError, ModelFileError

from .config import PREPROCESSING

__all__ = ["PartyModel", "Preprocessing", "fit_label_scaling", "fit_preprocessing", "predict_plain", "save_models"]


@dataclass(frozen=True)
class Preprocessing:
    """A party's local, never-communicated feature transform ``(X − mean) · T`` (+ ones)."""

    mean: np.ndarray
    transform: np.ndarray
    intercept: bool

    def apply(self, X: np.ndarray) -> np.ndarray:
        Z = (np.asarray(X, dtype=np.float64) - self.mean) @ self.transform
        if self.intercept:
            Z = np.hstack([Z, np.ones((Z.shape[0], 1))])
        return Z


def fit_preprocessing(X: np.ndarray, *, method: str = "none",
                      intercept: bool = False) -> Preprocessing:
    """Fit a party's local transform on its own training rows.

    ``"standardize"``: mean 0 / std 1 per column. ``"whiten"``: PCA whitening of the
    party's own block (decorrelates its columns, which makes gradient descent converge
    much faster on collinear features; eigenvalues below 1e-10 of the largest are floored).
    Both are linear, so the model stays linear in the original features.
    """
    if method not in PREPROCESSING:
        raise InputDataError(f"unknown preprocessing {method!r}; choose from {PREPROCESSING}")
    X = np.asarray(X, dtype=np.float64)
    p = X.shape[1]
    if method == "none" or X.shape[0] == 0 or p == 0:
        return Preprocessing(np.zeros(p), np.eye(p), intercept)
    mean = X.mean(axis=0)
    if method == "standardize":
        scale = X.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        return Preprocessing(mean, np.diag(1.0 / scale), intercept)
    cov = (X - mean).T @ (X - mean) / X.shape[0]
    evals, evecs = np.linalg.eigh(cov)
    floor = max(float(evals.max()), 1e-300) * 1e-10
    return Preprocessing(mean, evecs / np.sqrt(np.maximum(evals, floor)), intercept)


def fit_label_scaling(y: np.ndarray, enabled: bool) -> tuple[float, float]:
    """(offset, scale) with the label standardized as ``(y − offset) / scale`` (identity if not ``enabled``).

    The active party's own, never-communicated transform: it trains on the scaled label
    and maps every prediction back by ``scale · s + offset``.
    """
    y = np.asarray(y, dtype=np.float64)
    if not enabled or y.size == 0:
        return 0.0, 1.0
    scale = float(y.std())
    return float(y.mean()), (scale if scale > 0 else 1.0)


@dataclass(frozen=True)
class PartyModel:
    """One party's trained share of the model: its weights and its local preprocessing."""

    name: str
    role: str
    columns: tuple[str, ...]
    weights: np.ndarray
    prep: Preprocessing
    label_name: str | None = None
    label_offset: float = 0.0  # the active party's label scaling: prediction = scale · Σ scores + offset
    label_scale: float = 1.0

    def to_label(self, total: np.ndarray) -> np.ndarray:
        """The summed scores of every party in the label's units (the active party's model applies it)."""
        return self.label_scale * np.asarray(total, dtype=np.float64) + self.label_offset

    def scores(self, X: np.ndarray) -> np.ndarray:
        """This party's partial prediction ``u = prep(X) · Θ``."""
        return self.prep.apply(X) @ self.weights

    def save(self, path: str | os.PathLike[str]) -> None:
        meta = {"protocol": "linreg", "name": self.name, "role": self.role,
                "columns": list(self.columns), "intercept": self.prep.intercept,
                "label": self.label_name, "label_offset": self.label_offset, "label_scale": self.label_scale}
        save_model(path, meta, {"weights": self.weights, "mean": self.prep.mean,
                                "transform": self.prep.transform})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PartyModel:
        meta, arrays = load_model(path, protocol="linreg")
        if meta.get("protocol") != "linreg":
            raise ModelFileError(f"{path} is not a linear-regression party model")
        prep = Preprocessing(arrays["mean"], arrays["transform"], bool(meta["intercept"]))
        return cls(meta["name"], meta["role"], tuple(meta["columns"]), arrays["weights"], prep,
                   meta.get("label"), float(meta.get("label_offset", 0.0)), float(meta.get("label_scale", 1.0)))


def save_models(models: Sequence[PartyModel], model_dir: str | os.PathLike[str], *, overwrite: bool = False,
                what: str = "model directory") -> list[Path]:
    """One ``<name>.npz`` per party (no pickle) and a manifest of their digests, written all-or-nothing.

    Each party would keep only its own file. A directory holding an earlier model is
    refused unless ``overwrite`` (which removes that model's files):
    :func:`vflcrypto.data.files.write_model_dir`.
    """
    write_model_dir(model_dir, "linreg", {f"{m.name}.npz": m.save for m in models}, overwrite=overwrite, what=what)
    return [Path(model_dir) / f"{m.name}.npz" for m in models]


def predict_plain(models: Sequence[PartyModel], tables: Sequence[PartyTable]) -> np.ndarray:
    """Reference prediction ``Σ_party prep(X)·Θ`` (tests only: every party's data in one place)."""
    total = sum((m.scores(t.X) for m, t in zip(models, tables, strict=True)), np.zeros(len(tables[0])))
    return models[0].to_label(total)  # the active party's model comes first
