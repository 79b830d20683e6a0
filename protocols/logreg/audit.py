"""The audit of vertical logistic regression (attacks on the tap) and its demo step."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import accuracy_finding, not_measured, ring_mask_findings, unrandomized_paillier
from vflcrypto.audit.checks import Check, mask_checks
from vflcrypto.audit.defences import Frontier, FrontierRun, frontier_point, randomized_response_finding
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit, audit_runs
from vflcrypto.audit.literature_tabular import residual_recovery
from vflcrypto.data.titanic import titanic_parties
from vflcrypto.errors import InputDataError
from vflcrypto.ml.metrics import roc_auc
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection
from vflcrypto.spec import DemoContext

from .defence import COVERS, DEFENCES
from .math import RING_MOD
from .messages import ACTIVE, DpResidual, EncryptedResidual, MaskedGradient, MaskedLogits, Residual
from .roles import run_local

__all__ = ["CHECKS", "DEFENDED_EPSILON", "RR_CHECK", "audit_run", "demo_step", "frontier", "label_attack",
           "majority_rate", "residual_recovery_finding", "secure_findings"]

DP_KIND = "logreg.dp_residual"
RR_CHECK = f"{DP_KIND}: training labels kept at randomized response's rate"
#: the audit's defended (plain) run: randomized response at ε = 1
DEFENDED_EPSILON = 1.0
#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (
    Check("label recovery from logreg.encrypted_residual", ("logreg.encrypted_residual",), Protection.CIPHERTEXT,
          "residuals readable without the key (labels by their sign)", 0.9),
    *mask_checks("masked logits", "logreg.masked_logits", correlation=Protection.AGGREGATE),
    *mask_checks("masked gradient", "logreg.masked_gradient"),
    Check(RR_CHECK, (DP_KIND,), Protection.DP, "randomized response skipped (every training label kept)", 1.0),
)


def majority_rate(y: np.ndarray) -> float:
    """Accuracy of always guessing the majority class (the best guess without r)."""
    m = float(np.mean(y))
    return max(m, 1.0 - m)


def label_attack(tap: AuditTap, party: str, y: np.ndarray) -> EmpiricalFinding:
    """A feature party guesses every training label from the first residuals it received.

    It reads r = (p - y)/n where it can: in the clear (plain protocol, ``logreg.residual``, or
    ``logreg.dp_residual`` under --label-dp, where the sign is the randomized label) or from a
    ciphertext that carries no randomness (c = 1 + m n, ``logreg.encrypted_residual``); then
    y = 1 iff r < 0. Where it reads nothing it guesses the majority class (assumed public).
    The figure is the accuracy of those guesses on the true labels.
    """
    plain, kind = tap.received(party, Residual), "logreg.residual"
    if not plain:
        plain, kind = tap.received(party, DpResidual), DP_KIND
    majority = float(np.mean(y) >= 0.5)
    if plain:
        r = np.asarray(plain[0].values, dtype=np.float64)
        protection = None
    else:
        enc = tap.received(party, EncryptedResidual)[0].values
        n = int(enc.public_key.n)
        half = n // 2
        r = np.asarray([np.nan if m is None else float(m - n if m > half else m)
                        for m in unrandomized_paillier(n, enc.ciphertexts())])
        kind, protection = "logreg.encrypted_residual", Protection.CIPHERTEXT
    guess = np.where(np.isnan(r), majority, (r < 0).astype(np.float64))
    return accuracy_finding(
        party, f"label recovery from {kind}", guess, y, majority_rate(y), attacks=(kind,),
        protection=protection,
        description=f"guesses y = [r < 0] from the residuals it could read in its first {kind} and the "
                    "majority class elsewhere; baseline = the majority-class rate")


def residual_recovery_finding(tap: AuditTap, party: str) -> EmpiricalFinding:
    """A passive party solves its own gradient of every step for the residuals (Weng et al. 2020).

    Its view: its own columns and its own gradient ``X_k^T r`` of each step (what it decodes from
    ``logreg.gradient_reply`` by removing its own mask). The active party's residuals ``r`` only
    score the attack. Full-batch training with more rows than the party's gradient has entries
    leaves ``r`` undetermined (0 recovered); the active party refuses the opposite unless
    ``allow_small_batches`` (:meth:`~vflcrypto.protocols.logreg.roles.ActiveRole.reply_gradient`).
    """
    name, kind = "residuals from its own gradients (reverse multiplication)", "logreg.gradient_reply"
    grads, truth = tap.held(party, "gradient"), tap.held(ACTIVE, "residual")
    k = min(len(grads), len(truth))
    if not k:
        return not_measured(party, name, (kind,), None, "no gradient returned to it")
    X = np.asarray(tap.held_one(party, "features"))
    n = len(X)  # scaled to d = n r = p - y (the labels' units), as residual_recovery expects
    return residual_recovery(party, name, [X] * k, [n * np.asarray(g) for g in grads[:k]],
                             [n * np.asarray(r) for r in truth[:k]], attacks=(kind,))


def secure_findings(tap: AuditTap, parties: Sequence[str], y: np.ndarray) -> list[EmpiricalFinding]:
    """Attacks on a secure run: labels from [[r]]; each passive party's residual recovery from its own
    gradients (the scorecard); the active party on masked logits and gradients."""
    findings = [label_attack(tap, p, y) for p in parties]
    findings += [residual_recovery_finding(tap, p) for p in parties]
    findings += ring_mask_findings(
        ACTIVE, "logreg.masked_logits", "masked logits",
        [[m.values.tolist() for m in tap.received(ACTIVE, MaskedLogits, sender=p)] for p in parties],
        RING_MOD, truth=[tap.held(p, "logits") for p in parties], truth_protection=Protection.AGGREGATE)
    sk = tap.held_one(ACTIVE, "secret_key")
    n = int(sk.public_key.n)
    findings += ring_mask_findings(
        ACTIVE, "logreg.masked_gradient", "masked gradient",
        [[[v % n for v in sk.decrypt(m.values)] for m in tap.received(ACTIVE, MaskedGradient, sender=p)]
         for p in parties], n, truth=[tap.held(p, "gradient") for p in parties])
    return findings


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False, steps: int = 20) -> AuditOutcome:
    """Run plain and secure logistic regression on Titanic and attack what each role received; then a defended run.

    Plain: a feature party reads every label off the signs of the residuals (by design).
    Secure: each feature party attacks [[r]] for labels; the active party tests the
    pairwise-masked logits (mod 2^64) and the Paillier-masked gradients it decrypted
    (uniform, fresh per step, uncorrelated with the true values, which serve only as
    ground truth). Defended (plain, ``--label-dp 1``): the check that the active party's
    training labels are randomized at the announced rate, and the sign attack on the
    residuals it then sends (right where the randomized label is). What the defence does at
    several budgets is the frontier (:func:`frontier`).
    """
    data = titanic_parties()
    plain_tap, secure_tap, dp_tap = AuditTap(), AuditTap(), AuditTap()
    plain = run_local(list(data.X_train), data.y_train, list(data.X_test), data.y_test,
                      steps=steps, tap=plain_tap)
    secure = run_local(list(data.X_train), data.y_train, list(data.X_test), data.y_test,
                       secure=True, steps=steps, key_bits=key_bits,
                       allow_insecure=allow_insecure, tap=secure_tap)
    defended = run_local(list(data.X_train), data.y_train, list(data.X_test), data.y_test, steps=steps,
                         label_dp=DEFENDED_EPSILON, tap=dp_tap)
    parties = sorted(secure.passives)
    findings = [label_attack(plain_tap, "passive-0", data.y_train), *secure_findings(secure_tap, parties, data.y_train)]
    findings += [randomized_response_finding(ACTIVE, RR_CHECK, dp_tap.held_one(ACTIVE, "training_labels"),
                                             data.y_train, DEFENDED_EPSILON, 2, attacks=(DP_KIND,)),
                 label_attack(dp_tap, "passive-0", data.y_train)]
    g = defended.active.privacy["label-rr"]
    metrics = {"defended_label_rr_epsilon": g["epsilon"], "defended_label_rr_delta": g["delta"],
               "defended_label_recovery": findings[-1].value,
               "defended_test_accuracy": float(defended.active.test_accuracy or 0.0)}
    # Plain-protocol messages never appear in the secure transcript: merge both so the
    # table shows each role's view in each mode.
    runs = {"plain": plain.transcript, "secure": secure.transcript,
            f"label defence (randomized response, epsilon = {DEFENDED_EPSILON:g}; plain)": defended.transcript}
    report, sections = audit_runs(runs)
    curves = {"training loss per step (plain)": list(plain.active.loss_history),
              "training loss per step (secure)": list(secure.active.loss_history)}
    return AuditOutcome("logreg", report, tuple(findings), metrics, sections=sections,
                        transcripts=tuple(runs.items()), curves=curves)


#: the frontier's column: attack -> what it is
FRONTIER_ATTACKS = {"residual_signs": "a passive party's guess y = [r < 0] from the first residuals it receives "
                                      "(plain mode), accuracy against the true training labels (baseline: the "
                                      "majority class's share)"}


def frontier(defence: str, budgets: Sequence[float], repeats: int = 1, *, steps: int = 20) -> Frontier:
    """The sign attack on the residuals and the test accuracy and AUC of plain logistic regression on Titanic (713
    training rows, ``steps`` full-batch steps at learning rate 0.5) at each ε of ``budgets`` under randomized
    response, beside the undefended run; each point the mean of ``repeats`` runs (fresh labels each)."""
    if defence not in DEFENCES:
        raise InputDataError(f"logreg's defences are {', '.join(DEFENCES)}, not {defence!r}")
    if repeats < 1:
        raise InputDataError(f"the frontier needs >= 1 run per budget, got {repeats}")
    data = titanic_parties()
    base = {"residual_signs": majority_rate(data.y_train)}

    def runner(epsilon: float | None) -> Any:
        def once() -> FrontierRun:
            tap = AuditTap()
            a = run_local(list(data.X_train), data.y_train, list(data.X_test), data.y_test, steps=steps,
                          label_dp=epsilon, tap=tap).active
            figures = {"test_accuracy": float(a.test_accuracy or 0.0),
                       "test_auc": roc_auc(data.y_test, np.asarray(a.test_probabilities))}
            return figures, a.privacy, [label_attack(tap, "passive-0", data.y_train)]

        return once

    points = [frontier_point(b, defence, repeats, runner(b), {"residual_signs": "label recovery"}, base)
              for b in (None, *budgets)]
    statement = (f"{defence} protects {COVERS}; plain vertical logistic regression on Titanic, 713 training and 178 "
                 f"test rows, three feature parties, {steps} steps")
    return Frontier("logreg", defence, statement, tuple(points), FRONTIER_ATTACKS)


def demo_step(ctx: DemoContext) -> dict[str, Any]:
    """Plain then secure vertical logistic regression on Titanic, plus the label-leakage check."""
    data = titanic_parties()
    steps = 5 if ctx.quick else 20
    out: dict[str, Any] = {}
    for secure in (False, True):
        mode = "secure" if secure else "plain"
        t0 = time.perf_counter()
        tap = AuditTap()
        run = run_local(list(data.X_train), data.y_train, list(data.X_test), data.y_test,
                        secure=secure, steps=steps, key_bits=ctx.key_bits,
                        allow_insecure=ctx.allow_insecure, tap=tap)
        a = run.active
        secs = time.perf_counter() - t0
        ctx.say(f"{mode:>6}: {steps} steps, loss {a.loss_history[0]:.4f} -> {a.loss_history[-1]:.4f}, "
                f"train loss {a.train_loss:.4f}, test loss {a.test_loss:.4f}, "
                f"test accuracy {a.test_accuracy:.1%}, {run.transcript.total_bytes:,} B, {secs:.1f} s")
        out[mode] = {"train_loss": a.train_loss, "test_loss": a.test_loss,
                     "test_accuracy": a.test_accuracy, "bytes": run.transcript.total_bytes,
                     "seconds": round(secs, 3)}
        rate = label_attack(tap, "passive-0", data.y_train).value
        out[mode]["label_recovery"] = rate
        ctx.say(f"        passive-0 recovers {rate:.1%} of training labels "
                f"(base rate {majority_rate(data.y_train):.1%})")
        if secure:
            report = audit(run.transcript)
            report.check()
            ctx.say(report.to_text())
    return out
