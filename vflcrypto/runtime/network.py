"""Network transport: gRPC bidirectional streams with mutual TLS and pinned certificates.

Parties run as separate processes (and machines). For every pair of parties that talk
there is one *link*: one gRPC bidirectional stream over HTTP/2 + TLS 1.3, opened by the
dialing side to the listening side (by default the lexicographically smaller name
listens; see :mod:`vflcrypto.runtime.partyconfig`). A :class:`GrpcTransport` moves opaque frames
over one link and plugs into :class:`vflcrypto.runtime.channel.Channel` like the in-process
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
  both nonces, configuration digest, task, shared settings) with its certificate's key; the client checks
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
import secrets
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import cast

import grpc
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from ..errors import (
    ConfigurationError,
    InputDataError,
    OutputError,
    PeerDisconnectedError,
    PeerTimeoutError,
    ProtocolError,
)
from .certs import cert_fingerprint
from .channel import Channel, Endpoint, Transcript
from .declarations import Protection, declare
from .grpc_link import ACCEPT, GrpcTransport, grpc_options
from .identity import PartyIdentity, diagnose_tls
from .partyconfig import Link, PartyConfig
from .wire import KeyRing, encode_value

__all__ = [
    "HELLO_ROLE",
    "ConnectedParty",
    "Hello",
    "NonceSet",
    "OutputsReady",
    "PartyNetwork",
    "agree_run",
    "connect_party",
]

METHOD = "/vflcrypto.net.Link/Frames"
HELLO_ROLE = "party"  # the role both ends take in the handshake (any protocol role may run it)
HELLO_RUN_ID = "net-hello"
_SIGN_CONTEXT = b"vflcrypto-net-hello-v1"



# --------------------------------------------------------------------------- messages


@declare(
    "net.hello",
    sender=HELLO_ROLE, receiver=HELLO_ROLE, protection=Protection.PUBLIC,
    reveals="the sender's party name, a fresh 32-byte random nonce, the configuration digest, "
            "the task name, the public settings every data party must share (e.g. --test-fraction, "
            "--split-seed, --aligned; none from a party without data) and (from the listening side) "
            "its certificate and a signature binding them to this link",
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
    settings: dict[str, str] = field(default_factory=dict)  # flag -> value every data party must share


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


@declare(
    "net.done",
    sender=HELLO_ROLE, receiver=HELLO_ROLE, protection=Protection.PUBLIC,
    reveals="once the protocol's messages are all exchanged: whether the sender (and, over a partial mesh, "
            "each party it heard from) staged every output file of the run, and if not the system's "
            "one-line reason (e.g. 'No space left on device'; no path, no data)",
)
@dataclass(frozen=True)
class OutputsReady:
    """A party's word that its outputs are staged (``failed`` empty) or which party could not write them."""

    failed: dict[str, str]


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
            pool, options=grpc_options(self.settings, server=True),
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
        transport.start_reader(request_iterator, context.cancel)
        self._accepted[peer].set()
        yield from transport.outgoing(first=ACCEPT)
        # let the final chunks flush before the RPC completes
        transport.wait_flushed(self.settings.linger)

    # ---- dialing side

    def dial(self, peer: str, deadline: float) -> GrpcTransport:
        """Connect to ``peer`` (which listens), retrying with backoff until ``deadline``."""
        spec = self.config.party(peer)
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.identity.ca_pem, private_key=self.identity.key_pem,
            certificate_chain=self.identity.cert_pem)
        opts = [*grpc_options(self.settings, server=False),
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
            call = stream(transport.outgoing(go=go, dead=dead), timeout=self.settings.deadline)
            try:
                first = next(call)
                if first != ACCEPT:
                    raise ProtocolError(f"{peer} ({spec.address}) did not accept the link")
                go.set()
                transport.start_reader(call, call.cancel)
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
        self._join_readers()

    def abort(self) -> None:
        """Tear every link down at once (after an error): peers fail immediately."""
        for t in self.transports.values():
            t.abort()
        if self._server is not None:
            self._server.stop(grace=None)
        for ch in self._grpc_channels:
            ch.close()
        self._join_readers()

    def _join_readers(self) -> None:
        """No reader thread may still be inside gRPC when the process exits (:meth:`.GrpcTransport.join_reader`)."""
        for t in self.transports.values():
            t.join_reader(2.0)


def _bind_address(host: str, port: int) -> str:
    """Listen on the configured IP, or on every interface when the address is a name."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return f"[::]:{port}"
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


# --------------------------------------------------------------------------- handshake


def _hello_digest(server: str, client: str, client_nonce: bytes, server_nonce: bytes,
                  config_digest: str, task: str, settings: Mapping[str, str]) -> bytes:
    return _SIGN_CONTEXT + encode_value([server, client, client_nonce, server_nonce, config_digest, task,
                                         sorted(settings.items())])


def settings_differ(me: str, settings: Mapping[str, Mapping[str, str]]) -> str | None:
    """What differs between the shared settings of the data parties ``me`` knows (its own under
    ``me`` if it holds data, each peer's from its hello), in the user's terms; ``None`` if nothing does.

    A party without data (it sends none) still compares its peers': it refuses the run too,
    instead of starting it and leaving on a disconnect that its peers would have to explain.
    """
    given = {p: s for p, s in settings.items() if s}
    names = sorted(given, key=lambda p: (p != me, p))  # this party's own settings first
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            mine, theirs = given[a], given[b]
            keys = [k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
            if not keys:
                continue
            if a == me:
                differ = [f"{k} {theirs.get(k, '(not given)')} (here {mine.get(k, '(not given)')})" for k in keys]
                return (f"{me}: {b} runs with other shared settings than this party: {', '.join(differ)}; "
                        "every party that holds data must give the same")
            differ = [f"{k} {mine.get(k, '(not given)')} at {a}, {theirs.get(k, '(not given)')} at {b}" for k in keys]
            return (f"{me}: {a} and {b} run with different shared settings: {', '.join(differ)}; "
                    "every party that holds data must give the same")
    return None


def agree_run(net: PartyNetwork, task: str, transcript: Transcript,
              settings: Mapping[str, str] | None = None) -> str:
    """Exchange ``net.hello`` on every link, check the peers, and derive the run id.

    The run id is SHA-256 over the configuration digest, the task and every party's fresh
    nonce (truncated to 128 bits, hex), so no single party chooses it and a frame of an
    earlier run is rejected by every Channel. A fixed ``run_id`` in the configuration
    replaces the derived one (the hello still runs).

    ``settings`` are the public settings every data party must share (``--test-fraction``:
    a mismatch would otherwise surface later as misaligned rows); two parties that both
    sent some must agree, else :class:`ConfigurationError` names each difference. A task
    or settings mismatch is raised only once this party has exchanged hellos on every
    link, so each side of the difference reports it itself, neither blames the other's exit.
    """
    settings = dict(settings or {})
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
        chans[lk.server].send(Hello(me, nonce, digest, task, b"", b"", settings))
    nonces = {me: nonce}

    def check(h: Hello, peer: str) -> None:
        if h.party != peer:
            raise ProtocolError(f"{peer} introduced itself as {h.party!r}")
        if not hmac.compare_digest(h.config_digest, digest):
            raise ProtocolError(f"{peer} runs with a different party configuration")
        if len(h.nonce) != 32:
            raise ProtocolError(f"{peer} sent a malformed hello nonce")

    mismatch: list[str] = []  # raised once every hello is exchanged
    shared = {me: settings}

    def check_task(h: Hello, peer: str) -> None:
        if h.task != task:
            mismatch.append(f"{peer} runs task {h.task!r}, {me} runs {task!r}")
        shared[peer] = h.settings

    for lk in server_links:
        h = chans[lk.client].recv(Hello)
        check(h, lk.client)
        nonces[lk.client] = h.nonce
        sig = net.identity.sign(_hello_digest(me, lk.client, h.nonce, nonce, digest, task, settings))
        chans[lk.client].send(Hello(me, nonce, digest, task, net.identity.cert_der, sig, settings))
        check_task(h, lk.client)
    for lk in client_links:
        h = chans[lk.server].recv(Hello)
        check(h, lk.server)
        _verify_server_hello(cfg, lk.server, me, h, nonce, digest)
        check_task(h, lk.server)
        nonces[lk.server] = h.nonce
    differ = settings_differ(me, shared)
    if mismatch or differ:
        raise ConfigurationError(mismatch[0] if mismatch else str(differ))
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
                         digest: str) -> None:
    """The listening side's certificate is the pinned one and it signed its hello (its task and settings
    as it states them: the caller compares them with its own)."""
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
        pub.verify(h.signature, _hello_digest(server, me, my_nonce, h.nonce, digest, h.task, h.settings),
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

    def confirm_outputs(self, failure: str | None = None) -> None:
        """Tell every party whether this party's outputs are staged, and hear the same from each.

        Called once the protocol is over and the outputs are staged (not yet published): the run's
        outputs then appear at every party or at none. ``failure`` is this party's own one-line
        reason for not writing them (it is told, then this returns; the caller raises its own
        error). A peer's failure, or a peer that leaves or stalls here, raises an error naming it
        (:class:`~vflcrypto.errors.OutputError` for a failed write) and the caller discards its staged
        outputs. Over a partial mesh the word is relayed, as the hello nonces are. What remains is
        the last step's window: a party that dies between this exchange and renaming its staged
        files leaves its peers' outputs published and its own absent.
        """
        cfg, me = self.network.config, self.network.name
        failed = {me: failure} if failure else {}
        chans = {
            peer: Channel(Endpoint(me, HELLO_ROLE), Endpoint(peer, HELLO_ROLE), t,
                          transcript=self.transcript, timeout=cfg.settings.timeout,
                          max_frame_bytes=64 * 1024, run_id=f"{self.run_id}-done")
            for peer, t in self.network.transports.items()
        }
        n = len(cfg.parties)
        rounds = 1 if len(cfg.links) >= n * (n - 1) // 2 else n - 1
        try:
            for _ in range(rounds):
                for ch in chans.values():
                    ch.send(OutputsReady(dict(failed)))
                for peer, ch in chans.items():
                    for name, reason in ch.recv(OutputsReady, step="confirm outputs").failed.items():
                        if name not in cfg.parties or not isinstance(reason, str):
                            raise ProtocolError(f"{peer} relayed a malformed output confirmation")
                        failed.setdefault(name, " ".join(reason.split())[:200] or "unknown reason")
        except (PeerDisconnectedError, PeerTimeoutError, ProtocolError) as exc:
            if failure:
                return  # this party's own error is the one to report
            raise type(exc)(f"{me}: {exc}; nothing of this command's output was kept") from None
        if failure:
            return
        others = {p: r for p, r in failed.items() if p != me}
        if others:
            party, reason = sorted(others.items())[0]
            err = OutputError(f"{me}: {party} could not write its output ({reason}); "
                              "nothing of this command's output was kept")
            err.reason = f"{party}: {reason}"
            raise err


def connect_party(config: PartyConfig, identity: PartyIdentity, task: str, *,
                  transcript: Transcript | None = None,
                  allow_insecure: bool = False, settings: Mapping[str, str] | None = None) -> ConnectedParty:
    """Connect party ``identity.name`` to its peers, agree on a run id (and the shared ``settings``,
    see :func:`agree_run`), return Channels.

    The Channels carry the peers' protocol roles from the configuration, share one
    :class:`KeyRing` and one :class:`Transcript`, use the configured receive timeout and
    frame limit, and are bound to the agreed run id.
    """
    transcript = transcript if transcript is not None else Transcript()
    net = PartyNetwork(config, identity)
    try:
        net.connect()
        run_id = agree_run(net, task, transcript, settings)
    except ConfigurationError:
        net.close()  # a refused task or settings: every hello was exchanged, let the peers have theirs
        raise
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
