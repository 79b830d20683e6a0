"""The declared messages of secure linear regression (``linreg.*``) and its public constants."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vflcrypto.he.ckks import (
    DEFAULT_COEFF_MOD_BIT_SIZES,
    DEFAULT_GLOBAL_SCALE_BITS,
    MASK_MAX_BITS,
    CKKSContext,
    CKKSVector,
)
from vflcrypto.he.flooding import DEFAULT_STAT_BITS
from vflcrypto.he.paillier import PaillierPublicKey, PaillierVector
from vflcrypto.runtime.declarations import PERFECT, Protection, declare
from vflcrypto.runtime.wire import IntVector

__all__ = ["ACTIVE", "CKKS_GRADIENT_BOUND", "CKKS_HIDING_BITS", "CKKS_MASK_LEVELS", "CKKS_RESIDUAL_RMS", "COORD",
           "FRAC_BITS", "PASSIVE", "SCHEMES", "Control", "CrossTerm", "EncryptedLoss", "EncryptedResidual",
           "EncryptedU", "GradientReturn", "GradientReturnCKKS", "MaskedGradient", "MaskedGradientCKKS", "Obfuscators",
           "PartialSum", "PredictMasked", "PredictPartial", "PredictPlan", "PredictReturn", "PublicKeyMsg",
           "TrainingPlan"]

SCHEMES = ("paillier", "ckks")
FRAC_BITS = 32  # fixed-point fractional bits of u, d and features (gradients carry 64)
CKKS_GRADIENT_BOUND = 2.0**6  # |mean gradient| the CKKS mask is sized for
# |g_j| = |mean_i x_ij d_i| <= rms(x_j) * rms(d) over a batch (Cauchy-Schwarz): a run is refused
# before training unless every column's batch rms is <= BOUND / CKKS_RESIDUAL_RMS and the label's
# (the residual at Θ = 0) is <= CKKS_RESIDUAL_RMS; a gradient past the bound later still stops the run
CKKS_RESIDUAL_RMS = 4.0
CKKS_MASK_LEVELS = 1  # levels a masked gradient has left: a fresh [[d]] at the default depth (3) after a dot (2)
# = vflcrypto.he.ckks.mask_hiding_bits(default context, CKKS_GRADIENT_BOUND, CKKS_MASK_LEVELS) (checked by a test)
_CKKS_ROOM_BITS = min(sum(DEFAULT_COEFF_MOD_BIT_SIZES[:CKKS_MASK_LEVELS + 1]) - DEFAULT_GLOBAL_SCALE_BITS - 1,
                      MASK_MAX_BITS)
CKKS_HIDING_BITS = max(0, math.floor(math.log2((2.0**_CKKS_ROOM_BITS - CKKS_GRADIENT_BOUND) / CKKS_GRADIENT_BOUND)))
ACTIVE, PASSIVE, COORD = "active", "passive", "coordinator"




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
                 "tolerance, schedule seed, whether C supplies obfuscators, whether batches of no more rows than a "
                 "passive party's features are allowed; to passive parties also a "
                 "SHA-256 of the ordered aligned IDs they already hold (to detect misalignment)")
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
    obfuscators: bool = False  # C supplies each passive party's obfuscators (linreg.obfuscators)
    small_batches: bool = False  # batches of no more rows than a passive party's features allowed (residuals leak)


@declare("linreg.obfuscators", sender=COORD, receiver=PASSIVE,
         protection=Protection.CIPHERTEXT, key_owner=COORD,
         reveals="nothing: fresh encryptions of zero under C's key, one per value A_k encrypts next "
                 "([[u_k]] of the batch's rows, then [[P_k]]), each used once and never shown to B. "
                 "Nothing new to C either: C chose them, it can recover the randomness of any "
                 "ciphertext under its key, and it decrypts only what it decrypts anyway "
                 "(the loss and masked gradients). A dishonest C could make [[u_k]] readable by B "
                 "(obfuscators B knows, or reused across iterations: c_t / c_t' = 1 + (u_t - u_t') n); "
                 "the semi-honest, non-colluding model excludes that")
@dataclass(frozen=True)
class Obfuscators:
    values: PaillierVector  # m + 1 encryptions of zero for a batch of m rows


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
         reveals="the receiver's own masked gradient, decrypted (Paillier: exact residues mod n); it removes its "
                 "own mask and learns its own gradient (which it is entitled to)")
@dataclass(frozen=True)
class GradientReturn:
    residues: IntVector  # decrypted masked residues mod n


@declare("linreg.gradient_return_ckks", sender=COORD, receiver=(ACTIVE, PASSIVE),
         protection=(Protection.PLAINTEXT, Protection.FLOODED),
         reveals="the receiver's own masked mean gradient, decrypted under CKKS and flooded by C with fresh Gaussian "
                 f"noise of σ = 2^{DEFAULT_STAT_BITS // 2}·√(12V)·t (V: the values C returns to it over the run, t: "
                 "the bound on the CKKS error's rms; about 22 bits above the error, 2^-11 at the defaults): it removes "
                 "its own mask and learns its own gradient to that precision, and C's key-dependent decryption error "
                 f"only within a divergence of 2^-{DEFAULT_STAT_BITS}/24 (IND-CPA^D, Li-Micciancio 2021)")
@dataclass(frozen=True)
class GradientReturnCKKS:
    values: np.ndarray  # the flooded decryptions


@declare("linreg.control", sender=COORD, receiver=(ACTIVE, PASSIVE),
         protection=Protection.PUBLIC,
         reveals="one bit per epoch: whether C's convergence test on the loss fired (under CKKS on the losses as "
                 "flooded, so the bit is a function of flooded decryptions only)")
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
