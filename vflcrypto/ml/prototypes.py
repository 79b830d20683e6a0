"""Prototype math of prototype-based VFL with unaligned data (seed 002; Proto-EVFL, PCT).

Plain numpy functions, no party and no channel: a party's local step (mixed prior and
prototypes, similarities, EM posteriors, prior refresh, prototype update, the two-way
prototype loss) and the server's gated fusion and cross-entropy. The protocol composes
them; the tests check them against the seed's worked numbers (``../shared/SEEDS.md``).

Conventions and the choices the seed leaves open:

* Classes are indexed from 0 (the seed's "class 1" is index 0).
* ``similarity`` is s_jk = −‖f_j − μ_k‖² (never positive). The seed's examples use
  positive similarities (0.8, 0.2, 0.5); the posterior is shift-invariant in s, so
  :func:`posterior` takes s as given.
* **Mixed prototypes** have no formula in the seed. Here μ̃ = β·μ^(m) + (1−β)·μ^g, the same
  convex blend as the mixed prior. That blend is meaningful only when μ^(m) and μ^g live
  in one space. The seed mixes party-space and fused-space prototypes; the protocol
  fixes that by computing every prototype in the fused space, on the adapter's outputs.
* **Two-way loss.** As the seed states it:
  L = (1/N) Σ_j min_k D_jk + (1/K) Σ_k min_j D_jk, with D the squared distances.
  The seed's combined example (≈ 8,734) cannot come from one distance matrix, so each
  half is tested on its own. :func:`smooth_two_way_loss` replaces each min by a
  softmin-weighted mean at temperature τ (the transport-style variant used for
  training; it tends to the hard loss as τ → 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputDataError

__all__ = [
    "check_distribution",
    "check_embeddings",
    "converged",
    "cross_entropy",
    "fuse",
    "mix_prior",
    "mix_prototypes",
    "posterior",
    "prior_refresh",
    "prototype_update",
    "ranking",
    "similarity",
    "smooth_two_way_loss",
    "squared_distances",
    "two_way_loss",
    "two_way_terms",
]


def check_distribution(p: Any, what: str = "prior", *, atol: float = 1e-9) -> np.ndarray:
    """A 1-D probability vector: finite, non-negative, summing to 1; :class:`InputDataError` otherwise."""
    a = np.asarray(p, dtype=np.float64)
    if a.ndim != 1 or a.size < 1 or not np.isfinite(a).all():
        raise InputDataError(f"{what}: expected a finite 1-D vector, got shape {a.shape}")
    if (a < 0).any():
        raise InputDataError(f"{what}: negative entries {a[a < 0].tolist()}")
    if abs(float(a.sum()) - 1.0) > atol:
        raise InputDataError(f"{what}: entries sum to {float(a.sum()):.6g}, not 1")
    return a


def check_embeddings(F: Any, what: str = "embeddings", dim: int | None = None) -> np.ndarray:
    """A finite 2-D float matrix (of ``dim`` columns if given)."""
    a = np.asarray(F, dtype=np.float64)
    if a.ndim != 2 or (dim is not None and a.shape[1] != dim):
        raise InputDataError(f"{what}: expected a 2-D matrix{'' if dim is None else f' of {dim} columns'}, "
                             f"got shape {a.shape}")
    if not np.isfinite(a).all():
        raise InputDataError(f"{what}: NaN or infinite values")
    return a


def _unit(x: float, what: str) -> float:
    if not 0.0 <= x <= 1.0:
        raise InputDataError(f"{what} must lie in [0, 1], got {x}")
    return float(x)


def mix_prior(local: Any, global_: Any, alpha: float) -> np.ndarray:
    """π̃ = α·π^(m) + (1−α)·π^g (both validated distributions of the same length)."""
    a, g = check_distribution(local, "local prior"), check_distribution(global_, "global prior")
    if a.shape != g.shape:
        raise InputDataError(f"priors of {a.size} and {g.size} classes")
    w = _unit(alpha, "alpha")
    return w * a + (1.0 - w) * g


def mix_prototypes(local: Any, global_: Any, beta: float) -> np.ndarray:
    """μ̃ = β·μ^(m) + (1−β)·μ^g, K × d each (one space: see the module docstring)."""
    a, g = check_embeddings(local, "local prototypes"), check_embeddings(global_, "global prototypes")
    if a.shape != g.shape:
        raise InputDataError(f"prototypes of shapes {a.shape} and {g.shape}")
    w = _unit(beta, "beta")
    return w * a + (1.0 - w) * g


def squared_distances(F: Any, mu: Any) -> np.ndarray:
    """D_jk = ‖f_j − μ_k‖² (N × K)."""
    f, m = check_embeddings(F), check_embeddings(mu, "prototypes")
    if f.shape[1] != m.shape[1]:
        raise InputDataError(f"embeddings of {f.shape[1]} and prototypes of {m.shape[1]} dimensions")
    d = (f * f).sum(1)[:, None] - 2.0 * f @ m.T + (m * m).sum(1)[None, :]
    return np.maximum(d, 0.0)


def similarity(F: Any, mu: Any) -> np.ndarray:
    """s_jk = −‖f_j − μ_k‖²."""
    return -squared_distances(F, mu)


def posterior(s: Any, prior: Any) -> np.ndarray:
    """q_jk = π̃_k e^{s_jk} / Σ_l π̃_l e^{s_jl} (rows of s; computed stably in log space)."""
    sim = np.atleast_2d(np.asarray(s, dtype=np.float64))
    p = check_distribution(prior)
    if sim.shape[1] != p.size or not np.isfinite(sim).all():
        raise InputDataError(f"similarities of shape {sim.shape} for {p.size} classes (finite values needed)")
    with np.errstate(divide="ignore"):
        logits = sim + np.log(p)
    logits -= logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


def ranking(s: Any) -> tuple[np.ndarray, float]:
    """(classes from most to least similar, margin = best − second-best similarity) of one row."""
    row = np.asarray(s, dtype=np.float64).ravel()
    order = np.argsort(-row, kind="stable")
    return order, float(row[order[0]] - row[order[1]]) if row.size > 1 else float("inf")


def prior_refresh(q: Any) -> np.ndarray:
    """π_k = (1/N) Σ_j q_jk (the M-step of the class proportions)."""
    a = check_embeddings(q, "posteriors")
    if a.shape[0] == 0:
        raise InputDataError("no rows to refresh the prior from")
    return a.mean(axis=0)


def prototype_update(F: Any, q: Any, fallback: Any | None = None) -> np.ndarray:
    """μ_k = Σ_j q_jk f_j / Σ_j q_jk (the M-step); a class with no mass keeps ``fallback``'s row (or 0)."""
    f, w = check_embeddings(F), check_embeddings(q, "posteriors")
    if f.shape[0] != w.shape[0]:
        raise InputDataError(f"{f.shape[0]} embeddings but {w.shape[0]} posterior rows")
    mass = w.sum(axis=0)
    sums = w.T @ f
    out = np.zeros_like(sums) if fallback is None else check_embeddings(fallback, "fallback", f.shape[1]).copy()
    has = mass > 1e-12
    out[has] = sums[has] / mass[has, None]
    return out


def two_way_terms(D: Any) -> tuple[float, float]:
    """(L_{F→μ}, L_{μ→F}) = ((1/N) Σ_j min_k D_jk, (1/K) Σ_k min_j D_jk) of a squared-distance matrix."""
    d = np.asarray(D, dtype=np.float64)
    if d.ndim != 2 or 0 in d.shape or not np.isfinite(d).all() or (d < 0).any():
        raise InputDataError(f"need a non-empty finite matrix of squared distances, got shape {d.shape}")
    return float(d.min(axis=1).mean()), float(d.min(axis=0).mean())


def two_way_loss(F: Any, mu: Any) -> float:
    """The seed's two-way prototype loss L_{F→μ} + L_{μ→F} (hard minima)."""
    a, b = two_way_terms(squared_distances(F, mu))
    return a + b


def _softmin_mean(d: np.ndarray, axis: int, tau: float) -> np.ndarray:
    z = -d / tau
    z -= z.max(axis=axis, keepdims=True)
    w = np.exp(z)
    w /= w.sum(axis=axis, keepdims=True)
    return np.asarray((w * d).sum(axis=axis))


def smooth_two_way_loss(D: Any, tau: float) -> float:
    """Each min of :func:`two_way_terms` replaced by a softmin-weighted mean at temperature τ > 0."""
    d = np.asarray(D, dtype=np.float64)
    two_way_terms(d)  # the same checks
    if not tau > 0:
        raise InputDataError("the temperature must be > 0")
    return float(_softmin_mean(d, 1, tau).mean() + _softmin_mean(d, 0, tau).mean())


def fuse(G: Any, w: Any) -> np.ndarray:
    """z_i = Σ_m w_i^(m) g_i^(m).

    ``G`` is M × N × d (or M × d for one row) and ``w`` is N × M (or M); each row of ``w`` must be a distribution.
    """
    g = np.asarray(G, dtype=np.float64)
    weights = np.asarray(w, dtype=np.float64)
    single = g.ndim == 2
    if single:
        g, weights = g[:, None, :], weights[None, :]
    if g.ndim != 3 or weights.shape != (g.shape[1], g.shape[0]) or not np.isfinite(g).all():
        raise InputDataError(f"party outputs of shape {np.shape(G)} and gate weights of shape {np.shape(w)}")
    for i, row in enumerate(weights):
        check_distribution(row, f"gate weights of row {i}", atol=1e-6)
    z = np.einsum("nm,mnd->nd", weights, g)
    return z[0] if single else z


def cross_entropy(y: Any, p: Any) -> float:
    """−Σ_k y_k log p_k, averaged over rows (``y`` one-hot or class indices; ``p`` rows of probabilities)."""
    prob = np.atleast_2d(np.asarray(p, dtype=np.float64))
    for i, row in enumerate(prob):
        check_distribution(row, f"predicted probabilities of row {i}", atol=1e-6)
    labels = np.asarray(y)
    onehot = labels.reshape(prob.shape) if labels.size == prob.size else np.eye(prob.shape[1])[labels.ravel()]
    with np.errstate(divide="ignore"):
        logp = np.where(onehot > 0, np.log(np.maximum(prob, 1e-300)), 0.0)
    return float(-(onehot * logp).sum(axis=1).mean())


def converged(prev: float | np.ndarray | None, cur: float | np.ndarray, tol: float) -> bool:
    """Stop when the loss (or every parameter) moved by at most ``tol``, relative to its size."""
    if prev is None:
        return False
    a, b = np.asarray(prev, dtype=np.float64), np.asarray(cur, dtype=np.float64)
    return bool(np.all(np.abs(b - a) <= tol * np.maximum(1.0, np.abs(a))))
