"""The Pearson audit (attacks on what each party received) and its demo step."""

from __future__ import annotations

from typing import Any

import numpy as np

from vflcrypto.audit.attacks import ring_mask_findings, unrandomized_finding, unrandomized_paillier
from vflcrypto.audit.checks import mask_checks, unrandomized_check
from vflcrypto.audit.ledger import AuditOutcome, audit_runs
from vflcrypto.audit.literature import HE_2019, WENG_2020
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.runtime.channel import AuditTap

from .messages import ACTIVE, PASSIVE, EncryptedColumns, MaskedProducts
from .roles import run_local

__all__ = ["CHECKS", "audit_run", "demo_step", "example"]

#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (unrandomized_check("pearson.columns"), *mask_checks("masked products", "pearson.masked_products"))


def example(n: int = 400, seed: int = 5) -> tuple[np.ndarray, tuple[str, ...], np.ndarray, tuple[str, ...]]:
    """Public synthetic columns with cross-party structure: ``(X_active, names, X_passive, names)``."""
    rng = np.random.default_rng(seed)
    income = rng.lognormal(8, 0.5, n)
    age = rng.integers(18, 80, n).astype(float)
    debt = 0.3 * income + rng.normal(0, 800, n)
    spend = 0.02 * income + rng.gamma(2.0, 30.0, n)  # correlated with the bank's income
    visits = rng.poisson(6, n).astype(float)
    loyalty = 0.05 * age + rng.normal(0, 1, n)  # correlated with the bank's age
    return (np.column_stack([income, age, debt]), ("income", "age", "debt"),
            np.column_stack([spend, visits, loyalty]), ("spend", "visits", "loyalty"))


def demo_step(ctx: Any) -> dict[str, Any]:
    """The cross-party correlations of the bank's and the shop's columns, checked against numpy."""
    Xa, ca, Xp, cp = example()
    run = run_local(Xa, [Xp], key_bits=ctx.key_bits, allow_insecure=ctx.allow_insecure)
    corr = run.active["passive-0"]
    ref = np.corrcoef(Xa.T, Xp.T)[: Xa.shape[1], Xa.shape[1] :]
    err = float(np.max(np.abs(corr - ref)))
    for j, a in enumerate(ca):
        ctx.say(f"  {a:<8} " + "  ".join(f"{p} {corr[j, k]:+.3f}" for k, p in enumerate(cp)))
    ctx.say(f"max |r - numpy| {err:.1e}; {run.transcript.total_bytes:,} bytes, {run.seconds:.2f} s")
    return {"max_abs_error": err, "bytes": run.transcript.total_bytes}


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False, runs: int = 8) -> AuditOutcome:
    """``runs`` runs with the passive party receiving (the active party sees only masked values),
    and one where the active party receives (the declared output).

    * passive: tries to read [[Za]] without the key;
    * active: the masked products it decrypted are uniform mod n, fresh from run to run and
      uncorrelated with the true products (ground truth from the passive party's result).
    """
    Xa, _, Xp, _ = example(200)
    keys = generate_keypair(key_bits, allow_insecure=allow_insecure)
    tap = AuditTap()
    results = [run_local(Xa, [Xp], reveal="passive", keys=keys, allow_insecure=allow_insecure, tap=tap)
               for _ in range(runs)]
    both = run_local(Xa, [Xp], reveal="both", keys=keys, allow_insecure=allow_insecure)
    n = int(keys[0].n)
    cols = [c for m in tap.received("passive-0", EncryptedColumns) for c in m.columns.ciphertexts()]
    sk = tap.held(ACTIVE, "secret_key")[0]
    views = [[v % n for v in sk.decrypt(m.values)] for m in tap.received(ACTIVE, MaskedProducts)]
    truth = [np.asarray(r.passive["passive-0"]).ravel() * len(Xa) for r in results]
    findings = [unrandomized_finding("passive-0", "pearson.columns", unrandomized_paillier(n, cols))]
    findings += ring_mask_findings(ACTIVE, "pearson.masked_products", "masked products", [views], n, truth=[truth])
    runs_ = {"Pearson, the passive party receives": results[0].transcript,
             "Pearson, both receive": both.transcript}
    report, sections = audit_runs(runs_)
    return AuditOutcome("pearson", report, tuple(findings), sections=sections, transcripts=tuple(runs_.items()),
                        inapplicable=INAPPLICABLE)


#: the published attacks that do not apply to what each party receives (the scorecard says so)
INAPPLICABLE = (
    (PASSIVE, "residuals or columns from cross products (reverse multiplication)", WENG_2020,
     "it receives (when it gets the correlations) one number per pair of columns, X_Aᵀ X_P / n: F_A x F_P equations "
     "in n x F_A unknowns of the active party's columns, none per row; the columns themselves only as ciphertexts"),
    (ACTIVE, "feature inversion from received values (learning-based model inversion)", HE_2019,
     "it receives masked products (uniform mod n, measured above) and, when it gets the correlations, the masks: "
     "one number per pair of columns, no per-row representation to invert"),
)
