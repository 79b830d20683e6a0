"""The arithmetic of SSHE logistic regression: the share ring, fixed point, truncation, the reference.

**Share ring.** Weights, logits, errors and gradients are additive shares in
``Z_Q``, ``Q = 2^256`` (:data:`RING_BITS`): ``x = <x>_A + <x>_P mod Q``, each share
uniform on its own. Python integers, so no word-size wrap to worry about.

**Fixed point.** Features at :data:`FEATURE_FRAC` = 20 fractional bits (each party
quantizes its standardized columns once, and the reference uses the same quantized
columns), weights at :data:`WEIGHT_FRAC` = 32. The scale only grows through the epoch —
``z = X w`` carries 2^(20+32); the error ``e = z/4 + 1/2 − y`` is kept at that scale
times 4 (``4e = z + 2 − 4y`` needs no division); the gradient ``Xᵀe`` adds 20 more bits
and the step ``η/m`` (:data:`STEP_FRAC` = 48 bits) 48 more — and is brought back to the
weights' 32 bits once per epoch by SecureML's local truncation (Mohassel & Zhang, S&P
2017, Thm. 1): each party shifts its own share, which is off by at most one unit of
2^-32 and fails with probability below 2^(l+1−256) for values of ``l`` bits; the update
is below 2^170 (|logit| < 2^20, 2^17 rows), so below 2^-85 per weight and epoch.

**Sigmoid.** FATE's first-order Taylor expansion at 0, ``σ(z) ≈ 1/2 + z/4`` (SecretFlow's
HESS-LR uses the minimax line ``1/2 + z/8``). The gradient ``Xᵀ(1/2 + z/4 − y)/m`` is
then exactly the gradient of ``(1/8m)·Σ (z − (4y − 2))²``: the protocol fits a
least-squares regression of the logit on the targets ±2 (the Fisher-discriminant
direction), not the maximum-likelihood logistic model. Classification accuracy and AUC
stay close to logistic regression on data where the classes are roughly linearly
separable with moderate margins; ``σ(z)`` of the learned logits is not calibrated, and
rows far on the right side of the boundary still pull the weights (a squared loss
punishes confident correct predictions). FATE's Taylor loss
``log 2 − (2y−1)·z/2 + z²/8`` is the matching objective (:func:`taylor_loss`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vflcrypto.errors import InputDataError
from vflcrypto.ml.preprocess import standardize_columns
from vflcrypto.sharing.masking import STAT_SECURITY_BITS
from vflcrypto.spec import option

__all__ = ["FEATURE_BITS", "FEATURE_FRAC", "RING", "RING_BITS", "STEP_FRAC", "TRUNC_BITS", "WEIGHT_FRAC",
           "SSHELRParams", "decode_shares", "encode_features", "error_offset", "fold_width", "gradient_mask_bits",
           "logit_mask_bits", "plaintext_fit", "prepare_active", "prepare_passive", "step_scale", "taylor_loss",
           "taylor_sigmoid", "truncate_share"]

RING_BITS = 256
RING = 1 << RING_BITS
FEATURE_FRAC = 20  # fractional bits of a quantized, standardized feature
FEATURE_BITS = 8  # |standardized value| < 2^8 (a z-score is at most sqrt(rows - 1): holds up to 65,537 rows)
WEIGHT_FRAC = 32  # fractional bits of a weight share
STEP_FRAC = 48  # fractional bits of the step η/m
STAT_BITS = STAT_SECURITY_BITS  # statistical hiding of a product mask (40 bits)
#: the update c·Xᵀ(4e) carries 2^(2·20 + 32 + 2 + 48); shifting by this leaves the weights' 2^32
TRUNC_BITS = 2 * FEATURE_FRAC + 2 + STEP_FRAC


@dataclass
class SSHELRParams:
    """Training parameters (the one source of the ``train sshelr`` flags)."""

    epochs: int = option(20, "full-batch epochs")
    learning_rate: float = option(0.3, "step size of full-batch gradient descent", flag="--lr")

    def validate(self) -> None:
        if self.epochs < 1 or not 0 < self.learning_rate <= 16:
            raise InputDataError("epochs >= 1 and a learning rate in (0, 16] are required")


def quantize(Z: np.ndarray, name: str) -> np.ndarray:
    """``Z`` on the grid of :data:`FEATURE_FRAC` bits (both the protocol and the reference use it)."""
    if np.abs(Z).max(initial=0.0) >= 2.0 ** FEATURE_BITS:
        raise InputDataError(f"{name}: a standardized value is beyond ±{2 ** FEATURE_BITS}")
    return np.rint(Z * 2.0 ** FEATURE_FRAC) / 2.0 ** FEATURE_FRAC


def encode_features(Z: np.ndarray) -> np.ndarray:
    """The integers of quantized features (exact: they are on the grid already)."""
    return np.rint(np.asarray(Z) * 2.0 ** FEATURE_FRAC).astype(np.int64)


def prepare_passive(X: np.ndarray) -> np.ndarray:
    """The passive party's standardized, quantized columns."""
    Z = standardize_columns(X, "passive party")
    if Z.shape[1] == 0:
        raise InputDataError("the passive party needs at least one column")
    return quantize(Z, "passive party")


def prepare_active(X: np.ndarray | None, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The active party's standardized, quantized columns plus an intercept column, and its 0/1 labels."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or not np.isin(y, (0.0, 1.0)).all() or len(np.unique(y)) != 2:
        raise InputDataError("logistic regression needs labels 0 and 1, both present")
    X = np.zeros((len(y), 0)) if X is None else X
    Z = standardize_columns(X, "active party")
    if len(Z) != len(y):
        raise InputDataError(f"{len(Z)} feature rows for {len(y)} labels")
    return np.hstack([quantize(Z, "active party"), np.ones((len(y), 1))]), y


def step_scale(learning_rate: float, rows: int) -> int:
    """``c = round(η/m · 2^48)``: the public integer step every party multiplies its gradient share by."""
    c = round(learning_rate / rows * 2.0 ** STEP_FRAC)
    if c < 1:
        raise InputDataError(f"learning rate {learning_rate} over {rows} rows is below the step's fixed-point grid")
    return c


def error_offset(y: np.ndarray) -> list[int]:
    """The active party's addend to its logit share: ``(2 − 4y)·2^(20+32)``, so the shares sum to 4e."""
    scale = 1 << (FEATURE_FRAC + WEIGHT_FRAC)
    return [(2 - 4 * int(v)) * scale for v in y]


def logit_mask_bits(columns: int) -> int:
    """Bits bounding ``|X s|`` for a share ``s < Q`` and quantized rows of ``columns`` values (public)."""
    return RING_BITS + FEATURE_FRAC + FEATURE_BITS + max(1, math.ceil(math.log2(columns)))


def gradient_mask_bits(rows: int) -> int:
    """Bits bounding ``|Xᵀ s|`` for shares ``s < Q`` over ``rows`` rows (public)."""
    return RING_BITS + FEATURE_FRAC + FEATURE_BITS + max(1, math.ceil(math.log2(rows)))


def fold_width(bits: int) -> int:
    """Slot width of a folded masked product ``X s + r + 2^bits`` (< 2^(bits + 41)): one guard bit more."""
    return bits + STAT_BITS + 2


def truncate_share(share: Sequence[int], bits: int, first: bool) -> list[int]:
    """SecureML's local truncation of one party's share by ``bits``: the first party shifts its
    share, the other shifts the negation of its own; the sum is the shifted value, ±1."""
    if first:
        return [(int(s) % RING) >> bits for s in share]
    return [(RING - ((RING - int(s) % RING) >> bits)) % RING for s in share]


def decode_shares(a: Sequence[int], b: Sequence[int], frac_bits: int = WEIGHT_FRAC) -> np.ndarray:
    """The value of two shares (centred in (−Q/2, Q/2]) as floats."""
    if len(a) != len(b):
        raise InputDataError(f"shares of {len(a)} and {len(b)} values")
    half = RING // 2
    vals = [(int(x) + int(y)) % RING for x, y in zip(a, b, strict=True)]
    return np.array([(v - RING if v > half else v) / 2.0 ** frac_bits for v in vals], dtype=np.float64)


def taylor_sigmoid(z: np.ndarray) -> np.ndarray:
    """FATE's first-order Taylor sigmoid ``1/2 + z/4``."""
    return 0.5 + np.asarray(z, dtype=np.float64) / 4


def taylor_loss(z: np.ndarray, y: np.ndarray) -> float:
    """FATE's Taylor loss ``mean(log 2 − (2y−1)·z/2 + z²/8)``, whose gradient the protocol follows."""
    z = np.asarray(z, dtype=np.float64)
    return float(np.mean(math.log(2) - (2 * np.asarray(y) - 1) * z / 2 + z * z / 8))


def plaintext_fit(Za: np.ndarray, y: np.ndarray, Zp: np.ndarray, params: SSHELRParams
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(w_active, w_passive)`` of the same Taylor gradient descent in the clear (prepared blocks).

    The step is the protocol's fixed-point ``c / 2^48``, the columns are the quantized ones:
    the secure run differs only by the truncation's ±2^-32 per weight and epoch.
    """
    wa, wp = np.zeros(Za.shape[1]), np.zeros(Zp.shape[1])
    step = step_scale(params.learning_rate, len(y)) / 2.0 ** STEP_FRAC
    for _ in range(params.epochs):
        e = taylor_sigmoid(Za @ wa + Zp @ wp) - y
        wa, wp = wa - step * (Za.T @ e), wp - step * (Zp.T @ e)
    return wa, wp
