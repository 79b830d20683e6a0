"""The four declared messages of the gradient exchange (``exchange.*``)."""

from __future__ import annotations

from dataclasses import dataclass

from vflcrypto.he.paillier import PaillierPublicKey, PaillierVector
from vflcrypto.runtime.declarations import PERFECT, Protection, declare
from vflcrypto.runtime.wire import IntVector

__all__ = [
    "ACTIVE",
    "OU_REFUSAL",
    "PASSIVE",
    "DecryptedMaskedGradient",
    "EncryptedResiduals",
    "MaskedGradient",
    "PublicKeyAnnouncement",
]

#: why exchange refuses Okamoto-Uchiyama keys (vflcrypto.he.ou.refuse_decryption_oracle)
OU_REFUSAL = "the key holder decrypts the masked gradient the other party forms and returns it"

ACTIVE, PASSIVE = "active", "passive"


@declare("exchange.public_key", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
         reveals="the active party's Paillier public key (n)")
@dataclass(frozen=True)
class PublicKeyAnnouncement:
    public_key: PaillierPublicKey


@declare("exchange.encrypted_residuals", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.CIPHERTEXT, key_owner=ACTIVE,
         reveals="the number of aligned rows only; residuals are IND-CPA encrypted")
@dataclass(frozen=True)
class EncryptedResiduals:
    residuals: PaillierVector


@declare("exchange.masked_gradient", sender=PASSIVE, receiver=ACTIVE,
         protection=(Protection.CIPHERTEXT, Protection.MASKED), key_owner=ACTIVE, hiding_bits=PERFECT,
         reveals="the passive party's number of features; after decryption a value uniform mod n")
@dataclass(frozen=True)
class MaskedGradient:
    values: PaillierVector


@declare("exchange.decrypted_masked_gradient", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.PLAINTEXT,
         reveals="the passive party's own gradient Xᵀd once it removes its mask; "
                 "gradients over many steps leak information about d")
@dataclass(frozen=True)
class DecryptedMaskedGradient:
    values: IntVector
