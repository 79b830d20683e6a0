"""Poisson regression (log link) in the clear: the reference the secure protocol must equal.

With ``η = u_A + u_B`` (``u_k = Z_k w_k``, each party's standardized columns; the active
party's block ends with an intercept column of ones) and ``μ = exp(η)``:

* mean negative log-likelihood (without the constant ``Σ log y!``):
  ``L = (1/m) Σ (μ_i − y_i η_i)``;
* gradient of party k: ``g_k = (1/m) Z_kᵀ (μ − y)``;
* heavy-ball momentum, each party on its own weights: ``v ← β v + g``, ``w ← w − η_lr v``;
* deviance ``D = (2/m) Σ (y log(y/μ) − (y − μ))`` = ``2 (L + (1/m) Σ (y log y − y))``.

The factorisation ``exp(u_A + u_B) = exp(u_A) · exp(u_B)`` is what lets the secure
protocol form ``[[μ]]`` from the passive party's ``[[exp(u_A)]]`` with one plaintext
multiplication by ``exp(u_B)``: additively homomorphic encryption cannot multiply two
ciphertexts, so the protocol has one passive party.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.errors import InputDataError, TrainingDivergedError
from vflcrypto.ml.preprocess import standardize_columns
from vflcrypto.spec import option

__all__ = ["ETA_BOUND", "FRAC_BITS", "PoissonParams", "check_eta", "deviance", "plaintext_fit", "prepare_active",
           "prepare_passive"]

FRAC_BITS = 32
ETA_BOUND = 20.0  # |u_k| above this: exp() would leave the fixed-point range planned for it


@dataclass
class PoissonParams:
    """Training parameters (the one source of the ``train poisson`` flags)."""

    epochs: int = option(50, "full-batch epochs")
    learning_rate: float = option(0.3, "step size", flag="--lr")
    momentum: float = option(0.9, "heavy-ball momentum of each party's own weights (0 = plain gradient descent)")

    def validate(self) -> None:
        if self.epochs < 1 or not self.learning_rate > 0 or not 0 <= self.momentum < 1:
            raise InputDataError("epochs >= 1, learning rate > 0 and momentum in [0, 1) are required")


def prepare_passive(X: np.ndarray) -> np.ndarray:
    """The passive party's standardized columns."""
    Z = standardize_columns(X, "passive party")
    if Z.shape[1] == 0:
        raise InputDataError("the passive party needs at least one column")
    return Z


def prepare_active(X: np.ndarray | None, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The active party's standardized columns plus an intercept column, and its counts."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or (y < 0).any() or (y != np.round(y)).any():
        raise InputDataError("Poisson regression needs non-negative integer counts as labels")
    X = np.zeros((len(y), 0)) if X is None else X
    Z = standardize_columns(X, "active party")
    if len(Z) != len(y):
        raise InputDataError(f"{len(Z)} feature rows for {len(y)} labels")
    return np.hstack([Z, np.ones((len(y), 1))]), y


def check_eta(u: np.ndarray, party: str, epoch: int) -> None:
    if not np.isfinite(u).all() or np.abs(u).max(initial=0.0) > ETA_BOUND:
        raise TrainingDivergedError(f"{party}: |linear predictor| above {ETA_BOUND} at epoch {epoch} "
                                    "(lower the learning rate)")


def deviance(y: np.ndarray, mu: np.ndarray) -> float:
    """Mean Poisson deviance (scikit-learn's ``mean_poisson_deviance``)."""
    y, mu = np.asarray(y, float), np.asarray(mu, float)
    term = np.where(y > 0, y * np.log(np.where(y > 0, y, 1.0) / mu), 0.0)
    return float(2 * np.mean(term - (y - mu)))


def plaintext_fit(Za: np.ndarray, y: np.ndarray, Zp: np.ndarray, params: PoissonParams
                  ) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """``(w_active, w_passive, losses)`` of the same iterations in the clear (prepared blocks)."""
    wa, wp = np.zeros(Za.shape[1]), np.zeros(Zp.shape[1])
    va, vp = np.zeros_like(wa), np.zeros_like(wp)
    losses, m = [], len(y)
    for _ in range(params.epochs):
        eta = Za @ wa + Zp @ wp
        mu = np.exp(eta)
        losses.append(float(np.sum(mu - y * eta) / m))
        d = mu - y
        va = params.momentum * va + Za.T @ d / m
        vp = params.momentum * vp + Zp.T @ d / m
        wa, wp = wa - params.learning_rate * va, wp - params.learning_rate * vp
    return wa, wp, losses
