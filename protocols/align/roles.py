"""The roles of entity alignment (each runs :class:`.session.Session` steps), and the local runs.

* :class:`ActiveRole` / :class:`PassiveRole`: the two sides of one pairwise session;
  in mode ``all`` the passive side then waits for ``align.global_order``
  (``on_global_order``, step 5);
* :class:`MultipartyActiveRole`: a session with every passive party in turn (sorted by
  name), then the all-party order to each.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import ProtocolError
from vflcrypto.psi import primitives as psi
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

from .kkrt import KkrtSession, KkrtState
from .messages import ACTIVE, PASSIVE, AlignmentResult, GlobalOrder
from .rr22 import Rr22Session, Rr22State
from .session import ProgressFn, Session, SessionState, validate_config

__all__ = ["ActiveRole", "LocalRun", "MultipartyActiveRole", "PassiveRole", "ProgressFn", "canonical",
           "run_active", "run_active_multiparty", "run_local", "run_multiparty_local", "run_passive"]


def canonical(ids: Sequence[Any] | psi.CanonicalIds, duplicates: str = "error", strip: bool = False
              ) -> psi.CanonicalIds:
    """``ids`` canonicalised (NFC text, decimal integers, duplicates refused unless ``keep_first``)."""
    if isinstance(ids, psi.CanonicalIds):
        return ids
    return psi.canonicalize_ids(ids, duplicates=duplicates, strip=strip)


def _result(name: str, role: str, protocol: str, mode: str, canon: psi.CanonicalIds,
            peer_sizes: dict[str, int], pos: np.ndarray | None, size: int | None) -> AlignmentResult:
    rows = None if pos is None else canon.rows[pos]
    return AlignmentResult(name, role, protocol, mode, len(canon), canon.n_input, peer_sizes, size, rows)


@dataclass
class _PairState:
    session: SessionState = field(default_factory=SessionState)
    kkrt: KkrtState = field(default_factory=KkrtState)
    rr22: Rr22State = field(default_factory=Rr22State)
    positions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # passive, mode "all"
    peer_size: int = 0


class _SessionRole(Role[Any]):
    """A role whose steps are those of the session with ``self.peer`` (forwarded)."""

    session: Session | KkrtSession
    # set by every subclass's __init__ (read by _session)
    canon: psi.CanonicalIds
    protocol: str
    chunk_size: int
    run_id: str
    progress: ProgressFn | None
    kkrt_stash: int = 0

    def _session(self, peer: str, state: SessionState, *, mode: str, identity: psi.IdentityKey | None,
                 peer_identity: bytes | None, finished: Callable[..., Next],
                 kkrt_state: KkrtState | None = None, rr22_state: Rr22State | None = None
                 ) -> Session | KkrtSession:
        # without a callback of the caller's, the IDs processed go to the command's progress reporter
        tick = self.progress or progress.counter(f"aligning ({self.protocol})", unit="id")
        if self.protocol == "rr22":
            return Rr22Session(self.role, peer, self.canon, mode=mode, chunk_size=self.chunk_size,
                               progress=tick, finished=finished, hold=self.hold, state=rr22_state)
        if self.protocol == "kkrt":
            return KkrtSession(self.role, peer, self.canon, mode=mode, chunk_size=self.chunk_size,
                               progress=tick, finished=finished, hold=self.hold,
                               stash=self.kkrt_stash, state=kkrt_state)
        return Session(self.role, peer, self.canon, protocol=self.protocol, mode=mode, identity=identity,
                       peer_identity=peer_identity, chunk_size=self.chunk_size, run_id=self.run_id,
                       progress=tick, finished=finished, hold=self.hold, state=state)

    def _step(self, name: str, msg: Any) -> Next:
        """Forward a received message to the session's step of that name (ECDH/hash or KKRT)."""
        step = getattr(self.session, name, None)
        if step is None:
            raise ProtocolError(f"{type(msg).__name__} is not a message of PSI protocol {self.protocol!r}")
        result: Next = step(msg)
        return result

    def on_hello(self, msg: Any) -> Next:
        """Step 1 received: the peer's hello (:meth:`Session.on_hello`)."""
        return self._step("on_hello", msg)

    def on_tags(self, msg: Any) -> Next:
        """Keyed-hash step 2: the peer's tags (:meth:`Session.on_tags`)."""
        return self._step("on_tags", msg)

    def on_blinded(self, msg: Any) -> Next:
        """Step 2 received: a chunk of the peer's blinded points (:meth:`Session.on_blinded`)."""
        return self._step("on_blinded", msg)

    def on_doubled(self, msg: Any) -> Next:
        """Step 3 received: our points re-blinded by the peer (:meth:`Session.on_doubled`)."""
        return self._step("on_doubled", msg)

    def on_doubled_shuffled(self, msg: Any) -> Next:
        """Step 3 received (mode size): re-blinded and reshuffled (:meth:`Session.on_doubled_shuffled`)."""
        return self._step("on_doubled_shuffled", msg)

    def on_cardinality(self, msg: Any) -> Next:
        """Step 4 received (mode size): the intersection size (:meth:`Session.on_cardinality`)."""
        return self._step("on_cardinality", msg)

    def on_ot_setup(self, msg: Any) -> Next:
        """KKRT step 3: the receiver's table shape and base-OT point (:meth:`KkrtSession.on_ot_setup`)."""
        return self._step("on_ot_setup", msg)

    def on_ot_choice(self, msg: Any) -> Next:
        """KKRT step 4: the sender's base-OT points (:meth:`KkrtSession.on_ot_choice`)."""
        return self._step("on_ot_choice", msg)

    def on_oprf_matrix(self, msg: Any) -> Next:
        """KKRT step 5: a chunk of the OT-extension matrix (:meth:`KkrtSession.on_oprf_matrix`)."""
        return self._step("on_oprf_matrix", msg)

    def on_oprf_values(self, msg: Any) -> Next:
        """KKRT step 6: a chunk of the sender's OPRF values (:meth:`KkrtSession.on_oprf_values`)."""
        return self._step("on_oprf_values", msg)

    def on_common_values(self, msg: Any) -> Next:
        """KKRT step 7: the matched values' places (:meth:`KkrtSession.on_common_values`)."""
        return self._step("on_common_values", msg)

    def on_vole_setup(self, msg: Any) -> Next:
        """VOLE PSI step 3: the OKVS shape and base-OT point (:meth:`.rr22.Rr22Session.on_vole_setup`)."""
        return self._step("on_vole_setup", msg)

    def on_vole_matrix(self, msg: Any) -> Next:
        """VOLE PSI step 5: the correlated OTs' matrix (:meth:`.rr22.Rr22Session.on_vole_matrix`)."""
        return self._step("on_vole_matrix", msg)

    def on_vole_trees(self, msg: Any) -> Next:
        """VOLE PSI step 6: the GGM level sums (:meth:`.rr22.Rr22Session.on_vole_trees`)."""
        return self._step("on_vole_trees", msg)

    def on_okvs_masked(self, msg: Any) -> Next:
        """VOLE PSI step 7: a chunk of the masked OKVS (:meth:`.rr22.Rr22Session.on_okvs_masked`)."""
        return self._step("on_okvs_masked", msg)


class _PairRole(_SessionRole):
    State = _PairState

    def __init__(self, ids: Sequence[Any] | psi.CanonicalIds, *, peer: str, protocol: str = "ecdh",
                 mode: str = "both", identity: psi.IdentityKey | None = None, peer_identity: bytes | None = None,
                 duplicates: str = "error", strip: bool = False, chunk_size: int = psi.CHUNK_SIZE,
                 run_id: str = "", progress: ProgressFn | None = None, name: str | None = None,
                 kkrt_stash: int = 0) -> None:
        super().__init__(name or self.role)
        validate_config(protocol, mode)
        self.canon = canonical(ids, duplicates, strip)
        self.peer, self.protocol, self.mode, self.chunk_size = peer, protocol, mode, chunk_size
        self.run_id, self.progress, self.kkrt_stash = run_id, progress, kkrt_stash
        self._identity, self._peer_identity = identity, peer_identity
        self.session = self._pair_session()

    def _pair_session(self) -> Session | KkrtSession:
        return self._session(self.peer, self.state.session, mode=self.mode, identity=self._identity,
                             peer_identity=self._peer_identity, finished=self._finished, kkrt_state=self.state.kkrt,
                             rr22_state=self.state.rr22)

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        super().load_state(data, allow_insecure=allow_insecure)
        self.session = self._pair_session()

    def start(self) -> Next:
        return self.session.start()

    def _finished(self, pos: np.ndarray | None, size: int | None, peer_size: int) -> Next:
        return done(_result(self.name, self.role, self.protocol, self.mode, self.canon, {self.peer: peer_size},
                            pos, size))


class ActiveRole(_PairRole):
    """The active party of a two-party alignment (it learns in every mode)."""

    role = ACTIVE


class PassiveRole(_PairRole):
    """A passive party; in mode ``all`` it then receives the all-party order."""

    role = PASSIVE

    def _finished(self, pos: np.ndarray | None, size: int | None, peer_size: int) -> Next:
        if self.mode != "all":
            return super()._finished(pos, size, peer_size)
        if pos is None:
            raise ProtocolError("mode 'all': the pairwise session gave no rows")
        self.state.positions, self.state.peer_size = np.asarray(pos, np.int64), peer_size
        return then([], self.peer, GlobalOrder, "on_global_order")

    def on_global_order(self, msg: GlobalOrder) -> Next:
        """Step 5: which of its pairwise-common rows are common to all parties, in the common order."""
        pos, order = self.state.positions, msg.positions
        if order.ndim != 1 or (len(order) and (order.min() < 0 or order.max() >= len(pos))) \
                or len(np.unique(order)) != len(order):
            raise ProtocolError("global order from the active party is not a valid selection")
        final = pos[order.astype(np.int64)]
        return done(_result(self.name, self.role, self.protocol, self.mode, self.canon,
                            {self.peer: self.state.peer_size}, final, len(final)))


@dataclass
class _MultiState:
    j: int = 0  # the passive party the current session is with
    session: SessionState = field(default_factory=SessionState)
    kkrt: KkrtState = field(default_factory=KkrtState)
    rr22: Rr22State = field(default_factory=Rr22State)
    pair_rows: dict[str, np.ndarray] = field(default_factory=dict)
    peer_sizes: dict[str, int] = field(default_factory=dict)


class MultipartyActiveRole(_SessionRole):
    """The active party with 2+ passive parties: pairwise sessions, then the all-party order.

    The all-party order is the first pairwise session's canonical order restricted to the
    rows common to every pairwise intersection.
    """

    role = ACTIVE
    State = _MultiState

    def __init__(self, ids: Sequence[Any] | psi.CanonicalIds, *, passives: Sequence[str], protocol: str = "ecdh",
                 identities: tuple[psi.IdentityKey, Mapping[str, bytes]] | None = None, duplicates: str = "error",
                 strip: bool = False, chunk_size: int = psi.CHUNK_SIZE, run_id: str = "",
                 name: str = ACTIVE, kkrt_stash: int = 0) -> None:
        super().__init__(name)
        validate_config(protocol, "all")
        self.canon = canonical(ids, duplicates, strip)
        self.passives, self.protocol, self.chunk_size = sorted(passives), protocol, chunk_size
        self.kkrt_stash = kkrt_stash
        self.identities, self.run_id, self.progress = identities, run_id, None
        if not self.passives:
            raise ProtocolError("the multi-party mode needs passive parties")
        self.session = self._new_session()

    def _new_session(self) -> Session | KkrtSession:
        peer = self.passives[self.state.j]
        ident, pin = (self.identities[0], self.identities[1][peer]) if self.identities else (None, None)
        return self._session(peer, self.state.session, mode="all", identity=ident, peer_identity=pin,
                             finished=self._finished, kkrt_state=self.state.kkrt,
                             rr22_state=self.state.rr22)

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        super().load_state(data, allow_insecure=allow_insecure)
        self.session = self._new_session()

    def start(self) -> Next:
        return self.session.start()

    def _finished(self, pos: np.ndarray | None, size: int | None, peer_size: int) -> Next:
        st = self.state
        peer = self.passives[st.j]
        if pos is None:
            raise ProtocolError("mode 'all': the pairwise session gave no rows")
        st.pair_rows[peer], st.peer_sizes[peer] = np.asarray(pos, np.int64), peer_size
        st.j += 1
        if st.j < len(self.passives):
            st.session, st.kkrt, st.rr22 = SessionState(), KkrtState(), Rr22State()
            self.session = self._new_session()
            return self.session.start()
        common = set(st.pair_rows[self.passives[0]].tolist())
        for name in self.passives[1:]:
            common &= set(st.pair_rows[name].tolist())
        final = np.asarray([p for p in st.pair_rows[self.passives[0]].tolist() if p in common], dtype=np.int64)
        sends = []
        for name in self.passives:
            where = {p: i for i, p in enumerate(st.pair_rows[name].tolist())}
            sends.append(send(name, GlobalOrder(np.asarray([where[p] for p in final.tolist()], dtype=np.uint32))))
        return done(_result(self.name, ACTIVE, self.protocol, "all", self.canon, dict(st.peer_sizes), final,
                            len(final)), sends)


# --------------------------------------------------------------------------- over channels


def _one(channels: Mapping[str, Channel]) -> tuple[str, Channel]:
    if len(channels) != 1:
        raise ProtocolError(f"a two-party alignment needs exactly one peer, got {sorted(channels)}")
    ((peer, ch),) = channels.items()
    return peer, ch


def run_active(channels: Mapping[str, Channel], ids: Sequence[Any] | psi.CanonicalIds, *,
               timeout: float | None = None, **kwargs: Any) -> AlignmentResult:
    """The active party of a two-party alignment over its single channel."""
    peer, ch = _one(channels)
    role = ActiveRole(ids, peer=peer, run_id=ch.run_id, name=ch.local.name, **kwargs)
    result: AlignmentResult = drive(role, channels, timeout=timeout)
    return result


def run_passive(channels: Mapping[str, Channel], ids: Sequence[Any] | psi.CanonicalIds, *,
                timeout: float | None = None, **kwargs: Any) -> AlignmentResult:
    """A passive party over its single channel; in mode ``all`` it then receives the all-party order."""
    peer, ch = _one(channels)
    role = PassiveRole(ids, peer=peer, run_id=ch.run_id, name=ch.local.name, **kwargs)
    result: AlignmentResult = drive(role, channels, timeout=timeout)
    return result


def run_active_multiparty(channels: Mapping[str, Channel], ids: Sequence[Any] | psi.CanonicalIds, *,
                          timeout: float | None = None, **kwargs: Any) -> AlignmentResult:
    """Active party with 2+ passive parties: pairwise PSI, then the all-party order."""
    run_id = next(iter(channels.values())).run_id if channels else ""
    role = MultipartyActiveRole(ids, passives=list(channels), run_id=run_id, **kwargs)
    result: AlignmentResult = drive(role, channels, timeout=timeout)
    return result


@dataclass
class LocalRun:
    """Every party's result plus the shared transcript of an in-process run."""

    results: dict[str, AlignmentResult]
    transcript: Transcript
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def run_local(active_ids: Sequence[Any] | psi.CanonicalIds, passive_ids: Sequence[Any] | psi.CanonicalIds, *,
              protocol: str = "ecdh", mode: str = "both", duplicates: str = "error", strip: bool = False,
              chunk_size: int = psi.CHUNK_SIZE, timeout: float = DEFAULT_TIMEOUT,
              progress: ProgressFn | None = None,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None, kkrt_stash: int = 0) -> LocalRun:
    """Both parties in-process over channels; identities are generated and pinned here.

    ``overrides`` replaces a party's task (tests: a stalling or hostile party); ``tap``
    (audits) keeps what each party received and the PSI secrets it held.
    """
    validate_config(protocol, mode)
    if mode == "all":
        raise ProtocolError("mode 'all' is for 3+ parties: use run_multiparty_local")
    a, p = canonical(active_ids, duplicates, strip), canonical(passive_ids, duplicates, strip)
    net = LocalNetwork([Endpoint(ACTIVE, ACTIVE), Endpoint(PASSIVE, PASSIVE)], timeout=timeout,
                       run_id=os.urandom(8).hex(), transcript=Transcript(tap))
    id_a, id_p = psi.IdentityKey.generate(), psi.IdentityKey.generate()
    common: dict[str, Any] = {"protocol": protocol, "mode": mode, "chunk_size": chunk_size, "progress": progress,
                              "kkrt_stash": kkrt_stash}
    t0 = time.perf_counter()
    # Callable[..., T], not [[], T]: the lambdas below bind loop variables as default arguments
    tasks: dict[str, Callable[..., Any]] = {
        ACTIVE: lambda: run_active(net.channels(ACTIVE), a, identity=id_a, peer_identity=id_p.public_bytes,
                                   **common),
        PASSIVE: lambda: run_passive(net.channels(PASSIVE), p, identity=id_p, peer_identity=id_a.public_bytes,
                                     **common),
    }
    for name, fn in (overrides or {}).items():
        tasks[name] = (lambda fn=fn, name=name: fn(net.channels(name)))
    results = run_parties(tasks, network=net)
    return LocalRun(results, net.transcript, time.perf_counter() - t0)


def run_multiparty_local(id_sets: Sequence[Sequence[Any]], *, protocol: str = "ecdh", duplicates: str = "error",
                         strip: bool = False, chunk_size: int = psi.CHUNK_SIZE,
                         timeout: float = DEFAULT_TIMEOUT, tap: AuditTap | None = None) -> LocalRun:
    """All-party intersection of 3+ parties: ``id_sets[0]`` is the active party's (``tap``: audits)."""
    validate_config(protocol, "all")
    if len(id_sets) < 3:
        raise ProtocolError("the multi-party mode needs at least three parties")
    canons = [canonical(s, duplicates, strip) for s in id_sets]
    passives = [f"passive-{j}" for j in range(len(id_sets) - 1)]
    parties = [Endpoint(ACTIVE, ACTIVE)] + [Endpoint(n, PASSIVE) for n in passives]
    net = LocalNetwork(parties, links=[(ACTIVE, n) for n in passives], timeout=timeout, run_id=os.urandom(8).hex(),
                       transcript=Transcript(tap))
    idents = {name: psi.IdentityKey.generate() for name in [ACTIVE, *passives]}
    # Callable[..., T], not [[], T]: the lambdas below bind loop variables as default arguments
    tasks: dict[str, Callable[..., AlignmentResult]] = {
        ACTIVE: lambda: run_active_multiparty(
            net.channels(ACTIVE), canons[0], protocol=protocol, chunk_size=chunk_size,
            identities=(idents[ACTIVE], {n: idents[n].public_bytes for n in passives})),
    }
    for j, name in enumerate(passives):
        tasks[name] = (lambda j=j, name=name: run_passive(
            net.channels(name), canons[j + 1], protocol=protocol, mode="all", identity=idents[name],
            peer_identity=idents[ACTIVE].public_bytes, chunk_size=chunk_size))
    t0 = time.perf_counter()
    results = run_parties(tasks, network=net)
    return LocalRun(results, net.transcript, time.perf_counter() - t0)
