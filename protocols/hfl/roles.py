"""The roles of horizontal FL as named steps (each round one secure aggregation), and ``run_local``.

Steps, numbered as in the package docstring:

* server: ``start`` → per round 1: ``hfl.model`` to the active clients, then 2: a
  secure-aggregation round (the :class:`~vflcrypto.protocols.secagg.ServerSession` steps
  ``on_advertise`` … ``on_unmask``) or, plaintext, ``on_update`` per client; 3: the new
  model → after the last round 4: ``hfl.done`` and ``on_evaluation`` per client;
* client: ``on_model`` (1: local training) → 2: ``on_setup`` and the
  :class:`~vflcrypto.protocols.secagg.ClientSession` steps (or its plaintext update) →
  the next ``on_model``, or ``on_done`` (4: its held-out rows evaluated).

A client that drops out of a round's aggregation is left out of the later rounds. Under
DP-FedAvg (:mod:`.defence`) the server announces the noise in every ``hfl.model``, each
client checks it against its own configuration, clips its update and adds its noise share
before the encoding (and before any mask); the server accounts the realised (ε, δ) from
each round's survivors at the end (:attr:`HFLResult.privacy`).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from vflcrypto.errors import InputDataError, ProtocolError
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

from ..secagg import math as sm
from ..secagg.messages import Setup as AggSetup
from ..secagg.roles import PHASES, client_names
from ..secagg.session import (
    AggregateResult,
    ClientAggState,
    ClientSession,
    ServerAggState,
    ServerSession,
    ServerSessionSteps,
)
from .math import HFLConfig, accuracy_counts, client_vector, local_train, server_update
from .messages import CLIENT, SERVER, Done, Evaluation, GlobalModel, PlainUpdate

__all__ = ["ClientData", "ClientRole", "HFLResult", "HFLRun", "ServerRole", "model_digest", "run_local"]


def model_digest(msg: GlobalModel) -> bytes:
    """SHA-256 of a global-model message (round, algorithm, parameters, w and c as float64).

    Each client binds it into the secure aggregation of the round it trains in
    (:meth:`ClientSession.begin`'s ``context``): clients that received different models
    refuse to aggregate together (Pasquini, Francati and Ateniese, CCS 2022).
    """
    h = hashlib.sha256(b"vflcrypto.hfl.model.v1|")
    h.update(f"{msg.round}|{msg.algorithm}|{msg.local_steps}|{msg.lr!r}|{msg.mu!r}|".encode())
    if msg.dp_noise is not None:  # DP-FedAvg's announced noise: clients with other noise never aggregate together
        h.update(f"dp|{msg.dp_noise!r}|{msg.dp_clip!r}|{msg.dp_min_clients!r}|".encode())
    for a in (msg.w, msg.c):
        v = np.ascontiguousarray(np.asarray(a, dtype="<f8"))
        h.update(len(v).to_bytes(8, "big") + v.tobytes())
    return h.digest()


@dataclass(frozen=True)
class ClientData:
    """One client's rows: training (X, y) and held-out (X_test, y_test), the same columns at every client."""

    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    y_test: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __post_init__(self) -> None:
        X, y = np.asarray(self.X, np.float64), np.asarray(self.y)
        if X.ndim != 2 or len(X) != len(y) or not len(y) or not np.isfinite(X).all():
            raise InputDataError("a client needs finite training rows with one label each")
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y.astype(np.int64))
        Xt = np.asarray(self.X_test, np.float64).reshape(-1, X.shape[1]) if np.size(self.X_test) else \
            np.zeros((0, X.shape[1]))
        object.__setattr__(self, "X_test", Xt)
        object.__setattr__(self, "y_test", np.asarray(self.y_test).astype(np.int64))


@dataclass
class HFLResult:
    """The server's final model, per-round survivors, the test accuracy over the clients' held-out rows and, under
    DP-FedAvg, the realised guarantee (defence name -> (ε, δ), mechanism, accountant, what it covers)."""

    w: np.ndarray
    survivors: list[list[str]]
    test_accuracy: float | None
    history: list[np.ndarray]
    privacy: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- server


@dataclass
class _ServerState:
    round: int = 0
    w: np.ndarray = field(default_factory=lambda: np.zeros(0))
    c: np.ndarray = field(default_factory=lambda: np.zeros(0))
    active: list[str] = field(default_factory=list)
    k: int = 0
    plain_sum: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))  # on the aggregation's ring
    plain_from: list[str] = field(default_factory=list)
    correct: int = 0
    rows: int = 0
    agg: ServerAggState = field(default_factory=ServerAggState)


class ServerRole(ServerSessionSteps, Role[_ServerState]):
    """The server: the global model, one (secure) aggregation per round."""

    role = SERVER
    State = _ServerState
    tolerates_dropouts = True

    def __init__(self, *, clients: Sequence[str], n_features: int, n_classes: int, config: HFLConfig,
                 pins: Mapping[str, bytes], run_id: str, secagg: sm.SecAggConfig | None = None,
                 name: str = SERVER) -> None:
        super().__init__(name)
        self.clients, self.cfg, self.C = list(clients), config, n_classes
        self.sa = secagg or sm.SecAggConfig()
        self.p = (n_features + 1) * n_classes
        self.dp = config.dp(len(self.clients))
        if self.dp is not None:
            self.dp.check_ring(self.sa.frac_bits, self.sa.value_bits)
        self.session = ServerSession(name, pins, run_id, self.state.agg, self._aggregated, self.hold)
        self.survivors: list[list[str]] = []
        self.history: list[np.ndarray] = []
        st = self.state
        st.w, st.c, st.active = np.zeros(self.p), np.zeros(self.p), list(self.clients)

    @property
    def scaffold(self) -> bool:
        return self.cfg.algorithm == "scaffold"

    @property
    def length(self) -> int:
        return self.p + 1 + (self.p if self.scaffold else 0)

    def start(self) -> Next:
        return self._broadcast()

    def _broadcast(self) -> Next:
        """Step 1: the global model to every active client; step 2: the aggregation."""
        st, c = self.state, self.cfg
        dp = self.dp
        msg = GlobalModel(st.round, c.algorithm, st.w, st.c, c.local_steps, c.lr, c.mu,
                          *((dp.noise_multiplier, dp.clip, dp.min_clients) if dp else (None, None, None)))
        sends = [send(u, msg) for u in st.active]
        if c.secure:
            nxt = self.session.begin(st.round, st.active, self.length, self.sa)
            return Next((*sends, *nxt.sends), nxt.wait, nxt.result)
        st.k, st.plain_sum, st.plain_from = 0, np.zeros(self.length, ring_dtype(self.sa.ring_bits)), []
        return then(sends, st.active[0], PlainUpdate, "on_update", optional=True)

    def on_update(self, msg: PlainUpdate | None) -> Next:
        """Step 2 (plaintext mode): a client's fixed-point vector, summed on the same ring."""
        st = self.state
        u = st.active[st.k]
        if msg is not None:
            y = np.asarray(msg.y)
            if msg.round != st.round or y.dtype != np.dtype(ring_dtype(self.sa.ring_bits)) or y.shape != (self.length,):
                raise ProtocolError(f"{u} sent a malformed or stale update")
            st.plain_sum = st.plain_sum + y
            st.plain_from.append(u)
        st.k += 1
        if st.k < len(st.active):
            return then([], st.active[st.k], PlainUpdate, "on_update", optional=True)
        if not st.plain_from:
            raise ProtocolError("every client dropped out")
        total = sm.decode_ring(st.plain_sum, self.sa.frac_bits)
        return self._aggregated(AggregateResult(total, list(st.plain_from), list(st.active), list(st.active),
                                                st.plain_sum))

    def _aggregated(self, res: AggregateResult) -> Next:
        """Step 3: the new global model (and c); the next round or the end."""
        st = self.state
        st.w, st.c = server_update(st.w, st.c, res.total, len(self.clients), self.scaffold)
        self.history.append(st.w.copy())
        self.survivors.append(list(res.survivors))
        st.active = list(res.survivors)
        st.round += 1
        progress.report("hfl", st.round, self.cfg.rounds, unit="round")
        if st.round < self.cfg.rounds:
            return self._broadcast()
        st.k, st.correct, st.rows = 0, 0, 0
        return then([send(u, Done(st.w)) for u in st.active], st.active[0], Evaluation, "on_evaluation",
                    optional=True)

    def on_evaluation(self, msg: Evaluation | None) -> Next:
        """Step 4: a client's held-out counts; after the last, the result."""
        st = self.state
        if msg is not None:
            if not 0 <= msg.correct <= msg.rows:
                raise ProtocolError(f"{st.active[st.k]} reported impossible counts")
            st.correct, st.rows = st.correct + msg.correct, st.rows + msg.rows
        st.k += 1
        if st.k < len(st.active):
            return then([], st.active[st.k], Evaluation, "on_evaluation", optional=True)
        acc = st.correct / st.rows if st.rows else None
        privacy = {} if self.dp is None else self.dp.privacy(self.cfg.rounds, [len(s) for s in self.survivors])
        return done(HFLResult(st.w, self.survivors, acc, self.history, privacy))


# --------------------------------------------------------------------------- client


@dataclass
class _ClientState:
    round: int = 0
    c_i: np.ndarray = field(default_factory=lambda: np.zeros(0))
    vector: np.ndarray = field(default_factory=lambda: np.zeros(0))
    model: bytes = b""  # the digest of this round's global model (bound into the aggregation)
    agg: ClientAggState = field(default_factory=ClientAggState)


class ClientRole(Role[_ClientState]):
    """A client: trains locally from each global model; its update reaches the server only inside the sum."""

    role = CLIENT
    State = _ClientState

    def __init__(self, data: ClientData, *, name: str, index: int, n_classes: int, config: HFLConfig,
                 identity: Ed25519PrivateKey, pins: Mapping[str, bytes], run_id: str,
                 secagg: sm.SecAggConfig | None = None, server: str = SERVER,
                 vanish_at: tuple[int, str] | None = None) -> None:
        super().__init__(name)
        self.data, self.index, self.C, self.cfg, self.server = data, index, n_classes, config, server
        self.vanish_at = vanish_at
        if vanish_at is not None and vanish_at[1] not in PHASES:
            raise InputDataError(f"vanish_at phase must be one of {PHASES}")
        self.session = ClientSession(name, server, identity, pins, run_id, secagg or sm.SecAggConfig(),
                                     self.state.agg, self._aggregated, self.hold)
        self.p = (data.X.shape[1] + 1) * n_classes
        self.dp = config.dp(len(pins))  # m defaults to every client pinned in the run
        if self.dp is not None:
            self.dp.check_ring(self.session.config.frac_bits, self.session.config.value_bits)

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        super().load_state(data, allow_insecure=allow_insecure)
        self.session.state = self.state.agg  # the session works on the restored state

    def _gone(self, phase: str) -> bool:
        return self.vanish_at == (self.state.round, phase)

    def _patience(self) -> float:
        return 4.0 + len(self.session.pins)

    def start(self) -> Next:
        return then([], self.server, GlobalModel, "on_model", patience=self._patience())

    def on_model(self, msg: GlobalModel) -> Next:
        """Step 1: K local steps from the global model; step 2: its vector into the aggregation."""
        st, c = self.state, self.cfg
        dp = self.dp
        mine = (dp.noise_multiplier, dp.clip, dp.min_clients) if dp else (None, None, None)
        if (msg.algorithm, msg.local_steps, msg.lr, msg.mu) != (c.algorithm, c.local_steps, c.lr, c.mu) or \
                msg.round != st.round:
            raise ProtocolError(f"{self.name}: the server's round {msg.round} or parameters differ from this "
                                "client's")
        if (msg.dp_noise, msg.dp_clip, msg.dp_min_clients) != mine:
            raise ProtocolError(f"{self.name}: the server announces DP-FedAvg noise {msg.dp_noise}, clip "
                                f"{msg.dp_clip}, m = {msg.dp_min_clients}; this client's are {mine}")
        w, cg = np.asarray(msg.w, np.float64), np.asarray(msg.c, np.float64)
        if w.shape != (self.p,) or cg.shape != (self.p,) or not np.isfinite(w).all() or not np.isfinite(cg).all():
            raise ProtocolError(f"{self.name}: a malformed global model")
        if not len(st.c_i):
            st.c_i = np.zeros(self.p)
        st.model = model_digest(msg)
        w_i, c_new = local_train(w, self.data.X, self.data.y, c, self.C, c=cg, c_i=st.c_i,
                                 seed=c.seed * 100_003 + self.index * 1009 + st.round)
        dc = c_new - st.c_i if c.algorithm == "scaffold" else None
        st.c_i = c_new
        if dp is None:
            st.vector = client_vector(w, w_i, len(self.data.y), dc)
            self.hold("update", st.vector)
        else:  # clipped, weight 1, its noise share added before the encoding (and any mask)
            clean, noise = dp.noised(w, w_i)
            self.hold("update", clean)
            self.hold("dp_noise", noise)
            st.vector = clean + np.concatenate([noise, [0.0]])
        if c.secure:
            return then([], self.server, AggSetup, "on_setup", patience=self._patience())
        if self._gone("masked"):
            return done(None)
        sa = self.session.config
        y = sm.encode_ring(st.vector, sa.frac_bits, sa.value_bits, sa.ring_bits)
        return self._next_round([send(self.server, PlainUpdate(st.round, y))])

    # the secure-aggregation steps (:class:`ClientSession`)
    def on_setup(self, setup: AggSetup) -> Next:
        """Step 2 (secagg steps 0-1)."""
        if setup.round != self.state.round:
            raise ProtocolError(f"{self.name}: an aggregation for round {setup.round} during round {self.state.round}")
        if self._gone("advertise"):
            return done(None)
        return self.session.begin(setup, self.state.vector, context=self.state.model)

    def on_keys(self, msg: Any) -> Next:
        """Step 2 (secagg step 2)."""
        return done(None) if self._gone("shares") else self.session.on_keys(msg)

    def on_forward(self, msg: Any) -> Next:
        """Step 2 (secagg step 3)."""
        return done(None) if self._gone("masked") else self.session.on_forward(msg)

    def on_survivors(self, msg: Any) -> Next:
        """Step 2 (secagg step 4)."""
        return done(None) if self._gone("unmask") else self.session.on_survivors(msg)

    def _aggregated(self) -> Next:
        return self._next_round([])

    def _next_round(self, sends: list[tuple[str, Any]]) -> Next:
        st = self.state
        st.round += 1
        progress.report("hfl", st.round, self.cfg.rounds, unit="round")
        if st.round < self.cfg.rounds:
            return then(sends, self.server, GlobalModel, "on_model", patience=self._patience())
        return then(sends, self.server, Done, "on_done", patience=self._patience())

    def on_done(self, msg: Done) -> Next:
        """Step 4: the final model on this client's held-out rows."""
        w = np.asarray(msg.w, np.float64)
        if w.shape != (self.p,):
            raise ProtocolError(f"{self.name}: a malformed final model")
        correct, rows = accuracy_counts(w, self.data.X_test, self.data.y_test, self.C)
        return done(w, [send(self.server, Evaluation(correct, rows))])


# --------------------------------------------------------------------------- in one process


@dataclass
class HFLRun:
    """The server's result, the transcript and the time of :func:`run_local`."""

    result: HFLResult
    transcript: Transcript
    seconds: float

    @property
    def test_accuracy(self) -> float | None:
        return self.result.test_accuracy


def run_local(clients: Sequence[ClientData], n_classes: int, *, config: HFLConfig | None = None,
              secagg: sm.SecAggConfig | None = None, vanish: Mapping[str, tuple[int, str]] | None = None,
              timeout: float = DEFAULT_TIMEOUT, overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]]
              | None = None, tap: AuditTap | None = None, server: Callable[..., ServerRole] | None = None) -> HFLRun:
    """Train with the server and every client in this process (identities generated and pinned here).

    ``vanish`` maps a client to the (round, phase) at which it drops out (phases of
    :data:`~vflcrypto.protocols.secagg.PHASES`); ``overrides`` replaces a party's task;
    ``tap`` (audits) keeps what each party received and holds; ``server`` builds the
    server's role from :class:`ServerRole`'s arguments (audits and tests: a server that
    deviates, e.g. sends one client another model).
    """
    cfg = config or HFLConfig()
    if not clients or len({c.X.shape[1] for c in clients}) != 1:
        raise InputDataError("every client needs rows with the same columns")
    names = client_names(len(clients))
    ids = {n: Ed25519PrivateKey.generate() for n in names}
    pins = {n: k.public_key().public_bytes_raw() for n, k in ids.items()}
    run_id = secrets.token_hex(8)
    net = LocalNetwork([Endpoint(SERVER, SERVER), *[Endpoint(n, CLIENT) for n in names]],
                       links=[(SERVER, n) for n in names], timeout=timeout, transcript=Transcript(tap), run_id=run_id)

    def client(i: int, n: str) -> Any:
        role = ClientRole(clients[i], name=n, index=i, n_classes=n_classes, config=cfg, identity=ids[n], pins=pins,
                          run_id=run_id, secagg=secagg, vanish_at=(vanish or {}).get(n))
        out = drive(role, net.channels(n))
        if out is None:
            net.close_party(n)  # it vanished
        return out

    make_server = server or ServerRole
    tasks: dict[str, Callable[..., Any]] = {
        SERVER: lambda: drive(make_server(clients=names, n_features=clients[0].X.shape[1], n_classes=n_classes,
                                          config=cfg, pins=pins, run_id=run_id, secagg=secagg),
                              net.channels(SERVER)),
    }
    for i, n in enumerate(names):
        tasks[n] = (lambda i=i, n=n: client(i, n))
    for n, fn in (overrides or {}).items():
        tasks[n] = (lambda fn=fn, n=n: fn(net.channels(n)))
    t0 = time.perf_counter()
    res = run_parties(tasks, network=net)
    return HFLRun(res[SERVER], net.transcript, time.perf_counter() - t0)
