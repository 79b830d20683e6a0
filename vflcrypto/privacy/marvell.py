"""Marvell: the gradient noise of least label leakage under a power constraint, for binary labels.

O. Li, J. Sun, X. Yang, W. Gao, H. Zhang, J. Xie, V. Smith, C. Wang, "Label Leakage and
Protection in Two-party Split Learning", ICLR 2022 (§4, "Marvell"). The label holder adds to
each example's cut-layer gradient g noise drawn by its label y ∈ {0, 1}, whose covariance
is chosen per batch to minimise the leakage of a *worst-case* attacker under a budget on the
noise's expected power (its expected squared norm, which is what costs utility).

The model (the paper's, and its authors' code): within a batch, the gradients of class k
are treated as isotropic Gaussians N(ḡ_k, w_k I) with ḡ_k the class mean and w_k the mean
over coordinates of the class's per-coordinate variance (u = w_0 for the negatives, v = w_1
for the positives), d the gradient's width, p the batch's share of positives and
Δ = ḡ_1 − ḡ_0, g = ‖Δ‖². The noise of class k has covariance λ_2k I + (λ_1k − λ_2k) Δ̂Δ̂ᵀ
(λ_1k along Δ, λ_2k in every direction orthogonal to it), so the perturbed classes are
Gaussians with variances a = u + λ_10, c = v + λ_11 along Δ and b = u + λ_20, e = v + λ_21
across it. Marvell picks the λ that minimise their symmetrised KL divergence

    KL(P̃_1‖P̃_0) + KL(P̃_0‖P̃_1) = ½[(a + g)/c + (c + g)/a + (d − 1)(b/e + e/b)] − d

subject to the power constraint p(λ_11 + (d − 1)λ_21) + (1 − p)(λ_10 + (d − 1)λ_20) ≤ P,
λ ≥ 0, λ_2k ≤ λ_1k. The authors' runs (their ``--init_scale s``, "fixed scale") set
P = s·g, so the constraint scales with the batch's gradients: :func:`marvell_noise` takes s.

Why it bounds any attack: by Pinsker's inequality, a symmetrised KL at most κ bounds the
total variation between the perturbed classes by √κ / 2, so every detector's false positive
and false negative rates sum to at least 1 − √κ / 2 (the paper's bound; its authors log the
detection error ½ − √κ / 4). Every ROC point then has TPR ≤ FPR + √κ / 2, so the AUC of *any*
scoring of the perturbed gradients (norm scoring, direction scoring, or anything else) is at
most ½ + √κ/2 − κ/8 (:func:`leak_auc_bound`). The bound is for the Gaussian model of the
batch's gradients, not for their true distribution: an empirical defence, no (ε, δ).

The solver. The optimum has λ_21 = 0 when u ≤ v and λ_20 = 0 when u > v, and the remaining
across-Δ noise z (λ_20 or λ_21) at most |u − v| (noise across Δ only helps to equalise b and
e; past that it raises b/e + e/b and spends power). For a fixed z the power left for the
along-Δ terms fixes (1 − p)a + pc = K, on which (a + g)/c + (c + g)/a is convex with its
stationary point at c/a = E = √((K + (1 − p)g)/(K + pg)), clipped to the feasible interval
(λ_1k ≥ λ_2k, λ ≥ 0): a closed form, the same as the authors' ``tau``. The outer
minimisation over z is one-dimensional: a grid (linear and geometric) refined by
golden-section search. The authors solve the same problem by alternating minimisation
(``solver.py``, ``solve_isotropic_covariance``); :func:`solve` reproduces their optimum
(``tests/test_marvell.py`` holds it to a brute-force search).

Reproduced from the authors' repository, github.com/OscarcarLi/label-protection:
``custom_gradients_masking.py`` (``KL_gradient_perturb_function_creator``: the batch
statistics u, v, g, p, P = init_scale·g, the noise along Δ̂ and across it per class, and the
logged ``0.5 - sqrt(sumKL)/4``) and ``solver.py`` (the objective ``symKL_objective`` and the
case split on u ≤ v). Written here from the paper's problem, not copied.

Randomness: the OS CSPRNG (:func:`.mechanisms.gaussian_noise`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InputDataError
from . import mechanisms as dpm
from .accounting import Guarantee

__all__ = ["MarvellSolution", "batch_statistics", "draw", "guarantee", "leak_auc_bound", "marvell_noise", "solve",
           "sym_kl"]

_GRID = 129  # linear and geometric grid points of the outer search
_GOLDEN = 60  # golden-section steps of the refinement


@dataclass(frozen=True)
class MarvellSolution:
    """The noise covariance of one batch: λ_10, λ_20 (negatives along / across Δ), λ_11, λ_21 (positives), its
    symmetrised KL (the objective at the optimum) and the problem it solves."""

    lam10: float
    lam20: float
    lam11: float
    lam21: float
    sum_kl: float
    #: the problem: u, v (negatives', positives' mean per-coordinate variance), d, g = ‖Δ‖², p, P
    u: float
    v: float
    d: int
    g: float
    p: float
    power: float

    @property
    def expected_power(self) -> float:
        """The noise's expected squared norm p(λ_11 + (d − 1)λ_21) + (1 − p)(λ_10 + (d − 1)λ_20) (at most P)."""
        return (self.p * (self.lam11 + (self.d - 1) * self.lam21)
                + (1 - self.p) * (self.lam10 + (self.d - 1) * self.lam20))

    @property
    def auc_bound(self) -> float:
        return leak_auc_bound(self.sum_kl)


def leak_auc_bound(sum_kl: float) -> float:
    """The largest AUC any scoring of two distributions can reach when their symmetrised KL is ``sum_kl``:
    ½ + √κ/2 − κ/8 for κ < 4 (total variation at most √κ / 2 by Pinsker; TPR ≤ FPR + TV on the whole ROC), else 1."""
    if not sum_kl >= 0:
        raise InputDataError(f"a KL divergence is >= 0, got {sum_kl}")
    if sum_kl >= 4:
        return 1.0
    tv = math.sqrt(sum_kl) / 2
    return 0.5 + tv - tv * tv / 2


def guarantee(scale: float, covers: str, sum_kls: Sequence[float] | None = None, *,
              defence: str = "marvell") -> Guarantee:
    """Marvell's statement (beside :func:`~.accounting.rr_guarantee` and :func:`~.accounting.gaussian_guarantee`): no
    (ε, δ); the power bound s and, for whoever solved the steps (the label holder), the largest symmetrised KL over
    them and the leak-AUC bound it implies (a party that only reads the announced s states s alone). ``covers`` is
    the protocol's statement of what it protects."""
    params: dict[str, float] = {"power_scale": float(scale)}
    if sum_kls:
        params.update(steps=len(sum_kls), max_sum_kl=max(sum_kls), mean_sum_kl=float(np.mean(sum_kls)),
                      leak_auc_bound=leak_auc_bound(max(sum_kls)))
    return Guarantee(defence, None, None, "Marvell: per-batch noise of least symmetrised KL between the labels' "
                     "perturbed gradients, power s * |mean_1 - mean_0|^2 (Li et al., ICLR 2022)",
                     "none: empirical defence; the AUC bound is for the Gaussian model of each batch's gradients",
                     covers, params)


def sym_kl(lam10: float | np.ndarray, lam20: float | np.ndarray, lam11: float | np.ndarray,
           lam21: float | np.ndarray, u: float, v: float, d: int, g: float) -> np.ndarray:
    """KL(P̃_1‖P̃_0) + KL(P̃_0‖P̃_1) of the perturbed isotropic Gaussian model (the module docstring); inf where a
    variance is 0 and the other is not. Equal variances across Δ (even both 0, the one-dimensional case) add nothing."""
    a, b = np.asarray(u + lam10, np.float64), np.asarray(u + lam20, np.float64)
    c, e = np.asarray(v + lam11, np.float64), np.asarray(v + lam21, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        along = np.where((a > 0) & (c > 0), (a + g) / c + (c + g) / a, np.inf)
        across = np.where(b == e, 2.0, np.where((b > 0) & (e > 0), b / e + e / b, np.inf))
    return 0.5 * (along + (d - 1) * across) - d


def _along(z: np.ndarray, u: float, v: float, d: int, g: float, p: float, power: float,
           neg_across: bool) -> tuple[np.ndarray, np.ndarray]:
    """For each across-Δ noise z (λ_20 if ``neg_across``, else λ_21): the optimal (λ_10, λ_11) in closed form."""
    q = 1.0 - p
    left = power - (q if neg_across else p) * (d - 1) * z  # power left for the along-Δ terms
    K = left + q * u + p * v  # (1 - p) a + p c = K
    E = np.sqrt((K + q * g) / np.maximum(K + p * g, 1e-300))  # c / a at the stationary point
    if neg_across:  # lam10 in [z, left / q]
        lo, hi = u + z, u + left / q
    else:  # lam11 >= z, lam10 >= 0
        lo, hi = np.full_like(z, u), u + (left - p * z) / q
    a = np.clip(K / (q + p * E), lo, np.maximum(lo, hi))
    c = (K - q * a) / p
    return np.maximum(a - u, 0.0), np.maximum(c - v, 0.0)


def solve(u: float, v: float, d: int, g: float, p: float, power: float) -> MarvellSolution:
    """The λ of least symmetrised KL under the power constraint ``power`` (P), for one batch's statistics."""
    for name, x in (("u", u), ("v", v), ("g", g), ("power", power)):
        if not (x >= 0 and math.isfinite(x)):
            raise InputDataError(f"Marvell's {name} must be finite and >= 0, got {x}")
    if not 0 < p < 1 or d < 1:
        raise InputDataError(f"Marvell needs both labels in the batch (0 < p < 1) and d >= 1, got p = {p}, d = {d}")
    neg_across = u <= v
    zmax = min(abs(v - u), power / ((1 - p if neg_across else p) * d)) if d > 1 else 0.0

    def objective(z: np.ndarray) -> np.ndarray:
        l10, l11 = _along(z, u, v, d, g, p, power, neg_across)
        l20, l21 = (z, np.zeros_like(z)) if neg_across else (np.zeros_like(z), z)
        return sym_kl(l10, l20, l11, l21, u, v, d, g)

    if zmax > 0:
        grid = np.unique(np.concatenate([[0.0, zmax], np.linspace(0, zmax, _GRID),
                                         zmax * np.logspace(-12, 0, _GRID)]))
        vals = objective(grid)
        i = int(np.argmin(vals))
        lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
        phi = (math.sqrt(5) - 1) / 2
        for _ in range(_GOLDEN):  # golden-section search in the best grid point's bracket
            m1, m2 = hi - phi * (hi - lo), lo + phi * (hi - lo)
            f1, f2 = objective(np.array([m1, m2]))
            lo, hi = (lo, m2) if f1 <= f2 else (m1, hi)
        cand = np.array([grid[i], (lo + hi) / 2])
        z = float(cand[int(np.argmin(objective(cand)))])
    else:
        z = 0.0
    zs = np.array([z])
    l10, l11 = (float(x[0]) for x in _along(zs, u, v, d, g, p, power, neg_across))
    l20, l21 = (z, 0.0) if neg_across else (0.0, z)
    kl = float(sym_kl(l10, l20, l11, l21, u, v, d, g))
    return MarvellSolution(l10, l20, l11, l21, kl, float(u), float(v), int(d), float(g), float(p), float(power))


def batch_statistics(G: np.ndarray, y: np.ndarray) -> tuple[float, float, np.ndarray, float]:
    """u, v (the negatives' and positives' variance per coordinate, averaged over coordinates), Δ = ḡ_1 − ḡ_0 and
    p (the share of positives), as the authors compute them; :class:`InputDataError` if a class is absent."""
    G = np.asarray(G, np.float64)
    pos = np.asarray(y) == 1
    if G.ndim != 2 or len(G) != len(pos):
        raise InputDataError(f"Marvell takes one gradient row per label, got {G.shape} and {len(pos)} labels")
    if pos.all() or not pos.any():
        raise InputDataError("Marvell needs both labels in the batch")
    m1, m0 = G[pos].mean(0), G[~pos].mean(0)
    v = float(np.mean((G[pos] - m1) ** 2))
    u = float(np.mean((G[~pos] - m0) ** 2))
    return u, v, m1 - m0, float(pos.mean())


def marvell_noise(G: np.ndarray, y: np.ndarray, scale: float,
                  fallback: MarvellSolution | None = None, direction: np.ndarray | None = None,
                  ) -> tuple[np.ndarray, MarvellSolution, np.ndarray]:
    """The rows of ``G`` (one example's gradient each, labels ``y`` in {0, 1}) with Marvell's noise at power
    P = ``scale``·‖Δ‖²: returns the noised rows, the solution and the unit direction Δ̂ it used.

    Per example of class k: √(λ_1k − λ_2k)·ξ·Δ̂ + √λ_2k·ζ with ξ ~ N(0, 1), ζ ~ N(0, I_d) (as the
    authors' ``KL_gradient_perturb``). A batch with one class only has no Δ: the previous batch's
    ``fallback`` solution and ``direction`` are reused (refused for a first batch without them).
    """
    if not (scale > 0 and math.isfinite(scale)):
        raise InputDataError(f"Marvell's power bound must be finite and > 0, got {scale}")
    G = np.asarray(G, np.float64)
    y = np.asarray(y)
    if not np.isin(y, (0, 1)).all():
        raise InputDataError("Marvell protects binary labels (0 and 1) only")
    d = G.shape[1]
    pos = y == 1
    if pos.all() or not pos.any():
        if fallback is None or direction is None:
            raise InputDataError("Marvell needs both labels in its first batch (try a larger --batch-size)")
        sol, unit = fallback, direction
    else:
        u, v, delta, p = batch_statistics(G, y)
        g = float(delta @ delta)
        sol = solve(u, v, d, g, p, scale * g)
        unit = delta / math.sqrt(g) if g > 0 else np.zeros(d)
    return G + draw(pos, sol, unit), sol, unit


def draw(positive: np.ndarray, sol: MarvellSolution, unit: np.ndarray) -> np.ndarray:
    """One noise row per example (``positive``: its label is 1) from the covariance ``sol`` around direction ``unit``:
    √(λ_1k − λ_2k)·ξ·Δ̂ + √λ_2k·ζ, ξ ~ N(0, 1), ζ ~ N(0, I_d), from the OS CSPRNG."""
    b, d = len(positive), len(unit)
    along = np.where(positive, math.sqrt(max(sol.lam11 - sol.lam21, 0.0)), math.sqrt(max(sol.lam10 - sol.lam20, 0.0)))
    across = np.where(positive, math.sqrt(sol.lam21), math.sqrt(sol.lam20))
    return ((along * dpm.gaussian_noise(b, 1.0))[:, None] * unit[None, :]
            + across[:, None] * dpm.gaussian_noise((b, d), 1.0))
