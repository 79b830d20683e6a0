"""The roles of vertical logistic regression as named steps, and ``run_local``.

Step names follow the package docstring's numbered flow:

* active: ``start`` (0 setup, then a step's ``request``) → ``collect_logits`` (1/2: sum the
  (masked) logits, residuals) → plain: ``collect_ack``; secure: ``reply_gradient`` (5) →
  ``collect_ack`` → the next step, then the ``predict-train`` / ``predict-test`` requests
  (``collect_logits`` again) and ``stop``;
* passive: ``on_setup`` (0) → secure: ``accept_share`` (1, once per peer) →
  ``on_request`` → plain: ``apply_residual`` (3); secure: ``mask_gradient`` (4) →
  ``apply_gradient`` (6) → ``on_request`` … until ``stop``.
"""

from __future__ import annotations

import hmac
import math
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from vflcrypto.errors import ConfigurationError, InputDataError, ProtocolError
from vflcrypto.he.ou import refuse_decryption_oracle
from vflcrypto.he.paillier import PaillierPrivateKey, PaillierPublicKey, generate_keypair
from vflcrypto.ml.metrics import accuracy
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
from vflcrypto.runtime.wire import IntVector

from .defence import check_epsilon, privacy, randomize
from .math import (
    GRAD_FRAC_BITS,
    accept_key_share,
    bce_loss,
    decrypt_masked,
    encrypt_residual,
    local_gradient,
    make_key_share,
    mask_logits,
    masked_encrypted_gradient,
    partial_logits,
    residuals,
    rows_digest,
    sgd_update,
    sigmoid,
    unmask_gradient,
    unmask_sum,
)
from .messages import (
    ACTIVE,
    OU_REFUSAL,
    PASSIVE,
    Ack,
    DpResidual,
    EncryptedResidual,
    GradientReply,
    Identity,
    KeyShare,
    Logits,
    MaskedGradient,
    MaskedLogits,
    Request,
    Residual,
    Setup,
)

__all__ = ["ActiveResult", "ActiveRole", "LocalRun", "PassiveResult", "PassiveRole", "passive_names",
           "run_active", "run_local", "run_passive"]

PREDICT_TRAIN, PREDICT_TEST, PREDICT = "predict-train", "predict-test", "predict"  # PREDICT: a saved model's rows


@dataclass
class ActiveResult:
    """What the active party ends with."""

    loss_history: list[float]
    train_loss: float
    test_loss: float | None
    test_accuracy: float | None
    test_probabilities: np.ndarray | None
    train_probabilities: np.ndarray
    seconds: float
    #: the label defence's guarantee (``label-rr`` -> its (ε, δ) and what it covers); empty when undefended
    privacy: dict[str, Any] = field(default_factory=dict)


@dataclass
class PassiveResult:
    """What a passive party ends with: its weights (what it saw is in the audit tap, if any) and the guarantee of
    the label defence the setup announced (empty when undefended)."""

    name: str
    weights: np.ndarray
    privacy: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- active


@dataclass
class _ActiveState:
    t: int = 0  # the training step being run (steps while predicting)
    phase: str = "step"  # "step", PREDICT_TRAIN or PREDICT_TEST
    k: int = 0  # which party's message is awaited next
    parts: list[np.ndarray] = field(default_factory=list)
    history: list[float] = field(default_factory=list)
    p_train: np.ndarray = field(default_factory=lambda: np.zeros(0))


class ActiveRole(Role[_ActiveState]):
    """The label holder: drives the loop; in secure mode it owns the Paillier key pair."""

    role = ACTIVE
    State = _ActiveState

    def __init__(self, y_train: np.ndarray, y_test: np.ndarray | None = None, *, parties: Sequence[str],
                 secure: bool = False, steps: int = 20, learning_rate: float = 0.5, key_bits: int = 2048,
                 allow_insecure: bool = False, ids_train: Sequence[str] | None = None,
                 frac_bits: int = GRAD_FRAC_BITS,
                 keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
                 name: str = ACTIVE, allow_small_batches: bool = False, label_dp: float | None = None) -> None:
        """``allow_small_batches``: return a passive party its gradient even when it has at least as many
        gradient entries (features, intercept included) as there are training rows (see :meth:`reply_gradient`).
        ``label_dp``: train on randomized-response labels at this ε (:mod:`.defence`)."""
        refuse_decryption_oracle(keys[0] if keys is not None else None, "logreg", OU_REFUSAL)
        super().__init__(name)
        self.parties = list(parties)
        if not self.parties:
            raise ProtocolError("at least one passive party is required")
        y = np.asarray(y_train, dtype=np.float64)
        if y.ndim != 1 or len(y) == 0 or not np.all((y == 0) | (y == 1)):
            raise InputDataError("labels must be a non-empty vector of 0/1")
        if np.all(y == y[0]):
            raise InputDataError(f"every training label is {int(y[0])} (one class): logistic regression needs both "
                                 "classes (check the label column, or the alignment and the split)")
        if steps < 0 or not math.isfinite(learning_rate) or learning_rate <= 0:
            raise InputDataError("steps must be >= 0 and the learning rate positive")
        self.y, self.y_train, self.label_dp = y, y, check_epsilon(label_dp)
        self.y_test = None if y_test is None or len(y_test) == 0 else np.asarray(y_test, dtype=np.float64)
        self.secure, self.steps, self.learning_rate = secure, steps, float(learning_rate)
        self.ids_train, self.frac_bits = ids_train, frac_bits
        self.allow_small_batches = allow_small_batches
        self.pk: PaillierPublicKey | None = None
        self.sk: PaillierPrivateKey | None = None
        if secure:
            self.pk, self.sk = keys if keys is not None else generate_keypair(
                key_bits, allow_insecure=allow_insecure)
        self._t0 = time.perf_counter()

    def accepted_keys(self) -> list[PaillierPublicKey]:
        return [self.pk] if self.pk is not None else []  # masked gradients under our own key

    def _rows(self) -> int:
        return len(self.y_test) if self.state.phase == PREDICT_TEST and self.y_test is not None else len(self.y)

    def _request(self, phase: str, step: int, sends: Sequence[tuple[str, Any]] = ()) -> Next:
        """Ask every party for its (masked) logits of ``phase`` (training step or predictions)."""
        self.state.phase, self.state.k, self.state.parts = phase, 0, []
        return then([*sends, *(send(p, Request(phase, step)) for p in self.parties)], self.parties[0],
                    MaskedLogits if self.secure else Logits, "collect_logits")

    def start(self) -> Next:
        """Step 0: the setup to every party, then the first step's request (or predictions)."""
        if self.sk is not None:
            self.hold("secret_key", self.sk)
        self.hold("labels", self.y)
        if self.label_dp is not None:
            self.y_train = randomize(self.y, self.label_dp)  # drawn once: every later message post-processes it
        self.hold("training_labels", self.y_train)
        setup = Setup(secure=self.secure, steps=self.steps, learning_rate=self.learning_rate,
                      n_train=len(self.y), n_test=0 if self.y_test is None else len(self.y_test),
                      parties=tuple(self.parties), ids_digest=rows_digest(self.ids_train, len(self.y)),
                      public_key=self.pk, label_epsilon=self.label_dp)
        first = "step" if self.steps > 0 else PREDICT_TRAIN
        return self._request(first, 0 if self.steps else self.steps, [send(p, setup) for p in self.parties])

    def collect_logits(self, msg: Logits | MaskedLogits) -> Next:
        """Steps 1-2: gather every party's logits; then residuals (training) or predictions."""
        st, name = self.state, self.parties[self.state.k]
        if msg.values.shape != (self._rows(),):
            raise ProtocolError(f"{name} sent {msg.values.shape} logits for {self._rows()} rows")
        st.parts.append(np.asarray(msg.values))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], type(msg), "collect_logits")
        z = unmask_sum(st.parts) if self.secure else np.sum(st.parts, axis=0)
        if st.phase == PREDICT_TRAIN:
            st.p_train = sigmoid(z)
            if self.y_test is not None:
                return self._request(PREDICT_TEST, self.steps)
            return self._finish(None)
        if st.phase == PREDICT_TEST:
            return self._finish(sigmoid(z))
        _, r, loss = residuals(z, self.y_train)
        st.history.append(loss)
        st.k = 0
        if self.secure:
            assert self.sk is not None  # secure mode always holds the key pair
            self.hold("residual", r)  # audit ground truth for the residual-recovery attack
            enc = encrypt_residual(self.sk, r, self.frac_bits)
            return then([send(p, EncryptedResidual(st.t, enc)) for p in self.parties], self.parties[0],
                        MaskedGradient, "reply_gradient")
        kind = Residual if self.label_dp is None else DpResidual
        return then([send(p, kind(st.t, r)) for p in self.parties], self.parties[0], Ack, "collect_ack")

    def reply_gradient(self, msg: MaskedGradient) -> Next:
        """Step 5: decrypt g_k + R_k mod n (uniform to us) and return it to its party.

        Refused (before anything is decrypted) when the party's gradient has at least as many
        entries as there are rows, unless ``allow_small_batches``: ``g_k = X_k^T r`` is then
        ``d_k >= n`` equations in the ``n`` residuals, which a full-rank ``X_k`` solves for every
        ``r = (p - y)/n``, at the first step (``p = 1/2``) the labels themselves (Weng et al. 2020's
        reverse multiplication; :func:`vflcrypto.audit.literature_tabular.residual_recovery`).
        """
        assert self.sk is not None
        st, name = self.state, self.parties[self.state.k]
        if len(msg.values) >= len(self.y) and not self.allow_small_batches:
            raise ConfigurationError(
                f"{name}: its gradient has {len(msg.values)} entries for {len(self.y)} training rows, so it could "
                "solve its own gradient X^T r for every residual r (the training labels at the first step); train "
                "on more rows than any party's features, or allow it explicitly (allow_small_batches / "
                "--allow-small-batches)")
        reply = send(name, GradientReply(st.t, decrypt_masked(self.sk, msg.values)))
        st.k += 1
        if st.k < len(self.parties):
            return then([reply], self.parties[st.k], MaskedGradient, "reply_gradient")
        st.k = 0
        return then([reply], self.parties[0], Ack, "collect_ack")

    def collect_ack(self, msg: Ack) -> Next:
        """Step 3 (plain) or 6 (secure), once per party: all finished step t; the next step, or the predictions."""
        st, name = self.state, self.parties[self.state.k]
        if msg.step != st.t:
            raise ProtocolError(f"{name} acknowledged step {msg.step}, expected {st.t}")
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], Ack, "collect_ack")
        st.t += 1
        progress.report("logreg", st.t, self.steps, unit="step")
        if st.t < self.steps:
            return self._request("step", st.t)
        return self._request(PREDICT_TRAIN, self.steps)

    def _finish(self, p_test: np.ndarray | None) -> Next:
        test_loss = test_acc = None
        if p_test is not None and self.y_test is not None:
            test_loss, test_acc = bce_loss(self.y_test, p_test), accuracy(self.y_test, p_test)
        result = ActiveResult(self.state.history, bce_loss(self.y, self.state.p_train), test_loss, test_acc,
                              p_test, self.state.p_train, time.perf_counter() - self._t0, privacy(self.label_dp))
        return done(result, [send(p, Request("stop", self.steps)) for p in self.parties])


# --------------------------------------------------------------------------- passive


def _raw(key: X25519PrivateKey) -> bytes:
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


@dataclass
class _PassiveState:
    secure: bool = False
    learning_rate: float = 0.0
    n_test: int = 0
    peers: tuple[str, ...] = ()
    public_key: PaillierPublicKey | None = None
    ephemeral: dict[str, bytes] = field(default_factory=dict)  # X25519 secrets until the peer's share arrives
    seeds: dict[str, bytes] = field(default_factory=dict)  # pairwise mask seeds
    k: int = 0
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mask: IntVector = field(default_factory=IntVector)
    frac_bits: int = 0
    step: int = 0
    label_epsilon: float | None = None  # the label defence the setup announced
    identity: bytes = b""  # a fresh identity key announced in this run (Flower without pins)
    announced: dict[str, bytes] = field(default_factory=dict)  # peers' announced identity keys


class PassiveRole(Role[_PassiveState]):
    """A feature party: ``X_train`` / ``X_test`` of the aligned rows; its weights start at zero.

    ``identity`` / ``peer_identities`` (Ed25519, pinned in configuration) authenticate the
    pairwise key agreement of the secure protocol; ``run_id`` binds the key shares to the run.
    ``announce_identity`` (Flower runs without pinned identities): the party makes a fresh
    identity key, sends its public half to every peer (``logreg.identity``, relayed by the
    ServerApp, which is then trusted not to substitute keys) and accepts theirs.
    """

    role = PASSIVE
    State = _PassiveState

    def __init__(self, name: str, X_train: np.ndarray, X_test: np.ndarray | None = None, *,
                 identity: Ed25519PrivateKey | None = None,
                 peer_identities: Mapping[str, Ed25519PublicKey] | None = None,
                 ids_train: Sequence[str] | None = None, frac_bits: int = GRAD_FRAC_BITS,
                 run_id: str = "", active: str = ACTIVE, announce_identity: bool = False,
                 peers: Sequence[str] = (), expected: tuple[bool, int, float, float | None] | None = None) -> None:
        """``expected`` (a network party's own flags): (secure, steps, learning rate, --label-dp) the setup must
        match."""
        super().__init__(name)
        X = np.asarray(X_train, dtype=np.float64)
        if X.ndim != 2 or not np.all(np.isfinite(X)):
            raise InputDataError(f"{name}: features must be a finite 2-D array")
        self.X = X
        self.X_test = None if X_test is None else np.asarray(X_test, dtype=np.float64)
        self.identity, self.peer_identities = identity, dict(peer_identities or {})
        self.ids_train, self.frac_bits, self.run_id, self.active = ids_train, frac_bits, run_id, active
        self.announce = announce_identity
        self.announce_to = [p for p in peers if p != name]
        self.expected = expected
        self.state.weights = np.zeros(X.shape[1])

    def accepted_keys(self) -> list[PaillierPublicKey]:
        return [self.state.public_key] if self.state.public_key is not None else []

    def _next_request(self, sends: Sequence[tuple[str, Any]] = ()) -> Next:
        # The active party may itself be waiting for the slowest peer: wait twice as long, so
        # a stall is reported by the party that waits on the staller, naming it.
        return then(sends, self.active, Request, "on_request", patience=2.0)

    def start(self) -> Next:
        if self.announce and self.announce_to:
            if self.identity is None:
                self.identity = Ed25519PrivateKey.generate()
                self.state.identity = self.identity.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
            pub = self.identity.public_key().public_bytes_raw()
            self.state.k = 0
            return then([send(p, Identity(self.name, pub)) for p in self.announce_to], self.announce_to[0],
                        Identity, "accept_identity", patience=2.0)
        return then([], self.active, Setup, "on_setup", patience=2.0)

    def accept_identity(self, msg: Identity) -> Next:
        """Flower runs without pinned identities: take a peer's announced identity key."""
        st = self.state
        peer = self.announce_to[st.k]
        if msg.sender != peer:
            raise ProtocolError(f"{self.name}: identity from {peer} claims to come from {msg.sender}")
        try:
            self.peer_identities[peer] = Ed25519PublicKey.from_public_bytes(msg.public_key)
        except ValueError:
            raise ProtocolError(f"{self.name}: {peer} announced a malformed identity key") from None
        st.announced[peer] = bytes(msg.public_key)
        st.k += 1
        if st.k < len(self.announce_to):
            return then([], self.announce_to[st.k], Identity, "accept_identity", patience=2.0)
        return then([], self.active, Setup, "on_setup", patience=2.0)

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        super().load_state(data, allow_insecure=allow_insecure)
        if self.state.identity:
            self.identity = Ed25519PrivateKey.from_private_bytes(self.state.identity)
        for peer, pub in self.state.announced.items():
            self.peer_identities[peer] = Ed25519PublicKey.from_public_bytes(pub)

    def on_setup(self, setup: Setup) -> Next:
        """Step 0: check rows and row IDs; secure: send a signed key share to every peer (step 1)."""
        name, st = self.name, self.state
        if setup.n_train != len(self.X):
            raise InputDataError(f"{name} has {len(self.X)} training rows, the active party {setup.n_train}")
        if not hmac.compare_digest(setup.ids_digest, rows_digest(self.ids_train, len(self.X))):
            raise InputDataError(f"{name}: row IDs differ from the active party's: inputs not aligned")
        n_test = 0 if self.X_test is None else len(self.X_test)
        if setup.n_test and n_test != setup.n_test:
            raise InputDataError(f"{name} has {n_test} test rows, the active party {setup.n_test}")
        if name not in setup.parties:
            raise ProtocolError(f"{name} is not among the configured parties {list(setup.parties)}")
        if self.expected is not None:
            labels = ("secure", "steps", "learning rate", "label-DP epsilon")
            theirs = (setup.secure, setup.steps, float(setup.learning_rate), setup.label_epsilon)
            differ = [f"{n} {b} (here {a})" for n, a, b in zip(labels, self.expected, theirs, strict=True) if a != b]
            if differ:
                raise ConfigurationError(f"{name}: the active party's training plan differs from this party's flags: "
                                         f"{', '.join(differ)}; run every party with the same training flags")
        try:
            st.label_epsilon = check_epsilon(setup.label_epsilon)
        except InputDataError as exc:
            raise ProtocolError(f"{name}: the setup announces an invalid label defence: {exc}") from None
        st.secure, st.learning_rate, st.n_test = setup.secure, setup.learning_rate, setup.n_test
        st.peers = tuple(p for p in setup.parties if p != name)
        if not setup.secure:
            return self._next_request()
        if setup.public_key is None and setup.steps:  # a prediction (no step) sends no residual
            raise ProtocolError(f"{name}: secure mode without a public key")
        st.public_key = setup.public_key
        if self.identity is None:
            raise ProtocolError(f"{name}: secure mode needs an identity key for the key agreement")
        missing = [p for p in st.peers if p not in self.peer_identities]
        if missing:
            raise ProtocolError(f"{name}: no pinned identity key for {missing}")
        if not st.peers:
            return self._next_request()
        shares = []
        for p in st.peers:  # send every share first, then receive: no ordering deadlock
            eph, share = make_key_share(self.identity, name, p, self.run_id)
            st.ephemeral[p] = _raw(eph)
            shares.append(send(p, share))
        st.k = 0
        return then(shares, st.peers[0], KeyShare, "accept_share")

    def accept_share(self, share: KeyShare) -> Next:
        """Step 1: verify a peer's share against its pinned identity; derive the pair seed."""
        st = self.state
        peer = st.peers[st.k]
        eph = X25519PrivateKey.from_private_bytes(st.ephemeral.pop(peer))
        st.seeds[peer] = accept_key_share(eph, share, self.name, peer, self.run_id, self.peer_identities[peer])
        st.k += 1
        if st.k < len(st.peers):
            return then([], st.peers[st.k], KeyShare, "accept_share")
        return self._next_request()

    def _logits(self, step: int, z: np.ndarray, label: str) -> Any:
        if self.state.secure:
            self.hold("logits", z)  # the secret behind the masked logits (audit ground truth)
            return MaskedLogits(step, mask_logits(z, self.name, self.state.seeds, label))
        return Logits(step, z)

    def on_request(self, req: Request) -> Next:
        """The active party's request: a training step (step 1), predictions, or stop."""
        st = self.state
        if req.action == "stop":
            return done(PassiveResult(self.name, st.weights, privacy(st.label_epsilon)))
        if req.action in (PREDICT_TRAIN, PREDICT_TEST, PREDICT):
            data = self.X_test if req.action == PREDICT_TEST else self.X
            if data is None:
                raise ProtocolError(f"{self.name}: asked for test predictions without test rows")
            z = partial_logits(data, st.weights)
            return self._next_request([send(self.active, self._logits(req.step, z, f"{req.action}:{req.step}"))])
        if req.action != "step":
            raise ProtocolError(f"{self.name}: unknown request {req.action!r}")
        st.step = req.step
        sent = send(self.active, self._logits(req.step, partial_logits(self.X, st.weights), f"step:{req.step}"))
        if st.secure:
            return then([sent], self.active, EncryptedResidual, "mask_gradient", patience=2.0)
        kind = Residual if st.label_epsilon is None else DpResidual
        return then([sent], self.active, kind, "apply_residual", patience=2.0)

    def apply_residual(self, msg: Residual | DpResidual) -> Next:
        """Plain step 3: w_k <- w_k - lr X_k^T r; acknowledge."""
        if msg.values.shape != (len(self.X),):
            raise ProtocolError(f"{self.name}: residual has shape {msg.values.shape}")
        return self._update(local_gradient(self.X, msg.values))

    def mask_gradient(self, msg: EncryptedResidual) -> Next:
        """Secure step 4: [[X_k^T r + R_k]] back to the key holder."""
        if len(msg.values) != len(self.X):
            raise ProtocolError(f"{self.name}: encrypted residual has {len(msg.values)} entries")
        masked, masks = masked_encrypted_gradient(msg.values, self.X, self.frac_bits)
        self.state.mask, self.state.frac_bits = IntVector(masks), masked.frac_bits
        return then([send(self.active, MaskedGradient(self.state.step, masked))], self.active, GradientReply,
                    "apply_gradient", patience=2.0)

    def apply_gradient(self, msg: GradientReply) -> Next:
        """Secure step 6: remove R_k, decode g_k, update the weights; acknowledge."""
        st = self.state
        assert st.public_key is not None  # set in on_setup, the only way into secure steps
        if len(msg.values) != self.X.shape[1]:
            raise ProtocolError(f"{self.name}: gradient reply of length {len(msg.values)}, "
                                f"expected {self.X.shape[1]}")
        grad = unmask_gradient(msg.values, st.mask, int(st.public_key.n), st.frac_bits)
        self.hold("gradient", grad)  # the masked gradient's secret (ground truth) and this party's own view
        if st.step == 0:
            self.hold("features", self.X)  # its own columns: what it solves its gradients with (audit only)
        return self._update(grad)

    def _update(self, grad: np.ndarray) -> Next:
        st = self.state
        st.weights = sgd_update(st.weights, grad, st.learning_rate)
        progress.report("logreg", st.step + 1, None if self.expected is None else int(self.expected[1]), unit="step")
        return self._next_request([send(self.active, Ack(st.step))])


# --------------------------------------------------------------------------- runs over channels


def _check_peers(channels: Mapping[str, Channel], expected: Sequence[str], me: str) -> None:
    missing = sorted(set(expected) - set(channels))
    extra = sorted(set(channels) - set(expected))
    if missing:
        raise ProtocolError(f"{me}: no channel to configured part{'ies' if len(missing) > 1 else 'y'} "
                            f"{missing}")
    if extra:
        raise ProtocolError(f"{me}: channel to unexpected part{'ies' if len(extra) > 1 else 'y'} {extra}")


def run_active(channels: Mapping[str, Channel], y_train: np.ndarray, y_test: np.ndarray | None = None,
               **kwargs: Any) -> ActiveResult:
    """The active party over its channels (one per passive party); see :class:`ActiveRole`."""
    parties = list(kwargs.get("parties", ()))
    _check_peers(channels, parties, ACTIVE)
    result: ActiveResult = drive(ActiveRole(y_train, y_test, **kwargs), channels)
    return result


def run_passive(channels: Mapping[str, Channel], name: str, X_train: np.ndarray,
                X_test: np.ndarray | None = None, **kwargs: Any) -> PassiveResult:
    """One passive party over its channels (the active party's, and its peers' in secure mode)."""
    if ACTIVE not in channels:
        raise ProtocolError(f"{name}: no channel to the active party")
    kwargs.setdefault("run_id", channels[ACTIVE].run_id)
    result: PassiveResult = drive(PassiveRole(name, X_train, X_test, **kwargs), channels)
    return result


@dataclass
class LocalRun:
    """Everything a local run produced: every party's result and the shared transcript."""

    active: ActiveResult
    passives: dict[str, PassiveResult]
    transcript: Transcript
    bytes_sent: dict[str, int]

    @property
    def weights(self) -> np.ndarray:
        """The concatenated model [w_0 | w_1 | ...] (for tests; no real party holds it)."""
        return np.concatenate([self.passives[k].weights for k in sorted(self.passives)])


def passive_names(count: int) -> list[str]:
    return [f"{PASSIVE}-{k}" for k in range(count)]


def run_local(
    X_train: Sequence[np.ndarray],
    y_train: np.ndarray,
    X_test: Sequence[np.ndarray] | None = None,
    y_test: np.ndarray | None = None,
    *,
    secure: bool = False,
    steps: int = 20,
    learning_rate: float = 0.5,
    key_bits: int = 2048,
    allow_insecure: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    ids_train: Sequence[Sequence[str] | None] | None = None,
    keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
    overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
    tap: AuditTap | None = None,
    allow_small_batches: bool = False,
    label_dp: float | None = None,
) -> LocalRun:
    """Run the active party and one passive party per feature block in this process.

    ``ids_train`` optionally gives each party's row IDs (first entry: the active party's)
    so misaligned inputs are caught; ``label_dp``: the active party trains on randomized-response labels at this ε
    (:mod:`.defence`). ``overrides`` replaces a party's task (tests: a
    stalled or misbehaving party); ``tap`` (audits) keeps what each party received and holds.
    """
    if not X_train:
        raise InputDataError("at least one passive party (feature block) is required")
    names = passive_names(len(X_train))
    endpoints = [Endpoint(ACTIVE, ACTIVE)] + [Endpoint(n, PASSIVE) for n in names]
    links = [(ACTIVE, n) for n in names]
    if secure:
        links += [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    net = LocalNetwork(endpoints, links=links, timeout=timeout, run_id=secrets.token_hex(8),
                       allow_insecure=allow_insecure, transcript=Transcript(tap))
    identities = {n: Ed25519PrivateKey.generate() for n in names}
    pinned = {n: k.public_key() for n, k in identities.items()}
    ids_active = ids_train[0] if ids_train else None
    # Callable[..., T], not [[], T]: the lambdas below bind loop variables as default arguments
    tasks: dict[str, Callable[..., Any]] = {
        ACTIVE: lambda: run_active(
            net.channels(ACTIVE), y_train, y_test, parties=names, secure=secure, steps=steps,
            learning_rate=learning_rate, key_bits=key_bits, allow_insecure=allow_insecure,
            ids_train=ids_active, keys=keys, allow_small_batches=allow_small_batches, label_dp=label_dp),
    }
    for k, name in enumerate(names):
        tasks[name] = (lambda k=k, name=name: run_passive(
            net.channels(name), name, X_train[k], None if X_test is None else X_test[k],
            identity=identities[name], peer_identities={p: pinned[p] for p in names if p != name},
            ids_train=ids_train[k + 1] if ids_train else None))
    for name, fn in (overrides or {}).items():
        tasks[name] = (lambda fn=fn, name=name: fn(net.channels(name)))
    results = run_parties(tasks, network=net, timeout=timeout * (steps + 4))
    return LocalRun(results[ACTIVE], {n: results[n] for n in names}, net.transcript,
                    net.transcript.bytes_sent_by("sender"))
