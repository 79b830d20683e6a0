"""The declared messages of cross-party Pearson correlation (``pearson.*``)."""

from __future__ import annotations

from dataclasses import dataclass

from vflcrypto.he.paillier import PaillierPublicKey, PaillierVector
from vflcrypto.runtime.declarations import PERFECT, Protection, declare
from vflcrypto.runtime.wire import IntVector

__all__ = ["ACTIVE", "OU_REFUSAL", "PASSIVE", "DecryptedMasked", "EncryptedColumns", "MaskedProducts", "ProductMask",
           "Setup"]

#: why pearson refuses Okamoto-Uchiyama keys (vflcrypto.he.ou.refuse_decryption_oracle)
OU_REFUSAL = "the key holder decrypts the masked products the other party forms and returns them"

ACTIVE, PASSIVE = "active", "passive"


@declare("pearson.setup", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
         reveals="the active party's Paillier public key, the row count, its number of columns and who "
                 "receives the correlations")
@dataclass(frozen=True)
class Setup:
    public_key: PaillierPublicKey
    rows: int
    columns: int
    reveal: str


@declare("pearson.columns", sender=ACTIVE, receiver=PASSIVE, protection=Protection.CIPHERTEXT, key_owner=ACTIVE,
         reveals="the number of rows and columns only: the active party's standardized columns, fixed point, "
                 "IND-CPA under its key")
@dataclass(frozen=True)
class EncryptedColumns:
    columns: PaillierVector  # column-major: column j holds rows j*n .. (j+1)*n - 1


@declare("pearson.masked_products", sender=PASSIVE, receiver=ACTIVE,
         protection=(Protection.CIPHERTEXT, Protection.MASKED), key_owner=ACTIVE, hiding_bits=PERFECT,
         reveals="the passive party's number of columns; after decryption, values uniform mod n "
                 "(each product of an active and a passive column plus a fresh uniform mask)")
@dataclass(frozen=True)
class MaskedProducts:
    values: PaillierVector


@declare("pearson.decrypted_masked", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PLAINTEXT,
         reveals="(sent only when the passive party receives the correlations) the masked products, which "
                 "the passive party unmasks: every correlation of an active column with one of its columns")
@dataclass(frozen=True)
class DecryptedMasked:
    values: IntVector


@declare("pearson.mask", sender=PASSIVE, receiver=ACTIVE, protection=Protection.PLAINTEXT,
         reveals="(sent only when the active party receives the correlations) the passive party's masks, "
                 "which remove the masks of what the active party decrypted: every cross-party correlation")
@dataclass(frozen=True)
class ProductMask:
    values: IntVector
