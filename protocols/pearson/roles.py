"""The roles of cross-party Pearson correlation as named steps, and ``run_local``.

Steps (numbered as in the package docstring):

* active: :meth:`ActiveRole.start` (1 ``pearson.setup``, 2 ``pearson.columns`` to every
  passive party), :meth:`ActiveRole.on_masked` (4: decrypt; send them back if the passive
  party receives), :meth:`ActiveRole.on_mask` (6: unmask, if the active party receives);
* passive: :meth:`PassiveRole.on_setup`, :meth:`PassiveRole.on_columns` (3: masked
  products; 5 its masks if the active party receives), :meth:`PassiveRole.on_decrypted`
  (7: unmask, if it receives).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError, KeyMismatchError, ProtocolError
from vflcrypto.he.ou import refuse_decryption_oracle
from vflcrypto.he.paillier import PaillierPrivateKey, PaillierPublicKey, PaillierVector, generate_keypair
from vflcrypto.runtime import progress
from vflcrypto.runtime.channel import DEFAULT_TIMEOUT, AuditTap, Channel, Transcript
from vflcrypto.runtime.steps import Next, Role, done, drive, send, then
from vflcrypto.runtime.wire import IntVector
from vflcrypto.sharing.masking import mask_ciphertexts, unmask_residues

from .._train import run_star
from .math import FRAC_BITS, REVEALS, active_receives, passive_receives, standardize
from .messages import ACTIVE, OU_REFUSAL, PASSIVE, DecryptedMasked, EncryptedColumns, MaskedProducts, ProductMask, Setup

__all__ = ["ActiveRole", "PassiveRole", "PearsonRun", "run_active", "run_local", "run_passive"]


def _check_reveal(reveal: str) -> None:
    if reveal not in REVEALS:
        raise InputDataError(f"reveal must be one of {REVEALS}, not {reveal!r}")


# --------------------------------------------------------------------------- active


@dataclass
class _ActiveState:
    j: int = 0
    view: IntVector = field(default_factory=IntVector)  # what it decrypted from the current party (uniform)
    corr: dict[str, np.ndarray] = field(default_factory=dict)


class ActiveRole(Role[_ActiveState]):
    """The key holder: encrypts its standardized columns; learns the correlations if ``reveal`` says so.

    Result: ``{passive party: (Fa, Fp) correlation matrix}``, empty when it receives none.
    """

    role = ACTIVE
    State = _ActiveState

    def __init__(self, X: np.ndarray, *, passives: Sequence[str], keys: tuple[PaillierPublicKey, PaillierPrivateKey],
                 reveal: str = "both", name: str = ACTIVE) -> None:
        refuse_decryption_oracle(keys[0], "pearson", OU_REFUSAL)
        super().__init__(name)
        _check_reveal(reveal)
        self.Z = standardize(X, name)
        self.passives = sorted(passives)
        if not self.passives:
            raise InputDataError("Pearson correlation needs at least one passive party")
        self.pk, self.sk = keys
        self.reveal = reveal

    def accepted_keys(self) -> list[PaillierPublicKey]:
        return [self.pk]

    def start(self) -> Next:
        """Steps 1-2: the setup and [[Za]] (column-major, fixed point) to every passive party."""
        self.hold("secret_key", self.sk)
        n, fa = self.Z.shape
        cols = self.pk.encrypt_fixed(self.Z.T.ravel(), FRAC_BITS)
        sends = [s for peer in self.passives
                 for s in (send(peer, Setup(self.pk, n, fa, self.reveal)), send(peer, EncryptedColumns(cols)))]
        return then(sends, self.passives[0], MaskedProducts, "on_masked")

    def on_masked(self, msg: MaskedProducts) -> Next:
        """Step 4: decrypt the masked products (uniform to us); return them if the passive party receives."""
        peer = self.passives[self.state.j]
        if msg.values.public_key != self.pk:
            raise KeyMismatchError(f"{peer}'s masked products are under a foreign key")
        if len(msg.values) == 0 or len(msg.values) % self.Z.shape[1]:
            raise ProtocolError(f"{peer} sent {len(msg.values)} masked products for {self.Z.shape[1]} active columns")
        view = self.state.view = IntVector([v % self.pk.n for v in self.sk.decrypt(msg.values)])
        sends = [send(peer, DecryptedMasked(view))] if passive_receives(self.reveal) else []
        if active_receives(self.reveal):
            return then(sends, peer, ProductMask, "on_mask")
        return self._next(sends)

    def on_mask(self, msg: ProductMask) -> Next:
        """Step 6 (the active party receives): remove the passive party's masks; r = products / n."""
        peer = self.passives[self.state.j]
        view = self.state.view
        if len(msg.values) != len(view):
            raise ProtocolError(f"{peer} sent {len(msg.values)} masks for {len(view)} products")
        prod = unmask_residues(view, msg.values, self.pk.n, 2 * FRAC_BITS)
        n, fa = self.Z.shape
        self.state.corr[peer] = prod.reshape(fa, -1) / n
        return self._next([])

    def _next(self, sends: list[tuple[str, Any]]) -> Next:
        st = self.state
        st.j += 1
        progress.report("pearson", st.j, len(self.passives), unit="party")
        if st.j < len(self.passives):
            return then(sends, self.passives[st.j], MaskedProducts, "on_masked")
        return done(dict(st.corr), sends)


# --------------------------------------------------------------------------- passive


@dataclass
class _PassiveState:
    setup: Setup | None = None
    mask: IntVector = field(default_factory=IntVector)


class PassiveRole(Role[_PassiveState]):
    """A feature party; result: the (Fa, Fp) correlation matrix if it receives, else ``None``."""

    role = PASSIVE
    State = _PassiveState

    def __init__(self, X: np.ndarray, *, name: str = PASSIVE, peer: str = ACTIVE,
                 expected_reveal: str | None = None) -> None:
        super().__init__(name)
        self.Z = standardize(X, name)
        self.peer, self.expected_reveal = peer, expected_reveal

    def accepted_keys(self) -> list[PaillierPublicKey]:
        st = self.state.setup
        return [st.public_key] if st is not None else []

    def start(self) -> Next:
        return then([], self.peer, Setup, "on_setup")

    def on_setup(self, msg: Setup) -> Next:
        """Step 1 received: the key, the shape and who receives (checked against this party's plan)."""
        if msg.reveal not in REVEALS:
            raise ProtocolError(f"{self.peer} asks for an unknown reveal mode {msg.reveal!r}")
        if self.expected_reveal is not None and msg.reveal != self.expected_reveal:
            raise ProtocolError(f"{self.peer} runs reveal {msg.reveal!r}; this party expects {self.expected_reveal!r}")
        if msg.rows != len(self.Z):
            raise InputDataError(f"{self.peer} has {msg.rows} rows, this party {len(self.Z)}: parties are not aligned")
        if msg.columns < 1:
            raise ProtocolError(f"{self.peer} announced {msg.columns} columns")
        self.state.setup = msg
        return then([], self.peer, EncryptedColumns, "on_columns")

    def on_columns(self, msg: EncryptedColumns) -> Next:
        """Step 3: [[za_jᵀ Zp + R]] for every active column j, R uniform mod n (5: R itself if the active receives)."""
        setup = self.state.setup
        assert setup is not None
        if msg.columns.public_key != setup.public_key:
            raise KeyMismatchError(f"{self.peer}'s columns are not under the key it announced")
        n = len(self.Z)
        if len(msg.columns) != n * setup.columns:
            raise InputDataError(f"{len(msg.columns)} encrypted values for {setup.columns} columns of {n} rows")
        prods = PaillierVector.concat([msg.columns[j * n : (j + 1) * n].dot(self.Z, FRAC_BITS)
                                       for j in range(setup.columns)])
        masked, mask = mask_ciphertexts(prods)
        self.state.mask = IntVector(mask)
        sends = [send(self.peer, MaskedProducts(masked))]
        if active_receives(setup.reveal):
            sends.append(send(self.peer, ProductMask(IntVector(mask))))
        if setup.reveal == "active":
            return done(None, sends)
        return then(sends, self.peer, DecryptedMasked, "on_decrypted")

    def on_decrypted(self, msg: DecryptedMasked) -> Next:
        """Step 7 (the passive party receives): remove its masks; r = products / n."""
        setup = self.state.setup
        assert setup is not None
        if len(msg.values) != len(self.state.mask):
            raise ProtocolError(f"{self.peer} returned {len(msg.values)} values for {len(self.state.mask)} products")
        prod = unmask_residues(msg.values, self.state.mask, setup.public_key.n, 2 * FRAC_BITS)
        return done(prod.reshape(setup.columns, -1) / len(self.Z))


# --------------------------------------------------------------------------- runs


def run_active(channels: Mapping[str, Channel], X: np.ndarray, *, keys: tuple[PaillierPublicKey, PaillierPrivateKey],
               timeout: float | None = None, **kwargs: Any) -> dict[str, np.ndarray]:
    res: dict[str, np.ndarray] = drive(ActiveRole(X, passives=list(channels), keys=keys, **kwargs), channels,
                                       timeout=timeout)
    return res


def run_passive(channels: Mapping[str, Channel], X: np.ndarray, *, timeout: float | None = None,
                **kwargs: Any) -> np.ndarray | None:
    ((peer, _),) = channels.items()
    res: np.ndarray | None = drive(PassiveRole(X, peer=peer, **kwargs), channels, timeout=timeout)
    return res


@dataclass
class PearsonRun:
    active: dict[str, np.ndarray]
    passive: dict[str, np.ndarray | None]
    transcript: Transcript
    seconds: float


def run_local(X_active: np.ndarray, X_passives: Sequence[np.ndarray], *, reveal: str = "both",
              keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None, key_bits: int = 2048,
              allow_insecure: bool = False, timeout: float = DEFAULT_TIMEOUT,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None) -> PearsonRun:
    """The active party and ``len(X_passives)`` passive parties (``passive-0`` …) in-process."""
    _check_reveal(reveal)
    keys = keys or generate_keypair(key_bits, allow_insecure=allow_insecure)

    def passive(k: int) -> Callable[[Mapping[str, Channel]], np.ndarray | None]:
        return lambda ch: run_passive(ch, X_passives[k], name=f"passive-{k}")

    out, transcript, seconds = run_star(
        lambda ch: run_active(ch, X_active, keys=keys, reveal=reveal),
        [passive(k) for k in range(len(X_passives))],
        timeout=timeout, allow_insecure=allow_insecure, tap=tap, overrides=overrides)
    names = [f"passive-{k}" for k in range(len(X_passives))]
    return PearsonRun(out[ACTIVE], {n: out[n] for n in names}, transcript, seconds)
