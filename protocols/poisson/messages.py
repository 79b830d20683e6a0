"""The declared messages of secure Poisson regression (``poisson.*``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.he.paillier import PaillierPublicKey, PaillierVector
from vflcrypto.runtime.declarations import PERFECT, Protection, declare
from vflcrypto.runtime.wire import IntVector

__all__ = [
    "ACTIVE",
    "COORD",
    "OU_REFUSAL",
    "PASSIVE",
    "EncryptedExp",
    "EncryptedLoss",
    "EncryptedResidual",
    "GradientReturn",
    "MaskedGradient",
    "Plan",
    "PredictPlan",
    "PredictScore",
    "PublicKey",
]

#: why poisson refuses Okamoto-Uchiyama keys (vflcrypto.he.ou.refuse_decryption_oracle)
OU_REFUSAL = "its coordinator decrypts the masked gradients the data parties form and returns them"

ACTIVE, PASSIVE, COORD = "active", "passive", "coordinator"


@declare("poisson.public_key", sender=COORD, receiver=(ACTIVE, PASSIVE), protection=Protection.PUBLIC,
         reveals="the coordinator's Paillier public key")
@dataclass(frozen=True)
class PublicKey:
    public_key: PaillierPublicKey


@declare("poisson.plan", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
         reveals="the row count and the training schedule (epochs, learning rate, momentum)")
@dataclass(frozen=True)
class Plan:
    rows: int
    epochs: int
    learning_rate: float
    momentum: float


@declare("poisson.exp_u", sender=PASSIVE, receiver=ACTIVE, protection=Protection.CIPHERTEXT, key_owner=COORD,
         reveals="the row count only: [[exp(u_A)]] and [[u_A]] per row under the coordinator's key, which the "
                 "active party does not hold")
@dataclass(frozen=True)
class EncryptedExp:
    exp_u: PaillierVector
    u: PaillierVector


@declare("poisson.residual", sender=ACTIVE, receiver=PASSIVE, protection=Protection.CIPHERTEXT, key_owner=COORD,
         reveals="the row count only: [[μ − y]] = exp(u_B)·[[exp(u_A)]] − y under the coordinator's key")
@dataclass(frozen=True)
class EncryptedResidual:
    residual: PaillierVector


@declare("poisson.loss", sender=ACTIVE, receiver=COORD, protection=Protection.CIPHERTEXT, key_owner=COORD,
         reveals="[[Σ μ − y·η]]: the coordinator decrypts the training loss (mean negative log-likelihood) of "
                 "every epoch, which it uses to report convergence (declared, as linreg's loss)")
@dataclass(frozen=True)
class EncryptedLoss:
    loss: PaillierVector


@declare("poisson.masked_gradient", sender=(ACTIVE, PASSIVE), receiver=COORD,
         protection=(Protection.CIPHERTEXT, Protection.MASKED), key_owner=COORD, hiding_bits=PERFECT,
         reveals="the sender's number of columns; after decryption, values uniform mod n (Z_kᵀ(μ − y) plus a "
                 "fresh uniform mask)")
@dataclass(frozen=True)
class MaskedGradient:
    values: PaillierVector


@declare("poisson.gradient_return", sender=COORD, receiver=(ACTIVE, PASSIVE), protection=Protection.PLAINTEXT,
         reveals="the receiver's own gradient once it removes its mask; gradients over many epochs leak "
                 "information about the residuals (as in every vertical linear model)")
@dataclass(frozen=True)
class GradientReturn:
    values: IntVector


# --------------------------------------------------------------------------- prediction with a saved model


@declare("poisson.predict_plan", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
         reveals="the number of query rows and a digest of their IDs (an equality check of the alignment only)")
@dataclass(frozen=True)
class PredictPlan:
    rows: int
    ids_digest: bytes


@declare("poisson.predict_score", sender=PASSIVE, receiver=ACTIVE, protection=Protection.PLAINTEXT,
         reveals="the passive party's score u_A = Z_A w_A of every query row, in the clear: exactly what the "
                 "prediction exp(u_A + u_B) reveals to the active party, which knows its own u_B (so encrypting "
                 "u_A under a coordinator's key would hide nothing more from it); nothing about the passive "
                 "party's columns or weights beyond these scores")
@dataclass(frozen=True)
class PredictScore:
    values: np.ndarray
