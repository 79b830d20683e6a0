"""The roles of few-shot VFL: one-shot VFL's roles plus the unaligned rows, as named steps.

Steps, numbered as in the package docstring (0-4 and 6 are one-shot VFL's):

* server S: ``start`` (0) → ``on_representation`` (1, U1; then 2, D1) → ``on_update`` (4, U2)
  and ``on_unaligned`` (4, H_u^k), once per party → step 5: the head on the overlap rows,
  the auxiliary heads, the attention estimates of the missing views, the Eq. 9 gate and
  (server mode) the head on the expanded rows, or (client mode) ``pseudo_labels`` to
  every party and ``on_refit`` (5c) → ``on_test`` (6);
* party k: ``on_setup`` (0, 1) → ``on_gradient``/``on_partition`` (2, 3, 4: U2 and H_u^k,
  and in server mode 6) → client mode: ``on_pseudo_labels`` (5c: retrain f_k; refit and 6).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.runtime.channel import DEFAULT_TIMEOUT, AuditTap, Channel
from vflcrypto.runtime.steps import Next, done, send, then
from vflcrypto.spec import option

from .._repvfl import PartyData, RepRun, ServerData, check_matrix, run_roles
from ..oneshot.messages import Setup as OneShotSetup
from ..oneshot.roles import Kinds as OneShotKinds
from ..oneshot.roles import OneShotConfig, PartyResult
from ..oneshot.roles import PartyRole as OneShotParty
from ..oneshot.roles import ServerRole as OneShotServer
from ..oneshot.roles import _PartyState as _OneShotPartyState
from ..oneshot.roles import _ServerState as _OneShotServerState
from . import messages as m
from .math import attention_estimate, dual_gate

__all__ = ["FewShotConfig", "Kinds", "PartyRole", "ServerRole", "run_local"]


@dataclass(frozen=True)
class FewShotConfig(OneShotConfig):
    """Few-shot VFL's parameters: one-shot VFL's plus the gate threshold t and the mode (client return releases an
    overlap row's representation a third time, the refit)."""

    gate: float = option(0.9, "threshold t of the dual-classifier gate (Eq. 9)")
    mode: str = option("server", "server: S expands its own training set; client: S returns pseudo-labels",
                       choices=m.MODES)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode not in m.MODES or not 0 <= self.gate < 1:
            raise InputDataError(f"mode must be one of {m.MODES} and 0 <= gate < 1")
        if self.mode == "client" and self.label_dp is None and self.defence().noised:
            raise InputDataError("client return sends pseudo-labels computed from the labels, which gradient noise "
                                 "on D1 does not cover: add --label-dp, or use the server mode")

    def embed_releases(self) -> int:
        return 3 if self.mode == "client" else 2


class Kinds(OneShotKinds):
    """Few-shot VFL's message classes for the one-shot roles."""

    Setup: type[Any] = m.Setup
    Representation: type[Any] = m.Representation
    Gradient: type[Any] = m.Gradient
    Partition: type[Any] = m.Partition
    DpGradient: type[Any] = m.DpGradient
    DpPartition: type[Any] = m.DpPartition
    RepresentationUpdate: type[Any] = m.RepresentationUpdate
    TestRepresentation: type[Any] = m.TestRepresentation
    DpRepresentation: type[Any] = m.DpRepresentation
    DpRepresentationUpdate: type[Any] = m.DpRepresentationUpdate
    DpTestRepresentation: type[Any] = m.DpTestRepresentation
    UnalignedRepresentation: type[Any] = m.UnalignedRepresentation
    DpUnalignedRepresentation: type[Any] = m.DpUnalignedRepresentation
    Refit: type[Any] = m.Refit
    DpRefit: type[Any] = m.DpRefit


@dataclass
class _ServerState(_OneShotServerState):
    Hu: list[np.ndarray] = field(default_factory=list)
    expanded: int = 0


class ServerRole(OneShotServer):
    """S of few-shot VFL: one-shot VFL's server plus the expansion of its training set."""

    State = _ServerState
    M = Kinds
    PROTOCOL = "fewshot"

    def __init__(self, data: ServerData, *, parties: Sequence[str], config: OneShotConfig | None = None,
                 n_test: int = 0, name: str = "server") -> None:
        cfg = config if isinstance(config, FewShotConfig) else FewShotConfig(**(vars(config) if config else {}))
        super().__init__(data, parties=parties, config=cfg, n_test=n_test, name=name)
        self.fcfg = cfg

    @property
    def fs(self) -> _ServerState:
        """The state with few-shot's fields (``State`` is :class:`_ServerState`)."""
        assert isinstance(self.state, _ServerState)  # own state, set by Role.__init__ / load_state
        return self.state

    def _setup(self) -> m.Setup:
        setup: m.Setup = dataclasses.replace(super()._setup(), mode=self.fcfg.mode)
        return setup

    def _after_update(self) -> Next:
        return then([], self.parties[self.state.k], self.rep("UnalignedRepresentation"), "on_unaligned")

    def on_unaligned(self, msg: m.UnalignedRepresentation | m.DpUnalignedRepresentation) -> Next:
        """Step 4: party k's unaligned representations H_u^k; after the last party, step 5."""
        st = self.fs
        rows = int(np.shape(msg.H)[0]) if np.ndim(msg.H) == 2 else -1
        st.Hu.append(check_matrix(msg.H, rows, self.cfg.dim, "unaligned representations", self.parties[st.k]))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], self.rep("RepresentationUpdate"), "on_update")
        return self._expand()

    def _views(self, k: int) -> np.ndarray:
        """Party k's unaligned rows with every other party's view estimated by attention, in party order."""
        st = self.fs
        parts = [st.Hu[k] if j == k else attention_estimate(st.Hu[k], st.H2[k], st.H2[j])
                 for j in range(len(self.parties))]
        return np.concatenate(parts, axis=1).astype(np.float32)

    def pseudo_labels(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per party: (rows kept by the gate, their classes, p̂) among its unaligned rows."""
        from vflcrypto.ml import nn as vnn

        st, cfg, C = self.fs, self.cfg, self.data.n_classes
        head = vnn.head(cfg.dim * len(self.parties), C, seed=cfg.seed)
        vnn.load_arrays(head, st.head)
        out = []
        for k in range(len(self.parties)):
            if not len(st.Hu[k]):
                out.append((np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)))
                continue
            aux = vnn.head(cfg.dim, C, seed=cfg.seed + 1 + k)  # f_c^k on party k's own view
            vnn.train_supervised([aux], st.H2[k], self.y_train, epochs=cfg.head_epochs, lr=cfg.head_lr,
                                 batch_size=cfg.batch_size, seed=cfg.seed + k)
            p_own = vnn.predict_proba(aux, st.Hu[k])
            p_joint = vnn.predict_proba(head, self._views(k))
            p_hat = dual_gate(p_own.argmax(1), p_own.max(1), p_joint.argmax(1), p_joint.max(1), self.fcfg.gate)
            rows = np.flatnonzero(p_hat > 0)
            out.append((rows.astype(np.int64), p_joint.argmax(1)[rows].astype(np.int64), p_hat[rows]))
        return out

    def _expand(self) -> Next:
        """Step 5: the head on the overlap rows, then the gated pseudo-labels (server or client mode)."""
        st, t0 = self.fs, time.perf_counter()
        X_o = np.concatenate(st.H2, axis=1)
        self.fit_head(X_o, self.y_train)
        kept = self.pseudo_labels()
        self.hold("pseudo_labels", kept)
        st.expanded = int(sum(len(r) for r, _, _ in kept))
        self.timings["gate"] = time.perf_counter() - t0
        if self.fcfg.mode == "client":
            sends = [send(p, m.PseudoLabels(r, c, w.astype(np.float32)))
                     for p, (r, c, w) in zip(self.parties, kept, strict=True)]
            st.k, st.H2 = 0, []
            return then(sends, self.parties[0], self.rep("Refit"), "on_refit")
        Xs = [X_o] + [self._views(k)[r] for k, (r, _, _) in enumerate(kept)]
        ys = [self.y_train] + [c for _, c, _ in kept]
        ws = [np.ones(len(X_o))] + [w for _, _, w in kept]
        self.fit_head(np.concatenate(Xs), np.concatenate(ys), np.concatenate(ws))
        return self._await_tests()

    def on_refit(self, msg: m.Refit | m.DpRefit) -> Next:
        """Step 5c (client mode): party k's overlap representations after retraining; then the head again."""
        st = self.state
        st.H2.append(self._check(msg.H, self.n, "refitted representations"))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], self.rep("Refit"), "on_refit")
        self.fit_head(np.concatenate(st.H2, axis=1), self.y_train)
        return self._await_tests()


@dataclass
class _PartyState(_OneShotPartyState):
    setup: m.Setup | None = None  # few-shot's setup (with the mode)
    n_classes: int = 0


class PartyRole(OneShotParty):
    """Party k of few-shot VFL: one-shot VFL's party that also sends its unaligned representations."""

    State = _PartyState
    M = Kinds
    PROTOCOL = "fewshot"

    def __init__(self, data: PartyData, *, index: int, name: str | None = None, server: str = "server",
                 config: OneShotConfig | None = None, extractor: Any = None) -> None:
        cfg = config if isinstance(config, FewShotConfig) else FewShotConfig(**(vars(config) if config else {}))
        super().__init__(data, index=index, name=name, server=server, config=cfg, extractor=extractor)

    @property
    def fs(self) -> _PartyState:
        """The state with few-shot's fields (``State`` is :class:`_PartyState`)."""
        assert isinstance(self.state, _PartyState)  # own state, set by Role.__init__ / load_state
        return self.state

    @property
    def mode(self) -> str:
        setup = self.setup
        if not isinstance(setup, m.Setup):
            raise ProtocolError(f"{self.name}: the setup carries no few-shot mode")
        return setup.mode

    def on_setup(self, setup: OneShotSetup) -> Next:
        """Step 0 (and the mode must be known); step 1: U1."""
        if not isinstance(setup, m.Setup) or setup.mode not in m.MODES:
            raise ProtocolError("setup asks for an unknown few-shot mode")
        self.hold("unaligned_features", self.data.X_unaligned)  # ground truth of the H_u probe (audit)
        return super().on_setup(setup)

    def _classes(self, n_classes: int) -> int:
        self.fs.n_classes = super()._classes(n_classes)
        return n_classes

    def embed_releases(self) -> int:
        """How many representations of one overlap row this party sends (U1, U2; client return: and the refit)."""
        return 3 if self.mode == "client" else 2

    def _after_local_training(self, result: PartyResult, classifier: Any) -> Next:
        """Step 4: U2 and H_u^k; server mode: also the test representations (6) and done."""
        from vflcrypto.ml import nn as vnn

        d = self.data
        if len(d.X_unaligned):
            self.hold("unaligned_clusters", vnn.predict_proba(classifier, vnn.forward(self.f, d.X_unaligned)).argmax(1))
        sends = [send(self.server, self.release("RepresentationUpdate", vnn.forward(self.f, d.X_overlap))),
                 send(self.server, self.release("UnalignedRepresentation", vnn.forward(self.f, d.X_unaligned)))]
        if self.mode == "server":
            return done(result, [*sends, send(self.server, self.release("TestRepresentation",
                                                                         vnn.forward(self.f, d.X_test)))])
        return then(sends, self.server, m.PseudoLabels, "on_pseudo_labels")

    def on_pseudo_labels(self, msg: m.PseudoLabels) -> Next:
        """Step 5c (client mode): retrain f_k on the returned pseudo-labels; the refit and the test rows (6)."""
        from vflcrypto.ml import nn as vnn

        d, cfg, C = self.data, self.cfg, self.fs.n_classes
        rows, labels, conf = (np.asarray(a) for a in (msg.rows, msg.labels, msg.confidence))
        U = len(d.X_unaligned)
        if rows.ndim != 1 or rows.dtype.kind not in "iu" or labels.shape != rows.shape or \
                labels.dtype.kind not in "iu" or conf.shape != rows.shape or not np.isfinite(conf).all():
            raise ProtocolError("the server sent malformed pseudo-labels")
        if len(rows) and (rows.min() < 0 or rows.max() >= U or len(np.unique(rows)) != len(rows)
                          or labels.min() < 0 or labels.max() >= C or conf.min() < 0 or conf.max() > 1):
            raise ProtocolError("pseudo-labels name unknown rows or classes")
        if len(rows):
            classifier = vnn.head(cfg.dim, C, seed=self.seed + 2)
            vnn.train_supervised([self.f, classifier], d.X_unaligned[rows], labels, weights=conf,
                                 epochs=cfg.ssl_epochs, lr=cfg.lr, batch_size=cfg.batch_size, seed=self.seed + 2,
                                 penalty=self.embedding.penalty())
        self.state.extractor = vnn.module_arrays(self.f)
        sends = [send(self.server, self.release("Refit", vnn.forward(self.f, d.X_overlap))),
                 send(self.server, self.release("TestRepresentation", vnn.forward(self.f, d.X_test)))]
        return done(PartyResult(self.state.extractor, np.zeros(0, np.int64), {"returned": float(len(rows))},
                                self.privacy()), sends)


def run_local(server: ServerData, parties: Sequence[PartyData], *, config: FewShotConfig | None = None,
              extractors: Sequence[Any] | None = None, timeout: float = DEFAULT_TIMEOUT,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None) -> RepRun:
    """Run S and every party in this process (threads over in-memory channels); see one-shot's ``run_local``."""
    return run_roles(ServerRole, PartyRole, server, parties, config or FewShotConfig(), extractors=extractors,
                     timeout=timeout, overrides=overrides, tap=tap)
