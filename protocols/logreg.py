"""Vertical logistic regression: a plain protocol and a secure one, all roles in one module.

Parties and roles
-----------------
* **active** party (``"active"``): holds the labels ``y`` and no features. It is the
  label-holding server of Flower's vertical-FL example (Seed 004 of the design card: "an
  active party without features"), acts as the *coordinator* of the training loop (it
  drives the steps and waits for every acknowledgement), and in the secure protocol it
  owns the Paillier key pair. Output: the loss history, the train loss of the final
  model and test loss / accuracy (predictions on the test rows).
* **passive** parties (``"passive-0"``, ``"passive-1"``, ...): hold feature blocks
  ``X_k`` of the same (aligned) rows and their own weights ``w_k``; ``passive-0`` also
  holds the intercept as a column of ones. Output: their own weights (no party ever
  holds the whole model).

The model is ``p = sigmoid(sum_k X_k w_k)`` trained by full-batch gradient descent on the
binary cross-entropy: exactly centralized logistic regression on the concatenated
features ``[X_0 | X_1 | ...]`` (the plain protocol to float round-off; the secure one to
fixed-point precision, see :data:`RING_FRAC_BITS` and :data:`GRAD_FRAC_BITS`).

Plain protocol (Flower's ``vertical-fl`` example; Seed 004)
-----------------------------------------------------------
0. active -> every passive: ``logreg.setup`` (public: mode, rows, steps, learning rate,
   digest of the row IDs so misaligned inputs fail before training).
For each step t = 0 .. steps-1 (active sends ``logreg.request`` action "step"):
1. passive k -> active: ``logreg.logits`` z_k = X_k w_k (plaintext).
2. active: z = sum_k z_k, p = sigmoid(z), loss = BCE(y, p), r = (p - y) / n;
   active -> every passive: ``logreg.residual`` r (plaintext).
3. passive k: w_k <- w_k - lr X_k^T r; passive k -> active: ``logreg.ack``.
Prediction (needs every party): active sends ``logreg.request`` "predict-train" /
"predict-test"; each passive answers ``logreg.logits`` on those rows; finally "stop".

Secure protocol
---------------
0. active -> every passive: ``logreg.setup`` with the active party's Paillier public key.
1. Pairwise key agreement (SecAgg, Bonawitz et al. CCS 2017): every pair of passives
   exchanges ``logreg.key_share`` (an ephemeral X25519 public key signed with the
   sender's Ed25519 identity key), directly passive <-> passive. Identity public keys are
   *pinned in configuration* (given to each party out of band); a bad signature aborts.
   The pair seed is HKDF(X25519 secret, names, run id) (:func:`vflcrypto.masking.agree_seed`).
For each step t:
2. passive k -> active: ``logreg.masked_logits``: z_k in fixed point mod 2^64 plus the
   signed pairwise masks PRG(seed_kj, t) (+ for the smaller name, - for the larger),
   which cancel in the sum: the active party learns z = sum_k z_k and nothing else.
3. active: p, loss, r as above; active -> every passive: ``logreg.encrypted_residual``
   [[r]] under its own Paillier key (fixed point; the passives never see r).
4. passive k: [[g_k + R_k]] = [[r]]^T X_k + [[R_k]], R_k fresh and uniform mod n;
   passive k -> active: ``logreg.masked_gradient``.
5. active decrypts; active -> passive k: ``logreg.gradient_reply`` g_k + R_k mod n
   (uniform mod n to the active party, which therefore learns nothing about g_k).
6. passive k removes R_k, decodes g_k = X_k^T r, updates w_k; sends ``logreg.ack``.
Prediction: as in the plain protocol, but the logits are pairwise-masked
(``logreg.masked_logits``) so the active party learns only the summed logits z.

Threat model
------------
Semi-honest parties. *Plain*: none of the protections below; every passive party learns
the residuals r and hence every training label (sign of r, see :func:`audit_run`), the
active party learns every z_k. *Secure*: the active party must not collude with any
passive party (it holds the Paillier key: together they decrypt [[r]] and recover the
labels); the pairwise masks hide an individual z_k from the active party only while at
least two passive parties are honest (one passive party colluding with the active party
can subtract its own masks; with only two passive parties the other's z_k then follows
from z). What remains revealed by design: the active party learns z (the full logits,
hence the model's predictions on every row); each passive party learns its own gradient
X_k^T r every step (d_k linear equations in the n residuals). Fixed-point encodings and
Python big integers are not constant-time; see SECURITY.md.

Citations: Hardy et al., "Private federated learning on vertically partitioned data via
entity resolution and additively homomorphic encryption" (2017) for the Paillier
residual/masked gradient pattern; Bonawitz et al. (CCS 2017) for pairwise masks;
Flower's ``examples/vertical-fl`` for the plain protocol and the Titanic split.

Titanic example (:func:`titanic_parties`, seed 0, 713 training / 178 test rows):
step-0 loss 0.6931 (= ln 2, every probability 0.5); after 20 steps at learning rate 0.5
the loss at the last step is 0.4524, the final model's train loss 0.4510, its test loss
0.4692 and its test accuracy 77.5 % (138/178); the secure protocol gives the same figures
(weights within 1e-10). (Flower's example reports 0.4534 / 78.7 % on its own
887-row variant with different features.)
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from vflcrypto.attacks import accuracy_finding, ring_mask_findings, unrandomized_paillier
from vflcrypto.dataio import ids_digest
from vflcrypto.errors import (
    EncodingOverflowError,
    InputDataError,
    ProtocolError,
)
from vflcrypto.leakage import (
    PERFECT,
    AuditOutcome,
    EmpiricalFinding,
    Protection,
    audit,
    declare,
)
from vflcrypto.masking import agree_seed, mask_ciphertexts, pairwise_masks, seed_context, unmask_residues
from vflcrypto.metrics import accuracy, log_loss
from vflcrypto.paillier import PaillierPrivateKey, PaillierPublicKey, PaillierVector, generate_keypair
from vflcrypto.runtime import AuditTap, Channel, Endpoint, LocalNetwork, Transcript, run_parties
from vflcrypto.wire import IntVector

if TYPE_CHECKING:
    from vflcrypto.spec import DemoContext

__all__ = [
    "ACTIVE",
    "GRAD_FRAC_BITS",
    "PASSIVE",
    "RING_BITS",
    "RING_FRAC_BITS",
    "Ack",
    "ActiveResult",
    "EncryptedResidual",
    "GradientReply",
    "KeyShare",
    "LocalRun",
    "Logits",
    "MaskedGradient",
    "MaskedLogits",
    "PassiveResult",
    "Request",
    "Residual",
    "Setup",
    "TitanicSplit",
    "audit_run",
    "bce_loss",
    "centralized_gd",
    "demo_step",
    "export_titanic_parties",
    "label_attack",
    "local_features",
    "rows_digest",
    "run_active",
    "run_local",
    "run_passive",
    "sigmoid",
    "titanic_parties",
]

ACTIVE = "active"
PASSIVE = "passive"
RING_BITS = 64  # logits are masked in Z_{2^64}: uint64 arithmetic wraps exactly there
RING_FRAC_BITS = 32  # fixed-point resolution of masked logits: 2^-32 per party
GRAD_FRAC_BITS = 40  # fixed-point resolution of r and X inside Paillier (each 2^-40)
_RING_MOD = 1 << RING_BITS
_LOGIT_LIMIT = 2.0 ** (RING_BITS - RING_FRAC_BITS - 8)  # |z| bound leaving room for the sum
_KEYSHARE_DOMAIN = b"vflcrypto.logreg.key_share.v1|"


# =========================================================================== messages


@declare(
    "logreg.setup",
    sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
    reveals="training parameters, row counts, the active party's Paillier public key "
            "(secure mode) and a digest of the aligned row IDs (equality check only)",
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
    reveals="r = (p - y)/n in the clear: sign(r) is every training label (100 % recovery), "
            "|r| the model's confidence per row",
)
@dataclass(frozen=True)
class Residual:
    """Plain residuals r = (p - y) / n (plain protocol)."""

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
    reveals="nothing (Paillier ciphertexts of r under the active party's key); only its length",
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
            "equations in the n residuals per step (no per-row residual or label)",
)
@dataclass(frozen=True)
class GradientReply:
    """The decrypted masked gradient g_k + R_k mod n."""

    step: int
    values: IntVector


# =========================================================================== math


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function."""
    z = np.asarray(z, dtype=np.float64)
    out = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def bce_loss(y: np.ndarray, p: np.ndarray) -> float:
    """Mean binary cross-entropy (clipped at 1e-15 like scikit-learn)."""
    return log_loss(y, p)


def partial_logits(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    """z_k = X_k w_k: what a passive party contributes to the logits."""
    return np.asarray(X, dtype=np.float64) @ np.asarray(w, dtype=np.float64)


def residuals(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The active party's step: ``(p, r, loss)`` with r = (p - y) / n, the BCE gradient in z."""
    p = sigmoid(z)
    return p, (p - y) / len(y), bce_loss(y, p)


def local_gradient(X: np.ndarray, r: np.ndarray) -> np.ndarray:
    """g_k = X_k^T r, the gradient of the mean BCE in w_k."""
    return np.asarray(X, dtype=np.float64).T @ r


def sgd_update(w: np.ndarray, grad: np.ndarray, learning_rate: float) -> np.ndarray:
    """w_k <- w_k - lr g_k."""
    return w - learning_rate * grad


def centralized_gd(X: np.ndarray, y: np.ndarray, steps: int, learning_rate: float
                   ) -> tuple[np.ndarray, list[float]]:
    """Reference: full-batch gradient descent on the joined table (weights, loss per step)."""
    w = np.zeros(X.shape[1])
    losses = []
    for _ in range(steps):
        p = sigmoid(X @ w)
        losses.append(bce_loss(y, p))
        w = w - learning_rate * X.T @ ((p - y) / len(y))
    return w, losses


# --- masked logits in Z_{2^64}


def pair_step_seed(seed: bytes, label: str) -> bytes:
    """A fresh 32-byte seed per step/purpose from the pair seed (HMAC-SHA256 as a PRF)."""
    return hmac.new(seed, b"vflcrypto.logreg|" + label.encode(), hashlib.sha256).digest()


def encode_ring(z: np.ndarray, frac_bits: int = RING_FRAC_BITS) -> np.ndarray:
    """round(z * 2^frac) as uint64 (two's complement mod 2^64); overflow raises."""
    z = np.asarray(z, dtype=np.float64)
    if not np.all(np.isfinite(z)):
        raise EncodingOverflowError("logits are not finite")
    if z.size and float(np.max(np.abs(z))) >= _LOGIT_LIMIT:
        raise EncodingOverflowError("a logit exceeds the fixed-point range of the masked sum")
    return np.rint(z * float(1 << frac_bits)).astype(np.int64).view(np.uint64)


def decode_ring(total: np.ndarray, frac_bits: int = RING_FRAC_BITS) -> np.ndarray:
    """Inverse of :func:`encode_ring` for a sum mod 2^64."""
    return np.asarray(total, dtype=np.uint64).view(np.int64).astype(np.float64) / float(1 << frac_bits)


def mask_logits(z: np.ndarray, me: str, seeds: Mapping[str, bytes], label: str,
                frac_bits: int = RING_FRAC_BITS) -> np.ndarray:
    """Encode z_k in Z_{2^64} and add the signed pairwise masks for ``label`` (a step or phase).

    The smaller party name adds PRG(seed, label), the larger subtracts it, so the masks of
    all passive parties cancel in the sum mod 2^64.
    """
    out = encode_ring(z, frac_bits)
    with np.errstate(over="ignore"):
        for peer, seed in seeds.items():
            if peer == me:
                raise ProtocolError("a party has no pairwise mask with itself")
            m = np.array(pairwise_masks(pair_step_seed(seed, label), len(out), _RING_MOD),
                         dtype=np.uint64)
            out = out + m if me < peer else out - m
    return out


def unmask_sum(masked: Sequence[np.ndarray], frac_bits: int = RING_FRAC_BITS) -> np.ndarray:
    """The active party's aggregation: sum mod 2^64 of every party's masked logits -> z."""
    total = np.zeros(len(masked[0]), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for m in masked:
            if m.shape != total.shape or m.dtype != np.uint64:
                raise ProtocolError("masked logits have the wrong length or type")
            total = total + m
    return decode_ring(total, frac_bits)


# --- pairwise key agreement


def _keyshare_payload(me: str, peer: str, run_id: str, public: bytes) -> bytes:
    return _KEYSHARE_DOMAIN + seed_context(me, peer, run_id, "logreg") + me.encode() + b"|" + public


def make_key_share(identity: Ed25519PrivateKey, me: str, peer: str, run_id: str
                   ) -> tuple[X25519PrivateKey, KeyShare]:
    """A fresh X25519 key pair for the pair (me, peer) and its signed public half."""
    eph = X25519PrivateKey.generate()
    pub = eph.public_key().public_bytes_raw()
    sig = identity.sign(_keyshare_payload(me, peer, run_id, pub))
    return eph, KeyShare(sender=me, public_key=pub, signature=sig)


def accept_key_share(eph: X25519PrivateKey, share: KeyShare, me: str, peer: str, run_id: str,
                     peer_identity: Ed25519PublicKey) -> bytes:
    """Verify the peer's signed share against its pinned identity key; return the pair seed."""
    if share.sender != peer:
        raise ProtocolError(f"{me}: key share from {peer} claims to come from {share.sender}")
    try:
        peer_identity.verify(share.signature, _keyshare_payload(peer, me, run_id, share.public_key))
        peer_pub = X25519PublicKey.from_public_bytes(share.public_key)
    except (InvalidSignature, ValueError):
        raise ProtocolError(f"{me}: key share from {peer} fails authentication") from None
    return agree_seed(eph, peer_pub, seed_context(me, peer, run_id, "logreg"))


# --- Paillier gradient with a uniform mask mod n


def encrypt_residual(sk: PaillierPrivateKey, r: np.ndarray,
                     frac_bits: int = GRAD_FRAC_BITS) -> PaillierVector:
    """[[r]] in fixed point, by the key owner (fast CRT path)."""
    return sk.encrypt_fixed(np.asarray(r, dtype=np.float64), frac_bits)


def masked_encrypted_gradient(enc_r: PaillierVector, X: np.ndarray,
                              frac_bits: int = GRAD_FRAC_BITS) -> tuple[PaillierVector, list[int]]:
    """[[X^T r + R]] with R uniform mod n, re-randomized; R is returned so the party can remove it."""
    return mask_ciphertexts(enc_r.dot(np.asarray(X, dtype=np.float64), frac_bits))


def decrypt_masked(sk: PaillierPrivateKey, vec: PaillierVector) -> IntVector:
    """The key owner decrypts g + R mod n (uniform to it) as residues in [0, n)."""
    n = int(sk.public_key.n)
    return IntVector(int(v) % n for v in sk.decrypt(vec))


def unmask_gradient(values: Sequence[int], masks: Sequence[int], n: int, frac_bits: int) -> np.ndarray:
    """Remove R mod n and decode the fixed-point gradient (overflow detected)."""
    return unmask_residues(values, masks, n, frac_bits)


def rows_digest(ids: Sequence[str] | None, n: int) -> bytes:
    """Digest of the ordered row IDs (:func:`vflcrypto.dataio.ids_digest`), or of the row
    count alone when IDs are not given (pre-aligned arrays)."""
    return ids_digest(ids if ids is not None else [f"#rows={n}"], "logreg")


# =========================================================================== roles


@dataclass
class ActiveResult:
    """What the active party ends with."""

    loss_history: list[float]
    train_loss: float
    test_loss: float | None
    test_accuracy: float | None
    test_probabilities: np.ndarray | None
    train_probabilities: np.ndarray
    seconds: float


@dataclass
class PassiveResult:
    """What a passive party ends with: its weights (what it saw is in the audit tap, if any)."""

    name: str
    weights: np.ndarray


def _check_peers(channels: Mapping[str, Channel], expected: Sequence[str], me: str) -> None:
    missing = sorted(set(expected) - set(channels))
    extra = sorted(set(channels) - set(expected))
    if missing:
        raise ProtocolError(f"{me}: no channel to configured part{'ies' if len(missing) > 1 else 'y'} "
                            f"{missing}")
    if extra:
        raise ProtocolError(f"{me}: channel to unexpected part{'ies' if len(extra) > 1 else 'y'} {extra}")


def run_active(
    channels: Mapping[str, Channel],
    y_train: np.ndarray,
    y_test: np.ndarray | None = None,
    *,
    parties: Sequence[str],
    secure: bool = False,
    steps: int = 20,
    learning_rate: float = 0.5,
    key_bits: int = 2048,
    allow_insecure: bool = False,
    ids_train: Sequence[str] | None = None,
    frac_bits: int = GRAD_FRAC_BITS,
    keypair: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
) -> ActiveResult:
    """Run the active party (labels, coordinator of the loop; key owner in secure mode)."""
    t0 = time.perf_counter()
    parties = list(parties)
    if not parties:
        raise ProtocolError("at least one passive party is required")
    _check_peers(channels, parties, ACTIVE)
    y = np.asarray(y_train, dtype=np.float64)
    if y.ndim != 1 or len(y) == 0 or not np.all((y == 0) | (y == 1)):
        raise InputDataError("labels must be a non-empty vector of 0/1")
    if steps < 0 or not math.isfinite(learning_rate) or learning_rate <= 0:
        raise InputDataError("steps must be >= 0 and the learning rate positive")
    n_test = 0 if y_test is None else len(y_test)
    pk = sk = None
    if secure:
        pk, sk = keypair if keypair is not None else generate_keypair(
            key_bits, allow_insecure=allow_insecure)
        channels[parties[0]].hold("secret_key", sk)
        for name in parties:  # accept the masked gradients under our own key
            channels[name].keyring.add(pk)
    setup = Setup(secure=secure, steps=steps, learning_rate=float(learning_rate),
                  n_train=len(y), n_test=n_test, parties=tuple(parties),
                  ids_digest=rows_digest(ids_train, len(y)), public_key=pk)
    for name in parties:
        channels[name].send(setup)

    def gather_logits(action: str, step: int, rows: int) -> np.ndarray:
        for name in parties:
            channels[name].send(Request(action, step))
        if secure:
            parts = [channels[name].recv(MaskedLogits).values for name in parties]
            for name, v in zip(parties, parts, strict=True):
                if v.shape != (rows,):
                    raise ProtocolError(f"{name} sent {v.shape} masked logits for {rows} rows")
            return unmask_sum(parts)
        z = np.zeros(rows)
        for name in parties:
            v = channels[name].recv(Logits).values
            if v.shape != (rows,):
                raise ProtocolError(f"{name} sent {v.shape} logits for {rows} rows")
            z = z + v
        return z

    history: list[float] = []
    for t in range(steps):
        z = gather_logits("step", t, len(y))
        _, r, loss = residuals(z, y)
        history.append(loss)
        if secure:
            assert sk is not None
            enc = encrypt_residual(sk, r, frac_bits)
            for name in parties:
                channels[name].send(EncryptedResidual(t, enc))
            for name in parties:
                masked = channels[name].recv(MaskedGradient).values
                channels[name].send(GradientReply(t, decrypt_masked(sk, masked)))
        else:
            for name in parties:
                channels[name].send(Residual(t, r))
        for name in parties:
            ack = channels[name].recv(Ack)
            if ack.step != t:
                raise ProtocolError(f"{name} acknowledged step {ack.step}, expected {t}")

    p_train = sigmoid(gather_logits("predict-train", steps, len(y)))
    test_loss = test_acc = p_test = None
    if y_test is not None and n_test:
        yt = np.asarray(y_test, dtype=np.float64)
        p_test = sigmoid(gather_logits("predict-test", steps, n_test))
        test_loss, test_acc = bce_loss(yt, p_test), accuracy(yt, p_test)
    for name in parties:
        channels[name].send(Request("stop", steps))
    return ActiveResult(history, bce_loss(y, p_train), test_loss, test_acc, p_test, p_train,
                        time.perf_counter() - t0)


def run_passive(
    channels: Mapping[str, Channel],
    name: str,
    X_train: np.ndarray,
    X_test: np.ndarray | None = None,
    *,
    identity: Ed25519PrivateKey | None = None,
    peer_identities: Mapping[str, Ed25519PublicKey] | None = None,
    ids_train: Sequence[str] | None = None,
    frac_bits: int = GRAD_FRAC_BITS,
) -> PassiveResult:
    """Run one passive party (features ``X_train`` / ``X_test``, weights start at zero).

    ``identity`` / ``peer_identities`` (Ed25519, pinned in configuration) authenticate the
    pairwise key agreement of the secure protocol.
    """
    if ACTIVE not in channels:
        raise ProtocolError(f"{name}: no channel to the active party")
    act = channels[ACTIVE]
    X = np.asarray(X_train, dtype=np.float64)
    Xt = None if X_test is None else np.asarray(X_test, dtype=np.float64)
    if X.ndim != 2 or not np.all(np.isfinite(X)):
        raise InputDataError(f"{name}: features must be a finite 2-D array")
    # The active party may itself be waiting for the slowest peer: wait twice as long, so
    # a stall is reported by the party that waits on the staller, naming it.
    wait = 2 * act.timeout
    setup = act.recv(Setup, timeout=wait)
    if setup.n_train != len(X):
        raise InputDataError(f"{name} has {len(X)} training rows, the active party {setup.n_train}")
    if not hmac.compare_digest(setup.ids_digest, rows_digest(ids_train, len(X))):
        raise InputDataError(f"{name}: row IDs differ from the active party's: inputs not aligned")
    if setup.n_test and (Xt is None or len(Xt) != setup.n_test):
        raise InputDataError(f"{name} has {0 if Xt is None else len(Xt)} test rows, "
                             f"the active party {setup.n_test}")
    if name not in setup.parties:
        raise ProtocolError(f"{name} is not among the configured parties {list(setup.parties)}")
    peers = [p for p in setup.parties if p != name]
    result = PassiveResult(name, np.zeros(X.shape[1]))
    seeds: dict[str, bytes] = {}
    if setup.secure:
        if setup.public_key is None:
            raise ProtocolError(f"{name}: secure mode without a public key")
        act.keyring.add(setup.public_key)
        seeds = _agree_pair_seeds(channels, name, peers, identity, peer_identities or {})
    w = result.weights
    while True:
        req = act.recv(Request, timeout=wait)
        if req.action == "stop":
            break
        if req.action in ("predict-train", "predict-test"):
            data = X if req.action == "predict-train" else Xt
            if data is None:
                raise ProtocolError(f"{name}: asked for test predictions without test rows")
            z = partial_logits(data, w)
            if setup.secure:
                act.hold("logits", z)  # the secret behind the masked logits (audit ground truth)
                act.send(MaskedLogits(req.step, mask_logits(z, name, seeds, f"{req.action}:{req.step}")))
            else:
                act.send(Logits(req.step, z))
            continue
        if req.action != "step":
            raise ProtocolError(f"{name}: unknown request {req.action!r}")
        t = req.step
        z = partial_logits(X, w)
        if setup.secure:
            act.hold("logits", z)
            act.send(MaskedLogits(t, mask_logits(z, name, seeds, f"step:{t}")))
            enc = act.recv(EncryptedResidual, timeout=wait).values
            if len(enc) != len(X):
                raise ProtocolError(f"{name}: encrypted residual has {len(enc)} entries")
            masked, masks = masked_encrypted_gradient(enc, X, frac_bits)
            act.send(MaskedGradient(t, masked))
            reply = act.recv(GradientReply, timeout=wait)
            grad = unmask_gradient(reply.values, masks, int(setup.public_key.n), masked.frac_bits)
            act.hold("gradient", grad)  # the secret behind the masked gradient (audit ground truth)
        else:
            act.send(Logits(t, z))
            r = act.recv(Residual, timeout=wait).values
            if r.shape != (len(X),):
                raise ProtocolError(f"{name}: residual has shape {r.shape}")
            grad = local_gradient(X, r)
        w = sgd_update(w, grad, setup.learning_rate)
        act.send(Ack(t))
    result.weights = w
    return result


def _agree_pair_seeds(channels: Mapping[str, Channel], me: str, peers: Sequence[str],
                      identity: Ed25519PrivateKey | None,
                      peer_identities: Mapping[str, Ed25519PublicKey]) -> dict[str, bytes]:
    """Authenticated X25519 with every other passive party, over direct channels."""
    if identity is None:
        raise ProtocolError(f"{me}: secure mode needs an identity key for the key agreement")
    missing = [p for p in peers if p not in channels or p not in peer_identities]
    if missing:
        raise ProtocolError(f"{me}: no channel or pinned identity key for {missing}")
    run_id = channels[ACTIVE].run_id
    ephs = {}
    for p in peers:  # send every share first, then receive: no ordering deadlock
        eph, share = make_key_share(identity, me, p, run_id)
        ephs[p] = eph
        channels[p].send(share)
    return {p: accept_key_share(ephs[p], channels[p].recv(KeyShare), me, p, run_id,
                                peer_identities[p]) for p in peers}


# =========================================================================== local run


@dataclass
class LocalRun:
    """Everything a local run produced: every party's result and the shared transcript."""

    active: ActiveResult
    passives: dict[str, PassiveResult]
    transcript: Transcript
    bytes_sent: dict[str, int]

    @property
    def weights(self) -> np.ndarray:
        """The concatenated model [w_0 | w_1 | ...] (for tests; no real party holds it)."""
        return np.concatenate([self.passives[k].weights for k in sorted(self.passives)])


def passive_names(count: int) -> list[str]:
    return [f"{PASSIVE}-{k}" for k in range(count)]


def run_local(
    X_train: Sequence[np.ndarray],
    y_train: np.ndarray,
    X_test: Sequence[np.ndarray] | None = None,
    y_test: np.ndarray | None = None,
    *,
    secure: bool = False,
    steps: int = 20,
    learning_rate: float = 0.5,
    key_bits: int = 2048,
    allow_insecure: bool = False,
    timeout: float = 120.0,
    ids_train: Sequence[Sequence[str] | None] | None = None,
    keypair: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
    passive_override: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
    tap: AuditTap | None = None,
) -> LocalRun:
    """Run the active party and one passive party per feature block in this process.

    ``ids_train`` optionally gives each party's row IDs (first entry: the active party's)
    so misaligned inputs are caught. ``passive_override`` replaces a party's role function
    (tests use it to simulate a stalled or misbehaving party). ``tap`` (audits) keeps what
    each party received and holds.
    """
    if not X_train:
        raise InputDataError("at least one passive party (feature block) is required")
    names = passive_names(len(X_train))
    endpoints = [Endpoint(ACTIVE, ACTIVE)] + [Endpoint(n, PASSIVE) for n in names]
    links = [(ACTIVE, n) for n in names]
    if secure:
        links += [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    net = LocalNetwork(endpoints, links=links, timeout=timeout, run_id=secrets.token_hex(8),
                       allow_insecure=allow_insecure, transcript=Transcript(tap))
    identities = {n: Ed25519PrivateKey.generate() for n in names}
    pinned = {n: k.public_key() for n, k in identities.items()}
    ids_active = ids_train[0] if ids_train else None
    tasks: dict[str, Callable[[], Any]] = {
        ACTIVE: lambda: run_active(
            net.channels(ACTIVE), y_train, y_test, parties=names, secure=secure, steps=steps,
            learning_rate=learning_rate, key_bits=key_bits, allow_insecure=allow_insecure,
            ids_train=ids_active, keypair=keypair),
    }
    for k, name in enumerate(names):
        if passive_override and name in passive_override:
            fn = passive_override[name]
            tasks[name] = (lambda fn=fn, name=name: fn(net.channels(name)))
            continue
        tasks[name] = (lambda k=k, name=name: run_passive(
            net.channels(name), name, X_train[k], None if X_test is None else X_test[k],
            identity=identities[name],
            peer_identities={p: pinned[p] for p in names if p != name},
            ids_train=ids_train[k + 1] if ids_train else None))
    results = run_parties(tasks, network=net, timeout=timeout * (steps + 4))
    return LocalRun(results[ACTIVE], {n: results[n] for n in names}, net.transcript,
                    net.transcript.bytes_sent_by("sender"))


# =========================================================================== Titanic


@dataclass(frozen=True)
class TitanicSplit:
    """The Titanic example split vertically into three feature parties and a label holder."""

    columns: tuple[tuple[str, ...], ...]
    X_train: tuple[np.ndarray, ...]
    X_test: tuple[np.ndarray, ...]
    y_train: np.ndarray
    y_test: np.ndarray
    ids_train: tuple[str, ...]
    ids_test: tuple[str, ...]


TITANIC_PARTIES: tuple[tuple[str, ...], ...] = (("Pclass", "Sex"), ("Age", "SibSp"), ("Parch", "Fare"))


def titanic_path() -> Path:
    """The bundled Kaggle Titanic train file (891 rows)."""
    return Path(str(resources.files("vflcrypto") / "data" / "titanic.csv"))


def local_features(X: np.ndarray, train_rows: np.ndarray, *, intercept: bool = False) -> np.ndarray:
    """A feature party's local preprocessing, fitted on its own training rows only.

    Median imputation of missing values (a column with no value at all becomes 0), then
    standardization to mean 0 / standard deviation 1, and, for the party that holds it
    (party 0), an intercept column of ones. Never communicated: it only shapes the
    party's own block ``X_k``.
    """
    X = np.array(X, dtype=np.float64)
    tr = X[train_rows]
    all_nan = np.all(np.isnan(tr), axis=0) if len(tr) else np.ones(X.shape[1], dtype=bool)
    med = np.where(all_nan, 0.0, np.nanmedian(np.where(all_nan, 0.0, tr), axis=0))
    X = np.where(np.isnan(X), med, X)
    mu, sd = X[train_rows].mean(axis=0), X[train_rows].std(axis=0)
    X = (X - mu) / np.where(sd > 0, sd, 1.0)
    return np.column_stack([X, np.ones(len(X))]) if intercept else X


TITANIC_FILES: dict[str, tuple[str, ...]] = {
    "coordinator.csv": ("Survived",),
    "party0.csv": ("Pclass", "Sex"),
    "party1.csv": ("Age", "SibSp"),
    "party2.csv": ("Parch", "Fare"),
}


def export_titanic_parties(out_dir: str | Path, *, unaligned: bool = False) -> list[Path]:
    """Write the bundled Titanic file as the four per-party CSVs of the example.

    ``coordinator.csv`` (PassengerId, Survived), ``party0.csv`` (PassengerId, Pclass, Sex
    with male = 1), ``party1.csv`` (PassengerId, Age, SibSp), ``party2.csv`` (PassengerId,
    Parch, Fare); raw values (each party imputes and standardizes locally in training).
    With ``unaligned`` every party's rows are shuffled and each drops a few different
    passengers, so the IDs must be aligned by PSI first. Files are written atomically.
    """
    import csv

    from vflcrypto.dataio import write_csv_atomic

    with titanic_path().open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["Sex"] = "1" if r["Sex"].strip() == "male" else "0"
    out = Path(out_dir)
    rng = np.random.default_rng(1234)  # example data, not a secret shuffle
    written = []
    for k, (name, cols) in enumerate(TITANIC_FILES.items()):
        mine = list(rows)
        if unaligned:
            drop = set(rng.choice(len(mine), size=10 + k, replace=False).tolist())
            mine = [mine[i] for i in rng.permutation(len(mine)) if i not in drop]
        write_csv_atomic(out / name, ("PassengerId", *cols),
                         ([r["PassengerId"], *(r[c] for c in cols)] for r in mine))
        written.append(out / name)
    return written


def titanic_parties(path: str | Path | None = None, seed: int = 0,
                    test_fraction: float = 0.2) -> TitanicSplit:
    """Split Titanic as party 0 {Pclass, Sex, intercept}, 1 {Age, SibSp}, 2 {Parch, Fare}.

    Sex is encoded male = 1, female = 0. Rows are split 80/20 with
    :func:`vflcrypto.dataio.train_test_split` (``seed``); missing values (Age) are imputed
    with the training-row median and every feature is standardized with training-row mean
    and standard deviation, so nothing about the test rows leaks into preprocessing. The
    label Survived stays with the active party.
    """
    import csv

    from vflcrypto.dataio import train_test_split

    p = Path(path) if path is not None else titanic_path()
    try:
        with p.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise InputDataError(f"cannot read {p}: {exc.strerror}") from None
    if not rows:
        raise InputDataError(f"{p} has no rows")

    def num(text: str) -> float:
        return float(text) if text.strip() else float("nan")

    try:
        ids = [r["PassengerId"] for r in rows]
        y = np.array([num(r["Survived"]) for r in rows])
        raw = {c: np.array([num(r[c]) for r in rows]) for c in ("Pclass", "Age", "SibSp", "Parch", "Fare")}
        raw["Sex"] = np.array([1.0 if r["Sex"].strip() == "male" else 0.0 for r in rows])
    except (KeyError, ValueError) as exc:
        raise InputDataError(f"{p} is not a Titanic train file: {exc}") from None
    tr, te = train_test_split(len(rows), test_fraction, seed)
    blocks_tr, blocks_te = [], []
    for k, cols in enumerate(TITANIC_PARTIES):
        M = local_features(np.column_stack([raw[c] for c in cols]), tr, intercept=k == 0)
        blocks_tr.append(M[tr])
        blocks_te.append(M[te])
    columns = tuple(cols + (("intercept",) if k == 0 else ()) for k, cols in enumerate(TITANIC_PARTIES))
    return TitanicSplit(columns, tuple(blocks_tr), tuple(blocks_te), y[tr], y[te],
                        tuple(ids[i] for i in tr), tuple(ids[i] for i in te))


# =========================================================================== audit & demo


def majority_rate(y: np.ndarray) -> float:
    """Accuracy of always guessing the majority class (the best guess without r)."""
    m = float(np.mean(y))
    return max(m, 1.0 - m)


def label_attack(tap: AuditTap, party: str, y: np.ndarray) -> EmpiricalFinding:
    """A feature party guesses every training label from the first residuals it received.

    It reads r = (p - y)/n where it can: in the clear (plain protocol, ``logreg.residual``)
    or from a ciphertext that carries no randomness (c = 1 + m n, ``logreg.encrypted_residual``);
    then y = 1 iff r < 0. Where it reads nothing it guesses the majority class (assumed
    public). The figure is the accuracy of those guesses on the true labels.
    """
    plain = tap.received(party, Residual)
    majority = float(np.mean(y) >= 0.5)
    if plain:
        r = np.asarray(plain[0].values, dtype=np.float64)
        kind, protection = "logreg.residual", None
    else:
        enc = tap.received(party, EncryptedResidual)[0].values
        n = int(enc.public_key.n)
        half = n // 2
        r = np.asarray([np.nan if m is None else float(m - n if m > half else m)
                        for m in unrandomized_paillier(n, enc.ciphertexts())])
        kind, protection = "logreg.encrypted_residual", Protection.CIPHERTEXT
    guess = np.where(np.isnan(r), majority, (r < 0).astype(np.float64))
    return accuracy_finding(
        party, f"label recovery from {kind}", guess, y, majority_rate(y), attacks=(kind,),
        protection=protection,
        description=f"guesses y = [r < 0] from the residuals it could read in its first {kind} and the "
                    "majority class elsewhere; baseline = the majority-class rate")


def secure_findings(tap: AuditTap, parties: Sequence[str], y: np.ndarray) -> list[EmpiricalFinding]:
    """Attacks on a secure run: labels from [[r]]; the active party on masked logits and gradients."""
    findings = [label_attack(tap, p, y) for p in parties]
    findings += ring_mask_findings(
        ACTIVE, "logreg.masked_logits", "masked logits",
        [[m.values.tolist() for m in tap.received(ACTIVE, MaskedLogits, sender=p)] for p in parties],
        _RING_MOD, truth=[tap.held(p, "logits") for p in parties], truth_protection=Protection.AGGREGATE)
    sk = tap.held_one(ACTIVE, "secret_key")
    n = int(sk.public_key.n)
    findings += ring_mask_findings(
        ACTIVE, "logreg.masked_gradient", "masked gradient",
        [[[v % n for v in sk.decrypt(m.values)] for m in tap.received(ACTIVE, MaskedGradient, sender=p)]
         for p in parties], n, truth=[tap.held(p, "gradient") for p in parties])
    return findings


def audit_run(key_bits: int = 2048, *, steps: int = 20) -> AuditOutcome:
    """Run plain and secure logistic regression on Titanic and attack what each role received.

    Plain: a feature party reads every label off the signs of the residuals (by design).
    Secure: each feature party attacks [[r]] for labels; the active party tests the
    pairwise-masked logits (mod 2^64) and the Paillier-masked gradients it decrypted
    (uniform, fresh per step, uncorrelated with the true values, which serve only as
    ground truth).
    """
    data = titanic_parties()
    plain_tap, secure_tap = AuditTap(), AuditTap()
    plain = run_local(list(data.X_train), data.y_train, list(data.X_test), data.y_test,
                      steps=steps, tap=plain_tap)
    secure = run_local(list(data.X_train), data.y_train, list(data.X_test), data.y_test,
                       secure=True, steps=steps, key_bits=key_bits,
                       allow_insecure=key_bits < 2048, tap=secure_tap)
    parties = sorted(secure.passives)
    findings = [label_attack(plain_tap, "passive-0", data.y_train), *secure_findings(secure_tap, parties, data.y_train)]
    # Plain-protocol messages never appear in the secure transcript: merge both so the
    # table shows each role's view in each mode.
    merged = Transcript()
    merged.merge(plain.transcript)
    merged.merge(secure.transcript)
    return AuditOutcome("logreg", audit(merged), tuple(findings))


def demo_step(ctx: DemoContext) -> dict[str, Any]:
    """Plain then secure vertical logistic regression on Titanic, plus the label-leakage check."""
    data = titanic_parties()
    steps = 5 if ctx.quick else 20
    out: dict[str, Any] = {}
    for secure in (False, True):
        mode = "secure" if secure else "plain"
        t0 = time.perf_counter()
        tap = AuditTap()
        run = run_local(list(data.X_train), data.y_train, list(data.X_test), data.y_test,
                        secure=secure, steps=steps, key_bits=ctx.key_bits,
                        allow_insecure=ctx.key_bits < 2048, tap=tap)
        a = run.active
        secs = time.perf_counter() - t0
        ctx.say(f"{mode:>6}: {steps} steps, loss {a.loss_history[0]:.4f} -> {a.loss_history[-1]:.4f}, "
                f"train loss {a.train_loss:.4f}, test loss {a.test_loss:.4f}, "
                f"test accuracy {a.test_accuracy:.1%}, {run.transcript.total_bytes:,} B, {secs:.1f} s")
        out[mode] = {"train_loss": a.train_loss, "test_loss": a.test_loss,
                     "test_accuracy": a.test_accuracy, "bytes": run.transcript.total_bytes,
                     "seconds": round(secs, 3)}
        rate = label_attack(tap, "passive-0", data.y_train).value
        out[mode]["label_recovery"] = rate
        ctx.say(f"        passive-0 recovers {rate:.1%} of training labels "
                f"(base rate {majority_rate(data.y_train):.1%})")
        if secure:
            report = audit(run.transcript)
            report.check()
            ctx.say(report.to_text())
    return out
