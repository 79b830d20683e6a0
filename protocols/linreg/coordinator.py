"""The coordinator C of secure linear regression as named steps: keys, decryptions, obfuscators, control.

Steps, numbered as in the package docstring: ``start`` (0: keys to every party) →
``on_plan`` (with the plan's ``obfuscators``: the first batch's to every passive party, 1)
→ per batch ``on_loss`` (5: decrypt the loss) → ``on_masked_gradient`` (5: decrypt and
return, once per party; to a passive party also its next batch's obfuscators) → per
epoch the ``control`` bit (6, then the next epoch's first obfuscators).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.he.ckks import CKKSContext, CKKSVector
from vflcrypto.he.obfuscators import ObfuscatorStock
from vflcrypto.he.paillier import PaillierPrivateKey, PaillierPublicKey, PaillierVector, generate_keypair
from vflcrypto.runtime import progress
from vflcrypto.runtime.steps import Next, Recv, Role, done, send, then
from vflcrypto.runtime.wire import IntVector

from .config import LinRegConfig
from .crypto import gradient_flooding, loss_flooding, reveal_masked
from .math import (
    check_divergence,
    check_plan_matches,
    converged,
    epoch_batches,
)
from .messages import (
    ACTIVE,
    COORD,
    Control,
    EncryptedLoss,
    MaskedGradient,
    MaskedGradientCKKS,
    Obfuscators,
    PublicKeyMsg,
    TrainingPlan,
)

__all__ = ["CoordinatorResult", "CoordinatorRole"]


@dataclass
class CoordinatorResult:
    # per iteration and per epoch, in the units C sees: those of the label the active party trains on
    # (standardized by default; C never learns the label's scale, LinRegRun converts)
    losses: list[float]
    epoch_losses: list[float]
    epochs_run: int
    converged: bool
    # with coordinator obfuscators: how many C's producer made, handed out from its stock, computed online
    obfuscators: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------- coordinator


@dataclass
class _CoordState:
    key: PublicKeyMsg | None = None
    secret: IntVector = field(default_factory=IntVector)  # Paillier (p, q): kept on C's own node only
    ckks_secret: bytes = b""  # CKKS: the secret context, likewise
    plan: TrainingPlan | None = None
    epoch: int = 0
    b: int = 0  # batch of the epoch
    k: int = 0  # party whose masked gradient comes next
    batch_losses: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    epoch_losses: list[float] = field(default_factory=list)


class CoordinatorRole(Role[_CoordState]):
    """C: holds the key pair; decrypts only the loss and masked values.

    Under CKKS every decryption C returns is flooded (:func:`~.crypto.gradient_flooding`), and so
    is every loss its stopping bit is computed from (:func:`~.crypto.loss_flooding`);
    ``flood=False`` switches that off, for tests and benchmarks only (IND-CPA^D: the raw
    decryptions would carry C's key-dependent error to the data parties).

    With the plan's ``obfuscators`` it also keeps an :class:`~vflcrypto.he.obfuscators.ObfuscatorStock`
    of one iteration's encryptions of zero, filled by the CRT on the low-priority pool while
    it waits, and sends each passive party its next batch's (call :meth:`close` when done:
    :func:`run_coordinator` does).
    """

    role = COORD
    State = _CoordState

    def __init__(self, *, scheme: str = "paillier", key_bits: int = 2048, allow_insecure: bool = False,
                 active: str = ACTIVE, passives: Sequence[str] = ("passive-0",),
                 keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
                 ckks_context: CKKSContext | None = None, name: str = COORD,
                 expected: LinRegConfig | None = None, flood: bool = True) -> None:
        super().__init__(name)
        self.flood = flood
        if scheme not in ("paillier", "ckks"):
            raise InputDataError(f"unknown scheme {scheme!r}")
        self.expected = expected
        self.scheme, self.active, self.passives = scheme, active, list(passives)
        self.parties = [active, *self.passives]
        self.key_bits, self.allow_insecure = key_bits, allow_insecure
        self._keys, self._ckks = keys, ckks_context
        self.secret: Any = None
        self._stock: ObfuscatorStock[PaillierVector] | None = None
        self.obfuscator_counts: dict[str, int] = {}

    def close(self) -> None:
        """Stop the obfuscator producer and drop its stock (idempotent); keep its counters."""
        if self._stock is not None:
            stats = self._stock.stats()
            self.obfuscator_counts = {"produced": stats.produced, "from_stock": stats.from_stock,
                                      "online": stats.online}
            self._stock.close()
            self._stock = None

    def accepted_keys(self) -> list[Any]:
        key = self.state.key
        if key is None:
            return []
        return [key.paillier if key.paillier is not None else key.ckks]  # ciphertexts under C's own key

    def dump_state(self) -> bytes:
        """The state with C's secret key material (only a runtime that keeps C's state on C's own
        node, like the Flower ClientApp, calls this)."""
        if isinstance(self.secret, PaillierPrivateKey):
            self.state.secret = IntVector(self.secret.secret_numbers())
        elif self.secret is not None and not self.state.ckks_secret:
            self.state.ckks_secret = self.secret.secret_bytes()
        return super().dump_state()

    def load_state(self, data: bytes, *, allow_insecure: bool = False) -> None:
        super().load_state(data, allow_insecure=allow_insecure)
        key = self.state.key
        if key is not None and key.paillier is not None:
            self.secret = PaillierPrivateKey(key.paillier, *self.state.secret)
        elif key is not None and key.ckks is not None:
            self.secret = CKKSContext.from_secret_bytes(self.state.ckks_secret, key.ckks.to_bytes())

    def start(self) -> Next:
        """Step 0: a fresh key pair; the public key (or public CKKS context) to every data party."""
        if self.scheme == "paillier":
            pk, sk = self._keys if self._keys is not None else generate_keypair(
                self.key_bits, allow_insecure=self.allow_insecure)
            self.state.key, self.secret = PublicKeyMsg("paillier", pk, None), sk
        else:
            ctx = self._ckks if self._ckks is not None else CKKSContext.generate(allow_insecure=self.allow_insecure)
            self.state.key, self.secret = PublicKeyMsg("ckks", None, ctx.public()), ctx
        self.hold("secret_key", self.secret)
        assert self.state.key is not None
        return then([send(p, self.state.key) for p in self.parties], self.active, TrainingPlan, "on_plan")

    def on_plan(self, plan: TrainingPlan) -> Next:
        """Step 0: B's plan (checked, against this party's own flags if given); then the first batch's loss."""
        if plan.n_passive != len(self.passives):
            raise ProtocolError("the plan names a different number of passive parties")
        if plan.obfuscators and self.scheme != "paillier":
            raise ProtocolError("the plan asks for Paillier obfuscators in a CKKS run")
        check_plan_matches(plan, self.expected, self.name)
        self.state.plan = plan
        return then(self._obfuscator_sends(0, self.passives), self.active, EncryptedLoss, "on_loss")

    def _obfuscator_sends(self, b: int, passives: Sequence[str]) -> list[tuple[str, Any]]:
        """Step 1 (C's part, with the plan's ``obfuscators``): to each of ``passives`` fresh
        obfuscators for its batch ``b`` of this epoch, one per row of [[u_k]] and one for [[P_k]].

        They come from the stock, filled while C waits (the shortfall computed now); the
        stock is started on first use and holds one iteration's worth.
        """
        plan = self.state.plan
        assert plan is not None  # on_plan ran first
        if not plan.obfuscators or not passives:
            return []
        if self._stock is None:  # one iteration's worth: the most C hands out at once
            limit = len(self.passives) * (min(plan.batch_size, plan.n_rows) + 1)
            self._stock = ObfuscatorStock(self.secret, limit).start()
        count = len(self._batches()[b]) + 1
        sends = [send(p, Obfuscators(self._stock.take(count))) for p in passives]
        if self.state.epoch == plan.epochs - 1 and b == len(self._batches()) - 1 and passives[-1] == self.passives[-1]:
            self.close()  # the plan's last batch: nothing more to make
        return sends

    def _then_obfuscators(self, sends: Sequence[tuple[str, Any]], b: int,
                          passives: Sequence[str]) -> Iterator[tuple[str, Any]]:
        """``sends``, then the obfuscators for batch ``b``: streamed, so the peers get ``sends``
        (a gradient return, the control bit) before C computes any shortfall of its stock."""
        yield from sends
        yield from self._obfuscator_sends(b, passives)

    def _batches(self) -> list[np.ndarray]:
        plan = self.state.plan
        assert plan is not None  # on_plan ran first
        return epoch_batches(plan.n_rows, plan.batch_size, plan.seed, self.state.epoch)

    def on_loss(self, msg: EncryptedLoss) -> Next:
        """Step 5: decrypt the batch loss S (and L = S / 2m); then the masked gradients."""
        st = self.state
        if len(msg.value) != 1:
            raise ProtocolError("loss must be a single value")
        m = len(self._batches()[st.b])
        if self.scheme == "paillier":
            st.batch_losses.append(float(self.secret.decrypt_fixed(msg.value)[0]) / (2 * m))
        else:
            if not isinstance(msg.value, CKKSVector):
                raise ProtocolError(f"a {type(msg.value).__name__} loss in a CKKS run (a peer sent the other scheme)")
            assert st.plan is not None  # on_plan ran first
            flood = loss_flooding(self.secret, st.plan) if self.flood else False
            st.batch_losses.append(float(msg.value.decrypt(self.secret, flood=flood)[0]))
        st.k = 0
        return then([], self.parties[0], self._masked_kind(), "on_masked_gradient")

    def _masked_kind(self) -> type:
        return MaskedGradient if self.scheme == "paillier" else MaskedGradientCKKS

    def on_masked_gradient(self, msg: MaskedGradient | MaskedGradientCKKS) -> Next:
        """Step 5: decrypt a party's masked gradient (uniform to C) and return it; a passive party's
        next batch of this epoch starts now, so its obfuscators follow (step 1)."""
        st = self.state
        party = self.parties[st.k]
        plan = st.plan
        assert plan is not None  # on_plan ran first
        m = len(self._batches()[st.b])
        if party in self.passives and m <= len(msg.values) and not plan.small_batches:
            raise ProtocolError(f"{party} sent a gradient of {len(msg.values)} features for a batch of {m} rows: it "
                                "could solve it for the batch's residuals; the plan does not allow small batches, "
                                "so C returns none")
        flood = (gradient_flooding(self.secret, plan, len(msg.values))
                 if self.flood and isinstance(msg.values, CKKSVector) else False)
        sends = [send(party, reveal_masked(self.secret, msg.values, flood))]
        nxt_b = st.b + 1
        more = [party] if party in self.passives and nxt_b < len(self._batches()) else []
        st.k += 1
        if st.k < len(self.parties):
            wait = Recv(self.parties[st.k], self._masked_kind(), "on_masked_gradient")
        else:
            st.b += 1
            if st.b == len(self._batches()):
                return self._end_epoch(sends)
            wait = Recv(self.active, EncryptedLoss, "on_loss")
        return Next(self._then_obfuscators(sends, nxt_b, more), wait)

    def _end_epoch(self, sends: list[tuple[str, Any]]) -> Next:
        """Step 6: the stopping test on the mean epoch loss; one bit to every party."""
        st, plan = self.state, self.state.plan
        assert plan is not None
        st.losses.extend(st.batch_losses)
        st.epoch_losses.append(float(np.mean(st.batch_losses)))
        st.batch_losses = []
        check_divergence(st.epoch_losses, st.epoch)
        prev = st.epoch_losses[-2] if len(st.epoch_losses) > 1 else None
        stop = converged(prev, st.epoch_losses[-1], plan.tol)
        sends += [send(p, Control(st.epoch, stop)) for p in self.parties]
        st.epoch += 1
        progress.report("linreg", st.epoch, plan.epochs, unit="epoch")
        if stop or st.epoch >= plan.epochs:
            self.close()
            return done(CoordinatorResult(st.losses, st.epoch_losses, st.epoch, stop, self.obfuscator_counts), sends)
        st.b = 0
        return Next(self._then_obfuscators(sends, 0, self.passives), Recv(self.active, EncryptedLoss, "on_loss"))
