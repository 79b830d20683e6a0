"""Encrypted gradient exchange: the core step of every vertical linear model.

Parties
    * **active party** ("active"): holds the residuals ``d`` (derived from its labels) and
      the Paillier key pair. Output: nothing new (it only ever sees a masked value).
    * **passive party** ("passive"): holds its feature block ``X`` (rows aligned with ``d``).
      Output: its own gradient ``g = Xᵀ d`` (and, in the demo, its updated weights).

Threat model
    Semi-honest, two parties. The passive party sees ``d`` only under the active party's
    key (IND-CPA under DCRA and the DJN short-exponent assumption); the active party sees
    ``g`` only behind a mask uniform mod n (perfect hiding). What is *not* hidden: the
    passive party learns its gradient ``Xᵀd`` itself, which over many iterations reveals
    information about ``d`` (and so about labels) — see Weng et al., "Privacy Leakage of
    Real-World Vertical Federated Learning" (2020). Protocols that must hide gradients
    from their owner use a coordinator (see :mod:`vflcrypto.protocols.linreg`).

Message flow (Hardy et al., "Private federated learning on vertically partitioned data
via entity resolution and additively homomorphic encryption", 2017, §3; one step)
    1. active → passive   ``PublicKeyAnnouncement``   the Paillier public key
    2. active → passive   ``EncryptedResiduals``      [[d]]
    3. passive → active   ``MaskedGradient``          [[Xᵀd + R]], R uniform mod n
    4. active → passive   ``DecryptedMaskedGradient`` Xᵀd + R mod n
    5. passive removes R and updates its weights.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from vflcrypto.attacks import ring_mask_findings, unrandomized_finding, unrandomized_paillier
from vflcrypto.errors import InputDataError, KeyMismatchError
from vflcrypto.leakage import PERFECT, AuditOutcome, Protection, audit, declare
from vflcrypto.masking import mask_ciphertexts, unmask_residues
from vflcrypto.paillier import PaillierPrivateKey, PaillierPublicKey, PaillierVector, generate_keypair
from vflcrypto.runtime import AuditTap, Channel, Endpoint, LocalNetwork, Transcript, run_parties
from vflcrypto.wire import IntVector

__all__ = [
    "DecryptedMaskedGradient",
    "EncryptedResiduals",
    "ExchangeResult",
    "MaskedGradient",
    "PublicKeyAnnouncement",
    "audit_run",
    "demo_step",
    "run_active",
    "run_local",
    "run_passive",
]

ACTIVE, PASSIVE = "active", "passive"
FRAC_BITS = 32  # fixed-point precision of d and X: 2^-32 ≈ 2.3e-10 per value


@declare("exchange.public_key", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
         reveals="the active party's Paillier public key (n)")
@dataclass(frozen=True)
class PublicKeyAnnouncement:
    public_key: PaillierPublicKey


@declare("exchange.encrypted_residuals", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.CIPHERTEXT, key_owner=ACTIVE,
         reveals="the number of aligned rows only; residuals are IND-CPA encrypted")
@dataclass(frozen=True)
class EncryptedResiduals:
    residuals: PaillierVector


@declare("exchange.masked_gradient", sender=PASSIVE, receiver=ACTIVE,
         protection=(Protection.CIPHERTEXT, Protection.MASKED), key_owner=ACTIVE, hiding_bits=PERFECT,
         reveals="the passive party's number of features; after decryption a value uniform mod n")
@dataclass(frozen=True)
class MaskedGradient:
    values: PaillierVector


@declare("exchange.decrypted_masked_gradient", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.PLAINTEXT,
         reveals="the passive party's own gradient Xᵀd once it removes its mask; "
                 "gradients over many steps leak information about d")
@dataclass(frozen=True)
class DecryptedMaskedGradient:
    values: IntVector


@dataclass
class ExchangeResult:
    """What a local run returns: the passive party's gradient and the transcript."""

    gradient: np.ndarray
    transcript: Transcript
    seconds: float
    modulus: int


# --------------------------------------------------------------------------- per-step math


def masked_gradient(enc_d: PaillierVector, X: np.ndarray) -> tuple[PaillierVector, list[int]]:
    """[[Xᵀd + R]] with R uniform mod n (one multi-exponentiation per feature); returns it and R."""
    return mask_ciphertexts(enc_d.dot(X))


# --------------------------------------------------------------------------- roles


def run_active(channel: Channel, d: np.ndarray, keys: tuple[PaillierPublicKey, PaillierPrivateKey]) -> list[int]:
    """Active party: publish the key, send [[d]], decrypt the masked gradient, return it.

    Returns what it decrypted (its whole view of the gradient), for audits.
    """
    pk, sk = keys
    channel.hold("secret_key", sk)
    channel.keyring.add(pk)  # accept ciphertexts under our own key
    channel.send(PublicKeyAnnouncement(pk))
    channel.send(EncryptedResiduals(pk.encrypt_fixed(d, FRAC_BITS)))
    masked = channel.recv(MaskedGradient).values
    if masked.public_key != pk:
        raise KeyMismatchError("masked gradient under a foreign key")
    view = [v % pk.n for v in sk.decrypt(masked)]
    channel.send(DecryptedMaskedGradient(IntVector(view)))
    return view


def run_passive(channel: Channel, X: np.ndarray) -> np.ndarray:
    """Passive party: compute [[Xᵀd + R]], get it decrypted, remove R; return Xᵀd."""
    pk = channel.recv(PublicKeyAnnouncement).public_key
    channel.keyring.add(pk)
    enc_d = channel.recv(EncryptedResiduals).residuals
    if len(enc_d) != X.shape[0]:
        raise InputDataError(f"{len(enc_d)} residuals for {X.shape[0]} rows: parties are not aligned")
    masked, mask = masked_gradient(enc_d, X)
    channel.send(MaskedGradient(masked))
    values = channel.recv(DecryptedMaskedGradient).values
    gradient = unmask_residues(values, mask, pk.n, masked.frac_bits)
    channel.hold("gradient", gradient)  # the secret behind the masked gradient (audit ground truth)
    return gradient


def run_local(d: np.ndarray, X: np.ndarray, *, key_bits: int = 2048, timeout: float = 120.0,
              keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
              tap: AuditTap | None = None) -> ExchangeResult:
    """Run both roles in-process over a :class:`LocalNetwork` (a fresh key pair unless ``keys``).

    ``tap`` (audits) keeps what each party received and holds.
    """
    if keys is None:
        keys = generate_keypair(key_bits, allow_insecure=key_bits < 2048)
    net = LocalNetwork([Endpoint("active", ACTIVE), Endpoint("passive", PASSIVE)], timeout=timeout,
                       allow_insecure=keys[0].bits < 2048, transcript=Transcript(tap))
    t0 = time.perf_counter()
    out = run_parties(
        {
            "active": lambda: run_active(net.channels("active")["passive"], d, keys),
            "passive": lambda: run_passive(net.channels("passive")["active"], X),
        },
        network=net,
    )
    return ExchangeResult(out["passive"], net.transcript, time.perf_counter() - t0, int(keys[0].n))


# --------------------------------------------------------------------------- demo and audit


def _example(n: int = 2_000, m: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)  # synthetic example data, not secret
    return rng.standard_normal(n) * 0.5, rng.standard_normal((n, m))


def demo_step(ctx: Any) -> dict[str, Any]:
    d, X = _example(500 if ctx.quick else 2_000)
    res = run_local(d, X, key_bits=ctx.key_bits)
    err = float(np.max(np.abs(res.gradient - X.T @ d)))
    ctx.say(f"{len(d)} rows x {X.shape[1]} features, {ctx.key_bits}-bit Paillier: "
            f"gradient max error {err:.2e} vs numpy, {res.transcript.total_bytes:,} bytes, {res.seconds:.2f} s")
    ctx.say(audit(res.transcript).to_text())
    return {"rows": len(d), "features": X.shape[1], "max_abs_error": err,
            "bytes": res.transcript.total_bytes}


def audit_run(key_bits: int = 2048, *, runs: int = 16) -> AuditOutcome:
    """Audit ``runs`` exchanges under one key pair, attacking what each party received.

    * passive: tries to read [[d]] without the key (a ciphertext sent without its
      obfuscator decodes as c = 1 + m n);
    * active: decrypts the masked gradients it received with its own key and tests them:
      uniform mod n, fresh masks from run to run (differences uniform), no correlation
      with the true gradients (ground truth from the passive party's view).
    The runs use the same data, so a mask reused across runs would cancel exactly.
    """
    d, X = _example(200, 16)
    keys = generate_keypair(key_bits, allow_insecure=key_bits < 2048)
    tap = AuditTap()
    results = [run_local(d, X, keys=keys, tap=tap) for _ in range(runs)]
    n = int(keys[0].n)
    sk = tap.held(ACTIVE, "secret_key")[0]
    residuals = [c for m in tap.received(PASSIVE, EncryptedResiduals) for c in m.residuals.ciphertexts()]
    views = [[v % n for v in sk.decrypt(m.values)] for m in tap.received(ACTIVE, MaskedGradient)]
    findings = [unrandomized_finding(PASSIVE, "exchange.encrypted_residuals", unrandomized_paillier(n, residuals))]
    findings += ring_mask_findings(ACTIVE, "exchange.masked_gradient", "masked gradient", [views], n,
                                   truth=[tap.held(PASSIVE, "gradient")])
    return AuditOutcome("exchange", audit(results[0].transcript), tuple(findings))
