"""Secure vertical (hetero) linear regression with a coordinator.

Parties and their inputs/outputs
--------------------------------
* **active party** B (``"active"``, FATE's guest): features ``X_B`` and the label ``y``;
  learns its own weights ``Θ_B`` and, at prediction time, the predictions ``Σ_k u_k``.
* **passive parties** A_1..A_k (``"passive"``, k >= 1, FATE's hosts): features ``X_A``;
  each learns only its own weights ``Θ_A``.
* **coordinator** C (``"coordinator"``, FATE's arbiter): no data; holds the decryption
  key; learns the training loss of every iteration (declared) and nothing else.

Rows are aligned beforehand (``vflcrypto.protocols.align``); every party holds the same rows in
the same order. Citation: Q. Yang, Y. Liu, Y. Cheng, Y. Kang, T. Chen, H. Yu, *Federated
Machine Learning*, Morgan & Claypool 2019, ch. 5 (vertical linear regression), and FATE's
hetero linear regression (``HeteroLinR`` guest/host/arbiter).

Threat model
------------
Semi-honest parties. **C must not collude with A or with B** (C holds the key under which
everything A and B exchange is encrypted). A and B may not collude with each other to
learn more than their joint outputs (they are the data owners; colluding they would know
both feature blocks anyway). Assumes rows ≫ features: a party's gradient is an
aggregate over rows (``Σ_i d_i x_i``); with few rows the gradients and the loss reveal
much more (a gradient with one row reveals ``d_i x_i``). Models and predictions are
outputs and leak about the training data; no differential privacy is added.

Loss and gradient convention (the plaintext reference uses exactly the same)
-----------------------------------------------------------------------------
For a batch of ``m`` rows, ``u_k = X_k Θ_k`` per passive party, ``u_B = X_B Θ_B``,
``d = Σ_k u_k + u_B − y`` and::

    L   = (1 / (2m)) Σ_i d_i²  +  (λ/2) (Σ_k ‖Θ_k‖² + ‖Θ_B‖²)
    ∇_k = (1 / m) Σ_i d_i x_k,i  +  λ Θ_k           (the exact derivative of L)
    Θ_k ← Θ_k − η ∇_k                               (likewise for B)

λ applies to every weight, including B's intercept column when ``fit_intercept`` is
set. Weights start at zero. Each epoch visits every row once in batches of
``batch_size`` (a permutation drawn by :func:`epoch_batches` from a public seed that B
picks and sends in the plan; the full batch keeps the natural order). The loss ``L`` is
computed at the weights *before* the update. After epoch ``e`` >= 1, C stops training
when ``|L̄_{e-1} − L̄_e| <= tol · max(|L̄_{e-1}|, 1e-12)`` where ``L̄`` is the mean
batch loss of an epoch (``tol=None`` disables the test).

With momentum μ (heavy ball, FATE's momentum SGD) each party keeps a local velocity:
``v ← μ v + ∇``, ``Θ ← Θ − η v`` (μ = 0 is plain gradient descent).

Local preprocessing (declared, never communicated): with ``preprocess="standardize"``
each party scales its own columns to mean 0 / standard deviation 1 with its own
statistics, with ``"whiten"`` it PCA-whitens its own block; with ``fit_intercept`` B
appends a constant column. Both are stored in the party's model and
re-applied at prediction, so predictions are in the label's original units.

Message flow (one iteration; message kinds ``linreg.*``)
---------------------------------------------------------
0. C generates the key pair; sends ``public_key`` to every data party. B sends ``plan``
   (rows, batch size, epochs, η, λ, tol, schedule seed; to passive parties also a SHA-256
   of the ordered aligned IDs so misaligned inputs fail with InputDataError).
1. Each passive party k: ``encrypted_u`` = ``[[u_k]]`` and ``[[P_k]]`` with
   ``P_k = Σ_i u_k,i² + m λ ‖Θ_k‖²`` (scaled by 1/(2m) under CKKS) → B.
2. With k >= 2 passive parties the loss needs ``Σ_i u_j,i u_l,i``: B sends
   ``partial_sum`` ``[[Σ_{l<j} u_l]]`` to passive j >= 1, which returns ``cross_term``
   ``[[2 Σ_i u_j,i Σ_{l<j} u_l,i]]``.
3. B: ``[[d]] = Σ_k [[u_k]] + (u_B − y)`` → every passive party (``encrypted_residual``);
   ``[[S]] = Σ_k [[P_k]] + [[U]]·2(u_B − y) + Σ_j cross_j + Σ(u_B − y)² + m λ ‖Θ_B‖²``
   (so ``S = Σ d_i² + m λ ‖Θ‖²``) → C (``encrypted_loss``).
4. Every data party computes ``[[Σ_i d_i x_i]]`` homomorphically (``dot`` =
   multi-exponentiation), adds a fresh mask ``[[R]]`` and sends ``masked_gradient``
   (``masked_gradient_ckks`` under CKKS) to C.
5. C decrypts the loss ``L = S/(2m)`` and the masked gradients, returns each masked
   gradient to its owner (``gradient_return``); the owner removes its mask, scales by
   ``1/m``, adds ``λΘ`` and updates its weights.
6. At the end of each epoch C sends ``control`` (stop or continue) to every data party.

Prediction (:func:`predict_local`): C sends a fresh ``public_key``; B sends
``predict_plan``; each passive party sends ``predict_partial`` ``[[u_k]]``; B adds them,
masks with ``[[R]]`` (uniform mod n) and sends ``predict_masked`` to C; C returns the
decryption (``predict_return``); B removes ``R`` and adds ``u_B``. Only B learns
``Σ_k u_k + u_B``; with a single passive party this *is* ``u_A`` (the output reveals it).

Schemes
-------
* **Paillier** (default): fixed point with ``FRAC_BITS`` = 32 fractional bits for
  ``u``, ``d`` and features (so gradients carry 64); masks uniform mod n: C's view of a
  masked gradient is uniform whatever the gradient (perfect hiding, declared as
  such). Overflow is prevented by a public value bound
  (:func:`paillier_value_bits`) that every party checks on its own values, raising
  :class:`~vflcrypto.errors.EncodingOverflowError`, never wrapping silently; decoding
  also detects middle-third residues. Accuracy: weights agree with the float64 reference
  to ~1e-9 relative per iteration (rounding 2^-33 of u, d and x), far below the 1e-6
  after 100 iterations the tests require.
* **CKKS** (fast mode, TenSEAL): the gradient is computed as a mean (features scaled by
  1/m before ``dot``) and masked with a real mask uniform on [−R, R]; CKKS has no
  modular wrap, so the mask hides a gradient of magnitude <= ``CKKS_GRADIENT_BOUND``
  only to ``CKKS_HIDING_BITS`` bits of statistical distance (declared honestly; an owner
  whose unmasked gradient exceeded the bound raises EncodingOverflowError). C rounds
  decryptions to 2^-24 before returning them (IND-CPA^D mitigation, see
  :mod:`vflcrypto.ckks`).
"""

from __future__ import annotations

import math
import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto import masking
from vflcrypto.attacks import (
    real_mask_findings,
    ring_mask_findings,
    strip_known_paillier,
    unrandomized_finding,
    unrandomized_paillier,
)
from vflcrypto.ckks import CKKSContext, CKKSVector
from vflcrypto.dataio import PartyTable, ids_digest, load_model, save_model
from vflcrypto.errors import EncodingOverflowError, InputDataError, ProtocolError
from vflcrypto.leakage import PERFECT, AuditOutcome, EmpiricalFinding, Protection, audit, declare
from vflcrypto.paillier import (
    DEFAULT_KEY_BITS,
    PaillierPrivateKey,
    PaillierPublicKey,
    PaillierVector,
    generate_keypair,
)
from vflcrypto.runtime import AuditTap, Channel, Endpoint, LocalNetwork, Transcript, run_parties
from vflcrypto.spec import ProtocolSpec
from vflcrypto.wire import IntVector

__all__ = [
    "CKKS_GRADIENT_BOUND",
    "CKKS_HIDING_BITS",
    "FRAC_BITS",
    "SCHEMES",
    "SPEC",
    "LinRegConfig",
    "LinRegRun",
    "PartyModel",
    "PlainResult",
    "audit_run",
    "demo_step",
    "epoch_batches",
    "fit_preprocessing",
    "paillier_value_bits",
    "plaintext_gradient_descent",
    "predict_local",
    "predict_plain",
    "run_active",
    "run_coordinator",
    "run_local",
    "run_passive",
    "run_predict_active",
    "run_predict_coordinator",
    "run_predict_passive",
    "save_models",
]

SCHEMES = ("paillier", "ckks")
FRAC_BITS = 32  # fixed-point fractional bits of u, d and features (gradients carry 64)
CKKS_Q0_BITS, CKKS_SCALE_BITS = 60, 40  # vflcrypto.ckks defaults (first prime, scale)
CKKS_GRADIENT_BOUND = 2.0**6  # |mean gradient| the CKKS mask is sized for
# = vflcrypto.ckks.mask_hiding_bits(default context, CKKS_GRADIENT_BOUND) (checked by a test)
_CKKS_ROOM = 2.0 ** (CKKS_Q0_BITS - CKKS_SCALE_BITS - 1) - CKKS_GRADIENT_BOUND
CKKS_HIDING_BITS = max(0, math.floor(math.log2(_CKKS_ROOM / CKKS_GRADIENT_BOUND)))
CKKS_RETURN_FRAC_BITS = 24  # C rounds CKKS decryptions to 2^-24 before returning them
ACTIVE, PASSIVE, COORD = "active", "passive", "coordinator"

Vec = PaillierVector | CKKSVector


# =========================================================================== messages


@declare("linreg.public_key", sender=COORD, receiver=(ACTIVE, PASSIVE),
         protection=Protection.PUBLIC,
         reveals="C's Paillier public key or public CKKS context (no secret key)")
@dataclass(frozen=True)
class PublicKeyMsg:
    scheme: str
    paillier: PaillierPublicKey | None
    ckks: CKKSContext | None


@declare("linreg.plan", sender=ACTIVE, receiver=(PASSIVE, COORD), protection=Protection.PUBLIC,
         reveals="the public training plan: rows, batch size, epochs, learning rate, momentum, λ, "
                 "tolerance, schedule seed; to passive parties also a SHA-256 of the ordered "
                 "aligned IDs they already hold (to detect misalignment)")
@dataclass(frozen=True)
class TrainingPlan:
    n_rows: int
    batch_size: int
    epochs: int
    lr: float
    momentum: float
    l2: float
    tol: float | None
    seed: int
    n_passive: int
    id_digest: bytes


@declare("linreg.encrypted_u", sender=PASSIVE, receiver=ACTIVE,
         protection=Protection.CIPHERTEXT, key_owner=COORD,
         reveals="nothing: [[u_k]] per batch row and the passive loss share [[P_k]], "
                 "encrypted under C's key")
@dataclass(frozen=True)
class EncryptedU:
    u: PaillierVector | CKKSVector
    partial_loss: PaillierVector | CKKSVector


@declare("linreg.partial_sum", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.CIPHERTEXT, key_owner=COORD,
         reveals="nothing: [[Σ_{l<j} u_l]] of the other passive parties, under C's key "
                 "(only with >= 2 passive parties)")
@dataclass(frozen=True)
class PartialSum:
    values: PaillierVector | CKKSVector


@declare("linreg.cross_term", sender=PASSIVE, receiver=ACTIVE,
         protection=Protection.CIPHERTEXT, key_owner=COORD,
         reveals="nothing: [[2 Σ_i u_j,i Σ_{l<j} u_l,i]] under C's key")
@dataclass(frozen=True)
class CrossTerm:
    value: PaillierVector | CKKSVector


@declare("linreg.encrypted_residual", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.CIPHERTEXT, key_owner=COORD,
         reveals="nothing: the residuals [[d]] of the batch under C's key")
@dataclass(frozen=True)
class EncryptedResidual:
    d: PaillierVector | CKKSVector


@declare("linreg.encrypted_loss", sender=ACTIVE, receiver=COORD,
         protection=Protection.AGGREGATE,
         reveals="the total batch loss L (sum over rows and parties, plus the L2 term) of "
                 "every iteration: C decrypts it")
@dataclass(frozen=True)
class EncryptedLoss:
    value: PaillierVector | CKKSVector


@declare("linreg.masked_gradient", sender=(ACTIVE, PASSIVE), receiver=COORD,
         protection=(Protection.CIPHERTEXT, Protection.MASKED), key_owner=COORD,
         hiding_bits=PERFECT,
         reveals="nothing about the gradient: C decrypts Σ d_i x_i + R with R uniform mod n "
                 "(perfectly hiding); only the vector's length (the sender's feature count)")
@dataclass(frozen=True)
class MaskedGradient:
    values: PaillierVector


@declare("linreg.masked_gradient_ckks", sender=(ACTIVE, PASSIVE), receiver=COORD,
         protection=(Protection.CIPHERTEXT, Protection.MASKED), key_owner=COORD,
         hiding_bits=CKKS_HIDING_BITS,
         reveals=f"the mean gradient + a real mask uniform on [-R, R]: statistical distance "
                 f"<= 2^-{CKKS_HIDING_BITS} for |gradient| <= {CKKS_GRADIENT_BOUND:g} "
                 "(CKKS has no modular wrap; weak hiding, declared honestly)")
@dataclass(frozen=True)
class MaskedGradientCKKS:
    values: CKKSVector


@declare("linreg.gradient_return", sender=COORD, receiver=(ACTIVE, PASSIVE),
         protection=Protection.PLAINTEXT,
         reveals="the receiver's own masked gradient, decrypted; it removes its own mask and "
                 "learns its own gradient (which it is entitled to)")
@dataclass(frozen=True)
class GradientReturn:
    residues: IntVector  # Paillier: decrypted masked residues mod n
    approx: np.ndarray  # CKKS: decryptions rounded to 2^-24


@declare("linreg.control", sender=COORD, receiver=(ACTIVE, PASSIVE),
         protection=Protection.PUBLIC,
         reveals="one bit per epoch: whether C's convergence test on the loss fired")
@dataclass(frozen=True)
class Control:
    epoch: int
    stop: bool


@declare("linreg.predict_plan", sender=ACTIVE, receiver=(PASSIVE, COORD),
         protection=Protection.PUBLIC,
         reveals="number of query rows; to passive parties a SHA-256 of the ordered query IDs")
@dataclass(frozen=True)
class PredictPlan:
    n_rows: int
    id_digest: bytes


@declare("linreg.predict_partial", sender=PASSIVE, receiver=ACTIVE,
         protection=Protection.CIPHERTEXT, key_owner=COORD,
         reveals="nothing: the passive party's partial predictions [[u_k]] under C's key")
@dataclass(frozen=True)
class PredictPartial:
    u: PaillierVector


@declare("linreg.predict_masked", sender=ACTIVE, receiver=COORD,
         protection=(Protection.CIPHERTEXT, Protection.MASKED), key_owner=COORD,
         hiding_bits=PERFECT,
         reveals="nothing: Σ_k u_k + R per query row with R uniform mod n")
@dataclass(frozen=True)
class PredictMasked:
    values: PaillierVector


@declare("linreg.predict_return", sender=COORD, receiver=ACTIVE,
         protection=Protection.PLAINTEXT,
         reveals="B removes its mask and learns Σ_k u_k per query row (its prediction "
                 "output); with one passive party that is u_A itself")
@dataclass(frozen=True)
class PredictReturn:
    residues: IntVector


# =========================================================================== config & results


@dataclass(frozen=True)
class LinRegConfig:
    """Public training parameters (B sends them in the plan; C and A check them)."""

    epochs: int = 100
    lr: float = 0.1
    l2: float = 0.0
    batch_size: int | None = None  # None: full batch
    tol: float | None = 1e-6
    scheme: str = "paillier"
    key_bits: int = DEFAULT_KEY_BITS
    momentum: float = 0.0  # heavy-ball momentum, applied locally by each party
    preprocess: str = "none"  # local: "none", "standardize" or "whiten"
    fit_intercept: bool = False
    seed: int | None = None  # schedule seed; None: B draws one with `secrets`

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise InputDataError(f"unknown scheme {self.scheme!r}; choose from {SCHEMES}")
        if self.epochs < 1 or not self.lr > 0 or self.l2 < 0 or not 0 <= self.momentum < 1:
            raise InputDataError("need epochs >= 1, lr > 0, l2 >= 0 and 0 <= momentum < 1")
        if self.preprocess not in PREPROCESSING:
            raise InputDataError(f"unknown preprocessing {self.preprocess!r}")
        if self.batch_size is not None and self.batch_size < 1:
            raise InputDataError("batch size must be >= 1")


PREPROCESSING = ("none", "standardize", "whiten")


@dataclass(frozen=True)
class Preprocessing:
    """A party's local, never-communicated feature transform ``(X − mean) · T`` (+ ones)."""

    mean: np.ndarray
    transform: np.ndarray
    intercept: bool

    def apply(self, X: np.ndarray) -> np.ndarray:
        Z = (np.asarray(X, dtype=np.float64) - self.mean) @ self.transform
        if self.intercept:
            Z = np.hstack([Z, np.ones((Z.shape[0], 1))])
        return Z


def fit_preprocessing(X: np.ndarray, *, method: str = "none",
                      intercept: bool = False) -> Preprocessing:
    """Fit a party's local transform on its own training rows.

    ``"standardize"``: mean 0 / std 1 per column. ``"whiten"``: PCA whitening of the
    party's own block (decorrelates its columns, which makes gradient descent converge
    much faster on collinear features; eigenvalues below 1e-10 of the largest are floored).
    Both are linear, so the model stays linear in the original features.
    """
    if method not in PREPROCESSING:
        raise InputDataError(f"unknown preprocessing {method!r}; choose from {PREPROCESSING}")
    X = np.asarray(X, dtype=np.float64)
    p = X.shape[1]
    if method == "none" or X.shape[0] == 0 or p == 0:
        return Preprocessing(np.zeros(p), np.eye(p), intercept)
    mean = X.mean(axis=0)
    if method == "standardize":
        scale = X.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        return Preprocessing(mean, np.diag(1.0 / scale), intercept)
    cov = (X - mean).T @ (X - mean) / X.shape[0]
    evals, evecs = np.linalg.eigh(cov)
    floor = max(float(evals.max()), 1e-300) * 1e-10
    return Preprocessing(mean, evecs / np.sqrt(np.maximum(evals, floor)), intercept)


@dataclass(frozen=True)
class PartyModel:
    """One party's trained share of the model: its weights and its local preprocessing."""

    name: str
    role: str
    columns: tuple[str, ...]
    weights: np.ndarray
    prep: Preprocessing
    label_name: str | None = None

    def scores(self, X: np.ndarray) -> np.ndarray:
        """This party's partial prediction ``u = prep(X) · Θ``."""
        return self.prep.apply(X) @ self.weights

    def save(self, path: str | os.PathLike[str]) -> None:
        meta = {"protocol": "linreg", "name": self.name, "role": self.role,
                "columns": list(self.columns), "intercept": self.prep.intercept,
                "label": self.label_name}
        save_model(path, meta, {"weights": self.weights, "mean": self.prep.mean,
                                "transform": self.prep.transform})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PartyModel:
        meta, arrays = load_model(path)
        if meta.get("protocol") != "linreg":
            raise InputDataError(f"{path} is not a linear-regression party model")
        prep = Preprocessing(arrays["mean"], arrays["transform"], bool(meta["intercept"]))
        return cls(meta["name"], meta["role"], tuple(meta["columns"]), arrays["weights"], prep,
                   meta.get("label"))


@dataclass
class PartyResult:
    """What a data party ends with."""

    model: PartyModel
    history: list[np.ndarray] = field(default_factory=list)  # weights after each iteration


@dataclass
class CoordinatorResult:
    losses: list[float]  # per iteration
    epoch_losses: list[float]
    epochs_run: int
    converged: bool


@dataclass
class LinRegRun:
    """Everything :func:`run_local` returns."""

    active: PartyResult
    passives: list[PartyResult]
    coordinator: CoordinatorResult
    transcript: Transcript
    seconds: float

    @property
    def models(self) -> list[PartyModel]:
        return [self.active.model] + [p.model for p in self.passives]

    @property
    def losses(self) -> list[float]:
        return self.coordinator.losses


@dataclass
class PlainResult:
    """The plaintext reference's result (same shapes as the secure run)."""

    active_weights: np.ndarray
    passive_weights: list[np.ndarray]
    losses: list[float]
    epoch_losses: list[float]
    epochs_run: int
    converged: bool
    history: list[list[np.ndarray]]  # per iteration: [active, passive-0, ...]


# =========================================================================== per-step math


def epoch_batches(n_rows: int, batch_size: int | None, seed: int, epoch: int) -> list[np.ndarray]:
    """Row indices of each batch of ``epoch`` (public; every party derives the same).

    Full batch (``batch_size`` None or >= n_rows): one batch in natural order. Otherwise
    a permutation from ``numpy.random.default_rng((seed, epoch))`` cut into batches
    (the last may be smaller). Batches are not secret, so numpy's PRNG is fine here.
    """
    if batch_size is None or batch_size >= n_rows:
        return [np.arange(n_rows)]
    order = np.random.default_rng((int(seed), int(epoch))).permutation(n_rows)
    return [order[i:i + batch_size] for i in range(0, n_rows, batch_size)]


def converged(prev: float | None, cur: float, tol: float | None) -> bool:
    """C's stopping rule: relative change of the mean epoch loss <= tol."""
    if tol is None or prev is None:
        return False
    return abs(prev - cur) <= tol * max(abs(prev), 1e-12)


def batch_loss(d: np.ndarray, weights: Sequence[np.ndarray], l2: float) -> float:
    """``(1/(2m)) Σ d² + (λ/2) Σ ‖Θ‖²``."""
    m = len(d)
    reg = sum(float(w @ w) for w in weights)
    return float(d @ d) / (2 * m) + 0.5 * l2 * reg


def gradient(d: np.ndarray, X: np.ndarray, w: np.ndarray, l2: float) -> np.ndarray:
    """``(1/m) Σ_i d_i x_i + λ Θ``."""
    return (X.T @ d) / len(d) + l2 * w


def passive_loss_share(u: np.ndarray, w: np.ndarray, l2: float, m: int) -> float:
    """``P_k = Σ u_k² + m λ ‖Θ_k‖²`` (unscaled)."""
    return float(u @ u) + m * l2 * float(w @ w)


def active_loss_share(r: np.ndarray, w: np.ndarray, l2: float, m: int) -> float:
    """B's plaintext part of S: ``Σ r² + m λ ‖Θ_B‖²`` with ``r = u_B − y``."""
    return float(r @ r) + m * l2 * float(w @ w)


def paillier_value_bits(key_bits: int, batch_rows: int, n_passive: int, n_features: int,
                        frac_bits: int = FRAC_BITS) -> int:
    """The public bound: every |x|, |u|, |u_B − y| and |Θ| must stay below 2^bits.

    Then ``|d| < (k+1)·2^b``, ``|Σ d x| < m (k+1) 2^(2b)`` and ``S = Σ d² + mλ‖Θ‖²`` all
    fit in the encodable range n/3 at ``2·frac_bits`` fractional bits, with 16 bits of
    slack for λ and the feature count. Returns at least 1 (tiny keys fail at once).
    """
    spare = (key_bits - 2 - 2 * frac_bits - math.ceil(math.log2(max(batch_rows, 2)))
             - 2 * math.ceil(math.log2(n_passive + 2)) - math.ceil(math.log2(n_features + 2))
             - 16)
    return max(1, spare // 2)


def _check_bound(what: str, values: np.ndarray, bits: int, party: str) -> None:
    if values.size and float(np.max(np.abs(values))) >= 2.0**bits:
        raise EncodingOverflowError(
            f"{party}: {what} exceeds the encoding's public bound 2^{bits} for this key size "
            "(the gradient would overflow the fixed-point range): standardize the features "
            "or use a larger key")


def _validate_table(table: PartyTable, party: str, *, needs_label: bool) -> np.ndarray:
    X = np.asarray(table.X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] != len(table.ids):
        raise InputDataError(f"{party}: feature matrix does not match its {len(table.ids)} IDs")
    if not np.all(np.isfinite(X)):
        r, c = np.argwhere(~np.isfinite(X))[0]
        col = table.columns[c] if c < len(table.columns) else str(c)
        raise InputDataError(f"{party}: feature {col!r} is missing or not finite in row {r}")
    if needs_label:
        if table.label is None:
            raise InputDataError(f"{party}: the active party needs a label column")
        y = np.asarray(table.label, dtype=np.float64)
        if y.shape != (X.shape[0],) or not np.all(np.isfinite(y)):
            raise InputDataError(f"{party}: label is missing or not finite")
    if X.shape[0] == 0:
        raise InputDataError(f"{party}: no rows")
    return X


def plaintext_gradient_descent(
    X_active: np.ndarray, y: np.ndarray, X_passives: Sequence[np.ndarray], *,
    config: LinRegConfig, seed: int = 0,
) -> PlainResult:
    """The reference: the same schedule, preprocessing, loss and updates on the joined table."""
    prep_b = fit_preprocessing(X_active, method=config.preprocess,
                               intercept=config.fit_intercept)
    Xb = prep_b.apply(X_active)
    Xp = [fit_preprocessing(X, method=config.preprocess, intercept=False).apply(X)
          for X in X_passives]
    y = np.asarray(y, dtype=np.float64)
    wb = np.zeros(Xb.shape[1])
    wp = [np.zeros(X.shape[1]) for X in Xp]
    vb = np.zeros_like(wb)
    vp = [np.zeros_like(w) for w in wp]
    mu = config.momentum
    losses: list[float] = []
    epoch_losses: list[float] = []
    history: list[list[np.ndarray]] = []
    n = len(y)
    stop = False
    epochs_run = 0
    for epoch in range(config.epochs):
        batch_l = []
        for idx in epoch_batches(n, config.batch_size, seed, epoch):
            d = Xb[idx] @ wb - y[idx] + sum((X[idx] @ w for X, w in zip(Xp, wp, strict=True)),
                                            np.zeros(len(idx)))
            batch_l.append(batch_loss(d, [wb, *wp], config.l2))
            gb = gradient(d, Xb[idx], wb, config.l2)
            gp = [gradient(d, X[idx], w, config.l2) for X, w in zip(Xp, wp, strict=True)]
            vb = mu * vb + gb
            vp = [mu * v + g for v, g in zip(vp, gp, strict=True)]
            wb = wb - config.lr * vb
            wp = [w - config.lr * v for w, v in zip(wp, vp, strict=True)]
            history.append([wb.copy(), *[w.copy() for w in wp]])
        losses.extend(batch_l)
        epoch_losses.append(float(np.mean(batch_l)))
        epochs_run = epoch + 1
        prev = epoch_losses[-2] if len(epoch_losses) > 1 else None
        if converged(prev, epoch_losses[-1], config.tol):
            stop = True
            break
    return PlainResult(wb, wp, losses, epoch_losses, epochs_run, stop, history)


# =========================================================================== scheme adapters


class _Crypto:
    """What a data party does with C's public key: encrypt, combine, dot, mask, unmask."""

    scheme: str

    def encrypt(self, x: np.ndarray) -> Vec:
        raise NotImplementedError

    def grad_scale(self, m: int) -> float:
        """Factor applied to features before ``dot`` (CKKS: 1/m, so C sees a mean)."""
        raise NotImplementedError

    def loss_scale(self, m: int) -> float:
        """Factor applied to loss contributions before encryption (CKKS: 1/(2m))."""
        raise NotImplementedError

    def mask(self, v: Vec) -> tuple[Any, Any]:
        """(message to C, private mask state)."""
        raise NotImplementedError

    def unmask(self, ret: GradientReturn, state: Any) -> np.ndarray:
        """The owner's ``Σ d x · grad_scale`` from C's reply and its mask."""
        raise NotImplementedError


class _PaillierCrypto(_Crypto):
    scheme = "paillier"

    def __init__(self, pk: PaillierPublicKey) -> None:
        self.pk = pk

    def encrypt(self, x: np.ndarray) -> PaillierVector:
        return self.pk.encrypt_fixed(np.asarray(x, dtype=np.float64), FRAC_BITS)

    def grad_scale(self, m: int) -> float:
        return 1.0

    def loss_scale(self, m: int) -> float:
        return 1.0

    def mask(self, v: Vec) -> tuple[MaskedGradient, Any]:
        assert isinstance(v, PaillierVector)
        masked, R = masking.mask_ciphertexts(v)
        return MaskedGradient(masked), (R, v.frac_bits)

    def unmask(self, ret: GradientReturn, state: Any) -> np.ndarray:
        R, frac = state
        return masking.unmask_residues(ret.residues, R, self.pk.n, frac)


class _CKKSCrypto(_Crypto):
    scheme = "ckks"

    def __init__(self, ctx: CKKSContext) -> None:
        self.ctx = ctx

    def encrypt(self, x: np.ndarray) -> CKKSVector:
        return CKKSVector.encrypt(self.ctx, np.asarray(x, dtype=np.float64))

    def grad_scale(self, m: int) -> float:
        return 1.0 / m

    def loss_scale(self, m: int) -> float:
        return 1.0 / (2 * m)

    def mask(self, v: Vec) -> tuple[MaskedGradientCKKS, Any]:
        from vflcrypto.ckks import uniform_real_mask

        assert isinstance(v, CKKSVector)
        R = uniform_real_mask(self.ctx, len(v), CKKS_GRADIENT_BOUND)
        return MaskedGradientCKKS(v + R), R

    def unmask(self, ret: GradientReturn, state: Any) -> np.ndarray:
        R = state
        if ret.approx.shape != R.shape:
            raise ProtocolError("returned gradient has the wrong length")
        g = np.asarray(ret.approx, dtype=np.float64) - R
        if np.any(np.abs(g) > CKKS_GRADIENT_BOUND):
            raise EncodingOverflowError(
                f"a mean gradient exceeded the CKKS mask's bound {CKKS_GRADIENT_BOUND:g}: its "
                "declared hiding did not hold; standardize the features or use Paillier")
        return g


def _crypto_from(msg: PublicKeyMsg, channel: Channel) -> _Crypto:
    if msg.scheme == "paillier" and msg.paillier is not None:
        channel.keyring.add(msg.paillier)
        return _PaillierCrypto(msg.paillier)
    if msg.scheme == "ckks" and msg.ckks is not None:
        channel.keyring.add(msg.ckks)
        return _CKKSCrypto(msg.ckks)
    raise ProtocolError(f"malformed public key message for scheme {msg.scheme!r}")


# =========================================================================== roles


def _check_plan(plan: TrainingPlan, n_rows: int, party: str) -> None:
    if plan.n_rows != n_rows:
        raise InputDataError(f"{party} has {n_rows} rows, the active party {plan.n_rows}: "
                             "the parties' rows are not aligned")
    if (plan.epochs < 1 or plan.batch_size < 1 or not plan.lr > 0 or plan.l2 < 0
            or not 0 <= plan.momentum < 1):
        raise ProtocolError("implausible training plan")


def run_passive(channels: Mapping[str, Channel], table: PartyTable, *, index: int,
                name: str = "passive-0", preprocess: str = "none",
                record_history: bool = False, active: str = ACTIVE,
                coordinator: str = COORD) -> PartyResult:
    """Passive party A_index: steps 1, 2 (j >= 1), 4, 5 of the module docstring."""
    X_raw = _validate_table(table, name, needs_label=False)
    to_b, to_c = channels[active], channels[coordinator]
    crypto = _crypto_from(to_c.recv(PublicKeyMsg), to_b)
    plan = to_b.recv(TrainingPlan)
    _check_plan(plan, X_raw.shape[0], name)
    if plan.id_digest != ids_digest(table.ids, "linreg"):
        raise InputDataError(f"{name}: rows are not in the active party's order "
                             "(misaligned IDs); align first")
    prep = fit_preprocessing(X_raw, method=preprocess, intercept=False)
    X = prep.apply(X_raw)
    w = np.zeros(X.shape[1])
    vel = np.zeros_like(w)
    history: list[np.ndarray] = []
    bound = (paillier_value_bits(crypto.pk.bits, min(plan.batch_size, plan.n_rows),
                                 plan.n_passive, X.shape[1])
             if isinstance(crypto, _PaillierCrypto) else None)
    if bound is not None:
        _check_bound("a feature value", X, bound, name)
    for epoch in range(plan.epochs):
        for idx in epoch_batches(plan.n_rows, plan.batch_size, plan.seed, epoch):
            m = len(idx)
            Xb = X[idx]
            u = Xb @ w
            if bound is not None:
                _check_bound("a partial prediction u", u, bound, name)
                _check_bound("a weight", w, bound, name)
            ls = crypto.loss_scale(m)
            share = ls * passive_loss_share(u, w, plan.l2, m)
            to_b.send(EncryptedU(crypto.encrypt(u), crypto.encrypt(np.array([share]))))
            if index >= 1:
                partial = to_b.recv(PartialSum).values
                # re-randomized: B knows `partial` and could test guesses of u against the dot
                to_b.send(CrossTerm(partial.dot((2.0 * ls * u)[:, None]).rerandomize()))
            d = to_b.recv(EncryptedResidual).d
            if len(d) != m:
                raise ProtocolError(f"{name}: residual vector of length {len(d)}, batch has {m}")
            msg, state = crypto.mask(d.dot(Xb * crypto.grad_scale(m)))
            to_c.send(msg)
            raw = crypto.unmask(to_c.recv(GradientReturn), state)
            to_c.hold("gradient", raw)  # the secret behind the masked gradient (audit ground truth)
            g = raw / (m * crypto.grad_scale(m)) + plan.l2 * w
            vel = plan.momentum * vel + g
            w = w - plan.lr * vel
            if record_history:
                history.append(w.copy())
        if to_c.recv(Control).stop:
            break
    model = PartyModel(name, PASSIVE, tuple(table.columns), w, prep)
    return PartyResult(model, history)


def run_active(channels: Mapping[str, Channel], table: PartyTable, *,
               passives: Sequence[str], config: LinRegConfig, name: str = ACTIVE,
               record_history: bool = False, coordinator: str = COORD) -> PartyResult:
    """Active party B: sends the plan, then steps 2-5 of the module docstring."""
    X_raw = _validate_table(table, name, needs_label=True)
    y = np.asarray(table.label, dtype=np.float64)
    to_c = channels[coordinator]
    crypto = _crypto_from(to_c.recv(PublicKeyMsg), to_c)
    for p in passives:  # B receives ciphertexts under C's key from the passive parties
        channels[p].keyring.add(crypto.pk if isinstance(crypto, _PaillierCrypto) else crypto.ctx)
    n = X_raw.shape[0]
    batch = n if config.batch_size is None else min(config.batch_size, n)
    seed = config.seed if config.seed is not None else secrets.randbits(62)
    base = TrainingPlan(n, batch, config.epochs, float(config.lr), float(config.momentum),
                        float(config.l2),
                        config.tol, int(seed), len(passives), b"")
    to_c.send(base)
    digest = ids_digest(table.ids, "linreg")
    for p in passives:
        channels[p].send(replace(base, id_digest=digest))
    prep = fit_preprocessing(X_raw, method=config.preprocess, intercept=config.fit_intercept)
    X = prep.apply(X_raw)
    w = np.zeros(X.shape[1])
    vel = np.zeros_like(w)
    history: list[np.ndarray] = []
    bound = (paillier_value_bits(crypto.pk.bits, batch, len(passives), X.shape[1])
             if isinstance(crypto, _PaillierCrypto) else None)
    if bound is not None:
        _check_bound("a feature value", X, bound, name)
    for epoch in range(config.epochs):
        for idx in epoch_batches(n, batch, seed, epoch):
            m = len(idx)
            Xb = X[idx]
            r = Xb @ w - y[idx]
            if bound is not None:
                _check_bound("a residual u_B - y", r, bound, name)
                _check_bound("a weight", w, bound, name)
            ls = crypto.loss_scale(m)
            got = [channels[p].recv(EncryptedU) for p in passives]
            for g in got:
                if len(g.u) != m or len(g.partial_loss) != 1:
                    raise ProtocolError(f"{name}: encrypted u of the wrong length")
            # running sums [[Σ_{l<j} u_l]] for the cross terms
            U = got[0].u
            cross = []
            for j in range(1, len(passives)):
                channels[passives[j]].send(PartialSum(U.rerandomize()))
                U = U + got[j].u
            for j in range(1, len(passives)):
                cross.append(channels[passives[j]].recv(CrossTerm).value)
            # Fresh randomness from B: a passive party knows its own [[u_k]] (and the partial
            # sum it received); without it, [[d]] / ([[u_k]] [[partial]]) = 1 + (u_B - y) n
            # would give the last passive party B's residuals, i.e. the labels at Θ = 0.
            d = (U + r).rerandomize()
            for p in passives:
                channels[p].send(EncryptedResidual(d))
            S = U.dot((2.0 * ls * r)[:, None])
            for g in got:
                S = S + g.partial_loss
            for c in cross:
                S = S + c
            S = S + np.array([ls * active_loss_share(r, w, config.l2, m)])
            to_c.send(EncryptedLoss(S))
            msg, state = crypto.mask(d.dot(Xb * crypto.grad_scale(m)))
            to_c.send(msg)
            raw = crypto.unmask(to_c.recv(GradientReturn), state)
            to_c.hold("gradient", raw)
            gB = raw / (m * crypto.grad_scale(m)) + config.l2 * w
            vel = config.momentum * vel + gB
            w = w - config.lr * vel
            if record_history:
                history.append(w.copy())
        if to_c.recv(Control).stop:
            break
    model = PartyModel(name, ACTIVE, tuple(table.columns), w, prep, table.label_name)
    return PartyResult(model, history)


def run_coordinator(channels: Mapping[str, Channel], *, scheme: str = "paillier",
                    key_bits: int = DEFAULT_KEY_BITS, allow_insecure: bool = False,
                    active: str = ACTIVE, passives: Sequence[str] = ("passive-0",),
                    keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
                    ckks_context: CKKSContext | None = None) -> CoordinatorResult:
    """Coordinator C: step 0 (keys), 5 (decrypt loss and masked gradients), 6 (stop)."""
    if scheme == "paillier":
        pk, sk = keys if keys is not None else generate_keypair(key_bits,
                                                                allow_insecure=allow_insecure)
        key_msg = PublicKeyMsg("paillier", pk, None)
        secret: Any = sk
    elif scheme == "ckks":
        ctx = ckks_context if ckks_context is not None else CKKSContext.generate(
            allow_insecure=allow_insecure)
        key_msg = PublicKeyMsg("ckks", None, ctx.public())
        secret = ctx
    else:
        raise InputDataError(f"unknown scheme {scheme!r}")
    channels[active].hold("secret_key", secret)
    parties = [active, *passives]
    for p in parties:  # C accepts ciphertexts under its own key
        channels[p].keyring.add(key_msg.paillier if key_msg.paillier is not None else key_msg.ckks)
        channels[p].send(key_msg)
    plan = channels[active].recv(TrainingPlan)
    if plan.n_passive != len(passives):
        raise ProtocolError("the plan names a different number of passive parties")
    losses: list[float] = []
    epoch_losses: list[float] = []
    stop = False
    epochs_run = 0
    for epoch in range(plan.epochs):
        batch_l = []
        for idx in epoch_batches(plan.n_rows, plan.batch_size, plan.seed, epoch):
            m = len(idx)
            enc_loss = channels[active].recv(EncryptedLoss).value
            if len(enc_loss) != 1:
                raise ProtocolError("loss must be a single value")
            if scheme == "paillier":
                S = float(secret.decrypt_fixed(enc_loss)[0])
                batch_l.append(S / (2 * m))
            else:
                batch_l.append(float(enc_loss.decrypt(secret)[0]))
            for p in parties:
                kind = MaskedGradient if scheme == "paillier" else MaskedGradientCKKS
                vec = channels[p].recv(kind).values
                channels[p].send(_reveal_masked(secret, vec))
        losses.extend(batch_l)
        epoch_losses.append(float(np.mean(batch_l)))
        epochs_run = epoch + 1
        prev = epoch_losses[-2] if len(epoch_losses) > 1 else None
        stop = converged(prev, epoch_losses[-1], plan.tol)
        for p in parties:
            channels[p].send(Control(epoch, stop))
        if stop:
            break
    return CoordinatorResult(losses, epoch_losses, epochs_run, stop)


def _reveal_masked(secret: Any, vec: Vec) -> GradientReturn:
    """C's decryption of a masked vector, in the form it returns to the vector's owner."""
    if isinstance(vec, PaillierVector):
        n = int(secret.public_key.n)
        return GradientReturn(IntVector(v % n for v in secret.decrypt(vec)), np.zeros(0))
    approx = vec.decrypt(secret)
    q = 2.0**CKKS_RETURN_FRAC_BITS
    return GradientReturn(IntVector(), np.round(approx * q) / q)


# =========================================================================== local runs


def _passive_names(k: int) -> list[str]:
    return [f"passive-{i}" for i in range(k)]


def run_local(active: PartyTable, passives: Sequence[PartyTable], *,
              config: LinRegConfig | None = None, timeout: float = 120.0,
              allow_insecure: bool = False, record_history: bool = False,
              keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
              ckks_context: CKKSContext | None = None,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None,
              ) -> LinRegRun:
    """Run all roles in one process (threads over in-memory Channels).

    ``overrides`` replaces a party's task (tests: a stalling or hostile party); ``tap``
    (audits) keeps what each party received and holds.
    """
    cfg = config if config is not None else LinRegConfig()
    if not passives:
        raise InputDataError("need at least one passive party")
    names = _passive_names(len(passives))
    endpoints = [Endpoint(ACTIVE, ACTIVE), Endpoint(COORD, COORD),
                 *[Endpoint(p, PASSIVE) for p in names]]
    links = [(ACTIVE, COORD), *[(ACTIVE, p) for p in names], *[(COORD, p) for p in names]]
    net = LocalNetwork(endpoints, links=links, timeout=timeout, transcript=Transcript(tap),
                       allow_insecure=allow_insecure, run_id=secrets.token_hex(8))
    tasks: dict[str, Callable[[], Any]] = {
        COORD: lambda: run_coordinator(net.channels(COORD), scheme=cfg.scheme,
                                       key_bits=cfg.key_bits, allow_insecure=allow_insecure,
                                       passives=names, keys=keys, ckks_context=ckks_context),
        ACTIVE: lambda: run_active(net.channels(ACTIVE), active, passives=names, config=cfg,
                                   record_history=record_history),
    }
    for i, (pname, table) in enumerate(zip(names, passives, strict=True)):
        tasks[pname] = (lambda i=i, pname=pname, table=table: run_passive(
            net.channels(pname), table, index=i, name=pname, preprocess=cfg.preprocess,
            record_history=record_history))
    for pname, fn in (overrides or {}).items():
        tasks[pname] = (lambda fn=fn, pname=pname: fn(net.channels(pname)))
    t0 = time.perf_counter()
    res = run_parties(tasks, network=net)
    seconds = time.perf_counter() - t0
    return LinRegRun(res[ACTIVE], [res[p] for p in names], res[COORD], net.transcript, seconds)


def save_models(models: Sequence[PartyModel], model_dir: str | os.PathLike[str]) -> list[Path]:
    """One ``<name>.npz`` per party (no pickle); each party would keep only its own file."""
    out = []
    for m in models:
        path = Path(model_dir) / f"{m.name}.npz"
        m.save(path)
        out.append(path)
    return out


def predict_plain(models: Sequence[PartyModel], tables: Sequence[PartyTable]) -> np.ndarray:
    """Reference prediction ``Σ_party prep(X)·Θ`` (tests only: every party's data in one place)."""
    return sum((m.scores(t.X) for m, t in zip(models, tables, strict=True)),
               np.zeros(len(tables[0])))


def run_predict_passive(channels: Mapping[str, Channel], model: PartyModel,
                        table: PartyTable) -> None:
    """Passive party's prediction role: send ``[[u_k]]`` for the query rows to B."""
    X = _validate_table(table, model.name, needs_label=False)
    to_b, to_c = channels[ACTIVE], channels[COORD]
    crypto = _crypto_from(to_c.recv(PublicKeyMsg), to_b)
    plan = to_b.recv(PredictPlan)
    if plan.n_rows != X.shape[0] or plan.id_digest != ids_digest(table.ids, "linreg"):
        raise InputDataError(f"{model.name}: query rows are not aligned with the active party's")
    assert isinstance(crypto, _PaillierCrypto)
    to_b.send(PredictPartial(crypto.encrypt(model.scores(X))))


def run_predict_active(channels: Mapping[str, Channel], model: PartyModel, table: PartyTable,
                       passives: Sequence[str]) -> np.ndarray:
    """Active party's prediction role: sum the passive ``[[u_k]]``, mask, have C decrypt; return predictions."""
    X = _validate_table(table, model.name, needs_label=False)
    to_c = channels[COORD]
    crypto = _crypto_from(to_c.recv(PublicKeyMsg), to_c)
    assert isinstance(crypto, _PaillierCrypto)
    for p in passives:
        channels[p].keyring.add(crypto.pk)
    n = X.shape[0]
    to_c.send(PredictPlan(n, b""))
    for p in passives:
        channels[p].send(PredictPlan(n, ids_digest(table.ids, "linreg")))
    total: PaillierVector | None = None
    for p in passives:
        u = channels[p].recv(PredictPartial).u
        if len(u) != n:
            raise ProtocolError("partial prediction of the wrong length")
        total = u if total is None else total + u
    assert total is not None
    masked, R = masking.mask_ciphertexts(total)
    to_c.send(PredictMasked(masked))
    ret = to_c.recv(PredictReturn)
    partial = masking.unmask_residues(ret.residues, R, crypto.pk.n, total.frac_bits)
    to_c.hold("passive_sum", partial)  # the secret behind the masked sum (audit ground truth)
    return partial + model.scores(X)


def run_predict_coordinator(channels: Mapping[str, Channel], key_bits: int, allow_insecure: bool,
                            passives: Sequence[str]) -> None:
    """Coordinator's prediction role: a fresh key pair, then decrypt B's masked sum only."""
    pk, sk = generate_keypair(key_bits, allow_insecure=allow_insecure)
    channels[ACTIVE].hold("secret_key", sk)
    channels[ACTIVE].keyring.add(pk)
    for p in [ACTIVE, *passives]:
        channels[p].send(PublicKeyMsg("paillier", pk, None))
    channels[ACTIVE].recv(PredictPlan)
    vec = channels[ACTIVE].recv(PredictMasked).values
    channels[ACTIVE].send(PredictReturn(_reveal_masked(sk, vec).residues))


def predict_local(model_dir: str | os.PathLike[str] | Sequence[PartyModel],
                  tables: Sequence[PartyTable], *, key_bits: int = DEFAULT_KEY_BITS,
                  allow_insecure: bool = False, timeout: float = 120.0,
                  tap: AuditTap | None = None) -> tuple[np.ndarray, Transcript]:
    """Secure prediction: ``tables`` = [active, passive-0, ...] query rows (aligned).

    ``model_dir`` holds ``active.npz`` and ``passive-<i>.npz`` (or pass the models). Runs
    the declared prediction messages; returns B's predictions and the transcript.
    """
    if isinstance(model_dir, str | os.PathLike):
        d = Path(model_dir)
        models = [PartyModel.load(d / f"{ACTIVE}.npz")]
        models += [PartyModel.load(d / f"{p}.npz") for p in _passive_names(len(tables) - 1)]
    else:
        models = list(model_dir)
    if len(models) != len(tables) or len(tables) < 2:
        raise InputDataError("need the active table and one table per passive party")
    for m, t in zip(models, tables, strict=True):
        if tuple(t.columns) != tuple(m.columns):
            raise InputDataError(f"{m.name}: query columns {list(t.columns)} differ from the "
                                 f"model's {list(m.columns)}")
    names = _passive_names(len(tables) - 1)
    endpoints = [Endpoint(ACTIVE, ACTIVE), Endpoint(COORD, COORD),
                 *[Endpoint(p, PASSIVE) for p in names]]
    links = [(ACTIVE, COORD), *[(ACTIVE, p) for p in names], *[(COORD, p) for p in names]]
    net = LocalNetwork(endpoints, links=links, timeout=timeout, transcript=Transcript(tap),
                       allow_insecure=allow_insecure, run_id=secrets.token_hex(8))
    tasks: dict[str, Callable[[], Any]] = {
        COORD: lambda: run_predict_coordinator(net.channels(COORD), key_bits, allow_insecure, names),
        ACTIVE: lambda: run_predict_active(net.channels(ACTIVE), models[0], tables[0], names),
    }
    for pname, m, t in zip(names, models[1:], tables[1:], strict=True):
        tasks[pname] = (lambda pname=pname, m=m, t=t: run_predict_passive(net.channels(pname), m, t))
    res = run_parties(tasks, network=net)
    return res[ACTIVE], net.transcript


# =========================================================================== demo & audit


def synthetic_split(n_rows: int = 200, p_active: int = 3, p_passive: Sequence[int] = (2,),
                    noise: float = 0.1, seed: int = 7) -> tuple[PartyTable, list[PartyTable]]:
    """A deterministic synthetic regression split (non-secret test data: numpy PRNG)."""
    rng = np.random.default_rng(seed)
    ids = tuple(f"id{i:05d}" for i in range(n_rows))
    Xb = rng.normal(size=(n_rows, p_active))
    Xps = [rng.normal(size=(n_rows, p)) for p in p_passive]
    w_true = rng.normal(size=p_active + sum(p_passive))
    y = np.hstack([Xb, *Xps]) @ w_true + 1.5 + noise * rng.normal(size=n_rows)
    active = PartyTable(ids, tuple(f"b{j}" for j in range(p_active)), Xb, y, "y")
    passives = [PartyTable(ids, tuple(f"a{k}_{j}" for j in range(p)), X)
                for k, (p, X) in enumerate(zip(p_passive, Xps, strict=True))]
    return active, passives


def demo_step(ctx: Any) -> dict[str, Any]:
    """Secure linear regression on a small deterministic synthetic split (< 15 s at 2048 bits)."""
    from vflcrypto.metrics import r2_score, rmse

    active, passives = synthetic_split(n_rows=120, p_active=3, p_passive=(2,))
    epochs = 3 if ctx.quick else 8
    cfg = LinRegConfig(epochs=epochs, lr=0.5, key_bits=ctx.key_bits, fit_intercept=True,
                       tol=None)
    run = run_local(active, passives, config=cfg, allow_insecure=ctx.allow_insecure)
    ref = plaintext_gradient_descent(active.X, active.label, [p.X for p in passives], config=cfg)
    pred = predict_plain(run.models, [active, *passives])
    diff = float(np.max(np.abs(run.active.model.weights - ref.active_weights)))
    ctx.say(f"synthetic split: {len(active)} rows, B {active.X.shape[1]} + A "
            f"{passives[0].X.shape[1]} features, Paillier {ctx.key_bits} bits, {epochs} epochs")
    ctx.say(f"loss per epoch (seen by C): {', '.join(f'{v:.4f}' for v in run.losses)}")
    ctx.say(f"train RMSE {rmse(active.label, pred):.4f}, R² {r2_score(active.label, pred):.4f}; "
            f"max |Θ_B − plaintext reference| = {diff:.2e}")
    ctx.say(audit(run.transcript).to_text())
    model_dir = Path(ctx.workdir) / "linreg_model"
    save_models(run.models, model_dir)
    return {"rows": len(active), "epochs": epochs, "final_loss": run.losses[-1],
            "rmse": rmse(active.label, pred), "max_weight_diff_vs_plaintext": diff,
            "bytes": run.transcript.total_bytes, "model_dir": str(model_dir)}


def _streams(tap: AuditTap, receiver: str, kind: type, senders: Sequence[str]) -> list[list[Any]]:
    return [tap.received(receiver, kind, sender=p) for p in senders]


def _ciphertext_findings(tap: AuditTap, n: int, passives: Sequence[str]) -> list[EmpiricalFinding]:
    """A data party tries to read, without C's key, every ciphertext it received.

    Each ciphertext is first divided by the ciphertexts the receiver knows went into it
    (a passive party knows the [[u_k]] it sent and the partial sum it received, both
    summed into [[d]]), then decoded if no randomness is left (c = 1 + m n).
    """
    parts: dict[str, list[tuple[str, int | None]]] = {}
    fields = {EncryptedU: ("u", "partial_loss"), PartialSum: ("values",), CrossTerm: ("value",),
              PredictPartial: ("u",)}
    for r in tap.records():
        for attr in fields.get(type(r.message), ()):
            cts = getattr(r.message, attr).ciphertexts()
            parts.setdefault(r.entry.kind, []).extend(
                (r.entry.receiver, v) for v in unrandomized_paillier(n, cts))
    for j, p in enumerate(passives):
        own = tap.received(ACTIVE, EncryptedU, sender=p)
        partial = tap.received(p, PartialSum)
        for t, msg in enumerate(tap.received(p, EncryptedResidual)):
            known = [own[t].u.ciphertexts()] + ([partial[t].values.ciphertexts()] if j else [])
            parts.setdefault("linreg.encrypted_residual", []).extend(
                (p, v) for v in strip_known_paillier(n, msg.d.ciphertexts(), known))
    return [unrandomized_finding("/".join(sorted({o for o, _ in items})), kind, [v for _, v in items])
            for kind, items in parts.items()]


def _loss_aggregate_finding(tap: AuditTap) -> EmpiricalFinding:
    """C decrypts one loss per batch: a batch of one row is one row's squared residual."""
    plan = tap.received(COORD, TrainingPlan)[0]
    sizes = [len(b) for e in range(plan.epochs) for b in epoch_batches(plan.n_rows, plan.batch_size, plan.seed, e)]
    sizes = sizes[: len(tap.received(COORD, EncryptedLoss))]
    single = sum(s == 1 for s in sizes)
    return EmpiricalFinding(
        COORD, "losses that C decrypted over a single row", single / max(1, len(sizes)), 0.0,
        f"from the plan it received, the {len(sizes)} losses C decrypted sum {min(sizes, default=0)} to "
        f"{max(sizes, default=0)} rows; {single} are one row's squared residual d_i^2",
        attacks=("linreg.encrypted_loss",), protection=Protection.AGGREGATE, flagged=single > 0,
        samples=len(sizes), detects="any loss over a single row")


def audit_run(key_bits: int = DEFAULT_KEY_BITS, *, allow_insecure: bool = False, batch_size: int = 25,
              n_rows: int = 200) -> AuditOutcome:
    """Paillier and CKKS training runs plus a secure prediction; every attack reads the run's tap.

    * data parties: try to read, without C's key, each ciphertext they received;
    * C: decrypts the masked gradients with its own key (Paillier and CKKS) and the masked
      prediction sum, and tests them (uniform, fresh per iteration, uncorrelated with the
      true gradients, which serve as ground truth only); from the plan it received it
      counts losses that sum a single row.
    ``n_rows`` = 200 rows, 4 + 4 + 3 features, mini-batches of ``batch_size`` = 25 over 2
    epochs (16 iterations), so each mask test sees about 200 values.
    """
    from vflcrypto.ckks import mask_bound

    insecure = allow_insecure
    active, passives = synthetic_split(n_rows=n_rows, p_active=4, p_passive=(4, 3))
    names = ["active", *_passive_names(len(passives))]
    cfg = LinRegConfig(epochs=2, lr=0.1, key_bits=key_bits, tol=None, batch_size=batch_size)
    tap, ckks_tap, pred_tap = AuditTap(), AuditTap(), AuditTap()
    run = run_local(active, passives, config=cfg, allow_insecure=insecure, tap=tap)
    ckks_run = run_local(active, passives, config=replace(cfg, scheme="ckks"), allow_insecure=insecure,
                         tap=ckks_tap)
    _, pred_transcript = predict_local(run.models, [active, *passives], key_bits=key_bits,
                                       allow_insecure=insecure, tap=pred_tap)
    sk = tap.held_one(COORD, "secret_key")
    n = int(sk.public_key.n)
    findings = _ciphertext_findings(tap, n, names[1:])
    pred_sk = pred_tap.held_one(COORD, "secret_key")
    findings += _ciphertext_findings(pred_tap, int(pred_sk.public_key.n), ())
    views = [[[v % n for v in sk.decrypt(m.values)] for m in stream]
             for stream in _streams(tap, COORD, MaskedGradient, names)]
    findings += ring_mask_findings(COORD, "linreg.masked_gradient", "masked gradient", views, n,
                                   truth=[tap.held(p, "gradient") for p in names])
    ctx = ckks_tap.held_one(COORD, "secret_key")
    ckks_views = [[m.values.decrypt(ctx) for m in stream]
                  for stream in _streams(ckks_tap, COORD, MaskedGradientCKKS, names)]
    findings += real_mask_findings(COORD, "linreg.masked_gradient_ckks", "masked gradient (CKKS)",
                                   ckks_views, mask_bound(ctx) - CKKS_GRADIENT_BOUND,
                                   truth=[ckks_tap.held(p, "gradient") for p in names])
    pn = int(pred_sk.public_key.n)
    pred_views = [[[v % pn for v in pred_sk.decrypt(m.values)] for m in pred_tap.received(COORD, PredictMasked)]]
    findings += ring_mask_findings(COORD, "linreg.predict_masked", "masked prediction sum", pred_views, pn,
                                   truth=[pred_tap.held(ACTIVE, "passive_sum")])
    findings.append(_loss_aggregate_finding(tap))
    findings.append(EmpiricalFinding(
        COORD, "losses C learned (one per iteration)", float(len(run.losses)), None,
        "declared leakage: C sees the total loss of every iteration", attacks=("linreg.encrypted_loss",),
        flagged=bool(run.losses), samples=len(run.losses)))
    merged = Transcript()
    for t in (run.transcript, ckks_run.transcript, pred_transcript):
        merged.merge(t)
    report = audit(merged)
    report.check()
    return AuditOutcome("linreg", report, tuple(findings))


SPEC = ProtocolSpec(
    name="linreg",
    title="Secure federated linear regression",
    roles={},
    run_local=run_local,
    audit=audit_run,
    config=LinRegConfig,
    demo=demo_step,
    demo_order=30,
)
