"""The data parties of secure linear regression as named steps (the coordinator: :mod:`.coordinator`).

Steps, numbered as in the package docstring:

* coordinator C: ``start`` (0: keys to every party) → ``on_plan`` (with the plan's
  ``obfuscators``: the first batch's to every passive party, 1) → per batch ``on_loss``
  (5: decrypt the loss) → ``on_masked_gradient`` (5: decrypt and return, once per party;
  to a passive party also its next batch's obfuscators) → per epoch the ``control`` bit
  (6, then the next epoch's first obfuscators);
* active B: ``on_public_key`` (0: the plan) → per batch ``on_encrypted_u`` (1, once per
  passive party) → ``on_cross_term`` (2, with 2+ passive parties) → [[d]], [[S]] and its
  masked gradient (3, 4) → ``on_gradient_return`` (5) → ``on_control`` (6);
* passive A_k: ``on_public_key`` → ``on_plan`` → per batch (``on_obfuscators``, 1, when C
  supplies them) [[u_k]] (1) → ``on_partial_sum`` (2, k >= 1) → ``on_residual`` (4) →
  ``on_gradient_return`` (5) → ``on_control`` (6).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from vflcrypto.data.tables import PartyTable, ids_digest
from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.he.ckks import CKKSVector
from vflcrypto.he.encoding import significant_frac_bits
from vflcrypto.he.paillier import PaillierVector
from vflcrypto.runtime import progress
from vflcrypto.runtime.steps import Next, Role, done, send, then
from vflcrypto.runtime.wire import IntVector

from .config import LinRegConfig
from .crypto import CKKSCrypto, Crypto, PaillierCrypto, crypto_from
from .math import (
    active_loss_share,
    check_bound,
    check_ckks_scale,
    check_plan,
    check_plan_matches,
    epoch_batches,
    paillier_value_bits,
    passive_loss_share,
    refuse_small_batches,
    validate_table,
)
from .messages import (
    ACTIVE,
    CKKS_RESIDUAL_RMS,
    COORD,
    PASSIVE,
    Control,
    CrossTerm,
    EncryptedLoss,
    EncryptedResidual,
    EncryptedU,
    GradientReturn,
    GradientReturnCKKS,
    Obfuscators,
    PartialSum,
    PublicKeyMsg,
    TrainingPlan,
)
from .model import PartyModel, Preprocessing, fit_label_scaling, fit_preprocessing

__all__ = ["ActiveRole", "PartyResult", "PassiveRole"]


@dataclass
class PartyResult:
    """What a data party ends with."""

    model: PartyModel
    history: list[np.ndarray] = field(default_factory=list)  # weights after each iteration


# --------------------------------------------------------------------------- data parties


@dataclass
class _PartyState:
    key: PublicKeyMsg | None = None
    plan: TrainingPlan | None = None
    prep_mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prep_transform: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    w: np.ndarray = field(default_factory=lambda: np.zeros(0))
    vel: np.ndarray = field(default_factory=lambda: np.zeros(0))
    epoch: int = 0
    b: int = 0
    k: int = 0
    mask: IntVector = field(default_factory=IntVector)  # Paillier: R mod n of the pending gradient
    mask_real: np.ndarray = field(default_factory=lambda: np.zeros(0))  # CKKS: R
    mask_frac: int = 0
    history: list[np.ndarray] = field(default_factory=list)
    # active: [[u_k]] of the batch (and the partial losses, cross terms), under the run's scheme
    u_parts: list[PaillierVector | CKKSVector] = field(default_factory=list)
    losses_parts: list[PaillierVector | CKKSVector] = field(default_factory=list)
    cross: list[PaillierVector | CKKSVector] = field(default_factory=list)


class _DataRole(Role[_PartyState]):
    """What B and every A_k share: the key, the preprocessing, the schedule, the update."""

    State = _PartyState

    def __init__(self, table: PartyTable, name: str, *, intercept: bool, preprocess: str,
                 record_history: bool, coordinator: str) -> None:
        super().__init__(name)
        self.table, self.coordinator, self.record = table, coordinator, record_history
        self.X_raw = validate_table(table, name, needs_label=self.role == ACTIVE)
        self.prep = fit_preprocessing(self.X_raw, method=preprocess, intercept=intercept)
        self.X = self.prep.apply(self.X_raw)
        self.state.prep_mean, self.state.prep_transform = self.prep.mean, self.prep.transform
        self.state.w, self.state.vel = np.zeros(self.X.shape[1]), np.zeros(self.X.shape[1])
        self.crypto: Crypto | None = None
        self.bound: int | None = None

    def accepted_keys(self) -> list[Any]:
        return [self.crypto.key] if self.crypto is not None else []

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        super().load_state(data, allow_insecure=allow_insecure)
        if self.state.key is not None:
            self._use_key(self.state.key)
        if self.state.plan is not None:
            self._bound(self.state.plan.n_passive)

    def _use_key(self, msg: PublicKeyMsg) -> None:
        self.state.key, self.crypto = msg, crypto_from(msg)

    @property
    def plan(self) -> TrainingPlan:
        assert self.state.plan is not None  # every step after on_plan has it
        return self.state.plan

    def _batch(self) -> np.ndarray:
        return epoch_batches(self.plan.n_rows, self.plan.batch_size, self.plan.seed, self.state.epoch)[self.state.b]

    def _bound(self, n_passive: int) -> None:
        batch = min(self.plan.batch_size, self.plan.n_rows)
        if isinstance(self.crypto, PaillierCrypto):
            self.bound = paillier_value_bits(self.crypto.pk.bits, batch, n_passive, self.X.shape[1])
            check_bound("a feature value", self.X, self.bound, self.name)
        elif isinstance(self.crypto, CKKSCrypto):
            columns = [*self.table.columns, *(["(intercept)"] if self.prep.intercept else [])]
            check_ckks_scale(self.X, columns, batch, self.name)

    def _model(self) -> PartyModel:
        st = self.state
        prep = Preprocessing(st.prep_mean, st.prep_transform, self.prep.intercept)
        return PartyModel(self.name, self.role, tuple(self.table.columns), st.w, prep)

    def _masked_gradient(self, d: Any, Xb: np.ndarray, m: int) -> Any:
        assert self.crypto is not None
        if isinstance(self.crypto, PaillierCrypto):  # X's precision from the data: cheaper products
            prod = d.dot(Xb, significant_frac_bits(Xb))
        else:
            prod = d.dot(Xb * self.crypto.grad_scale(m))
        msg, state = self.crypto.mask(prod)
        if isinstance(self.crypto, PaillierCrypto):
            R, frac = state
            self.state.mask, self.state.mask_frac = IntVector(R), frac
        else:
            self.state.mask_real = np.asarray(state)
        return msg

    def on_gradient_return(self, ret: GradientReturn | GradientReturnCKKS) -> Next:
        """Step 5: remove the own mask; the update with momentum; the next batch or the epoch's end."""
        st, crypto = self.state, self.crypto
        assert crypto is not None
        state = (st.mask, st.mask_frac) if isinstance(crypto, PaillierCrypto) else st.mask_real
        m = len(self._batch())
        raw = crypto.unmask(ret, state)
        self.hold("gradient", raw)  # the secret behind the masked gradient (audit ground truth)
        g = raw / (m * crypto.grad_scale(m)) + self.plan.l2 * st.w
        st.vel = self.plan.momentum * st.vel + g
        st.w = st.w - self.plan.lr * st.vel
        if self.record:
            st.history.append(st.w.copy())
        st.b += 1
        if st.b < len(epoch_batches(self.plan.n_rows, self.plan.batch_size, self.plan.seed, st.epoch)):
            return self._begin_batch()
        return then([], self.coordinator, Control, "on_control")

    def on_control(self, msg: Control) -> Next:
        """Step 6: stop, or the next epoch."""
        st = self.state
        st.epoch, st.b = st.epoch + 1, 0
        progress.report("linreg", st.epoch, self.plan.epochs, unit="epoch")
        if msg.stop or st.epoch >= self.plan.epochs:
            return done(PartyResult(self._model(), st.history))
        return self._begin_batch()

    def _begin_batch(self) -> Next:
        raise NotImplementedError


class PassiveRole(_DataRole):
    """Passive party A_index: features only."""

    role = PASSIVE

    def __init__(self, table: PartyTable, *, index: int, name: str = "passive-0", preprocess: str = "none",
                 record_history: bool = False, active: str = ACTIVE, coordinator: str = COORD,
                 expected: LinRegConfig | None = None) -> None:
        super().__init__(table, name, intercept=False, preprocess=preprocess, record_history=record_history,
                         coordinator=coordinator)
        self.index, self.active, self.expected = index, active, expected

    def start(self) -> Next:
        return then([], self.coordinator, PublicKeyMsg, "on_public_key")

    def on_public_key(self, msg: PublicKeyMsg) -> Next:
        """Step 0: C's public key; then B's plan."""
        self._use_key(msg)
        return then([], self.active, TrainingPlan, "on_plan")

    def on_plan(self, plan: TrainingPlan) -> Next:
        """Step 0: check the plan (against this party's own flags, if given) and the row IDs, then the first batch."""
        check_plan(plan, self.X.shape[0], self.name)
        check_plan_matches(plan, self.expected, self.name)
        if plan.id_digest != ids_digest(self.table.ids, "linreg"):
            raise InputDataError(f"{self.name}: rows are not in the active party's order (misaligned IDs); align first")
        refuse_small_batches(plan.n_rows, plan.batch_size, self.X.shape[1], self.name, allowed=plan.small_batches)
        self.hold("features", self.X)  # its own preprocessed columns (an attacker's own knowledge, for the audit)
        self.state.plan = plan
        self._bound(plan.n_passive)
        return self._begin_batch()

    def _begin_batch(self) -> Next:
        """Step 1: C's obfuscators first when the plan says C supplies them, then [[u_k]]."""
        if self.plan.obfuscators:
            return then([], self.coordinator, Obfuscators, "on_obfuscators")
        return self._send_u(None)

    def on_obfuscators(self, msg: Obfuscators) -> Next:
        """Step 1: C's fresh obfuscators for this batch, one per row of [[u_k]] and one for [[P_k]]
        (already checked on receipt: C's key, 0 < c < n², units)."""
        m = len(self._batch())
        if not isinstance(self.crypto, PaillierCrypto):
            raise ProtocolError(f"{self.name}: Paillier obfuscators in a CKKS run")
        if len(msg.values) != m + 1:
            raise ProtocolError(f"{self.name}: the coordinator sent {len(msg.values)} obfuscators for a batch of "
                                f"{m} rows (needs {m + 1}: one per row and one for the loss share)")
        return self._send_u(msg.values)

    def _send_u(self, obfuscators: PaillierVector | None) -> Next:
        """Step 1: [[u_k]] and the loss share [[P_k]] to B (with C's obfuscators, each used once)."""
        assert self.crypto is not None
        st, idx = self.state, self._batch()
        m = len(idx)
        u = self.X[idx] @ st.w
        if self.bound is not None:
            check_bound("a partial prediction u", u, self.bound, self.name)
            check_bound("a weight", st.w, self.bound, self.name)
        share = self.crypto.loss_scale(m) * passive_loss_share(u, st.w, self.plan.l2, m)
        self.hold("u", u)  # the secret behind [[u_k]] (audit ground truth)
        if obfuscators is None:
            msg = EncryptedU(self.crypto.encrypt(u), self.crypto.encrypt(np.array([share])))
        else:
            assert isinstance(self.crypto, PaillierCrypto)  # on_obfuscators checked it
            msg = EncryptedU(*self.crypto.encrypt_with([u, np.array([share])], obfuscators))
        if self.index >= 1:
            return then([send(self.active, msg)], self.active, PartialSum, "on_partial_sum")
        return then([send(self.active, msg)], self.active, EncryptedResidual, "on_residual")

    def on_partial_sum(self, msg: PartialSum) -> Next:
        """Step 2: the cross term [[2 Σ_i u_j,i Σ_{l<j} u_l,i]], re-randomized (B knows the partial sum)."""
        assert self.crypto is not None
        idx = self._batch()
        u = self.X[idx] @ self.state.w
        ls = self.crypto.loss_scale(len(idx))
        cross = CrossTerm(msg.values.dot((2.0 * ls * u)[:, None]).rerandomize())
        return then([send(self.active, cross)], self.active, EncryptedResidual, "on_residual")

    def on_residual(self, msg: EncryptedResidual) -> Next:
        """Step 4: [[Σ d_i x_i + R]] to C."""
        idx = self._batch()
        if len(msg.d) != len(idx):
            raise ProtocolError(f"{self.name}: residual vector of length {len(msg.d)}, batch has {len(idx)}")
        masked = self._masked_gradient(msg.d, self.X[idx], len(idx))
        assert self.crypto is not None
        return then([send(self.coordinator, masked)], self.coordinator, self.crypto.return_kind, "on_gradient_return")


class ActiveRole(_DataRole):
    """Active party B: features and the label; it sends the plan and forms [[d]] and [[S]]."""

    role = ACTIVE

    def __init__(self, table: PartyTable, *, passives: Sequence[str], config: LinRegConfig, name: str = ACTIVE,
                 record_history: bool = False, coordinator: str = COORD) -> None:
        super().__init__(table, name, intercept=config.fit_intercept, preprocess=config.preprocess,
                         record_history=record_history, coordinator=coordinator)
        self.passives, self.config = list(passives), config
        # the label scaling is B's own: nothing about it leaves B (the predictions come back to B)
        y = np.asarray(table.label, dtype=np.float64)
        self.label_offset, self.label_scale = fit_label_scaling(y, config.scales_label)
        self.y = (y - self.label_offset) / self.label_scale

    def _model(self) -> PartyModel:
        return replace(super()._model(), label_name=self.table.label_name, label_offset=self.label_offset,
                       label_scale=self.label_scale)

    def start(self) -> Next:
        return then([], self.coordinator, PublicKeyMsg, "on_public_key")

    def on_public_key(self, msg: PublicKeyMsg) -> Next:
        """Step 0: the plan to C and (with the ID digest) to every passive party."""
        self._use_key(msg)
        cfg, n = self.config, self.X.shape[0]
        batch = n if cfg.batch_size is None else min(cfg.batch_size, n)
        seed = cfg.seed if cfg.seed is not None else secrets.randbits(62)
        plan = TrainingPlan(n, batch, cfg.epochs, float(cfg.lr), float(cfg.momentum), float(cfg.l2), cfg.tol,
                            int(seed), len(self.passives), b"", obfuscators=cfg.supplies_obfuscators,
                            small_batches=cfg.allow_small_batches)
        self.state.plan = plan
        digest = ids_digest(self.table.ids, "linreg")
        self._bound(len(self.passives))
        if isinstance(self.crypto, CKKSCrypto):  # the residual at Θ = 0 is −y: its batch rms is bounded too
            check_ckks_scale(self.y[:, None], [f"label {self.table.label_name!r}"], plan.batch_size, self.name,
                             limit=CKKS_RESIDUAL_RMS,
                             remedy="scale the label (--label-scaling standardize) or use --scheme paillier")
        sends = [send(self.coordinator, plan), *(send(p, replace(plan, id_digest=digest)) for p in self.passives)]
        return _prefix(sends, self._begin_batch())

    def _begin_batch(self) -> Next:
        st = self.state
        st.u_parts, st.losses_parts, st.cross, st.k = [], [], [], 0
        return then([], self.passives[0], EncryptedU, "on_encrypted_u")

    def on_encrypted_u(self, msg: EncryptedU) -> Next:
        """Step 1: collect every passive party's [[u_k]]; step 2: the partial sums for the cross terms."""
        st, m = self.state, len(self._batch())
        if len(msg.u) != m or len(msg.partial_loss) != 1:
            raise ProtocolError(f"{self.name}: encrypted u of the wrong length")
        st.u_parts.append(msg.u)
        st.losses_parts.append(msg.partial_loss)
        st.k += 1
        if st.k < len(self.passives):
            return then([], self.passives[st.k], EncryptedU, "on_encrypted_u")
        sends, U = [], st.u_parts[0]
        for j in range(1, len(self.passives)):
            sends.append(send(self.passives[j], PartialSum(U.rerandomize())))
            U = U + st.u_parts[j]
        if len(self.passives) > 1:
            st.k = 1
            return then(sends, self.passives[1], CrossTerm, "on_cross_term")
        return self._residuals()

    def on_cross_term(self, msg: CrossTerm) -> Next:
        """Step 2: passive j's cross term; after the last, steps 3-4 (residuals, loss, own gradient)."""
        st = self.state
        st.cross.append(msg.value)
        st.k += 1
        if st.k < len(self.passives):
            return then([], self.passives[st.k], CrossTerm, "on_cross_term")
        return self._residuals()

    def _residuals(self) -> Next:
        """Steps 3-4: [[d]] to every passive party, [[S]] and the masked gradient to C."""
        assert self.crypto is not None
        st, idx = self.state, self._batch()
        m, Xb = len(idx), self.X[idx]
        r = Xb @ st.w - self.y[idx]
        self.hold("partial_residual", r)  # u_B - y: with the passive u_k, the batch's true d (audit ground truth)
        if self.bound is not None:
            check_bound("a residual u_B - y", r, self.bound, self.name)
            check_bound("a weight", st.w, self.bound, self.name)
        ls = self.crypto.loss_scale(m)
        U = st.u_parts[0]
        for part in st.u_parts[1:]:
            U = U + part
        # Fresh randomness from B: a passive party knows its own [[u_k]] (and the partial
        # sum it received); without it, [[d]] / ([[u_k]] [[partial]]) = 1 + (u_B - y) n
        # would give the last passive party B's residuals, i.e. the labels at Θ = 0.
        d = (U + r).rerandomize()
        S = U.dot((2.0 * ls * r)[:, None])
        for part in [*st.losses_parts, *st.cross]:
            S = S + part
        S = S + np.array([ls * active_loss_share(r, st.w, self.plan.l2, m)])
        sends = [*(send(p, EncryptedResidual(d)) for p in self.passives),
                 send(self.coordinator, EncryptedLoss(S)), send(self.coordinator, self._masked_gradient(d, Xb, m))]
        st.u_parts, st.losses_parts, st.cross = [], [], []
        return then(sends, self.coordinator, self.crypto.return_kind, "on_gradient_return")


def _prefix(sends: Sequence[tuple[str, Any]], nxt: Next) -> Next:
    return Next((*sends, *nxt.sends), nxt.wait, nxt.result)
