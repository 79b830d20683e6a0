"""One aggregation round of secure aggregation as named steps (client and server sessions).

A session holds its state in a wire-encodable dataclass of the embedding role's state
and is driven by the role's steps, so any protocol can aggregate (``secagg`` itself sums
one vector; ``hfl`` aggregates every training round). Rounds, numbered as in the package
docstring:

* client: ``begin`` (0: the setup; 1: advertise keys) → ``on_keys`` (2: share the mask
  key and the self-mask seed with every neighbour) → ``on_forward`` (3: the masked input)
  → ``on_survivors`` (4: unmask) → the role's ``finished``;
* server: ``begin`` (0) → ``on_advertise`` (1, once per client) → ``on_shares`` (2) →
  ``on_masked`` (3) → ``on_unmask`` (4) → the sum over the survivors, to ``finished``.

A client that disconnects or stays silent past the timeout at any round is dropped
(the server's waits are optional); the round succeeds while every reconstruction it
needs has t shares, and otherwise aborts with :class:`~vflcrypto.errors.ProtocolError`
(never a wrong sum).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from vflcrypto.errors import ProtocolError
from vflcrypto.runtime.steps import Next, send, then
from vflcrypto.sharing.masking import ring_dtype
from vflcrypto.sharing.shamir import SHARE_BYTES, reconstruct, split

from . import math as sm
from .messages import Advertise, Forward, Keys, MaskedInput, Setup, Shares, Survivors, Unmask

__all__ = ["AggregateResult", "ClientAggState", "ClientSession", "ServerAggState", "ServerSession",
           "ServerSessionSteps", "generate_keys"]

Hold = Callable[[str, Any], None]


def _pk(sk: X25519PrivateKey) -> bytes:
    return sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def generate_keys() -> tuple[bytes, bytes, bytes]:
    """A round's fresh secrets: the share key c_sk, the mask key s_sk (raw X25519) and the self-mask seed b."""
    c, s = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    return c.private_bytes_raw(), s.private_bytes_raw(), secrets.token_bytes(32)


def _point(setup: Setup, name: str) -> int:
    return setup.clients.index(name) + 1  # Shamir x-coordinate of a client's shares


def _reset(state: Any) -> None:
    """Every field of a session state back to its default (a fresh round)."""
    fresh = type(state)()
    for f in dataclasses.fields(state):
        setattr(state, f.name, getattr(fresh, f.name))


def _secret32(points: Mapping[int, int], threshold: int, what: str) -> bytes:
    """A reconstructed 32-byte secret; :class:`ProtocolError` when the shares do not give one."""
    value = reconstruct(points, threshold)
    if value >> 256:
        raise ProtocolError(f"the shares of {what} do not reconstruct a 32-byte secret (a wrong share)")
    return value.to_bytes(32, "big")


def _check_round(got: int, want: int, what: str, sender: str) -> None:
    if got != want:
        raise ProtocolError(f"{sender} sent {what} of round {got} during round {want} (replayed or out of order)")


# --------------------------------------------------------------------------- client


@dataclass
class ClientAggState:
    round: int = -1
    setup: Setup | None = None
    x: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    c_sk: bytes = b""
    s_sk: bytes = b""
    b: bytes = b""
    context: bytes = b""  # SHA-256 of the setup and of what the embedding protocol sent (hfl: the global model)
    names: list[str] = field(default_factory=list)  # neighbours that advertised (U1), with their keys
    c_pks: list[bytes] = field(default_factory=list)
    s_pks: list[bytes] = field(default_factory=list)
    own_s: bytes = b""  # this client's own shares of its secrets
    own_b: bytes = b""
    got: list[str] = field(default_factory=list)  # neighbours whose shares arrived (U2), and the shares
    got_s: list[bytes] = field(default_factory=list)
    got_b: list[bytes] = field(default_factory=list)


class ClientSession:
    """Client ``name``'s side of one round (its secrets in ``state``; ``finished`` continues the role)."""

    def __init__(self, name: str, server: str, identity: Ed25519PrivateKey, pins: Mapping[str, bytes], run_id: str,
                 config: sm.SecAggConfig, state: ClientAggState, finished: Callable[[], Next],
                 hold: Hold | None = None) -> None:
        self.name, self.server, self.identity, self.pins, self.run_id = name, server, identity, pins, run_id
        self.config, self.state, self.finished = config, state, finished
        self.hold = hold or (lambda label, value: None)

    @property
    def setup(self) -> Setup:
        if self.state.setup is None:
            raise ProtocolError(f"{self.name}: no aggregation setup received yet")
        return self.state.setup

    def begin(self, setup: Setup, x: np.ndarray, keys: tuple[bytes, bytes, bytes] | None = None, *,
              context: bytes = b"") -> Next:
        """Step 0: check the setup, encode the input; round 1: advertise fresh keys (signed).

        ``context``: what the embedding protocol sent this client before the round (``hfl``:
        the global model's digest). Its digest with the setup's is signed into the
        advertisement; :meth:`on_keys` aborts unless every neighbour signed the same one.
        """
        if self.name not in setup.clients or len(set(setup.clients)) != len(setup.clients) or \
                not set(setup.clients) <= set(self.pins):
            raise ProtocolError(f"{self.name}: the setup lists unknown or repeated clients, or not this one")
        _, t = self.config.check(len(setup.clients))  # this client's own parameters, not the server's word
        nb = sm.neighbours(list(setup.clients), self.config.degree, self.config.seed + setup.round)
        mine = (t, self.config.ring_bits, self.config.frac_bits, self.config.value_bits)
        if (setup.threshold, setup.ring_bits, setup.frac_bits, setup.value_bits) != mine \
                or setup.neighbours != [nb[c] for c in setup.clients]:
            raise ProtocolError(f"{self.name}: the setup's threshold, encoding or neighbour graph differ from this "
                                "client's parameters")
        st = self.state
        _reset(st)
        st.round, st.setup = setup.round, setup
        st.context = sm.context_digest(setup, context)
        st.x = sm.encode_ring(x, setup.frac_bits, setup.value_bits, setup.ring_bits)
        if len(st.x) != setup.length:
            raise ProtocolError(f"{self.name}: its vector has {len(st.x)} values, the setup {setup.length}")
        st.c_sk, st.s_sk, st.b = keys if keys is not None else generate_keys()
        self.hold("self_mask_seed", st.b)
        self.hold("input", np.asarray(x, np.float64))
        c_pk = _pk(X25519PrivateKey.from_private_bytes(st.c_sk))
        s_pk = _pk(X25519PrivateKey.from_private_bytes(st.s_sk))
        sig = sm.sign_advert(self.identity, self.run_id, st.round, self.name, c_pk, s_pk, st.context)
        return then([send(self.server, Advertise(st.round, c_pk, s_pk, st.context, sig))], self.server, Keys, "on_keys",
                    patience=self._patience())

    def _patience(self) -> float:
        """The server may wait a timeout on every other client before it answers (each may be a staller)."""
        return float(len(self.setup.clients) + 1)

    def _neighbours(self) -> list[str]:
        s = self.setup
        return s.neighbours[s.clients.index(self.name)]

    def on_keys(self, msg: Keys) -> Next:
        """Step 2: verify the neighbours' signed keys and contexts; Shamir-share s_sk and b among them, encrypted.

        Every neighbour must have signed the context digest this client computed (the same
        setup and global model): a server that sent different models to different clients
        (Pasquini et al., CCS 2022) is detected here, before any masked input exists.
        """
        st, s = self.state, self.setup
        _check_round(msg.round, st.round, "keys", self.server)
        allowed = set(self._neighbours())
        if not (len(msg.names) == len(msg.c_pks) == len(msg.s_pks) == len(msg.contexts) == len(msg.signatures)) or \
                len(set(msg.names)) != len(msg.names) or not set(msg.names) <= allowed:
            raise ProtocolError(f"{self.server} sent keys for clients that are not {self.name}'s neighbours")
        for n, c_pk, s_pk, ctx, sig in zip(msg.names, msg.c_pks, msg.s_pks, msg.contexts, msg.signatures,
                                           strict=True):
            if n not in self.pins:
                raise ProtocolError(f"no pinned identity for {n}")
            sm.verify_advert(self.pins[n], sig, self.run_id, st.round, n, c_pk, s_pk, ctx)
        sm.check_contexts(self.name, st.context, msg.names, msg.contexts)
        if len(msg.names) + 1 < s.threshold:
            raise ProtocolError(f"only {len(msg.names)} neighbours of {self.name} are present: fewer than t")
        st.names, st.c_pks, st.s_pks = list(msg.names), list(msg.c_pks), list(msg.s_pks)
        xs = [_point(s, v) for v in [*st.names, self.name]]
        s_sh = split(int.from_bytes(st.s_sk, "big"), xs, s.threshold)
        b_sh = split(int.from_bytes(st.b, "big"), xs, s.threshold)
        c_sk = X25519PrivateKey.from_private_bytes(st.c_sk)
        mine = _point(s, self.name)
        st.own_s, st.own_b = s_sh[mine].to_bytes(SHARE_BYTES, "big"), b_sh[mine].to_bytes(SHARE_BYTES, "big")
        cts = [sm.encrypt_shares(c_sk, c_pk, self.name, v, self.run_id, st.round, s_sh[_point(s, v)],
                                 b_sh[_point(s, v)]) for v, c_pk in zip(st.names, st.c_pks, strict=True)]
        return then([send(self.server, Shares(st.round, list(st.names), cts))], self.server, Forward, "on_forward",
                    patience=self._patience())

    def on_forward(self, msg: Forward) -> Next:
        """Step 3: decrypt the neighbours' shares; send x + PRG(b) + the pairwise masks with every sharer."""
        st, s = self.state, self.setup
        _check_round(msg.round, st.round, "forwarded shares", self.server)
        if len(msg.senders) != len(msg.ciphertexts) or len(set(msg.senders)) != len(msg.senders) or \
                not set(msg.senders) <= set(st.names):
            raise ProtocolError(f"{self.server} forwarded shares from unknown, repeated or non-neighbour senders")
        c_sk = X25519PrivateKey.from_private_bytes(st.c_sk)
        keys = dict(zip(st.names, st.c_pks, strict=True))
        st.got, st.got_s, st.got_b = [], [], []
        for v, ct in zip(msg.senders, msg.ciphertexts, strict=True):
            a, b = sm.decrypt_shares(c_sk, keys[v], v, self.name, self.run_id, st.round, ct)
            st.got.append(v)
            st.got_s.append(a.to_bytes(SHARE_BYTES, "big"))
            st.got_b.append(b.to_bytes(SHARE_BYTES, "big"))
        if len(st.got) + 1 < s.threshold:
            raise ProtocolError(f"only {len(st.got)} neighbours of {self.name} shared: fewer than t")
        y = st.x + sm.self_mask(st.b, s.length, s.ring_bits)
        s_sk = X25519PrivateKey.from_private_bytes(st.s_sk)
        s_pks = dict(zip(st.names, st.s_pks, strict=True))
        for v in st.got:
            y = y + sm.pair_mask(s_sk, s_pks[v], self.name, v, self.run_id, st.round, s.length, s.ring_bits)
        return then([send(self.server, MaskedInput(st.round, y))], self.server, Survivors, "on_survivors",
                    patience=self._patience())

    def on_survivors(self, msg: Survivors) -> Next:
        """Step 4: shares of the dropped neighbours' mask keys and of the survivors' self-mask seeds."""
        st, s = self.state, self.setup
        _check_round(msg.round, st.round, "the survivors", self.server)
        alive = set(msg.survivors)
        if self.name not in alive or not alive <= set(s.clients) or len(alive) != len(msg.survivors):
            raise ProtocolError(f"{self.server} sent an inconsistent survivor list")
        if not alive & set(self._neighbours()) <= set(st.got):
            raise ProtocolError(f"{self.server} names survivors whose shares never reached {self.name}")
        if len(alive & set(st.got)) + 1 < s.threshold:
            raise ProtocolError("fewer than t of this client's neighbourhood survived: unmasking would fail")
        s_owners, s_shares, b_owners, b_shares = [], [], [self.name], [st.own_b]
        for v, sv, bv in zip(st.got, st.got_s, st.got_b, strict=True):
            give_s, give_b = sm.reveals(v, alive)  # a survivor's self-mask seed or a dropped one's mask key
            if give_b:
                b_owners.append(v)
                b_shares.append(bv)
            if give_s:
                s_owners.append(v)
                s_shares.append(sv)
        return _prefix([send(self.server, Unmask(st.round, s_owners, s_shares, b_owners, b_shares))], self.finished())


def _prefix(sends: Sequence[tuple[str, Any]], nxt: Next) -> Next:
    return Next((*sends, *nxt.sends), nxt.wait, nxt.result)


# --------------------------------------------------------------------------- server


@dataclass
class AggregateResult:
    """The sum over the survivors (decoded) and who survived each round."""

    total: np.ndarray
    survivors: list[str]
    advertised: list[str]
    shared: list[str]
    raw: np.ndarray


@dataclass
class ServerAggState:
    round: int = -1
    setup: Setup | None = None
    phase: int = 0
    k: int = 0
    pending: list[str] = field(default_factory=list)
    u1: list[str] = field(default_factory=list)
    c_pks: list[bytes] = field(default_factory=list)
    s_pks: list[bytes] = field(default_factory=list)
    contexts: list[bytes] = field(default_factory=list)
    sigs: list[bytes] = field(default_factory=list)
    u2: list[str] = field(default_factory=list)
    outbox_from: list[str] = field(default_factory=list)  # (sender, receiver, ciphertext) to forward
    outbox_to: list[str] = field(default_factory=list)
    outbox_ct: list[bytes] = field(default_factory=list)
    u3: list[str] = field(default_factory=list)
    ys: list[np.ndarray] = field(default_factory=list)
    u4: list[str] = field(default_factory=list)
    unmasks: list[Unmask] = field(default_factory=list)


class ServerSession:
    """The server's side of one round: relays, collects, unmasks (``finished`` gets the result)."""

    def __init__(self, name: str, pins: Mapping[str, bytes], run_id: str, state: ServerAggState,
                 finished: Callable[[AggregateResult], Next], hold: Hold | None = None) -> None:
        self.name, self.pins, self.run_id, self.state = name, pins, run_id, state
        self.finished, self.hold = finished, hold or (lambda label, value: None)

    @property
    def setup(self) -> Setup:
        if self.state.setup is None:
            raise ProtocolError("no aggregation round begun")
        return self.state.setup

    def begin(self, round_: int, clients: Sequence[str], length: int, config: sm.SecAggConfig) -> Next:
        """Step 0: the setup to every client; then collect the advertisements."""
        _, t = config.check(len(clients))
        nb = sm.neighbours(list(clients), config.degree, config.seed + round_)
        setup = Setup(round_, list(clients), [nb[c] for c in clients], t, length, config.ring_bits,
                      config.frac_bits, config.value_bits)
        st = self.state
        _reset(st)
        st.round, st.setup = round_, setup
        return self._collect([send(c, setup) for c in clients], list(clients), Advertise, "on_advertise")

    def _collect(self, sends: list[tuple[str, Any]], pending: list[str], kind: type, step: str) -> Next:
        st = self.state
        st.pending, st.k = pending, 0
        if not pending:
            raise ProtocolError("every client dropped out")
        return then(sends, pending[0], kind, step, optional=True)

    def _next(self, kind: type, step: str) -> Next | None:
        st = self.state
        st.k += 1
        if st.k < len(st.pending):
            return then([], st.pending[st.k], kind, step, optional=True)
        return None

    def _enough(self, present: Sequence[str], what: str) -> None:
        s = self.setup
        for u in s.clients:
            if u in present:
                here = len(set(s.neighbours[s.clients.index(u)]) & set(present)) + 1
                if here < s.threshold:
                    raise ProtocolError(f"after {what}, only {here} of {u}'s neighbourhood remain: fewer than "
                                        f"t = {s.threshold}; the round is aborted")

    def on_advertise(self, msg: Advertise | None) -> Next:
        """Step 1: a client's signed keys (or its dropout); after the last, the neighbours' keys to each."""
        st, s = self.state, self.setup
        u = st.pending[st.k]
        if msg is not None:
            _check_round(msg.round, st.round, "keys", u)
            sm.verify_advert(self.pins[u], msg.signature, self.run_id, st.round, u, msg.c_pk, msg.s_pk, msg.context)
            st.u1.append(u)
            st.c_pks.append(msg.c_pk)
            st.s_pks.append(msg.s_pk)
            st.contexts.append(msg.context)
            st.sigs.append(msg.signature)
        nxt = self._next(Advertise, "on_advertise")
        if nxt is not None:
            return nxt
        self._enough(st.u1, "advertising")
        sends = []
        for u in st.u1:
            nb = set(s.neighbours[s.clients.index(u)])
            idx = [i for i, v in enumerate(st.u1) if v in nb]
            sends.append(send(u, Keys(st.round, [st.u1[i] for i in idx], [st.c_pks[i] for i in idx],
                                      [st.s_pks[i] for i in idx], [st.contexts[i] for i in idx],
                                      [st.sigs[i] for i in idx])))
        return self._collect(sends, list(st.u1), Shares, "on_shares")

    def on_shares(self, msg: Shares | None) -> Next:
        """Step 2: a client's encrypted shares (relayed, unread); after the last, each client's inbox."""
        st, s = self.state, self.setup
        u = st.pending[st.k]
        if msg is not None:
            _check_round(msg.round, st.round, "shares", u)
            nb = set(s.neighbours[s.clients.index(u)]) & set(st.u1)
            if len(msg.to) != len(msg.ciphertexts) or set(msg.to) != nb or len(set(msg.to)) != len(msg.to):
                raise ProtocolError(f"{u} sent shares for {sorted(msg.to)}, expected its present neighbours "
                                    f"{sorted(nb)}")
            st.u2.append(u)
            for v, ct in zip(msg.to, msg.ciphertexts, strict=True):
                st.outbox_from.append(u)
                st.outbox_to.append(v)
                st.outbox_ct.append(ct)
        nxt = self._next(Shares, "on_shares")
        if nxt is not None:
            return nxt
        self._enough(st.u2, "sharing")
        alive = set(st.u2)
        sends = []
        for v in st.u2:
            idx = [i for i, (a, b) in enumerate(zip(st.outbox_from, st.outbox_to, strict=True))
                   if b == v and a in alive]
            sends.append(send(v, Forward(st.round, [st.outbox_from[i] for i in idx], [st.outbox_ct[i] for i in idx])))
        return self._collect(sends, list(st.u2), MaskedInput, "on_masked")

    def on_masked(self, msg: MaskedInput | None) -> Next:
        """Step 3: a client's masked input; after the last, the survivor list to every survivor."""
        st, s = self.state, self.setup
        u = st.pending[st.k]
        if msg is not None:
            _check_round(msg.round, st.round, "a masked input", u)
            y = np.asarray(msg.y)
            want = np.dtype(ring_dtype(s.ring_bits))
            if y.dtype != want or y.shape != (s.length,):
                raise ProtocolError(f"{u} sent a masked input of {y.dtype} {y.shape}, expected {want} ({s.length},)")
            st.u3.append(u)
            st.ys.append(y)
        nxt = self._next(MaskedInput, "on_masked")
        if nxt is not None:
            return nxt
        self._enough(st.u3, "masking")
        return self._collect([send(v, Survivors(st.round, list(st.u3))) for v in st.u3], list(st.u3), Unmask,
                             "on_unmask")

    def on_unmask(self, msg: Unmask | None) -> Next:
        """Step 4: a survivor's shares; after the last, the masks of the dropped and the self-masks removed."""
        st = self.state
        u = st.pending[st.k]
        if msg is not None:
            _check_round(msg.round, st.round, "unmasking shares", u)
            alive = set(st.u3)
            if len(msg.s_owners) != len(msg.s_shares) or len(msg.b_owners) != len(msg.b_shares) or \
                    not all(sm.reveals(o, alive)[0] for o in msg.s_owners) or \
                    not all(sm.reveals(o, alive)[1] for o in msg.b_owners):
                raise ProtocolError(f"{u} revealed shares inconsistent with the survivors (a mask key of a "
                                    "survivor, or a self-mask seed of a dropped client)")
            st.u4.append(u)
            st.unmasks.append(msg)
        nxt = self._next(Unmask, "on_unmask")
        if nxt is not None:
            return nxt
        return self.finished(self._unmask())

    def _unmask(self) -> AggregateResult:
        st, s = self.state, self.setup
        s_points: dict[str, dict[int, int]] = {}
        b_points: dict[str, dict[int, int]] = {}
        for v, msg in zip(st.u4, st.unmasks, strict=True):
            x = _point(s, v)
            for owner, sh in zip(msg.s_owners, msg.s_shares, strict=True):
                s_points.setdefault(owner, {})[x] = int.from_bytes(sh, "big")
            for owner, sh in zip(msg.b_owners, msg.b_shares, strict=True):
                b_points.setdefault(owner, {})[x] = int.from_bytes(sh, "big")
        total = np.zeros(s.length, ring_dtype(s.ring_bits))
        for y in st.ys:
            total = total + y
        for u in st.u3:
            b = _secret32(b_points.get(u, {}), s.threshold, f"{u}'s self-mask seed")
            total = total - sm.self_mask(b, s.length, s.ring_bits)
        s_pks = dict(zip(st.u1, st.s_pks, strict=True))
        dropped = [u for u in st.u2 if u not in set(st.u3)]
        for u in dropped:
            raw = _secret32(s_points.get(u, {}), s.threshold, f"{u}'s mask key")
            s_sk = X25519PrivateKey.from_private_bytes(raw)
            if s_sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw) != s_pks[u]:
                raise ProtocolError(f"the reconstructed mask key of {u} does not match its advertised key")
            for v in st.u3:
                if v in s.neighbours[s.clients.index(u)]:
                    total = total + sm.pair_mask(s_sk, s_pks[v], u, v, self.run_id, st.round, s.length, s.ring_bits)
        self.hold("survivors", list(st.u3))
        decoded = sm.decode_ring(total, s.frac_bits)
        self.hold("aggregate", decoded)  # the server's output of the round (audits: the round-difference attack)
        return AggregateResult(decoded, list(st.u3), list(st.u1), list(st.u2), total)



class ServerSessionSteps:
    """The server's four secure-aggregation steps, as role steps that hand each message to ``self.session``.

    Mixed into every role that aggregates (``secagg``, ``hfl``, ``protovfl``); the
    session's ``finished`` callback continues the role's own protocol.
    """

    session: ServerSession

    def on_advertise(self, msg: Any) -> Next:
        """Secure-aggregation step 1: a client's signed keys (:meth:`ServerSession.on_advertise`)."""
        return self.session.on_advertise(msg)

    def on_shares(self, msg: Any) -> Next:
        """Secure-aggregation step 2: a client's encrypted shares (:meth:`ServerSession.on_shares`)."""
        return self.session.on_shares(msg)

    def on_masked(self, msg: Any) -> Next:
        """Secure-aggregation step 3: a client's masked input (:meth:`ServerSession.on_masked`)."""
        return self.session.on_masked(msg)

    def on_unmask(self, msg: Any) -> Next:
        """Secure-aggregation step 4: unmasking shares (:meth:`ServerSession.on_unmask`); then ``finished``."""
        return self.session.on_unmask(msg)
