"""Prediction with a saved SSHE-LR model on new rows: the passive party's score to the label holder.

At the end of training each party holds its own weights in the clear (the reveal of step 7)
and its own standardization of its columns (the training rows' mean and standard deviation,
then the fixed-point grid of :data:`~.math.FEATURE_FRAC` bits; the active party's intercept
last): a :class:`~vflcrypto.protocols._linear.LinearParty`. On new rows:

0. active → passive ``sshelr.predict_plan``: the row count and a digest of the query IDs
   (misaligned rows fail before any score is sent);
1. passive → active ``sshelr.predict_score``: its score ``u_P = Z_P w_P`` per row;
2. the active party's logit ``z = u_A + u_P``: ``prediction`` 1 where ``z > 0`` (as training's
   accuracy counts it), ``probability`` the logistic ``σ(z) = 1/(1 + e^−z)`` (the model was
   fitted with the Taylor sigmoid, so it is not calibrated: :mod:`.math`).

What the label holder learns: the logit ``z`` of every query row, and with its own ``u_A`` the
passive party's score ``u_P = z − u_A`` per row: the score message sends exactly that (FATE's
SSHE-LR predicts so as well once the weights are revealed to their owners: the host's ``w·x``
to the guest). The passive party learns the row count and the digest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from vflcrypto.data.tables import PartyTable
from vflcrypto.ml.preprocess import LocalScaling
from vflcrypto.runtime.channel import (
    DEFAULT_TIMEOUT,
    AuditTap,
    Channel,
    Transcript,
)
from vflcrypto.runtime.steps import drive

from .._linear import LinearParty, ScoreActiveRole, ScorePassiveRole, pair_models, predict_pair
from .math import quantize
from .messages import ACTIVE, PASSIVE, PredictPlan, PredictScore

__all__ = ["PASSIVE_NAME", "PredictActiveRole", "PredictPassiveRole", "party_models", "predict_local",
           "run_predict_active", "run_predict_passive", "scores"]

PASSIVE_NAME = "passive-0"


class PredictActiveRole(ScoreActiveRole):
    """The active party at prediction: the plan, then the passive party's scores (its result)."""

    role = ACTIVE
    Plan, Score, protocol = PredictPlan, PredictScore, "sshelr"


class PredictPassiveRole(ScorePassiveRole):
    """The passive party at prediction: checks the plan against its rows and answers its scores."""

    role = PASSIVE
    Plan, Score, protocol = PredictPlan, PredictScore, "sshelr"


def party_models(weights: tuple[np.ndarray, np.ndarray], scalings: tuple[LocalScaling, LocalScaling],
                 columns: tuple[Sequence[str], Sequence[str]], *, label: str) -> list[LinearParty]:
    """Both data parties' models after training (:func:`~vflcrypto.protocols._linear.pair_models`)."""
    return pair_models("sshelr", weights, scalings, columns, label=label)


def scores(model: LinearParty, X: np.ndarray) -> np.ndarray:
    """A party's score on new rows: its standardized columns on the protocol's fixed-point grid, times its weights."""
    return quantize(model.features(X), f"{model.name}'s query rows") @ model.weights


def run_predict_active(channels: Mapping[str, Channel], model: LinearParty, table: PartyTable, *,
                       peer: str) -> np.ndarray:
    """The active party's prediction over its channel to the passive party ``peer``: the logits z."""
    u_a = scores(model, table.X)  # its own score, before any message
    received: np.ndarray = drive(PredictActiveRole(table.ids, peer=peer, name=model.name), channels)
    return received + u_a


def run_predict_passive(channels: Mapping[str, Channel], model: LinearParty, table: PartyTable, *, peer: str) -> None:
    """The passive party's prediction over its channel to the active party ``peer``: its scores of the rows."""
    drive(PredictPassiveRole(scores(model, table.X), table.ids, peer=peer, name=model.name), channels)


def predict_local(models: Sequence[LinearParty], tables: Sequence[PartyTable], *,
                  timeout: float = DEFAULT_TIMEOUT, tap: AuditTap | None = None) -> tuple[np.ndarray, Transcript]:
    """Both data parties in this process: ``models`` and ``tables`` (aligned query rows) the active party's, then
    the passive party's. Returns the active party's logits ``z`` and the transcript."""
    return predict_pair("SSHE logistic regression", run_predict_active, run_predict_passive, models, tables,
                        timeout=timeout, tap=tap)
