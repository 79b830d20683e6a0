"""The declared messages of SSHE logistic regression (``sshelr.*``).

Each party has its own Paillier key pair. A ciphertext always travels under the key of
the party that encrypted its own share (the receiver cannot read it); a masked product
travels back under the *receiver's* key, which the receiver decrypts to get its share:
there the statistical mask is the protection. Masked products are folded several to a
ciphertext before they travel (each at a public width, so the receiver decrypts about six
times fewer ciphertexts at 2048 bits) and re-randomized after folding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.he.paillier import PaillierPublicKey, PaillierVector
from vflcrypto.runtime.declarations import PERFECT, Protection, declare
from vflcrypto.runtime.wire import IntVector
from vflcrypto.sharing.masking import STAT_SECURITY_BITS

__all__ = [
    "ACTIVE",
    "OU_REFUSAL",
    "PASSIVE",
    "ActiveCiphertexts",
    "MaskedForActive",
    "MaskedForPassive",
    "PassiveCiphertexts",
    "Plan",
    "PredictPlan",
    "PredictScore",
    "PublicKey",
    "RevealShare",
    "WeightShare",
]

#: why sshelr refuses Okamoto-Uchiyama keys (vflcrypto.he.ou.refuse_decryption_oracle)
OU_REFUSAL = "each party decrypts the masked products the other forms, and shares derived from them go back"

ACTIVE, PASSIVE = "active", "passive"

#: stages of a masked product: the cross term of the logits (one value per row) or of the gradient (per column)
LOGITS, GRADIENT = 0, 1


@declare("sshelr.public_key", sender=(ACTIVE, PASSIVE), receiver=(ACTIVE, PASSIVE), protection=Protection.PUBLIC,
         reveals="the sender's Paillier public key")
@dataclass(frozen=True)
class PublicKey:
    public_key: PaillierPublicKey


@declare("sshelr.plan", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
         reveals="the row count and the training schedule (epochs, learning rate)")
@dataclass(frozen=True)
class Plan:
    rows: int
    epochs: int
    learning_rate: float


@declare("sshelr.weight_share", sender=(ACTIVE, PASSIVE), receiver=(ACTIVE, PASSIVE),
         protection=Protection.MASKED, hiding_bits=PERFECT,
         reveals="the number of the sender's weights; the receiver's share of them is uniform mod 2^256 "
                 "(the sender keeps the other share)")
@dataclass(frozen=True)
class WeightShare:
    values: IntVector


@declare("sshelr.active_ciphertexts", sender=ACTIVE, receiver=PASSIVE, protection=Protection.CIPHERTEXT,
         key_owner=ACTIVE,
         reveals="lengths only: the active party's share of the passive party's weights and, per row, its share "
                 "of the error 4(σ̃(z) − y), under the active party's own key")
@dataclass(frozen=True)
class ActiveCiphertexts:
    values: PaillierVector


@declare("sshelr.passive_ciphertexts", sender=PASSIVE, receiver=ACTIVE, protection=Protection.CIPHERTEXT,
         key_owner=PASSIVE,
         reveals="lengths only: the passive party's share of the active party's weights and, per row, its share "
                 "of the error, under the passive party's own key")
@dataclass(frozen=True)
class PassiveCiphertexts:
    values: PaillierVector


@declare("sshelr.masked_for_passive", sender=ACTIVE, receiver=PASSIVE,
         protection=(Protection.CIPHERTEXT, Protection.MASKED), key_owner=PASSIVE, hiding_bits=STAT_SECURITY_BITS,
         reveals="after decryption X_A·s + r per row and X_Aᵀ·s' + r per column, s and s' the passive party's own "
                 "shares, r fresh and uniform over 40 bits more than the product: the passive party's share of "
                 "the cross terms, statistically independent of X_A (distance ≤ 2^-40)")
@dataclass(frozen=True)
class MaskedForPassive:
    """``count`` masked products folded several to a ciphertext (:func:`~vflcrypto.he.paillier.fold_ciphertexts`)."""

    stage: int
    count: int
    values: PaillierVector


@declare("sshelr.masked_for_active", sender=PASSIVE, receiver=ACTIVE,
         protection=(Protection.CIPHERTEXT, Protection.MASKED), key_owner=ACTIVE, hiding_bits=STAT_SECURITY_BITS,
         reveals="after decryption X_P·s + r per row and X_Pᵀ·s' + r per column: the active party's share of the "
                 "cross terms, statistically independent of X_P (distance ≤ 2^-40)")
@dataclass(frozen=True)
class MaskedForActive:
    """As :class:`MaskedForPassive`, the other way."""

    stage: int
    count: int
    values: PaillierVector


@declare("sshelr.reveal_share", sender=(ACTIVE, PASSIVE), receiver=(ACTIVE, PASSIVE),
         protection=Protection.PLAINTEXT,
         reveals="the sender's share of the receiver's own weights after the last epoch: with its own share, "
                 "the receiver's weights in the clear (and nothing about the sender's weights)")
@dataclass(frozen=True)
class RevealShare:
    values: IntVector


# --------------------------------------------------------------------------- prediction with a saved model


@declare("sshelr.predict_plan", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
         reveals="the number of query rows and a digest of their IDs (an equality check of the alignment only)")
@dataclass(frozen=True)
class PredictPlan:
    rows: int
    ids_digest: bytes


@declare("sshelr.predict_score", sender=PASSIVE, receiver=ACTIVE, protection=Protection.PLAINTEXT,
         reveals="the passive party's score u_P = Z_P w_P of every query row, in the clear (after training, each "
                 "party holds its own weights in the clear): exactly what the prediction's logit z = u_A + u_P "
                 "reveals to the active party, which knows its own u_A; nothing about the passive party's columns "
                 "or weights beyond these scores")
@dataclass(frozen=True)
class PredictScore:
    values: np.ndarray
