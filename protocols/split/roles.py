"""The roles of split learning as named steps, and ``run_local``.

Steps, numbered as in the package docstring:

* server S: ``start`` (0: the setup) → per batch ``on_representation`` (1, once per party;
  then 2: the head's step and every party's gradient) → ``on_test`` (4, once per party:
  predictions);
* party k: ``on_setup`` (0; then 1: the first batch) → per batch ``on_gradient`` (3: the
  extractor's step; then 1 for the next batch, or 4: the test representations).

The server is the Flower ServerApp, so its head and optimizer stay in memory; a party's
extractor and Adam state are in its (wire-encodable) state after every step, and the
party recomputes the batch's forward pass when the gradient arrives (the extractors
have no dropout, so the recomputation is exact).

The label defences (:mod:`.defence`: ``--label-dp``, ``--grad-noise``/``--grad-epsilon``,
``--marvell-bound``) are the server's: it announces them in the setup, trains on randomized
labels and/or sends clipped and noised gradients as ``split.dp_gradient``, or Marvell's noised
rows as ``split.marvell_gradient``; every party refuses a setup whose defences differ from its
own flags, accounts the announced guarantee itself and keeps it in its result. The embedding
defences (:mod:`.._repvfl_embed`: ``--embed-noise``/``--embed-epsilon``, ``--dcor-weight``) are
every party's, announced in the same setup: each party clips and noises what it sends
(``split.dp_representation``, ``split.dp_test_representation``) and backpropagates through the
clipping, and/or adds NoPeek's distance-correlation term to its extractor's loss.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.runtime import progress
from vflcrypto.runtime.channel import DEFAULT_TIMEOUT, AuditTap, Channel
from vflcrypto.runtime.steps import Next, Role, done, send, then
from vflcrypto.spec import option

from .._repvfl import (
    PARTY,
    SERVER,
    PartyData,
    RepRun,
    ServerData,
    ServerResult,
    check_matrix,
    require_torch,
    run_roles,
)
from .._repvfl_defence import DefendedConfig
from .._repvfl_embed import EmbeddingDefence, announced_embedding
from .defence import (
    EMBED_STATEMENT,
    LABEL_MECHANISMS,
    STATEMENT,
    MarvellState,
    SplitDefence,
    lpmst_stage2,
    lpmst_stage2_epoch,
    noised_step,
)
from .messages import (
    BatchGradient,
    BatchRepresentation,
    DpBatchGradient,
    DpBatchRepresentation,
    DpTestRepresentation,
    MarvellBatchGradient,
    Setup,
    TestRepresentation,
)

__all__ = ["PartyResult", "PartyRole", "ServerRole", "SplitConfig", "epoch_batches", "gradient_kind", "rep_kinds",
           "run_local"]


@dataclass(frozen=True)
class SplitConfig(DefendedConfig):
    """Split learning's parameters: :class:`RepConfig`, the label defences (:mod:`.defence`; all off by default:
    the shared ones and Marvell), the feature parties' embedding defences (off by default) and the number of joint
    epochs (each row's label enters one noised step per epoch, each overlap row's representation one noised release
    per epoch)."""

    epochs: int = option(200, "epochs over the overlap rows (every batch is one round trip per party)")
    marvell_bound: float | None = option(None, "Marvell's optimised gradient noise for binary labels (Li et al. 2022) "
                                               "at this power bound s: per batch, noise power s*|mean_1 - mean_0|^2 "
                                               "(empirical, no epsilon; bounds any attack's leak AUC per batch)")
    label_mechanism: str = option("rr", "how --label-dp releases the labels: rr (randomized response) or lpmst "
                                        "(two-stage LP-MST, Ghazi et al. 2021: half the rows by RR, then the other "
                                        "half by RRWithPrior with the stage-1 model's prior; pure eps-label-DP)",
                                  choices=LABEL_MECHANISMS)

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise InputDataError("split learning needs at least one epoch")
        if self.label_mechanism == "lpmst" and self.epochs < 2:
            raise InputDataError("--label-mechanism lpmst needs at least two epochs (one per stage)")
        super().__post_init__()

    def releases(self) -> int:
        return self.epochs

    def embed_releases(self) -> int:
        return self.epochs

    def defence(self) -> SplitDefence:
        """The shared label defences this configuration asks for, and Marvell's bound."""
        shared = super().defence()
        return SplitDefence(shared.label_epsilon, shared.noise_multiplier, shared.clip, shared.delta,
                            self.marvell_bound, self.label_mechanism)


def gradient_kind(dfn: SplitDefence) -> type[BatchGradient] | type[DpBatchGradient] | type[MarvellBatchGradient]:
    """The message the gradients travel as: ``split.marvell_gradient`` under Marvell, ``split.dp_gradient`` under a
    DP defence, else ``split.gradient``."""
    if dfn.marvell_bound is not None:
        return MarvellBatchGradient
    return DpBatchGradient if dfn.dp else BatchGradient


def rep_kinds(embedding: EmbeddingDefence) -> tuple[type[Any], type[Any]]:
    """The batch and test representation kinds of a run with these embedding defences (``dp_`` under noise)."""
    return ((DpBatchRepresentation, DpTestRepresentation) if embedding.noised
            else (BatchRepresentation, TestRepresentation))


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The batches of ``epoch``: a permutation of the ``n`` overlap rows from a public seed."""
    order = np.random.default_rng([seed, epoch]).permutation(n)  # public schedule, not secret
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


@dataclass
class PartyResult:
    """A party's trained extractor (arrays), the number of steps it took and the label and embedding defences'
    guarantees it accounted from the setup (defence name -> (ε, δ) and what it covers; empty when undefended)."""

    extractor: list[np.ndarray]
    steps: int
    privacy: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- server


@dataclass
class _ServerState:
    epoch: int = 0
    batch: int = 0
    k: int = 0
    H: list[np.ndarray] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)


class ServerRole(Role[_ServerState]):
    """S: the labels of the overlap rows, the head f_c and its optimizer."""

    role = SERVER
    State = _ServerState

    def __init__(self, data: ServerData, *, parties: Sequence[str], config: SplitConfig | None = None,
                 n_test: int = 0, name: str = SERVER) -> None:
        super().__init__(name)
        require_torch()
        from vflcrypto.ml import nn as vnn

        self.data, self.parties, self.cfg, self.n_test = data, list(parties), config or SplitConfig(), n_test
        if not self.parties:
            raise InputDataError("split learning needs at least one party")
        self.head = vnn.head(self.cfg.dim * len(self.parties), data.n_classes, seed=self.cfg.seed)
        self.opt = vnn.adam([self.head], self.cfg.head_lr)
        self.defence = self.cfg.defence()
        self.defence.check_task(data.n_classes)
        self.marvell = MarvellState()
        self.embedding = self.cfg.embedding(len(data.y_overlap) + n_test)
        self.rep, self.test_rep = rep_kinds(self.embedding)
        self.y_train = data.y_overlap  # randomized at start() under --label-dp
        self.released = np.ones(len(data.y_overlap), bool)  # LP-MST: the rows whose label is released so far
        self.t0 = time.perf_counter()

    @property
    def n(self) -> int:
        return len(self.data.y_overlap)

    def _rows(self) -> np.ndarray:
        st = self.state
        return epoch_batches(self.n, self.cfg.batch_size, self.cfg.seed, st.epoch)[st.batch]

    def start(self) -> Next:
        """Step 0: the setup; then the first batch's representations."""
        c, dfn, emb = self.cfg, self.defence, self.embedding
        self.hold("labels", self.data.y_overlap)
        if dfn.label_epsilon is not None:
            from vflcrypto.privacy import mechanisms

            if dfn.lpmst:  # stage 1: half 1 by RRWithPrior with the uniform prior (plain RR); half 2 in stage 2
                self.released = ~lpmst_stage2(self.n, c.seed)
                self.y_train = np.zeros_like(self.data.y_overlap)  # unreleased rows: a placeholder, weight 0
                self._release(np.flatnonzero(self.released),
                              np.full((int(self.released.sum()), self.data.n_classes), 1.0 / self.data.n_classes))
            else:
                self.y_train = mechanisms.randomized_response(self.data.y_overlap, self.data.n_classes,
                                                              dfn.label_epsilon)
        if not dfn.lpmst:
            self.hold("training_labels", self.y_train)
        setup = Setup(self.n, self.n_test, c.dim, c.epochs, c.batch_size, c.seed, dfn.label_epsilon,
                      dfn.noise_multiplier, dfn.clip, dfn.delta, marvell_bound=dfn.marvell_bound,
                      label_mechanism=dfn.label_mechanism, embed_noise_multiplier=emb.noise_multiplier,
                      embed_clip=emb.clip, embed_delta=emb.delta, dcor_weight=emb.dcor_weight)
        return then([send(p, setup) for p in self.parties], self.parties[0], self.rep, "on_representation")

    def _release(self, rows: np.ndarray, priors: np.ndarray) -> None:
        """LP-MST: release the labels of ``rows`` by RRWithPrior under ``priors`` (once per row; the record of each
        release is the label holder's own, for its check)."""
        from vflcrypto.privacy import mechanisms

        eps = self.defence.label_epsilon
        assert eps is not None  # LP-MST needs --label-dp
        y = self.data.y_overlap[rows]
        self.y_train[rows] = mechanisms.rr_with_prior(y, priors, eps)
        self.released[rows] = True
        self.hold("lpmst_releases", (rows, y, self.y_train[rows], mechanisms.rr_with_prior_keep(y, priors, eps)))

    def on_representation(self, msg: BatchRepresentation | DpBatchRepresentation) -> Next:
        """Step 1 from party k; after the last party, step 2: the head's step and the gradients."""
        st = self.state
        sender = self.parties[st.k]
        if (msg.epoch, msg.batch) != (st.epoch, st.batch):
            raise ProtocolError(f"{sender} sent batch {msg.epoch}/{msg.batch}, expected {st.epoch}/{st.batch}")
        rows = self._rows()
        st.H.append(check_matrix(msg.H, len(rows), self.cfg.dim, "batch representations", sender))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], self.rep, "on_representation")
        grads = self._step(rows)
        kind = gradient_kind(self.defence)
        sends = [send(p, kind(st.epoch, st.batch, g)) for p, g in zip(self.parties, grads, strict=True)]
        st.H, st.k = [], 0
        st.batch += 1
        if st.batch == len(epoch_batches(self.n, self.cfg.batch_size, self.cfg.seed, st.epoch)):
            st.epoch, st.batch = st.epoch + 1, 0
            progress.report("split", st.epoch, self.cfg.epochs, unit="epoch")
        if st.epoch == self.cfg.epochs:
            return then(sends, self.parties[0], self.test_rep, "on_test")
        return then(sends, self.parties[0], self.rep, "on_representation")

    def _step(self, rows: np.ndarray) -> list[np.ndarray]:
        import torch

        from vflcrypto.ml import nn as vnn

        dfn = self.defence
        if dfn.noised:
            assert dfn.noise_multiplier is not None and dfn.clip is not None  # LabelDefence checks both
            grads, mean_loss = noised_step(self.head, self.opt, self.state.H, self.y_train[rows], dfn.clip,
                                           dfn.noise_multiplier)
            self.state.losses.append(mean_loss)
            return grads
        hs = [torch.as_tensor(h).requires_grad_(True) for h in self.state.H]
        if dfn.lpmst and self.state.epoch >= lpmst_stage2_epoch(self.cfg.epochs) and not self.released[rows].all():
            fresh = ~self.released[rows]  # stage 2: half-2 rows seen for the first time, prior from this forward pass
            prior = vnn.predict_proba(self.head, np.concatenate(self.state.H, axis=1)[fresh])
            self._release(rows[fresh], np.asarray(prior, np.float64))
        self.head.train()
        logits = self.head(torch.cat(hs, dim=1))
        target = torch.as_tensor(self.y_train[rows], dtype=torch.long)
        if dfn.lpmst:  # only released labels train: the other rows' gradients are zero
            mask = torch.as_tensor(self.released[rows], dtype=logits.dtype)
            per_row = torch.nn.functional.cross_entropy(logits, target, reduction="none")
            loss = (per_row * mask).sum() / mask.sum().clamp(min=1.0)
        else:
            loss = torch.nn.functional.cross_entropy(logits, target)
        self.opt.zero_grad()
        torch.autograd.backward(loss)
        self.opt.step()
        self.state.losses.append(float(loss.detach()))
        grads = [vnn.to_numpy(h.grad) if h.grad is not None else np.zeros(h.shape, np.float32) for h in hs]
        if dfn.marvell_bound is None:
            return grads
        out = []
        for k, G in enumerate(grads):  # each party's block: the rows it receives, noised for its own view
            noised, sol, unit = self.marvell.noise(k, G, self.y_train[rows], dfn.marvell_bound)
            self.hold("marvell_steps", (self.parties[k], G, self.y_train[rows], sol, unit))  # audit: its check
            out.append(noised)
        return out

    def on_test(self, msg: TestRepresentation | DpTestRepresentation) -> Next:
        """Step 4: party k's test representations; after the last, the predictions."""
        from vflcrypto.ml import nn as vnn

        st = self.state
        st.H.append(check_matrix(msg.H, self.n_test, self.cfg.dim, "test representations", self.parties[st.k]))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], self.test_rep, "on_test")
        proba = (vnn.predict_proba(self.head, np.concatenate(st.H, axis=1)) if self.n_test
                 else np.zeros((0, self.data.n_classes), np.float32))
        y = self.data.y_test
        acc = float(np.mean(proba.argmax(1) == y)) if y is not None and len(y) and self.n_test else None
        privacy = {**self.defence.privacy(self.cfg.epochs, self.data.n_classes, STATEMENT, self.marvell.sum_kls),
                   **self.embedding.privacy(self.cfg.epochs, EMBED_STATEMENT)}
        return done(ServerResult(vnn.module_arrays(self.head), proba, acc, {"total": time.perf_counter() - self.t0},
                                 privacy=privacy))


# --------------------------------------------------------------------------- party


@dataclass
class _PartyState:
    setup: Setup | None = None
    epoch: int = 0
    batch: int = 0
    steps: int = 0
    extractor: list[np.ndarray] = field(default_factory=list)
    optimizer: list[np.ndarray] = field(default_factory=list)


class PartyRole(Role[_PartyState]):
    """Party k: its columns of the overlap and test rows and its extractor f_k (``extractor``: its own module)."""

    role = PARTY
    State = _PartyState

    def __init__(self, data: PartyData, *, index: int, name: str | None = None, server: str = SERVER,
                 config: SplitConfig | None = None, extractor: Any = None) -> None:
        super().__init__(name or f"party-{index}")
        require_torch()
        from vflcrypto.ml import nn as vnn

        self.data, self.index, self.server, self.cfg = data, index, server, config or SplitConfig()
        seed = self.cfg.seed * 1000 + index
        self.f = extractor if extractor is not None else vnn.mlp_extractor(data.X_overlap, self.cfg.dim,
                                                                           hidden=self.cfg.hidden, seed=seed)
        self.opt = vnn.adam([self.f], self.cfg.lr)

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        from vflcrypto.ml import nn as vnn

        super().load_state(data, allow_insecure=allow_insecure)
        if self.state.extractor:
            vnn.load_arrays(self.f, self.state.extractor)
            vnn.load_optimizer_arrays(self.opt, self.state.optimizer)

    @property
    def setup(self) -> Setup:
        if self.state.setup is None:
            raise ProtocolError(f"{self.name}: no setup received yet")
        return self.state.setup

    def start(self) -> Next:
        return then([], self.server, Setup, "on_setup")

    def _rows(self) -> np.ndarray:
        s, st = self.setup, self.state
        return epoch_batches(s.n_overlap, s.batch_size, s.seed, st.epoch)[st.batch]

    def _save(self) -> None:
        from vflcrypto.ml import nn as vnn

        self.state.extractor, self.state.optimizer = vnn.module_arrays(self.f), vnn.optimizer_arrays(self.opt)

    def on_setup(self, setup: Setup) -> Next:
        """Step 0: the plan must match this party's rows and extractor; step 1: the first batch."""
        d = self.data
        if setup.n_overlap != len(d.X_overlap) or setup.n_test != len(d.X_test):
            raise InputDataError(f"{self.name} has {len(d.X_overlap)} overlap and {len(d.X_test)} test rows, the "
                                 f"server {setup.n_overlap} and {setup.n_test}: not aligned")
        if setup.dim != self.cfg.dim or setup.epochs < 1 or setup.batch_size < 1:
            raise ProtocolError(f"setup asks for d = {setup.dim}, {setup.epochs} epochs, batch {setup.batch_size}")
        SplitDefence.announced(setup, self.name, self.cfg.defence())
        announced_embedding(setup, self.name, self.cfg.embedding(setup.n_overlap + setup.n_test))
        self.state.setup = setup
        self.hold("features", d.X_overlap)
        self._save()
        return self._send_batch()

    @property
    def embedding(self) -> EmbeddingDefence:
        """The embedding defences the setup announced (checked against this party's own in :meth:`on_setup`)."""
        return announced_embedding(self.setup, self.name)

    def _send_batch(self) -> Next:
        from vflcrypto.ml import nn as vnn

        st, emb = self.state, self.embedding
        H = emb.release(vnn.forward(self.f, self.data.X_overlap[self._rows()]))
        kind = gradient_kind(SplitDefence.announced(self.setup, self.name))
        return then([send(self.server, rep_kinds(emb)[0](st.epoch, st.batch, H))], self.server, kind, "on_gradient")

    def on_gradient(self, msg: BatchGradient | DpBatchGradient | MarvellBatchGradient) -> Next:
        """Step 3: backpropagate the server's gradient through f_k (and through the clipping under embedding noise,
        with NoPeek's term under --dcor-weight); then the next batch or the test rows."""
        import torch

        from vflcrypto.ml import nn as vnn

        st, s = self.state, self.setup
        if (msg.epoch, msg.batch) != (st.epoch, st.batch):
            raise ProtocolError(f"gradient for batch {msg.epoch}/{msg.batch}, expected {st.epoch}/{st.batch}")
        rows = self._rows()
        G = check_matrix(msg.G, len(rows), self.cfg.dim, "batch gradients", self.server)
        emb, X = self.embedding, torch.as_tensor(self.data.X_overlap[rows])
        self.f.train()
        H = emb.clipped(self.f(X))
        loss = (H * torch.as_tensor(G)).sum()  # its gradient in H is G: the server's gradient, backpropagated
        penalty = emb.penalty()
        if penalty is not None:
            loss = loss + penalty(X, H)
        self.opt.zero_grad()
        torch.autograd.backward(loss)
        self.opt.step()
        st.steps += 1
        st.batch += 1
        if st.batch == len(epoch_batches(s.n_overlap, s.batch_size, s.seed, st.epoch)):
            st.epoch, st.batch = st.epoch + 1, 0
            progress.report("split", st.epoch, s.epochs, unit="epoch")
        self._save()
        if st.epoch < s.epochs:
            return self._send_batch()
        emb = self.embedding
        test = rep_kinds(emb)[1](emb.release(vnn.forward(self.f, self.data.X_test)))
        privacy = {**SplitDefence.announced(s, self.name).privacy(s.epochs, None, STATEMENT),
                   **emb.privacy(s.epochs, EMBED_STATEMENT)}
        return done(PartyResult(self.state.extractor, st.steps, privacy), [send(self.server, test)])


# --------------------------------------------------------------------------- in one process


def run_local(server: ServerData, parties: Sequence[PartyData], *, config: SplitConfig | None = None,
              extractors: Sequence[Any] | None = None, timeout: float = DEFAULT_TIMEOUT,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None) -> RepRun:
    """Run S and every party in this process (:func:`~vflcrypto.protocols._repvfl.run_roles`)."""
    (config or SplitConfig()).defence().check_task(server.n_classes)  # before any party starts
    return run_roles(ServerRole, PartyRole, server, parties, config or SplitConfig(), extractors=extractors,
                     timeout=timeout, overrides=overrides, tap=tap)
