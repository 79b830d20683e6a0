"""The trained SecureBoost model: the active party's trees and each passive party's lookup table."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.files import load_model, save_model
from vflcrypto.errors import ModelFileError

from .tree import softmax

__all__ = ["IMPORTANCE_TYPES", "ActiveModel", "PassiveModel", "link", "margin_out"]

#: XGBoost's importance types: splits, average and total loss change, average and total cover
IMPORTANCE_TYPES = ("weight", "gain", "cover", "total_gain", "total_cover")


def _summary(gains: np.ndarray, covers: np.ndarray) -> dict[str, float]:
    """XGBoost's five importance figures of a set of splits (their loss changes and covers)."""
    k = len(gains)
    tg, tc = float(np.sum(gains)), float(np.sum(covers))
    return {"weight": k, "gain": tg / k, "cover": tc / k, "total_gain": tg, "total_cover": tc}


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
    other columns); ``base_score`` (outputs,) are the initial margins. ``gain`` (XGBoost's
    loss change of each split, 0 at leaves) and ``cover`` (each node's hessian sum) feed
    :meth:`importance` (empty in models saved before format 3). With early stopping,
    ``best_iteration`` is the best round (the model holds the rounds up to it) and
    ``best_score`` its validation ``eval_metric``.
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
    gain: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cover: np.ndarray = field(default_factory=lambda: np.zeros(0))
    best_iteration: int = -1
    best_score: float = math.nan
    eval_metric: str = ""

    @property
    def n_trees(self) -> int:
        return len(self.offsets) - 1

    def importance(self) -> dict[str, Any]:
        """Feature importance from the splits this party can attribute (computed from its own model alone).

        ``features``: per own column with at least one split, XGBoost's ``weight`` (splits),
        ``gain``/``total_gain`` (loss change) and ``cover``/``total_cover`` (hessian sums).
        ``passive``: per passive party, the same figures over all its splits and, per split, its
        opaque record id with gain and cover: the active party never learns which passive feature a
        split used. Without stored gains (format 1-2 files) only the split counts.
        """
        known = len(self.gain) == len(self.kind)
        gain = self.gain if known else np.zeros(len(self.kind))
        cover = self.cover if known else np.zeros(len(self.kind))
        own = {}
        for f in np.unique(self.feature[self.kind == 1]).tolist():
            sel = (self.kind == 1) & (self.feature == f)
            own[self.columns[f]] = _summary(gain[sel], cover[sel])
        passive: dict[str, Any] = {}
        for p, name in enumerate(self.passive_parties):
            sel = (self.kind == 2) & (self.party == p)
            if sel.any():
                passive[name] = {**_summary(gain[sel], cover[sel]),
                                 "splits": {str(int(r)): {"gain": float(g), "cover": float(c)} for r, g, c in
                                            zip(self.record[sel], gain[sel], cover[sel], strict=True)}}
        if not known:
            own = {k: {"weight": v["weight"]} for k, v in own.items()}
            passive = {k: {"weight": v["weight"]} for k, v in passive.items()}
        return {"features": own, "passive": passive}

    @property
    def n_outputs(self) -> int:
        return int(self.value.shape[1])

    def save(self, path: str | Path) -> None:
        meta = {"format": "vflcrypto.secureboost.active/3", "model_id": self.model_id,
                "objective": self.objective, "base_score": [float(v) for v in self.base_score],
                "learning_rate": self.learning_rate, "max_depth": self.max_depth,
                "columns": list(self.columns), "passive_parties": list(self.passive_parties),
                "best_iteration": self.best_iteration,
                "best_score": None if math.isnan(self.best_score) else self.best_score,
                "eval_metric": self.eval_metric, "importance": self.importance()}
        arrays = {k: getattr(self, k) for k in ("offsets", "kind", "party", "feature", "bin",
                                                "threshold", "record", "left", "right", "value", "gain", "cover")}
        save_model(path, meta, arrays)

    @classmethod
    def load(cls, path: str | Path) -> ActiveModel:
        """Read a model file (format 3; format 2 without gains and covers; format 1, single-output with a
        scalar base score, too)."""
        meta, a = load_model(path, protocol="secureboost")
        fmt = meta.get("format")
        if fmt not in ("vflcrypto.secureboost.active/1", "vflcrypto.secureboost.active/2",
                       "vflcrypto.secureboost.active/3"):
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
                       threshold=a["threshold"], record=a["record"], left=a["left"], right=a["right"], value=value,
                       gain=a.get("gain", np.zeros(0)), cover=a.get("cover", np.zeros(0)),
                       best_iteration=int(meta.get("best_iteration", -1)),
                       best_score=math.nan if meta.get("best_score") is None else float(meta["best_score"]),
                       eval_metric=str(meta.get("eval_metric", "")))
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

    def importance(self) -> dict[str, Any]:
        """Split counts (XGBoost's ``weight``) per own column with at least one split, from this party's
        lookup table alone: gains and covers are the active party's (they would reveal label statistics of
        each split's node)."""
        counts = np.bincount(np.asarray(self.feature, np.int64), minlength=len(self.columns))
        return {"features": {self.columns[f]: {"weight": int(c)} for f, c in enumerate(counts.tolist()) if c}}

    def save(self, path: str | Path) -> None:
        meta = {"format": "vflcrypto.secureboost.passive/1", "model_id": self.model_id,
                "party": self.party, "columns": list(self.columns), "importance": self.importance()}
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
