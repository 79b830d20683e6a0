"""The roles of one-shot VFL as named steps, and ``run_local``.

Steps, numbered as in the package docstring:

* server S: ``start`` (0: the setup) → ``on_representation`` (1, U1, once per party; then
  2, D1: the gradients or their partition) → ``on_update`` (4, U2, once per party; then
  5: fine-tune the head) → ``on_test`` (6, once per party: predictions);
* party k: ``on_setup`` (0; then 1: U1) → ``on_gradient`` or ``on_partition`` (2; then 3:
  k-means and local semi-supervised training; 4: U2; 6: the test representations).

The label defences (:mod:`.defence`: ``--label-dp``, ``--grad-noise``/``--grad-epsilon``) are the
server's: it announces them in the setup, uses randomized labels and/or clips and noises D1,
which then travels as ``dp_gradient`` or ``dp_partition``; every party accounts the announced
(ε, δ) itself and keeps it in its result. The embedding defences (:mod:`.._repvfl_embed`) are every
party's, announced in the same setup: each party clips and noises every representation it sends
(the ``dp_`` representation kinds) and/or adds NoPeek's distance-correlation term to its local
training.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.ml.cluster import canonical_labels, kmeans
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
from .._repvfl_defence import DefendedConfig, announced_defence
from .._repvfl_embed import EmbeddingDefence, announced_embedding
from .defence import EMBED_STATEMENT, STATEMENT, noised_d1
from .messages import (
    VARIANTS,
    DpGradient,
    DpPartition,
    DpRepresentation,
    DpRepresentationUpdate,
    DpTestRepresentation,
    Gradient,
    Partition,
    Representation,
    RepresentationUpdate,
    Setup,
    TestRepresentation,
)

__all__ = ["Kinds", "OneShotConfig", "PartyResult", "PartyRole", "ServerResult", "ServerRole",
           "run_local"]


class Kinds:
    """The message classes the roles exchange (few-shot VFL reuses the roles with its own kinds)."""

    Setup: type[Any] = Setup
    Representation: type[Any] = Representation
    Gradient: type[Any] = Gradient
    Partition: type[Any] = Partition
    DpGradient: type[Any] = DpGradient
    DpPartition: type[Any] = DpPartition
    RepresentationUpdate: type[Any] = RepresentationUpdate
    TestRepresentation: type[Any] = TestRepresentation
    DpRepresentation: type[Any] = DpRepresentation
    DpRepresentationUpdate: type[Any] = DpRepresentationUpdate
    DpTestRepresentation: type[Any] = DpTestRepresentation

    @classmethod
    def rep(cls, plain: str, embedding: EmbeddingDefence) -> type[Any]:
        """The representation kind ``plain`` (e.g. ``"RepresentationUpdate"``), or its ``Dp`` kind under embedding
        noise."""
        kind: type[Any] = getattr(cls, f"Dp{plain}" if embedding.noised else plain)
        return kind

#: the protocol's numbered steps (package docstring): progress is reported as steps done of these
STEPS = 6


@dataclass(frozen=True)
class OneShotConfig(DefendedConfig):
    """One-shot VFL's parameters: :class:`RepConfig`, the label and embedding defences (:mod:`.defence`; off by
    default; D1 is the label defences' one release per row, U1 and U2 an overlap row's two embedding releases), the
    semi-supervised training and what D1 carries."""

    ssl_epochs: int = option(60, "epochs of each party's local semi-supervised training")
    head_epochs: int = option(200, "epochs of the server's head training on the overlap rows")
    threshold: float = option(0.9, "FixMatch confidence threshold of a pseudo-label")
    lambda_u: float = option(1.0, "weight of the unlabelled loss in local training")
    variant: str = option("gradient", "what the one download carries: the gradients, or only their partition",
                          choices=VARIANTS)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ssl_epochs < 0 or self.head_epochs < 0 or not 0 < self.threshold <= 1:
            raise InputDataError("need non-negative epochs and 0 < threshold <= 1")
        if self.variant not in VARIANTS:
            raise InputDataError(f"variant must be one of {VARIANTS}, not {self.variant!r}")


@dataclass
class PartyResult:
    """A party's trained extractor (arrays), the temporary labels it derived, its local training statistics and the
    label and embedding defences' guarantees it accounted from the setup (defence name -> (ε, δ) and what it
    covers)."""

    extractor: list[np.ndarray]
    pseudo_labels: np.ndarray
    ssl: dict[str, float]
    privacy: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- server


@dataclass
class _ServerState:
    k: int = 0
    H: list[np.ndarray] = field(default_factory=list)
    head: list[np.ndarray] = field(default_factory=list)
    H2: list[np.ndarray] = field(default_factory=list)
    Ht: list[np.ndarray] = field(default_factory=list)


class ServerRole(Role[_ServerState]):
    """S: the labels of the overlap rows and the classifier head f_c on H^1 ∘ ... ∘ H^K."""

    role = SERVER
    State: ClassVar[type[_ServerState]] = _ServerState
    M: ClassVar[type[Kinds]] = Kinds
    PROTOCOL: ClassVar[str] = "oneshot"  # its name in progress reports (few-shot's roles say "fewshot")

    def __init__(self, data: ServerData, *, parties: Sequence[str], config: OneShotConfig | None = None,
                 n_test: int = 0, name: str = SERVER) -> None:
        super().__init__(name)
        require_torch()
        self.data, self.parties, self.cfg, self.n_test = data, list(parties), config or OneShotConfig(), n_test
        if not self.parties:
            raise InputDataError("one-shot VFL needs at least one party")
        if data.y_test is not None and len(data.y_test) not in (0, n_test):
            raise InputDataError(f"{len(data.y_test)} test labels for {n_test} test rows")
        self.timings: dict[str, float] = {}
        self.defence = self.cfg.defence()
        self.embedding = self.cfg.embedding(len(data.y_overlap) + n_test)
        self.y_train = data.y_overlap  # randomized at start() under --label-dp

    @property
    def n(self) -> int:
        return len(self.data.y_overlap)

    def rep(self, plain: str) -> type[Any]:
        """The kind of the representations ``plain`` the parties send under this run's embedding defences."""
        return self.M.rep(plain, self.embedding)

    def _setup(self) -> Any:
        c, dfn, emb = self.cfg, self.defence, self.embedding
        return self.M.Setup(self.n, self.n_test, c.dim, c.variant, c.seed, dfn.label_epsilon, dfn.noise_multiplier,
                            dfn.clip, dfn.delta, emb.noise_multiplier, emb.clip, emb.delta, emb.dcor_weight)

    def start(self) -> Next:
        """Step 0: the setup to every party (after randomized response, under --label-dp); then wait for U1."""
        self.hold("labels", self.data.y_overlap)
        if self.defence.label_epsilon is not None:
            from vflcrypto.privacy import mechanisms

            self.y_train = mechanisms.randomized_response(self.data.y_overlap, self.data.n_classes,
                                                          self.defence.label_epsilon)
        self.hold("training_labels", self.y_train)
        return then([send(p, self._setup()) for p in self.parties], self.parties[0], self.rep("Representation"),
                    "on_representation")

    def _check(self, H: Any, rows: int, what: str) -> np.ndarray:
        return check_matrix(H, rows, self.cfg.dim, what, self.parties[self.state.k])

    def on_representation(self, msg: Representation | DpRepresentation) -> Next:
        """Step 1 (U1) from party k; after the last, step 2 (D1) to every party."""
        st = self.state
        st.H.append(self._check(msg.H, self.n, "U1 representations"))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], self.rep("Representation"), "on_representation")
        return self._download()

    def _download(self) -> Next:
        from vflcrypto.ml import nn as vnn

        progress.report(self.PROTOCOL, 1, STEPS, unit="step")
        st, t0 = self.state, time.perf_counter()
        head = vnn.head(self.cfg.dim * len(self.parties), self.data.n_classes, seed=self.cfg.seed)
        st.head = vnn.module_arrays(head)
        grads = vnn.grad_wrt_inputs(head, st.H, self.y_train)
        dfn = self.defence
        if dfn.noised:
            assert dfn.clip is not None and dfn.noise_multiplier is not None  # LabelDefence checks both
            grads = noised_d1(grads, dfn.clip, dfn.noise_multiplier)
        gradient, partition = (self.M.DpGradient, self.M.DpPartition) if dfn.on else (self.M.Gradient,
                                                                                      self.M.Partition)
        sends = []
        for k, (p, G) in enumerate(zip(self.parties, grads, strict=True)):
            if self.cfg.variant == "gradient":
                sends.append(send(p, gradient(G, self.data.n_classes)))
            else:
                clusters = kmeans(G, self.data.n_classes, seed=self.cfg.seed * 1000 + k).labels
                ids = canonical_labels(clusters).astype(np.int64)
                sends.append(send(p, partition(ids, self.data.n_classes)))
        self.timings["d1"] = time.perf_counter() - t0
        progress.report(self.PROTOCOL, 2, STEPS, unit="step")
        st.k = 0
        return then(sends, self.parties[0], self.rep("RepresentationUpdate"), "on_update")

    def on_update(self, msg: RepresentationUpdate | DpRepresentationUpdate) -> Next:
        """Step 4 (U2) from party k; after the last, step 5: fine-tune the head on the overlap rows."""
        self.state.H2.append(self._check(msg.H, self.n, "U2 representations"))
        return self._after_update()

    def _after_update(self) -> Next:
        st = self.state
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], self.rep("RepresentationUpdate"), "on_update")
        self.fit_head(np.concatenate(st.H2, axis=1), self.y_train)
        return self._await_tests()

    def _await_tests(self) -> Next:
        progress.report(self.PROTOCOL, 5, STEPS, unit="step")  # the head is fitted
        self.state.k = 0
        return then([], self.parties[0], self.rep("TestRepresentation"), "on_test")

    def fit_head(self, X: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Fine-tune the head (from its state) on joint representations ``X`` with labels ``y``."""
        from vflcrypto.ml import nn as vnn

        st, t0 = self.state, time.perf_counter()
        head = vnn.head(self.cfg.dim * len(self.parties), self.data.n_classes, seed=self.cfg.seed)
        vnn.load_arrays(head, st.head)
        vnn.train_supervised([head], X, y, weights=weights, epochs=self.cfg.head_epochs, lr=self.cfg.head_lr,
                             batch_size=self.cfg.batch_size, seed=self.cfg.seed)
        st.head = vnn.module_arrays(head)
        self.timings["head"] = self.timings.get("head", 0.0) + time.perf_counter() - t0

    def on_test(self, msg: TestRepresentation | DpTestRepresentation) -> Next:
        """Step 6: the test representations of party k; after the last, the predictions."""
        st = self.state
        st.Ht.append(self._check(msg.H, self.n_test, "test representations"))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], self.rep("TestRepresentation"), "on_test")
        result = self._predict()
        progress.report(self.PROTOCOL, STEPS, STEPS, unit="step")
        return done(result)

    def _predict(self) -> ServerResult:
        from vflcrypto.ml import nn as vnn

        st = self.state
        head = vnn.head(self.cfg.dim * len(self.parties), self.data.n_classes, seed=self.cfg.seed)
        vnn.load_arrays(head, st.head)
        if self.n_test:
            proba = vnn.predict_proba(head, np.concatenate(st.Ht, axis=1))
        else:
            proba = np.zeros((0, self.data.n_classes), np.float32)
        y = self.data.y_test
        acc = float(np.mean(proba.argmax(1) == y)) if y is not None and len(y) and self.n_test else None
        privacy = {**self.defence.privacy(1, self.data.n_classes, STATEMENT),
                   **self.embedding.privacy(self.cfg.embed_releases(), EMBED_STATEMENT)}
        return ServerResult(st.head, proba, acc, self.timings, privacy=privacy)


# --------------------------------------------------------------------------- party


@dataclass
class _PartyState:
    setup: Setup | None = None
    extractor: list[np.ndarray] = field(default_factory=list)


class PartyRole(Role[_PartyState]):
    """Party k: its own columns of the overlap, test and unaligned rows, and its extractor f_k.

    ``extractor`` (optional) is the party's own ``torch.nn.Module`` mapping its columns to
    ``config.dim`` values; by default an MLP (:func:`vflcrypto.ml.nn.mlp_extractor`).
    """

    role = PARTY
    State: ClassVar[type[_PartyState]] = _PartyState
    M: ClassVar[type[Kinds]] = Kinds
    PROTOCOL: ClassVar[str] = "oneshot"  # its name in progress reports (few-shot's roles say "fewshot")

    def __init__(self, data: PartyData, *, index: int, name: str | None = None, server: str = SERVER,
                 config: OneShotConfig | None = None, extractor: Any = None) -> None:
        super().__init__(name or f"party-{index}")
        require_torch()
        from vflcrypto.ml import nn as vnn

        self.data, self.index, self.server, self.cfg = data, index, server, config or OneShotConfig()
        own = np.concatenate([data.X_overlap, data.X_unaligned])
        self.seed = self.cfg.seed * 1000 + index
        self.f = extractor if extractor is not None else vnn.mlp_extractor(own, self.cfg.dim, hidden=self.cfg.hidden,
                                                                           seed=self.seed)

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        super().load_state(data, allow_insecure=allow_insecure)
        if self.state.extractor:
            from vflcrypto.ml import nn as vnn

            vnn.load_arrays(self.f, self.state.extractor)

    @property
    def setup(self) -> Setup:
        if self.state.setup is None:
            raise ProtocolError(f"{self.name}: no setup received yet")
        return self.state.setup

    def start(self) -> Next:
        return then([], self.server, self.M.Setup, "on_setup")

    def on_setup(self, setup: Setup) -> Next:
        """Step 0 (the plan must match this party's rows and extractor); step 1: U1."""
        from vflcrypto.ml import nn as vnn

        d = self.data
        if setup.n_overlap != len(d.X_overlap) or setup.n_test != len(d.X_test):
            raise InputDataError(f"{self.name} has {len(d.X_overlap)} overlap and {len(d.X_test)} test rows, the "
                                 f"server {setup.n_overlap} and {setup.n_test}: not aligned")
        if setup.variant not in VARIANTS or setup.dim != self.cfg.dim:
            raise ProtocolError(f"setup asks for variant {setup.variant!r} and d = {setup.dim}; this party runs d = "
                                f"{self.cfg.dim}")
        announced = announced_defence(setup, self.name, self.cfg.defence())
        announced_embedding(setup, self.name, self.cfg.embedding(setup.n_overlap + setup.n_test))
        self.state.setup = setup
        self.hold("features", d.X_overlap)  # ground truth of the representation probe (audit)
        H = vnn.forward(self.f, d.X_overlap)
        if H.shape != (len(d.X_overlap), self.cfg.dim):
            raise InputDataError(f"{self.name}'s extractor maps to shape {H.shape[1:]}, not ({self.cfg.dim},)")
        self.state.extractor = vnn.module_arrays(self.f)
        if setup.variant == "gradient":
            kind, step = (self.M.DpGradient if announced.on else self.M.Gradient), "on_gradient"
        else:
            kind, step = (self.M.DpPartition if announced.on else self.M.Partition), "on_partition"
        return then([send(self.server, self.release("Representation", H))], self.server, kind, step)

    @property
    def embedding(self) -> EmbeddingDefence:
        """The embedding defences the setup announced (checked against this party's own in :meth:`on_setup`)."""
        return announced_embedding(self.setup, self.name)

    def release(self, plain: str, H: np.ndarray) -> Any:
        """The message ``plain`` (e.g. ``"RepresentationUpdate"``) carrying representations ``H`` as this party sends
        them: clipped and noised, as its ``Dp`` kind, under embedding noise."""
        emb = self.embedding
        return self.M.rep(plain, emb)(emb.release(H))

    def embed_releases(self) -> int:
        """How many representations of one overlap row this party sends (U1 and U2)."""
        return 2

    def _classes(self, n_classes: int) -> int:
        if not 2 <= n_classes <= len(self.data.X_overlap):
            raise ProtocolError(f"the server announced C = {n_classes} classes for {len(self.data.X_overlap)} rows")
        return n_classes

    def on_gradient(self, msg: Gradient | DpGradient) -> Next:
        """Step 2 (D1): G^k; step 3: its rows clustered into C temporary labels, then local training."""
        C = self._classes(msg.n_classes)
        G = check_matrix(msg.G, len(self.data.X_overlap), self.cfg.dim, "D1 gradients", self.server)
        return self._train_locally(kmeans(G, C, seed=self.seed).labels, C)

    def on_partition(self, msg: Partition | DpPartition) -> Next:
        """Step 2 (D1, partition-only): the server's clusters are the temporary labels; then local training."""
        C = self._classes(msg.n_classes)
        ids = np.asarray(msg.clusters)
        if ids.shape != (len(self.data.X_overlap),) or ids.dtype.kind not in "iu" or \
                (len(ids) and (ids.min() < 0 or ids.max() >= C)):
            raise ProtocolError(f"the server sent a malformed partition (shape {ids.shape}, C = {C})")
        return self._train_locally(ids.astype(np.int64), C)

    def _train_locally(self, pseudo: np.ndarray, C: int) -> Next:
        """Step 3: FixMatch-tab on the pseudo-labelled overlap rows and the unaligned rows; steps 4 and 6."""
        from vflcrypto.ml import nn as vnn

        d, cfg = self.data, self.cfg
        classifier = vnn.head(cfg.dim, C, seed=self.seed + 1)
        aug = vnn.AugmentConfig(threshold=cfg.threshold, lambda_u=cfg.lambda_u)
        stats = vnn.fixmatch_tab(self.f, classifier, d.X_overlap, pseudo, d.X_unaligned, epochs=cfg.ssl_epochs,
                                 lr=cfg.lr, batch_size=cfg.batch_size, augment=aug, seed=self.seed,
                                 penalty=self.embedding.penalty())
        self.state.extractor = vnn.module_arrays(self.f)
        progress.report(self.PROTOCOL, 3, STEPS, unit="step")  # this party's local training
        self.hold("pseudo_labels", pseudo)
        return self._after_local_training(PartyResult(self.state.extractor, pseudo, stats, self.privacy()), classifier)

    def privacy(self) -> dict[str, Any]:
        """The guarantees of the defences the setup announced, as this party accounts them (empty: undefended)."""
        return {**announced_defence(self.setup, self.name).privacy(1, None, STATEMENT),
                **self.embedding.privacy(self.embed_releases(), EMBED_STATEMENT)}

    def _after_local_training(self, result: PartyResult, classifier: Any) -> Next:
        """Steps 4 and 6: U2 and the test representations; the party is done."""
        from vflcrypto.ml import nn as vnn

        d = self.data
        sends = [send(self.server, self.release("RepresentationUpdate", vnn.forward(self.f, d.X_overlap))),
                 send(self.server, self.release("TestRepresentation", vnn.forward(self.f, d.X_test)))]
        return done(result, sends)


# --------------------------------------------------------------------------- in one process


def run_local(server: ServerData, parties: Sequence[PartyData], *, config: OneShotConfig | None = None,
              extractors: Sequence[Any] | None = None, timeout: float = DEFAULT_TIMEOUT,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None) -> RepRun:
    """Run S and every party in this process (:func:`~vflcrypto.protocols._repvfl.run_roles`)."""
    return run_roles(ServerRole, PartyRole, server, parties, config or OneShotConfig(), extractors=extractors,
                     timeout=timeout, overrides=overrides, tap=tap)
