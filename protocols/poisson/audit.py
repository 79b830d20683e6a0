"""The Poisson audit (attacks on what each party received) and its demo step."""

from __future__ import annotations

from typing import Any

import numpy as np

from vflcrypto.audit.attacks import ring_mask_findings, unrandomized_finding, unrandomized_paillier
from vflcrypto.audit.checks import mask_checks, unrandomized_check
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit_runs
from vflcrypto.audit.literature_tabular import residual_recovery
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.runtime.channel import AuditTap

from .math import PoissonParams, deviance, prepare_active, prepare_passive
from .messages import ACTIVE, COORD, EncryptedExp, EncryptedResidual, MaskedGradient
from .roles import PoissonRun, run_local

__all__ = ["CHECKS", "audit_run", "demo_step", "example", "fitted_mean", "residual_recovery_finding"]

#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (unrandomized_check("poisson.exp_u"), unrandomized_check("poisson.residual"),
          *mask_checks("masked gradients", "poisson.masked_gradient"))


def residual_recovery_finding(tap: AuditTap, party: str, y: np.ndarray) -> EmpiricalFinding:
    """A data party solves its own gradient ``Zᵀ(μ − y)`` of every epoch for the residuals (Weng et al. 2020).

    Its view: its own columns and its own gradient of each epoch (what it unmasks from
    ``poisson.gradient_return``). The active party's columns carry an intercept, so it aims at
    ``d = μ − y`` itself (with its own y: μ, hence the passive party's exp(u_A) per row); the passive
    party's standardized columns sum to 0 over the rows, so at best it gets ``d`` up to their
    mean (at the first epoch μ = 1: the counts up to their mean). The parties' linear predictors
    and ``y`` only score. More rows than that rank leave ``d`` undetermined (0 recovered); both
    parties refuse fewer unless ``allow_small_batches`` (:func:`~vflcrypto.protocols.poisson.roles.refuse_few_rows`).
    """
    kind = "poisson.gradient_return"
    grads = tap.held(party, "gradient")
    truth = [np.exp(np.asarray(ua) + np.asarray(ub)) - y
             for ua, ub in zip(tap.held("passive-0", "u"), tap.held(ACTIVE, "u"), strict=False)][: len(grads)]
    up_to = "" if party == ACTIVE else " up to their mean"
    if party != ACTIVE:
        truth = [d - d.mean() for d in truth]
    X = np.asarray(tap.held(party, "features")[0])
    return residual_recovery(party, f"residuals{up_to} from its own gradients (reverse multiplication)",
                             [X] * len(truth), grads[: len(truth)], truth, attacks=(kind,))


def example(n: int = 400, seed: int = 3) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], np.ndarray,
                                                  tuple[str, ...]]:
    """Public synthetic counts: ``(X_active, y, active columns, X_passive, passive columns)``.

    An insurer (active) holds age and a health score and the number of claims; a pharmacy
    (passive) holds prescriptions, visits and a noise column.
    """
    rng = np.random.default_rng(seed)
    age, health = rng.uniform(20, 80, n), rng.standard_normal(n)
    prescriptions, visits, noise = rng.poisson(3, n).astype(float), rng.poisson(2, n).astype(float), rng.uniform(size=n)
    eta = -1.0 + 0.015 * (age - 50) - 0.3 * health + 0.12 * (prescriptions - 3) + 0.1 * (visits - 2)
    y = rng.poisson(np.exp(eta)).astype(float)
    return (np.column_stack([age, health]), y, ("age", "health"), np.column_stack([prescriptions, visits, noise]),
            ("prescriptions", "visits", "noise"))


def fitted_mean(run: PoissonRun, X_active: np.ndarray | None, y: np.ndarray, X_passive: np.ndarray) -> np.ndarray:
    """μ on the training rows from both parties' weights (in-process only: it joins the two blocks)."""
    Za, _ = prepare_active(X_active, y)
    return np.exp(Za @ run.active + prepare_passive(X_passive) @ run.passive)


def demo_step(ctx: Any) -> dict[str, Any]:
    """Secure Poisson regression on the example counts, against the same fit in the clear."""
    Xa, y, _, Xp, _ = example(200 if ctx.quick else 400)
    params = PoissonParams(epochs=8 if ctx.quick else 25)
    run = run_local(Xa, y, Xp, params=params, key_bits=ctx.key_bits, allow_insecure=ctx.allow_insecure)
    dev = deviance(y, fitted_mean(run, Xa, y, Xp))
    ctx.say(f"{len(y)} rows, {params.epochs} epochs, {ctx.key_bits}-bit Paillier: deviance {dev:.4f}; "
            f"the coordinator saw the loss fall {run.losses[0]:.4f} -> {run.losses[-1]:.4f}")
    ctx.say(f"{run.transcript.total_bytes:,} bytes, {run.seconds:.2f} s")
    return {"deviance": dev, "epochs": params.epochs, "bytes": run.transcript.total_bytes}


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """Sixteen epochs on the example counts, attacking what each party received.

    * active: tries to read [[exp(u_A)]] and [[u_A]] without the key;
    * passive: tries to read [[μ − y]] without the key;
    * coordinator: the masked gradients it decrypted are uniform mod n, fresh from epoch
      to epoch and uncorrelated with the true gradients (ground truth from the owners); 16
      epochs give 96 gradient values, enough for the correlation check to detect |r| = 0.5;
    * the scorecard: each data party solves its own gradients for the residuals (Weng et al. 2020,
      :func:`residual_recovery_finding`), at 0 on 200 rows.
    """
    Xa, y, _, Xp, _ = example(200)
    keys = generate_keypair(key_bits, allow_insecure=allow_insecure)
    tap = AuditTap()
    run = run_local(Xa, y, Xp, params=PoissonParams(epochs=16), keys=keys, allow_insecure=allow_insecure, tap=tap)
    n = int(keys[0].n)
    exp_cts = [c for m in tap.received(ACTIVE, EncryptedExp) for v in (m.exp_u, m.u) for c in v.ciphertexts()]
    res_cts = [c for m in tap.received("passive-0", EncryptedResidual) for c in m.residual.ciphertexts()]
    sk = tap.held_one(COORD, "secret_key")
    streams = [[[v % n for v in sk.decrypt(m.values)] for m in tap.received(COORD, MaskedGradient, sender=sender)]
               for sender in (ACTIVE, "passive-0")]
    truth = [tap.held(ACTIVE, "gradient"), tap.held("passive-0", "gradient")]
    findings = [unrandomized_finding(ACTIVE, "poisson.exp_u", unrandomized_paillier(n, exp_cts)),
                unrandomized_finding("passive-0", "poisson.residual", unrandomized_paillier(n, res_cts))]
    findings += ring_mask_findings(COORD, "poisson.masked_gradient", "masked gradients", streams, n, truth=truth)
    findings += [residual_recovery_finding(tap, p, y) for p in (ACTIVE, "passive-0")]
    report, sections = audit_runs({"Poisson regression, 8 epochs": run.transcript})
    return AuditOutcome("poisson", report, tuple(findings), sections=sections,
                        transcripts=(("Poisson regression", run.transcript),))
