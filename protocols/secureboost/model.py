"""The trained SecureBoost model: the active party's trees and each passive party's lookup table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vflcrypto.dataio import load_model, save_model
from vflcrypto.errors import InputDataError

__all__ = ["ActiveModel", "PassiveModel", "link"]


def link(objective: str, margin: np.ndarray) -> np.ndarray:
    """Probabilities (binary) or values (regression) from margins."""
    return 1.0 / (1.0 + np.exp(-margin)) if objective == "binary" else margin


@dataclass(frozen=True)
class ActiveModel:
    """The active party's trees. Node arrays are flat; tree ``t`` owns ``offsets[t]:offsets[t+1]``.

    ``kind``: 0 leaf, 1 split on an own feature, 2 split on a passive party's feature
    (``party`` indexes ``passive_parties``; ``record`` is that party's record id).
    ``left``/``right`` are tree-local node indices; ``value`` is the leaf weight.
    """

    model_id: str
    objective: str
    base_score: float
    learning_rate: float
    max_depth: int
    columns: tuple[str, ...]
    passive_parties: tuple[str, ...]
    offsets: np.ndarray
    kind: np.ndarray
    party: np.ndarray
    feature: np.ndarray
    bin: np.ndarray
    threshold: np.ndarray
    record: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray

    @property
    def n_trees(self) -> int:
        return len(self.offsets) - 1

    def save(self, path: str | Path) -> None:
        meta = {"format": "vflcrypto.secureboost.active/1", "model_id": self.model_id,
                "objective": self.objective, "base_score": self.base_score,
                "learning_rate": self.learning_rate, "max_depth": self.max_depth,
                "columns": list(self.columns), "passive_parties": list(self.passive_parties)}
        arrays = {k: getattr(self, k) for k in ("offsets", "kind", "party", "feature", "bin",
                                                "threshold", "record", "left", "right", "value")}
        save_model(path, meta, arrays)

    @classmethod
    def load(cls, path: str | Path) -> ActiveModel:
        meta, a = load_model(path)
        if meta.get("format") != "vflcrypto.secureboost.active/1":
            raise InputDataError(f"{path} is not a SecureBoost active-party model")
        try:
            return cls(meta["model_id"], meta["objective"], float(meta["base_score"]),
                       float(meta["learning_rate"]), int(meta["max_depth"]),
                       tuple(meta["columns"]), tuple(meta["passive_parties"]),
                       *(a[k] for k in ("offsets", "kind", "party", "feature", "bin", "threshold",
                                        "record", "left", "right", "value")))
        except KeyError as exc:
            raise InputDataError(f"{path}: model file lacks {exc}") from None


@dataclass(frozen=True)
class PassiveModel:
    """A passive party's lookup table: record id -> (feature, threshold); left iff x <= threshold."""

    model_id: str
    party: str
    columns: tuple[str, ...]
    record_ids: np.ndarray
    feature: np.ndarray
    bin: np.ndarray
    threshold: np.ndarray

    def save(self, path: str | Path) -> None:
        meta = {"format": "vflcrypto.secureboost.passive/1", "model_id": self.model_id,
                "party": self.party, "columns": list(self.columns)}
        save_model(path, meta, {"record_ids": self.record_ids, "feature": self.feature,
                                "bin": self.bin, "threshold": self.threshold})

    @classmethod
    def load(cls, path: str | Path) -> PassiveModel:
        meta, a = load_model(path)
        if meta.get("format") != "vflcrypto.secureboost.passive/1":
            raise InputDataError(f"{path} is not a SecureBoost passive-party model")
        try:
            return cls(meta["model_id"], meta["party"], tuple(meta["columns"]),
                       a["record_ids"], a["feature"], a["bin"], a["threshold"])
        except KeyError as exc:
            raise InputDataError(f"{path}: model file lacks {exc}") from None
