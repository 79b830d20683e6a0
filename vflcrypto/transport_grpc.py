"""Network transport: gRPC bidirectional streams with mutual TLS and pinned certificates.

Parties run as separate processes (and machines). For every pair of parties that talk
there is one *link*: one gRPC bidirectional stream over HTTP/2 + TLS 1.3, opened by the
dialing side to the listening side (by default the lexicographically smaller name
listens; see :mod:`vflcrypto.partyconfig`). A :class:`GrpcTransport` moves opaque frames
over one link and plugs into :class:`vflcrypto.runtime.Channel` like the in-process
transport does. No ``.proto`` code generation: the stream carries raw bytes.

Authentication (both directions, and both on top of a CA that signs only the project's
parties):

* TLS with ``require_client_auth``: each side presents its party certificate; the
  client checks the server's certificate for ``DNS:<expected party name>`` (target-name
  override) so addresses can change without re-issuing certificates.
* Pinning, listening side: the SHA-256 fingerprint of the client's TLS certificate (from
  the call's auth context) must be the one the configuration pins for some party that
  dials this party; anything else is aborted with ``PERMISSION_DENIED``.
* Pinning, dialing side: gRPC Python does not expose the server certificate to the
  client, so the listening side proves possession of its pinned key in the
  ``net.hello`` message: it signs (server name, client name as authenticated by TLS,
  both nonces, configuration digest, task) with its certificate's key; the client checks
  the certificate against the pin and the signature. A different CA-issued certificate,
  or a relaying party, fails this check.

Framing on the stream: each gRPC message is one *chunk*: a type byte then data. A frame
larger than ``chunk_bytes`` is split into ``MORE`` chunks and a ``LAST`` chunk and
reassembled on receipt, with the total bounded by ``max_frame_bytes``; the gRPC message
size limit is the chunk size, so no single allocation exceeds it before the bound is
checked. ``BYE``/``ACK`` close a link cleanly (a closing side waits until its peer has
received every frame); ``ACCEPT`` tells a dialing side the listener took the stream.
HTTP/2 keepalive pings detect a silent peer machine; a killed peer process is detected
when its TCP connection resets. The stream deadline bounds a whole run.

Channel MAC keys: gRPC Python offers no TLS exporter (RFC 5705), so links cannot derive a
per-link key from the TLS session; the Channel's ``mac_key`` stays ``None`` and integrity
and authenticity of frames rest on TLS (the wire tag still detects corruption, sequence
numbers and the run id still reject replay and reordering).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import queue
import secrets
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import grpc
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from .certs import cert_fingerprint
from .errors import (
    DecodeError,
    InputDataError,
    PeerDisconnectedError,
    PeerTimeoutError,
    ProtocolError,
    VflError,
)
from .leakage import Protection, declare
from .partyconfig import Link, NetworkSettings, PartyConfig
from .runtime import Channel, Endpoint, Transcript, Transport
from .wire import KeyRing, encode_value

__all__ = [
    "HELLO_ROLE",
    "ConnectedParty",
    "GrpcTransport",
    "Hello",
    "NonceSet",
    "PartyIdentity",
    "PartyNetwork",
    "agree_run",
    "audit_run",
    "connect_party",
]

METHOD = "/vflcrypto.net.Link/Frames"
HELLO_ROLE = "party"  # the role both ends take in the handshake (any protocol role may run it)
HELLO_RUN_ID = "net-hello"
_SIGN_CONTEXT = b"vflcrypto-net-hello-v1"

_MORE, _LAST, _BYE, _ACK, _ACCEPT = b"\x00", b"\x01", b"\x02", b"\x03", b"\x04"
_END = object()  # outbox sentinel: finish the outgoing stream
_CLOSED = object()  # inbox sentinel: the peer closed cleanly
_BROKEN = object()  # inbox sentinel: the link failed


# --------------------------------------------------------------------------- messages


@declare(
    "net.hello",
    sender=HELLO_ROLE, receiver=HELLO_ROLE, protection=Protection.PUBLIC,
    reveals="the sender's party name, a fresh 32-byte random nonce, the configuration digest, "
            "the task name and (from the listening side) its certificate and a signature "
            "binding them to this link",
)
@dataclass(frozen=True)
class Hello:
    """First message on a link in each direction; the run id derives from the nonces."""

    party: str
    nonce: bytes
    config_digest: str
    task: str
    certificate: bytes  # DER; empty from the dialing side (TLS pinned it already)
    signature: bytes  # ECDSA-P256-SHA256 by the listening side; empty from the dialing side


@declare(
    "net.nonces",
    sender=HELLO_ROLE, receiver=HELLO_ROLE, protection=Protection.PUBLIC,
    reveals="the hello nonces of the parties the sender knows of (only sent when not every "
            "pair of parties is linked, so that all parties derive the same run id)",
)
@dataclass(frozen=True)
class NonceSet:
    """Gossip of hello nonces over a partial mesh."""

    nonces: dict[str, bytes]


# --------------------------------------------------------------------------- identity


@dataclass(frozen=True)
class PartyIdentity:
    """This party's TLS credentials (PEM) and the CA certificate it trusts."""

    name: str
    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes

    @classmethod
    def from_files(cls, name: str, cert: Any, key: Any, ca: Any) -> PartyIdentity:
        out = []
        for label, p in (("certificate", cert), ("key", key), ("CA certificate", ca)):
            if p is None:
                raise InputDataError(f"{name}: no {label} path configured")
            try:
                out.append(Path(p).read_bytes())
            except OSError as exc:
                raise InputDataError(f"cannot read {label} {p}: {exc.strerror}") from None
        ident = cls(name, out[0], out[1], out[2])
        ident.check_key_matches(f"the key {key}", f"the certificate {cert}")
        return ident

    def check_key_matches(self, key_what: str = "its key", cert_what: str = "its certificate") -> None:
        """This party's own misconfiguration, named before any peer is contacted: a key of another certificate."""
        try:
            key = serialization.load_pem_private_key(self.key_pem, password=None)
            cert = x509.load_pem_x509_certificate(self.cert_pem)
        except (ValueError, TypeError) as exc:
            raise InputDataError(f"{self.name}: cannot parse {key_what} or {cert_what}: {exc}") from None
        spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
            raise InputDataError(f"{self.name}: {key_what} does not belong to {cert_what}: this party's own "
                                 "configuration pairs a certificate with another party's key")

    @property
    def fingerprint(self) -> str:
        return cert_fingerprint(self.cert_pem)

    def sign(self, data: bytes) -> bytes:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise InputDataError(f"{self.name}: the party key must be an ECDSA key")
        return key.sign(data, ec.ECDSA(hashes.SHA256()))

    @property
    def cert_der(self) -> bytes:
        return x509.load_pem_x509_certificate(self.cert_pem).public_bytes(serialization.Encoding.DER)


def diagnose_tls(identity: PartyIdentity, peer: str, address: str, timeout: float = 3.0) -> str | None:
    """Which side's certificate a failed TLS handshake with ``peer`` is about (gRPC only says "Socket closed").

    A plain TLS 1.3 handshake with this party's credentials, checking the peer like gRPC
    does: if this side cannot verify the peer's certificate, it says so; if the peer
    answers with a certificate alert, the peer rejected this party's certificate. ``None``
    when the probe cannot tell (the peer is down, or the handshake works).
    """
    import socket
    import ssl
    import tempfile

    host, _, port = address.rpartition(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["h2"])
    try:
        ctx.load_verify_locations(cadata=identity.ca_pem.decode("ascii"))
        with tempfile.TemporaryDirectory() as d:  # the ssl module loads a client key from files only
            cert, key = Path(d) / "c.pem", Path(d) / "k.pem"
            cert.write_bytes(identity.cert_pem)
            key.touch(mode=0o600)
            key.write_bytes(identity.key_pem)
            ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, ValueError, OSError):
        return None
    rejected = (f"{peer} closed the link right after the handshake: it rejected {identity.name}'s certificate "
                f"(not signed by the CA {peer} trusts, or not the one it pins for {identity.name!r})")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw, \
                ctx.wrap_socket(raw, server_hostname=peer) as tls:
            tls.settimeout(timeout)
            tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")  # the HTTP/2 preface: the server now checks us
            if tls.recv(1) == b"":  # a healthy gRPC server answers with its SETTINGS frame
                return rejected
    except ssl.SSLCertVerificationError as exc:
        return (f"{identity.name} does not trust {peer}'s certificate ({exc.verify_message}): it is not signed by "
                f"the CA in {identity.name}'s configuration, or not issued to {peer!r}")
    except ssl.SSLError as exc:
        reason = (exc.reason or str(exc)).lower()
        if "alert" in reason and any(w in reason for w in ("unknown_ca", "certificate", "bad_certificate",
                                                            "access_denied", "decrypt")):
            return f"{rejected} (TLS alert {exc.reason})"
        if "eof" in reason:
            return rejected
        return None
    except (OSError, ValueError):
        return None
    return None


# --------------------------------------------------------------------------- transport


def _grpc_options(settings: NetworkSettings, *, server: bool) -> list[tuple[str, Any]]:
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

    # ---- stream plumbing

    def _outgoing(self, first: bytes | None = None, go: threading.Event | None = None,
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

    def _start_reader(self, incoming: Iterator[bytes], cancel: Any) -> None:
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
                elif kind == _ACCEPT:
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


# --------------------------------------------------------------------------- party network


class PartyNetwork:
    """All links of one party: its gRPC server (if it listens on any link) and dialed links."""

    def __init__(self, config: PartyConfig, identity: PartyIdentity) -> None:
        self.config = config
        self.identity = identity
        self.name = identity.name
        self.settings = config.settings
        spec = config.party(self.name)
        if identity.fingerprint != spec.fingerprint:
            raise InputDataError(
                f"{self.name}: its certificate does not match the fingerprint pinned in the configuration")
        self.transports: dict[str, GrpcTransport] = {}
        self._accepted: dict[str, threading.Event] = {}
        self._server: grpc.Server | None = None
        self._grpc_channels: list[grpc.Channel] = []
        self._lock = threading.Lock()
        self.port: int | None = None

    # ---- listening side

    def _serve_links(self) -> list[Link]:
        return [lk for lk in self.config.links_of(self.name) if lk.server == self.name]

    def start_server(self, bind: str | None = None) -> int | None:
        """Listen for the parties that dial us; returns the bound port (None if no links)."""
        links = self._serve_links()
        if not links:
            return None
        for lk in links:
            self._accepted[lk.client] = threading.Event()
        creds = grpc.ssl_server_credentials(
            [(self.identity.key_pem, self.identity.cert_pem)],
            root_certificates=self.identity.ca_pem, require_client_auth=True)
        pool = ThreadPoolExecutor(max_workers=len(links) + 2, thread_name_prefix="grpc-link")
        server = grpc.server(
            pool, options=_grpc_options(self.settings, server=True),
            maximum_concurrent_rpcs=len(links) + 2)
        handler = grpc.method_handlers_generic_handler(
            "vflcrypto.net.Link",
            {"Frames": grpc.stream_stream_rpc_method_handler(self._handle, None, None)})
        server.add_generic_rpc_handlers((handler,))
        spec = self.config.party(self.name)
        address = bind if bind is not None else _bind_address(spec.host, spec.port)
        try:
            port = server.add_secure_port(address, creds)
        except RuntimeError as exc:
            raise PeerDisconnectedError(f"{self.name} cannot listen on {address}: {exc}") from None
        if port == 0:
            raise PeerDisconnectedError(f"{self.name} cannot listen on {address} (port in use?)")
        server.start()
        self._server = server
        self.port = port
        return port

    def _handle(self, request_iterator: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        # types-grpcio declares Mapping[str, bytes]; grpc gives every property as a list of bytes
        auth = cast("Mapping[str, list[bytes]]", context.auth_context())
        pem = (auth.get("x509_pem_cert") or [b""])[0]
        peer = self.config.name_for_fingerprint(cert_fingerprint(pem)) if pem else None
        expected = {lk.client for lk in self._serve_links()}
        if peer is None or peer not in expected:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"{self.name}: client certificate is not pinned for a party that dials "
                          f"{self.name} in the configuration")
            return
        with self._lock:
            if peer in self.transports:
                context.abort(grpc.StatusCode.ALREADY_EXISTS, f"{peer} is already connected")
                return
            transport = GrpcTransport(self.name, peer, context.peer(), self.settings)
            self.transports[peer] = transport
        transport._start_reader(request_iterator, context.cancel)
        self._accepted[peer].set()
        yield from transport._outgoing(first=_ACCEPT)
        # let the final chunks flush before the RPC completes
        transport._done.wait(self.settings.linger)

    # ---- dialing side

    def dial(self, peer: str, deadline: float) -> GrpcTransport:
        """Connect to ``peer`` (which listens), retrying with backoff until ``deadline``."""
        spec = self.config.party(peer)
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.identity.ca_pem, private_key=self.identity.key_pem,
            certificate_chain=self.identity.cert_pem)
        opts = [*_grpc_options(self.settings, server=False),
                ("grpc.ssl_target_name_override", peer), ("grpc.default_authority", peer)]
        channel = grpc.secure_channel(spec.address, creds, options=opts)
        self._grpc_channels.append(channel)
        stream: grpc.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(
            METHOD, request_serializer=None, response_deserializer=None)
        transport = GrpcTransport(self.name, peer, spec.address, self.settings)
        delay = 0.05
        last = "no attempt"
        while True:
            go, dead = threading.Event(), threading.Event()
            call = stream(transport._outgoing(go=go, dead=dead), timeout=self.settings.deadline)
            try:
                first = next(call)
                if first != _ACCEPT:
                    raise ProtocolError(f"{peer} ({spec.address}) did not accept the link")
                go.set()
                transport._start_reader(call, call.cancel)
                with self._lock:
                    self.transports[peer] = transport
                return transport
            except grpc.RpcError as exc:
                dead.set()
                call.cancel()
                code, last = exc.code(), exc.details() or ""
                if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED,
                            grpc.StatusCode.ALREADY_EXISTS):
                    raise PeerDisconnectedError(f"{peer} ({spec.address}) refused {self.name}: {last}") from None
                low = last.lower()
                if "handshake" in low or "certificate" in low or "ssl" in low or "alert" in low or \
                        "socket closed" in low:
                    blame = diagnose_tls(self.identity, peer, spec.address)
                    if blame is not None:
                        raise PeerDisconnectedError(f"TLS with {peer} ({spec.address}) failed: {blame}") from None
            now = time.monotonic()
            if now >= deadline:
                raise PeerTimeoutError(
                    f"{self.name} could not reach {peer} at {spec.address} within "
                    f"{self.settings.connect_timeout:g} s: {last}")
            time.sleep(min(delay, max(0.0, deadline - now)))
            delay = min(delay * 1.6, 2.0)

    def connect(self) -> dict[str, GrpcTransport]:
        """Bring up every link of this party (listen, dial, wait) or raise naming the peer."""
        deadline = time.monotonic() + self.settings.connect_timeout
        if self._server is None:
            self.start_server()
        dials = [lk.server for lk in self.config.links_of(self.name) if lk.client == self.name]
        errors: list[BaseException] = []

        def dial_one(peer: str) -> None:
            try:
                self.dial(peer, deadline)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=dial_one, args=(p,), daemon=True) for p in dials]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        for peer, ev in self._accepted.items():
            if not ev.wait(max(0.0, deadline - time.monotonic())):
                spec = self.config.party(peer)
                raise PeerTimeoutError(
                    f"{peer} (expected from {spec.address}) did not connect to {self.name} within "
                    f"{self.settings.connect_timeout:g} s")
        return dict(self.transports)

    def close(self) -> None:
        """Close every link (waiting for peers to receive what was sent), then the server."""
        threads = [threading.Thread(target=t.close, daemon=True) for t in self.transports.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.settings.linger + 2)
        if self._server is not None:
            self._server.stop(grace=1.0).wait(3.0)
        for ch in self._grpc_channels:
            ch.close()

    def abort(self) -> None:
        """Tear every link down at once (after an error): peers fail immediately."""
        for t in self.transports.values():
            t._closing.set()
            t._cancel_stream()
        if self._server is not None:
            self._server.stop(grace=None)
        for ch in self._grpc_channels:
            ch.close()


def _bind_address(host: str, port: int) -> str:
    """Listen on the configured IP, or on every interface when the address is a name."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return f"[::]:{port}"
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


# --------------------------------------------------------------------------- handshake


def _hello_digest(server: str, client: str, client_nonce: bytes, server_nonce: bytes,
                  config_digest: str, task: str) -> bytes:
    return _SIGN_CONTEXT + encode_value([server, client, client_nonce, server_nonce, config_digest, task])


def agree_run(net: PartyNetwork, task: str, transcript: Transcript) -> str:
    """Exchange ``net.hello`` on every link, check the peers, and derive the run id.

    The run id is SHA-256 over the configuration digest, the task and every party's fresh
    nonce (truncated to 128 bits, hex), so no single party chooses it and a frame of an
    earlier run is rejected by every Channel. A fixed ``run_id`` in the configuration
    replaces the derived one (the hello still runs).
    """
    cfg, me = net.config, net.name
    digest = cfg.digest
    nonce = secrets.token_bytes(32)
    chans = {
        peer: Channel(Endpoint(me, HELLO_ROLE), Endpoint(peer, HELLO_ROLE), t,
                      transcript=transcript, timeout=cfg.settings.connect_timeout,
                      max_frame_bytes=64 * 1024, run_id=HELLO_RUN_ID)
        for peer, t in net.transports.items()
    }
    links = cfg.links_of(me)
    client_links = [lk for lk in links if lk.client == me]
    server_links = [lk for lk in links if lk.server == me]
    for lk in client_links:
        chans[lk.server].send(Hello(me, nonce, digest, task, b"", b""))
    nonces = {me: nonce}

    def check(h: Hello, peer: str) -> None:
        if h.party != peer:
            raise ProtocolError(f"{peer} introduced itself as {h.party!r}")
        if not hmac.compare_digest(h.config_digest, digest):
            raise ProtocolError(f"{peer} runs with a different party configuration")
        if h.task != task:
            raise ProtocolError(f"{peer} runs task {h.task!r}, {me} runs {task!r}")
        if len(h.nonce) != 32:
            raise ProtocolError(f"{peer} sent a malformed hello nonce")

    for lk in server_links:
        h = chans[lk.client].recv(Hello)
        check(h, lk.client)
        nonces[lk.client] = h.nonce
        sig = net.identity.sign(_hello_digest(me, lk.client, h.nonce, nonce, digest, task))
        chans[lk.client].send(Hello(me, nonce, digest, task, net.identity.cert_der, sig))
    for lk in client_links:
        h = chans[lk.server].recv(Hello)
        check(h, lk.server)
        _verify_server_hello(cfg, lk.server, me, h, nonce, digest, task)
        nonces[lk.server] = h.nonce
    # gossip nonces until every party knows all of them (only on a partial mesh)
    n = len(cfg.parties)
    if len(cfg.links) < n * (n - 1) // 2:
        for _ in range(n - 1):
            for ch in chans.values():
                ch.send(NonceSet(dict(nonces)))
            for peer, ch in chans.items():
                for name, value in ch.recv(NonceSet).nonces.items():
                    if name not in cfg.parties or len(value) != 32 or \
                            (name in nonces and not hmac.compare_digest(nonces[name], value)):
                        raise ProtocolError(f"{peer} relayed an inconsistent nonce for {name!r}")
                    nonces[name] = value
        if set(nonces) != set(cfg.parties):
            raise ProtocolError("the party links do not connect every configured party")
    if cfg.settings.run_id != "agreed":
        return cfg.settings.run_id
    run_hash = hashlib.sha256(b"vflcrypto-run-v1" + digest.encode() + task.encode())
    for name in sorted(nonces):
        run_hash.update(name.encode() + b"\0" + nonces[name])
    return run_hash.hexdigest()[:32]


def _verify_server_hello(cfg: PartyConfig, server: str, me: str, h: Hello, my_nonce: bytes,
                         digest: str, task: str) -> None:
    try:
        cert = x509.load_der_x509_certificate(h.certificate)
    except ValueError:
        raise ProtocolError(f"{server} sent no valid certificate in its hello") from None
    if not hmac.compare_digest(cert_fingerprint(cert), cfg.party(server).fingerprint):
        raise ProtocolError(f"{server}'s certificate is not the one pinned in the configuration")
    pub = cert.public_key()
    if not isinstance(pub, ec.EllipticCurvePublicKey):
        raise ProtocolError(f"{server}'s certificate key is not ECDSA")
    try:
        pub.verify(h.signature, _hello_digest(server, me, my_nonce, h.nonce, digest, task),
                   ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise ProtocolError(f"{server} could not prove it holds its pinned certificate's key") from None


@dataclass
class ConnectedParty:
    """What :func:`connect_party` returns: the run id and one Channel per peer."""

    run_id: str
    channels: dict[str, Channel]
    network: PartyNetwork
    transcript: Transcript

    def close(self) -> None:
        self.network.close()

    def abort(self) -> None:
        self.network.abort()


def connect_party(config: PartyConfig, identity: PartyIdentity, task: str, *,
                  transcript: Transcript | None = None,
                  allow_insecure: bool = False) -> ConnectedParty:
    """Connect party ``identity.name`` to its peers, agree on a run id, return Channels.

    The Channels carry the peers' protocol roles from the configuration, share one
    :class:`KeyRing` and one :class:`Transcript`, use the configured receive timeout and
    frame limit, and are bound to the agreed run id.
    """
    transcript = transcript if transcript is not None else Transcript()
    net = PartyNetwork(config, identity)
    try:
        net.connect()
        run_id = agree_run(net, task, transcript)
    except BaseException:
        net.abort()
        raise
    me = config.party(identity.name)
    keyring = KeyRing()
    channels = {
        peer: Channel(Endpoint(me.name, me.role), Endpoint(peer, config.party(peer).role), t,
                      transcript=transcript, keyring=keyring, timeout=config.settings.timeout,
                      max_frame_bytes=config.settings.max_frame_bytes, run_id=run_id,
                      allow_insecure=allow_insecure)
        for peer, t in sorted(net.transports.items())
    }
    return ConnectedParty(run_id, channels, net, transcript)


def audit_run(key_bits: int = 2048) -> Any:
    """``vflcrypto audit net``: two parties on loopback run the hello; audit what each saw.

    ``key_bits`` is unused (the handshake has no Paillier keys); kept for the common
    signature of audit functions.
    """
    import socket
    import tempfile

    from .certs import write_dev_pki
    from .leakage import AuditOutcome, audit
    from .partyconfig import load_party_config, render_config_toml

    del key_bits
    with tempfile.TemporaryDirectory(prefix="vflcrypto-net-audit-") as tmp:
        d = Path(tmp)
        _, creds = write_dev_pki(d, ["active", "passive-0"])
        ports = []
        for _ in creds:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
        parties = {n: (n.split("-")[0], f"127.0.0.1:{p}") for n, p in zip(creds, ports, strict=True)}
        (d / "parties.toml").write_text(render_config_toml(
            parties, ca="ca.pem", certs={n: (c.cert.name, c.key.name) for n, c in creds.items()},
            network={"connect_timeout": 10.0}))
        cfg = load_party_config(d / "parties.toml")
        transcript = Transcript()
        done: dict[str, ConnectedParty] = {}

        def run(name: str) -> None:
            spec = cfg.party(name)
            done[name] = connect_party(cfg, PartyIdentity.from_files(
                name, spec.cert_path, spec.key_path, cfg.ca_path), "audit", transcript=transcript)

        threads = [threading.Thread(target=run, args=(n,)) for n in parties]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for p in done.values():
            p.close()
    return AuditOutcome("net", audit(transcript))
