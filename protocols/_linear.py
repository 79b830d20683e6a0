"""A data party's share of a vertical linear model (logreg, poisson, sshelr): saved, loaded, applied to new rows.

At the end of training each data party holds, in plaintext, only its own weights and its
own local preprocessing (imputation medians, the training rows' mean and standard
deviation, an intercept column): :class:`LinearParty`. Saved without pickle
(:func:`~vflcrypto.data.files.save_model`), one ``<party>.npz`` per party in a model
directory with a manifest of digests (:func:`save_parties`,
:func:`~vflcrypto.data.files.write_model_dir`), it transforms new rows exactly as the
training rows were (:meth:`LinearParty.features`).

The two-party models without a third party at prediction (poisson, sshelr) share the score
exchange of :class:`ScoreActiveRole` / :class:`ScorePassiveRole`: the label holder sends the
plan (row count, a digest of the query IDs), the feature party answers its score
``u = Z w`` per row. Each protocol declares the two messages in its own ``messages.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from vflcrypto.data.files import load_model, save_model, verify_model_dir, write_model_dir
from vflcrypto.data.tables import PartyTable, ids_digest, read_party_csv
from vflcrypto.data.validate import refuse_missing_values
from vflcrypto.errors import InputDataError, ModelFileError, ProtocolError
from vflcrypto.ml.preprocess import LocalScaling
from vflcrypto.runtime.channel import (
    DEFAULT_TIMEOUT,
    AuditTap,
    Channel,
    Endpoint,
    LocalNetwork,
    Transcript,
    run_parties,
)
from vflcrypto.runtime.steps import Next, Role, done, send, then

from ._predict import check_parties

__all__ = ["LinearParty", "ScoreActiveRole", "ScorePassiveRole", "load_parties", "pair_models", "predict_pair",
           "read_query", "save_parties"]


@dataclass(frozen=True)
class LinearParty:
    """One data party's trained share of a vertical linear model: its weights on its own preprocessed columns.

    ``settings``: the run's public settings this party keeps with its model (the mode, the
    label column, ...); the protocol reads them at prediction.
    """

    protocol: str
    name: str
    role: str
    columns: tuple[str, ...]
    weights: np.ndarray
    scaling: LocalScaling
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.weights) != self.scaling.width or len(self.scaling.mean) != len(self.columns):
            raise InputDataError(f"{self.name}: {len(self.weights)} weights for {len(self.columns)} columns"
                                 f"{' and an intercept' if self.scaling.intercept else ''}")

    def features(self, X: np.ndarray) -> np.ndarray:
        """New rows of this party's columns, preprocessed exactly as its training rows were."""
        return self.scaling.apply(X, self.name)

    def scores(self, X: np.ndarray) -> np.ndarray:
        """This party's score ``u = features(X) · w`` per row."""
        return self.features(X) @ self.weights

    def save(self, path: str | os.PathLike[str], extra: Mapping[str, Any] | None = None,
             extra_arrays: Mapping[str, np.ndarray] | None = None) -> None:
        """One ``.npz`` (no pickle): the metadata (``extra`` first, e.g. a network run's) and the arrays
        (``extra_arrays`` beside the model's, e.g. a network label holder's training probabilities)."""
        s = self.scaling
        meta = {**(extra or {}), "protocol": self.protocol, "name": self.name, "role": self.role,
                "columns": list(self.columns), "intercept": s.intercept, "settings": dict(self.settings)}
        arrays = {**(extra_arrays or {}), "weights": self.weights, "mean": s.mean, "scale": s.scale}
        if s.medians is not None:
            arrays["medians"] = s.medians
        save_model(path, meta, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike[str], protocol: str) -> LinearParty:
        """A party file of ``protocol`` (checked against the manifest beside it, if any); :class:`ModelFileError`
        naming the file if it is damaged, another protocol's, or inconsistent."""
        meta, arrays = load_model(path, protocol=protocol)
        if meta.get("protocol") != protocol:
            raise ModelFileError(f"{path} is not a {protocol} party model")
        try:
            columns = tuple(str(c) for c in meta["columns"])
            weights, mean, scale = (np.asarray(arrays[k], dtype=np.float64) for k in ("weights", "mean", "scale"))
            medians = np.asarray(arrays["medians"], dtype=np.float64) if "medians" in arrays else None
            scaling = LocalScaling(mean, scale, medians, bool(meta["intercept"]))
            ok = (all(a.ndim == 1 for a in (weights, mean, scale)) and len(scale) == len(mean)
                  and (medians is None or medians.shape == mean.shape) and np.isfinite(weights).all()
                  and np.isfinite(mean).all() and (scale > 0).all() and np.isfinite(scale).all()
                  and isinstance(meta.get("settings", {}), dict))
            if not ok:
                raise ValueError
            return cls(protocol, str(meta["name"]), str(meta["role"]), columns, weights, scaling,
                       dict(meta.get("settings", {})))
        except (KeyError, TypeError, ValueError, InputDataError):
            raise ModelFileError(f"{path} is not a consistent {protocol} party model (its weights, columns or "
                                 "preprocessing are missing or do not fit together)") from None


def save_parties(protocol: str, parties: Sequence[LinearParty], model_dir: str | os.PathLike[str], *,
                 overwrite: bool = False) -> None:
    """One ``<party>.npz`` per party and the manifest, all-or-nothing (:func:`~vflcrypto.data.files.write_model_dir`;
    a directory holding another run's model is refused unless ``overwrite``)."""
    write_model_dir(model_dir, protocol, {f"{m.name}.npz": m.save for m in parties}, overwrite=overwrite,
                    what="--model-dir")


def load_parties(protocol: str, model_dir: str | os.PathLike[str], names: Sequence[str],
                 flag: str) -> list[LinearParty]:
    """The party files ``<name>.npz`` of a model directory, in ``names``' order, after the manifest and every
    digest are checked and the model's parties are exactly ``names`` (``flag``: the option that gives one file
    per party, for the error)."""
    d = Path(model_dir)
    check_parties(d, verify_model_dir(d, protocol), names, flag)
    models = [LinearParty.load(d / f"{n}.npz", protocol) for n in names]
    for n, m in zip(names, models, strict=True):
        if m.name != n:
            raise ModelFileError(f"{d / f'{n}.npz'} holds the model of {m.name}, not of {n}")
    return models


def read_query(paths: Sequence[str], id_column: str, models: Sequence[LinearParty]) -> list[PartyTable]:
    """Each party's query file with its model's columns (others ignored, a missing one named); where the model
    has no imputation (its training refused missing values) a missing value is refused here, naming its file,
    line and column."""
    tables = [read_party_csv(p, id_column, features=list(m.columns)) for p, m in zip(paths, models, strict=True)]
    for t, m in zip(tables, models, strict=True):
        if m.scaling.medians is None:
            refuse_missing_values(t)
    return tables


# --------------------------------------------------------------------------- the two-party score exchange


@dataclass
class _ScoreState:
    rows: int = 0


class ScoreActiveRole(Role[_ScoreState]):
    """The label holder at a two-party prediction: the plan to the feature party, then its score per row.

    Subclasses set :attr:`role` and the protocol's declared :attr:`Plan` (``rows``,
    ``ids_digest``) and :attr:`Score` (``values``). Result: the feature party's scores.
    """

    State = _ScoreState
    Plan: ClassVar[type]
    Score: ClassVar[type]
    protocol: ClassVar[str]

    def __init__(self, ids: Sequence[str], *, peer: str, name: str) -> None:
        super().__init__(name)
        self.ids, self.peer = list(ids), peer

    def start(self) -> Next:
        """Step 0: the plan (the row count and a digest of the query IDs) to the feature party."""
        self.state.rows = len(self.ids)
        plan = self.Plan(len(self.ids), ids_digest(self.ids, self.protocol))
        return then([send(self.peer, plan)], self.peer, self.Score, "on_score")

    def on_score(self, msg: Any) -> Next:
        """Step 1 received: the feature party's score of every query row (the result)."""
        values = np.asarray(msg.values, dtype=np.float64)
        if values.shape != (self.state.rows,) or not np.isfinite(values).all():
            raise ProtocolError(f"{self.peer} sent {values.shape} scores for {self.state.rows} rows")
        return done(values)


class ScorePassiveRole(Role[_ScoreState]):
    """The feature party at a two-party prediction: checks the plan against its own rows, answers its scores.

    ``scores``: its score per query row (computed before any message, from its own model).
    """

    State = _ScoreState
    Plan: ClassVar[type]
    Score: ClassVar[type]
    protocol: ClassVar[str]

    def __init__(self, scores: np.ndarray, ids: Sequence[str], *, peer: str, name: str) -> None:
        super().__init__(name)
        self.scores, self.ids, self.peer = np.asarray(scores, dtype=np.float64), list(ids), peer

    def start(self) -> Next:
        return then([], self.peer, self.Plan, "on_plan")

    def on_plan(self, msg: Any) -> Next:
        """Step 1: check the plan against this party's own query rows; its score of every row to the label holder."""
        if msg.rows != len(self.ids) or msg.ids_digest != ids_digest(self.ids, self.protocol):
            raise InputDataError(f"{self.name}: its {len(self.ids)} query rows are not aligned with {self.peer}'s "
                                 f"{msg.rows}")
        self.hold("scores", self.scores)  # its own scores (audit ground truth)
        return done(len(self.ids), [send(self.peer, self.Score(self.scores))])


ACTIVE, PASSIVE, PASSIVE_NAME = "active", "passive", "passive-0"  # the two-party protocols' roles (poisson, sshelr)


def pair_models(protocol: str, weights: tuple[np.ndarray, np.ndarray], scalings: tuple[LocalScaling, LocalScaling],
                columns: tuple[Sequence[str], Sequence[str]], *, label: str) -> list[LinearParty]:
    """Both data parties' models after a two-party training: the active party's (its columns, then the intercept;
    it keeps the label's name) and the passive party's."""
    return [LinearParty(protocol, ACTIVE, ACTIVE, tuple(columns[0]), weights[0], scalings[0], {"label": label}),
            LinearParty(protocol, PASSIVE_NAME, PASSIVE, tuple(columns[1]), weights[1], scalings[1])]


#: a party's prediction over its channels: (channels, its model, its query rows, peer=the other party's name)
PartyPredict = Callable[..., Any]


def predict_pair(what: str, run_active: PartyPredict, run_passive: PartyPredict, models: Sequence[LinearParty],
                 tables: Sequence[PartyTable], *, timeout: float = DEFAULT_TIMEOUT,
                 tap: AuditTap | None = None) -> tuple[np.ndarray, Transcript]:
    """Both data parties of a two-party prediction in this process (``models`` and ``tables`` the active party's,
    then the passive party's); returns the active party's result and the transcript. ``what`` names the protocol
    in the refusal of another number of parties."""
    if len(models) != 2 or len(tables) != 2:
        raise InputDataError(f"{what} predicts with the active party and one passive party")
    net = LocalNetwork([Endpoint(ACTIVE, ACTIVE), Endpoint(PASSIVE_NAME, PASSIVE)], timeout=timeout,
                       transcript=Transcript(tap))

    def side(run: PartyPredict, me: str, peer: str, k: int) -> Callable[[], Any]:
        channels: Mapping[str, Channel] = net.channels(me)
        return lambda: run(channels, models[k], tables[k], peer=peer)

    tasks = {ACTIVE: side(run_active, ACTIVE, PASSIVE_NAME, 0),
             PASSIVE_NAME: side(run_passive, PASSIVE_NAME, ACTIVE, 1)}
    return run_parties(tasks, network=net)[ACTIVE], net.transcript
