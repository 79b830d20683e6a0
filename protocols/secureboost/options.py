"""SecureBoost's training options beyond the core protocol: the validation split, row and
column sampling (uniform, and GOSS), the evaluation metric of early stopping, and the
early-stopping rule. Pure functions over numpy arrays; no channel, no message.

Who draws what, and with which randomness
    * The **validation split** and **column sampling** are public and data-independent:
      numpy generators seeded with the plan's ``random_state`` (not a secret; every
      party computes the same split, and each party draws its own columns).
    * **Uniform row subsampling** (``subsample``) is drawn by the active party with the
      same public seed: the sample does not depend on g, h or the labels, so a passive
      party that recomputes it learns nothing the sample does not already tell it.
    * **GOSS** (Ke et al., "LightGBM: A Highly Efficient Gradient Boosting Decision
      Tree", NeurIPS 2017) keeps the ``top_rate`` share of rows by ``|g|`` and samples
      ``other_rate`` of the rows from the rest, amplifying their g and h by
      ``(1 - top_rate) / other_rate``. The random part is drawn from a SHAKE-256 stream
      under a key only the active party holds (:func:`secrets.token_bytes`): with a
      public seed, a passive party that sees the sampled set could replay the draw and
      separate the top-``|g|`` rows from the random ones.
"""

from __future__ import annotations

import hashlib
import math
import zlib

import numpy as np

from vflcrypto.errors import InputDataError

#: the scheme of ``vflcrypto train secureboost``, its party and Flower forms when none is given: OU with a
#: 2048-bit modulus and 224-bit randomness and decryption factor (SECURITY.md, "SecureBoost's default scheme")
DEFAULT_SCHEME = "ou-2048"

__all__ = ["EarlyStopping", "column_mask", "eval_metric", "goss_rows", "metric_name", "subsample_rows",
           "validation_mask"]

# domain separators of the public generators (one seed, independent streams)
_VALIDATION, _ROWS, _COLUMNS = 0x5641, 0x524F, 0x434F


def _count(rate: float, n: int) -> int:
    """``floor(rate * n)`` robust to binary fractions (0.29 * 100 is 28.999...)."""
    return math.floor(rate * n + 1e-9)


def validation_mask(n: int, fraction: float, seed: int) -> np.ndarray:
    """Which of the ``n`` aligned training rows are validation rows: ``round(fraction * n)``
    rows (at least one) drawn with the public seed (numpy: the split is public)."""
    mask = np.zeros(n, dtype=bool)
    if fraction <= 0:
        return mask
    k = max(1, round(fraction * n))
    if n - k < 2:
        raise InputDataError(f"validation_fraction {fraction} leaves {n - k} of {n} rows to train on")
    mask[np.random.default_rng([seed, _VALIDATION]).choice(n, size=k, replace=False)] = True
    return mask


def column_mask(n_features: int, ratio: float, seed: int, party: str, tree: int) -> np.ndarray:
    """The columns a party offers for tree ``tree``: ``max(1, floor(ratio * F))`` of its ``F``
    (XGBoost's rule, applied per party), drawn with the public seed and the party's name."""
    mask = np.ones(n_features, dtype=bool)
    if ratio >= 1 or n_features == 0:
        return mask
    k = max(1, _count(ratio, n_features))
    rng = np.random.default_rng([seed, _COLUMNS, zlib.crc32(party.encode()), tree])  # public: not a secret
    mask[:] = False
    mask[rng.choice(n_features, size=k, replace=False)] = True
    return mask


def subsample_rows(fit_rows: np.ndarray, ratio: float, seed: int, tree: int) -> np.ndarray:
    """Uniform row sample of tree ``tree``: ``max(1, round(ratio * n))`` of the training rows,
    sorted (public seed: the draw does not depend on the data)."""
    if ratio >= 1:
        return fit_rows
    k = max(1, round(ratio * len(fit_rows)))
    rng = np.random.default_rng([seed, _ROWS, tree])  # public: not a secret
    return np.sort(rng.choice(fit_rows, size=k, replace=False))


def goss_rows(score: np.ndarray, fit_rows: np.ndarray, top_rate: float, other_rate: float, key: bytes,
              tree: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GOSS sample of tree ``tree``: ``(sampled rows sorted, their g/h multipliers, top rows)``.

    ``score`` (n,) is ``|g|`` per row (summed over the tree's outputs); the top
    ``floor(top_rate * n)`` training rows by score (ties: lower row index first) are kept with
    multiplier 1, and ``floor(other_rate * n)`` of the rest (at least one) are drawn with
    multiplier ``(1 - top_rate) / other_rate``. The draw ranks the rest by 64-bit values
    from ``SHAKE-256(key || tree)``: uniform, reproducible for the key holder only.
    """
    n = len(fit_rows)
    top_k = _count(top_rate, n)
    order = fit_rows[np.argsort(-score[fit_rows], kind="stable")]
    top, rest = np.sort(order[:top_k]), np.sort(order[top_k:])
    other_k = min(len(rest), max(1, _count(other_rate, n)))
    stream = hashlib.shake_256(key + tree.to_bytes(8, "big")).digest(8 * len(rest))
    draw = np.frombuffer(stream, dtype=">u8")
    other = np.sort(rest[np.argsort(draw, kind="stable")[:other_k]])
    rows = np.concatenate([top, other])
    mult = np.concatenate([np.ones(len(top)), np.full(len(other), (1 - top_rate) / other_rate)])
    order = np.argsort(rows, kind="stable")
    return rows[order], mult[order], top


# --------------------------------------------------------------------------- early stopping


def metric_name(objective: str) -> str:
    """XGBoost's default evaluation metric of the objective."""
    return {"binary": "logloss", "multiclass": "mlogloss"}.get(objective, "rmse")


def eval_metric(objective: str, y: np.ndarray, margin: np.ndarray, weight: np.ndarray | None = None) -> float:
    """XGBoost's default metric on (weighted) rows: ``logloss`` (binary), ``mlogloss``
    (multiclass) with probabilities clipped at 1e-16, or ``rmse`` (regression)."""
    y = np.asarray(y, dtype=np.float64)
    margin = np.asarray(margin, dtype=np.float64).reshape(len(y), -1)
    w = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=np.float64)
    eps = 1e-16
    if objective == "binary":
        p = 1.0 / (1.0 + np.exp(-margin[:, 0]))
        loss = -(y * np.log(np.maximum(p, eps)) + (1 - y) * np.log(np.maximum(1 - p, eps)))
    elif objective == "multiclass":
        z = margin - margin.max(axis=1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        loss = -np.log(np.maximum(p[np.arange(len(y)), y.astype(np.int64)], eps))
    else:
        return float(np.sqrt(np.sum(w * (margin[:, 0] - y) ** 2) / np.sum(w)))
    return float(np.sum(w * loss) / np.sum(w))


class EarlyStopping:
    """XGBoost's rule: a round improves when its score is below the best so far; training stops
    after ``rounds`` rounds in a row without improvement (``rounds = 0``: never), and the
    model keeps the rounds up to the best one."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.best_round = -1
        self.best_score = math.inf
        self.history: list[float] = []

    def update(self, score: float) -> bool:
        """Record the score of the next round; whether training stops now."""
        self.history.append(score)
        if score < self.best_score:
            self.best_score, self.best_round = score, len(self.history) - 1
        return self.rounds > 0 and len(self.history) - 1 - self.best_round >= self.rounds

    @property
    def kept(self) -> int:
        """Rounds the model keeps: up to the best one (all of them without a validation set)."""
        return self.best_round + 1 if self.rounds > 0 else len(self.history)
