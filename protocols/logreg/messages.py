"""The declared messages of vertical logistic regression (``logreg.*``), plain and secure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.he.paillier import PaillierPublicKey, PaillierVector
from vflcrypto.runtime.declarations import PERFECT, Protection, declare
from vflcrypto.runtime.wire import IntVector

__all__ = [
    "ACTIVE",
    "OU_REFUSAL",
    "PASSIVE",
    "Ack",
    "DpResidual",
    "EncryptedResidual",
    "GradientReply",
    "Identity",
    "KeyShare",
    "Logits",
    "MaskedGradient",
    "MaskedLogits",
    "Request",
    "Residual",
    "Setup",
]

#: why logreg refuses Okamoto-Uchiyama keys (vflcrypto.he.ou.refuse_decryption_oracle)
OU_REFUSAL = "its coordinator decrypts the masked gradients the data parties form and returns them"

ACTIVE = "active"
PASSIVE = "passive"


@declare(
    "logreg.setup",
    sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
    reveals="training parameters, row counts, the active party's Paillier public key "
            "(secure mode), a digest of the aligned row IDs (equality check only) and the epsilon of "
            "randomized response on the labels (--label-dp), so that every party accounts the same guarantee",
)
@dataclass(frozen=True)
class Setup:
    """Parameters of the run, sent once by the active party."""

    secure: bool
    steps: int
    learning_rate: float
    n_train: int
    n_test: int
    parties: tuple[str, ...]
    ids_digest: bytes
    public_key: PaillierPublicKey | None = None
    #: ε of randomized response on the training labels (None: off)
    label_epsilon: float | None = None


@declare(
    "logreg.key_share",
    sender=PASSIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
    reveals="an ephemeral X25519 public key signed with the sender's pinned identity key; "
            "nothing about any data",
)
@dataclass(frozen=True)
class KeyShare:
    """One passive party's half of a pairwise Diffie-Hellman exchange (secure mode)."""

    sender: str
    public_key: bytes
    signature: bytes


@declare(
    "logreg.request",
    sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
    reveals="what the active party asks next (a training step, a prediction, stop)",
)
@dataclass(frozen=True)
class Request:
    """The active party drives the loop: ``action`` is step / predict-train / predict-test / stop."""

    action: str
    step: int


@declare(
    "logreg.logits",
    sender=PASSIVE, receiver=ACTIVE, protection=Protection.PLAINTEXT,
    reveals="the party's partial logits z_k = X_k w_k on every row (plain protocol): with "
            "the update rule known, enough steps reveal linear functions of X_k",
)
@dataclass(frozen=True)
class Logits:
    """Plain partial logits z_k for the training or test rows."""

    step: int
    values: np.ndarray


@declare(
    "logreg.residual",
    sender=ACTIVE, receiver=PASSIVE, protection=Protection.PLAINTEXT,
    reveals="r = (p - y)/n in the clear, undefended (no --label-dp): sign(r) is every training label "
            "(100 % recovery), |r| the model's confidence per row",
)
@dataclass(frozen=True)
class Residual:
    """Plain residuals r = (p - y) / n (plain protocol)."""

    step: int
    values: np.ndarray


@declare(
    "logreg.dp_residual",
    sender=ACTIVE, receiver=PASSIVE, protection=Protection.DP,
    reveals="r = (p - y~)/n in the clear under --label-dp epsilon: y~ are randomized-response labels (each kept with "
            "probability e^eps/(e^eps+1), drawn once), so sign(r) is y~, right about y at that rate, and everything "
            "sent is pure epsilon-label-DP (post-processing); |r| the model's confidence per row",
)
@dataclass(frozen=True)
class DpResidual:
    """Plain residuals from randomized-response labels (plain protocol under --label-dp)."""

    step: int
    values: np.ndarray


@declare(
    "logreg.ack",
    sender=PASSIVE, receiver=ACTIVE, protection=Protection.PUBLIC,
    reveals="that the party finished the step",
)
@dataclass(frozen=True)
class Ack:
    """A passive party finished updating its weights for ``step``."""

    step: int


@declare(
    "logreg.masked_logits",
    sender=PASSIVE, receiver=ACTIVE, protection=(Protection.MASKED, Protection.AGGREGATE),
    hiding_bits=PERFECT,
    reveals="z_k in fixed point mod 2^64 plus pairwise masks uniform mod 2^64: uniform alone; the sum over "
            "all passive parties reveals exactly z = sum_k z_k (the model's logits)",
)
@dataclass(frozen=True)
class MaskedLogits:
    """Pairwise-masked partial logits in Z_{2^64} (secure protocol)."""

    step: int
    values: np.ndarray


@declare(
    "logreg.encrypted_residual",
    sender=ACTIVE, receiver=PASSIVE, protection=Protection.CIPHERTEXT, key_owner=ACTIVE,
    reveals="nothing (Paillier ciphertexts of r under the active party's key); only its length (under "
            "--label-dp, r comes from randomized-response labels)",
)
@dataclass(frozen=True)
class EncryptedResidual:
    """[[r]] under the active party's Paillier key (secure protocol)."""

    step: int
    values: PaillierVector


@declare(
    "logreg.masked_gradient",
    sender=PASSIVE, receiver=ACTIVE, protection=(Protection.CIPHERTEXT, Protection.MASKED),
    key_owner=ACTIVE, hiding_bits=PERFECT,
    reveals="after decryption g_k + R_k mod n with R_k uniform mod n: perfectly hiding, "
            "nothing about the gradient (only its dimension d_k)",
)
@dataclass(frozen=True)
class MaskedGradient:
    """[[X_k^T r + R_k]] (secure protocol); re-randomized before sending."""

    step: int
    values: PaillierVector


@declare(
    "logreg.gradient_reply",
    sender=ACTIVE, receiver=PASSIVE, protection=Protection.PLAINTEXT,
    reveals="the party's own gradient X_k^T r once it removes its mask: d_k linear "
            "equations in the n residuals per step (no per-row residual or label; under --label-dp "
            "computed from randomized-response labels: pure epsilon-label-DP)",
)
@dataclass(frozen=True)
class GradientReply:
    """The decrypted masked gradient g_k + R_k mod n."""

    step: int
    values: IntVector


@declare(
    "logreg.identity",
    sender=PASSIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
    reveals="the sender's Ed25519 identity public key for this run, relayed by the Flower "
            "ServerApp when no identities are pinned in the run configuration (the ServerApp is "
            "then trusted not to substitute keys); never sent when identities are pinned",
)
@dataclass(frozen=True)
class Identity:
    """A passive party's identity public key (Flower runs without pinned identities only)."""

    sender: str
    public_key: bytes
