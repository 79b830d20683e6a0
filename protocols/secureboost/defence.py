"""SecureBoost's label defences, both options of the training plan (:class:`~.tree.BoostParams`), run by the
active party and announced in ``secureboost.setup`` so that every party checks and accounts the same plan.

**active-only** (``--first-tree-active-only``, ``--active-only-trees K``). The first K rounds are grown on the
active party's features alone; the passive parties receive no gradients, no instance space and no split request
of them, only the end-of-tree message (``secureboost.level`` with ``done``), and a passive party refuses any
other message of such a tree. SecretFlow's SGB offers the same for the first tree
(``first_tree_with_label_holder_feature``: "Whether to train the first tree with label holder's own features.
Can increase training speed and label security. The training loss may increase.", its ``SGBParams``; with it, its
label holder sends no (g, h) to the other parties and they compute no bucket sums for that tree:
``GradientEncryptorParams``, ``BucketSumCalculatorParams`` in ``secretflow/ml/boost/sgb_v/factory``). Why it
helps: the first tree fits ``g = p0 - y``, a function of the labels alone, so its nodes are the purest a passive
party ever sees (the first-split leak and ID2Graph feed on them); later trees fit residuals. It is an empirical
defence, with no epsilon: the frontier (``vflcrypto audit secureboost --defence active-only --budgets 1,2,3``,
budgets = K) measures what the attacks reach without and with it. Cost: the model's first K rounds ignore the
passive features.

**hist-gauss** (``--dp-epsilon EPS``, ``--dp-delta``, ``--dp-clip C``; binary objective). Label differential
privacy of everything the passive parties learn, by Gaussian noise on the sums the split choice reads:

* every row's weighted gradient is clipped, ``g_i = clip(w_i (p_i - y_i), -C, C)``. Under the replace-one
  neighbouring relation of label DP (Ghazi et al., NeurIPS 2021: two training sets that differ in one row's
  label), changing ``y_i`` moves ``g_i`` by at most ``D = min(2C, w_i) + 2^-f`` (``2^-f``: the fixed-point
  rounding), and nothing else of the same tree: the margin ``p_i`` is a function of earlier noised outputs (see
  below). The hessian ``h_i = w_i p_i (1 - p_i)`` does not depend on ``y_i`` at all, so the ``H`` sums and row
  counts carry no label sensitivity and are not noised (no ``C_h`` is needed);
* per node, the active party adds Gaussian noise of standard deviation ``s = z D sqrt(k)`` to the ``G`` side of
  what it chooses from, before choosing: to each bin's ``G`` sum of each of its own offered features (a row
  sits in one bin per feature; its candidates' cumulative sums are sums of the noised bins), to the cumulative
  ``G_L`` of every candidate a passive party sent for the node (anonymous cumulative sums: a row can sit in the
  left set of every one of them), and to the node's total ``G`` (``G_R = G - G_L`` and the gain's parent term
  read it). ``k`` counts those coordinates a row can move: own offered features + passive candidates of the
  node + 1, so the node's release is the Gaussian mechanism with noise multiplier ``z`` on its L2 sensitivity
  ``D sqrt(k)``;
* when a tree ends, every leaf's ``G`` is released once more, with noise ``z D`` (one coordinate per row), and
  the leaf weights ``-G/(H + lambda)`` come from those;
* everything else is post-processing of the releases: the split choices, which nodes stay leaves, the leaf
  weights, hence every margin, every later ``p_i`` and every message; the packing's public bound on ``|g|`` (in
  the gradients' layout) comes from ``C`` and the weights, never from the gradients themselves;
* the nodes of one depth hold disjoint rows, and so do the leaves of a tree, so one depth of one tree is one
  Gaussian mechanism (parallel composition), the leaves of a tree one more; the base score is one more (the
  noised weighted count of positives, sensitivity the largest weight). The accountant composes
  ``1 + trees x (depth + 1)`` Gaussian mechanisms of multiplier ``z`` at sampling rate 1
  (:func:`vflcrypto.privacy.gaussian_epsilon`, ``dp-accounting``'s RDP accountant): the passive parties know
  which rows each tree samples and where every row goes, so no amplification is claimed. ``z`` is the
  library's calibration to (EPS, delta).

What it covers: each training row's label, (EPS, delta)-label-DP, in everything every passive party receives
(setup, instance spaces, split requests, prediction queries), even all passive parties together, and in the
trained model (tree structure and leaf weights). Not covered: the active party (it holds the labels), the
validation rows' labels (used by nothing that leaves the active party: early stopping is refused with DP), the
features, a deviating active party (the passive parties cannot verify the noise: the audit checks it against
the true sums), and floating-point sampling (:mod:`vflcrypto.privacy.mechanisms`). GOSS is refused with DP (its
sample depends on ``|g|``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.privacy import Guarantee
from vflcrypto.privacy import mechanisms as dpm

from .tree import BoostParams, quantize

__all__ = ["COVERS", "DEFENCES", "DP_COVERS", "clip_gradients", "dp_guarantee", "noise_multiplier", "noised_base",
           "noised_leaves", "noised_node", "privacy", "releases", "residuals", "sensitivity"]

#: the defences of SecureBoost: their names in ``vflcrypto audit secureboost --defence``
DEFENCES = ("active-only", "hist-gauss")
DP_COVERS = ("each training row's label (label-DP, replace-one), in everything every passive party receives "
             "(instance spaces, split requests, prediction queries), even all passive parties together, and in the "
             "trained trees and leaf weights; not against the active party; no amplification by subsampling")
COVERS = {"active-only": "the first rounds' instance spaces: the passive parties receive none of them (an "
                         "empirical defence, no epsilon)",
          "hist-gauss": DP_COVERS}
MECHANISM = ("Gaussian noise of std z*D*sqrt(k) on every node's G bin sums, candidate sums and total before the "
             "split choice, of std z*D on every leaf's G; g clipped to [-C, C]; 1 + trees x (depth + 1) releases")


def releases(params: BoostParams, per_round: int = 1) -> int:
    """Gaussian mechanisms a run composes: the base score, then per tree one per depth (the nodes of a depth hold
    disjoint rows) and one for its leaves, counted for the whole plan (a tree that stops early spends no less)."""
    return 1 + params.n_trees * per_round * (params.max_depth + 1)


@functools.lru_cache(maxsize=64)
def _calibrated(epsilon: float, delta: float, steps: int) -> float:
    from vflcrypto.privacy import calibrate_noise

    return calibrate_noise(epsilon, delta, steps, 1.0)


def noise_multiplier(params: BoostParams, per_round: int = 1) -> float:
    """The noise multiplier ``z`` (std over the L2 sensitivity) whose run meets (``dp_epsilon``, ``dp_delta``):
    the library's calibration of :func:`releases` Gaussian mechanisms at sampling rate 1."""
    assert params.dp_epsilon is not None
    return _calibrated(float(params.dp_epsilon), float(params.dp_delta), releases(params, per_round))


def dp_guarantee(params: BoostParams, per_round: int = 1) -> Guarantee:
    """The guarantee of ``--dp-epsilon``: (ε, δ) accounted by the library for the plan's releases
    (:func:`vflcrypto.privacy.gaussian_guarantee`; ``z`` is already the std over the release's sensitivity ``D``,
    so the sensitivity in its units is 1)."""
    from vflcrypto.privacy import gaussian_guarantee

    return gaussian_guarantee(noise_multiplier(params, per_round), params.dp_clip, params.dp_delta,
                              releases(params, per_round), DP_COVERS, mechanism=MECHANISM, sensitivity=1.0,
                              defence="hist-gauss")


def privacy(params: BoostParams, per_round: int = 1) -> dict[str, Any]:
    """The run's guarantees as JSON (defence name -> its (ε, δ), mechanism, accountant, what it covers); the
    active-only rounds, an empirical defence, as their count."""
    out: dict[str, Any] = {}
    if params.dp_epsilon is not None:
        out["hist-gauss"] = dp_guarantee(params, per_round).to_dict()
    if params.active_only_rounds:
        out["active-only"] = {"defence": "active-only", "rounds": params.active_only_rounds,
                              "covers": COVERS["active-only"]}
    return out


def clip_gradients(g: np.ndarray, clip: float) -> np.ndarray:
    """Every (weighted) gradient clipped to [-C, C]."""
    return np.clip(np.asarray(g, np.float64), -clip, clip)


def sensitivity(params: BoostParams, max_weight: float, frac: int) -> float:
    """``D``: how far one row's label moves its clipped, quantized g (replace-one)."""
    return min(2.0 * params.dp_clip, max_weight) + 2.0**-frac


def noised_base(y: np.ndarray, w: np.ndarray, z: float) -> tuple[float, dict[str, float]]:
    """The base score's release: the weighted share of positives from the noised weighted count (sensitivity
    the largest weight), clipped into (0, 1) as :func:`~.tree.base_score` clips; and the audit's record."""
    std = z * float(np.max(w))
    true = float(np.sum(w * y))
    noised = true + float(dpm.gaussian_noise(1, std)[0])
    return float(np.clip(noised / np.sum(w), 1e-6, 1 - 1e-6)), {"true": true, "noised": noised, "std": std}


def noised_leaves(G: Sequence[np.ndarray], z: float, sens: float) -> tuple[list[np.ndarray], dict[str, Any]]:
    """The leaves' release: every leaf's ``G`` (float) with noise ``z D``; and the audit's record."""
    std = z * sens
    noised = [g + dpm.gaussian_noise(np.shape(g), std) for g in G]
    return noised, {"std": std, "true": [np.asarray(g) for g in G], "noised": noised}


def noised_node(blocks: Sequence[tuple[np.ndarray, ...]], G: np.ndarray, *, z: float, sens: float, frac: int,
                n_features: int, own_features: int,
                width: int) -> tuple[list[tuple[np.ndarray, ...]], np.ndarray, dict[str, Any]]:
    """One node's release (see the module docstring): the blocks with noised ``G_L`` (the active party's first,
    as ``(G_L, H_L, n_L, flat ids)`` over ``(feature, bin)``; then each passive party's), the node's noised total
    ``G`` (fixed point, as the blocks), and the record the audit scores against the true sums."""
    own, passive = blocks[0], blocks[1:]
    k = own_features + sum(len(b[0]) for b in passive) + 1
    std = z * sens * math.sqrt(max(k, 1))
    cg, ch, cn, flat = own
    bins = dpm.gaussian_noise((n_features, width), std) if n_features else np.zeros((0, width))
    own_noise = np.cumsum(bins, axis=1).ravel()[np.asarray(flat, np.int64)]
    out: list[tuple[np.ndarray, ...]] = [(cg + quantize(own_noise, frac)[:, None], ch, cn, flat)]
    for gl, hl, nl, ids in passive:
        out.append((gl + quantize(dpm.gaussian_noise(gl.shape, std), frac), hl, nl, ids))
    total = G + quantize(dpm.gaussian_noise(G.shape, std), frac)
    record: dict[str, Any] = {"std": std, "frac": frac, "width": width, "flat": np.asarray(flat),
                              "own": (cg, out[0][0]), "total": (G, total),
                              "passive": [(b[0], o[0]) for b, o in zip(passive, out[1:], strict=True)]}
    return out, total, record


def residuals(record: dict[str, Any]) -> np.ndarray:
    """A node release's noise, standardized: released minus true sums over the announced std, per independent
    draw (each passive candidate, the root total, and each own bin range between consecutive released candidates
    of a feature, over the square root of the bins it spans). N(0, 1) each in an honest run; 0 without noise.
    A leaves' record (:func:`noised_leaves`): each leaf's released minus true G over its std."""
    if "noised" in record:
        return np.concatenate([np.ravel(n - t) / record["std"] for t, n in zip(record["true"], record["noised"],
                                                                                 strict=True)])
    std, scale = record["std"], 2.0 ** -record["frac"]
    out = [((n - t).astype(np.float64).ravel() * scale / std) for t, n in record["passive"]]
    t, n = record["total"]
    out.append((n - t).astype(np.float64).ravel() * scale / std)
    true, noised = record["own"]
    diff = (noised - true).astype(np.float64)[:, 0] * scale
    flat, width = record["flat"].astype(np.int64), record["width"]
    for f in np.unique(flat // width).tolist():
        sel = np.flatnonzero(flat // width == f)
        b = flat[sel] % width
        order = np.argsort(b)
        b, d = b[order], diff[sel][order]
        out.append(np.diff(np.concatenate([[0.0], d])) / (std * np.sqrt(np.diff(np.concatenate([[-1], b])))))
    return np.concatenate(out) if out else np.zeros(0)
