"""The roles of prototype VFL as named steps (each round's statistics one secure aggregation), and ``run_local``.

Steps, numbered as in the package docstring:

* server S: ``start`` (0: the setup) → ``on_embedding`` (1: h of the aligned rows, once per
  party) → from round 1, 2: the statistics, a secure-aggregation round (the
  :class:`~vflcrypto.protocols.secagg.ServerSession` steps ``on_advertise`` … ``on_unmask``)
  or, plaintext, ``on_stats`` per party → 3: fit the fusion, μ^g and π^g; ``global_model``
  down → after the last round 5: ``on_test`` per party (prediction);
* party m: ``on_setup`` (0; 1: h of round 0) → ``on_global_model`` (4: the local prototype
  step; 1: h; 2: the statistics, by ``on_agg_setup`` and the
  :class:`~vflcrypto.protocols.secagg.ClientSession` steps, or in the clear) → after the
  last round 5: the test embeddings.

Every party must take part in every round (its columns are part of every row): a party
that leaves or stalls aborts the run with a :class:`~vflcrypto.errors.ProtocolError`
or a timeout, never a model trained without it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.ml.prototypes import check_distribution
from vflcrypto.runtime import progress
from vflcrypto.runtime.channel import (
    DEFAULT_TIMEOUT,
    AuditTap,
    Channel,
    Endpoint,
    LocalNetwork,
    Transcript,
    run_parties,
)
from vflcrypto.runtime.steps import Next, Role, done, drive, send, then
from vflcrypto.sharing.masking import ring_dtype

from .._repvfl import PartyData, ServerData, ServerResult, check_matrix, party_names, require_torch
from ..secagg import math as sm
from ..secagg.messages import Setup as AggSetup
from ..secagg.session import (
    AggregateResult,
    ClientAggState,
    ClientSession,
    ServerAggState,
    ServerSession,
    ServerSessionSteps,
)
from . import math as pm
from .messages import PARTY, SERVER, Embedding, GlobalModel, Setup, Stats, TestEmbedding

__all__ = ["PartyResult", "PartyRole", "ProtoRun", "ProtoServerResult", "ServerRole", "run_local", "secagg_config"]


def secagg_config(cfg: pm.ProtoConfig) -> sm.SecAggConfig:
    """The aggregation's fixed point: the same encoding in both modes (so they agree bit for bit)."""
    return sm.SecAggConfig(frac_bits=cfg.frac_bits, value_bits=cfg.value_bits)


@dataclass
class ProtoServerResult(ServerResult):
    """The server's result: the fusion model (``head``), predictions, μ^g, π^g and the gate's mean weights."""

    prototypes: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    prior: np.ndarray = field(default_factory=lambda: np.zeros(0))
    gate_means: np.ndarray = field(default_factory=lambda: np.zeros(0))
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class PartyResult:
    """A party's extractor (arrays), its last local prior and prototypes, and its local losses per round."""

    extractor: list[np.ndarray]
    prior: np.ndarray
    prototypes: np.ndarray
    losses: list[float]


# --------------------------------------------------------------------------- server


@dataclass
class _ServerState:
    round: int = 0
    k: int = 0
    H: list[np.ndarray] = field(default_factory=list)
    Ht: list[np.ndarray] = field(default_factory=list)
    fusion: list[np.ndarray] = field(default_factory=list)
    mu: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    prior: np.ndarray = field(default_factory=lambda: np.zeros(0))
    plain_sum: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    agg: ServerAggState = field(default_factory=ServerAggState)


class ServerRole(ServerSessionSteps, Role[_ServerState]):
    """S: the labels of the aligned rows, the adapters, the gate, the global classifier, μ^g and π^g."""

    role = SERVER
    State = _ServerState

    def __init__(self, data: ServerData, *, parties: Sequence[str], config: pm.ProtoConfig | None = None,
                 n_test: int = 0, pins: Mapping[str, bytes] | None = None, run_id: str = "",
                 name: str = SERVER) -> None:
        super().__init__(name)
        require_torch()
        self.data, self.parties, self.cfg, self.n_test = data, list(parties), config or pm.ProtoConfig(), n_test
        if len(self.parties) < 2:
            raise InputDataError("prototype VFL needs at least two parties")
        if data.y_test is not None and len(data.y_test) not in (0, n_test):
            raise InputDataError(f"{len(data.y_test)} test labels for {n_test} test rows")
        if self.cfg.secure and (pins is None or set(pins) != set(self.parties)):
            raise InputDataError("the secure mode needs every party's pinned identity key")
        self.sa = secagg_config(self.cfg)
        self.session = ServerSession(name, pins or {}, run_id, self.state.agg, self._aggregated, self.hold)
        self.timings: dict[str, float] = {}
        self.history: list[dict[str, Any]] = []
        self.gate_means = np.zeros(len(self.parties))

    @property
    def n(self) -> int:
        return len(self.data.y_overlap)

    @property
    def length(self) -> int:
        return self.data.n_classes * (1 + self.cfg.width)

    def start(self) -> Next:
        """Step 0: the setup to every party; then step 1 (round 0)."""
        c = self.cfg
        self.hold("labels", self.data.y_overlap)
        setup = Setup(self.n, self.n_test, self.data.n_classes, c.dim, c.width, c.rounds, c.secure, c.alpha, c.beta,
                      c.tau, c.seed)
        return then([send(p, setup) for p in self.parties], self.parties[0], Embedding, "on_embedding",
                    patience=2.0)

    def on_embedding(self, msg: Embedding) -> Next:
        """Step 1: party k's h of the aligned rows; after the last, step 2 (from round 1) or step 3."""
        st = self.state
        sender = self.parties[st.k]
        if msg.round != st.round:
            raise ProtocolError(f"{sender} sent embeddings of round {msg.round} during round {st.round}")
        st.H.append(check_matrix(msg.H, self.n, self.cfg.dim, "aligned embeddings", sender))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], Embedding, "on_embedding", patience=2.0)
        if st.round == 0:
            return self._fit(None)
        if self.cfg.secure:
            return self.session.begin(st.round, self.parties, self.length, self.sa)
        st.k, st.plain_sum = 0, np.zeros(self.length, ring_dtype(self.sa.ring_bits))
        return then([], self.parties[0], Stats, "on_stats")

    def on_stats(self, msg: Stats) -> Next:
        """Step 2 (plaintext mode): party k's fixed-point statistics, summed on the aggregation's ring."""
        st = self.state
        y = np.asarray(msg.y)
        if msg.round != st.round or y.dtype != np.dtype(ring_dtype(self.sa.ring_bits)) or y.shape != (self.length,):
            raise ProtocolError(f"{self.parties[st.k]} sent malformed or stale statistics")
        st.plain_sum = st.plain_sum + y
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], Stats, "on_stats")
        return self._fit(sm.decode_ring(st.plain_sum, self.sa.frac_bits))

    def _aggregated(self, res: AggregateResult) -> Next:
        if sorted(res.survivors) != sorted(self.parties):
            gone = sorted(set(self.parties) - set(res.survivors))
            raise ProtocolError(f"{', '.join(gone)} left the aggregation of round {self.state.round}: every party's "
                                "columns are needed, so the run stops")
        return self._fit(res.total)

    def _fit(self, total: np.ndarray | None) -> Next:
        """Step 3: the fusion on the aligned rows, then μ^g and π^g (with the summed statistics); down or the end."""
        st, cfg, K, t0 = self.state, self.cfg, self.data.n_classes, time.perf_counter()
        state = pm.FusionState.from_flat(st.fusion, len(self.parties)) if st.fusion else None
        fusion = pm.fit_fusion(st.H, self.data.y_overlap, K, cfg, state)
        st.fusion = fusion.flat()
        proba, z, w = pm.fuse_rows(st.H, fusion, K, cfg)
        counts = sums = None
        if total is not None:
            counts, sums = pm.split_statistics(total, K, cfg.width)
            self.hold("statistics_sum", np.asarray(total))
        st.mu, st.prior = pm.global_prototypes(z, self.data.y_overlap, K, counts, sums, cfg.unaligned_weight)
        self.gate_means = w.mean(0)
        self.hold("gate_means", self.gate_means)
        self.history.append({"round": st.round, "train_accuracy": float((proba.argmax(1) == self.data.y_overlap)
                                                                        .mean()),
                             "unaligned_mass": float(counts.sum()) if counts is not None else 0.0})
        self.timings["fit"] = self.timings.get("fit", 0.0) + time.perf_counter() - t0
        st.H, st.k = [], 0
        progress.report("protovfl", st.round, cfg.rounds, unit="round")  # round 0: the aligned rows' first fit
        if st.round < cfg.rounds:
            sends = [send(p, GlobalModel(st.round, st.mu.astype(np.float32), st.prior.astype(np.float32),
                                         *fusion.adapters[m]))
                     for m, p in enumerate(self.parties)]
            st.round += 1
            return then(sends, self.parties[0], Embedding, "on_embedding", patience=3.0)
        return then([], self.parties[0], TestEmbedding, "on_test", patience=2.0)

    def on_test(self, msg: TestEmbedding) -> Next:
        """Step 5: party k's embeddings of the held-out rows; after the last, the predictions."""
        st = self.state
        st.Ht.append(check_matrix(msg.H, self.n_test, self.cfg.dim, "test embeddings", self.parties[st.k]))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], TestEmbedding, "on_test")
        return done(self._predict())

    def _predict(self) -> ProtoServerResult:
        st, K = self.state, self.data.n_classes
        fusion = pm.FusionState.from_flat(st.fusion, len(self.parties))
        if self.n_test:
            proba = pm.fuse_rows(st.Ht, fusion, K, self.cfg)[0]
        else:
            proba = np.zeros((0, K))
        y = self.data.y_test
        acc = float((proba.argmax(1) == y).mean()) if y is not None and len(y) and self.n_test else None
        return ProtoServerResult(st.fusion, proba, acc, dict(self.timings), st.mu, st.prior, self.gate_means,
                                 list(self.history))


# --------------------------------------------------------------------------- party


@dataclass
class _PartyState:
    round: int = 0
    rounds: int = 0
    n_classes: int = 0
    extractor: list[np.ndarray] = field(default_factory=list)
    prior: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prototypes: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    losses: list[float] = field(default_factory=list)
    vector: np.ndarray = field(default_factory=lambda: np.zeros(0))
    agg: ClientAggState = field(default_factory=ClientAggState)


class PartyRole(Role[_PartyState]):
    """Party m: its extractor E_m, trained on its unaligned rows against the prototypes the server sends."""

    role = PARTY
    State = _PartyState

    def __init__(self, data: PartyData, *, index: int, name: str | None = None, server: str = SERVER,
                 config: pm.ProtoConfig | None = None, identity: Ed25519PrivateKey | None = None,
                 pins: Mapping[str, bytes] | None = None, run_id: str = "", extractor: Any = None) -> None:
        super().__init__(name or f"party-{index}")
        require_torch()
        self.data, self.index, self.server, self.cfg = data, index, server, config or pm.ProtoConfig()
        if self.cfg.secure and (identity is None or not pins):
            raise InputDataError("the secure mode needs this party's identity key and the pinned keys")
        self.session = ClientSession(self.name, server, identity or Ed25519PrivateKey.generate(), pins or {},
                                     run_id, secagg_config(self.cfg), self.state.agg, self._aggregated, self.hold)
        self._given = extractor
        self._module: Any = None

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        super().load_state(data, allow_insecure=allow_insecure)
        self.session.state = self.state.agg  # the session works on the restored state
        self._module = None

    @property
    def f(self) -> Any:
        """E_m as a torch module (built once, restored from the state's arrays)."""
        from vflcrypto.ml import nn as vnn

        if self._module is None:
            self._module = self._given if self._given is not None else vnn.mlp_extractor(
                np.concatenate([self.data.X_overlap, self.data.X_unaligned]), self.cfg.dim, hidden=self.cfg.hidden,
                seed=self.cfg.seed * 1000 + 17 * self.index + 1)
            if self.state.extractor:
                vnn.load_arrays(self._module, self.state.extractor)
        return self._module

    def _patience(self) -> float:
        return 4.0 + len(self.session.pins)

    def start(self) -> Next:
        return then([], self.server, Setup, "on_setup")

    def on_setup(self, setup: Setup) -> Next:
        """Step 0: the setup must match this party's rows and parameters; step 1 of round 0."""
        from vflcrypto.ml import nn as vnn

        c, d = self.cfg, self.data
        mine = (len(d.X_overlap), len(d.X_test), c.dim, c.width, c.rounds, c.secure, c.alpha, c.beta, c.tau, c.seed)
        theirs = (setup.n_aligned, setup.n_test, setup.dim, setup.width, setup.rounds, setup.secure, setup.alpha,
                  setup.beta, setup.tau, setup.seed)
        if mine != theirs:
            names = ("aligned rows", "test rows", "dim", "width", "rounds", "secure", "alpha", "beta", "tau", "seed")
            diff = [f"{n}: server {b!r}, here {a!r}" for n, a, b in zip(names, mine, theirs, strict=True) if a != b]
            raise ProtocolError(f"{self.name}: the setup differs from this party's plan ({'; '.join(diff)})")
        if not 2 <= setup.n_classes <= pm.MAX_CLASSES:
            raise ProtocolError(f"{self.name}: the setup asks for {setup.n_classes} classes")
        st = self.state
        st.n_classes, st.rounds = setup.n_classes, setup.rounds
        self.hold("features", d.X_overlap)  # ground truth of the audit's probe
        self.hold("unaligned_rows", len(d.X_unaligned))
        st.extractor = vnn.module_arrays(self.f)
        sends = [send(self.server, Embedding(0, vnn.forward(self.f, d.X_overlap)))]
        if setup.rounds == 0:
            return self._finish(sends)
        return then(sends, self.server, GlobalModel, "on_global_model", patience=self._patience())

    def _check_model(self, msg: GlobalModel) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
        st, c, K = self.state, self.cfg, self.state.n_classes
        mu, prior = np.asarray(msg.prototypes), np.asarray(msg.prior)
        W, b = np.asarray(msg.adapter_w), np.asarray(msg.adapter_b)
        if msg.round != st.round:
            raise ProtocolError(f"{self.name}: a global model of round {msg.round} during round {st.round}")
        shapes = (mu.shape, prior.shape, W.shape, b.shape)
        if shapes != ((K, c.width), (K,), (c.width, c.dim), (c.width,)) or \
                not all(np.isfinite(a).all() for a in (mu, prior, W, b)):
            raise ProtocolError(f"{self.name}: a malformed global model (shapes {shapes}, or NaN values)")
        try:
            prior = check_distribution(prior, "the global prior π^g", atol=1e-4)
        except InputDataError as e:
            raise ProtocolError(f"{self.name}: {e}") from None
        return mu.astype(np.float64), prior / prior.sum(), (W.astype(np.float32), b.astype(np.float32))

    def on_global_model(self, msg: GlobalModel) -> Next:
        """Step 4: the local prototype step on the unaligned rows; step 1 (h) and step 2 (the statistics)."""
        from vflcrypto.ml import nn as vnn

        st, d = self.state, self.data
        mu_g, prior_g, adapter = self._check_model(msg)
        own_mu = st.prototypes if st.prototypes.shape == mu_g.shape else None
        own_prior = st.prior if st.prior.shape == prior_g.shape else None
        res = pm.local_step(self.f, adapter, d.X_unaligned, mu_g, prior_g, own_mu, own_prior, self.cfg,
                            seed=self.cfg.seed * 100_003 + 1009 * self.index + st.round)
        st.extractor = vnn.module_arrays(self.f)
        st.prior, st.prototypes = res.prior, res.prototypes
        st.losses.append(res.loss)
        st.vector = pm.class_statistics(res.counts, res.sums)
        self.hold("statistics", st.vector)
        self.hold("class_mix", res.counts)
        self.hold("adapter", adapter)
        self.hold("global_model", (mu_g, prior_g))
        st.round += 1
        sends = [send(self.server, Embedding(st.round, vnn.forward(self.f, d.X_overlap)))]
        if self.cfg.secure:
            return then(sends, self.server, AggSetup, "on_agg_setup", patience=self._patience())
        sa = self.session.config
        y = sm.encode_ring(st.vector, sa.frac_bits, sa.value_bits, sa.ring_bits)
        return self._next([*sends, send(self.server, Stats(st.round, y))])

    # the secure-aggregation steps (:class:`ClientSession`)
    def on_agg_setup(self, setup: AggSetup) -> Next:
        """Step 2 (secagg steps 0-1)."""
        if setup.round != self.state.round:
            raise ProtocolError(f"{self.name}: an aggregation for round {setup.round} during round {self.state.round}")
        return self.session.begin(setup, self.state.vector)

    def on_keys(self, msg: Any) -> Next:
        """Step 2 (secagg step 2)."""
        return self.session.on_keys(msg)

    def on_forward(self, msg: Any) -> Next:
        """Step 2 (secagg step 3)."""
        return self.session.on_forward(msg)

    def on_survivors(self, msg: Any) -> Next:
        """Step 2 (secagg step 4)."""
        return self.session.on_survivors(msg)

    def _aggregated(self) -> Next:
        return self._next([])

    def _next(self, sends: list[tuple[str, Any]]) -> Next:
        if self.state.round < self.state.rounds:
            return then(sends, self.server, GlobalModel, "on_global_model", patience=self._patience())
        return self._finish(sends)

    def _finish(self, sends: list[tuple[str, Any]]) -> Next:
        """Step 5: the held-out rows' embeddings; done."""
        from vflcrypto.ml import nn as vnn

        st = self.state
        out = [*sends, send(self.server, TestEmbedding(vnn.forward(self.f, self.data.X_test)))]
        return done(PartyResult(st.extractor, st.prior, st.prototypes, list(st.losses)), out)


# --------------------------------------------------------------------------- in one process


@dataclass
class ProtoRun:
    """Every role's result of :func:`run_local` and the shared transcript."""

    server: ProtoServerResult
    parties: list[PartyResult]
    transcript: Transcript
    seconds: float

    @property
    def test_accuracy(self) -> float | None:
        return self.server.test_accuracy


def run_local(server: ServerData, parties: Sequence[PartyData], *, config: pm.ProtoConfig | None = None,
              extractors: Sequence[Any] | None = None, timeout: float = DEFAULT_TIMEOUT,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None) -> ProtoRun:
    """S and every party in this process (threads over in-memory channels; identities generated and pinned here).

    ``extractors`` optionally gives each party's own ``torch.nn.Module``; ``overrides``
    replaces a party's task (tests); ``tap`` (audits) keeps what each party received and holds.
    """
    cfg = config or pm.ProtoConfig()
    if len(parties) < 2:
        raise InputDataError("prototype VFL needs at least two parties")
    n_test = len(parties[0].X_test)
    if any(len(p.X_test) != n_test or len(p.X_overlap) != len(server.y_overlap) for p in parties):
        raise InputDataError("every party must hold the same aligned and test rows as the server's labels")
    names = party_names(len(parties))
    ids = {n: Ed25519PrivateKey.generate() for n in names}
    pins = {n: k.public_key().public_bytes_raw() for n, k in ids.items()}
    run_id = secrets.token_hex(8)
    net = LocalNetwork([Endpoint(SERVER, SERVER), *[Endpoint(p, PARTY) for p in names]],
                       links=[(SERVER, p) for p in names], timeout=timeout, transcript=Transcript(tap), run_id=run_id)
    tasks: dict[str, Callable[..., Any]] = {
        SERVER: lambda: drive(ServerRole(server, parties=names, config=cfg, n_test=n_test, pins=pins, run_id=run_id),
                              net.channels(SERVER)),
    }
    for i, (name, data) in enumerate(zip(names, parties, strict=True)):
        ext = extractors[i] if extractors is not None else None
        tasks[name] = (lambda i=i, name=name, data=data, ext=ext: drive(
            PartyRole(data, index=i, name=name, config=cfg, identity=ids[name], pins=pins, run_id=run_id,
                      extractor=ext), net.channels(name)))
    for name, fn in (overrides or {}).items():
        tasks[name] = (lambda fn=fn, name=name: fn(net.channels(name)))
    t0 = time.perf_counter()
    res = run_parties(tasks, network=net)
    return ProtoRun(res[SERVER], [res[n] for n in names], net.transcript, time.perf_counter() - t0)
