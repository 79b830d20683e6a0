"""Pure helpers of SecureBoost (:mod:`vflcrypto.protocols.secureboost`): parameters, binning, the
gain and leaf math, exact fixed-point quantization, the packing layout, split selection,
and the unfolding of decrypted candidates (the per-bin sums of ciphertexts are in :mod:`.kernels`).

Nothing here talks to a channel; roles and messages live in :mod:`vflcrypto.protocols.secureboost`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.he.encoding import PackingSpec
from vflcrypto.spec import option

__all__ = [
    "GAIN_EPS",
    "MAX_CLASSES",
    "MAX_FRAC_BITS",
    "MIN_FRAC_BITS",
    "MULTI_STRATEGIES",
    "OBJECTIVES",
    "BoostParams",
    "Choice",
    "as_matrix",
    "base_score",
    "bin_feature",
    "bin_features",
    "bin_histograms",
    "check_labels",
    "choose_frac_bits",
    "gradients",
    "leaf_weight",
    "n_outputs",
    "packing_spec",
    "quantize",
    "select_split",
    "slots_fit",
    "softmax",
    "split_gain",
    "unfold_candidates",
    "unpack_candidates",
    "valid_candidates",
    "value_bound_bits",
]

OBJECTIVES = ("binary", "regression", "multiclass")
MULTI_STRATEGIES = ("multi_output_tree", "one_output_per_tree")  # XGBoost's names
MAX_CLASSES = 64
MAX_FRAC_BITS = 24  # 6e-8 resolution per gradient: far below what changes a split
MIN_FRAC_BITS = 8
GAIN_EPS = 1e-9  # a split must improve the objective by more than this


# =========================================================================== parameters


@dataclass(frozen=True)
class BoostParams:
    """Training parameters (XGBoost names and defaults where they exist); the one source of the
    flags of ``train secureboost`` and ``party ... train secureboost``."""

    objective: str = option("binary", "loss: logistic (binary labels), squared error, or softmax (multiclass: "
                                      "labels 0..K-1)", choices=OBJECTIVES)
    multi_strategy: str = option("multi_output_tree", "multiclass only: one tree per round whose leaves hold a "
                                 "weight per class, all classes' (g, h) packed per row (FATE's SBT-MO), or one "
                                 "tree per class per round", choices=MULTI_STRATEGIES)
    n_trees: int = option(10, "boosting rounds (trees)", flag="--trees")
    max_depth: int = option(3, "depth of every tree", flag="--depth")
    learning_rate: float = option(0.3, "shrinkage of every tree's leaves", flag="--lr")
    max_bin: int = option(32, "quantile bins per feature (2..256)")
    reg_lambda: float = option(1.0, "L2 penalty of the leaf weights (XGBoost's lambda)")
    gamma: float = option(0.0, "minimum loss reduction of a split, GL^2/(HL+lambda) + GR^2/(HR+lambda) - "
                               "G^2/(H+lambda) >= gamma, checked as the tree grows (XGBoost's gamma, hist method)")
    min_child_weight: float = option(1.0, "minimum hessian sum of a child (XGBoost's min_child_weight)")
    subsample: float = option(1.0, "fraction of the training rows each tree is grown on, drawn uniformly "
                                   "with the public seed (XGBoost's subsample)")
    colsample_bytree: float = option(1.0, "fraction of its own columns each party offers per tree, at least "
                                          "one (XGBoost's colsample_bytree, drawn per party)")
    top_rate: float = option(0.0, "GOSS: keep the top_rate share of rows by |g| (LightGBM's top_rate)")
    other_rate: float = option(0.0, "GOSS: sample this share of the rows from the rest, their g and h "
                                    "amplified by (1 - top_rate) / other_rate (LightGBM's other_rate; > 0 turns "
                                    "GOSS on)")
    random_state: int = option(0, "public seed of column sampling, uniform row subsampling and the validation "
                                  "split (GOSS draws with the active party's private randomness)")
    validation_fraction: float = option(0.0, "fraction of the training rows held out as the validation set "
                                             "(public seeded split; every party routes them, the active party "
                                             "evaluates)")
    early_stopping_rounds: int = option(0, "stop when the validation metric (logloss, mlogloss or rmse) has not "
                                           "improved for this many rounds and keep the best round (0: off)")
    first_tree_active_only: bool = option(False, "grow the first round on the active party's features alone: the "
                                                 "passive parties receive no gradients and no instance space of it "
                                                 "(SecretFlow SGB's first_tree_with_label_holder_feature)")
    active_only_trees: int = option(0, "grow the first K rounds on the active party's features alone "
                                       "(--first-tree-active-only is K = 1)")
    dp_epsilon: float | None = option(None, "label DP of the split decisions (binary objective): the active party "
                                            "adds Gaussian noise to the G sums of every node before it chooses the "
                                            "split, calibrated to this epsilon at --dp-delta over every level of "
                                            "every tree (dp-accounting's RDP accountant)")
    dp_delta: float = option(1e-5, "delta of --dp-epsilon")
    dp_clip: float = option(1.0, "with --dp-epsilon: every row's weighted g clipped to [-C, C] before it is "
                                 "summed (a label then moves a G sum by at most min(2C, its weight))")

    @property
    def active_only_rounds(self) -> int:
        """Rounds grown on the active party's features alone, from the first (0: none)."""
        return max(self.active_only_trees, int(self.first_tree_active_only))

    @property
    def goss(self) -> bool:
        """Whether rows are sampled by GOSS (Ke et al., NeurIPS 2017) rather than uniformly."""
        return self.top_rate > 0 or self.other_rate > 0

    def validate(self) -> None:
        if self.objective not in OBJECTIVES:
            raise InputDataError(f"objective must be one of {OBJECTIVES}, not {self.objective!r}")
        if self.multi_strategy not in MULTI_STRATEGIES:
            raise InputDataError(f"multi_strategy must be one of {MULTI_STRATEGIES}, not {self.multi_strategy!r}")
        if self.n_trees < 1 or self.max_depth < 1:
            raise InputDataError("need at least one tree of depth >= 1")
        if not 2 <= self.max_bin <= 256:
            raise InputDataError("max_bin must be in [2, 256]")
        if not self.learning_rate > 0 or self.reg_lambda < 0 or self.min_child_weight < 0 or self.gamma < 0:
            raise InputDataError("learning_rate must be > 0; reg_lambda, min_child_weight, gamma >= 0")
        if not (0 < self.subsample <= 1 and 0 < self.colsample_bytree <= 1):
            raise InputDataError("subsample and colsample_bytree must lie in (0, 1]")
        if self.goss and not (0 <= self.top_rate < 1 and 0 < self.other_rate <= 1
                              and self.top_rate + self.other_rate <= 1):
            raise InputDataError("GOSS needs 0 <= top_rate < 1, 0 < other_rate and top_rate + other_rate <= 1")
        if self.goss and self.subsample != 1:
            raise InputDataError("GOSS replaces uniform subsampling: use subsample 1 with top_rate/other_rate")
        if self.random_state < 0 or self.early_stopping_rounds < 0:
            raise InputDataError("random_state and early_stopping_rounds must be >= 0")
        if not 0 <= self.validation_fraction < 1:
            raise InputDataError("validation_fraction must lie in [0, 1)")
        if self.early_stopping_rounds and not self.validation_fraction:
            raise InputDataError("early stopping needs a validation set: set validation_fraction > 0")
        if self.active_only_trees < 0 or self.active_only_rounds >= self.n_trees:
            raise InputDataError(f"{self.active_only_rounds} active-only rounds of {self.n_trees}: at least the "
                                 "last round must include the passive parties")
        if self.dp_epsilon is not None:
            if not (self.dp_epsilon > 0 and math.isfinite(self.dp_epsilon)) or not 0 < self.dp_delta < 1 or \
                    not (self.dp_clip > 0 and math.isfinite(self.dp_clip)):
                raise InputDataError("--dp-epsilon needs a finite epsilon > 0, 0 < --dp-delta < 1 and a finite "
                                     "--dp-clip > 0")
            if self.objective != "binary" or self.goss or self.early_stopping_rounds:
                raise InputDataError("--dp-epsilon is for the binary objective without GOSS or early stopping "
                                     "(GOSS samples and the rounds kept would depend on the labels outside the "
                                     "accounted noise)")


# =========================================================================== math


def as_matrix(X: np.ndarray, name: str) -> np.ndarray:
    """A party's features as a float 2-D array (NaN allowed: it goes right; infinities refused)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise InputDataError(f"{name}: feature matrix must be 2-D")
    if np.isinf(X).any():
        raise InputDataError(f"{name}: features must not be infinite")
    return X


def bin_feature(x: np.ndarray, max_bin: int) -> tuple[np.ndarray, np.ndarray]:
    """Quantile bins of one feature: ``(split_points, bin_of_row)``.

    ``split_points`` are increasing; ``bin = #split points < x``, so ``x <= s[b]`` iff
    ``bin <= b`` and a split "at bin b" sends ``x <= s[b]`` left. A feature with at most
    ``max_bin`` distinct values gets one bin per value; NaN goes to the last bin (always
    right), and at prediction ``NaN <= s`` is false (right) as well.
    """
    x = np.asarray(x, dtype=np.float64)
    finite = x[~np.isnan(x)]
    if finite.size == 0:
        return np.zeros(0), np.zeros(len(x), dtype=np.int32)
    uniq = np.unique(finite)
    if uniq.size <= max_bin:
        splits = uniq[:-1]
    else:
        qs = np.quantile(finite, np.linspace(0.0, 1.0, max_bin + 1)[1:-1])
        splits = np.unique(qs)
        splits = splits[splits < uniq[-1]]  # a split everything passes is no split
    bins = np.searchsorted(splits, x, side="left").astype(np.int32)
    return splits.astype(np.float64), bins


def bin_features(X: np.ndarray, max_bin: int, fit: np.ndarray | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
    """Bin every column: ``(bins (n, F) int32, [split points per feature])``.

    ``fit`` (row indices or a mask): the split points come from these rows only (the
    training rows, not the validation rows); every row is binned with them, so that
    ``bin <= b`` iff ``x <= s[b]`` holds for the other rows too.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise InputDataError("feature matrix must be 2-D")
    bins = np.zeros(X.shape, dtype=np.int32)
    splits = []
    for f in range(X.shape[1]):
        s, b = bin_feature(X[:, f] if fit is None else X[fit, f], max_bin)
        bins[:, f] = b if fit is None else np.searchsorted(s, X[:, f], side="left")
        splits.append(s)
    return bins, splits


def n_outputs(objective: str, y: np.ndarray) -> int:
    """Margins per row: the number of classes K = max label + 1 (multiclass), else 1."""
    return int(np.max(y)) + 1 if objective == "multiclass" else 1


def base_score(objective: str, y: np.ndarray, weight: np.ndarray | None = None, classes: int = 0) -> np.ndarray:
    """Initial margins, one per output: the log-odds of the positive rate (binary), the mean
    (regression), or the centred log class priors (multiclass, ``classes`` of them at least; softmax
    of them = the priors). With sample weights, the weighted rate, mean or priors."""
    w = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=np.float64)
    if objective == "binary":
        p = float(np.clip(np.sum(w * y) / np.sum(w), 1e-6, 1 - 1e-6))
        return np.asarray([math.log(p / (1 - p))])
    if objective == "multiclass":
        k = max(classes, n_outputs(objective, y))
        prior = np.bincount(np.asarray(y, np.int64), weights=w, minlength=k) / np.sum(w)
        logp = np.log(np.clip(prior, 1e-6, None))
        return logp - logp.mean()
    return np.asarray([float(np.sum(w * y) / np.sum(w))])


def softmax(margin: np.ndarray) -> np.ndarray:
    """Row-wise softmax of (n, K) margins (shifted by the row maximum: no overflow)."""
    z = margin - margin.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def gradients(objective: str, y: np.ndarray, margin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and second derivatives of the loss at ``margin`` (rows, outputs), each (rows, outputs).

    Softmax: ``g_k = p_k - [y = k]`` and XGBoost's diagonal hessian ``h_k = max(2 p_k (1 - p_k), 1e-16)``
    (its ``multi:softprob``; the factor 2 compensates the ignored off-diagonal terms).
    """
    margin = np.asarray(margin, dtype=np.float64).reshape(len(y), -1)
    if objective == "binary":
        p = 1.0 / (1.0 + np.exp(-margin))
        return p - y[:, None], p * (1.0 - p)
    if objective == "multiclass":
        p = softmax(margin)
        onehot = np.zeros_like(p)
        onehot[np.arange(len(y)), np.asarray(y, np.int64)] = 1.0
        return p - onehot, np.maximum(2.0 * p * (1.0 - p), 1e-16)
    return margin - y[:, None], np.ones_like(margin)


def check_labels(objective: str, y: np.ndarray) -> None:
    """Clear errors for labels the objective cannot use."""
    y = np.asarray(y, dtype=np.float64)
    if y.size == 0:
        raise InputDataError("no training rows")
    if not np.all(np.isfinite(y)):
        raise InputDataError("labels must be finite")
    if objective == "binary":
        if not np.all((y == 0) | (y == 1)):
            raise InputDataError("binary objective needs labels 0/1")
        if np.all(y == y[0]):
            raise InputDataError("binary objective needs both classes in the labels, got one class")
    if objective == "multiclass":
        if np.any(y < 0) or np.any(y != np.round(y)):
            raise InputDataError("multiclass objective needs integer class labels 0..K-1")
        if np.all(y == y[0]):
            raise InputDataError("multiclass objective needs at least two classes in the labels, got one")
        if int(np.max(y)) + 1 > MAX_CLASSES:
            raise InputDataError(f"multiclass objective supports at most {MAX_CLASSES} classes "
                                 f"(labels 0..{int(np.max(y))})")


def value_bound_bits(g: np.ndarray, h: np.ndarray) -> int:
    """Smallest ``k >= 1`` with ``|g|, h < 2**(k-1)``, plus one bit of margin: |g|, h < 2**k."""
    top = float(max(np.max(np.abs(g)), np.max(h), 1e-300))
    return max(1, math.ceil(math.log2(top)) + 2) if top >= 0.5 else 1


def choose_frac_bits(vbb: int, n: int) -> int:
    """Fixed-point bits so every histogram sum is an exact integer below 2**52.

    Exactness in float64 (plaintext bincount) is what makes encrypted and plaintext
    training bit-identical.
    """
    frac = min(MAX_FRAC_BITS, 52 - vbb - max(1, int(n).bit_length()))
    if frac < MIN_FRAC_BITS:
        raise InputDataError("gradients too large for exact fixed-point sums: rescale the label")
    return frac


def quantize(x: np.ndarray, frac_bits: int) -> np.ndarray:
    """``round(x * 2**frac_bits)`` as int64 (same rounding as vflcrypto.he.encoding)."""
    return np.rint(np.ldexp(np.asarray(x, dtype=np.float64), frac_bits)).astype(np.int64)


def packing_spec(n: int, frac_bits: int, vbb: int) -> PackingSpec:
    """Two slots (g, h) per row, headroom for ``n`` additions.

    ``value_bits`` covers a whole column sum (``n * 2**(frac_bits + vbb)``), not just one
    value: then any sum of ``t`` rows has ``|G|, H < offset`` and the decryptor reads the
    row count exactly as ``t = h_slot >> value_bits`` (the offsets of the ``t`` rows),
    which is what lets sums of different row counts share one packing.
    """
    vb = frac_bits + vbb + max(1, int(n).bit_length())
    return PackingSpec.create(max_terms=max(2, n), frac_bits=frac_bits, value_bits=vb)


def slots_fit(outputs: int, spec: PackingSpec, plaintext_bits: int) -> bool:
    """Whether ``outputs`` (g, h) pairs (``2 * outputs`` slots) fit one plaintext of the key."""
    return 2 * outputs * spec.slot_bits <= plaintext_bits


def split_gain(GL: np.ndarray, HL: np.ndarray, G: Any, H: Any, lam: float,
               gamma: float) -> np.ndarray:
    """Cheng et al. eq. (3) / XGBoost: 1/2 [GL²/(HL+λ) + GR²/(HR+λ) − G²/(H+λ)] − γ.

    With several outputs (``GL``, ``HL`` of shape (candidates, K); ``G``, ``H`` of shape
    (K,)) the gain is the sum of the per-output gains, as in XGBoost's multi-output trees
    and FATE's SBT-MO; one output gives exactly the scalar formula.
    """
    GL, HL = np.asarray(GL), np.asarray(HL)
    GR = G - GL
    HR = H - HL
    per = 0.5 * (GL * GL / (HL + lam) + GR * GR / (HR + lam) - G * G / (H + lam))
    return (per.sum(axis=-1) if per.ndim > 1 else per) - gamma


def leaf_weight(G: Any, H: Any, lam: float) -> Any:
    """Optimal leaf weight −G/(H+λ) (per output when G, H are vectors)."""
    return -G / (H + lam)


def bin_histograms(bins: np.ndarray, rows: np.ndarray, gq: np.ndarray, hq: np.ndarray,
                   width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-(feature, bin) integer sums of g, h and row counts over ``rows``.

    ``gq``, ``hq`` are (n, K) (one column per output); the sums are (F, width, K), the
    counts (F, width). Float64 bincount is exact here because every partial sum is an
    integer < 2**52 (see :func:`choose_frac_bits`).
    """
    F = bins.shape[1]
    K = gq.shape[1]
    if F == 0:
        z = np.zeros((0, width, K), dtype=np.int64)
        return z, z.copy(), np.zeros((0, width), dtype=np.int64)
    keys = (bins[rows] + (np.arange(F, dtype=np.int64) * width)[None, :]).ravel()
    size = F * width
    sg = np.stack([np.bincount(keys, weights=np.repeat(gq[rows, k].astype(np.float64), F), minlength=size)
                   for k in range(K)], axis=-1)
    sh = np.stack([np.bincount(keys, weights=np.repeat(hq[rows, k].astype(np.float64), F), minlength=size)
                   for k in range(K)], axis=-1)
    sn = np.bincount(keys, minlength=size)
    return (sg.astype(np.int64).reshape(F, width, K), sh.astype(np.int64).reshape(F, width, K),
            sn.astype(np.int64).reshape(F, width))


def valid_candidates(cnt: np.ndarray, n_node: int) -> np.ndarray:
    """Mask of candidates (f, b) that are real and canonical for a node.

    A split at bin ``b`` is kept when bin ``b`` holds rows of the node and rows remain on
    the right: among splits giving the same partition only the smallest ``b`` survives.
    """
    cum = np.cumsum(cnt, axis=1)
    return (cnt > 0) & (cum < n_node)


@dataclass(frozen=True)
class Choice:
    """The winning split of a node: owner (0 = active, i + 1 = passive i), stats and ids."""

    gain: float
    owner: int
    GL: tuple[int, ...]  # one fixed-point sum per output
    HL: tuple[int, ...]
    nL: int
    ids: tuple[int, ...]  # active: flat (feature * width + bin); passive: tied anonymous ids


def select_split(blocks: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
                 G: np.ndarray, H: np.ndarray, frac_bits: int, params: BoostParams) -> Choice | None:
    """Best split of a node over candidate blocks, one block per owner in owner order.

    A block is ``(GL, HL, nL, ids)``: integer fixed-point sums ``GL``, ``HL`` of shape
    (candidates, K), row counts ``nL``; ``G``, ``H`` (K,) are the node's totals. Candidates
    need ``H_L, H_R >= min_child_weight`` and ``> 0`` (for several outputs: their hessians summed; XGBoost's
    multi-output trees instead zero the weight of an output below it, so parity with them
    holds at ``min_child_weight = 0``), ``gain > GAIN_EPS`` and, as in XGBoost's hist method,
    a loss reduction ``2 * gain >= gamma`` (XGBoost's loss change is the bracket of
    :func:`split_gain` without the factor 1/2). Ties are broken without looking at the
    passive parties' (shuffled) order: highest gain, then lowest owner (XGBoost's feature
    order puts the active party's features first, then each passive party's); within the
    first block (the active party's own candidates, ids in (feature, bin) order) the smallest
    id, as in XGBoost; within a passive party's block the smallest ``(G_L, H_L, n_L)``, and
    equal-statistics candidates are all returned (``ids``) for the owner to pick its smallest
    (feature, bin). (So equal gains from *different* statistics of one passive party, e.g. mirror
    partitions, can resolve unlike XGBoost, which picks the lower feature index.)
    """
    scale = 2.0 ** -frac_bits
    Gf, Hf = np.asarray(G, np.float64) * scale, np.asarray(H, np.float64) * scale
    best: tuple[float, int, tuple[int, ...], tuple[int, ...], int] | None = None
    best_ids: list[int] = []
    for owner, (GL, HL, nL, ids) in enumerate(blocks):
        if len(GL) == 0:
            continue
        gl = GL.astype(np.float64) * scale
        hl = HL.astype(np.float64) * scale
        gain = split_gain(gl, hl, Gf, Hf, params.reg_lambda, 0.0)
        hl_sum = hl.sum(axis=1)  # one output: exactly hl[:, 0]
        hr_sum = float(Hf.sum()) - hl_sum
        ok = (hl_sum >= params.min_child_weight) & (hr_sum >= params.min_child_weight) & (hl_sum > 0) & (hr_sum > 0)
        ok &= (gain > GAIN_EPS) & (2 * gain >= params.gamma)
        if not ok.any():
            continue
        top = float(gain[ok].max())
        if best is not None and top < best[0]:
            continue
        sel = np.flatnonzero(ok & (gain == top))
        keys = sorted((tuple(GL[i].tolist()), tuple(HL[i].tolist()), int(nL[i]), int(ids[i])) for i in sel)
        if owner == 0:  # the active party's ids are in (feature, bin) order: XGBoost's tie-break
            keys = [min(keys, key=lambda k: k[3])]
        k0 = keys[0][:3]
        cand = (top, owner, *k0)
        if best is None or top > best[0]:
            best, best_ids = cand, [k[3] for k in keys if k[:3] == k0]
        # equal gain from a later owner loses the tie (lower owner wins)
    if best is None:
        return None
    return Choice(best[0], best[1], best[2], best[3], best[4], tuple(best_ids))


# =========================================================================== decrypted candidates


def unfold_candidates(values: Sequence[int], count: int, per: int, bits: int) -> list[int]:
    """Inverse of the fold after decryption: ``count`` plaintexts of ``bits`` bits each."""
    mask = (1 << bits) - 1
    out: list[int] = []
    for v in values:
        k = min(per, count - len(out))
        if k <= 0 or v < 0 or v >> (bits * k):
            raise ProtocolError("folded histogram does not match its declared layout")
        for _ in range(k):
            out.append(v & mask)
            v >>= bits
    if len(out) != count:
        raise ProtocolError("folded histogram holds fewer candidates than declared")
    return out


def unpack_candidates(packed: Sequence[int], spec: PackingSpec,
                      outputs: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packed sums of ``t`` real rows -> (G_L (c, K), H_L (c, K), n_L (c,)).

    The slots are ``g_0 .. g_{K-1}, h_0 .. h_{K-1}`` (``K = outputs``), lowest first. Each
    slot = sum + t * 2**value_bits and (by :func:`packing_spec`) ``0 <= H < 2**value_bits``,
    so ``t = h_slot >> value_bits`` is the row count, the same in every h slot; every G
    must lie in ``(-1, 1) * 2**value_bits``.
    """
    sb, vb = spec.slot_bits, spec.value_bits
    mask = (1 << sb) - 1
    K = outputs
    lo, hi = -(1 << vb), 1 << vb
    G, H, N = [], [], []
    for p in packed:
        slots = [(p >> (j * sb)) & mask for j in range(2 * K)]
        if p >> (2 * K * sb):
            raise ProtocolError("histogram candidate has bits above its slots")
        t = slots[K] >> vb
        hv = [s - (t << vb) for s in slots[K:]]
        gv = [s - (t << vb) for s in slots[:K]]
        if t < 1 or any(not 0 <= v < hi for v in hv) or any(not lo < v < hi for v in gv):
            raise ProtocolError("histogram candidate outside its valid range (wrong key or tampered)")
        G.append(gv)
        H.append(hv)
        N.append(t)
    return (np.asarray(G, dtype=np.int64).reshape(-1, K), np.asarray(H, dtype=np.int64).reshape(-1, K),
            np.asarray(N, dtype=np.int64))
