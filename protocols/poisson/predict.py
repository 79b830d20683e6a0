"""Prediction with a saved Poisson model on new rows: the passive party's score to the label holder.

Each data party keeps its own weights and its own standardization (the training rows' mean
and standard deviation; the active party's intercept last): a
:class:`~vflcrypto.protocols._linear.LinearParty`. On new rows:

0. active → passive ``poisson.predict_plan``: the row count and a digest of the query IDs
   (misaligned rows fail before any score is sent);
1. passive → active ``poisson.predict_score``: its score ``u_A = Z_A w_A`` per row;
2. the active party predicts the expected count ``μ = exp(u_A + u_B)`` with its own ``u_B``.

What the label holder learns: ``μ`` of every query row, and with its own ``u_B`` the passive
party's score ``u_A = log μ − u_B`` per row: the score message sends exactly that, so the
encrypted path of training (``[[exp(u_A)]]`` under a coordinator's key) would hide nothing more
from it; the coordinator takes no part (FATE's Hetero Poisson predicts so as well: the host's
``w·x`` to the guest). The passive party learns the row count and the digest.
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
from .messages import ACTIVE, PASSIVE, PredictPlan, PredictScore

__all__ = ["PASSIVE_NAME", "PredictActiveRole", "PredictPassiveRole", "party_models", "predict_local",
           "run_predict_active", "run_predict_passive"]

PASSIVE_NAME = "passive-0"


class PredictActiveRole(ScoreActiveRole):
    """The active party at prediction: the plan, then the passive party's scores (its result)."""

    role = ACTIVE
    Plan, Score, protocol = PredictPlan, PredictScore, "poisson"


class PredictPassiveRole(ScorePassiveRole):
    """The passive party at prediction: checks the plan against its rows and answers its scores."""

    role = PASSIVE
    Plan, Score, protocol = PredictPlan, PredictScore, "poisson"


def party_models(weights: tuple[np.ndarray, np.ndarray], scalings: tuple[LocalScaling, LocalScaling],
                 columns: tuple[Sequence[str], Sequence[str]], *, label: str) -> list[LinearParty]:
    """Both data parties' models after training (:func:`~vflcrypto.protocols._linear.pair_models`)."""
    return pair_models("poisson", weights, scalings, columns, label=label)


def run_predict_active(channels: Mapping[str, Channel], model: LinearParty, table: PartyTable, *,
                       peer: str) -> np.ndarray:
    """The active party's prediction over its channel to the passive party ``peer``: the expected counts μ."""
    u_b = model.scores(table.X)  # its own score, before any message
    received: np.ndarray = drive(PredictActiveRole(table.ids, peer=peer, name=model.name), channels)
    return np.exp(received + u_b)


def run_predict_passive(channels: Mapping[str, Channel], model: LinearParty, table: PartyTable, *, peer: str) -> None:
    """The passive party's prediction over its channel to the active party ``peer``: its scores of the rows."""
    drive(PredictPassiveRole(model.scores(table.X), table.ids, peer=peer, name=model.name), channels)


def predict_local(models: Sequence[LinearParty], tables: Sequence[PartyTable], *,
                  timeout: float = DEFAULT_TIMEOUT, tap: AuditTap | None = None) -> tuple[np.ndarray, Transcript]:
    """Both data parties in this process: ``models`` and ``tables`` (aligned query rows) the active party's, then
    the passive party's. Returns the active party's expected counts ``μ`` and the transcript."""
    return predict_pair("Poisson regression", run_predict_active, run_predict_passive, models, tables, timeout=timeout,
                        tap=tap)
