"""The three roles of secure Poisson regression as named steps, and ``run_local``.

Steps (numbered as in the package docstring): coordinator :meth:`CoordinatorRole.start`
(0 ``public_key``), ``on_loss``, ``on_active_gradient``, ``on_passive_gradient`` (4);
active :meth:`ActiveRole.on_key` (0 ``plan``), ``on_exp`` (2: μ, residual, loss, masked
gradient), ``on_return`` (5); passive ``on_key``, ``on_plan`` (1 ``exp_u``),
``on_residual`` (3), ``on_return`` (5).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import ConfigurationError, InputDataError, KeyMismatchError, ProtocolError
from vflcrypto.he.ou import refuse_decryption_oracle
from vflcrypto.he.paillier import PaillierPrivateKey, PaillierPublicKey, generate_keypair
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
from vflcrypto.sharing.masking import mask_ciphertexts, unmask_residues

from .math import FRAC_BITS, PoissonParams, check_eta, prepare_active, prepare_passive
from .messages import (
    ACTIVE,
    COORD,
    OU_REFUSAL,
    PASSIVE,
    EncryptedExp,
    EncryptedLoss,
    EncryptedResidual,
    GradientReturn,
    MaskedGradient,
    Plan,
    PublicKey,
)

__all__ = ["ActiveRole", "CoordinatorRole", "PassiveRole", "PoissonRun", "refuse_few_rows", "run_local"]


def refuse_few_rows(rows: int, rank: int, party: str, *, allowed: bool) -> None:
    """Refuse full-batch training on no more rows than ``rank`` (the rank ``party``'s own columns can reach), unless
    ``allowed``: its gradient ``Zᵀ(μ − y)`` of every epoch then determines every residual (Weng et al. 2020's reverse
    multiplication; at the first epoch μ = 1, so the counts), or, for standardized columns without an intercept,
    every residual up to their mean (:func:`vflcrypto.audit.literature_tabular.residual_recovery`)."""
    if rows <= rank and not allowed:
        raise ConfigurationError(
            f"{party}: {rows} rows for columns of rank up to {rank}, so it could solve its own gradient for the "
            "residuals (the counts at the first epoch); train on more rows, or allow it explicitly "
            "(allow_small_batches)")

GRAD_FRAC = 3 * FRAC_BITS  # exp(u_A) · exp(u_B) · Z: three fixed-point factors


# --------------------------------------------------------------------------- coordinator


@dataclass
class _CoordState:
    public_key: PaillierPublicKey | None = None
    secret: IntVector = field(default_factory=IntVector)  # (p, q): kept on the coordinator's own node only
    epoch: int = 0
    losses: list[float] = field(default_factory=list)


class CoordinatorRole(Role[_CoordState]):
    """Holds the key; decrypts the loss and the masked gradients. Result: the loss of every epoch."""

    role = COORD
    State = _CoordState

    def __init__(self, *, epochs: int, keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
                 key_bits: int = 2048, allow_insecure: bool = False, active: str = ACTIVE,
                 passive: str = "passive-0", name: str = COORD) -> None:
        refuse_decryption_oracle(keys[0] if keys is not None else None, "poisson", OU_REFUSAL)
        super().__init__(name)
        self.epochs, self._keys = epochs, keys
        self.key_bits, self.allow_insecure = key_bits, allow_insecure
        self.active, self.passive = active, passive
        self.sk: PaillierPrivateKey | None = None

    def accepted_keys(self) -> list[PaillierPublicKey]:
        return [self.state.public_key] if self.state.public_key is not None else []

    def dump_state(self) -> bytes:
        """The state with the secret primes (only a runtime that keeps this state on the
        coordinator's own node, like the Flower ClientApp, calls this)."""
        if self.sk is not None:
            self.state.secret = IntVector(self.sk.secret_numbers())
        return super().dump_state()

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        super().load_state(data, allow_insecure=allow_insecure)
        if self.state.public_key is not None:
            self.sk = PaillierPrivateKey(self.state.public_key, *self.state.secret)

    def start(self) -> Next:
        """Step 0: a key pair (fresh unless given); the public key to both data parties."""
        pk, self.sk = self._keys or generate_keypair(self.key_bits, allow_insecure=self.allow_insecure)
        self.state.public_key = pk
        self.hold("secret_key", self.sk)
        return then([send(self.active, PublicKey(pk)), send(self.passive, PublicKey(pk))],
                    self.active, EncryptedLoss, "on_loss")

    def _secret(self) -> PaillierPrivateKey:
        assert self.sk is not None  # set by start (or load_state)
        return self.sk

    def on_loss(self, msg: EncryptedLoss) -> Next:
        """Step 4: the epoch's loss (declared)."""
        if len(msg.loss) != 1:
            raise ProtocolError(f"{self.active} sent a loss of {len(msg.loss)} values")
        self.state.losses.append(float(self._secret().decrypt_fixed(msg.loss)[0]))
        return then([], self.active, MaskedGradient, "on_active_gradient")

    def _reveal(self, msg: MaskedGradient) -> IntVector:
        sk = self._secret()
        return IntVector([v % sk.public_key.n for v in sk.decrypt(msg.values)])

    def on_active_gradient(self, msg: MaskedGradient) -> Next:
        """Step 4: decrypt the active party's masked gradient (uniform to us) and return it."""
        view = self._reveal(msg)
        return then([send(self.active, GradientReturn(view))], self.passive, MaskedGradient, "on_passive_gradient")

    def on_passive_gradient(self, msg: MaskedGradient) -> Next:
        """Step 4: the same for the passive party; the next epoch, or done."""
        view = self._reveal(msg)
        st = self.state
        st.epoch += 1
        progress.report("poisson", st.epoch, self.epochs, unit="epoch")
        sends = [send(self.passive, GradientReturn(view))]
        if st.epoch < self.epochs:
            return then(sends, self.active, EncryptedLoss, "on_loss")
        return done(list(st.losses), sends)


# --------------------------------------------------------------------------- data parties


def _update(w: np.ndarray, v: np.ndarray, grad: np.ndarray, lr: float, momentum: float) -> tuple[np.ndarray, ...]:
    v = momentum * v + grad
    return w - lr * v, v


@dataclass
class _DataState:
    public_key: PaillierPublicKey | None = None
    epoch: int = 0
    w: np.ndarray = field(default_factory=lambda: np.zeros(0))
    v: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mask: IntVector = field(default_factory=IntVector)
    plan: Plan | None = None


class _DataRole(Role[_DataState]):
    State = _DataState
    Z: np.ndarray
    coordinator: str

    def accepted_keys(self) -> list[PaillierPublicKey]:
        return [self.state.public_key] if self.state.public_key is not None else []

    def _key(self, msg: PublicKey) -> None:
        self.state.public_key = msg.public_key
        self.state.w = np.zeros(self.Z.shape[1])
        self.state.v = np.zeros(self.Z.shape[1])

    def _masked_gradient(self, residual: Any) -> tuple[str, Any]:
        masked, mask = mask_ciphertexts(residual.dot(self.Z, FRAC_BITS))
        self.state.mask = IntVector(mask)
        return send(self.coordinator, MaskedGradient(masked))

    def _apply(self, msg: GradientReturn, lr: float, momentum: float) -> np.ndarray:
        st = self.state
        assert st.public_key is not None
        if len(msg.values) != len(st.mask):
            raise ProtocolError(f"{self.coordinator} returned {len(msg.values)} values for {len(st.mask)} weights")
        grad = unmask_residues(msg.values, st.mask, st.public_key.n, GRAD_FRAC) / len(self.Z)
        self.hold("gradient", grad * len(self.Z))
        st.w, st.v = _update(st.w, st.v, grad, lr, momentum)
        st.epoch += 1
        return grad


class ActiveRole(_DataRole):
    """Holds the counts ``y`` and its columns; result: its weights (intercept last)."""

    role = ACTIVE

    def __init__(self, X: np.ndarray | None, y: np.ndarray, *, params: PoissonParams | None = None,
                 passive: str = "passive-0", coordinator: str = COORD, name: str = ACTIVE,
                 allow_small_batches: bool = False) -> None:
        """``allow_small_batches``: train even on no more rows than its own columns (:func:`refuse_few_rows`)."""
        super().__init__(name)
        self.Z, self.y = prepare_active(X, y)
        self.allow_small_batches = allow_small_batches
        self.params = params or PoissonParams()
        self.params.validate()
        self.passive, self.coordinator = passive, coordinator

    def start(self) -> Next:
        return then([], self.coordinator, PublicKey, "on_key")

    def on_key(self, msg: PublicKey) -> Next:
        """Step 0: accept the coordinator's key; send the plan."""
        refuse_few_rows(len(self.y), self.Z.shape[1], self.name, allowed=self.allow_small_batches)
        self.hold("features", self.Z)  # its own columns (an attacker's own knowledge, for the audit)
        self._key(msg)
        p = self.params
        return then([send(self.passive, Plan(len(self.y), p.epochs, p.learning_rate, p.momentum))],
                    self.passive, EncryptedExp, "on_exp")

    def on_exp(self, msg: EncryptedExp) -> Next:
        """Step 2: [[μ]] = exp(u_B)·[[exp(u_A)]], [[d]] = [[μ]] − y; the loss and its masked gradient to C."""
        st = self.state
        pk = st.public_key
        assert pk is not None  # set by on_key
        if msg.exp_u.public_key != pk or msg.u.public_key != pk:
            raise KeyMismatchError(f"{self.passive}'s values are not under the coordinator's key")
        if len(msg.exp_u) != len(self.y) or len(msg.u) != len(self.y):
            raise InputDataError(f"{self.passive} sent {len(msg.exp_u)} values for {len(self.y)} rows: "
                                 "parties are not aligned")
        u_b = self.Z @ st.w
        check_eta(u_b, self.name, st.epoch)
        self.hold("u", u_b)  # its own linear predictor (audit ground truth)
        mu = msg.exp_u.mul(np.exp(u_b), FRAC_BITS)
        residual = mu - self.y
        total = (mu.sum() - msg.u.dot(self.y.reshape(-1, 1), FRAC_BITS)) - float(self.y @ u_b)
        loss = total.mul(np.array([1.0 / len(self.y)]), FRAC_BITS)  # the mean, as C reports it
        self.hold("residual_frac", residual.frac_bits)
        sends = [send(self.passive, EncryptedResidual(residual)), send(self.coordinator, EncryptedLoss(loss)),
                 self._masked_gradient(residual)]
        return then(sends, self.coordinator, GradientReturn, "on_return")

    def on_return(self, msg: GradientReturn) -> Next:
        """Step 5: unmask, momentum step; the next epoch or the weights."""
        self._apply(msg, self.params.learning_rate, self.params.momentum)
        progress.report("poisson", self.state.epoch, self.params.epochs, unit="epoch")
        if self.state.epoch < self.params.epochs:
            return then([], self.passive, EncryptedExp, "on_exp")
        return done(self.state.w.copy())


class PassiveRole(_DataRole):
    """Holds its columns; result: its weights."""

    role = PASSIVE

    def __init__(self, X: np.ndarray, *, active: str = ACTIVE, coordinator: str = COORD,
                 name: str = "passive-0", expected: PoissonParams | None = None,
                 allow_small_batches: bool = False) -> None:
        """``allow_small_batches``: train even on no more rows than its own columns' rank plus one (its
        standardized columns, without an intercept, determine the residuals up to their mean:
        :func:`refuse_few_rows`)."""
        super().__init__(name)
        self.Z = prepare_passive(X)
        self.allow_small_batches = allow_small_batches
        self.active, self.coordinator, self.expected = active, coordinator, expected

    def start(self) -> Next:
        return then([], self.coordinator, PublicKey, "on_key")

    def on_key(self, msg: PublicKey) -> Next:
        """Step 0 received: accept the coordinator's key; wait for the plan."""
        self._key(msg)
        return then([], self.active, Plan, "on_plan")

    def on_plan(self, msg: Plan) -> Next:
        """Step 1: check the plan; send [[exp(u_A)]] and [[u_A]]."""
        if msg.rows != len(self.Z):
            raise InputDataError(f"{self.active} has {msg.rows} rows, this party {len(self.Z)}: parties are not "
                                 "aligned")
        plan = PoissonParams(msg.epochs, msg.learning_rate, msg.momentum)
        try:
            plan.validate()
        except InputDataError as exc:
            raise ProtocolError(f"{self.active} sent an invalid plan: {exc}") from None
        if self.expected is not None and plan != self.expected:
            raise ProtocolError(f"{self.active}'s plan {plan} differs from this party's {self.expected}")
        refuse_few_rows(msg.rows, self.Z.shape[1] + 1, self.name, allowed=self.allow_small_batches)
        self.hold("features", self.Z)  # its own columns (an attacker's own knowledge, for the audit)
        self.state.plan = msg
        return self._send_exp()

    def _send_exp(self) -> Next:
        st = self.state
        pk = st.public_key
        assert pk is not None
        u = self.Z @ st.w
        check_eta(u, self.name, st.epoch)
        self.hold("u", u)  # its own linear predictor (audit ground truth)
        sends = [send(self.active, EncryptedExp(pk.encrypt_fixed(np.exp(u), FRAC_BITS),
                                                pk.encrypt_fixed(u, FRAC_BITS)))]
        return then(sends, self.active, EncryptedResidual, "on_residual")

    def on_residual(self, msg: EncryptedResidual) -> Next:
        """Step 3: [[Z_Aᵀ d + R]] to the coordinator."""
        st = self.state
        if msg.residual.public_key != st.public_key:
            raise KeyMismatchError(f"{self.active}'s residual is not under the coordinator's key")
        if len(msg.residual) != len(self.Z):
            raise InputDataError(f"{len(msg.residual)} residuals for {len(self.Z)} rows: parties are not aligned")
        if msg.residual.frac_bits != 2 * FRAC_BITS:
            raise ProtocolError(f"{self.active}'s residual has {msg.residual.frac_bits} fractional bits, "
                                f"expected {2 * FRAC_BITS}")
        return then([self._masked_gradient(msg.residual)], self.coordinator, GradientReturn, "on_return")

    def on_return(self, msg: GradientReturn) -> Next:
        """Step 5: unmask, momentum step; the next epoch or the weights."""
        plan = self.state.plan
        assert plan is not None
        self._apply(msg, plan.learning_rate, plan.momentum)
        progress.report("poisson", self.state.epoch, plan.epochs, unit="epoch")
        if self.state.epoch < plan.epochs:
            return self._send_exp()
        return done(self.state.w.copy())


# --------------------------------------------------------------------------- local run


@dataclass
class PoissonRun:
    active: np.ndarray  # the active party's weights (its standardized columns, then the intercept)
    passive: np.ndarray
    losses: list[float]  # what the coordinator learned, one per epoch
    transcript: Transcript
    seconds: float


def run_local(X_active: np.ndarray | None, y: np.ndarray, X_passive: np.ndarray, *,
              params: PoissonParams | None = None, keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
              key_bits: int = 2048, allow_insecure: bool = False, timeout: float = DEFAULT_TIMEOUT,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None, allow_small_batches: bool = False) -> PoissonRun:
    """The active party, one passive party (``passive-0``) and the coordinator in-process (``allow_small_batches``:
    both data parties train even on as few rows as :func:`refuse_few_rows` refuses)."""
    params = params or PoissonParams()
    keys = keys or generate_keypair(key_bits, allow_insecure=allow_insecure)
    net = LocalNetwork([Endpoint(ACTIVE, ACTIVE), Endpoint("passive-0", PASSIVE), Endpoint(COORD, COORD)],
                       timeout=timeout, allow_insecure=allow_insecure, transcript=Transcript(tap))
    tasks: dict[str, Callable[..., Any]] = {
        ACTIVE: lambda: drive(ActiveRole(X_active, y, params=params, allow_small_batches=allow_small_batches),
                              net.channels(ACTIVE)),
        "passive-0": lambda: drive(PassiveRole(X_passive, allow_small_batches=allow_small_batches),
                                   net.channels("passive-0")),
        COORD: lambda: drive(CoordinatorRole(epochs=params.epochs, keys=keys), net.channels(COORD)),
    }
    for name, fn in (overrides or {}).items():
        tasks[name] = (lambda fn=fn, name=name: fn(net.channels(name)))
    t0 = time.perf_counter()
    out = run_parties(tasks, network=net)
    return PoissonRun(out[ACTIVE], out["passive-0"], out[COORD], net.transcript, time.perf_counter() - t0)
