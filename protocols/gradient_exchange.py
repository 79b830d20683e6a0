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
    from their owner use a coordinator (see :mod:`protocols.linear_regression`).

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

from vflcrypto.errors import InputDataError, KeyMismatchError
from vflcrypto.leakage import PERFECT, AuditOutcome, EmpiricalFinding, Protection, audit, declare
from vflcrypto.masking import mask_ciphertexts, unmask_residues
from vflcrypto.paillier import PaillierPrivateKey, PaillierPublicKey, PaillierVector, generate_keypair
from vflcrypto.runtime import Channel, Endpoint, LocalNetwork, Transcript, run_parties
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
    """What a local run returns: the passive party's gradient and the transcript.

    ``active_view`` (only when asked for) holds what the active party decrypted: the
    masked gradient residues, for the empirical audit.
    """

    gradient: np.ndarray
    transcript: Transcript
    seconds: float
    modulus: int
    active_view: tuple[int, ...] = ()


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
    return unmask_residues(values, mask, pk.n, masked.frac_bits)


def run_local(d: np.ndarray, X: np.ndarray, *, key_bits: int = 2048, timeout: float = 120.0,
              capture_active_view: bool = False,
              keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None) -> ExchangeResult:
    """Run both roles in-process over a :class:`LocalNetwork` (a fresh key pair unless ``keys``)."""
    if keys is None:
        keys = generate_keypair(key_bits, allow_insecure=key_bits < 2048)
    net = LocalNetwork([Endpoint("active", ACTIVE), Endpoint("passive", PASSIVE)], timeout=timeout,
                       allow_insecure=key_bits < 2048)
    t0 = time.perf_counter()
    out = run_parties(
        {
            "active": lambda: run_active(net.channels("active")["passive"], d, keys),
            "passive": lambda: run_passive(net.channels("passive")["active"], X),
        },
        network=net,
    )
    return ExchangeResult(out["passive"], net.transcript, time.perf_counter() - t0, int(keys[0].n),
                          tuple(out["active"]) if capture_active_view else ())


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


def active_view(d: np.ndarray, X: np.ndarray, key_bits: int, runs: int) -> np.ndarray:
    """What the active party decrypts in ``runs`` exchanges, as fractions of n in [0, 1).

    One key pair serves every run (the masks are fresh each time), so the check does not
    pay for ``runs`` key generations.
    """
    keys = generate_keypair(key_bits, allow_insecure=key_bits < 2048)
    views = []
    for _ in range(runs):
        res = run_local(d, X, key_bits=key_bits, capture_active_view=True, keys=keys)
        views.extend(v / res.modulus for v in res.active_view)
    return np.asarray(views)


def audit_run(key_bits: int = 2048) -> AuditOutcome:
    """Audit one exchange, plus the active party's view of masked gradients.

    Empirical check: the active party's decryptions for the real data and for a zero
    gradient (X = 0) should be indistinguishable; we report the two-sample
    Kolmogorov–Smirnov distance between them (small: no signal) next to the 1% critical
    value for the sample sizes.
    """
    d, X = _example(200, 4)
    res = run_local(d, X, key_bits=key_bits)
    report = audit(res.transcript)
    runs = 10
    real = active_view(d, X, key_bits, runs)
    zero = active_view(d, np.zeros_like(X), key_bits, runs)
    ks = _ks_distance(real, zero)
    critical = 1.63 * np.sqrt((len(real) + len(zero)) / (len(real) * len(zero)))
    finding = EmpiricalFinding(
        observer=ACTIVE, name="KS distance: masked real gradient vs masked zero gradient",
        value=ks, baseline=float(critical),
        description=f"{len(real)} decrypted masked values each; below the 1% critical value means the "
                    "active party's view does not depend on the gradient")
    return AuditOutcome("exchange", report, (finding,))


def _ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov–Smirnov statistic (max distance between empirical CDFs)."""
    grid = np.sort(np.concatenate([a, b]))
    cdf_a = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    cdf_b = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.max(np.abs(cdf_a - cdf_b)))
