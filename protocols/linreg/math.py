"""The math of secure linear regression: schedule, loss and gradient, bounds, the plaintext reference.

Plain functions (no channel, no role); the roles of :mod:`.roles` call them, and
:func:`plaintext_gradient_descent` is the reference every secure run is tested against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vflcrypto.data.tables import PartyTable
from vflcrypto.errors import (
    ConfigurationError,
    EncodingOverflowError,
    InputDataError,
    ProtocolError,
    TrainingDivergedError,
)
from vflcrypto.he.encoding import exceeds_bits

from .config import LinRegConfig
from .messages import CKKS_GRADIENT_BOUND, CKKS_RESIDUAL_RMS, FRAC_BITS, TrainingPlan
from .model import fit_label_scaling, fit_preprocessing

__all__ = [
    "DIVERGENCE_FACTOR",
    "PlainResult",
    "active_loss_share",
    "batch_loss",
    "check_bound",
    "check_ckks_scale",
    "check_divergence",
    "converged",
    "epoch_batches",
    "gradient",
    "max_batch_rms",
    "paillier_value_bits",
    "passive_loss_share",
    "plaintext_gradient_descent",
    "refuse_small_batches",
    "smallest_batch",
    "validate_table",
]


@dataclass
class PlainResult:
    """The plaintext reference's result (same shapes as the secure run)."""

    active_weights: np.ndarray
    passive_weights: list[np.ndarray]
    losses: list[float]  # in the label's units squared (trained on the scaled label: scale² times its loss)
    epoch_losses: list[float]
    epochs_run: int
    converged: bool
    history: list[list[np.ndarray]]  # per iteration: [active, passive-0, ...]
    label_offset: float = 0.0  # the label scaling (prediction = scale · Σ X·w + offset)
    label_scale: float = 1.0


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


#: an epoch loss this many times the first epoch's counts as divergence (gradient descent from w = 0 on a
#: convex loss never gets there with a learning rate that works)
DIVERGENCE_FACTOR = 1e4


def check_divergence(epoch_losses: Sequence[float], epoch: int) -> None:
    """:class:`TrainingDivergedError` naming the epoch when the loss is non-finite or exploded."""
    cur = epoch_losses[-1]
    first = epoch_losses[0]
    if not math.isfinite(cur) or (len(epoch_losses) > 1 and cur > DIVERGENCE_FACTOR * max(first, 1e-12)):
        raise TrainingDivergedError(
            f"training diverged at epoch {epoch + 1}: mean loss {cur:.4g} after {first:.4g} in the first epoch "
            "(lower --lr or --momentum, or standardize the columns and the label)")


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


def max_batch_rms(X: np.ndarray, batch: int) -> np.ndarray:
    """Per column, the largest root-mean-square over any ``batch`` rows (the top ``batch`` squares)."""
    X = np.asarray(X, dtype=np.float64)
    m = max(1, min(batch, X.shape[0]))
    top = np.sort(X * X, axis=0)[X.shape[0] - m:]
    return np.sqrt(top.sum(axis=0) / m)


def check_ckks_scale(X: np.ndarray, columns: Sequence[str], batch: int, party: str, *,
                     limit: float = CKKS_GRADIENT_BOUND / CKKS_RESIDUAL_RMS,
                     remedy: str = "standardize the features (--preprocess standardize) or use --scheme paillier",
                     ) -> None:
    """Refuse, before training, values whose gradients the CKKS mask could not hide.

    A party checks only its own values against public constants (nothing is revealed):
    every column's rms over any batch must be <= ``limit``.
    """
    if X.size == 0:
        return
    rms = max_batch_rms(X, batch)
    j = int(np.argmax(rms))
    if rms[j] > limit:
        raise EncodingOverflowError(
            f"{party}: {columns[j]} reaches a root-mean-square of {rms[j]:.4g} over a batch of {batch} rows; "
            f"the CKKS masks hide mean gradients up to {CKKS_GRADIENT_BOUND:g} (|g_j| <= rms(x_j) * rms(residual), "
            f"residual rms allowed up to {CKKS_RESIDUAL_RMS:g}), so it must stay <= {limit:g}: {remedy}")


def check_bound(what: str, values: np.ndarray, bits: int, party: str) -> None:
    if exceeds_bits(values, bits):
        raise EncodingOverflowError(
            f"{party}: {what} exceeds the encoding's public bound 2^{bits} for this key size "
            "(the gradient would overflow the fixed-point range): standardize the features "
            "or use a larger key")


def validate_table(table: PartyTable, party: str, *, needs_label: bool) -> np.ndarray:
    X = np.asarray(table.X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] != len(table.ids):
        raise InputDataError(f"{party}: feature matrix does not match its {len(table.ids)} IDs")
    if not np.all(np.isfinite(X)):
        r, c = np.argwhere(~np.isfinite(X))[0]
        col = table.columns[c] if c < len(table.columns) else str(c)
        raise InputDataError(f"{party}: {table.where(int(r))}: feature {col!r} is missing or not finite")
    if needs_label:
        if table.label is None:
            raise InputDataError(f"{party}: the active party needs a label column")
        y = np.asarray(table.label, dtype=np.float64)
        if y.shape != (X.shape[0],):
            raise InputDataError(f"{party}: {len(y)} labels for {X.shape[0]} rows")
        if not np.all(np.isfinite(y)):
            r = int(np.argmax(~np.isfinite(y)))
            raise InputDataError(f"{party}: {table.where(r)}: the label is missing or not finite")
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
    offset, scale = fit_label_scaling(y, config.scales_label)
    y = (y - offset) / scale  # as the active party does: the weights are in the scaled label's units
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
    units = scale ** 2  # the losses in the label's units, as LinRegRun reports them
    return PlainResult(wb, wp, [units * v for v in losses], [units * v for v in epoch_losses], epochs_run, stop,
                       history, offset, scale)


def check_plan_matches(plan: TrainingPlan, config: LinRegConfig | None, party: str) -> None:
    """A network party's own flags against the active party's plan: any difference is refused."""
    if config is None:
        return
    batch = plan.n_rows if config.batch_size is None else min(config.batch_size, plan.n_rows)
    mine = {"epochs": config.epochs, "lr": float(config.lr), "momentum": float(config.momentum),
            "l2": float(config.l2), "tol": config.tol, "batch_size": batch,
            "coordinator_obfuscators": config.supplies_obfuscators, "small_batches": config.allow_small_batches}
    theirs = {"epochs": plan.epochs, "lr": plan.lr, "momentum": plan.momentum, "l2": plan.l2, "tol": plan.tol,
              "batch_size": plan.batch_size, "coordinator_obfuscators": plan.obfuscators,
              "small_batches": plan.small_batches}
    differ = [f"{k} {theirs[k]} (here {mine[k]})" for k in mine if mine[k] != theirs[k]]
    if differ:
        raise ConfigurationError(f"{party}: the active party's training plan differs from this party's flags: "
                                 f"{', '.join(differ)}; run every party with the same training flags")


def smallest_batch(n_rows: int, batch_size: int) -> int:
    """The fewest rows any batch of :func:`epoch_batches` holds (the last batch of an epoch may be short)."""
    b = max(1, min(batch_size, n_rows))
    return n_rows % b or b


def refuse_small_batches(n_rows: int, batch_size: int, n_features: int, party: str, *, allowed: bool) -> None:
    """Refuse a schedule whose smallest batch has no more rows than ``party``'s features, unless ``allowed``.

    A data party learns its own gradient ``X_b^T d`` of every batch; with ``m <= F`` rows of full
    rank those ``F`` equations determine the batch's ``m`` residuals ``d`` (at the first
    iteration ``d = -y``: the labels). Weng et al. 2020 (reverse multiplication) and SecretFlow's
    batch-size warning; :func:`vflcrypto.audit.literature_tabular.residual_recovery` runs it.
    """
    m = smallest_batch(n_rows, batch_size)
    if m <= n_features and not allowed:
        raise ConfigurationError(
            f"{party}: a batch of {m} rows (batch size {batch_size}, {n_rows} sample{'s' * (n_rows != 1)} in all) "
            f"has no more rows than its "
            f"{n_features} features, so it could solve its own gradient for that batch's residuals (the labels at "
            "the first iteration); use a batch size whose batches all exceed every passive party's feature count, "
            "or allow it explicitly (allow_small_batches / --allow-small-batches)")


def check_plan(plan: TrainingPlan, n_rows: int, party: str) -> None:
    if plan.n_rows != n_rows:
        raise InputDataError(f"{party} has {n_rows} rows, the active party {plan.n_rows}: "
                             "the parties' rows are not aligned")
    if (plan.epochs < 1 or plan.batch_size < 1 or not plan.lr > 0 or plan.l2 < 0
            or not 0 <= plan.momentum < 1):
        raise ProtocolError("implausible training plan")
