"""The server-side math of few-shot VFL: the attention estimate of a missing view and the Eq. 9 gate.

Both are plain numpy on representations the server holds (seed 000 §12.10-12.11; Sun et
al., ICCV 2023; the attention estimate follows FedCVT, Kang et al., ACM TIST 2022).
"""

from __future__ import annotations

import numpy as np

from vflcrypto.errors import InputDataError

__all__ = ["attention_estimate", "dual_gate", "softmax_rows"]


def softmax_rows(Z: np.ndarray) -> np.ndarray:
    """Row-wise softmax (shifted by the row maximum, so it never overflows)."""
    Z = np.asarray(Z, np.float64)
    E = np.exp(Z - Z.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def attention_estimate(Hu_own: np.ndarray, Ho_own: np.ndarray, Ho_other: np.ndarray) -> np.ndarray:
    """Ĥ_u^B = softmax(H_u^A (H_o^A)ᵀ / √d) H_o^B: the other party's view of A's unaligned rows.

    Each unaligned row of A attends over the overlap rows by the similarity of A's own
    representations and takes the attention-weighted mean of B's overlap representations.
    """
    Hu, Ho, Hb = (np.asarray(a, np.float64) for a in (Hu_own, Ho_own, Ho_other))
    if Hu.ndim != 2 or Ho.ndim != 2 or Hb.ndim != 2 or Hu.shape[1] != Ho.shape[1] or len(Ho) != len(Hb):
        raise InputDataError(f"attention needs H_u (u x d), H_o (o x d) and the other H_o (o x d'); got "
                             f"{Hu.shape}, {Ho.shape}, {Hb.shape}")
    return softmax_rows(Hu @ Ho.T / np.sqrt(Ho.shape[1])) @ Hb


def dual_gate(c_own: np.ndarray, p_own: np.ndarray, c_joint: np.ndarray, p_joint: np.ndarray,
              threshold: float) -> np.ndarray:
    """Eq. 9: p̂ = 1(ĉ_A = ĉ_AB) · 1(p_A* > t) · 1(p_AB* > t) · p_AB* per row (0 = pseudo-label rejected).

    ``c_own``/``p_own``: class and confidence of the auxiliary head on A's view alone;
    ``c_joint``/``p_joint``: of the joint head on A's view with the estimated other view.
    """
    c_a, p_a, c_ab, p_ab = (np.asarray(x).ravel() for x in (c_own, p_own, c_joint, p_joint))
    if not len(c_a) == len(p_a) == len(c_ab) == len(p_ab):
        raise InputDataError("the gate needs one class and one confidence per row from both heads")
    keep = (c_a == c_ab) & (p_a > threshold) & (p_ab > threshold)
    return np.where(keep, p_ab.astype(np.float64), 0.0)
