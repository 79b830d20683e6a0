"""scikit-learn estimators over simulated VFL: every party in-process, through the real protocol.

``fit(X, y)`` splits the columns of ``X`` among the parties (``party_columns``: one list of
column indices or names per party; by default the columns are cut into two contiguous
halves), runs every party's role of the protocol in this process (threads over in-memory
channels, encrypted unless ``plaintext=True``) and keeps each party's own model; ``predict``
/ ``predict_proba`` run the joint prediction. ``transcript_`` (the entries of every message
that crossed a party boundary during ``fit``) and ``audit_`` (what each role received and
what it reveals) expose the exchange. ``X`` may be a numpy array or a pandas DataFrame.
Column *names* in ``party_columns`` need a DataFrame at ``fit``: in a Pipeline, call
``set_output(transform="pandas")`` on it so the steps before the estimator keep them
(otherwise ``fit`` says so in one line, :data:`NO_COLUMN_NAMES`).

* :class:`SecureBoostClassifier`, :class:`SecureBoostRegressor`: SecureBoost; the first
  group of columns (and the labels) belong to the active party, the others to passive
  parties. Binary classification only (labels mapped to 0/1 in ``classes_`` order).
* :class:`SecureLinearRegression`: secure linear regression with a coordinator (Paillier
  or CKKS); the first group is the active party's.
* :class:`SecureLogisticRegression`: Flower's vertical logistic regression (plain or
  secure); the label holder has no columns, every group is a feature party; the first
  feature party also holds the intercept. Prediction sums each party's partial logit
  x_k·w_k computed from its own weights (the protocol's own evaluation step, in-process).

* :class:`SplitLearningClassifier`: split learning (the representation-VFL baseline;
  the ``deep`` extra, torch): a server holds the labels and the head, every group is a
  party with its own extractor; representations and gradients cross in the clear (the
  audit measures what they carry). Every training row is aligned and labelled, as
  ``fit(X, y)`` implies; multi-class.

Small keys (``key_bits < 2048``) need ``allow_insecure=True``, as everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

__all__ = ["SecureBoostClassifier", "SecureBoostRegressor", "SecureLinearRegression", "SecureLogisticRegression",
           "SplitLearningClassifier"]


# Names need a DataFrame: inside a Pipeline, a transformer hands on a plain array unless asked otherwise.
NO_COLUMN_NAMES = ("party_columns names columns but X has none: a pipeline step returned an array; "
                   "use set_output(transform='pandas')")


def _groups(est: Any, n_features: int, min_parties: int = 2) -> list[np.ndarray]:
    """Column indices per party: ``party_columns`` (indices or names), or two contiguous halves.

    Names are looked up in ``feature_names_in_`` (set by ``validate_data`` from a DataFrame's
    columns); without them the names cannot be resolved, and the error says how to keep them.
    """
    spec = est.party_columns
    if spec is None:
        if n_features < min_parties:
            raise ValueError(f"X has {n_features} feature(s): vertical FL needs at least one column per party "
                             f"({min_parties} parties); 1 feature(s) cannot be split")
        cut = np.array_split(np.arange(n_features), min_parties)
        return [c.astype(np.int64) for c in cut]
    names = [str(c) for c in getattr(est, "feature_names_in_", [])]
    named = [c for g in spec for c in g if isinstance(c, str)]
    if named and not names:
        raise ValueError(NO_COLUMN_NAMES)
    if missing := [c for c in named if c not in names]:
        raise ValueError(f"party_columns names {missing} but X's columns are {names}")
    groups = []
    for g in spec:
        idx = [names.index(c) if isinstance(c, str) else int(c) for c in g]
        if not idx or min(idx) < 0 or max(idx) >= n_features:
            raise ValueError(f"party_columns {spec!r}: every party needs columns among the {n_features} features")
        groups.append(np.asarray(idx, np.int64))
    flat = np.concatenate(groups)
    if len(set(flat.tolist())) != len(flat) or len(groups) < min_parties:
        raise ValueError(f"party_columns must give {min_parties}+ parties disjoint columns")
    return groups


class _Binary(ClassifierMixin):
    """A binary classifier: ``classes_`` and the 0/1 labels the protocol trains on; the tag that says binary."""

    def _labels01(self, y: np.ndarray) -> np.ndarray:
        """Other targets get scikit-learn's standard error."""
        check_classification_targets(y)
        kind = type_of_target(y, input_name="y", raise_unknown=True)
        if kind != "binary":
            raise ValueError(f"Only binary classification is supported. The type of the target is {kind}.")
        self.classes_, y01 = np.unique(y, return_inverse=True)
        return np.asarray(y01, np.float64)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags


def _record(est: Any, transcript: Any) -> None:
    from .audit.ledger import audit

    est.transcript_ = tuple(transcript.entries())
    est.audit_ = audit(transcript)


# --------------------------------------------------------------------------- SecureBoost


class _SecureBoost(BaseEstimator):
    _objective = "binary"

    def __init__(self, party_columns: Sequence[Sequence[int | str]] | None = None, *, n_trees: int = 10,
                 max_depth: int = 3, learning_rate: float = 0.3, max_bin: int = 32, reg_lambda: float = 1.0,
                 gamma: float = 0.0, min_child_weight: float = 1.0, plaintext: bool = False, key_bits: int = 2048,
                 allow_insecure: bool = False) -> None:
        self.party_columns = party_columns
        self.n_trees = n_trees
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.max_bin = max_bin
        self.reg_lambda = reg_lambda
        self.gamma = gamma
        self.min_child_weight = min_child_weight
        self.plaintext = plaintext
        self.key_bits = key_bits
        self.allow_insecure = allow_insecure

    def _fit(self, X: np.ndarray, y: np.ndarray) -> None:
        from vflcrypto.protocols import secureboost as sb

        self.groups_ = _groups(self, X.shape[1])
        params = sb.BoostParams(objective=self._objective, n_trees=self.n_trees, max_depth=self.max_depth,
                                learning_rate=self.learning_rate, max_bin=self.max_bin, reg_lambda=self.reg_lambda,
                                gamma=self.gamma, min_child_weight=self.min_child_weight)
        run = sb.run_local(X[:, self.groups_[0]], y, [X[:, g] for g in self.groups_[1:]], params=params,
                           plaintext=self.plaintext, key_bits=self.key_bits, allow_insecure=self.allow_insecure)
        self.active_model_ = run.active.model
        self.passive_models_ = [run.passive[k].model for k in sorted(run.passive)]
        _record(self, run.transcript)

    def _joint(self, X: Any) -> np.ndarray:
        from vflcrypto.protocols import secureboost as sb

        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return np.asarray(sb.predict_local(self.active_model_, X[:, self.groups_[0]],
                                           [(m, X[:, g]) for m, g in zip(self.passive_models_, self.groups_[1:],
                                                                          strict=True)]), np.float64)


class SecureBoostClassifier(_Binary, _SecureBoost):
    """SecureBoost (Cheng et al. 2019), binary: the active party holds the first column group and the labels."""

    def fit(self, X: Any, y: Any) -> SecureBoostClassifier:
        X, y = validate_data(self, X, y)
        self._fit(np.asarray(X, np.float64), self._labels01(y))
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        p = self._joint(X)
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        positive = self.predict_proba(X)[:, 1] >= 0.5  # first: a NotFittedError before any fitted attribute
        return np.asarray(self.classes_[positive.astype(np.int64)])


class SecureBoostRegressor(RegressorMixin, _SecureBoost):
    """SecureBoost with squared error: the active party holds the first column group and the target."""

    _objective = "regression"

    def fit(self, X: Any, y: Any) -> SecureBoostRegressor:
        X, y = validate_data(self, X, y, y_numeric=True)
        self._fit(np.asarray(X, np.float64), np.asarray(y, np.float64))
        return self

    def predict(self, X: Any) -> np.ndarray:
        return self._joint(X)


# --------------------------------------------------------------------------- linear models


class SecureLinearRegression(RegressorMixin, BaseEstimator):
    """Secure linear regression with a coordinator (Yang et al., ch. 5): the active party holds group 0 and y."""

    def __init__(self, party_columns: Sequence[Sequence[int | str]] | None = None, *, epochs: int = 100,
                 lr: float = 0.1, l2: float = 0.0, momentum: float = 0.9, batch_size: int | None = None,
                 tol: float | None = 1e-6, scheme: str = "paillier", key_bits: int = 2048,
                 allow_insecure: bool = False) -> None:
        self.party_columns = party_columns
        self.epochs = epochs
        self.lr = lr
        self.l2 = l2
        self.momentum = momentum
        self.batch_size = batch_size
        self.tol = tol
        self.scheme = scheme
        self.key_bits = key_bits
        self.allow_insecure = allow_insecure

    def _tables(self, X: np.ndarray, y: np.ndarray | None) -> list[Any]:
        from .data.tables import PartyTable

        ids = tuple(f"r{i}" for i in range(len(X)))
        tables = []
        for k, g in enumerate(self.groups_):
            cols = tuple(f"x{j}" for j in g.tolist())
            tables.append(PartyTable(ids, cols, X[:, g], y if k == 0 else None, "y" if k == 0 else None))
        return tables

    def fit(self, X: Any, y: Any) -> SecureLinearRegression:
        from vflcrypto.protocols import linreg

        X, y = validate_data(self, X, y, y_numeric=True)
        self.groups_ = _groups(self, X.shape[1])
        cfg = linreg.LinRegConfig(epochs=self.epochs, lr=self.lr, l2=self.l2, momentum=self.momentum,
                                  batch_size=self.batch_size, tol=self.tol, scheme=self.scheme, key_bits=self.key_bits)
        tables = self._tables(np.asarray(X, np.float64), np.asarray(y, np.float64))
        run = linreg.run_local(tables[0], tables[1:], config=cfg, allow_insecure=self.allow_insecure)
        self.models_ = run.models
        _record(self, run.transcript)
        return self

    def predict(self, X: Any) -> np.ndarray:
        from vflcrypto.protocols import linreg

        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        bits = self.key_bits if self.scheme == "paillier" else 2048
        pred, _ = linreg.predict_local(self.models_, self._tables(np.asarray(X, np.float64), None), key_bits=bits,
                                       allow_insecure=self.allow_insecure)
        return np.asarray(pred, np.float64)


class SecureLogisticRegression(_Binary, BaseEstimator):
    """Flower's vertical logistic regression: a label holder without columns, one feature party per group."""

    def __init__(self, party_columns: Sequence[Sequence[int | str]] | None = None, *, secure: bool = True,
                 steps: int = 20, learning_rate: float = 0.5, key_bits: int = 2048,
                 allow_insecure: bool = False) -> None:
        self.party_columns = party_columns
        self.secure = secure
        self.steps = steps
        self.learning_rate = learning_rate
        self.key_bits = key_bits
        self.allow_insecure = allow_insecure

    def _blocks(self, X: np.ndarray) -> list[np.ndarray]:
        blocks = [X[:, g] for g in self.groups_]
        blocks[0] = np.column_stack([np.ones(len(X)), blocks[0]])  # the intercept, at the first feature party
        return blocks

    def fit(self, X: Any, y: Any) -> SecureLogisticRegression:
        from vflcrypto.protocols import logreg

        X, y = validate_data(self, X, y)
        y01 = self._labels01(y)
        self.groups_ = _groups(self, X.shape[1])
        run = logreg.run_local(self._blocks(np.asarray(X, np.float64)), y01, secure=self.secure,
                               steps=self.steps, learning_rate=self.learning_rate, key_bits=self.key_bits,
                               allow_insecure=self.allow_insecure)
        self.weights_ = [np.asarray(run.passives[k].weights, np.float64) for k in sorted(run.passives)]
        self.loss_history_ = list(run.active.loss_history)
        _record(self, run.transcript)
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        parts = [b @ w for b, w in zip(self._blocks(np.asarray(X, np.float64)), self.weights_, strict=True)]
        return np.asarray(np.sum(parts, axis=0), np.float64)

    def predict_proba(self, X: Any) -> np.ndarray:
        p = 1.0 / (1.0 + np.exp(-self.decision_function(X)))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        positive = self.decision_function(X) >= 0
        return np.asarray(self.classes_[positive.astype(np.int64)])


# --------------------------------------------------------------------------- representation VFL


class SplitLearningClassifier(ClassifierMixin, BaseEstimator):
    """Split learning: one extractor per column group, the server's head on their concatenated representations."""

    def __init__(self, party_columns: Sequence[Sequence[int | str]] | None = None, *, dim: int = 16,
                 hidden: int = 64, epochs: int = 50, lr: float = 3e-3, head_lr: float = 1e-2, batch_size: int = 64,
                 seed: int = 0) -> None:
        self.party_columns = party_columns
        self.dim = dim
        self.hidden = hidden
        self.epochs = epochs
        self.lr = lr
        self.head_lr = head_lr
        self.batch_size = batch_size
        self.seed = seed

    def _config(self) -> Any:
        from vflcrypto.protocols import split

        return split.SplitConfig(dim=self.dim, hidden=self.hidden, epochs=self.epochs, lr=self.lr,
                                 head_lr=self.head_lr, batch_size=self.batch_size, seed=self.seed)

    def fit(self, X: Any, y: Any) -> SplitLearningClassifier:
        from vflcrypto.protocols import split
        from vflcrypto.protocols._repvfl import PartyData, ServerData

        X, y = validate_data(self, X, y)
        check_classification_targets(y)
        self.classes_, yk = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError("SplitLearningClassifier needs at least 2 classes, got 1 class")
        if len(X) < 2:
            raise ValueError(f"n_samples = {len(X)}: split learning needs at least 2 aligned rows (1 sample given)")
        self.groups_ = _groups(self, X.shape[1])
        X = np.asarray(X, np.float32)
        parties = [PartyData(X[:, g]) for g in self.groups_]
        run = split.run_local(ServerData(yk.astype(np.int64), len(self.classes_)), parties, config=self._config())
        self.head_ = list(run.server.head)
        self.extractors_ = [list(p.extractor) for p in run.parties]
        _record(self, run.transcript)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        from vflcrypto.ml import nn as vnn

        check_is_fitted(self)
        X = np.asarray(validate_data(self, X, reset=False), np.float32)
        reps = []
        for g, arrays in zip(self.groups_, self.extractors_, strict=True):
            f = vnn.mlp_extractor(X[:, g] if len(X) else np.zeros((1, len(g)), np.float32), self.dim,
                                  hidden=self.hidden)
            vnn.load_arrays(f, arrays)  # the party's own trained extractor (its scaler included)
            reps.append(vnn.forward(f, X[:, g]))
        head = vnn.head(self.dim * len(self.groups_), len(self.classes_))
        vnn.load_arrays(head, self.head_)
        return np.asarray(vnn.predict_proba(head, np.concatenate(reps, axis=1)), np.float64)

    def predict(self, X: Any) -> np.ndarray:
        best = self.predict_proba(X).argmax(1)
        return np.asarray(self.classes_[best])
