"""The mechanisms of the defences: randomized response on labels, per-row clipping, Gaussian noise.

Randomness comes from the OS CSPRNG (``os.urandom``), never from a seeded generator: a
receiver that could predict the noise or the flipped labels could subtract them.
Uniform floats take 53 random bits; Gaussian noise is drawn by the Box–Muller transform
in float64. The guarantees hold for the ideal real-valued mechanisms: floating-point
Gaussian sampling is not the exact mechanism the accountant analyses, and attacks on
floating-point noise exist (Mironov, CCS 2012, for the Laplace mechanism; Jin et al., IEEE
S&P 2022, for Gaussian samplers); a discrete Gaussian would close that gap.

Randomized response over k classes (Warner 1965; the k-ary form as in Ghazi et al.,
"Deep Learning with Label Differential Privacy", NeurIPS 2021, RR_ε): keep the true label
with probability e^ε / (e^ε + k − 1), else output one of the k − 1 other labels uniformly.
Every output's probability changes by a factor of at most e^ε when the input label
changes, so it is **pure ε-label-DP** (δ = 0) per row; one draw per row, reused by
everything computed afterwards (post-processing), so training for many epochs does not
spend more.

Randomized response with a prior (RRWithPrior, Ghazi et al., NeurIPS 2021, Algorithms 1 and 2):
given a prior p over the K classes for one row, let Y_k be the k classes of largest p (ties
broken by class index) and w_k = e^ε / (e^ε + k − 1) · Σ_{c ∈ Y_k} p_c; take k* = argmax_k w_k
(the smallest on ties; it depends on p only, never on the label). RRTop-k* then outputs the
true label with probability e^ε / (e^ε + k* − 1) and each other class of Y_k* with probability
1 / (e^ε + k* − 1) when the label is in Y_k*, and a class of Y_k* uniformly otherwise. Every
output's probability changes by a factor of at most e^ε when the label changes (Lemma 1,
Corollary 2): **pure ε-label-DP** per row, as RR; a uniform prior gives k* = K, plain RR.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from ..errors import InputDataError

__all__ = ["clip_rows", "gaussian_noise", "randomized_response", "rr_epsilon", "rr_keep_probability",
           "rr_with_prior", "rr_with_prior_k", "rr_with_prior_keep", "rr_with_prior_matrix", "secure_uniform"]


def _words(n: int) -> np.ndarray:
    return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)


def secure_uniform(n: int) -> np.ndarray:
    """``n`` floats uniform on [0, 1) with 53 random bits each, from the OS CSPRNG."""
    return (_words(n) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def gaussian_noise(shape: int | Sequence[int], std: float) -> np.ndarray:
    """Gaussian noise N(0, std²) of ``shape`` (float64) by the Box–Muller transform on CSPRNG uniforms."""
    if not std >= 0 or not math.isfinite(std):
        raise InputDataError(f"the noise's standard deviation must be finite and >= 0, got {std}")
    shape_t = (shape,) if isinstance(shape, int) else tuple(shape)
    n = int(np.prod(shape_t, dtype=np.int64))
    half = (n + 1) // 2
    u1 = 1.0 - secure_uniform(half)  # (0, 1]: log is finite
    u2 = secure_uniform(half)
    r = np.sqrt(-2.0 * np.log(u1))
    z = np.concatenate([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)])[:n]
    return (std * z).reshape(shape_t)


def rr_keep_probability(epsilon: float, k: int) -> float:
    """Randomized response over ``k`` classes at ε: the probability e^ε / (e^ε + k − 1) of keeping the true label."""
    if not epsilon > 0 or k < 2:
        raise InputDataError(f"randomized response needs ε > 0 and k >= 2 classes, got ε = {epsilon}, k = {k}")
    if epsilon > 700:  # e^ε overflows; the label is kept
        return 1.0
    return math.exp(epsilon) / (math.exp(epsilon) + k - 1)


def rr_epsilon(keep: float, k: int) -> float:
    """The pure ε of randomized response that keeps the label with probability ``keep`` over ``k`` classes:
    the largest ratio of an output's probabilities under two inputs, keep / ((1 − keep) / (k − 1))."""
    if not 1.0 / k < keep < 1:
        raise InputDataError(f"need 1/k < keep < 1, got keep = {keep}, k = {k}")
    return math.log(keep * (k - 1) / (1 - keep))


def randomized_response(labels: np.ndarray, k: int, epsilon: float) -> np.ndarray:
    """Each label kept with probability :func:`rr_keep_probability`, else replaced by one of the other k − 1
    uniformly (one independent CSPRNG draw per row)."""
    y = np.asarray(labels)
    if y.ndim != 1 or (y.size and (y.min() < 0 or y.max() >= k)):
        raise InputDataError(f"randomized response takes 1-D labels in 0..{k - 1}")
    keep = secure_uniform(len(y)) < rr_keep_probability(epsilon, k)
    other = (_words(len(y)) % np.uint64(k - 1)).astype(np.int64)  # modulo bias < 2^-59 for k <= 32
    return np.where(keep, y, (y + 1 + other) % k).astype(y.dtype)


def _prior_order(priors: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """Each row's classes by decreasing prior (ties by class index) and its k* (Algorithm 2, steps 1–2)."""
    P = np.asarray(priors, np.float64)
    if P.ndim != 2 or P.shape[1] < 2 or not np.all(np.isfinite(P)) or np.any(P < 0):
        raise InputDataError("RRWithPrior takes an (n, K) array of finite priors >= 0 over K >= 2 classes")
    order = np.argsort(-P, axis=1, kind="stable")
    K = P.shape[1]
    ks = np.arange(1, K + 1, dtype=np.float64)
    keep = np.array([rr_keep_probability(epsilon, int(k)) if k > 1 else 1.0 for k in ks])
    w = keep[None, :] * np.cumsum(np.take_along_axis(P, order, axis=1), axis=1)
    return order, np.argmax(w, axis=1) + 1  # argmax: the first (smallest) k on ties


def rr_with_prior_k(priors: np.ndarray, epsilon: float) -> np.ndarray:
    """k* = argmax_k e^ε / (e^ε + k − 1) · (the sum of the k largest priors) of each row of ``priors`` (n, K)."""
    return _prior_order(priors, epsilon)[1]


def rr_with_prior_keep(labels: np.ndarray, priors: np.ndarray, epsilon: float) -> np.ndarray:
    """Each row's probability that RRWithPrior outputs its true label: e^ε / (e^ε + k* − 1) when the label is
    among the k* classes of largest prior, else 0 (what the label holder's check holds its draws to)."""
    y = np.asarray(labels)
    order, k = _prior_order(priors, epsilon)
    rank = np.argmax(order == y[:, None], axis=1)
    keep = np.array([rr_keep_probability(epsilon, int(j)) if j > 1 else 1.0 for j in k])
    return np.where(rank < k, keep, 0.0)


def rr_with_prior_matrix(prior: np.ndarray, epsilon: float) -> np.ndarray:
    """The exact output distribution of RRWithPrior for one prior: M[y, c] = Pr[output c | true label y]."""
    p = np.asarray(prior, np.float64).reshape(1, -1)
    order, kk = _prior_order(p, epsilon)
    K, k = p.shape[1], int(kk[0])
    top = order[0, :k]
    M = np.zeros((K, K))
    e = 1.0 if k == 1 else rr_keep_probability(epsilon, k)
    for y in range(K):
        if y in top:
            M[y, top] = (1.0 - e) / (k - 1) if k > 1 else 0.0
            M[y, y] = e
        else:
            M[y, top] = 1.0 / k
    return M


def rr_with_prior(labels: np.ndarray, priors: np.ndarray, epsilon: float) -> np.ndarray:
    """RRWithPrior (Ghazi et al. 2021, Algorithm 2) on each row: ``labels`` (n,) in 0..K−1, ``priors`` (n, K) (rows
    need not sum to 1: only their order and partial sums matter); one independent CSPRNG draw per row."""
    y = np.asarray(labels)
    P = np.asarray(priors, np.float64)
    if y.ndim != 1 or P.ndim != 2 or len(P) != len(y) or (y.size and (y.min() < 0 or y.max() >= P.shape[1])):
        raise InputDataError(f"RRWithPrior takes 1-D labels in 0..K-1 and one prior row per label, got labels "
                             f"{y.shape} and priors {P.shape}")
    order, k = _prior_order(P, epsilon)
    n = len(y)
    rank = np.argmax(order == y[:, None], axis=1)
    inside = rank < k
    keep_p = np.array([rr_keep_probability(epsilon, int(j)) if j > 1 else 1.0 for j in k])
    u = secure_uniform(n)
    w = _words(n)  # modulo bias < 2^-59 for K <= 32
    other = (w % np.maximum(k - 1, 1).astype(np.uint64)).astype(np.int64)  # one of the k* − 1 others of Y_k*
    pos_other = np.where(other < rank, other, other + 1)
    pos_any = (w % k.astype(np.uint64)).astype(np.int64)  # one of Y_k* uniformly
    pos = np.where(inside, np.where(u < keep_p, rank, pos_other), pos_any)
    return order[np.arange(n), pos].astype(y.dtype)


def clip_rows(G: np.ndarray, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """Each row of ``G`` scaled to L2 norm at most ``clip`` (rows within it unchanged); and the factors used."""
    if not clip > 0:
        raise InputDataError(f"the clip norm must be > 0, got {clip}")
    A = np.asarray(G, np.float64)
    norms = np.linalg.norm(A.reshape(len(A), -1), axis=1)
    factor = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
    return A * factor.reshape((-1,) + (1,) * (A.ndim - 1)), factor
