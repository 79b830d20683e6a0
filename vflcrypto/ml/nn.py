"""PyTorch building blocks of representation VFL: extractors, heads, local training, FixMatch-tab.

Needs the ``deep`` extra (``torch``); nothing else in vflcrypto imports this module at
import time, so the cryptographic protocols work without torch. Everything here is
local computation of one party: what crosses a party boundary is numpy float32 arrays
in declared messages (:func:`to_numpy`), never tensors or pickled modules.

Determinism: every function takes a ``seed`` and draws from its own ``torch.Generator``
(initialisation, batch order, augmentation masks); these are training randomness, not
secrets. Modules persist as lists of float32 arrays (:func:`module_arrays`,
:func:`load_arrays`), so a role's state can cross the wire (a Flower ClientApp).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..errors import InputDataError

__all__ = ["AugmentConfig", "Penalty", "Scaled", "adam", "distance_correlation", "extractor_from_arrays",
           "fit_scaler", "fixmatch_tab", "forward", "grad_wrt_inputs", "head", "head_from_arrays", "load_arrays",
           "load_optimizer_arrays", "mlp_extractor", "module_arrays", "optimizer_arrays", "predict_proba",
           "to_numpy", "train_supervised"]


#: torch initialises layers from its global generator: seeding and building under one lock keeps
#: concurrent parties (threads of one process) from interleaving and makes every build reproducible;
#: fork_rng leaves the caller's global torch generator as it was
_INIT_LOCK = threading.Lock()


#: a term added to a local training loss: (the batch's raw rows, the extractor's output on them) -> a scalar tensor
Penalty = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed) % (2**63))


class Scaled(nn.Module):
    """``inner((x - mean) / scale)``: a party's own standardisation, fitted on its own rows."""

    def __init__(self, inner: nn.Module, mean: np.ndarray, scale: np.ndarray) -> None:
        super().__init__()
        self.inner = inner
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean, np.float32)))
        self.register_buffer("scale", torch.as_tensor(np.asarray(scale, np.float32)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner((x - self.get_buffer("mean")) / self.get_buffer("scale"))
        return out


def fit_scaler(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations (1 where a column is constant)."""
    X = np.asarray(X, np.float64)
    sd = X.std(0)
    return X.mean(0).astype(np.float32), np.where(sd > 0, sd, 1.0).astype(np.float32)


def mlp_extractor(X_own: np.ndarray, dim: int, *, hidden: int = 64, seed: int = 0) -> nn.Module:
    """The default extractor f_k: standardise (own statistics), Linear-ReLU-Linear to ``dim``."""
    X_own = np.asarray(X_own, np.float32)
    if X_own.ndim != 2 or X_own.shape[1] < 1:
        raise InputDataError("an extractor needs a 2-D feature matrix with at least one column")
    mean, scale = fit_scaler(X_own)
    with _INIT_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) % (2**63))
        inner = nn.Sequential(nn.Linear(X_own.shape[1], hidden), nn.ReLU(), nn.Linear(hidden, dim))
    return Scaled(inner, mean, scale)


def head(in_dim: int, n_classes: int, *, seed: int = 0) -> nn.Module:
    """A linear classifier head (logits)."""
    with _INIT_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) % (2**63))
        return nn.Linear(in_dim, n_classes)


def _shape(a: np.ndarray) -> tuple[int, ...]:
    return tuple(int(v) for v in np.shape(a))


def extractor_from_arrays(arrays: Sequence[np.ndarray]) -> nn.Module:
    """The default extractor (:func:`mlp_extractor`) rebuilt from its :func:`module_arrays` (a saved model):
    the arrays' shapes give the input width, the hidden units and ``dim``; :class:`InputDataError` if they
    are not those of such an extractor."""
    shapes = [_shape(a) for a in arrays]
    ok = len(shapes) == 6 and all(len(s) == n for s, n in zip(shapes, (1, 1, 2, 1, 2, 1), strict=True))
    if ok:
        (p,), _, (h, p0), (h0,), (d, h1), (d0,) = shapes
        ok = shapes[1] == (p,) and p0 == p and h0 == h and h1 == h and d0 == d
    if not ok:
        raise InputDataError(f"not the arrays of an MLP extractor (mean, scale, two linear layers): shapes {shapes}")
    with _INIT_LOCK, torch.random.fork_rng(devices=[]):
        inner = nn.Sequential(nn.Linear(p, h), nn.ReLU(), nn.Linear(h, d))
    module = Scaled(inner, np.zeros(p, np.float32), np.ones(p, np.float32))
    load_arrays(module, arrays)
    return module


def head_from_arrays(arrays: Sequence[np.ndarray]) -> nn.Module:
    """A linear head (:func:`head`) rebuilt from its :func:`module_arrays` (weight, bias)."""
    shapes = [_shape(a) for a in arrays]
    if len(shapes) != 2 or len(shapes[0]) != 2 or shapes[1] != shapes[0][:1]:
        raise InputDataError(f"not the arrays of a linear head (weight, bias): shapes {shapes}")
    with _INIT_LOCK, torch.random.fork_rng(devices=[]):
        module = nn.Linear(shapes[0][1], shapes[0][0])
    load_arrays(module, arrays)
    return module


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A float32 C-contiguous copy (what goes into a message)."""
    return np.ascontiguousarray(t.detach().cpu().numpy().astype(np.float32))


def forward(module: nn.Module, X: np.ndarray) -> np.ndarray:
    """``module(X)`` without gradients, as float32 numpy."""
    module.eval()
    with torch.no_grad():
        return to_numpy(module(torch.as_tensor(np.asarray(X, np.float32))))


def predict_proba(module: nn.Module, X: np.ndarray) -> np.ndarray:
    """Softmax of ``module(X)``."""
    module.eval()
    with torch.no_grad():
        return to_numpy(torch.softmax(module(torch.as_tensor(np.asarray(X, np.float32))), dim=1))


def grad_wrt_inputs(classifier: nn.Module, parts: Sequence[np.ndarray], y: np.ndarray) -> list[np.ndarray]:
    """∂L/∂H_k of the summed cross-entropy L of ``classifier(H_1 ∘ ... ∘ H_K)`` on labels ``y``.

    The server's D1 of one-shot VFL (and the gradient packet of split learning): one
    array per party, the rows of party k's representations.
    """
    hs = [torch.as_tensor(np.asarray(h, np.float32)).requires_grad_(True) for h in parts]
    classifier.eval()
    loss = nn.functional.cross_entropy(classifier(torch.cat(hs, dim=1)), torch.as_tensor(y, dtype=torch.long),
                                       reduction="sum")
    grads = torch.autograd.grad(loss, hs)
    return [to_numpy(g) for g in grads]


def _centred_distances(Z: torch.Tensor) -> torch.Tensor:
    """The double-centred matrix of pairwise Euclidean distances of the rows of ``Z`` (Székely et al. 2007)."""
    sq = (Z * Z).sum(1)
    d = torch.sqrt(torch.clamp(sq[:, None] + sq[None, :] - 2.0 * Z @ Z.T, min=0.0) + 1e-12)
    return d - d.mean(0, keepdim=True) - d.mean(1, keepdim=True) + d.mean()


def distance_correlation(X: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    """The sample distance correlation dCor(X, H) of two batches of rows (differentiable; 0: independent rows,
    1: one a similarity transform of the other).

    Székely, Rizzo and Bakirov, "Measuring and testing dependence by correlation of distances" (Ann. Statist.,
    2007): with A and B the double-centred distance matrices of the rows of X and H, dCov² = mean(A ∘ B), dVar²
    likewise, and dCor = sqrt(dCov² / sqrt(dVar²(X) dVar²(H))). NoPeek (Vepakomma et al., ICDMW 2020) adds it,
    weighted, to the loss of the party that computes H = f(X), so that its representations keep less of the
    distances between its raw rows. The biased (V-statistic) estimator, as NoPeek and Fedlearner's
    ``DisCorLoss`` use; float64 inside. Rows: a batch (n >= 2); columns may differ between X and H.
    """
    Xd, Hd = X.reshape(len(X), -1).double(), H.reshape(len(H), -1).double()
    if len(Xd) != len(Hd) or len(Xd) < 2:
        raise InputDataError(f"distance correlation needs two batches of the same >= 2 rows, got {len(Xd)} and "
                             f"{len(Hd)}")
    A, B = _centred_distances(Xd), _centred_distances(Hd)
    dcov2 = (A * B).mean()
    dvar = torch.sqrt(torch.clamp((A * A).mean() * (B * B).mean(), min=1e-24))
    return torch.sqrt(torch.clamp(dcov2 / dvar, min=1e-12)).to(H.dtype)


def module_arrays(module: nn.Module) -> list[np.ndarray]:
    """Every parameter and buffer of ``module`` as float32 arrays, in ``state_dict`` order."""
    return [to_numpy(v) for v in module.state_dict().values()]


def load_arrays(module: nn.Module, arrays: Sequence[np.ndarray]) -> None:
    """Restore :func:`module_arrays` output into a module of the same architecture (shapes checked)."""
    sd = module.state_dict()
    if len(arrays) != len(sd):
        raise InputDataError(f"expected {len(sd)} arrays for the module, got {len(arrays)}")
    new = {}
    for (name, ref), arr in zip(sd.items(), arrays, strict=True):
        if tuple(np.shape(arr)) != tuple(ref.shape):
            raise InputDataError(f"{name}: shape {np.shape(arr)} does not match {tuple(ref.shape)}")
        new[name] = torch.as_tensor(np.asarray(arr, np.float32))
    module.load_state_dict(new)


def adam(modules: Sequence[nn.Module], lr: float, weight_decay: float = 1e-4) -> torch.optim.Adam:
    """Adam over the parameters of ``modules`` (in order)."""
    return torch.optim.Adam([p for m in modules for p in m.parameters()], lr=lr, weight_decay=weight_decay)


def optimizer_arrays(opt: torch.optim.Optimizer) -> list[np.ndarray]:
    """Adam's per-parameter state (step, first and second moments) as arrays; empty before the first step."""
    out: list[np.ndarray] = []
    params = [p for g in opt.param_groups for p in g["params"]]
    for p in params:
        st = opt.state.get(p, {})
        if not st:
            return []
        out += [np.asarray([float(st["step"])], np.float32), to_numpy(st["exp_avg"]), to_numpy(st["exp_avg_sq"])]
    return out


def load_optimizer_arrays(opt: torch.optim.Optimizer, arrays: Sequence[np.ndarray]) -> None:
    """Restore :func:`optimizer_arrays` output (shapes checked)."""
    params = [p for g in opt.param_groups for p in g["params"]]
    if not arrays:
        return
    if len(arrays) != 3 * len(params):
        raise InputDataError(f"expected {3 * len(params)} optimizer arrays, got {len(arrays)}")
    for i, p in enumerate(params):
        step, m, v = arrays[3 * i : 3 * i + 3]
        if tuple(np.shape(m)) != tuple(p.shape) or tuple(np.shape(v)) != tuple(p.shape):
            raise InputDataError("optimizer state does not match the module's parameters")
        opt.state[p] = {"step": torch.tensor(float(np.asarray(step).ravel()[0])),
                        "exp_avg": torch.as_tensor(np.asarray(m, np.float32)).clone(),
                        "exp_avg_sq": torch.as_tensor(np.asarray(v, np.float32)).clone()}


def train_supervised(modules: Sequence[nn.Module], X: np.ndarray, y: np.ndarray, *, epochs: int, lr: float,
                     batch_size: int = 64, weights: np.ndarray | None = None, weight_decay: float = 1e-4,
                     seed: int = 0, penalty: Penalty | None = None) -> float:
    """Train ``modules`` chained (e.g. extractor then head) with Adam on cross-entropy; the last loss.

    ``weights`` (per row, optional) scale each row's loss (pseudo-label confidences); ``penalty`` (optional) is
    added to each batch's loss, on the batch's rows and the first module's output on them (a NoPeek term).
    """
    net = nn.Sequential(*modules)
    params = [p for m in modules for p in m.parameters()]
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    Xt, yt = torch.as_tensor(np.asarray(X, np.float32)), torch.as_tensor(np.asarray(y), dtype=torch.long)
    wt = torch.ones(len(yt)) if weights is None else torch.as_tensor(np.asarray(weights, np.float32))
    gen, last = _generator(seed), 0.0
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(len(yt), generator=gen)
        for i in range(0, len(yt), batch_size):
            b = perm[i : i + batch_size]
            if penalty is None:
                out = net(Xt[b])
            else:
                H = modules[0](Xt[b])
                out = nn.Sequential(*modules[1:])(H)
            loss = (nn.functional.cross_entropy(out, yt[b], reduction="none") * wt[b]).sum() / wt[b].sum()
            if penalty is not None:
                loss = loss + penalty(Xt[b], H)
            opt.zero_grad()
            torch.autograd.backward(loss)
            opt.step()
            last = float(loss.detach())
    return last


@dataclass(frozen=True)
class AugmentConfig:
    """FixMatch-tab (seed 000): weak = random feature masking, strong = more masking plus noise.

    A masked feature is replaced by its column mean over the party's rows; ``noise`` is
    Gaussian, in units of each column's standard deviation.
    """

    weak_mask: float = 0.1
    strong_mask: float = 0.3
    noise: float = 0.3
    threshold: float = 0.9  # confidence above which a weak-view prediction becomes a pseudo-label
    lambda_u: float = 1.0  # weight of the unlabelled loss l_u in l_ssl = l_s + lambda_u l_u


def _augment(x: torch.Tensor, mean: torch.Tensor, scale: torch.Tensor, mask: float, noise: float,
             gen: torch.Generator) -> torch.Tensor:
    keep = (torch.rand(x.shape, generator=gen) >= mask).float()
    out = x * keep + mean * (1 - keep)
    if noise > 0:
        out = out + noise * scale * torch.randn(x.shape, generator=gen)
    return out


def fixmatch_tab(extractor: nn.Module, classifier: nn.Module, X_l: np.ndarray, y_l: np.ndarray,
                 X_u: np.ndarray, *, epochs: int, lr: float, batch_size: int = 64,
                 augment: AugmentConfig | None = None, seed: int = 0,
                 penalty: Penalty | None = None) -> dict[str, float]:
    """Semi-supervised local training (FixMatch, Sohn et al. NeurIPS 2020, tabular augmentations).

    ``l_s``: cross-entropy on weakly augmented labelled rows (here the pseudo-labelled
    overlap rows); ``l_u``: cross-entropy of the strongly augmented unlabelled rows
    against the hard label of their weak view, for rows whose weak-view confidence
    exceeds ``threshold``. ``penalty`` (optional) is added to each step's loss, on the step's raw rows (its
    labelled and unlabelled batches, unaugmented) and the extractor's output on them (a NoPeek term). Returns the
    last losses and the fraction of unlabelled rows used.
    """
    aug = augment or AugmentConfig()
    net = nn.Sequential(extractor, classifier)
    opt = torch.optim.Adam(list(extractor.parameters()) + list(classifier.parameters()), lr=lr, weight_decay=1e-4)
    Xl, yl = torch.as_tensor(np.asarray(X_l, np.float32)), torch.as_tensor(np.asarray(y_l), dtype=torch.long)
    Xu = torch.as_tensor(np.asarray(X_u, np.float32)).reshape(-1, Xl.shape[1])
    mean_np, scale_np = fit_scaler(np.concatenate([np.asarray(X_l, np.float32), Xu.numpy()]))
    mean, scale = torch.as_tensor(mean_np), torch.as_tensor(scale_np)
    gen = _generator(seed)
    stats = {"l_s": 0.0, "l_u": 0.0, "used": 0.0}
    ub = max(1, batch_size * 2)
    for _ in range(epochs):
        net.train()
        perm_l = torch.randperm(len(yl), generator=gen)
        perm_u = torch.randperm(len(Xu), generator=gen) if len(Xu) else torch.zeros(0, dtype=torch.long)
        steps = max(1, -(-len(yl) // batch_size))
        for s in range(steps):
            b = perm_l[(s * batch_size) % len(yl) : (s * batch_size) % len(yl) + batch_size]
            loss_s = nn.functional.cross_entropy(net(_augment(Xl[b], mean, scale, aug.weak_mask, 0.0, gen)), yl[b])
            loss = loss_s
            rows = Xl[b]  # the penalty's raw rows: the labelled batch, and the unlabelled one below
            if len(Xu):
                start = (s * ub) % len(Xu)
                u = Xu[perm_u[start : start + ub]]
                with torch.no_grad():
                    p = torch.softmax(net(_augment(u, mean, scale, aug.weak_mask, 0.0, gen)), dim=1)
                conf, pseudo = p.max(1)
                use = (conf >= aug.threshold).float()
                strong = net(_augment(u, mean, scale, aug.strong_mask, aug.noise, gen))
                loss_u = (nn.functional.cross_entropy(strong, pseudo, reduction="none") * use).mean()
                loss = loss_s + aug.lambda_u * loss_u
                stats["l_u"], stats["used"] = float(loss_u.detach()), float(use.mean())
                rows = torch.cat([rows, u])
            if penalty is not None:
                loss = loss + penalty(rows, extractor(rows))
            opt.zero_grad()
            torch.autograd.backward(loss)
            opt.step()
            stats["l_s"] = float(loss_s.detach())
    return stats
