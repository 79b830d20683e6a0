"""The audit of secure linear regression (attacks on the tap) and its demo step."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import (
    real_mask_findings,
    ring_mask_findings,
    strip_known_paillier,
    unrandomized_finding,
    unrandomized_paillier,
)
from vflcrypto.audit.checks import EXACT, Check, flooding_check, mask_checks, unrandomized_check, verified_result
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit, audit_runs
from vflcrypto.audit.literature_tabular import residual_recovery
from vflcrypto.audit.noise import flooding_finding
from vflcrypto.data.synthetic import synthetic_split
from vflcrypto.errors import AuditError
from vflcrypto.he.paillier import DEFAULT_KEY_BITS, PaillierVector
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection

from .config import LinRegConfig
from .crypto import gradient_flooding
from .local import passive_names, run_local
from .math import epoch_batches, plaintext_gradient_descent
from .messages import (
    ACTIVE,
    CKKS_GRADIENT_BOUND,
    COORD,
    CrossTerm,
    EncryptedLoss,
    EncryptedResidual,
    EncryptedU,
    GradientReturnCKKS,
    MaskedGradient,
    MaskedGradientCKKS,
    Obfuscators,
    PartialSum,
    PredictMasked,
    PredictPartial,
    TrainingPlan,
)
from .model import predict_plain, save_models
from .predict import predict_local

__all__ = ["CHECKS", "FLOODING", "audit_run", "demo_step", "flooding_findings", "obfuscator_reuse_finding",
           "read_shared_obfuscators", "residual_recovery_finding"]

FLOODING = "CKKS gradient returns: flooding noise"

#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (
    *(unrandomized_check(f"linreg.{k}") for k in ("obfuscators", "encrypted_u", "partial_sum", "cross_term",
                                                  "encrypted_residual", "predict_partial")),
    Check("linreg.encrypted_u: differences read through shared obfuscators", ("linreg.encrypted_u",),
          Protection.CIPHERTEXT, "an obfuscator reused across iterations (it cancels in the quotient)", EXACT),
    *mask_checks("masked gradient", "linreg.masked_gradient"),
    *mask_checks("masked gradient (CKKS)", "linreg.masked_gradient_ckks", real=True),
    flooding_check(FLOODING, "linreg.gradient_return_ckks"),
    *mask_checks("masked prediction sum", "linreg.predict_masked", fresh=False),  # a fresh key per prediction
    Check("losses that C decrypted over a single row", ("linreg.encrypted_loss",), Protection.AGGREGATE,
          "a loss decrypted over a batch of one row (one row's squared residual)", EXACT),
)


def demo_step(ctx: Any) -> dict[str, Any]:
    """Secure linear regression on a small deterministic synthetic split (< 15 s at 2048 bits).

    Eight full-batch epochs of plain gradient descent (momentum 0: heavy-ball momentum needs
    more epochs than a demo has before it stops overshooting) on the standardized label; the
    loss falls monotonically to the least-squares optimum, which is printed beside it.
    """
    from vflcrypto.ml.metrics import r2_score, rmse

    active, passives = synthetic_split(n_rows=120, p_active=3, p_passive=(2,))
    epochs = 3 if ctx.quick else 8
    cfg = LinRegConfig(epochs=epochs, lr=0.5, momentum=0.0, key_bits=ctx.key_bits, fit_intercept=True,
                       tol=None)
    y = active.label
    assert y is not None  # synthetic_split labels the active party's table
    run = run_local(active, passives, config=cfg, allow_insecure=ctx.allow_insecure)
    ref = plaintext_gradient_descent(active.X, y, [p.X for p in passives], config=cfg)
    pred = predict_plain(run.models, [active, *passives])
    diff = float(np.max(np.abs(run.active.model.weights - ref.active_weights)))
    design = np.hstack([active.X, *[p.X for p in passives], np.ones((len(active), 1))])
    best = design @ np.linalg.lstsq(design, y, rcond=None)[0]  # the plaintext optimum, by numpy alone
    ctx.say(f"synthetic split: {len(active)} rows, B {active.X.shape[1]} + A "
            f"{passives[0].X.shape[1]} features, Paillier {ctx.key_bits} bits, {epochs} epochs")
    ctx.say(f"training loss per epoch, in the label's units (C saw it standardized): "
            f"{', '.join(f'{v:.4f}' for v in run.epoch_losses)} (least-squares optimum "
            f"{0.5 * float(np.mean((y - best) ** 2)):.4f})")
    ctx.say(f"train RMSE {rmse(y, pred):.4f}, R² {r2_score(y, pred):.4f} (plaintext least squares: RMSE "
            f"{rmse(y, best):.4f}, R² {r2_score(y, best):.4f}); max |Θ_B − plaintext reference| = {diff:.2e}")
    ctx.say(audit(run.transcript).to_text())
    model_dir = Path(ctx.workdir) / "linreg_model"
    save_models(run.models, model_dir)
    return {"rows": len(active), "epochs": epochs, "epoch_losses": run.epoch_losses, "final_loss": run.epoch_losses[-1],
            "train_rmse": rmse(y, pred), "plaintext_train_rmse": rmse(y, best), "max_weight_diff_vs_plaintext": diff,
            "bytes": run.transcript.total_bytes, "model_dir": str(ctx.where(model_dir))}


def _streams(tap: AuditTap, receiver: str, kind: type, senders: Sequence[str]) -> list[list[Any]]:
    return [tap.received(receiver, kind, sender=p) for p in senders]


def _ciphertext_findings(tap: AuditTap, n: int, passives: Sequence[str]) -> list[EmpiricalFinding]:
    """A data party tries to read, without C's key, every ciphertext it received.

    Each ciphertext is first divided by the ciphertexts the receiver knows went into it
    (a passive party knows the [[u_k]] it sent and the partial sum it received, both
    summed into [[d]]), then decoded if no randomness is left (c = 1 + m n).
    """
    parts: dict[str, list[tuple[str, int | None]]] = {}
    fields = {EncryptedU: ("u", "partial_loss"), PartialSum: ("values",), CrossTerm: ("value",),
              PredictPartial: ("u",), Obfuscators: ("values",)}
    for r in tap.records():
        for attr in fields.get(type(r.message), ()):
            cts = getattr(r.message, attr).ciphertexts()
            parts.setdefault(r.entry.kind, []).extend(
                (r.entry.receiver, v) for v in unrandomized_paillier(n, cts))
    for j, p in enumerate(passives):
        own = tap.received(ACTIVE, EncryptedU, sender=p)
        partial = tap.received(p, PartialSum)
        for t, msg in enumerate(tap.received(p, EncryptedResidual)):
            known = [own[t].u.ciphertexts()] + ([partial[t].values.ciphertexts()] if j else [])
            parts.setdefault("linreg.encrypted_residual", []).extend(
                (p, v) for v in strip_known_paillier(n, msg.d.ciphertexts(), known))
    return [unrandomized_finding("/".join(sorted({o for o, _ in items})), kind, [v for _, v in items])
            for kind, items in parts.items()]


def _u_ciphertexts(msg: EncryptedU) -> list[int]:
    if not isinstance(msg.u, PaillierVector) or not isinstance(msg.partial_loss, PaillierVector):
        raise AuditError("the obfuscator check reads a Paillier run")
    return msg.u.ciphertexts() + msg.partial_loss.ciphertexts()


def read_shared_obfuscators(n: int, earlier: Sequence[Sequence[int]], later: Sequence[Sequence[int]]
                            ) -> list[int | None]:
    """B divides each ciphertext of ``later[t]`` by the one at the same position of ``earlier[t]``.

    Two Paillier ciphertexts with one obfuscator ``z`` give ``c / c' = 1 + (v - v') n``: the
    difference of their plaintexts, read without the key. Returns ``v - v' mod n``, or ``None``
    where the quotient still carries randomness (fresh obfuscators: all but with probability
    ~``2**-(|n|/2)``).
    """
    out: list[int | None] = []
    for a, b in zip(earlier, later, strict=True):
        k = min(len(a), len(b))
        out += strip_known_paillier(n, list(b[:k]), [list(a[:k])])
    return out


def obfuscator_reuse_finding(tap: AuditTap, n: int, passives: Sequence[str]) -> EmpiricalFinding:
    """B tests every [[u_k]] and [[P_k]] it received for obfuscators shared with another one.

    It divides, position by position, each passive party's ciphertexts by the same party's of
    the previous iteration, and by the previous passive party's of the same iteration (C
    supplies every passive party's obfuscators: each must be fresh for every value, party
    and iteration). A quotient ``1 + δ n`` gives B a difference of partial predictions.
    """
    streams = [[_u_ciphertexts(m) for m in tap.received(ACTIVE, EncryptedU, sender=p)] for p in passives]
    decoded: list[int | None] = []
    for s in streams:
        decoded += read_shared_obfuscators(n, s[:-1], s[1:])
    for a, b in itertools.pairwise(streams):
        k = min(len(a), len(b))
        decoded += read_shared_obfuscators(n, a[:k], b[:k])
    hits = sum(v is not None for v in decoded)
    return EmpiricalFinding(
        ACTIVE, "linreg.encrypted_u: differences read through shared obfuscators", hits / max(1, len(decoded)),
        0.0, f"{hits} of {len(decoded)} quotients of two received [[u_k]] / [[P_k]] ciphertexts (consecutive "
        "iterations of one passive party, or two passive parties in one iteration) decode as 1 + δ n",
        attacks=("linreg.encrypted_u",), protection=Protection.CIPHERTEXT, flagged=hits > 0,
        samples=len(decoded), detects="any obfuscator shared by two ciphertexts compared")


def _loss_aggregate_finding(tap: AuditTap) -> EmpiricalFinding:
    """C decrypts one loss per batch: a batch of one row is one row's squared residual."""
    plan = tap.received(COORD, TrainingPlan)[0]
    sizes = [len(b) for e in range(plan.epochs) for b in epoch_batches(plan.n_rows, plan.batch_size, plan.seed, e)]
    sizes = sizes[: len(tap.received(COORD, EncryptedLoss))]
    single = sum(s == 1 for s in sizes)
    return EmpiricalFinding(
        COORD, "losses that C decrypted over a single row", single / max(1, len(sizes)), 0.0,
        f"from the plan it received, the {len(sizes)} losses C decrypted sum {min(sizes, default=0)} to "
        f"{max(sizes, default=0)} rows; {single} are one row's squared residual d_i^2",
        attacks=("linreg.encrypted_loss",), protection=Protection.AGGREGATE, flagged=single > 0,
        samples=len(sizes), detects="any loss over a single row")


def losses_verified(tap: AuditTap, active: Any, passives: Sequence[Any], config: LinRegConfig) -> EmpiricalFinding:
    """C's batch losses, decrypted with its own key from the [[S]] it received, against the plaintext reference.

    The losses are what C learns by design; the audit recomputes them from the tap (the
    batch sizes from the plan C received) and compares them with gradient descent on the
    joined table under the same schedule (:func:`plaintext_gradient_descent`, standardized
    units): a protocol that trains a different model than it claims fails the audit.
    """
    plan = tap.received(COORD, TrainingPlan)[0]
    sk = tap.held_one(COORD, "secret_key")
    sizes = [len(b) for e in range(plan.epochs) for b in epoch_batches(plan.n_rows, plan.batch_size, plan.seed, e)]
    msgs = tap.received(COORD, EncryptedLoss)
    seen = np.asarray([float(sk.decrypt_fixed(m.value)[0]) / (2 * k) for m, k in zip(msgs, sizes, strict=False)])
    ref = plaintext_gradient_descent(active.X, active.label, [p.X for p in passives], config=config, seed=plan.seed)
    want = np.asarray(ref.losses[: len(seen)]) / ref.label_scale**2
    error = float(np.max(np.abs(seen - want))) if len(seen) == len(want) and len(seen) else float("inf")
    return verified_result(COORD, "losses C learned (one per iteration)", error, 1e-6,
                           f"C decrypts one loss per iteration ({len(seen)} of them, by design); each against the "
                           "plaintext gradient descent on the joined table with the plan's schedule",
                           attacks=("linreg.encrypted_loss",), samples=len(seen))


def residual_recovery_finding(tap: AuditTap, party: str, passives: Sequence[str]) -> EmpiricalFinding:
    """A passive party solves its own gradient of every batch for the batch's residuals (Weng et al. 2020).

    Its view: the plan it received (the public batch rows), its own preprocessed columns, and
    its own gradient ``X_b^T d`` of each iteration (what it learns from ``linreg.gradient_return``
    by removing its own mask; Paillier runs, where the gradient is the sum). The true ``d``
    (``u_B - y`` held by B plus every passive ``u_k``) only scores the attack. Training refuses
    batches of no more rows than a passive party's features unless the plan allows them
    (:func:`~vflcrypto.protocols.linreg.math.refuse_small_batches`), so an honest run stays at 0.
    """
    kind = "linreg.gradient_return"
    plan = tap.received(party, TrainingPlan)[0]
    grads = tap.held(party, "gradient")
    r = tap.held(ACTIVE, "partial_residual")
    us = [tap.held(p, "u") for p in passives]
    X = np.asarray(tap.held_one(party, "features"))
    rows = [b for e in range(plan.epochs) for b in epoch_batches(plan.n_rows, plan.batch_size, plan.seed, e)]
    k = min(len(grads), len(r), *(len(u) for u in us))
    if not k:
        return EmpiricalFinding(party, "residuals from its own gradients (reverse multiplication)", 0.0, None,
                                "no gradient returned to it", attacks=(kind,), measured=False)
    truth = [np.asarray(r[t]) + sum(np.asarray(u[t]) for u in us) for t in range(k)]
    return residual_recovery(party, "residuals from its own gradients (reverse multiplication)",
                             [X[b] for b in rows[:k]], grads[:k], truth, attacks=(kind,))


def flooding_findings(tap: AuditTap, names: Sequence[str],
                      raw: Sequence[Sequence[np.ndarray]]) -> list[EmpiricalFinding]:
    """Per data party: its CKKS gradient returns minus ``raw`` (C's unflooded decryptions of the masked
    gradients it sent, in order) over the σ C declares (:func:`~.crypto.gradient_flooding` of the plan
    C received): N(0, 1) when flooded as declared (:func:`vflcrypto.audit.noise.flooding_finding`)."""
    ctx = tap.held_one(COORD, "secret_key")
    plans = tap.received(COORD, TrainingPlan)
    out = []
    for party, views in zip(names, raw, strict=True):
        got = [m.values for m in tap.received(party, GradientReturnCKKS, sender=COORD)]
        sigmas = [gradient_flooding(ctx, plans[0], len(v)).sigma for v in views] if plans else []
        out.append(flooding_finding(party, FLOODING, "linreg.gradient_return_ckks", got, views, sigmas))
    return out


def audit_run(key_bits: int = DEFAULT_KEY_BITS, *, allow_insecure: bool = False, batch_size: int = 25,
              n_rows: int = 200, ckks: bool = True) -> AuditOutcome:
    """Paillier and CKKS training runs plus a secure prediction; every attack reads the run's tap.

    * data parties: try to read, without C's key, each ciphertext they received; B also divides
      the [[u_k]] it received by one another, position by position (a shared obfuscator lets it
      read differences); the Paillier run has C supply the passive parties' obfuscators;
    * C: decrypts the masked gradients with its own key (Paillier and CKKS) and the masked
      prediction sum, and tests them (uniform, fresh per iteration, uncorrelated with the
      true gradients, which serve as ground truth only); from the plan it received it
      counts losses that sum a single row;
    * each data party: the CKKS gradient returns it received, minus C's raw decryptions of
      the same ciphertexts (C's key scores them), must carry the flooding noise C declares
      (:func:`flooding_findings`);
    * the scorecard: each passive party solves its own gradients for the residuals
      (:func:`residual_recovery_finding`, Weng et al. 2020), at 0 on batches of more rows than
      its features.
    ``n_rows`` = 200 rows, 4 + 4 + 3 features, mini-batches of ``batch_size`` = 25 over 2
    epochs (16 iterations), so each mask test sees about 200 values. ``ckks=False`` leaves the
    CKKS session out (and its findings): ~97 % of the audit's time, for a caller that studies
    only the Paillier messages (the mutation tests of Paillier-side protections).
    """
    insecure = allow_insecure
    active, passives = synthetic_split(n_rows=n_rows, p_active=4, p_passive=(4, 3))
    names = ["active", *passive_names(len(passives))]
    # the audit measures what the schedule it is asked for leaks, so it allows batches of no more rows than a
    # passive party's features (refused by default: the residual recovery finding then shows why)
    cfg = LinRegConfig(epochs=2, lr=0.1, key_bits=key_bits, tol=None, batch_size=batch_size, momentum=0.0,
                       coordinator_obfuscators=True, allow_small_batches=True)
    tap, ckks_tap, pred_tap = AuditTap(), AuditTap(), AuditTap()
    run = run_local(active, passives, config=cfg, allow_insecure=insecure, tap=tap)
    ckks_run = run_local(active, passives, config=replace(cfg, scheme="ckks"), allow_insecure=insecure,
                         tap=ckks_tap) if ckks else None
    _, pred_transcript = predict_local(run.models, [active, *passives], key_bits=key_bits,
                                       allow_insecure=insecure, tap=pred_tap)
    sk = tap.held_one(COORD, "secret_key")
    n = int(sk.public_key.n)
    findings = _ciphertext_findings(tap, n, names[1:])
    findings.append(obfuscator_reuse_finding(tap, n, names[1:]))
    pred_sk = pred_tap.held_one(COORD, "secret_key")
    findings += _ciphertext_findings(pred_tap, int(pred_sk.public_key.n), ())
    views = [[[v % n for v in sk.decrypt(m.values)] for m in stream]
             for stream in _streams(tap, COORD, MaskedGradient, names)]
    findings += ring_mask_findings(COORD, "linreg.masked_gradient", "masked gradient", views, n,
                                   truth=[tap.held(p, "gradient") for p in names])
    if ckks_run is not None:
        findings += _ckks_findings(ckks_tap, names)
    pn = int(pred_sk.public_key.n)
    pred_views = [[[v % pn for v in pred_sk.decrypt(m.values)] for m in pred_tap.received(COORD, PredictMasked)]]
    findings += ring_mask_findings(COORD, "linreg.predict_masked", "masked prediction sum", pred_views, pn,
                                   truth=[pred_tap.held(ACTIVE, "passive_sum")], fresh=False)
    findings.append(_loss_aggregate_finding(tap))
    findings += [residual_recovery_finding(tap, p, names[1:]) for p in names[1:]]
    findings.append(losses_verified(tap, active, passives, cfg))
    runs = {"Paillier training": run.transcript}
    curves = {"loss per iteration (Paillier)": list(run.losses)}
    if ckks_run is not None:
        runs["CKKS training"] = ckks_run.transcript
        curves["loss per iteration (CKKS)"] = list(ckks_run.losses)
    runs["prediction"] = pred_transcript  # the sections in this order: Paillier, CKKS, prediction
    report, sections = audit_runs(runs)
    report.check()
    return AuditOutcome("linreg", report, tuple(findings), sections=sections, transcripts=tuple(runs.items()),
                        curves=curves)


def _ckks_findings(ckks_tap: AuditTap, names: Sequence[str]) -> list[EmpiricalFinding]:
    """C's view of the CKKS masked gradients (decrypted with its own key) and the parties' flooded returns."""
    from vflcrypto.he.ckks import mask_bound

    ctx = ckks_tap.held_one(COORD, "secret_key")
    ckks_streams = _streams(ckks_tap, COORD, MaskedGradientCKKS, names)
    ckks_views = [[m.values.decrypt(ctx, flood=False) for m in stream] for stream in ckks_streams]  # C's own view
    levels = next((s[0].values.levels_left for s in ckks_streams if s), 0)
    findings = real_mask_findings(COORD, "linreg.masked_gradient_ckks", "masked gradient (CKKS)",
                                  ckks_views, mask_bound(ctx, levels) - CKKS_GRADIENT_BOUND,
                                  truth=[ckks_tap.held(p, "gradient") for p in names])
    return findings + flooding_findings(ckks_tap, names, ckks_views)
