"""The SSHE-LR audit (attacks on what each party received), the example data and the demo step."""

from __future__ import annotations

from typing import Any

import numpy as np

from vflcrypto.audit.attacks import (
    real_mask_findings,
    small_residues_finding,
    unrandomized_finding,
    unrandomized_paillier,
)
from vflcrypto.audit.checks import EXACT, Check, mask_checks, unrandomized_check
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit_runs
from vflcrypto.audit.literature import FU_2022, WENG_2020
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.ml.metrics import roc_auc
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection

from .math import (
    RING,
    STAT_BITS,
    SSHELRParams,
    encode_features,
    fold_width,
    gradient_mask_bits,
    logit_mask_bits,
    prepare_active,
    prepare_passive,
)
from .messages import (
    ACTIVE,
    GRADIENT,
    LOGITS,
    PASSIVE,
    ActiveCiphertexts,
    MaskedForActive,
    MaskedForPassive,
    PassiveCiphertexts,
    WeightShare,
)
from .roles import SSHELRRun, run_local, unfold

__all__ = ["AUDIT_EPOCHS", "CHECKS", "INAPPLICABLE", "audit_run", "demo_step", "example", "logits", "masked_checks"]

SEC = STAT_BITS

#: epochs of the audit run: the gradient stage masks one value per column (6 per epoch for the
#: passive party, 8 for the active one); its freshness check needs about 40 differences of
#: consecutive epochs to flag a reused mask (KS distance 1/2 against ks_critical(n) at ALPHA) and
#: its correlation check about 70 values to flag |r| = 1/2: 12 × 6 = 72 values and 11 × 6 = 66
#: differences here (3 epochs gave 18 and 12, too few: ks_critical(12) = 0.68)
AUDIT_EPOCHS = 12

#: the published attacks that do not apply to what either party receives (the scorecard says so)
INAPPLICABLE = tuple(
    row for role in (ACTIVE, PASSIVE) for row in (
        (role, "residuals from its own gradients (reverse multiplication)", WENG_2020,
         "it never learns its plaintext gradient: each epoch it holds one additive share of it (the other uniform "
         "mod 2^256) and masked cross terms; its weights revealed after the last epoch are one sum over every "
         "epoch's gradient, F equations in rows x epochs residuals"),
        (role, "label inference from per-row gradients or representations", FU_2022,
         "no per-row value reaches it in the clear: logits and errors stay secret-shared, the per-row cross terms "
         "it decrypts are masked (their uniformity, freshness and correlation checks above)")))

_STAGES = {LOGITS: "logit", GRADIENT: "gradient"}
_PARTY = {ACTIVE: "active", "passive-0": "passive"}


def masked_checks(kind: str) -> tuple[Check, ...]:
    """The checks of one masked-product message kind, both stages (logit and gradient cross terms)."""
    return tuple(c for term in _STAGES.values() for c in mask_checks(f"{kind}, {term} cross terms", kind, real=True))


#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (
    unrandomized_check("sshelr.active_ciphertexts"),
    unrandomized_check("sshelr.passive_ciphertexts"),
    *(Check(f"initial weight shares for the {who} party: uniform over Z_M", ("sshelr.weight_share",),
            Protection.MASKED, "weight shares not masked (the other party's initial weights)", EXACT)
      for who in ("passive", "active")),
    *masked_checks("sshelr.masked_for_passive"),
    *masked_checks("sshelr.masked_for_active"),
)


def example(n: int = 400, seed: int = 5) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], np.ndarray,
                                                  tuple[str, ...]]:
    """Public synthetic credit data: ``(X_active, y, active columns, X_passive, passive columns)``.

    A lender (active) holds five columns of its own and whether each client defaulted; a
    retailer (passive) holds eight columns of spending behaviour, some informative, some noise.
    """
    rng = np.random.default_rng(seed)
    Xa = rng.standard_normal((n, 5)) * [1.0, 2.0, 0.5, 1.0, 1.0] + [40, 3, 1, 0, 10]
    Xp = rng.standard_normal((n, 8))
    eta = (0.8 * (Xa[:, 0] - 40) - 0.4 * (Xa[:, 1] - 3) + 0.6 * Xa[:, 3] + 1.0 * Xp[:, 0] - 0.7 * Xp[:, 1]
           + 0.5 * Xp[:, 2] - 0.3)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(float)
    return (Xa, y, ("age", "loans", "tenure", "income", "region"), Xp,
            tuple(f"spend{k}" for k in range(8)))


def logits(run: SSHELRRun, X_active: np.ndarray | None, y: np.ndarray, X_passive: np.ndarray) -> np.ndarray:
    """z on the training rows from both parties' weights (in-process only: it joins the two blocks)."""
    Za, _ = prepare_active(X_active, y)
    return np.asarray(Za @ run.active + prepare_passive(X_passive) @ run.passive)


def demo_step(ctx: Any) -> dict[str, Any]:
    """SSHE logistic regression on the example, two parties and no coordinator."""
    Xa, y, _, Xp, _ = example(150 if ctx.quick else 300)
    params = SSHELRParams(epochs=3 if ctx.quick else 6)
    run = run_local(Xa, y, Xp, params=params, key_bits=ctx.key_bits, allow_insecure=ctx.allow_insecure)
    z = logits(run, Xa, y, Xp)
    acc, auc = float(np.mean((z > 0) == (y == 1))), roc_auc(y, z)
    ctx.say(f"{len(y)} rows, {params.epochs} epochs, two {ctx.key_bits}-bit Paillier keys, no coordinator: "
            f"training accuracy {acc:.3f}, AUC {auc:.3f}; each party saw only its own weights")
    ctx.say(f"{run.transcript.total_bytes:,} bytes, {run.seconds:.2f} s")
    return {"accuracy": acc, "auc": auc, "epochs": params.epochs, "bytes": run.transcript.total_bytes}


def _masked_findings(observer: str, kind: str, stage: int, msgs: list[Any], sk: Any, bits: int,
                     X: np.ndarray, sent: list[list[int]]) -> list[EmpiricalFinding]:
    """Decrypt and unfold the masked products ``observer`` got at ``stage`` with its own key;
    centre them on the mask's range [2^bits, 2^bits + 2^(bits+40)).

    Truth: the products behind the masks, X times what the observer itself had encrypted
    (its shares): without a fresh, wide mask they expose X to a party that knows its shares.
    """
    half, offset = 1 << (bits + SEC - 1), 1 << bits
    got = [m for m in msgs if m.stage == stage]
    Xo = X.astype(object)
    streams = [[np.array([(v - offset - half) / half for v in unfold(sk, m.values, m.count, fold_width(bits))],
                         dtype=np.float64) for m in got]]
    truth = [[np.array([int(v) / half for v in (Xo @ np.array(s, dtype=object) if stage == LOGITS else
                                                 Xo.T @ np.array(s, dtype=object))], dtype=np.float64)
              for s in sent]]
    return real_mask_findings(observer, kind, f"{kind}, {_STAGES[stage]} cross terms", streams, 1.0, truth=truth)


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """:data:`AUDIT_EPOCHS` epochs on the example, attacking what each party received.

    * each party tries to read the other's ciphertexts (shares of weights and errors)
      without the key;
    * each party's initial weight shares from the other are uniform over Z_2^256 (none lies
      within 2^192 of 0, where an unmasked weight would);
    * each party decrypts, with its own key, the masked cross terms it got back: they are
      uniform over the mask's range, fresh from epoch to epoch and uncorrelated with the
      products behind them (ground truth: the sender's columns times the receiver's own
      shares); each party draws the masks of the kind it sends, so each kind's checks
      test one party's masks, per stage (logits per row, gradient per column).
    """
    Xa, y, _, Xp, _ = example(120)
    keys = (generate_keypair(key_bits, allow_insecure=allow_insecure),
            generate_keypair(key_bits, allow_insecure=allow_insecure))
    tap = AuditTap()
    run = run_local(Xa, y, Xp, params=SSHELRParams(epochs=AUDIT_EPOCHS), keys=keys, allow_insecure=allow_insecure,
                    tap=tap)
    P = "passive-0"
    Za, _ = prepare_active(Xa, y)
    Xint = {ACTIVE: encode_features(Za), P: encode_features(prepare_passive(Xp))}
    sk = {ACTIVE: tap.held_one(ACTIVE, "secret_key"), P: tap.held_one(P, "secret_key")}
    findings: list[EmpiricalFinding] = []
    for me, other, cts_kind, masked_kind in ((P, ACTIVE, ActiveCiphertexts, MaskedForPassive),
                                             (ACTIVE, P, PassiveCiphertexts, MaskedForActive)):
        kind = "sshelr." + ("active_ciphertexts" if cts_kind is ActiveCiphertexts else "passive_ciphertexts")
        n_other = int(sk[other].public_key.n)
        cts = [c for m in tap.received(me, cts_kind) for c in m.values.ciphertexts()]
        findings.append(unrandomized_finding(me, kind, unrandomized_paillier(n_other, cts)))
        shares = [list(m.values) for m in tap.received(me, WeightShare)]
        # one share per weight, once per run: too few for a KS test; an unmasked weight is tiny in Z_2^256
        findings.append(small_residues_finding(
            me, f"initial weight shares for the {_PARTY[me]} party: uniform over Z_M", "sshelr.weight_share",
            [v for msg in shares for v in msg], RING))
        mkind = "sshelr.masked_for_passive" if masked_kind is MaskedForPassive else "sshelr.masked_for_active"
        msgs = tap.received(me, masked_kind)
        sent = tap.held(me, "encrypted_share")  # what `me` encrypted, alternately weights and errors
        d_other = Xint[other].shape[1]
        findings += _masked_findings(me, mkind, LOGITS, msgs, sk[me], logit_mask_bits(d_other), Xint[other],
                                     sent[0::2])
        findings += _masked_findings(me, mkind, GRADIENT, msgs, sk[me], gradient_mask_bits(len(y)), Xint[other],
                                     sent[1::2])
    report, sections = audit_runs({f"SSHE logistic regression, {AUDIT_EPOCHS} epochs": run.transcript})
    return AuditOutcome("sshelr", report, tuple(findings), sections=sections, inapplicable=INAPPLICABLE,
                        transcripts=(("SSHE logistic regression", run.transcript),))
