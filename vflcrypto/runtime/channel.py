"""Parties, Channels, transports, timeouts and the transcript.

A :class:`Channel` links two named parties (each an :class:`Endpoint` with a role). It
frames messages with :mod:`vflcrypto.runtime.wire`, refuses kinds without a leakage declaration
(and kinds whose declared sender/receiver roles do not match the two ends), numbers the
frames so a replayed, dropped or reordered frame is rejected, enforces a timeout on every
receive (a stalled or vanished peer raises, it never hangs), and appends every send and
receive to a shared :class:`Transcript` that the audit and benchmarks read.

The transcript (:mod:`vflcrypto.runtime.transcript`) keeps sizes and kinds only; for an audit run
it carries an :class:`~vflcrypto.runtime.transcript.AuditTap` that also keeps the decoded messages
each party received and what it holds (:meth:`Channel.hold`).

Transports move opaque frames. :class:`QueueTransport` is the in-process one (each party
in its own thread; see :class:`LocalNetwork` and :func:`run_parties`); a network
transport implements the same three methods.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from ..errors import PeerDisconnectedError, PeerTimeoutError, ProtocolError, UndeclaredMessageError
from . import progress
from .declarations import declaration_for
from .transcript import AuditTap, Endpoint, Received, Transcript, TranscriptEntry
from .wire import DEFAULT_MAX_FRAME_BYTES, DecodeContext, KeyRing, decode_frame, encode_frame, message_kind

__all__ = [
    "DEFAULT_TIMEOUT",
    "AuditTap",
    "Channel",
    "Endpoint",
    "LocalNetwork",
    "QueueTransport",
    "Received",
    "Transcript",
    "TranscriptEntry",
    "Transport",
    "run_parties",
]

DEFAULT_TIMEOUT = 120.0  # seconds a receive waits before the peer counts as stalled

M = TypeVar("M")
T = TypeVar("T")


# --------------------------------------------------------------------------- transports


class Transport(ABC):
    """Moves opaque frames between two parties."""

    @abstractmethod
    def send_frame(self, frame: bytes) -> None:
        """Deliver one frame; raise :class:`PeerDisconnectedError` if the link is gone."""

    @abstractmethod
    def recv_frame(self, timeout: float | None) -> bytes:
        """Next frame; :class:`PeerTimeoutError` after ``timeout`` s, :class:`PeerDisconnectedError` on close."""

    @abstractmethod
    def close(self) -> None:
        """Close the link; the peer's pending and future receives fail promptly."""

    def failure(self) -> Exception | None:
        """The error the next send or receive would raise because the link is gone (the peer closed it or
        vanished), without waiting for a frame; ``None`` while the link stands or if this transport cannot tell.
        A party that idles between messages (a prediction service) polls it to notice a vanished peer."""
        return None


_CLOSED = object()


class QueueTransport(Transport):
    """In-process transport over two queues; build pairs with :meth:`pair`."""

    def __init__(self, inbox: queue.Queue[Any], outbox: queue.Queue[Any]) -> None:
        self._inbox = inbox
        self._outbox = outbox
        self._closed = threading.Event()
        self._peer_closed = False

    @classmethod
    def pair(cls) -> tuple[QueueTransport, QueueTransport]:
        a_to_b: queue.Queue[Any] = queue.Queue()
        b_to_a: queue.Queue[Any] = queue.Queue()
        return cls(b_to_a, a_to_b), cls(a_to_b, b_to_a)

    def send_frame(self, frame: bytes) -> None:
        if self._closed.is_set():
            raise PeerDisconnectedError("channel is closed")
        if self._peer_closed:
            raise PeerDisconnectedError("peer closed the channel")
        self._outbox.put(bytes(frame))

    def recv_frame(self, timeout: float | None) -> bytes:
        if self._peer_closed:
            raise PeerDisconnectedError("peer closed the channel")
        try:
            item = self._inbox.get(timeout=timeout)
        except queue.Empty:
            raise PeerTimeoutError(f"no frame within {timeout} s") from None
        if item is _CLOSED:
            self._peer_closed = True
            raise PeerDisconnectedError("peer closed the channel")
        return item

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._outbox.put(_CLOSED)


# --------------------------------------------------------------------------- channel


class Channel:
    """A typed, counted, declared, time-limited link from ``local`` to ``peer``."""

    def __init__(
        self,
        local: Endpoint,
        peer: Endpoint,
        transport: Transport,
        *,
        transcript: Transcript | None = None,
        keyring: KeyRing | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        run_id: str = "",
        mac_key: bytes | None = None,
        allow_insecure: bool = False,
    ) -> None:
        self.local = local
        self.peer = peer
        self.transport = transport
        self.transcript = transcript if transcript is not None else Transcript()
        self.keyring = keyring if keyring is not None else KeyRing()
        self.timeout = timeout
        self.max_frame_bytes = max_frame_bytes
        self.run_id = run_id
        self._mac_key = mac_key
        self._ctx = DecodeContext(self.keyring, allow_insecure)
        self._send_seq = 0
        self._recv_seq = 0
        self._send_lock = threading.Lock()
        self.bytes_sent = 0
        self.bytes_received = 0

    def __repr__(self) -> str:
        return f"Channel({self.local.name} -> {self.peer.name})"

    def _check_declared(self, kind: str, sender: Endpoint, receiver: Endpoint) -> None:
        decl = declaration_for(kind)
        if not decl.allows(sender.role, receiver.role):
            raise UndeclaredMessageError(
                f"{kind} is declared {'/'.join(decl.sender)} -> {'/'.join(decl.receiver)}, "
                f"not {sender.role} -> {receiver.role}"
            )

    def send(self, msg: Any, *, step: str = "") -> int:
        """Send one declared message; return the frame's size in bytes.

        ``step`` names the protocol step that sends it (recorded in the transcript).
        """
        kind = message_kind(msg)
        self._check_declared(kind, self.local, self.peer)
        with self._send_lock:
            frame = encode_frame(msg, seq=self._send_seq, run_id=self.run_id, mac_key=self._mac_key)
            if len(frame) > self.max_frame_bytes:
                raise ProtocolError(f"{kind} frame of {len(frame)} bytes exceeds the channel limit")
            self.transport.send_frame(frame)
            entry = self.transcript.record("send", self._send_seq, self.local, self.peer, kind, len(frame), step)
            if self.transcript.tap is not None and self.transcript.tap.keep_sent:
                self.transcript.tap.record(entry, msg)
            self._send_seq += 1
            self.bytes_sent += len(frame)
        return len(frame)

    def recv(self, kind: type[M], *, timeout: float | None = None, step: str = "") -> M:
        """Receive the next message, which must be of type ``kind`` (handled by protocol ``step``).

        Raises :class:`PeerTimeoutError` if nothing arrives within ``timeout`` (default:
        the channel's), :class:`ProtocolError` for a different kind, a wrong run id or an
        out-of-order frame, :class:`~vflcrypto.errors.DecodeError` for a malformed one.
        """
        wait = self.timeout if timeout is None else timeout
        expected = message_kind(kind)
        try:
            data = self.transport.recv_frame(wait)
        except PeerTimeoutError:
            raise PeerTimeoutError(
                f"{self.local.name}: no {expected} from {self.peer.name} within {wait:g} s"
            ) from None
        except PeerDisconnectedError:
            raise PeerDisconnectedError(
                f"{self.local.name}: {self.peer.name} disconnected while {expected} was expected"
            ) from None
        frame = decode_frame(data, ctx=self._ctx, mac_key=self._mac_key, max_bytes=self.max_frame_bytes)
        if frame.run_id != self.run_id:
            raise ProtocolError(f"frame from {self.peer.name} belongs to another run")
        if frame.seq != self._recv_seq:
            raise ProtocolError(
                f"frame {frame.seq} from {self.peer.name} out of order (expected {self._recv_seq}): "
                "replayed, dropped or reordered"
            )
        self._check_declared(frame.kind, self.peer, self.local)
        if frame.kind != expected:
            raise ProtocolError(f"{self.local.name} expected {expected} from {self.peer.name}, got {frame.kind}")
        self._recv_seq += 1
        self.bytes_received += len(data)
        entry = self.transcript.record("recv", frame.seq, self.peer, self.local, frame.kind, len(data), step)
        if self.transcript.tap is not None:
            self.transcript.tap.record(entry, frame.message)
        return frame.message

    def hold(self, label: str, value: Any) -> None:
        """Record, for an audit run only, a secret or value this party holds (no-op otherwise).

        Attacks in the audit use what the *receiving* role holds (its key, its PSI scalar)
        on what it received; what a sender holds is ground truth for scoring them.
        """
        if self.transcript.tap is not None:
            self.transcript.tap.hold(self.local.name, label, value)

    def link_failure(self) -> Exception | None:
        """The error a message on this channel would now fail with because its link is gone, else ``None``
        (:meth:`Transport.failure`)."""
        return self.transport.failure()

    def close(self) -> None:
        self.transport.close()


# --------------------------------------------------------------------------- local runs


class LocalNetwork:
    """In-process channels between parties that share one transcript.

    ``links`` lists the pairs of party names that talk (default: every pair). Each party
    has its own :class:`KeyRing`, shared by all of its channels.
    """

    def __init__(
        self,
        parties: Iterable[Endpoint],
        *,
        links: Iterable[tuple[str, str]] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transcript: Transcript | None = None,
        run_id: str = "",
        allow_insecure: bool = False,
    ) -> None:
        self.parties = {p.name: p for p in parties}
        self.transcript = transcript if transcript is not None else Transcript()
        self.keyrings = {name: KeyRing() for name in self.parties}
        self._channels: dict[str, dict[str, Channel]] = {name: {} for name in self.parties}
        names = list(self.parties)
        pairs = links if links is not None else [
            (a, b) for i, a in enumerate(names) for b in names[i + 1:]
        ]
        for a, b in pairs:
            ta, tb = QueueTransport.pair()
            ea, eb = self.parties[a], self.parties[b]
            self._channels[a][b] = Channel(ea, eb, ta, keyring=self.keyrings[a], transcript=self.transcript,
                                           timeout=timeout, run_id=run_id, allow_insecure=allow_insecure)
            self._channels[b][a] = Channel(eb, ea, tb, keyring=self.keyrings[b], transcript=self.transcript,
                                           timeout=timeout, run_id=run_id, allow_insecure=allow_insecure)

    def channels(self, name: str) -> dict[str, Channel]:
        """The channels of party ``name``, keyed by peer name."""
        return self._channels[name]

    def close_party(self, name: str) -> None:
        """Close all channels of ``name`` so its peers fail fast instead of timing out."""
        for ch in self._channels[name].values():
            ch.close()


def run_parties(
    tasks: Mapping[str, Callable[[], T]],
    *,
    network: LocalNetwork | None = None,
    timeout: float | None = None,
) -> dict[str, T]:
    """Run one callable per party, each in its own thread, and return their results.

    If a party raises, its channels are closed (peers get :class:`PeerDisconnectedError`
    at once rather than waiting for their timeout) and the first root-cause exception is
    re-raised after all threads stop. ``timeout`` bounds the whole run. Each thread runs in a
    copy of the caller's context, so the parties report to the caller's progress reporter
    (:mod:`vflcrypto.runtime.progress`); the counters the run opened end with it.
    """
    results: dict[str, T] = {}
    errors: list[tuple[float, str, BaseException]] = []
    lock = threading.Lock()

    def runner(name: str, fn: Callable[[], T]) -> None:
        try:
            value = fn()
            with lock:
                results[name] = value
        except BaseException as exc:
            with lock:
                errors.append((time.monotonic(), name, exc))
            if network is not None and name in network.parties:
                network.close_party(name)

    # each thread in its own copy of the caller's context: the parties report to the caller's progress reporter
    threads = [
        threading.Thread(target=contextvars.copy_context().run, args=(runner, name, fn), name=f"party-{name}",
                         daemon=True)
        for name, fn in tasks.items()
    ]
    with progress.section():  # the counters this run opens end with it
        for t in threads:
            t.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        if network is not None:
            for name in network.parties:
                network.close_party(name)
        raise PeerTimeoutError(f"local run did not finish within {timeout} s")
    if errors:
        errors.sort(key=lambda e: e[0])
        root = next((e for e in errors if not isinstance(e[2], PeerDisconnectedError)), errors[0])
        raise root[2]
    return results
