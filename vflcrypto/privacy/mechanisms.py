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
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from ..errors import InputDataError

__all__ = ["clip_rows", "gaussian_noise", "randomized_response", "rr_epsilon", "rr_keep_probability",
           "secure_uniform"]


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


def clip_rows(G: np.ndarray, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """Each row of ``G`` scaled to L2 norm at most ``clip`` (rows within it unchanged); and the factors used."""
    if not clip > 0:
        raise InputDataError(f"the clip norm must be > 0, got {clip}")
    A = np.asarray(G, np.float64)
    norms = np.linalg.norm(A.reshape(len(A), -1), axis=1)
    factor = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
    return A * factor.reshape((-1,) + (1,) * (A.ndim - 1)), factor
