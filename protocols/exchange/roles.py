"""The two roles of the gradient exchange as named steps, and ``run_local``.

Steps (numbered as in the package docstring):

* active: :meth:`ActiveRole.start` (1 ``public_key``, 2 ``encrypted_residuals``),
  :meth:`ActiveRole.decrypt_masked_gradient` (4);
* passive: :meth:`PassiveRole.accept_key`, :meth:`PassiveRole.mask_gradient` (3),
  :meth:`PassiveRole.unmask_gradient` (5).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import ConfigurationError, InputDataError, KeyMismatchError
from vflcrypto.he.ou import refuse_decryption_oracle
from vflcrypto.he.paillier import PaillierPrivateKey, PaillierPublicKey, PaillierVector, generate_keypair
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
from vflcrypto.sharing.masking import mask_ciphertexts, unmask_residues

from .messages import (
    ACTIVE,
    OU_REFUSAL,
    PASSIVE,
    DecryptedMaskedGradient,
    EncryptedResiduals,
    MaskedGradient,
    PublicKeyAnnouncement,
)

__all__ = ["FRAC_BITS", "ActiveRole", "ExchangeResult", "PassiveRole", "masked_gradient", "run_local"]

FRAC_BITS = 32  # fixed-point precision of d and X: 2^-32 ≈ 2.3e-10 per value


def masked_gradient(enc_d: PaillierVector, X: np.ndarray) -> tuple[PaillierVector, list[int]]:
    """[[Xᵀd + R]] with R uniform mod n (one multi-exponentiation per feature); returns it and R."""
    return mask_ciphertexts(enc_d.dot(X))


@dataclass
class _ActiveState:
    pass  # the active party sends, decrypts once and is done: nothing to carry between steps


class ActiveRole(Role[_ActiveState]):
    """Holds the residuals ``d`` and the key pair; its result is what it decrypted (its view)."""

    role = ACTIVE
    State = _ActiveState

    def __init__(self, d: np.ndarray, keys: tuple[PaillierPublicKey, PaillierPrivateKey], *,
                 name: str = ACTIVE, peer: str = PASSIVE, allow_small_batches: bool = False) -> None:
        """``allow_small_batches``: return the passive party its gradient even when it has at least as many
        entries as there are rows (refused by default: :meth:`decrypt_masked_gradient`)."""
        refuse_decryption_oracle(keys[0], "exchange", OU_REFUSAL)
        super().__init__(name)
        self.d, (self.pk, self.sk), self.peer = np.asarray(d, dtype=np.float64), keys, peer
        self.allow_small_batches = allow_small_batches

    def accepted_keys(self) -> list[PaillierPublicKey]:
        return [self.pk]  # the masked gradient comes back under our own key

    def start(self) -> Next:
        """Steps 1-2: publish the public key, send [[d]]."""
        self.hold("secret_key", self.sk)
        return then([send(self.peer, PublicKeyAnnouncement(self.pk)),
                     send(self.peer, EncryptedResiduals(self.pk.encrypt_fixed(self.d, FRAC_BITS)))],
                    self.peer, MaskedGradient, "decrypt_masked_gradient")

    def decrypt_masked_gradient(self, msg: MaskedGradient) -> Next:
        """Step 4: decrypt Xᵀd + R mod n (uniform to us) and return it.

        Refused (before anything is decrypted) when the gradient has at least as many entries as
        there are rows, unless ``allow_small_batches``: ``Xᵀd`` is then ``F >= n`` equations in the
        ``n`` residuals, which a full-rank ``X`` solves for every residual (Weng et al. 2020's reverse
        multiplication; :func:`vflcrypto.audit.literature_tabular.residual_recovery`).
        """
        if msg.values.public_key != self.pk:
            raise KeyMismatchError("masked gradient under a foreign key")
        if len(msg.values) >= len(self.d) and not self.allow_small_batches:
            raise ConfigurationError(
                f"{self.peer}: its gradient has {len(msg.values)} entries for {len(self.d)} rows, so it could solve "
                "its own gradient X^T d for every residual d; exchange on more rows than the passive party's "
                "features, or allow it explicitly (allow_small_batches)")
        view = [v % self.pk.n for v in self.sk.decrypt(msg.values)]
        return done(view, [send(self.peer, DecryptedMaskedGradient(IntVector(view)))])


@dataclass
class _PassiveState:
    public_key: PaillierPublicKey | None = None
    mask: IntVector = field(default_factory=IntVector)
    frac_bits: int = 0


class PassiveRole(Role[_PassiveState]):
    """Holds the feature block ``X``; its result is its gradient Xᵀd."""

    role = PASSIVE
    State = _PassiveState

    def __init__(self, X: np.ndarray, *, name: str = PASSIVE, peer: str = ACTIVE) -> None:
        super().__init__(name)
        self.X, self.peer = np.asarray(X, dtype=np.float64), peer

    def accepted_keys(self) -> list[PaillierPublicKey]:
        return [self.state.public_key] if self.state.public_key is not None else []

    def start(self) -> Next:
        return then([], self.peer, PublicKeyAnnouncement, "accept_key")

    def accept_key(self, msg: PublicKeyAnnouncement) -> Next:
        """Step 1 received: accept ciphertexts under the announced key."""
        self.state.public_key = msg.public_key
        return then([], self.peer, EncryptedResiduals, "mask_gradient")

    def mask_gradient(self, msg: EncryptedResiduals) -> Next:
        """Step 3: [[Xᵀd + R]], R uniform mod n, back to the key holder."""
        if len(msg.residuals) != self.X.shape[0]:
            raise InputDataError(f"{len(msg.residuals)} residuals for {self.X.shape[0]} rows: "
                                 "parties are not aligned")
        masked, mask = masked_gradient(msg.residuals, self.X)
        self.hold("features", self.X)  # its own columns (an attacker's own knowledge, for the audit)
        self.state.mask, self.state.frac_bits = IntVector(mask), masked.frac_bits
        return then([send(self.peer, MaskedGradient(masked))], self.peer, DecryptedMaskedGradient,
                    "unmask_gradient")

    def unmask_gradient(self, msg: DecryptedMaskedGradient) -> Next:
        """Step 5: remove R; the result is Xᵀd."""
        pk = self.state.public_key
        assert pk is not None  # set by accept_key, the only way to reach this step
        gradient = unmask_residues(msg.values, self.state.mask, pk.n, self.state.frac_bits)
        self.hold("gradient", gradient)  # the secret behind the masked gradient (audit ground truth)
        return done(gradient)


@dataclass
class ExchangeResult:
    """What a local run returns: the passive party's gradient and the transcript."""

    gradient: np.ndarray
    transcript: Transcript
    seconds: float
    modulus: int


def run_local(d: np.ndarray, X: np.ndarray, *, keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
              key_bits: int = 2048, allow_insecure: bool = False, timeout: float = DEFAULT_TIMEOUT,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None, allow_small_batches: bool = False) -> ExchangeResult:
    """Run both roles in-process over a :class:`LocalNetwork` (a fresh key pair unless ``keys``).

    Keys below 2048 bits need ``allow_insecure=True``; ``overrides`` replaces a party's
    task (tests: a stalling or hostile party); ``tap`` (audits) keeps what each party
    received and holds.
    """
    from vflcrypto.runtime.steps import drive

    if keys is None:
        keys = generate_keypair(key_bits, allow_insecure=allow_insecure)
    net = LocalNetwork([Endpoint(ACTIVE, ACTIVE), Endpoint(PASSIVE, PASSIVE)], timeout=timeout,
                       allow_insecure=allow_insecure, transcript=Transcript(tap))
    t0 = time.perf_counter()
    # Callable[..., T], not [[], T]: the lambdas below bind loop variables as default arguments
    tasks: dict[str, Callable[..., Any]] = {
        ACTIVE: lambda: drive(ActiveRole(d, keys, allow_small_batches=allow_small_batches), net.channels(ACTIVE)),
        PASSIVE: lambda: drive(PassiveRole(X), net.channels(PASSIVE)),
    }
    for name, fn in (overrides or {}).items():
        tasks[name] = (lambda fn=fn, name=name: fn(net.channels(name)))
    out = run_parties(tasks, network=net)
    return ExchangeResult(out[PASSIVE], net.transcript, time.perf_counter() - t0, int(keys[0].n))
