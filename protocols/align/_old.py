"""Private entity alignment (PSI) for vertical federated learning.

Parties and data
    Two parties, the **active** party (holds the labels; CLI ``--left``) and the
    **passive** party (CLI ``--right``), each hold a list of IDs (one per row). For three
    or more parties: one active party and passive parties ``passive-0``, ``passive-1``, ...

Outputs (per mode)
    ``both``  both parties learn the intersection: their own row indices of the common
              IDs, in the *same* canonical order on both sides (sorted by the common
              double-blinded digest, or HMAC tag), so row ``i`` is the same person
              everywhere. Vertical FL needs this mode.
    ``left``  only the active party learns the intersection; the passive party learns
              only the active party's set size.
    ``size``  cardinality only (ECDH): the active party learns |X ∩ Y| and tells the
              passive party; neither learns which rows. Not offered for keyed-hash PSI,
              where the key holder always learns the rows.
    ``all``   (3+ parties, :func:`run_multiparty_local`) every party learns its rows of
              the all-party intersection in one common order. Extra leakage (declared):
              the active party learns each pairwise intersection with each passive
              party, and passive party ``j`` learns its pairwise intersection with the
              active party before it learns the all-party one.
    Always public: every party's set size (sent in the hello).

Threat model
    Semi-honest parties. Two-party: nothing to collude with; each party must not see the
    other's secret scalar (ECDH) — the keyed-hash variant *shares* its key, so it is only
    as strong as the secrecy of that key from outsiders, and offers no protection of one
    party's non-common IDs against the other if IDs are guessable (SECURITY.md).
    Multi-party: the active party sees all pairwise intersections; passive parties must
    not collude with each other (they could compare what they learned) — they learn
    nothing about each other's sets except through the all-party output.
    Security of ECDH-PSI rests on DDH / one-more-DH in Curve25519 (and its twist) with
    the hash to u-coordinates modelled as a random oracle.

Citation
    C. Meadows, "A more efficient cryptographic matchmaking protocol", IEEE S&P 1986;
    B. Huberman, M. Franklin, T. Hogg, "Enhancing privacy and trust in electronic
    communities", ACM EC 1999 (DH-PSI); B. Pinkas, T. Schneider, M. Zohner, "Scalable
    private set intersection based on OT extension", ACM TOPS 2018 (§ on DH-PSI and
    naive hashing); SecretFlow/OpenMined PSI for the mode vocabulary.

Message flow (two parties, ECDH; chunks of ``chunk_size`` IDs)
    1. both → peer   ``align.hello``  protocol, mode, version, role, set size (mismatch → ProtocolError)
    2. both → peer   ``align.blinded``  k·H(x) for each own ID, shuffled
    3. passive → active  ``align.doubled``  k_p·(k_a·H(a)) digests in the active party's
       sending order (mode both/left), or ``align.doubled_shuffled`` reshuffled (mode size)
       active → passive  ``align.doubled``  k_a·(k_p·H(p)) digests (mode both only)
    4. each learner intersects its own doubled digests with the digests it computed for
       the peer's points; active → passive ``align.cardinality`` (mode size only)
    5. (3+ parties) active → passive-j ``align.global_order``: positions into passive j's
       pairwise-intersection list, in the all-party order.

Message flow (keyed-hash): 1. ``align.hello`` with a signed ephemeral X25519 key; both
derive the HMAC key (HKDF over the hello transcript); 2. ``align.tags``: shuffled HMAC
tags from each party whose peer learns (both: both ways; left: passive → active).
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto import psi
from vflcrypto.attacks import accuracy_finding, order_finding
from vflcrypto.dataio import read_csv_strings, write_csv_atomic
from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.leakage import AuditOutcome, EmpiricalFinding, Protection, audit, declare
from vflcrypto.runtime import DEFAULT_TIMEOUT, AuditTap, Channel, Endpoint, LocalNetwork, Transcript, run_parties
from vflcrypto.spec import ProtocolSpec
from vflcrypto.wire import encode_value

__all__ = [
    "ACTIVE",
    "MODES",
    "PASSIVE",
    "PROTOCOLS",
    "PROTOCOL_VERSION",
    "SPEC",
    "AlignmentResult",
    "BlindedChunk",
    "Cardinality",
    "DoubledChunk",
    "DoubledShuffledChunk",
    "GlobalOrder",
    "Hello",
    "IdTable",
    "LocalRun",
    "TagChunk",
    "align_files",
    "audit_run",
    "demo_step",
    "read_id_table",
    "run_active",
    "run_active_multiparty",
    "run_local",
    "run_multiparty_local",
    "run_passive",
]

PROTOCOL_VERSION = 1
ACTIVE = "active"
PASSIVE = "passive"
PROTOCOLS = ("ecdh", "hash")
MODES = ("both", "left", "size", "all")
MAX_CHUNK = 1 << 20

ProgressFn = Callable[[int], None]


# --------------------------------------------------------------------------- messages


@declare(
    "align.hello",
    sender=(ACTIVE, PASSIVE), receiver=(ACTIVE, PASSIVE),
    protection=Protection.PUBLIC,
    reveals="protocol, mode, version and the sender's set size (public by design); for "
            "keyed-hash PSI also the sender's ephemeral X25519 public key, signed by its "
            "identity key",
)
@dataclass(frozen=True)
class Hello:
    """First message of every run, both ways: a mismatch is a clear ProtocolError."""

    protocol: str
    mode: str
    version: int
    role: str
    set_size: int
    chunk_size: int
    nonce: bytes
    ephemeral_public: bytes
    signature: bytes


@declare(
    "align.blinded",
    sender=(ACTIVE, PASSIVE), receiver=(ACTIVE, PASSIVE),
    protection=(Protection.BLINDED, Protection.SHUFFLED),
    reveals="k·H(x) for each of the sender's IDs in random order: pseudorandom without the "
            "sender's secret scalar (DDH); only the number of IDs",
)
@dataclass(frozen=True)
class BlindedChunk:
    """One chunk of the sender's blinded IDs (32-byte u-coordinates, concatenated)."""

    chunk: int
    points: bytes


@declare(
    "align.doubled",
    sender=(ACTIVE, PASSIVE), receiver=(ACTIVE, PASSIVE),
    protection=Protection.BLINDED,
    reveals="the receiver's own blinded IDs re-blinded by the sender, in the receiver's "
            "sending order: with its own re-blinding of the sender's points this tells the "
            "receiver which of its rows are in the intersection, nothing about the "
            "sender's other IDs",
)
@dataclass(frozen=True)
class DoubledChunk:
    """Digests of double-blinded values of the receiver's points, in the receiver's order."""

    chunk: int
    digests: bytes


@declare(
    "align.doubled_shuffled",
    sender=PASSIVE, receiver=ACTIVE,
    protection=(Protection.BLINDED, Protection.SHUFFLED),
    reveals="the active party's IDs double-blinded and reshuffled: only how many of them are "
            "in the intersection (cardinality mode)",
)
@dataclass(frozen=True)
class DoubledShuffledChunk:
    """Cardinality mode: double-blinded digests of the active party's IDs, reshuffled."""

    chunk: int
    digests: bytes


@declare(
    "align.cardinality",
    sender=ACTIVE, receiver=PASSIVE,
    protection=Protection.PLAINTEXT,
    reveals="the intersection size (the declared output of cardinality mode)",
)
@dataclass(frozen=True)
class Cardinality:
    """Cardinality mode: the intersection size, shared with the passive party."""

    size: int


@declare(
    "align.tags",
    sender=(ACTIVE, PASSIVE), receiver=(ACTIVE, PASSIVE),
    protection=Protection.SHUFFLED,
    reveals="HMAC tags of the sender's IDs under the jointly agreed key, shuffled: the "
            "receiver holds the key, so it learns which of its IDs are common AND can test "
            "guessed IDs against the sender's other tags (dictionary attack on "
            "low-entropy IDs); the key hides the IDs from outsiders only",
)
@dataclass(frozen=True)
class TagChunk:
    """One chunk of keyed-hash tags (DIGEST_BYTES each, concatenated)."""

    chunk: int
    tags: bytes


@declare(
    "align.global_order",
    sender=ACTIVE, receiver=PASSIVE,
    protection=Protection.PLAINTEXT,
    reveals="which of the receiver's pairwise-common rows are common to ALL parties, in the "
            "all-party order (the all-party intersection, the declared output)",
)
@dataclass(frozen=True)
class GlobalOrder:
    """3+ parties: positions into the receiver's pairwise-intersection list."""

    positions: np.ndarray


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class AlignmentResult:
    """One party's output.

    ``rows``: the party's own input row indices of the intersection in canonical order
    (``None`` when this party does not learn it); ``size``: the intersection size
    (``None`` when not learned); ``own_size``/``peer_sizes``: set sizes after hygiene.
    """

    party: str
    role: str
    protocol: str
    mode: str
    own_size: int
    n_rows: int
    peer_sizes: dict[str, int]
    size: int | None
    rows: np.ndarray | None

    def unaligned_rows(self) -> np.ndarray:
        """This party's input rows that are not in the intersection (ascending)."""
        if self.rows is None:
            raise ProtocolError(f"{self.party} did not learn the intersection in mode {self.mode!r}")
        mask = np.ones(self.n_rows, dtype=bool)
        mask[self.rows] = False
        return np.nonzero(mask)[0].astype(np.int64)


@dataclass
class LocalRun:
    """Every party's result plus the shared transcript of an in-process run."""

    results: dict[str, AlignmentResult]
    transcript: Transcript
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- step math


def _chunk_lengths(n: int, chunk: int) -> list[int]:
    return [min(chunk, n - s) for s in range(0, n, chunk)]


def _signed_bytes(h: Hello, run_id: str) -> bytes:
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


def _validate_config(protocol: str, mode: str) -> None:
    if protocol not in PROTOCOLS:
        raise ProtocolError(f"unknown PSI protocol {protocol!r} (choose from {PROTOCOLS})")
    if mode not in MODES:
        raise ProtocolError(f"unknown alignment mode {mode!r} (choose from {MODES})")
    if protocol == "hash" and mode == "size":
        raise ProtocolError("cardinality-only mode needs protocol 'ecdh': with keyed-hash PSI "
                            "the key holder always learns which rows are common")


def _recv_chunks(ch: Channel, cls: type, attr: str, lengths: Sequence[int], width: int,
                 timeout: float | None) -> Iterator[bytes]:
    for k, m in enumerate(lengths):
        msg = ch.recv(cls, timeout=timeout)
        data = getattr(msg, attr)
        if msg.chunk != k or len(data) != m * width:
            raise ProtocolError(f"{ch.peer.name} sent a malformed chunk {msg.chunk} of {cls.__name__}")
        yield data


# --------------------------------------------------------------------------- two-party core


def _two_party(
    ch: Channel,
    role: str,
    canon: psi.CanonicalIds,
    *,
    protocol: str,
    mode: str,
    identity: psi.IdentityKey | None,
    peer_identity: bytes | None,
    chunk_size: int,
    timeout: float | None,
    progress: ProgressFn | None,
) -> tuple[np.ndarray | None, int | None, int]:
    """Run one pairwise session; return (own positions in canonical order | None, size | None, peer size)."""
    _validate_config(protocol, mode)
    tick = progress or (lambda _n: None)
    pair_mode = "both" if mode == "all" else mode
    n = len(canon)
    eph = psi.EphemeralKey() if protocol == "hash" else None
    if eph is not None and (identity is None or peer_identity is None):
        raise ProtocolError("keyed-hash PSI needs this party's identity key and the peer's pinned identity")
    hello = Hello(protocol, mode, PROTOCOL_VERSION, role, n, chunk_size, os.urandom(16),
                  eph.public_bytes if eph else b"", b"")
    if eph is not None and identity is not None:
        hello = dataclasses.replace(hello, signature=identity.sign(_signed_bytes(hello, ch.run_id)))
    ch.send(hello)
    peer = ch.recv(Hello, timeout=timeout)
    check_hello(hello, peer)
    i_learn = role == ACTIVE or pair_mode == "both"
    peer_learns = role == PASSIVE or pair_mode == "both"

    if protocol == "hash":
        assert eph is not None and peer_identity is not None
        psi.verify_identity(peer_identity, peer.signature, _signed_bytes(peer, ch.run_id))
        first, second = (hello, peer) if role == ACTIVE else (peer, hello)
        key = psi.derive_psi_key(eph.exchange(peer.ephemeral_public),
                                 _signed_bytes(first, ch.run_id) + _signed_bytes(second, ch.run_id))
        ch.hold("psi_key", key)
        tags = psi.digests_to_array(psi.keyed_digests(key, canon.encoded))
        if peer_learns:
            shuffled = tags[psi.random_permutation(n)]
            for k, s in enumerate(range(0, n, chunk_size)):
                ch.send(TagChunk(k, shuffled[s : s + chunk_size].tobytes()))
        tick(n)
        if not i_learn:
            return None, None, peer.set_size
        lengths = _chunk_lengths(peer.set_size, peer.chunk_size)
        peer_tags = psi.digests_to_array(b"".join(
            _recv_chunks(ch, TagChunk, "tags", lengths, psi.DIGEST_BYTES, timeout)))
        tick(peer.set_size)
        pos = psi.match_digests(tags, peer_tags)
        return pos, len(pos), peer.set_size

    # ECDH
    secret = psi.generate_secret()
    perm = psi.random_permutation(n)
    ch.hold("ecdh_secret", secret)
    ch.hold("send_order", perm)
    for k, pts in enumerate(psi.blind_stream(secret, canon.encoded, perm, chunk_size)):
        ch.send(BlindedChunk(k, pts))
        tick(len(pts) // psi.POINT_BYTES)
    peer_lengths = _chunk_lengths(peer.set_size, peer.chunk_size)
    incoming = _recv_chunks(ch, BlindedChunk, "points", peer_lengths, psi.POINT_BYTES, timeout)
    shuffle_back = role == PASSIVE and pair_mode == "size"
    peer_digests = bytearray()
    held: list[bytes] = []
    for k, dig in enumerate(psi.reblind_stream(secret, incoming, peer.set_size)):
        if i_learn:
            peer_digests += dig
        if shuffle_back:
            held.append(dig)
        elif peer_learns:
            ch.send(DoubledChunk(k, dig))
        tick(len(dig) // psi.DIGEST_BYTES)
    del secret
    if shuffle_back:
        # One global reshuffle: a per-chunk shuffle would tell the active party which of its
        # (known) chunk members matched.
        arr = psi.digests_to_array(b"".join(held))
        arr = arr[psi.random_permutation(len(arr))]
        for k, s in enumerate(range(0, len(arr), peer.chunk_size)):
            ch.send(DoubledShuffledChunk(k, arr[s : s + peer.chunk_size].tobytes()))
    if not i_learn:
        if pair_mode == "size":
            card = ch.recv(Cardinality, timeout=timeout)
            if not 0 <= card.size <= min(n, peer.set_size):
                raise ProtocolError("peer reported an impossible intersection size")
            return None, card.size, peer.set_size
        return None, None, peer.set_size
    peer_arr = psi.digests_to_array(peer_digests)
    own_lengths = _chunk_lengths(n, chunk_size)
    if pair_mode == "size":
        own_shuffled = psi.digests_to_array(b"".join(_recv_chunks(
            ch, DoubledShuffledChunk, "digests", own_lengths, psi.DIGEST_BYTES, timeout)))
        size = len(psi.match_digests(own_shuffled, peer_arr))
        ch.send(Cardinality(size))
        return None, size, peer.set_size
    own = np.empty(n, dtype=psi.DIGEST_DTYPE)
    chunks = _recv_chunks(ch, DoubledChunk, "digests", own_lengths, psi.DIGEST_BYTES, timeout)
    for k, data in enumerate(chunks):
        start = k * chunk_size
        own[perm[start : start + own_lengths[k]]] = psi.digests_to_array(data)
    pos = psi.match_digests(own, peer_arr)
    return pos, len(pos), peer.set_size


def _canon(ids: Sequence[Any] | psi.CanonicalIds, duplicates: str, strip: bool) -> psi.CanonicalIds:
    if isinstance(ids, psi.CanonicalIds):
        return ids
    return psi.canonicalize_ids(ids, duplicates=duplicates, strip=strip)  # type: ignore[arg-type]


def _result(ch_or_name: str, role: str, protocol: str, mode: str, canon: psi.CanonicalIds,
            peer_sizes: dict[str, int], pos: np.ndarray | None, size: int | None) -> AlignmentResult:
    rows = None if pos is None else canon.rows[pos]
    return AlignmentResult(ch_or_name, role, protocol, mode, len(canon), canon.n_input,
                           peer_sizes, size, rows)


# --------------------------------------------------------------------------- roles


def run_active(
    channels: Mapping[str, Channel],
    ids: Sequence[Any] | psi.CanonicalIds,
    *,
    protocol: str = "ecdh",
    mode: str = "both",
    identity: psi.IdentityKey | None = None,
    peer_identity: bytes | None = None,
    duplicates: str = "error",
    strip: bool = False,
    chunk_size: int = psi.CHUNK_SIZE,
    timeout: float | None = None,
    progress: ProgressFn | None = None,
) -> AlignmentResult:
    """The active party of a two-party alignment over its single channel."""
    (peer_name, ch), = channels.items()
    canon = _canon(ids, duplicates, strip)
    pos, size, peer_size = _two_party(ch, ACTIVE, canon, protocol=protocol, mode=mode,
                                      identity=identity, peer_identity=peer_identity,
                                      chunk_size=chunk_size, timeout=timeout, progress=progress)
    return _result(ch.local.name, ACTIVE, protocol, mode, canon, {peer_name: peer_size}, pos, size)


def run_passive(
    channels: Mapping[str, Channel],
    ids: Sequence[Any] | psi.CanonicalIds,
    *,
    protocol: str = "ecdh",
    mode: str = "both",
    identity: psi.IdentityKey | None = None,
    peer_identity: bytes | None = None,
    duplicates: str = "error",
    strip: bool = False,
    chunk_size: int = psi.CHUNK_SIZE,
    timeout: float | None = None,
    progress: ProgressFn | None = None,
) -> AlignmentResult:
    """A passive party; in mode ``all`` it then receives the all-party order."""
    (peer_name, ch), = channels.items()
    canon = _canon(ids, duplicates, strip)
    pos, size, peer_size = _two_party(ch, PASSIVE, canon, protocol=protocol, mode=mode,
                                      identity=identity, peer_identity=peer_identity,
                                      chunk_size=chunk_size, timeout=timeout, progress=progress)
    if mode == "all":
        assert pos is not None
        order = ch.recv(GlobalOrder, timeout=timeout).positions
        if order.ndim != 1 or (len(order) and (order.min() < 0 or order.max() >= len(pos))) \
                or len(np.unique(order)) != len(order):
            raise ProtocolError("global order from the active party is not a valid selection")
        pos = pos[order.astype(np.int64)]
        size = len(pos)
    return _result(ch.local.name, PASSIVE, protocol, mode, canon, {peer_name: peer_size}, pos, size)


def run_active_multiparty(
    channels: Mapping[str, Channel],
    ids: Sequence[Any] | psi.CanonicalIds,
    *,
    protocol: str = "ecdh",
    identities: tuple[psi.IdentityKey, Mapping[str, bytes]] | None = None,
    duplicates: str = "error",
    strip: bool = False,
    chunk_size: int = psi.CHUNK_SIZE,
    timeout: float | None = None,
) -> AlignmentResult:
    """Active party with 2+ passive parties: pairwise PSI, then the all-party order.

    The all-party order is the first pairwise session's canonical order restricted to
    the rows common to every pairwise intersection.
    """
    canon = _canon(ids, duplicates, strip)
    pair_rows: dict[str, np.ndarray] = {}
    peer_sizes: dict[str, int] = {}
    for name in sorted(channels):
        ident, peer_ident = (identities[0], identities[1][name]) if identities else (None, None)
        pos, _, peer_sizes[name] = _two_party(
            channels[name], ACTIVE, canon, protocol=protocol, mode="all", identity=ident,
            peer_identity=peer_ident, chunk_size=chunk_size, timeout=timeout, progress=None)
        assert pos is not None
        pair_rows[name] = pos
    names = sorted(channels)
    common = set(pair_rows[names[0]].tolist()) if names else set()
    for name in names[1:]:
        common &= set(pair_rows[name].tolist())
    final = np.asarray([p for p in pair_rows[names[0]].tolist() if p in common], dtype=np.int64) \
        if names else np.zeros(0, dtype=np.int64)
    for name in names:
        where = {p: i for i, p in enumerate(pair_rows[name].tolist())}
        positions = np.asarray([where[p] for p in final.tolist()], dtype=np.uint32)
        channels[name].send(GlobalOrder(positions))
    return _result(next(iter(channels.values())).local.name if channels else ACTIVE, ACTIVE,
                   protocol, "all", canon, peer_sizes, final, len(final))


# --------------------------------------------------------------------------- local runs


def run_local(
    active_ids: Sequence[Any] | psi.CanonicalIds,
    passive_ids: Sequence[Any] | psi.CanonicalIds,
    *,
    protocol: str = "ecdh",
    mode: str = "both",
    duplicates: str = "error",
    strip: bool = False,
    chunk_size: int = psi.CHUNK_SIZE,
    timeout: float = DEFAULT_TIMEOUT,
    progress: ProgressFn | None = None,
    tap: AuditTap | None = None,
) -> LocalRun:
    """Both parties in-process over channels; identities are generated and pinned here.

    ``tap`` (audits) keeps what each party received and the PSI secrets it held.
    """
    _validate_config(protocol, mode)
    if mode == "all":
        raise ProtocolError("mode 'all' is for 3+ parties: use run_multiparty_local")
    a = psi.canonicalize_ids(active_ids, duplicates=duplicates, strip=strip) \
        if not isinstance(active_ids, psi.CanonicalIds) else active_ids  # type: ignore[arg-type]
    p = psi.canonicalize_ids(passive_ids, duplicates=duplicates, strip=strip) \
        if not isinstance(passive_ids, psi.CanonicalIds) else passive_ids  # type: ignore[arg-type]
    net = LocalNetwork([Endpoint(ACTIVE, ACTIVE), Endpoint(PASSIVE, PASSIVE)], timeout=timeout,
                       run_id=os.urandom(8).hex(), transcript=Transcript(tap))
    id_a, id_p = psi.IdentityKey.generate(), psi.IdentityKey.generate()
    common = {"protocol": protocol, "mode": mode, "chunk_size": chunk_size}
    t0 = time.perf_counter()
    results = run_parties({
        ACTIVE: lambda: run_active(net.channels(ACTIVE), a, identity=id_a,
                                   peer_identity=id_p.public_bytes, progress=progress, **common),
        PASSIVE: lambda: run_passive(net.channels(PASSIVE), p, identity=id_p,
                                     peer_identity=id_a.public_bytes, progress=progress, **common),
    }, network=net)
    return LocalRun(results, net.transcript, time.perf_counter() - t0)


def run_multiparty_local(
    id_sets: Sequence[Sequence[Any]],
    *,
    protocol: str = "ecdh",
    duplicates: str = "error",
    strip: bool = False,
    chunk_size: int = psi.CHUNK_SIZE,
    timeout: float = DEFAULT_TIMEOUT,
) -> LocalRun:
    """All-party intersection of 3+ parties: ``id_sets[0]`` is the active party's."""
    _validate_config(protocol, "all")
    if len(id_sets) < 3:
        raise ProtocolError("the multi-party mode needs at least three parties")
    canons = [psi.canonicalize_ids(s, duplicates=duplicates, strip=strip) for s in id_sets]  # type: ignore[arg-type]
    passives = [f"passive-{j}" for j in range(len(id_sets) - 1)]
    parties = [Endpoint(ACTIVE, ACTIVE)] + [Endpoint(n, PASSIVE) for n in passives]
    net = LocalNetwork(parties, links=[(ACTIVE, n) for n in passives], timeout=timeout,
                       run_id=os.urandom(8).hex())
    idents = {name: psi.IdentityKey.generate() for name in [ACTIVE, *passives]}
    tasks: dict[str, Callable[[], AlignmentResult]] = {
        ACTIVE: lambda: run_active_multiparty(
            net.channels(ACTIVE), canons[0], protocol=protocol, chunk_size=chunk_size,
            identities=(idents[ACTIVE], {n: idents[n].public_bytes for n in passives})),
    }
    for j, name in enumerate(passives):
        tasks[name] = (lambda j=j, name=name: run_passive(
            net.channels(name), canons[j + 1], protocol=protocol, mode="all",
            identity=idents[name], peer_identity=idents[ACTIVE].public_bytes,
            chunk_size=chunk_size))
    t0 = time.perf_counter()
    results = run_parties(tasks, network=net)
    return LocalRun(results, net.transcript, time.perf_counter() - t0)


# --------------------------------------------------------------------------- CSV files


@dataclass(frozen=True)
class IdTable:
    """A CSV read as raw strings: header, rows (verbatim cells) and the ID column."""

    path: Path
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    id_column: str

    @property
    def ids(self) -> list[str]:
        i = self.header.index(self.id_column)
        return [r[i] for r in self.rows]


def read_id_table(path: str | os.PathLike[str], id_column: str) -> IdTable:
    """Read a party's CSV with every cell kept as its exact string (IDs may be non-numeric).

    Non-UTF-8 bytes raise :class:`InputDataError` naming the line; so do a missing ID
    column and rows whose field count differs from the header's.
    """
    path = Path(path)
    header, records = read_csv_strings(path)
    if id_column not in header:
        raise InputDataError(f"{path}: no ID column {id_column!r} (columns: {list(header)})")
    rows = [row for _, row in records]
    return IdTable(path, header, tuple(rows), id_column)


def _canon_table(t: IdTable, duplicates: str, strip: bool) -> psi.CanonicalIds:
    try:
        return psi.canonicalize_ids(t.ids, duplicates=duplicates, strip=strip,  # type: ignore[arg-type]
                                    row_label="line", first_row=2)
    except InputDataError as exc:
        raise InputDataError(f"{t.path}: {exc}") from None


def align_files(
    left: str | os.PathLike[str],
    right: str | os.PathLike[str],
    *,
    id_column: str,
    right_id_column: str | None = None,
    protocol: str = "ecdh",
    reveal: str = "both",
    out_dir: str | os.PathLike[str],
    duplicates: str = "error",
    strip: bool = False,
    progress: ProgressFn | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> dict[str, Any]:
    """Align two CSV files (left = active, right = passive) and write the aligned rows.

    Writes ``<stem>.aligned.csv`` (all columns verbatim, intersection rows in the common
    order) for each party that learns the intersection, atomically. Returns a summary.
    """
    t0 = time.perf_counter()
    lt = read_id_table(left, id_column)
    rt = read_id_table(right, right_id_column or id_column)
    lc, rc = _canon_table(lt, duplicates, strip), _canon_table(rt, duplicates, strip)
    run = run_local(lc, rc, protocol=protocol, mode=reveal, progress=progress, timeout=timeout)
    res_l, res_r = run.results[ACTIVE], run.results[PASSIVE]
    out = Path(out_dir)
    outputs: dict[str, str] = {}
    for key, table, res in (("left", lt, res_l), ("right", rt, res_r)):
        if res.rows is None:
            continue
        path = out / f"{table.path.stem}.aligned.csv"
        write_csv_atomic(path, table.header, (table.rows[i] for i in res.rows.tolist()))
        outputs[key] = str(path)
    size = res_l.size if res_l.size is not None else res_r.size
    return {
        "protocol": protocol,
        "reveal": reveal,
        "left_size": len(lc),
        "right_size": len(rc),
        "intersection": size,
        "bytes_sent": run.transcript.total_bytes,
        "seconds": round(time.perf_counter() - t0, 3),
        "outputs": outputs,
        "_run": run,
    }


# --------------------------------------------------------------------------- demo and audit


def _data_dir() -> Any:
    return importlib.resources.files("vflcrypto") / "data"


def demo_step(ctx: Any) -> dict[str, Any]:
    """Align the bundled bank.csv (active) and shop.csv (passive); both learn the rows."""
    data = _data_dir()
    with importlib.resources.as_file(data / "bank.csv") as bank, \
            importlib.resources.as_file(data / "shop.csv") as shop:
        summary = align_files(bank, shop, id_column="id", protocol="ecdh", reveal="both",
                              out_dir=ctx.workdir)
    run: LocalRun = summary.pop("_run")
    ctx.state["aligned"] = {"bank": Path(summary["outputs"]["left"]),
                            "shop": Path(summary["outputs"]["right"])}
    ctx.say(f"bank: {summary['left_size']} IDs, shop: {summary['right_size']} IDs, "
            f"common: {summary['intersection']} (ECDH-PSI over X25519, both learn)")
    ctx.say(f"{summary['bytes_sent']:,} bytes on the wire in {summary['seconds']:.2f} s; "
            f"aligned files in {ctx.workdir}")
    ctx.say(audit(run.transcript).to_text())
    return {k: summary[k] for k in ("left_size", "right_size", "intersection", "bytes_sent")}


def _demo_ids() -> tuple[list[str], list[str]]:
    data = _data_dir()
    with importlib.resources.as_file(data / "bank.csv") as bank, \
            importlib.resources.as_file(data / "shop.csv") as shop:
        return read_id_table(bank, "id").ids, read_id_table(shop, "id").ids


def _split(blob: bytes, width: int = psi.DIGEST_BYTES) -> list[bytes]:
    return [blob[i : i + width] for i in range(0, len(blob), width)]


def _received_blob(tap: AuditTap, party: str, kind: type, attr: str) -> bytes:
    return b"".join(getattr(m, attr) for m in tap.received(party, kind))


@dataclass(frozen=True)
class _Observer:
    """One party's view of an ECDH session, from the tap: what it received and holds."""

    name: str
    own: list[bytes]  # its canonical IDs, in input order
    secret: bytes
    order: np.ndarray  # its sending order of its own IDs
    blinded: list[bytes]  # the peer's blinded points, in arrival order
    doubled: list[bytes]  # digests of its own points re-blinded by the peer, in arrival order

    @classmethod
    def of(cls, tap: AuditTap, name: str, own: list[bytes], doubled_kind: type = DoubledChunk) -> _Observer:
        blinded = _received_blob(tap, name, BlindedChunk, "points")
        return cls(name, own, tap.held_one(name, "ecdh_secret"), tap.held_one(name, "send_order"),
                   _split(blinded, psi.POINT_BYTES), _split(_received_blob(tap, name, doubled_kind, "digests")))

    def own_blinded(self) -> list[bytes]:
        """Its own blinded points in sending order (it can recompute them: they are its own)."""
        return _split(psi.blind_ids(self.secret, [self.own[j] for j in self.order]), psi.POINT_BYTES)

    def common_positions(self) -> dict[int, bytes]:
        """Arrival position of each peer point it can identify (the common IDs) -> that ID."""
        mine = {d: self.own[self.order[i]] for i, d in enumerate(self.doubled)}
        rebl = _split(psi.reblind_points(self.secret, b"".join(self.blinded)))
        return {j: mine[d] for j, d in enumerate(rebl) if d in mine}


def _unblinded_point(id_bytes: bytes) -> bytes:
    """H(x) as the curve point X25519 reads it (RFC 7748 ignores the top bit): an unblinded ID."""
    u = bytearray(psi.hash_to_u(id_bytes))
    u[31] &= 0x7F
    return bytes(u)


def _dictionary_finding(obs: _Observer, candidates: list[bytes], peer_label: str) -> EmpiricalFinding:
    """Match every candidate ID, hashed and blinded as far as ``obs`` can, against the peer's points.

    Without the peer's scalar a candidate's blinded point k_p·H(c) is out of reach; the
    attack tries H(c) (the peer did not blind) and k_o·H(c) with the observer's own
    scalar (the peer reused it). Only candidates outside the observer's own set count.
    """
    received = set(obs.blinded)
    own = set(obs.own)
    outside = [c for c in candidates if c not in own]
    mine = set(_split(psi.blind_ids(obs.secret, outside), psi.POINT_BYTES)) if outside else set()
    hits = sum(_unblinded_point(c) in received for c in outside) + len(mine & received)
    return EmpiricalFinding(
        obs.name, f"dictionary attack on the {peer_label}'s blinded IDs", float(hits), 0.0,
        f"{len(outside)} candidate IDs outside its own set, hashed (unblinded) and blinded with its "
        f"own scalar, matched against the {len(obs.blinded)} points the {peer_label} sent",
        attacks=("align.blinded",), protection=Protection.BLINDED, flagged=hits > 0,
        samples=len(outside), detects="any one candidate ID recovered")


def _linkage_finding(first: _Observer, second: _Observer, peer_label: str) -> EmpiricalFinding:
    """Link the peer's blinded IDs across two sessions (equal points = the same ID)."""
    linked = len(set(first.blinded) & set(second.blinded))
    return EmpiricalFinding(
        first.name, f"{peer_label}'s IDs linked across two sessions", float(linked), 0.0,
        f"of the {len(second.blinded)} points the {peer_label} sent in a second session, {linked} "
        "equal a point of the first: a scalar reused across sessions links every ID it blinds, "
        "common or not",
        attacks=("align.blinded",), protection=Protection.BLINDED, flagged=linked > 0,
        samples=len(second.blinded), detects="any one ID linked")


def _unblinded_finding(obs: _Observer, kind: str, doubled: list[bytes]) -> EmpiricalFinding:
    """Do the peer's re-blinded digests equal the observer's own single-blinded points?"""
    own = {psi.point_digest(pt) for pt in obs.own_blinded()}
    hits = sum(d in own for d in doubled)
    return EmpiricalFinding(
        obs.name, f"{kind}: re-blinding by the peer's scalar", hits / max(1, len(doubled)), 0.0,
        f"{hits} of {len(doubled)} digests equal the digest of the observer's own blinded point: "
        "the peer applied no secret scalar (its other points are then plain hashes)",
        attacks=(kind,), protection=Protection.BLINDED, flagged=hits > 0, samples=len(doubled),
        detects="any one digest without the peer's scalar")


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """Align the demo data and attack what each party received.

    Sessions: ECDH both-learn twice (the second for cross-session linkage), ECDH
    cardinality-only, keyed-hash both-learn; every attack reads that session's tap.
    ``key_bits`` and ``allow_insecure`` are unused (PSI has no Paillier key); kept for the
    common signature of audits.
    """
    bank, shop = _demo_ids()
    enc = {ACTIVE: psi.canonicalize_ids(bank).encoded, PASSIVE: psi.canonicalize_ids(shop).encoded}
    peer = {ACTIVE: PASSIVE, PASSIVE: ACTIVE}
    taps = [AuditTap() for _ in range(4)]
    run = run_local(bank, shop, protocol="ecdh", mode="both", tap=taps[0])
    run_local(bank, shop, protocol="ecdh", mode="both", tap=taps[1])
    size_run = run_local(bank, shop, protocol="ecdh", mode="size", tap=taps[2])
    hash_run = run_local(bank, shop, protocol="hash", mode="both", tap=taps[3])
    universe = sorted(set(enc[ACTIVE]) | set(enc[PASSIVE]))
    findings: list[EmpiricalFinding] = []
    for me in (ACTIVE, PASSIVE):
        obs = _Observer.of(taps[0], me, enc[me])
        findings.append(_dictionary_finding(obs, universe, peer[me]))
        findings.append(_linkage_finding(obs, _Observer.of(taps[1], me, enc[me]), peer[me]))
        findings.append(_unblinded_finding(obs, "align.doubled", obs.doubled))
        row_of = {x: i for i, x in enumerate(enc[peer[me]])}
        hits = obs.common_positions()
        findings.append(order_finding(
            me, f"order of the {peer[me]}'s blinded IDs", "align.blinded",
            np.fromiter(hits, dtype=np.int64), np.asarray([row_of[x] for x in hits.values()]),
            f"Spearman rho between the arrival position of the {len(hits)} peer points it identified "
            f"(the common IDs) and their row in the {peer[me]}'s file"))
    findings += _cardinality_findings(taps[2], enc, size_run.results[ACTIVE].size or 0)
    findings += _keyed_hash_findings(taps[3], enc, universe)
    merged = Transcript()
    for r in (run, size_run, hash_run):
        merged.merge(r.transcript)
    return AuditOutcome("align", audit(merged), tuple(findings))


def _cardinality_findings(tap: AuditTap, enc: dict[str, list[bytes]], size: int) -> list[EmpiricalFinding]:
    """Cardinality mode: can the active party tell *which* of its rows are common?"""
    obs = _Observer.of(tap, ACTIVE, enc[ACTIVE], DoubledShuffledChunk)
    peer_digests = set(_split(psi.reblind_points(obs.secret, b"".join(obs.blinded))))
    # Read the reshuffled digests as if they were still in its own sending order.
    guess = np.zeros(len(obs.own), dtype=np.int8)
    for i, d in enumerate(obs.doubled):
        if d in peer_digests:
            guess[obs.order[i]] = 1
    truth = np.isin(np.asarray(obs.own, dtype=object), np.asarray(enc[PASSIVE], dtype=object)).astype(np.int8)
    q = size / max(1, len(obs.own))
    return [
        _unblinded_finding(obs, "align.doubled_shuffled", obs.doubled),
        accuracy_finding(
            ACTIVE, "which own rows are common (cardinality mode)", guess, truth, q * q + (1 - q) ** 2,
            attacks=("align.doubled_shuffled",), protection=Protection.SHUFFLED,
            description="marks its rows common where the reshuffled double-blinded digests, read in "
                        "its own sending order, match the peer's; baseline = the accuracy of a "
                        "random guess with the known intersection size"),
    ]


def _keyed_hash_findings(tap: AuditTap, enc: dict[str, list[bytes]], universe: list[bytes]
                         ) -> list[EmpiricalFinding]:
    """Keyed-hash PSI: the order of the peer's tags, and the dictionary attack the key allows."""
    out = []
    for me, peer in ((ACTIVE, PASSIVE), (PASSIVE, ACTIVE)):
        key = tap.held_one(me, "psi_key")
        tags = _split(_received_blob(tap, me, TagChunk, "tags"))
        own_tag = dict(zip(_split(psi.keyed_digests(key, enc[me])), enc[me], strict=True))
        row_of = {x: i for i, x in enumerate(enc[peer])}
        pos = [j for j, t in enumerate(tags) if t in own_tag]
        out.append(order_finding(
            me, f"order of the {peer}'s keyed-hash tags", "align.tags", np.asarray(pos),
            np.asarray([row_of[own_tag[tags[j]]] for j in pos]),
            f"Spearman rho between the arrival position of the {len(pos)} tags it matched and their "
            f"row in the {peer}'s file"))
    key = tap.held_one(ACTIVE, "psi_key")
    outside = [c for c in universe if c not in set(enc[ACTIVE])]
    received = set(_split(_received_blob(tap, ACTIVE, TagChunk, "tags")))
    hits = sum(t in received for t in _split(psi.keyed_digests(key, outside)))
    out.append(EmpiricalFinding(
        ACTIVE, "dictionary attack on the passive party's keyed-hash tags", float(hits), 0.0,
        f"with the shared HMAC key, {hits} of {len(outside)} candidate IDs outside its own set match "
        "a received tag: keyed-hash PSI does not protect guessable IDs from the other party",
        attacks=("align.tags",), protection=None, flagged=hits > 0, samples=len(outside),
        detects="any one candidate ID recovered"))
    return out


SPEC = ProtocolSpec(
    name="align",
    title="Entity alignment (ECDH PSI)",
    roles={},
    run_local=run_local,
    audit=audit_run,
    demo=demo_step,
    demo_order=10,
)
