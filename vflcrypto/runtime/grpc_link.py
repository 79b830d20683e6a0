"""One gRPC bidirectional stream with mutual TLS between two parties, as a Channel transport.

See :mod:`vflcrypto.runtime.network` for the authentication, the framing and the run
agreement built on top. A :class:`GrpcTransport` moves opaque frames over one link and
plugs into :class:`vflcrypto.runtime.channel.Channel` like the in-process transport does.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc

from ..errors import (
    DecodeError,
    PeerDisconnectedError,
    PeerTimeoutError,
    ProtocolError,
    VflError,
)
from .channel import Transport
from .partyconfig import NetworkSettings

__all__ = ["ACCEPT", "GrpcTransport", "grpc_options"]

_MORE, _LAST, _BYE, _ACK, ACCEPT = b"\x00", b"\x01", b"\x02", b"\x03", b"\x04"
_END = object()  # outbox sentinel: finish the outgoing stream
_CLOSED = object()  # inbox sentinel: the peer closed cleanly
_BROKEN = object()  # inbox sentinel: the link failed


# --------------------------------------------------------------------------- transport


def grpc_options(settings: NetworkSettings, *, server: bool) -> list[tuple[str, Any]]:
    limit = settings.chunk_bytes + 64
    ka_ms = int(settings.keepalive * 1000)
    opts: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", limit),
        ("grpc.max_receive_message_length", limit),
        ("grpc.keepalive_time_ms", ka_ms),
        ("grpc.keepalive_timeout_ms", max(1000, ka_ms // 2)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    if server:
        opts += [
            ("grpc.so_reuseport", 0),  # two parties must never share a port silently
            ("grpc.http2.min_recv_ping_interval_without_data_ms", max(1000, ka_ms // 2)),
            ("grpc.http2.max_ping_strikes", 0),
        ]
    else:
        opts += [
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            ("grpc.enable_retries", 0),
        ]
    return opts


class GrpcTransport(Transport):
    """One end of one link: frames in and out of a gRPC bidirectional stream.

    ``send_frame`` splits a frame into chunks on a bounded outbox (so a peer that stops
    reading makes the sender time out instead of buffering without bound);
    ``recv_frame(timeout)`` returns the next reassembled frame, raising
    :class:`PeerTimeoutError` after ``timeout`` seconds and
    :class:`PeerDisconnectedError` once the peer closed or the link failed; ``close``
    says goodbye and waits (at most ``settings.linger`` s) until the peer has every frame.
    """

    def __init__(self, local: str, peer: str, address: str, settings: NetworkSettings) -> None:
        self.local = local
        self.peer = peer
        self.address = address
        self.settings = settings
        self._outbox: queue.Queue[Any] = queue.Queue(maxsize=16)
        self._inbox: queue.Queue[Any] = queue.Queue()
        self._closing = threading.Event()
        self._done = threading.Event()  # peer acknowledged our BYE, or the stream ended
        self._broken = threading.Event()
        self._peer_closed = False
        self._error: VflError | None = None
        self._cancel: Any = None  # callable that tears the stream down
        self._reader: threading.Thread | None = None
        self.bytes_out = 0
        self.bytes_in = 0

    def __repr__(self) -> str:
        return f"GrpcTransport({self.local} <-> {self.peer} @ {self.address})"

    # ---- stream plumbing (driven by vflcrypto.runtime.network.PartyNetwork, which opens the RPC)

    def outgoing(self, first: bytes | None = None, go: threading.Event | None = None,
                  dead: threading.Event | None = None) -> Iterator[bytes]:
        """The gRPC message iterator of this side: chunks from the outbox."""
        if go is not None:
            while not go.wait(0.05):
                if dead is not None and dead.is_set():
                    return
        if first is not None:
            yield first
        while True:
            try:
                item = self._outbox.get(timeout=0.2)
            except queue.Empty:
                if self._broken.is_set():
                    return
                continue
            if item is _END:
                return
            yield item

    def start_reader(self, incoming: Iterator[bytes], cancel: Any) -> None:
        """Read the peer's chunks from ``incoming`` on a thread; ``cancel`` tears the RPC down."""
        self._cancel = cancel
        self._reader = threading.Thread(target=self._read, args=(incoming,),
                                        name=f"grpc-read-{self.local}-{self.peer}", daemon=True)
        self._reader.start()

    def _fail(self, error: VflError) -> None:
        if self._error is None and not self._peer_closed:
            self._error = error
        self._broken.set()
        self._done.set()
        self._inbox.put(_BROKEN)

    def _read(self, incoming: Iterator[bytes]) -> None:
        # Chunks are kept as views of the received gRPC messages (no copy when the type
        # byte is cut off); a frame is materialized once: one join, or one slice copy for
        # a single-chunk frame.
        parts: list[memoryview] = []
        size = 0
        limit = self.settings.max_frame_bytes
        try:
            for msg in incoming:
                kind = msg[:1]
                if kind in (_MORE, _LAST):
                    size += len(msg) - 1
                    self.bytes_in += len(msg)
                    if size > limit:
                        self._fail(DecodeError(
                            f"{self.peer} sent a frame above the limit of {limit} bytes"))
                        self._cancel_stream()
                        return
                    if kind == _LAST and not parts:
                        self._inbox.put(msg[1:])
                        size = 0
                        continue
                    parts.append(memoryview(msg)[1:])
                    if kind == _LAST:
                        self._inbox.put(b"".join(parts))
                        parts, size = [], 0
                elif kind == _BYE:
                    self._peer_closed = True
                    self._inbox.put(_CLOSED)
                    if not self._closing.is_set() or not self._done.is_set():
                        try:
                            self._outbox.put(_ACK, timeout=1.0)
                        except queue.Full:
                            pass
                elif kind == _ACK:
                    self._done.set()
                elif kind == ACCEPT:
                    continue
                else:
                    self._fail(ProtocolError(f"{self.peer} sent an unknown chunk type"))
                    self._cancel_stream()
                    return
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                self._fail(PeerTimeoutError(f"link to {self.peer} ({self.address}) hit the run deadline"))
            else:
                details = exc.details() if hasattr(exc, "details") else str(exc)
                self._fail(PeerDisconnectedError(
                    f"link to {self.peer} ({self.address}) failed: {details}"))
            return
        except Exception as exc:  # a cancelled server-side iterator raises various errors
            self._fail(PeerDisconnectedError(f"link to {self.peer} ({self.address}) failed: {exc}"))
            return
        self._fail(PeerDisconnectedError(f"{self.peer} ({self.address}) ended the link"))

    def wait_flushed(self, timeout: float) -> bool:
        """Wait until the peer acknowledged our BYE or the stream ended (the last chunks flushed)."""
        return self._done.wait(timeout)

    def abort(self) -> None:
        """Tear the link down at once (after an error elsewhere): the peer fails immediately."""
        self._closing.set()
        self._cancel_stream()

    def join_reader(self, timeout: float) -> None:
        """Wait for the reader thread to leave gRPC's iterator (cancelling the stream if it lingers).

        A daemon thread still inside a gRPC call when the interpreter exits can be frozen holding
        the call's lock; the exit's garbage collection then runs the call's ``__del__``, which waits
        for that lock forever (seen: a party process that wrote its output and never exited).
        """
        reader = self._reader
        if reader is None or reader is threading.current_thread():
            return
        reader.join(timeout / 2)
        if reader.is_alive():
            self._cancel_stream()
            reader.join(timeout / 2)

    def _cancel_stream(self) -> None:
        if self._cancel is not None:
            try:
                self._cancel()
            except Exception:  # noqa: S110 - best effort teardown
                pass

    def _put(self, item: bytes, deadline: float) -> None:
        while True:
            if self._broken.is_set() or self._peer_closed:
                raise self._disconnected()
            try:
                self._outbox.put(item, timeout=0.2)
                return
            except queue.Full:
                if time.monotonic() > deadline:
                    raise PeerTimeoutError(
                        f"{self.peer} ({self.address}) did not take data within "
                        f"{self.settings.timeout:g} s (stalled)") from None

    def _disconnected(self) -> PeerDisconnectedError:
        if isinstance(self._error, PeerDisconnectedError):
            return self._error
        if self._error is not None:
            return PeerDisconnectedError(str(self._error))
        return PeerDisconnectedError(f"{self.peer} ({self.address}) closed the link")

    # ---- Transport interface

    def failure(self) -> Exception | None:
        if self._peer_closed or self._broken.is_set():
            return self._disconnected()
        return None

    def send_frame(self, frame: bytes) -> None:
        if self._closing.is_set():
            raise PeerDisconnectedError(f"link to {self.peer} is closed")
        n = len(frame)
        if n > self.settings.max_frame_bytes:
            raise ProtocolError(f"frame of {n} bytes exceeds the link limit of "
                                f"{self.settings.max_frame_bytes}")
        step = self.settings.chunk_bytes
        view = memoryview(frame)
        deadline = time.monotonic() + self.settings.timeout
        off = 0
        while True:
            end = off + step
            last = end >= n
            self._put(b"".join((_LAST if last else _MORE, view[off:end])), deadline)
            if last:
                break
            off = end
        self.bytes_out += n

    def recv_frame(self, timeout: float | None) -> bytes:
        if self._peer_closed and self._inbox.empty():
            raise self._disconnected()
        try:
            item = self._inbox.get(timeout=timeout)
        except queue.Empty:
            raise PeerTimeoutError(
                f"no frame from {self.peer} ({self.address}) within {timeout} s") from None
        if item is _CLOSED or item is _BROKEN:
            self._inbox.put(item)  # later receives fail the same way
            if item is _BROKEN and self._error is not None \
                    and not isinstance(self._error, PeerDisconnectedError | PeerTimeoutError):
                raise self._error
            raise self._disconnected()
        return item

    def close(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        if not self._broken.is_set():
            try:
                self._outbox.put(_BYE, timeout=self.settings.linger)
                self._done.wait(self.settings.linger)
            except queue.Full:
                pass
        try:
            self._outbox.put(_END, timeout=1.0)
        except queue.Full:
            self._cancel_stream()
