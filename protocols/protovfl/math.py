"""The computation of prototype VFL: the server's gated fusion model and a party's local prototype step.

Plain functions over numpy arrays (torch inside, imported lazily); the roles compose
them and the prototype algebra itself is :mod:`vflcrypto.ml.prototypes`.

**One shared space.** Every prototype lives in the server's *fused space* R^w, the space
of the adapter outputs g^(m) = A_m(h^(m)) and of their gated mixture z = Σ_m w^(m) g^(m).
The server sends party m its own adapter A_m with μ^g and π^g, so the party maps its
unaligned rows to f_j = A_m(E_m(x_j)), in the space of μ^g. Its local prototypes μ^(m) are
q-weighted means of those f_j, so the mixed prototypes μ̃ = β·μ^(m) + (1−β)·μ^g blend two
points of one space (the seed mixes party-space and fused-space prototypes).

**The local step** (party m, its unaligned rows U(m), adapter fixed): with
π̃ = α·π^(m) + (1−α)·π^g and μ̃, for each batch D_jk = ‖f_j − μ̃_k‖², the E-step posterior
q_jk ∝ π̃_k exp(−D_jk/τ) (held fixed in the gradient), and the loss

    L = (1/N) Σ_j Σ_k q_jk D_jk + (1/K) Σ_k Σ_j softmin_j(D_·k/τ) D_jk,

the seed's two-way loss with each hard min replaced by a soft assignment (the first
half weighted by the EM posterior, as PCT's transport loss; the second by a softmin
over rows). The extractor E_m moves; epochs stop early when the loss stops moving
(:func:`vflcrypto.ml.prototypes.converged`). After training, π^(m) = mean_j q_jk and
μ^(m) = Σ_j q_jk f_j / Σ_j q_jk (the M-step).

**What a party contributes to the server** (a sum over parties in the secure mode): the
soft counts c_k = Σ_j q_jk and sums T_k = Σ_j q_jk f_j of its unaligned rows, which S
folds into μ^g_k = (Σ_{i∈A, y_i=k} z_i + λ T_k) / (n_k + λ c_k) and π^g_k ∝ n_k + λ c_k
(λ = ``unaligned_weight``; λ = 0 ignores the unaligned rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError
from vflcrypto.ml.prototypes import check_distribution, converged, mix_prior, mix_prototypes, prototype_update
from vflcrypto.spec import option

__all__ = ["FusionState", "ProtoConfig", "class_statistics", "fit_fusion", "fuse_rows", "global_prototypes",
           "local_step", "prototype_loss", "split_statistics"]

MAX_CLASSES = 1000


@dataclass(frozen=True)
class ProtoConfig:
    """Prototype VFL's public parameters (every party checks the setup against its own)."""

    dim: int = option(32, "width d of every party's embedding h = E_m(x)")
    width: int = option(32, "width w of the fused space (adapter outputs, z and the prototypes)")
    hidden: int = option(64, "hidden units of the default MLP extractors")
    rounds: int = option(3, "prototype rounds after the first fit (0: the aligned rows only)")
    local_epochs: int = option(10, "most epochs of a party's local prototype training per round")
    head_epochs: int = option(300, "epochs of the server's fusion training per round (full batch)")
    lr: float = option(1e-3, "learning rate of the extractors (Adam)")
    head_lr: float = option(1e-2, "learning rate of the server's adapters, gate and classifier (Adam)")
    batch_size: int = option(64, "unaligned rows per mini-batch of the local step")
    alpha: float = option(0.5, "weight α of the party's own prior in π̃ = α π^(m) + (1-α) π^g")
    beta: float = option(0.5, "weight β of the party's own prototypes in μ̃ = β μ^(m) + (1-β) μ^g")
    tau: float = option(1.0, "temperature τ of the posterior and the soft minima (exp(-D/τ))")
    unaligned_weight: float = option(1.0, "weight λ of the unaligned statistics in μ^g and π^g")
    tol: float = option(1e-4, "a party's local training stops when its loss moves by at most this (relative)")
    secure: bool = option(True, "sum the unaligned statistics by secure aggregation (--plain: in the clear)",
                          negative="--plain")
    frac_bits: int = option(24, "fractional bits of the statistics' fixed point (both modes)")
    value_bits: int = option(44, "bound of every fixed-point statistic (2^value_bits)")
    seed: int = option(0, "public training seed (initialisation and batch order)")

    def __post_init__(self) -> None:
        if not 1 <= self.dim <= 4096 or not 1 <= self.width <= 4096 or self.hidden < 1 or self.rounds < 0:
            raise InputDataError("need 1 <= dim, width <= 4096, hidden >= 1 and rounds >= 0")
        if self.local_epochs < 0 or self.head_epochs < 1 or self.batch_size < 1:
            raise InputDataError("need local_epochs >= 0, head_epochs >= 1 and batch_size >= 1")
        if not (self.lr > 0 and self.head_lr > 0 and self.tau > 0 and self.tol >= 0 and self.unaligned_weight >= 0):
            raise InputDataError("need lr, head_lr, tau > 0 and tol, unaligned_weight >= 0")
        if not (0 <= self.alpha <= 1 and 0 <= self.beta <= 1):
            raise InputDataError("alpha and beta must lie in [0, 1]")
        if not 0 <= self.frac_bits < self.value_bits <= 60:
            raise InputDataError("need 0 <= frac_bits < value_bits <= 60")


# --------------------------------------------------------------------------- server: gated fusion


@dataclass
class FusionState:
    """The server's model as arrays: adapters A_m (w × d, w), the gate (M × Md, M), the classifier (K × w, K)."""

    adapters: list[tuple[np.ndarray, np.ndarray]]
    gate: tuple[np.ndarray, np.ndarray]
    classifier: tuple[np.ndarray, np.ndarray]

    def flat(self) -> list[np.ndarray]:
        return [a for pair in (*self.adapters, self.gate, self.classifier) for a in pair]

    @classmethod
    def from_flat(cls, arrays: Sequence[np.ndarray], parties: int) -> FusionState:
        a = [np.asarray(x, np.float32) for x in arrays]
        if len(a) != 2 * parties + 4:
            raise InputDataError(f"a fusion model of {parties} parties has {2 * parties + 4} arrays, got {len(a)}")
        return cls([(a[2 * m], a[2 * m + 1]) for m in range(parties)], (a[-4], a[-3]), (a[-2], a[-1]))


def _fusion_module(parties: int, dim: int, width: int, n_classes: int, seed: int) -> Any:
    import torch
    from torch import nn

    from vflcrypto.ml import nn as vnn

    class Fusion(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.adapters = nn.ModuleList([nn.Linear(dim, width) for _ in range(parties)])
            self.gate = nn.Linear(parties * dim, parties)
            self.classifier = nn.Linear(width, n_classes)

        def forward(self, hs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            g = torch.stack([a(h) for a, h in zip(self.adapters, hs, strict=True)], dim=1)  # N x M x w
            w = torch.softmax(self.gate(torch.cat(hs, dim=1)), dim=1)  # N x M, rows sum to 1
            z = (w.unsqueeze(2) * g).sum(1)
            return self.classifier(z), z, w

    with vnn._INIT_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) % (2**63))
        return Fusion()


def _load(module: Any, state: FusionState) -> None:
    from vflcrypto.ml import nn as vnn

    vnn.load_arrays(module, state.flat())


def _state(module: Any, parties: int) -> FusionState:
    from vflcrypto.ml import nn as vnn

    return FusionState.from_flat(vnn.module_arrays(module), parties)


def fit_fusion(H: Sequence[np.ndarray], y: np.ndarray, n_classes: int, cfg: ProtoConfig,
               state: FusionState | None = None) -> FusionState:
    """Train adapters, gate and classifier on the aligned rows with cross-entropy (from ``state`` if given)."""
    import torch

    M = len(H)
    model = _fusion_module(M, cfg.dim, cfg.width, n_classes, cfg.seed)
    if state is not None:
        _load(model, state)
    hs = [torch.as_tensor(np.asarray(h, np.float32)) for h in H]
    yt = torch.as_tensor(np.asarray(y), dtype=torch.long)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.head_lr, weight_decay=1e-4)
    model.train()
    for _ in range(cfg.head_epochs):
        logits, _, _ = model(hs)
        loss = torch.nn.functional.cross_entropy(logits, yt)
        opt.zero_grad()
        torch.autograd.backward(loss)
        opt.step()
    return _state(model, M)


def fuse_rows(H: Sequence[np.ndarray], state: FusionState, n_classes: int, cfg: ProtoConfig
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class probabilities, z, gate weights) of rows given every party's embeddings."""
    import torch

    model = _fusion_module(len(H), cfg.dim, cfg.width, n_classes, cfg.seed)
    _load(model, state)
    model.eval()
    with torch.no_grad():
        logits, z, w = model([torch.as_tensor(np.asarray(h, np.float32)) for h in H])
        return (torch.softmax(logits, 1).double().numpy(), z.double().numpy(), w.double().numpy())


def global_prototypes(z: np.ndarray, y: np.ndarray, n_classes: int, counts: np.ndarray | None = None,
                      sums: np.ndarray | None = None, weight: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(μ^g, π^g) from the aligned rows' fused z and labels, plus λ-weighted unaligned soft counts and sums.

    A class with no mass at all keeps the overall mean of z as its prototype and a prior
    of 0 before a floor of 1e-6 (then renormalised), so π^g is a valid distribution.
    """
    z, y = np.asarray(z, np.float64), np.asarray(y, np.int64)
    K, w = n_classes, z.shape[1]
    onehot = np.eye(K)[y]
    n = onehot.sum(0)
    tot = onehot.T @ z
    if counts is not None and sums is not None:
        c, s = np.asarray(counts, np.float64), np.asarray(sums, np.float64).reshape(K, w)
        n, tot = n + weight * np.maximum(c, 0.0), tot + weight * s
    mu = np.tile(z.mean(0), (K, 1))
    has = n > 1e-12
    mu[has] = tot[has] / n[has, None]
    prior = np.maximum(n, 1e-6)
    return mu, prior / prior.sum()


# --------------------------------------------------------------------------- party: the local prototype step


@dataclass
class LocalResult:
    """After one local step: the prior π^(m), prototypes μ^(m), the statistics and the last loss."""

    prior: np.ndarray
    prototypes: np.ndarray
    counts: np.ndarray
    sums: np.ndarray
    loss: float
    epochs: int


def _adapted(extractor: Any, adapter: tuple[np.ndarray, np.ndarray], X: Any) -> Any:
    import torch

    W, b = (torch.as_tensor(np.asarray(a, np.float32)) for a in adapter)
    return extractor(X) @ W.T + b


def _posterior_t(D: Any, prior: np.ndarray, tau: float) -> Any:
    import torch

    logits = torch.log(torch.as_tensor(np.maximum(prior, 1e-12), dtype=D.dtype)) - D / tau
    return torch.softmax(logits, dim=1)


def prototype_loss(D: Any, prior: np.ndarray, tau: float) -> Any:
    """The local step's loss on a batch's squared distances D (torch, N × K): the smooth two-way loss.

    (1/N) Σ_j Σ_k q_jk D_jk with the E-step posterior q (π̃ included, no gradient through
    it) plus (1/K) Σ_k Σ_j softmin_j(D_·k/τ) D_jk. With a uniform prior it equals
    :func:`vflcrypto.ml.prototypes.smooth_two_way_loss` (D, τ).
    """
    import torch

    q = _posterior_t(D, prior, tau).detach()
    return (q * D).sum(1).mean() + (torch.softmax(-D / tau, dim=0) * D).sum(0).mean()


def local_step(extractor: Any, adapter: tuple[np.ndarray, np.ndarray], X_u: np.ndarray, mu_g: np.ndarray,
               prior_g: np.ndarray, mu_own: np.ndarray | None, prior_own: np.ndarray | None, cfg: ProtoConfig,
               seed: int) -> LocalResult:
    """Train ``extractor`` on the unaligned rows against the mixed prototypes; the M-step and the statistics."""
    import torch

    prior_g = check_distribution(prior_g, "global prior", atol=1e-6)
    K = len(prior_g)
    mu_g = np.asarray(mu_g, np.float64)
    prior = mix_prior(prior_own, prior_g, cfg.alpha) if prior_own is not None else prior_g
    mu = mix_prototypes(mu_own, mu_g, cfg.beta) if mu_own is not None else mu_g
    mu_t = torch.as_tensor(mu, dtype=torch.float32)
    Xt = torch.as_tensor(np.asarray(X_u, np.float32))
    gen = torch.Generator().manual_seed(int(seed) % (2**63))
    opt = torch.optim.Adam(extractor.parameters(), lr=cfg.lr, weight_decay=1e-4)
    prev: float | None = None
    loss_v, epochs = 0.0, 0
    if len(Xt) >= 2:
        extractor.train()
        for epochs in range(1, cfg.local_epochs + 1):  # noqa: B007 (the count is reported)
            perm, total = torch.randperm(len(Xt), generator=gen), 0.0
            for i in range(0, len(Xt), cfg.batch_size):
                f = _adapted(extractor, adapter, Xt[perm[i : i + cfg.batch_size]])
                loss = prototype_loss(torch.cdist(f, mu_t).pow(2), prior, cfg.tau)
                opt.zero_grad()
                torch.autograd.backward(loss)
                opt.step()
                total += float(loss.detach()) * len(f)
            loss_v = total / len(Xt)
            if converged(prev, loss_v, cfg.tol):
                break
            prev = loss_v
    extractor.eval()
    with torch.no_grad():
        F = _adapted(extractor, adapter, Xt).double() if len(Xt) else torch.zeros((0, mu.shape[1]),
                                                                                    dtype=torch.float64)
        q = _posterior_t(torch.cdist(F, torch.as_tensor(mu)).pow(2), prior, cfg.tau) if len(F) else \
            torch.zeros((0, K), dtype=torch.float64)
    Fn, qn = F.numpy(), q.numpy()
    counts, sums = qn.sum(0), qn.T @ Fn
    own_prior = qn.mean(0) if len(qn) else prior_g
    own_mu = prototype_update(Fn, qn, fallback=mu_g) if len(qn) else mu_g
    return LocalResult(own_prior / own_prior.sum(), own_mu, counts, sums, loss_v, epochs)


def class_statistics(counts: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """The vector a party contributes to the sum: its K soft counts then its K × w soft sums."""
    return np.concatenate([np.asarray(counts, np.float64).ravel(), np.asarray(sums, np.float64).ravel()])


def split_statistics(vec: np.ndarray, n_classes: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`class_statistics` (for the summed vector)."""
    v = np.asarray(vec, np.float64)
    if v.shape != (n_classes * (1 + width),):
        raise InputDataError(f"statistics of length {v.size}, expected {n_classes * (1 + width)}")
    return v[:n_classes], v[n_classes:].reshape(n_classes, width)
