"""The roles of the ``secagg`` protocol (the server sums one vector per client, for some rounds), and ``run_local``.

Steps: the server's ``start`` (round 0) and its session steps ``on_advertise``,
``on_shares``, ``on_masked``, ``on_unmask`` per aggregation round; a client's
``on_setup`` (0, 1) and its session steps ``on_keys``, ``on_forward``, ``on_survivors``
(:mod:`.session`). ``vanish_at`` makes a client drop out at a round (for tests and
demonstrations): it stops before sending that round's message and closes its links.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from vflcrypto.errors import InputDataError, PeerDisconnectedError, PeerTimeoutError, ProtocolError
from vflcrypto.runtime.channel import (
    DEFAULT_TIMEOUT,
    AuditTap,
    Channel,
    Endpoint,
    LocalNetwork,
    Transcript,
    run_parties,
)
from vflcrypto.runtime.steps import Next, Role, done, drive, then

from .math import SecAggConfig
from .messages import CLIENT, SERVER, Forward, Keys, MaskedInput, Setup, Survivors
from .session import AggregateResult, ClientAggState, ClientSession, ServerAggState, ServerSession, ServerSessionSteps

__all__ = ["PHASES", "ClientRole", "SecAggRun", "ServerRole", "client_names", "run_local"]

#: the rounds at which a client can vanish (before sending that round's message)
PHASES = ("advertise", "shares", "masked", "unmask")


def client_names(n: int) -> list[str]:
    return [f"client-{i}" for i in range(n)]


@dataclass
class _ServerState:
    round: int = 0
    agg: ServerAggState = field(default_factory=ServerAggState)


class ServerRole(ServerSessionSteps, Role[_ServerState]):
    """The aggregator: for each of ``rounds`` rounds, the sum of the surviving clients' vectors."""

    role = SERVER
    State = _ServerState
    tolerates_dropouts = True

    def __init__(self, *, clients: Sequence[str], length: int, pins: Mapping[str, bytes], run_id: str,
                 config: SecAggConfig | None = None, rounds: int = 1, name: str = SERVER) -> None:
        super().__init__(name)
        self.clients, self.length, self.rounds = list(clients), length, rounds
        self.cfg = config or SecAggConfig()
        self.cfg.check(len(self.clients))
        self.results: list[AggregateResult] = []
        self.session = ServerSession(name, pins, run_id, self.state.agg, self._finished, self.hold)

    def start(self) -> Next:
        return self.session.begin(self.state.round, self.clients, self.length, self.cfg)

    def _finished(self, result: AggregateResult) -> Next:
        self.results.append(result)
        self.state.round += 1
        if self.state.round < self.rounds:
            return self.start()
        return done(list(self.results))


@dataclass
class _ClientState:
    round: int = 0
    agg: ClientAggState = field(default_factory=ClientAggState)


class ClientRole(Role[_ClientState]):
    """A client: its vector of each round (``inputs``), masked so only the sum reaches the server."""

    role = CLIENT
    State = _ClientState

    def __init__(self, inputs: Sequence[np.ndarray], *, name: str, identity: Ed25519PrivateKey,
                 pins: Mapping[str, bytes], run_id: str, config: SecAggConfig | None = None, server: str = SERVER,
                 vanish_at: tuple[int, str] | None = None) -> None:
        super().__init__(name)
        self.inputs, self.server, self.vanish_at = [np.asarray(x, np.float64) for x in inputs], server, vanish_at
        if vanish_at is not None and vanish_at[1] not in PHASES:
            raise InputDataError(f"vanish_at phase must be one of {PHASES}")
        self.session = ClientSession(name, server, identity, pins, run_id, config or SecAggConfig(), self.state.agg,
                                     self._finished, self.hold)

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        super().load_state(data, allow_insecure=allow_insecure)
        self.session.state = self.state.agg  # the session works on the restored state

    def _vanishes(self, phase: str) -> bool:
        return self.vanish_at == (self.state.round, phase)

    def start(self) -> Next:
        return then([], self.server, Setup, "on_setup")

    def on_setup(self, setup: Setup) -> Next:
        """Step 0 (the setup, checked against this client's parameters); round 1: advertise."""
        if setup.round != self.state.round or setup.round >= len(self.inputs):
            raise ProtocolError(f"{self.name}: a setup for round {setup.round}, expected {self.state.round}")
        if self._vanishes("advertise"):
            return done(None)
        return self.session.begin(setup, self.inputs[setup.round])

    def on_keys(self, msg: Keys) -> Next:
        """Step 2 (:meth:`ClientSession.on_keys`)."""
        return done(None) if self._vanishes("shares") else self.session.on_keys(msg)

    def on_forward(self, msg: Forward) -> Next:
        """Step 3 (:meth:`ClientSession.on_forward`)."""
        return done(None) if self._vanishes("masked") else self.session.on_forward(msg)

    def on_survivors(self, msg: Survivors) -> Next:
        """Step 4 (:meth:`ClientSession.on_survivors`); then the next round's setup, or done."""
        return done(None) if self._vanishes("unmask") else self.session.on_survivors(msg)

    def _finished(self) -> Next:
        self.state.round += 1
        if self.state.round < len(self.inputs):
            return then([], self.server, Setup, "on_setup", patience=float(len(self.session.setup.clients) + 1))
        return done(self.state.round)


@dataclass
class SecAggRun:
    """The sums of every round (:class:`~.session.AggregateResult`), the transcript and the time."""

    rounds: list[AggregateResult]
    transcript: Transcript
    seconds: float
    #: the run's id (every party knows it: the pairwise seeds are bound to it)
    run_id: str = ""

    @property
    def total(self) -> np.ndarray:
        return self.rounds[-1].total


def run_local(inputs: Sequence[Sequence[np.ndarray]] | Sequence[np.ndarray], *, config: SecAggConfig | None = None,
              vanish: Mapping[str, tuple[int, str]] | None = None, timeout: float = DEFAULT_TIMEOUT,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None, late: Mapping[str, int] | None = None) -> SecAggRun:
    """Aggregate in this process: ``inputs[i]`` is client i's vector (or its list of per-round vectors).

    Identities are generated and pinned here. ``vanish`` maps a client to the (round,
    phase) at which it drops out; ``late`` maps a client to the round whose masked input
    reaches the server only after the server stopped waiting for it (:class:`_LateLink`:
    the server reads it, treats the client as dropped and hangs up; tests and audits: the
    case the self-mask exists for); ``overrides`` replaces a party's task (tests); ``tap``
    (audits) keeps what each party received and holds.
    """
    per_client = [[np.asarray(x)] if np.ndim(x) == 1 else [np.asarray(v) for v in x] for x in inputs]
    if not per_client or len({len(r) for r in per_client}) != 1:
        raise InputDataError("every client needs the same number of rounds of input")
    rounds, length = len(per_client[0]), len(per_client[0][0])
    names = client_names(len(per_client))
    cfg = config or SecAggConfig()
    ids = {n: Ed25519PrivateKey.generate() for n in names}
    pins = {n: k.public_key().public_bytes_raw() for n, k in ids.items()}
    run_id = secrets.token_hex(8)
    net = LocalNetwork([Endpoint(SERVER, SERVER), *[Endpoint(n, CLIENT) for n in names]],
                       links=[(SERVER, n) for n in names], timeout=timeout, transcript=Transcript(tap), run_id=run_id)

    def client(i: int, n: str) -> Any:
        role = ClientRole(per_client[i], name=n, identity=ids[n], pins=pins, run_id=run_id, config=cfg,
                          vanish_at=(vanish or {}).get(n))
        try:
            out = drive(role, net.channels(n))
        except PeerDisconnectedError:
            if n not in late_at:
                raise
            out = None  # the server hung up on it after its late masked input
        if out is None:
            net.close_party(n)  # it vanished: its links go down, as a dead process's would
        return out

    late_at = dict(late or {})
    server_links: dict[str, Any] = dict(net.channels(SERVER))
    for n, r in late_at.items():
        server_links[n] = _LateLink(server_links[n], r)
    tasks: dict[str, Callable[..., Any]] = {
        SERVER: lambda: drive(ServerRole(clients=names, length=length, pins=pins, run_id=run_id, config=cfg,
                                         rounds=rounds), server_links),
    }
    for i, n in enumerate(names):
        tasks[n] = (lambda i=i, n=n: client(i, n))
    for n, fn in (overrides or {}).items():
        tasks[n] = (lambda fn=fn, n=n: fn(net.channels(n)))
    t0 = time.perf_counter()
    res = run_parties(tasks, network=net)
    return SecAggRun(res[SERVER], net.transcript, time.perf_counter() - t0, run_id)


class _LateLink:
    """The server's link to a client whose masked input of round ``late`` arrives after the server's wait.

    The server reads the message (an audit's tap records it, as a real server's socket would
    deliver it), but its step sees the timeout it would have seen: it counts the client as
    dropped, and the link is closed (the server gave up on the client), so the survivors
    reveal the client's mask key. Everything else passes through to ``channel``.
    """

    def __init__(self, channel: Channel, late: int) -> None:
        self._channel, self._late = channel, late

    def __getattr__(self, name: str) -> Any:
        return getattr(self._channel, name)

    def recv(self, kind: type, **kwargs: Any) -> Any:
        msg: Any = self._channel.recv(kind, **kwargs)
        if isinstance(msg, MaskedInput) and msg.round == self._late:
            self._channel.close()
            raise PeerTimeoutError(f"{self._channel.peer.name}'s masked input of round {self._late} arrived after "
                                   "the server's wait")
        return msg
