"""The gradient exchange's demo step and audit (example data, attacks on the tap)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vflcrypto.audit.attacks import ring_mask_findings, unrandomized_finding, unrandomized_paillier
from vflcrypto.audit.checks import mask_checks, unrandomized_check
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit
from vflcrypto.audit.literature import WENG_2020
from vflcrypto.audit.literature_tabular import residual_recovery
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.spec import DemoContext

from .messages import ACTIVE, PASSIVE, EncryptedResiduals, MaskedGradient
from .roles import run_local

__all__ = ["CHECKS", "INAPPLICABLE", "audit_run", "demo_step", "example", "residual_recovery_finding"]

#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (unrandomized_check("exchange.encrypted_residuals"),
          *mask_checks("masked gradient", "exchange.masked_gradient"))


#: the published attack that does not apply to the active party's view (the scorecard says so)
INAPPLICABLE = ((ACTIVE, "residuals from the passive party's gradient (reverse multiplication)", WENG_2020,
                 "the active party holds d itself and sees the passive party's gradient only behind a mask uniform "
                 "mod n (its uniformity, freshness and correlation checks above)"),)


def residual_recovery_finding(tap: AuditTap, d: np.ndarray) -> EmpiricalFinding:
    """The passive party solves each gradient it learned, ``Xᵀd``, for the residuals (Weng et al. 2020).

    Its view: its own columns and its own gradient of every exchange (what it unmasks from
    ``exchange.decrypted_masked_gradient``); ``d`` only scores. More rows than its features leave
    ``d`` undetermined (0 recovered); the active party refuses the opposite unless
    ``allow_small_batches`` (:meth:`~vflcrypto.protocols.exchange.roles.ActiveRole.decrypt_masked_gradient`).
    """
    grads = tap.held(PASSIVE, "gradient")
    X = np.asarray(tap.held(PASSIVE, "features")[0])
    return residual_recovery(PASSIVE, "residuals from its own gradients (reverse multiplication)",
                             [X] * len(grads), grads, [np.asarray(d)] * len(grads),
                             attacks=("exchange.decrypted_masked_gradient",))


def example(n: int = 2_000, m: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic residuals d (n) and features X (n, m): public example data, numpy PRNG."""
    rng = np.random.default_rng(2)
    return rng.standard_normal(n) * 0.5, rng.standard_normal((n, m))


def demo_step(ctx: DemoContext) -> dict[str, Any]:
    """One exchange on the example data, checked against numpy, and its audit table."""
    d, X = example(500 if ctx.quick else 2_000)
    res = run_local(d, X, key_bits=ctx.key_bits, allow_insecure=ctx.allow_insecure)
    err = float(np.max(np.abs(res.gradient - X.T @ d)))
    ctx.say(f"{len(d)} rows x {X.shape[1]} features, {ctx.key_bits}-bit Paillier: "
            f"gradient max error {err:.2e} vs numpy, {res.transcript.total_bytes:,} bytes, {res.seconds:.2f} s")
    ctx.say(audit(res.transcript).to_text())
    return {"rows": len(d), "features": X.shape[1], "max_abs_error": err,
            "bytes": res.transcript.total_bytes}


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False, runs: int = 16) -> AuditOutcome:
    """Audit ``runs`` exchanges under one key pair, attacking what each party received.

    * passive: tries to read [[d]] without the key (a ciphertext sent without its
      obfuscator decodes as c = 1 + m n);
    * active: decrypts the masked gradients it received with its own key and tests them:
      uniform mod n, fresh masks from run to run (differences uniform), no correlation
      with the true gradients (ground truth from the passive party's view);
    * the scorecard: the passive party solves its own gradients for d (Weng et al. 2020), at 0
      with more rows (200) than its features (16).
    The runs use the same data, so a mask reused across runs would cancel exactly.
    """
    d, X = example(200, 16)
    keys = generate_keypair(key_bits, allow_insecure=allow_insecure)
    tap = AuditTap()
    results = [run_local(d, X, keys=keys, allow_insecure=allow_insecure, tap=tap) for _ in range(runs)]
    n = int(keys[0].n)
    sk = tap.held_one(ACTIVE, "secret_key") if runs == 1 else tap.held(ACTIVE, "secret_key")[0]
    residuals = [c for m in tap.received(PASSIVE, EncryptedResiduals) for c in m.residuals.ciphertexts()]
    views = [[v % n for v in sk.decrypt(m.values)] for m in tap.received(ACTIVE, MaskedGradient)]
    findings = [unrandomized_finding(PASSIVE, "exchange.encrypted_residuals", unrandomized_paillier(n, residuals))]
    findings += ring_mask_findings(ACTIVE, "exchange.masked_gradient", "masked gradient", [views], n,
                                   truth=[tap.held(PASSIVE, "gradient")])
    findings.append(residual_recovery_finding(tap, d))
    return AuditOutcome("exchange", audit(results[0].transcript), tuple(findings),
                        transcripts=(("gradient exchange", results[0].transcript),), inapplicable=INAPPLICABLE)
