"""The trained SecureBoost model: the active party's trees and each passive party's lookup table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vflcrypto.data.files import load_model, save_model
from vflcrypto.errors import ModelFileError

from .tree import softmax

__all__ = ["ActiveModel", "PassiveModel", "link", "margin_out"]


def link(objective: str, margin: np.ndarray) -> np.ndarray:
    """Probabilities (binary: (n,); multiclass: softmax, (n, K)) or values (regression) from margins.

    ``margin`` is (n,) or (n, outputs).
    """
    margin = np.asarray(margin, dtype=np.float64)
    if objective == "multiclass":
        return softmax(margin.reshape(margin.shape[0], -1))
    m = margin.reshape(margin.shape[0], -1)[:, 0] if margin.ndim > 1 else margin
    return 1.0 / (1.0 + np.exp(-m)) if objective == "binary" else m


def margin_out(margin: np.ndarray) -> np.ndarray:
    """Margins as XGBoost's ``output_margin`` shapes them: (n,) for one output, else (n, K)."""
    return margin[:, 0].copy() if margin.ndim == 2 and margin.shape[1] == 1 else margin


@dataclass(frozen=True)
class ActiveModel:
    """The active party's trees. Node arrays are flat; tree ``t`` owns ``offsets[t]:offsets[t+1]``.

    ``kind``: 0 leaf, 1 split on an own feature, 2 split on a passive party's feature
    (``party`` indexes ``passive_parties``; ``record`` is that party's record id).
    ``left``/``right`` are tree-local node indices; ``value`` (nodes, outputs) is the leaf
    weight per output (a tree of one class of a one-tree-per-class model has zeros in the
    other columns); ``base_score`` (outputs,) are the initial margins.
    """

    model_id: str
    objective: str
    base_score: np.ndarray
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

    @property
    def n_outputs(self) -> int:
        return int(self.value.shape[1])

    def save(self, path: str | Path) -> None:
        meta = {"format": "vflcrypto.secureboost.active/2", "model_id": self.model_id,
                "objective": self.objective, "base_score": [float(v) for v in self.base_score],
                "learning_rate": self.learning_rate, "max_depth": self.max_depth,
                "columns": list(self.columns), "passive_parties": list(self.passive_parties)}
        arrays = {k: getattr(self, k) for k in ("offsets", "kind", "party", "feature", "bin",
                                                "threshold", "record", "left", "right", "value")}
        save_model(path, meta, arrays)

    @classmethod
    def load(cls, path: str | Path) -> ActiveModel:
        """Read a model file (format 2; format 1, single-output with a scalar base score, too)."""
        meta, a = load_model(path, protocol="secureboost")
        fmt = meta.get("format")
        if fmt not in ("vflcrypto.secureboost.active/1", "vflcrypto.secureboost.active/2"):
            raise ModelFileError(f"{path} is not a SecureBoost active-party model")
        try:
            base = np.atleast_1d(np.asarray(meta["base_score"], dtype=np.float64))
            value = np.asarray(a["value"], dtype=np.float64)
            value = value.reshape(len(value), -1)
            if value.shape[1] != len(base):
                raise ModelFileError(f"{path}: leaf values have {value.shape[1]} outputs, the base score "
                                     f"{len(base)}")
            return cls(meta["model_id"], meta["objective"], base,
                       float(meta["learning_rate"]), int(meta["max_depth"]),
                       tuple(meta["columns"]), tuple(meta["passive_parties"]),
                       offsets=a["offsets"], kind=a["kind"], party=a["party"], feature=a["feature"], bin=a["bin"],
                       threshold=a["threshold"], record=a["record"], left=a["left"], right=a["right"], value=value)
        except KeyError as exc:
            raise ModelFileError(f"{path}: model file lacks {exc}") from None


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
        meta, a = load_model(path, protocol="secureboost")
        if meta.get("format") != "vflcrypto.secureboost.passive/1":
            raise ModelFileError(f"{path} is not a SecureBoost passive-party model")
        try:
            return cls(meta["model_id"], meta["party"], tuple(meta["columns"]),
                       a["record_ids"], a["feature"], a["bin"], a["threshold"])
        except KeyError as exc:
            raise ModelFileError(f"{path}: model file lacks {exc}") from None
