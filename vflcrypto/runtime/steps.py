"""Roles as named steps, so that one implementation runs on every runtime.

A protocol role is a :class:`Role`: its ``start()`` and its *steps* (methods named after
the numbered steps of the protocol's docstring) each return a :class:`Next`: the
messages to send now, in order, and either what the role waits for next (a
:class:`Recv`: a message kind from a peer, and the name of the step that handles it) or,
when it is done, its result. A step is a function of (role state, received message) →
(new state, messages to send): the state is the role's :attr:`Role.state`, a dataclass of
wire-encodable fields, so a runtime that keeps no process alive between messages (a
Flower ClientApp) can store it with :meth:`Role.dump_state` and restore it with
:meth:`Role.load_state`. The role's *inputs* (its own data and keys, never sent) are
given to its constructor and are not part of the state.

Drivers run roles without knowing any protocol:

* :func:`drive` runs one role over :class:`~vflcrypto.runtime.channel.Channel` objects (threads,
  processes or gRPC links: the transport is the channel's business); the name of the
  step that sent or will handle each message is recorded in the transcript;
* the Flower app (``flower/vflcrypto_flower``) runs the same roles from ServerApp and
  ClientApp handlers.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from ..errors import PeerDisconnectedError, PeerTimeoutError, ProtocolError
from . import codecs  # noqa: F401  (role states may hold keys and ciphertexts)
from .wire import DecodeContext, KeyRing, decode_value, encode_value, message_kind

__all__ = ["Next", "Recv", "Role", "done", "drive", "fields_of", "prefixed", "send", "state_field", "then"]

S = TypeVar("S")


@dataclass(frozen=True)
class Recv:
    """Wait for one ``kind`` message from party ``peer``; the role's method ``step`` handles it.

    ``patience`` multiplies the channel's timeout (a party that waits while its peer itself
    waits on a slower third party uses 2, so the stall is reported by the party that
    waits on the staller). ``optional``: the peer may drop out (secure aggregation): if
    it has disconnected or stays silent past the timeout, the step is called with
    ``None`` instead of the run failing.
    """

    peer: str
    kind: type
    step: str
    patience: float = 1.0
    optional: bool = False


@dataclass(frozen=True)
class Next:
    """What a step returns: ``sends`` (peer, message) in order, then ``wait`` or, if none, ``result``."""

    sends: Iterable[tuple[str, Any]] = ()  # may be a generator (a step streaming its sends): iterate once
    wait: Recv | None = None
    result: Any = None

    @property
    def done(self) -> bool:
        return self.wait is None


def prefixed(sends: Iterable[tuple[str, Any]], nxt: Next) -> Next:
    """``nxt`` with ``sends`` sent first; a generator of sends stays lazy (:func:`drive` drains it in order, so a
    step can stream its sends: each is produced only when the one before has been handed to the channel)."""
    return Next(itertools.chain(sends, nxt.sends), nxt.wait, nxt.result)


def send(peer: str, msg: Any) -> tuple[str, Any]:
    """One outgoing message (for readability in steps)."""
    return (peer, msg)


def then(sends: Sequence[tuple[str, Any]], peer: str, kind: type, step: str, *, patience: float = 1.0,
         optional: bool = False) -> Next:
    """Send ``sends``, then wait for ``kind`` from ``peer``, handled by ``step`` (``optional``: see :class:`Recv`)."""
    return Next(tuple(sends), Recv(peer, kind, step, patience, optional))


def done(result: Any, sends: Sequence[tuple[str, Any]] = ()) -> Next:
    """Send ``sends`` and finish with ``result``."""
    return Next(tuple(sends), None, result)


class Role(Generic[S]):
    """One party's part of a protocol: named steps over a serializable state.

    Subclasses set :attr:`role` (the role name of the declarations: "active",
    "passive", ...), implement :meth:`start` and one method per step, and keep everything
    that must survive between messages in ``self.state`` (an instance of the dataclass
    :attr:`State`; every field must be encodable by :mod:`vflcrypto.runtime.wire`).
    """

    role: ClassVar[str]
    State: ClassVar[type]
    #: a send to a peer that has disconnected is skipped instead of failing the run (roles that
    #: tolerate dropouts: the next optional wait on that peer sees it gone)
    tolerates_dropouts: ClassVar[bool] = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.state: S = self.State()
        self._holder: Callable[[str, Any], None] | None = None

    def start(self) -> Next:
        raise NotImplementedError

    def accepted_keys(self) -> list[Any]:
        """Keys under which this role accepts ciphertexts on receipt (from its state)."""
        return []

    def hold(self, label: str, value: Any) -> None:
        """Record, for an audit run only, a secret or value this party holds (no-op otherwise).

        Attacks in the audit use what the *receiving* role holds (its key, its PSI scalar)
        on what it received; what a sender holds is ground truth for scoring them.
        """
        if self._holder is not None:
            self._holder(label, value)

    def step(self, wait: Recv, msg: Any) -> Next:
        """Run the step ``wait`` names on ``msg`` (which the driver received as ``wait`` asked)."""
        fn = getattr(self, wait.step, None)
        if fn is None or wait.step.startswith("_"):
            raise ProtocolError(f"{type(self).__name__} has no step {wait.step!r}")
        return fn(msg)

    # ----------------------------------------------------------------- persistence
    def keyring(self) -> KeyRing:
        """A key ring of :meth:`accepted_keys` (for decoding frames and the state)."""
        ring = KeyRing()
        for key in self.accepted_keys():
            ring.add(key)
        return ring

    def dump_state(self) -> bytes:
        """The state as wire bytes (for runtimes that keep no process alive between messages)."""
        return encode_value(self.state)

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        """Restore :meth:`dump_state` bytes (validated against the state's annotations)."""
        self.state = decode_value(data, self.State, DecodeContext(self.keyring(), allow_insecure))


def state_field(default: Any = None, *, factory: Callable[[], Any] | None = None) -> Any:
    """A state dataclass field (a default or a default factory), for terse State classes."""
    if factory is not None:
        return field(default_factory=factory)
    return field(default=default)


def drive(role: Role[Any], channels: Mapping[str, Any], *, timeout: float | None = None) -> Any:
    """Run ``role`` to completion over its ``channels`` (peer name → Channel); return its result.

    Each message is sent and received under the name of the step that produced or will
    handle it, which the channels record in the transcript. ``timeout`` (default: each
    channel's own) is multiplied by a wait's ``patience``.
    """
    if channels:
        role._holder = next(iter(channels.values())).hold  # records for this party (audit runs only)
    step_name = "start"
    nxt = role.start()
    while True:
        for peer, msg in nxt.sends:
            if peer not in channels:
                raise ProtocolError(f"{role.name}: step {step_name} sends {message_kind(msg)} to {peer}, "
                                    "which it has no channel to")
            try:
                channels[peer].send(msg, step=step_name)
            except PeerDisconnectedError:
                if not role.tolerates_dropouts:
                    raise
        if nxt.wait is None:
            return nxt.result
        wait = nxt.wait
        ch = channels.get(wait.peer)
        if ch is None:
            raise ProtocolError(f"{role.name}: no channel to {wait.peer}, which step {wait.step} waits on")
        for key in role.accepted_keys():
            ch.keyring.add(key)
        base = ch.timeout if timeout is None else timeout
        try:
            msg = ch.recv(wait.kind, timeout=base * wait.patience, step=wait.step)
        except (PeerDisconnectedError, PeerTimeoutError):
            if not wait.optional:
                raise
            msg = None  # the peer dropped out: the step decides what that means
        step_name = wait.step
        nxt = role.step(wait, msg)


def fields_of(state: Any) -> dict[str, Any]:
    """The state's fields as a dict (for tests and debugging)."""
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
