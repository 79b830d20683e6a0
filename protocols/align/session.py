"""One pairwise PSI session (ECDH or keyed hash) as named steps, for either side.

A :class:`Session` is the part of a role that talks to one peer; the roles of
:mod:`.roles` run one (two parties) or one per passive party (3+ parties). Steps, as
numbered in the package docstring: ``start`` (1 hello) → ``on_hello`` (2 blinded points,
or the keyed-hash tags) → ``on_blinded`` (3 re-blinded digests, per chunk) →
``on_doubled`` / ``on_doubled_shuffled`` (4 intersect) → ``on_cardinality`` (size mode);
keyed hash: ``on_hello`` → ``on_tags``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import ProtocolError
from vflcrypto.psi import primitives as psi
from vflcrypto.runtime.steps import Next, prefixed, send, then
from vflcrypto.runtime.wire import encode_value

from .messages import (
    ACTIVE,
    MAX_CHUNK,
    MODES,
    PASSIVE,
    PROTOCOL_VERSION,
    PROTOCOLS,
    BlindedChunk,
    Cardinality,
    DoubledChunk,
    DoubledShuffledChunk,
    Hello,
    TagChunk,
)

__all__ = ["Session", "SessionState", "check_hello", "chunk_lengths", "validate_config"]

ProgressFn = Callable[[int], None]


def chunk_lengths(n: int, chunk: int) -> list[int]:
    return [min(chunk, n - s) for s in range(0, n, chunk)]


def signed_bytes(h: Hello, run_id: str) -> bytes:
    return encode_value([h.protocol, h.mode, h.version, h.role, h.set_size, h.chunk_size,
                         h.nonce, h.ephemeral_public, run_id])


def check_hello(mine: Hello, peer: Hello) -> None:
    """Refuse a peer whose protocol, mode, version or role does not fit ours."""
    if peer.version != mine.version:
        raise ProtocolError(f"align version mismatch: peer speaks {peer.version}, this side {mine.version}")
    if peer.protocol != mine.protocol:
        raise ProtocolError(f"PSI protocol mismatch: peer runs {peer.protocol!r}, this side {mine.protocol!r}")
    if peer.mode != mine.mode:
        raise ProtocolError(f"alignment mode mismatch: peer runs {peer.mode!r}, this side {mine.mode!r}")
    if peer.role == mine.role:
        raise ProtocolError(f"both parties claim the role {mine.role!r}")
    if peer.set_size < 0 or not 1 <= peer.chunk_size <= MAX_CHUNK:
        raise ProtocolError("peer's hello has an invalid set size or chunk size")


def validate_config(protocol: str, mode: str) -> None:
    if protocol not in PROTOCOLS:
        raise ProtocolError(f"unknown PSI protocol {protocol!r} (choose from {PROTOCOLS})")
    if mode not in MODES:
        raise ProtocolError(f"unknown alignment mode {mode!r} (choose from {MODES})")
    if protocol == "hash" and mode == "size":
        raise ProtocolError("cardinality-only mode needs protocol 'ecdh': with keyed-hash PSI "
                            "the key holder always learns which rows are common")
    if protocol in ("kkrt", "rr22") and mode == "size":
        raise ProtocolError(f"cardinality-only mode needs protocol 'ecdh': with {protocol} the receiver matches "
                            "the sender's values against its own per-row outputs, so it always learns "
                            "which rows are common")


@dataclass
class SessionState:
    """What a session carries between messages (all wire-encodable)."""

    hello: Hello | None = None
    peer_size: int = 0
    peer_chunk: int = 1
    k: int = 0  # the chunk expected next
    secret: bytes = b""  # ECDH scalar, or the keyed-hash key
    order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # own sending order
    tags: bytes = b""  # keyed hash: own tags, in canonical order
    peer_digests: list[bytes] = field(default_factory=list)  # the peer's points re-blinded by us (or its tags)
    held: list[bytes] = field(default_factory=list)  # cardinality mode, passive: held for one reshuffle
    own_rows: np.ndarray = field(default_factory=lambda: np.zeros((0, psi.DIGEST_BYTES), np.uint8))
    own: list[bytes] = field(default_factory=list)  # cardinality mode, active: reshuffled own digests
    eph: bytes = b""  # keyed hash: the ephemeral X25519 secret until the key is derived


class Session:
    """One side of a pairwise PSI session with ``peer``; the state lives in ``self.state``.

    The owning role forwards its steps here; ``finished(pos, size, peer_size)`` turns the
    session's outcome into the role's next step.
    """

    def __init__(self, role: str, peer: str, canon: psi.CanonicalIds, *, protocol: str, mode: str,
                 identity: psi.IdentityKey | None, peer_identity: bytes | None, chunk_size: int,
                 run_id: str, progress: ProgressFn | None,
                 finished: Callable[[np.ndarray | None, int | None, int], Next],
                 hold: Callable[[str, Any], None], state: SessionState | None = None) -> None:
        validate_config(protocol, mode)
        self.role, self.peer, self.canon = role, peer, canon
        self.protocol, self.mode, self.pair_mode = protocol, mode, "both" if mode == "all" else mode
        self.identity, self.peer_identity = identity, peer_identity
        self.chunk_size, self.run_id = chunk_size, run_id
        self.tick = progress or (lambda _n: None)
        self.finished, self.hold = finished, hold
        self.state = state if state is not None else SessionState()

    @property
    def i_learn(self) -> bool:
        return self.role == ACTIVE or self.pair_mode == "both"

    @property
    def peer_learns(self) -> bool:
        return self.role == PASSIVE or self.pair_mode == "both"

    # ----------------------------------------------------------------- 1 hello
    def start(self) -> Next:
        """Step 1: the hello (protocol, mode, version, role, set size; signed key under keyed hash)."""
        eph = None
        if self.protocol == "hash":
            if self.identity is None or self.peer_identity is None:
                raise ProtocolError("keyed-hash PSI needs this party's identity key and the peer's pinned identity")
            eph = psi.EphemeralKey()
            self.state.eph = eph.private_bytes()
        hello = Hello(self.protocol, self.mode, PROTOCOL_VERSION, self.role, len(self.canon), self.chunk_size,
                      os.urandom(16), eph.public_bytes if eph else b"", b"")
        if eph is not None and self.identity is not None:
            hello = dataclasses.replace(hello, signature=self.identity.sign(signed_bytes(hello, self.run_id)))
        self.state.hello = hello
        return then([send(self.peer, hello)], self.peer, Hello, "on_hello")

    def on_hello(self, peer: Hello) -> Next:
        """Check the peer's hello; step 2: send our blinded points (or keyed-hash tags)."""
        st, mine = self.state, self.state.hello
        assert mine is not None  # set by start, the only way into this step
        check_hello(mine, peer)
        st.peer_size, st.peer_chunk, st.k = peer.set_size, peer.chunk_size, 0
        if self.protocol == "hash":
            return self._tags_out(mine, peer)
        st.secret, st.order = psi.generate_secret(), psi.random_permutation(len(self.canon))
        self.hold("ecdh_secret", st.secret)
        self.hold("send_order", st.order)
        if st.peer_size == 0:
            return prefixed(itertools.chain(self._blinded_out(), self._after_blinded()), self._after_blinded_wait())
        return prefixed(self._blinded_out(), then([], self.peer, BlindedChunk, "on_blinded"))

    def _blinded_out(self) -> Iterator[tuple[str, Any]]:
        stream = psi.blind_stream(self.state.secret, self.canon.encoded, self.state.order, self.chunk_size)
        for k, pts in enumerate(stream):
            self.tick(len(pts) // psi.POINT_BYTES)
            yield send(self.peer, BlindedChunk(k, pts))

    # ----------------------------------------------------------------- keyed hash
    def _tags_out(self, mine: Hello, peer: Hello) -> Next:
        assert self.state.eph and self.peer_identity is not None  # start() set both up for keyed hash
        psi.verify_identity(self.peer_identity, peer.signature, signed_bytes(peer, self.run_id))
        first, second = (mine, peer) if self.role == ACTIVE else (peer, mine)
        eph, self.state.eph = psi.EphemeralKey.from_private_bytes(self.state.eph), b""
        key = psi.derive_psi_key(eph.exchange(peer.ephemeral_public),
                                 signed_bytes(first, self.run_id) + signed_bytes(second, self.run_id))
        self.hold("psi_key", key)
        n = len(self.canon)
        tags = psi.digests_to_array(psi.keyed_digests(key, self.canon.encoded))
        self.state.tags = tags.tobytes()
        sends = []
        if self.peer_learns:
            shuffled = tags[psi.random_permutation(n)]
            sends = [send(self.peer, TagChunk(k, shuffled[s : s + self.chunk_size].tobytes()))
                     for k, s in enumerate(range(0, n, self.chunk_size))]
        self.tick(n)
        if not self.i_learn:
            return prefixed(sends, self.finished(None, None, self.state.peer_size))
        if self.state.peer_size == 0:
            return prefixed(sends, self._match_tags())
        return then(sends, self.peer, TagChunk, "on_tags")

    def on_tags(self, msg: TagChunk) -> Next:
        """Keyed hash: collect the peer's tags; the last chunk gives the intersection."""
        data = self._chunk(msg, "tags", psi.DIGEST_BYTES)
        self.state.peer_digests.append(data)
        self.tick(len(data) // psi.DIGEST_BYTES)
        if self.state.k < len(chunk_lengths(self.state.peer_size, self.state.peer_chunk)):
            return then([], self.peer, TagChunk, "on_tags")
        return self._match_tags()

    def _match_tags(self) -> Next:
        pos = psi.match_digests(psi.digests_to_array(self.state.tags),
                                psi.digests_to_array(b"".join(self.state.peer_digests)))
        return self.finished(pos, len(pos), self.state.peer_size)

    # ----------------------------------------------------------------- 3 re-blinding
    def _chunk(self, msg: Any, attr: str, width: int, lengths: list[int] | None = None) -> bytes:
        st = self.state
        lengths = lengths if lengths is not None else chunk_lengths(st.peer_size, st.peer_chunk)
        data = getattr(msg, attr)
        if st.k >= len(lengths) or msg.chunk != st.k or len(data) != lengths[st.k] * width:
            raise ProtocolError(f"{self.peer} sent a malformed chunk {msg.chunk} of {type(msg).__name__}")
        st.k += 1
        return bytes(data)

    @property
    def _shuffle_back(self) -> bool:
        return self.role == PASSIVE and self.pair_mode == "size"

    def on_blinded(self, msg: BlindedChunk) -> Next:
        """Step 3: re-blind a chunk of the peer's points (digests back, or held for a reshuffle)."""
        st = self.state
        k = st.k
        dig = psi.reblind_chunk(st.secret, self._chunk(msg, "points", psi.POINT_BYTES), st.peer_size)
        self.tick(len(dig) // psi.DIGEST_BYTES)
        if self.i_learn:
            st.peer_digests.append(dig)
        sends: list[tuple[str, Any]] = []
        if self._shuffle_back:
            st.held.append(dig)
        elif self.peer_learns:
            sends.append(send(self.peer, DoubledChunk(k, dig)))
        if st.k < len(chunk_lengths(st.peer_size, st.peer_chunk)):
            return then(sends, self.peer, BlindedChunk, "on_blinded")
        return prefixed([*sends, *self._after_blinded()], self._after_blinded_wait())

    def _after_blinded(self) -> list[tuple[str, Any]]:
        """Cardinality mode, passive: one global reshuffle of the held digests, then send them."""
        if not self._shuffle_back:
            return []
        arr = psi.digests_to_array(b"".join(self.state.held))
        arr = arr[psi.random_permutation(len(arr))]  # one global shuffle: per chunk would leak
        self.state.held = []
        return [send(self.peer, DoubledShuffledChunk(k, arr[s : s + self.state.peer_chunk].tobytes()))
                for k, s in enumerate(range(0, len(arr), self.state.peer_chunk))]

    def _after_blinded_wait(self) -> Next:
        st = self.state
        st.k = 0
        if not self.i_learn:
            if self.pair_mode == "size":
                return then([], self.peer, Cardinality, "on_cardinality")
            return self.finished(None, None, st.peer_size)
        if len(self.canon) == 0:
            return self._intersect_doubled() if self.pair_mode == "size" else self._intersect()
        if self.pair_mode == "size":
            return then([], self.peer, DoubledShuffledChunk, "on_doubled_shuffled")
        return then([], self.peer, DoubledChunk, "on_doubled")

    # ----------------------------------------------------------------- 4 intersect
    def on_doubled(self, msg: DoubledChunk) -> Next:
        """Step 4: our points re-blinded by the peer, in our sending order: put them back."""
        st = self.state
        own_lengths = chunk_lengths(len(self.canon), self.chunk_size)
        k = st.k
        data = self._chunk(msg, "digests", psi.DIGEST_BYTES, own_lengths)
        if len(st.own_rows) != len(self.canon):
            st.own_rows = np.zeros((len(self.canon), psi.DIGEST_BYTES), np.uint8)
        start = k * self.chunk_size
        st.own_rows[st.order[start : start + own_lengths[k]]] = \
            np.frombuffer(data, np.uint8).reshape(-1, psi.DIGEST_BYTES)
        if st.k < len(own_lengths):
            return then([], self.peer, DoubledChunk, "on_doubled")
        return self._intersect()

    def _intersect(self) -> Next:
        own = psi.digests_to_array(np.ascontiguousarray(self.state.own_rows).tobytes())
        pos = psi.match_digests(own, psi.digests_to_array(b"".join(self.state.peer_digests)))
        return self.finished(pos, len(pos), self.state.peer_size)

    def on_doubled_shuffled(self, msg: DoubledShuffledChunk) -> Next:
        """Cardinality mode, active: count matches among the reshuffled digests; tell the peer."""
        st = self.state
        st.own.append(self._chunk(msg, "digests", psi.DIGEST_BYTES, chunk_lengths(len(self.canon), self.chunk_size)))
        if st.k < len(chunk_lengths(len(self.canon), self.chunk_size)):
            return then([], self.peer, DoubledShuffledChunk, "on_doubled_shuffled")
        return self._intersect_doubled()

    def _intersect_doubled(self) -> Next:
        own = psi.digests_to_array(b"".join(self.state.own))
        size = len(psi.match_digests(own, psi.digests_to_array(b"".join(self.state.peer_digests))))
        return prefixed([send(self.peer, Cardinality(size))], self.finished(None, size, self.state.peer_size))

    def on_cardinality(self, msg: Cardinality) -> Next:
        """Cardinality mode, passive: the size the active party found."""
        if not 0 <= msg.size <= min(len(self.canon), self.state.peer_size):
            raise ProtocolError("peer reported an impossible intersection size")
        return self.finished(None, msg.size, self.state.peer_size)

