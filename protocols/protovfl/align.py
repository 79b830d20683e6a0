"""All-party-only alignment of prototype VFL: every party learns A = ∩_m I(m) and nothing about pairwise overlaps.

The masked-table intersection of :mod:`vflcrypto.psi.mpsi`, with the server S as its
non-colluding aggregator, as named steps:

* party m: ``start`` (0: an ephemeral X25519 key and its set size to S) → ``on_setup``
  (1: pairwise seeds with every other party by X25519 + HKDF; party-0 draws the table key k
  and wraps it for each other party with AES-256-GCM under their pairwise key; party-0's
  table) → ``on_wrapped_key`` (2: the other parties unwrap k; their tables) →
  ``on_zero_cells`` (3: read off A; party-0 sends A's IDs to S) → ``on_labelled`` (4: the
  rows of A that the server labels);
* server S: ``start`` → ``on_advert`` (0, per party) → ``on_wrapped`` (1: relay the wrapped
  keys) → ``on_table`` (2, per party; then 3: the zero cells to every party) →
  ``on_aligned_ids`` (3: attach labels; 4: which rows of A it labels).

Every party ends with the rows of its own file that are in A and labelled, in canonical
ID order (the same order at every party and in every run). The server ends with A's IDs
and labels: it needs them to label the aligned rows (its labels are keyed by ID). The
parties' table key k never reaches S; S is semi-honest and must not collude with a
party (with k and that party's seeds, S tests guesses against the intersection of the
other parties' sets; their tables one by one stay uniform with three or more parties:
see :mod:`vflcrypto.psi.mpsi`, measured by the audit). The adverts are not
signed: a server that substitutes keys (an active attacker) is outside this model.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from vflcrypto.data.tables import PartyTable, train_test_split
from vflcrypto.data.validate import class_labels, refuse_label_column, refuse_missing_values
from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.psi import mpsi
from vflcrypto.psi.primitives import canonical_id
from vflcrypto.runtime.channel import DEFAULT_TIMEOUT, AuditTap, Endpoint, LocalNetwork, Transcript, run_parties
from vflcrypto.runtime.steps import Next, Role, done, drive, send, then
from vflcrypto.sharing.masking import agree_seed, seed_context

from .._repvfl import PartyData, ServerData, check_labels, party_names
from .messages import (
    PARTY,
    SERVER,
    PsiAdvert,
    PsiAlignedIds,
    PsiLabelled,
    PsiSetup,
    PsiTable,
    PsiWrappedKey,
    PsiWrappedKeys,
    PsiZeroCells,
)

__all__ = ["AlignRun", "AlignedInputs", "PartyAlignment", "PsiPartyRole", "PsiServerRole", "ServerAlignment",
           "aligned_inputs", "run_align_local", "session_id", "unaligned_rows", "unwrap_key", "wrap_key"]

MISS_BITS = 40
_WRAP_INFO = b"vflcrypto.protovfl.wrap.v1|"


def _wrap_cipher(pair_seed: bytes) -> AESGCM:
    return AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_WRAP_INFO).derive(pair_seed))


def wrap_key(key: bytes, pair_seed: bytes, aad: bytes) -> bytes:
    """AES-256-GCM of the table key under a key derived from a pairwise seed (nonce ‖ ciphertext ‖ tag)."""
    nonce = secrets.token_bytes(12)
    return nonce + _wrap_cipher(pair_seed).encrypt(nonce, key, aad)


def unwrap_key(wrapped: bytes, pair_seed: bytes, aad: bytes) -> bytes:
    """Inverse of :func:`wrap_key`; :class:`ProtocolError` when it was tampered with or is for another party."""
    if not isinstance(wrapped, bytes) or len(wrapped) != 12 + mpsi.KEY_BYTES + 16:
        raise ProtocolError("a wrapped table key has the wrong length")
    try:
        key = _wrap_cipher(pair_seed).decrypt(wrapped[:12], wrapped[12:], aad)
    except InvalidTag:
        raise ProtocolError("the wrapped table key does not authenticate (tampered, or not for this party)") from None
    return key


def _aad(run_id: str, receiver: str) -> bytes:
    return f"protovfl.psi|{run_id}|{receiver}".encode()


# --------------------------------------------------------------------------- server


@dataclass
class _ServerState:
    k: int = 0
    keys: list[bytes] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    tables: list[np.ndarray] = field(default_factory=list)
    zero: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass
class ServerAlignment:
    """The server's result: A's IDs in canonical order, which of them it labels, and the session id."""

    ids: list[str]
    labelled: np.ndarray
    session: str = ""


def session_id(public_keys: Sequence[bytes]) -> str:
    """A run id every party and the server derive alike: a hash of the alignment's fresh public keys.

    Training binds its secure-aggregation signatures to it (no replay across runs).
    """
    import hashlib

    return hashlib.sha256(b"vflcrypto.protovfl.session|" + b"".join(public_keys)).hexdigest()[:32]


class PsiServerRole(Role[_ServerState]):
    """S as the aggregator: it relays keys, sums the tables, returns the zero cells, labels A."""

    role = SERVER
    State = _ServerState

    def __init__(self, labelled_ids: Sequence[str], *, parties: Sequence[str], max_ids: int = 10_000_000,
                 name: str = SERVER) -> None:
        super().__init__(name)
        self.parties, self.max_ids = list(parties), max_ids
        if len(self.parties) < 2:
            raise InputDataError("the all-party alignment needs at least two parties")
        self.labelled = {canonical_id(i) for i in labelled_ids}
        self.params: mpsi.MPSIParams | None = None

    def start(self) -> Next:
        return then([], self.parties[0], PsiAdvert, "on_advert")

    def on_advert(self, msg: PsiAdvert) -> Next:
        """Step 0: party k's public key and set size; after the last, the setup to every party."""
        st = self.state
        who = self.parties[st.k]
        if not isinstance(msg.public_key, bytes) or len(msg.public_key) != 32 or not 0 <= msg.size <= self.max_ids:
            raise ProtocolError(f"{who} sent a malformed advert (a 32-byte key and 0..{self.max_ids} IDs)")
        st.keys.append(msg.public_key)
        st.sizes.append(int(msg.size))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], PsiAdvert, "on_advert")
        setup = PsiSetup(tuple(self.parties), tuple(st.keys), max(st.sizes), MISS_BITS)
        return then([send(p, setup) for p in self.parties], self.parties[0], PsiWrappedKeys, "on_wrapped")

    def _plan(self) -> mpsi.MPSIParams:
        return mpsi.plan(len(self.parties), max(self.state.sizes), miss_bits=MISS_BITS)

    def on_wrapped(self, msg: PsiWrappedKeys) -> Next:
        """Step 1: relay party-0's wrapped table key to each other party; then collect the tables."""
        if len(msg.wrapped) != len(self.parties) - 1:
            raise ProtocolError(f"{self.parties[0]} wrapped the table key for {len(msg.wrapped)} parties, "
                                f"expected {len(self.parties) - 1}")
        self.state.k = 0
        sends = [send(p, PsiWrappedKey(w)) for p, w in zip(self.parties[1:], msg.wrapped, strict=True)]
        return then(sends, self.parties[0], PsiTable, "on_table", patience=2.0)

    def on_table(self, msg: PsiTable) -> Next:
        """Step 2: party k's masked tables; after the last, step 3: the zero cells of their sum to every party."""
        st = self.state
        params = self._plan()
        a = np.asarray(msg.values)
        if a.shape != params.shape or a.dtype != np.uint32:
            raise ProtocolError(f"{self.parties[st.k]} sent tables of shape {a.shape} ({a.dtype}), "
                                f"expected {params.shape} uint32")
        st.tables.append(a.astype(np.uint64))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], PsiTable, "on_table", patience=2.0)
        st.zero = mpsi.combine(st.tables, params)
        self.hold("zero_cells", len(st.zero))
        st.tables = []
        return then([send(p, PsiZeroCells(st.zero)) for p in self.parties], self.parties[0], PsiAlignedIds,
                    "on_aligned_ids")

    def on_aligned_ids(self, msg: PsiAlignedIds) -> Next:
        """Step 3: A's IDs from party-0 (canonical order); step 4: which of them the server labels."""
        ids = list(msg.ids)
        canon = [canonical_id(i) for i in ids]
        if canon != sorted(set(canon)) or len(ids) > len(self.state.zero):
            raise ProtocolError(f"{self.parties[0]} sent aligned IDs that are repeated, unsorted, or more than the "
                                "zero cells")
        labelled = np.asarray([c in self.labelled for c in canon], bool)
        return done(ServerAlignment(ids, labelled, session_id(self.state.keys)),
                    [send(p, PsiLabelled(labelled)) for p in self.parties])


# --------------------------------------------------------------------------- party


@dataclass
class PartyAlignment:
    """A party's result: its rows in A and those the server labels (both in canonical ID order), the session id."""

    aligned: np.ndarray
    rows: np.ndarray
    session: str = ""


@dataclass
class _PartyState:
    sk: bytes = b""
    key: bytes = b""
    seeds: list[bytes] = field(default_factory=list)
    max_size: int = 0
    session: str = ""
    placement: list[np.ndarray] = field(default_factory=list)
    aligned: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class PsiPartyRole(Role[_PartyState]):
    """Party m: its IDs go into masked tables; it learns which of its rows are on every party (and labelled)."""

    role = PARTY
    State = _PartyState

    def __init__(self, ids: Sequence[str], *, index: int, name: str | None = None, server: str = SERVER,
                 run_id: str = "") -> None:
        super().__init__(name or f"party-{index}")
        self.ids, self.index, self.server, self.run_id = list(ids), index, server, run_id
        self.canon = [canonical_id(i) for i in self.ids]  # once: the duplicate check and the canonical order
        if len(set(self.canon)) != len(self.canon):
            raise InputDataError(f"{self.name}: duplicate IDs")

    def start(self) -> Next:
        """Step 0: a fresh X25519 key and the set size to the server."""
        sk = X25519PrivateKey.generate()
        self.state.sk = sk.private_bytes_raw()
        return then([send(self.server, PsiAdvert(sk.public_key().public_bytes_raw(), len(self.ids)))],
                    self.server, PsiSetup, "on_setup", patience=2.0)

    def _params(self) -> mpsi.MPSIParams:
        n = len(self.state.seeds)
        return mpsi.plan(n, self.state.max_size, miss_bits=MISS_BITS)

    def on_setup(self, msg: PsiSetup) -> Next:
        """Step 1: pairwise seeds; party-0 wraps a fresh table key for every other party and sends its tables."""
        st = self.state
        n = len(msg.parties)
        if not 2 <= n <= 63 or len(msg.public_keys) != n or msg.parties[self.index:self.index + 1] != (self.name,) \
                or len(set(msg.parties)) != n or msg.miss_bits != MISS_BITS or msg.max_size < len(self.ids):
            raise ProtocolError(f"{self.name}: the alignment setup does not list this party at its place, or its "
                                "parameters differ")
        sk = X25519PrivateKey.from_private_bytes(st.sk)
        if msg.public_keys[self.index] != sk.public_key().public_bytes_raw():
            raise ProtocolError(f"{self.name}: the setup carries another key for this party")
        st.max_size = int(msg.max_size)
        st.session = session_id(msg.public_keys)
        seeds = []
        for j, (other, pk) in enumerate(zip(msg.parties, msg.public_keys, strict=True)):
            if j == self.index:
                seeds.append(b"")
                continue
            if not isinstance(pk, bytes) or len(pk) != 32:
                raise ProtocolError(f"{self.name}: a malformed public key for {other}")
            seeds.append(agree_seed(sk, X25519PublicKey.from_public_bytes(pk),
                                    seed_context(self.name, other, self.run_id, "protovfl.psi")))
        st.seeds = seeds
        if self.index != 0:
            return then([], self.server, PsiWrappedKey, "on_wrapped_key", patience=2.0)
        st.key = secrets.token_bytes(mpsi.KEY_BYTES)
        wrapped = tuple(wrap_key(st.key, seeds[j], _aad(self.run_id, msg.parties[j])) for j in range(1, n))
        return self._table([send(self.server, PsiWrappedKeys(wrapped))])

    def on_wrapped_key(self, msg: PsiWrappedKey) -> Next:
        """Step 2: unwrap party-0's table key; this party's tables."""
        st = self.state
        st.key = unwrap_key(msg.wrapped, st.seeds[0], _aad(self.run_id, self.name))
        return self._table([])

    def _table(self, sends: list[tuple[str, object]]) -> Next:
        st = self.state
        params = self._params()
        pairs = {j: s for j, s in enumerate(st.seeds) if j != self.index}
        values, placement = mpsi.encode(self.ids, self.index, params, st.key, pairs)
        st.placement = [np.asarray([list(t.keys()), list(t.values())], np.int64).reshape(2, -1)
                        for t in placement.rows]
        self.hold("tables", values)
        self.hold("table_key", st.key)  # its own secrets: what it would bring to a coalition with S
        self.hold("pair_seeds", pairs)
        wire = values.astype(np.uint32)  # field elements < 2^31: half the bytes of uint64
        return then([*sends, send(self.server, PsiTable(wire))], self.server, PsiZeroCells, "on_zero_cells",
                    patience=2.0 + len(st.seeds))

    def on_zero_cells(self, msg: PsiZeroCells) -> Next:
        """Step 3: the rows of this party in A (canonical order); party-0 also sends A's IDs to the server."""
        st = self.state
        cells = np.asarray(msg.cells)
        if cells.ndim != 1 or cells.dtype.kind not in "iu":
            raise ProtocolError(f"{self.name}: malformed zero cells")
        placement = mpsi.Placement(tuple({int(c): int(r) for c, r in zip(p[0], p[1], strict=True)}
                                         for p in st.placement))
        rows = mpsi.decode(placement, cells.astype(np.int64), self._params())
        st.aligned = rows[np.asarray(sorted(range(len(rows)), key=lambda r: self.canon[rows[r]]), np.int64)]
        self.hold("aligned_ids", [self.ids[i] for i in st.aligned])
        sends = []
        if self.index == 0:
            sends.append(send(self.server, PsiAlignedIds(tuple(self.ids[i] for i in st.aligned))))
        return then(sends, self.server, PsiLabelled, "on_labelled")

    def on_labelled(self, msg: PsiLabelled) -> Next:
        """Step 4: keep the rows of A that the server labels."""
        st = self.state
        mask = np.asarray(msg.labelled)
        if mask.dtype != bool or mask.shape != st.aligned.shape:
            raise ProtocolError(f"{self.name}: the server marked {mask.shape} rows, this party has "
                                f"{len(st.aligned)} aligned rows")
        return done(PartyAlignment(st.aligned, st.aligned[mask], st.session))


# --------------------------------------------------------------------------- in one process


@dataclass
class AlignRun:
    """The server's alignment, each party's rows (of its own IDs) and the transcript."""

    server: ServerAlignment
    parties: list[PartyAlignment]
    transcript: Transcript


def run_align_local(labelled_ids: Sequence[str], party_ids: Sequence[Sequence[str]], *,
                    timeout: float = DEFAULT_TIMEOUT, tap: AuditTap | None = None) -> AlignRun:
    """The all-party-only alignment with S and every party in this process."""
    names = party_names(len(party_ids))
    run_id = secrets.token_hex(8)
    net = LocalNetwork([Endpoint(SERVER, SERVER), *[Endpoint(p, PARTY) for p in names]],
                       links=[(SERVER, p) for p in names], timeout=timeout, transcript=Transcript(tap), run_id=run_id)
    tasks: dict[str, Callable[[], Any]] = {
        SERVER: lambda: drive(PsiServerRole(labelled_ids, parties=names), net.channels(SERVER))}

    def party(i: int, name: str, ids: Sequence[str]) -> Callable[[], Any]:
        return lambda: drive(PsiPartyRole(ids, index=i, name=name, run_id=run_id), net.channels(name))

    for i, (name, ids) in enumerate(zip(names, party_ids, strict=True)):
        tasks[name] = party(i, name, ids)
    res = run_parties(tasks, network=net)
    return AlignRun(res[SERVER], [res[n] for n in names], net.transcript)


@dataclass(frozen=True)
class AlignedInputs:
    """The protocol's inputs after the alignment, the alignment's bytes and its row counts."""

    server: ServerData
    parties: list[PartyData]
    psi_bytes: int
    n_aligned: int
    n_labelled: int


def unaligned_rows(table: PartyTable, aligned: np.ndarray) -> np.ndarray:
    """A party's rows outside A (a labelled-or-not row of A is not unaligned), in canonical ID order.

    Like the aligned rows: the local prototype step visits them in mini-batches, so their
    order shapes the model; in canonical ID order the same rows give the same model whatever
    the order of the party's file (and the bundled digits give the demo's model).
    """
    others = np.setdiff1d(np.arange(len(table)), aligned)
    canon = [canonical_id(table.ids[r]) for r in others]
    return others[np.asarray(sorted(range(len(others)), key=canon.__getitem__), dtype=np.int64)]


def aligned_inputs(labels: PartyTable, tables: Sequence[PartyTable], *, n_classes: int | None = None,
                   test_fraction: float = 0.2, split_seed: int = 0, test_ids: Sequence[str] | None = None,
                   timeout: float = DEFAULT_TIMEOUT) -> AlignedInputs:
    """Align by the all-party-only PSI, then split A's labelled rows into training and held-out rows (public seed).

    Each party's rows outside A are its unaligned rows U(m) (a row on two parties only is
    unaligned on both).
    """
    if labels.label is None:
        raise InputDataError("the server's file needs the label column")
    if len(tables) < 2:
        raise InputDataError("prototype VFL needs at least two party files")
    class_labels(labels, n_classes=n_classes)  # integers 0..C-1, before anything is sized by C
    for t in tables:
        refuse_label_column(t, labels.label_name, "a party's file")
        refuse_missing_values(t)
    for t in (labels, *tables):
        t.check_unique_ids()
    run = run_align_local(list(labels.ids), [list(t.ids) for t in tables], timeout=timeout)
    ids = [i for i, keep in zip(run.server.ids, run.server.labelled, strict=True) if keep]
    if len(ids) < 3:
        raise InputDataError("fewer than 3 labelled IDs are on every party")
    by_id = {canonical_id(i): r for r, i in enumerate(labels.ids)}
    y_all = np.asarray(labels.label)[[by_id[canonical_id(i)] for i in ids]]
    if test_ids is not None:
        wanted = {canonical_id(i) for i in test_ids}
        is_test = np.asarray([canonical_id(i) in wanted for i in ids])
        train, test = np.flatnonzero(~is_test), np.flatnonzero(is_test)
    else:
        train, test = train_test_split(len(ids), test_fraction, seed=split_seed)
    C = int(n_classes) if n_classes is not None else int(np.max(y_all)) + 1
    parties = []
    for table, got in zip(tables, run.parties, strict=True):
        rows = got.rows
        if len(rows) != len(ids):
            raise ProtocolError("the parties disagree on the aligned rows")
        others = unaligned_rows(table, got.aligned)
        parties.append(PartyData(table.X[rows[train]], table.X[rows[test]], table.X[others]))
    server = ServerData(check_labels(y_all[train], C, "labels of the aligned rows"), C, y_all[test])
    return AlignedInputs(server, parties, run.transcript.total_bytes, len(run.server.ids), len(ids))

