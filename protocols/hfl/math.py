"""The local step and the server update of FedAvg, FedProx and SCAFFOLD (numpy; softmax regression).

The model is multinomial logistic regression: W of shape (d + 1) × C (the last row the
bias), flattened. A client runs ``local_steps`` (K) mini-batch SGD steps of learning
rate η from the global model w:

* FedAvg (McMahan et al., AISTATS 2017): ∇F_i(w);
* FedProx (Li et al., MLSys 2020): ∇F_i(w) + μ (w − w^t), the gradient of
  h_i(w; w^t) = F_i(w) + (μ/2)‖w − w^t‖² (μ = 0 is FedAvg; K fixed steps are the
  γ-inexact solve);
* SCAFFOLD (Karimireddy et al., ICML 2020): ∇F_i(w) − c_i + c, then the paper's option
  II c_i⁺ = c_i − c + (w^t − w_i)/(K η) (seed 000 omits the c_i update).

The client's contribution is one vector [n_i (w_i − w^t), n_i, (c_i⁺ − c_i)]; the
server divides the first part of the sum by the second (the sample-weighted FedAvg
mean) and adds the mean of the third to c (over all N clients, as in the paper). Under
DP-FedAvg (:mod:`.defence`) it is [clip(w_i − w^t, C) + noise, 1] instead: uniform weights
(n_i is unbounded and would itself leak), the server's division the mean over the survivors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vflcrypto.errors import InputDataError
from vflcrypto.spec import option

from .defence import DpFedAvg, noise_for_budget

__all__ = ["ALGORITHMS", "HFLConfig", "accuracy_counts", "client_vector", "local_train", "server_update",
           "softmax_gradient"]

ALGORITHMS = ("fedavg", "fedprox", "scaffold")


@dataclass(frozen=True)
class HFLConfig:
    """Training parameters of horizontal FL (the server sends them with the model; clients check them)."""

    algorithm: str = option("fedavg", "aggregation rule", choices=ALGORITHMS)
    rounds: int = option(20, "training rounds (one secure aggregation each)")
    local_steps: int = option(10, "local SGD steps K per round")
    lr: float = option(0.1, "local learning rate η")
    mu: float = option(0.01, "FedProx's proximal weight μ (0 = FedAvg)")
    batch_size: int | None = option(32, "rows per local step (default 32; full batch if unset)")
    secure: bool = option(True, "aggregate through secure aggregation", flag="--secure", negative="--plain")
    seed: int = option(0, "public seed of the local batch order")
    dp_noise: float | None = option(None, "DP-FedAvg: the noise std in the aggregate over --dp-clip (sigma; each "
                                          "client adds its share before masking)")
    dp_epsilon: float | None = option(None, "DP-FedAvg: noise calibrated to this client-level epsilon at --dp-delta "
                                            "over the rounds (RDP accountant); instead of --dp-noise")
    dp_clip: float = option(1.0, "DP-FedAvg: L2 clip norm C of each client's model update")
    dp_delta: float = option(1e-5, "DP-FedAvg: delta of the client-level guarantee")
    dp_min_clients: int | None = option(None, "DP-FedAvg: the survivors m whose noise shares make up sigma*C (each "
                                              "client adds sigma*C/sqrt(m); default: every client)")

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise InputDataError(f"algorithm must be one of {ALGORITHMS}, not {self.algorithm!r}")
        if self.rounds < 1 or self.local_steps < 1 or not self.lr > 0 or self.mu < 0:
            raise InputDataError("need rounds >= 1, local_steps >= 1, lr > 0 and mu >= 0")
        if self.batch_size is not None and self.batch_size < 1:
            raise InputDataError("batch size must be >= 1")
        if self.dp_noise is not None and self.dp_epsilon is not None:
            raise InputDataError("give --dp-noise or --dp-epsilon, not both")
        if self.dp_epsilon is not None and not (self.dp_epsilon > 0 and math.isfinite(self.dp_epsilon)):
            raise InputDataError(f"--dp-epsilon must be finite and > 0, got {self.dp_epsilon}")
        if self.dp_on and self.algorithm == "scaffold":
            raise InputDataError("DP-FedAvg clips and noises the model update only: SCAFFOLD's control-variate "
                                 "change would leave the clients unprotected (use fedavg or fedprox)")
        if self.dp_on:
            self.dp(self.dp_min_clients or 1)  # the defence's own checks, before any party starts

    @property
    def dp_on(self) -> bool:
        return self.dp_noise is not None or self.dp_epsilon is not None

    def dp(self, n_clients: int) -> DpFedAvg | None:
        """DP-FedAvg as this configuration asks for it with ``n_clients`` clients (None: off); the noise multiplier
        calibrated to --dp-epsilon over the rounds, m = --dp-min-clients or every client."""
        if not self.dp_on:
            return None
        m = self.dp_min_clients if self.dp_min_clients is not None else n_clients
        if not 1 <= m <= n_clients:
            raise InputDataError(f"--dp-min-clients must lie in 1..{n_clients} (the clients), got {m}")
        sigma = self.dp_noise if self.dp_epsilon is None else noise_for_budget(self.dp_epsilon, self.dp_delta,
                                                                                self.rounds)
        assert sigma is not None  # dp_on
        return DpFedAvg(float(sigma), self.dp_clip, self.dp_delta, m, self.secure)


def _logits(W: np.ndarray, X: np.ndarray) -> np.ndarray:
    return X @ W[:-1] + W[-1]


def softmax_gradient(W: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Gradient of the mean cross-entropy of softmax regression W on (X, y)."""
    Z = _logits(W, X)
    P = np.exp(Z - Z.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    P[np.arange(len(y)), y] -= 1.0
    P /= len(y)
    return np.vstack([X.T @ P, P.sum(0, keepdims=True)])


def local_train(w: np.ndarray, X: np.ndarray, y: np.ndarray, cfg: HFLConfig, n_classes: int, *, c: np.ndarray,
                c_i: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """K local steps from the global ``w``; returns (w_i, c_i⁺) (c_i⁺ = c_i unless SCAFFOLD)."""
    shape = (X.shape[1] + 1, n_classes)
    W0 = np.asarray(w, np.float64).reshape(shape)
    W = W0.copy()
    C, Ci = np.asarray(c, np.float64).reshape(shape), np.asarray(c_i, np.float64).reshape(shape)
    rng = np.random.default_rng(seed)  # batch order: public training randomness
    for _ in range(cfg.local_steps):
        rows = slice(None) if cfg.batch_size is None or cfg.batch_size >= len(y) else \
            rng.choice(len(y), cfg.batch_size, replace=False)
        g = softmax_gradient(W, X[rows], y[rows])
        if cfg.algorithm == "fedprox":
            g = g + cfg.mu * (W - W0)
        elif cfg.algorithm == "scaffold":
            g = g - Ci + C
        W = W - cfg.lr * g
    if cfg.algorithm == "scaffold":
        Ci = Ci - C + (W0 - W) / (cfg.local_steps * cfg.lr)
    return W.ravel(), Ci.ravel()


def client_vector(w: np.ndarray, w_i: np.ndarray, n_i: int, dc_i: np.ndarray | None) -> np.ndarray:
    """What a client aggregates: [n_i (w_i − w), n_i, (Δc_i)]."""
    parts = [n_i * (np.asarray(w_i) - np.asarray(w)), np.asarray([float(n_i)])]
    if dc_i is not None:
        parts.append(np.asarray(dc_i))
    return np.concatenate(parts)


def server_update(w: np.ndarray, c: np.ndarray, total: np.ndarray, n_clients: int,
                  scaffold: bool) -> tuple[np.ndarray, np.ndarray]:
    """The new (w, c) from the aggregated sum of :func:`client_vector` outputs."""
    p = len(w)
    n = float(total[p])
    if not n > 0:
        raise InputDataError("the aggregate counts no samples")
    w_new = np.asarray(w) + total[:p] / n
    c_new = np.asarray(c) + total[p + 1 :] / n_clients if scaffold else np.asarray(c)
    return w_new, c_new


def accuracy_counts(w: np.ndarray, X: np.ndarray, y: np.ndarray, n_classes: int) -> tuple[int, int]:
    """(correct, rows) of the model on (X, y)."""
    if not len(y):
        return 0, 0
    W = np.asarray(w).reshape(X.shape[1] + 1, n_classes)
    return int(np.sum(_logits(W, X).argmax(1) == y)), len(y)
