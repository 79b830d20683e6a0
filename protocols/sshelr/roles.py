"""The two roles of SSHE logistic regression as named steps, and ``run_local``.

Both parties run the same epoch (numbered as in the package docstring), mirrored:
``begin_epoch`` (2: [[own share of the peer's weights]]), ``on_weights`` (3: the masked
logit cross term), ``on_logits`` (4: the logit and error shares, [[error share]]),
``on_error`` (5: the masked gradient cross term), ``on_gradient`` (6: the truncated
update of both weight shares), ``on_reveal`` (7: the own weights). Setup: the active
party's :meth:`ActiveRole.start` / ``on_key`` (0, 1 ``plan``, ``weight_share``) and
``on_share``; the passive party's ``start``, ``on_key``, ``on_plan`` (1) and ``on_share``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from vflcrypto.errors import InputDataError, KeyMismatchError, ProtocolError
from vflcrypto.he.ou import refuse_decryption_oracle
from vflcrypto.he.paillier import (
    PaillierPrivateKey,
    PaillierPublicKey,
    PaillierVector,
    fold_ciphertexts,
    generate_keypair,
)
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
from vflcrypto.runtime.steps import Next, Role, done, send, then
from vflcrypto.runtime.wire import IntVector
from vflcrypto.sharing import masking

from .math import (
    RING,
    STAT_BITS,
    TRUNC_BITS,
    SSHELRParams,
    decode_shares,
    encode_features,
    error_offset,
    fold_width,
    gradient_mask_bits,
    logit_mask_bits,
    prepare_active,
    prepare_passive,
    step_scale,
    truncate_share,
)
from .messages import (
    ACTIVE,
    GRADIENT,
    LOGITS,
    OU_REFUSAL,
    PASSIVE,
    ActiveCiphertexts,
    MaskedForActive,
    MaskedForPassive,
    PassiveCiphertexts,
    Plan,
    PublicKey,
    RevealShare,
    WeightShare,
)

__all__ = ["ActiveRole", "PassiveRole", "SSHELRRun", "run_local", "unfold"]

SEC = STAT_BITS
KeyPair = tuple[PaillierPublicKey, PaillierPrivateKey]


@dataclass
class _State:
    public_key: PaillierPublicKey | None = None  # this party's own key pair ...
    secret: IntVector = field(default_factory=IntVector)  # ... (p, q): in the state only for stateless runtimes
    peer_key: PaillierPublicKey | None = None
    rows: int = 0
    epochs: int = 0
    learning_rate: float = 0.0
    epoch: int = 0
    own: IntVector = field(default_factory=IntVector)  # this party's share of its own weights (2^32 scale)
    other: IntVector = field(default_factory=IntVector)  # this party's share of the peer's weights
    logit_mask: IntVector = field(default_factory=IntVector)  # −r of the logit cross term this party masked
    error: IntVector = field(default_factory=IntVector)  # this party's share of 4e, per row
    gradient_mask: IntVector = field(default_factory=IntVector)  # −r of the gradient cross term it masked


def _objects(values: Sequence[int]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [int(v) for v in values]
    return out


def unfold(sk: PaillierPrivateKey, vec: PaillierVector, count: int, width: int) -> list[int]:
    """The ``count`` values of ``width``-bit slots folded into ``vec`` (decrypted with ``sk``), each
    below its guard bit; :class:`ProtocolError` when a slot or a ciphertext is out of range."""
    n = int(sk.public_key.n)
    per = (sk.public_key.bits - 1) // width
    if per < 1 or len(vec) != -(-count // per):
        raise ProtocolError(f"{len(vec)} folded ciphertexts cannot hold {count} values of {width} bits")
    out: list[int] = []
    mask = (1 << width) - 1
    for p in sk.decrypt(vec):
        p %= n
        k = min(per, count - len(out))
        if p >> (width * k):
            raise ProtocolError("a folded product is out of range")
        for _ in range(k):
            v = p & mask
            if v >> (width - 1):
                raise ProtocolError("a folded product is out of range")
            out.append(v)
            p >>= width
    return out


class _Party(Role[_State]):
    """One party's epoch, the same on both sides; the subclasses differ in setup and the labels."""

    State = _State
    mine: ClassVar[type]  # the ciphertexts this party sends under its own key
    theirs: ClassVar[type]
    masked_mine: ClassVar[type]  # the masked products it returns under the peer's key
    masked_theirs: ClassVar[type]
    first: ClassVar[bool]  # which half of SecureML's local truncation this party computes
    peer: str

    def __init__(self, name: str, Z: np.ndarray, *, keys: KeyPair | None, key_bits: int,
                 allow_insecure: bool) -> None:
        refuse_decryption_oracle(keys[0] if keys is not None else None, "sshelr", OU_REFUSAL)
        super().__init__(name)
        self.Z = Z
        self.X = encode_features(Z)  # quantized columns as integers (2^20 scale)
        self.Xo = self.X.astype(object)
        self._keys, self.key_bits, self.allow_insecure = keys, key_bits, allow_insecure
        self.sk: PaillierPrivateKey | None = None

    # ----------------------------------------------------------------- keys and state
    def accepted_keys(self) -> list[PaillierPublicKey]:
        return [k for k in (self.state.public_key, self.state.peer_key) if k is not None]

    def dump_state(self) -> bytes:
        """The state with this party's secret primes (only a runtime that keeps the state on the
        party's own node, like the Flower ClientApp, calls this)."""
        if self.sk is not None:
            self.state.secret = IntVector(self.sk.secret_numbers())
        return super().dump_state()

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        super().load_state(data, allow_insecure=allow_insecure)
        if self.state.public_key is not None:
            self.sk = PaillierPrivateKey(self.state.public_key, *self.state.secret)

    def _announce_key(self) -> tuple[str, Any]:
        pk, self.sk = self._keys or generate_keypair(self.key_bits, allow_insecure=self.allow_insecure)
        self.state.public_key = pk
        self.hold("secret_key", self.sk)
        return send(self.peer, PublicKey(pk))

    def _accept_key(self, msg: PublicKey) -> None:
        if msg.public_key == self.state.public_key:
            raise KeyMismatchError(f"{self.peer} announced this party's own public key")
        self.state.peer_key = msg.public_key

    def _secret(self) -> PaillierPrivateKey:
        assert self.sk is not None  # set by start (or load_state)
        return self.sk

    def _check_room(self) -> None:
        """Both moduli must hold a masked product without wrapping (else the shares would be wrong)."""
        need = fold_width(max(logit_mask_bits(max(self.X.shape[1], len(self.state.other))),
                              gradient_mask_bits(self.state.rows)))
        for who, key in (("this party's", self.state.public_key), (f"{self.peer}'s", self.state.peer_key)):
            assert key is not None
            if key.n.bit_length() - 1 < need:
                raise ProtocolError(f"{who} {key.n.bit_length()}-bit Paillier modulus cannot hold the "
                                    f"{need}-bit masked products of a 2^256 share ring")

    # ----------------------------------------------------------------- setup
    def _share_own_weights(self) -> tuple[str, Any]:
        """Step 1: zero initial weights, split into a uniform share for the peer and the rest kept."""
        theirs, mine = masking.share([0] * self.X.shape[1], RING)
        self.state.own = IntVector(mine)
        return send(self.peer, WeightShare(IntVector(theirs)))

    def on_share(self, msg: WeightShare) -> Next:
        """Step 1 received: this party's share of the peer's initial weights; the first epoch."""
        if not 0 < len(msg.values) <= self.state.rows or any(not 0 <= v < RING for v in msg.values):
            raise ProtocolError(f"{self.peer} sent {len(msg.values)} weight shares, or shares outside Z_2^256")
        self.state.other = msg.values
        self._check_room()
        return self.begin_epoch()

    # ----------------------------------------------------------------- one epoch
    def _encrypt_mine(self, values: Sequence[int]) -> tuple[str, Any]:
        self.hold("encrypted_share", list(values))  # ground truth of what the peer cannot read
        return send(self.peer, self.mine(self._secret().encrypt(_objects(values))))

    def _received(self, vec: PaillierVector, key: PaillierPublicKey | None, whose: str, length: int,
                  what: str) -> None:
        if vec.public_key != key:
            raise KeyMismatchError(f"{self.peer}'s {what} are not under {whose} key")
        if vec.frac_bits != 0 or vec.packing is not None:
            raise ProtocolError(f"{self.peer}'s {what} are not plain ring elements")
        if len(vec) != length:
            raise InputDataError(f"{self.peer} sent {len(vec)} {what} for {length}: parties are not aligned")

    def _masked(self, stage: int, folded: Sequence[int], count: int, bits: int) -> tuple[list[int], tuple[str, Any]]:
        """``[[product + r']]`` under the peer's key from the ``count`` products folded at
        :func:`fold_width` bits, re-randomized; returns −r' mod Q.

        ``r' = r + 2^bits``, r uniform in [0, 2^(bits + 40)): the masked values are positive
        and below 2^(bits + 41) for the public bound ``|product| < 2^bits``, so each stays
        in its slot, below the slot's guard bit.
        """
        peer_key = self.state.peer_key
        assert peer_key is not None
        width = fold_width(bits)
        per = (peer_key.bits - 1) // width
        r = [v + (1 << bits) for v in masking.statistical_masks(count, bits, SEC)]
        slots = [sum(r[i] << (width * (i - g)) for i in range(g, min(g + per, count))) for g in range(0, count, per)]
        n, nsq = int(peer_key.n), int(peer_key.nsquare)
        cts = [int(c) * (1 + v * n) % nsq for c, v in zip(folded, slots, strict=True)]
        out = PaillierVector.from_ciphertexts(peer_key, cts).rerandomize()
        return [(-v) % RING for v in r], send(self.peer, self.masked_mine(stage, count, out))

    def _unmask(self, msg: Any, stage: int, length: int, bits: int, what: str) -> list[int]:
        """Decrypt and unfold the peer's masked product (this party's share of it), checked for shape and range."""
        if msg.stage != stage:
            raise ProtocolError(f"{self.peer} sent masked {'gradient' if msg.stage else 'logit'} terms, "
                                f"expected {what}")
        if msg.count != length:
            raise InputDataError(f"{self.peer} sent {msg.count} {what} for {length}: parties are not aligned")
        if msg.values.public_key != self.state.public_key:
            raise KeyMismatchError(f"{self.peer}'s {what} are not under this party's key")
        if msg.values.frac_bits != 0 or msg.values.packing is not None:
            raise ProtocolError(f"{self.peer}'s {what} are not plain ring elements")
        return [v % RING for v in unfold(self._secret(), msg.values, length, fold_width(bits))]

    def begin_epoch(self) -> Next:
        """Step 2: [[this party's share of the peer's weights]] under its own key."""
        return then([self._encrypt_mine(self.state.other)], self.peer, self.theirs, "on_weights")

    def on_weights(self, msg: Any) -> Next:
        """Step 3: [[X_me·s + r]] for the peer's share s of this party's weights (folded); keep −r."""
        self._received(msg.values, self.state.peer_key, "its own", self.X.shape[1], "weight shares")
        bits = logit_mask_bits(self.X.shape[1])
        folded = msg.values.matvec(self.X, fold_bits=fold_width(bits)).ciphertexts()
        mask, out = self._masked(LOGITS, folded, len(self.X), bits)
        self.state.logit_mask = IntVector(mask)
        return then([out], self.peer, self.masked_theirs, "on_logits")

    def _error_offset(self) -> list[int] | None:
        return None

    def on_logits(self, msg: Any) -> Next:
        """Step 4: the logit share <z> = X_me<w_me> − r + t; the error share 4e; [[error share]] to the peer."""
        st = self.state
        t = self._unmask(msg, LOGITS, st.rows, logit_mask_bits(len(st.other)), "logit terms")
        z = (self.Xo @ _objects(st.own) + _objects(st.logit_mask) + _objects(t)) % RING
        offset = self._error_offset()
        err = z if offset is None else (z + _objects(offset)) % RING
        st.error = IntVector(err.tolist())
        return then([self._encrypt_mine(st.error)], self.peer, self.theirs, "on_error")

    def on_error(self, msg: Any) -> Next:
        """Step 5: [[X_meᵀ·s + r]] for the peer's error share s (folded); keep −r."""
        st = self.state
        self._received(msg.values, st.peer_key, "its own", st.rows, "error shares")
        assert st.peer_key is not None
        bits = gradient_mask_bits(st.rows)
        folded, _ = fold_ciphertexts(st.peer_key, msg.values.dot(self.X).ciphertexts(), fold_width(bits))
        mask, out = self._masked(GRADIENT, folded, self.X.shape[1], bits)
        st.gradient_mask = IntVector(mask)
        return then([out], self.peer, self.masked_theirs, "on_gradient")

    def on_gradient(self, msg: Any) -> Next:
        """Step 6: both gradient shares, times the public step c, truncated locally; w ← w − c·g."""
        st = self.state
        t = self._unmask(msg, GRADIENT, len(st.other), gradient_mask_bits(st.rows), "gradient terms")
        c = step_scale(st.learning_rate, st.rows)
        g_own = (self.Xo.T @ _objects(st.error) + _objects(st.gradient_mask)) % RING
        upd_own = truncate_share([c * int(v) % RING for v in g_own], TRUNC_BITS, self.first)
        upd_other = truncate_share([c * v % RING for v in t], TRUNC_BITS, self.first)
        st.own = IntVector((w - u) % RING for w, u in zip(st.own, upd_own, strict=True))
        st.other = IntVector((w - u) % RING for w, u in zip(st.other, upd_other, strict=True))
        st.epoch += 1
        progress.report("sshelr", st.epoch, st.epochs, unit="epoch")
        if st.epoch < st.epochs:
            return self.begin_epoch()
        return then([send(self.peer, RevealShare(st.other))], self.peer, RevealShare, "on_reveal")

    def on_reveal(self, msg: RevealShare) -> Next:
        """Step 7: the peer's share of this party's weights: its weights in the clear."""
        if len(msg.values) != len(self.state.own):
            raise ProtocolError(f"{self.peer} revealed {len(msg.values)} weight shares for {len(self.state.own)}")
        return done(decode_shares(self.state.own, msg.values))


class ActiveRole(_Party):
    """Holds the labels ``y`` and its columns; result: its weights (standardized columns, then the intercept)."""

    role = ACTIVE
    mine, theirs = ActiveCiphertexts, PassiveCiphertexts
    masked_mine, masked_theirs = MaskedForPassive, MaskedForActive
    first = True

    def __init__(self, X: np.ndarray | None, y: np.ndarray, *, params: SSHELRParams | None = None,
                 keys: KeyPair | None = None, key_bits: int = 2048, allow_insecure: bool = False,
                 passive: str = "passive-0", name: str = ACTIVE) -> None:
        Z, self.y = prepare_active(X, y)
        super().__init__(name, Z, keys=keys, key_bits=key_bits, allow_insecure=allow_insecure)
        self.params = params or SSHELRParams()
        self.params.validate()
        step_scale(self.params.learning_rate, len(self.y))
        self.peer = passive

    def start(self) -> Next:
        """Step 0: a fresh key pair (unless given); the public key to the passive party."""
        p, st = self.params, self.state
        st.rows, st.epochs, st.learning_rate = len(self.y), p.epochs, p.learning_rate
        return then([self._announce_key()], self.peer, PublicKey, "on_key")

    def on_key(self, msg: PublicKey) -> Next:
        """Steps 0–1: accept the passive party's key; the plan and a share of the active weights."""
        self._accept_key(msg)
        plan = Plan(self.state.rows, self.params.epochs, self.params.learning_rate)
        return then([send(self.peer, plan), self._share_own_weights()], self.peer, WeightShare, "on_share")

    def _error_offset(self) -> list[int]:
        return error_offset(self.y)


class PassiveRole(_Party):
    """Holds its columns; result: its weights."""

    role = PASSIVE
    mine, theirs = PassiveCiphertexts, ActiveCiphertexts
    masked_mine, masked_theirs = MaskedForActive, MaskedForPassive
    first = False

    def __init__(self, X: np.ndarray, *, keys: KeyPair | None = None, key_bits: int = 2048,
                 allow_insecure: bool = False, active: str = ACTIVE, name: str = "passive-0",
                 expected: SSHELRParams | None = None) -> None:
        super().__init__(name, prepare_passive(X), keys=keys, key_bits=key_bits, allow_insecure=allow_insecure)
        self.peer, self.expected = active, expected

    def start(self) -> Next:
        """Step 0: a fresh key pair (unless given); the public key to the active party."""
        return then([self._announce_key()], self.peer, PublicKey, "on_key")

    def on_key(self, msg: PublicKey) -> Next:
        """Step 0 received: accept the active party's key; wait for the plan."""
        self._accept_key(msg)
        return then([], self.peer, Plan, "on_plan")

    def on_plan(self, msg: Plan) -> Next:
        """Step 1: check the plan against this party's rows (and schedule, if it has one); share its weights."""
        if msg.rows != len(self.X):
            raise InputDataError(f"{self.peer} has {msg.rows} rows, this party {len(self.X)}: parties are not "
                                 "aligned")
        plan = SSHELRParams(msg.epochs, msg.learning_rate)
        try:
            plan.validate()
            step_scale(plan.learning_rate, msg.rows)
        except InputDataError as exc:
            raise ProtocolError(f"{self.peer} sent an invalid plan: {exc}") from None
        if self.expected is not None and plan != self.expected:
            raise ProtocolError(f"{self.peer}'s plan {plan} differs from this party's {self.expected}")
        st = self.state
        st.rows, st.epochs, st.learning_rate = msg.rows, msg.epochs, msg.learning_rate
        return then([self._share_own_weights()], self.peer, WeightShare, "on_share")


# --------------------------------------------------------------------------- local run


@dataclass
class SSHELRRun:
    active: np.ndarray  # the active party's weights (its standardized columns, then the intercept)
    passive: np.ndarray  # the passive party's weights
    transcript: Transcript
    seconds: float


def run_local(X_active: np.ndarray | None, y: np.ndarray, X_passive: np.ndarray, *,
              params: SSHELRParams | None = None, keys: tuple[KeyPair, KeyPair] | None = None,
              key_bits: int = 2048, allow_insecure: bool = False, timeout: float = DEFAULT_TIMEOUT,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None) -> SSHELRRun:
    """The active party and one passive party (``passive-0``) in-process; ``keys``: (active's, passive's)."""
    from vflcrypto.runtime.steps import drive

    params = params or SSHELRParams()
    ka, kp = keys or (None, None)
    net = LocalNetwork([Endpoint(ACTIVE, ACTIVE), Endpoint("passive-0", PASSIVE)], timeout=timeout,
                       allow_insecure=allow_insecure, transcript=Transcript(tap))
    tasks: dict[str, Callable[..., Any]] = {
        ACTIVE: lambda: drive(ActiveRole(X_active, y, params=params, keys=ka, key_bits=key_bits,
                                         allow_insecure=allow_insecure), net.channels(ACTIVE)),
        "passive-0": lambda: drive(PassiveRole(X_passive, keys=kp, key_bits=key_bits, allow_insecure=allow_insecure),
                                   net.channels("passive-0")),
    }
    for name, fn in (overrides or {}).items():
        tasks[name] = (lambda fn=fn, name=name: fn(net.channels(name)))
    t0 = time.perf_counter()
    out = run_parties(tasks, network=net)
    return SSHELRRun(out[ACTIVE], out["passive-0"], net.transcript, time.perf_counter() - t0)
