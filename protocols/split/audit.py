"""The split-learning audit (attacks on what each role received), its label and embedding defences' checks, and
its demo step (the defences' frontiers are :mod:`.frontier`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.audit import literature
from vflcrypto.audit.attacks import not_measured, probe_finding
from vflcrypto.audit.checks import Check
from vflcrypto.audit.defences import keep_rate_finding, noise_floor_finding
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit_runs
from vflcrypto.errors import AuditError
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection
from vflcrypto.runtime.record import RecordedView
from vflcrypto.spec import DemoContext

from .._repvfl import (
    PARTY,
    SERVER,
    PartyData,
    RepRun,
    ServerData,
    binary_digits_example,
    digits_example,
    party_names,
    require_torch,
)
from .._repvfl_audit import (
    batch_gradient_finding,
    batch_rows,
    inversion_findings,
    label_attack_findings,
    needs_torch,
)
from .._repvfl_defence_audit import defence_checks, noise_check_name, rr_check_name, rr_finding
from .._repvfl_embed_audit import embed_check, embed_check_name, embed_noise_findings
from .defence import lpmst_stage2_epoch
from .roles import SplitConfig, epoch_batches, run_local

__all__ = ["CHECKS", "DEFENDED_EPSILON", "DEFENDED_MARVELL", "DP_KIND", "EMBED_CHECK", "EMBED_KINDS", "EPOCHS",
           "MARVELL_CHECK", "MARVELL_KIND", "NOISE_CHECK", "RR_CHECK", "attacked_epoch", "audit_run",
           "defence_findings", "demo_step", "gradient_kind_received", "inversion_attacks", "label_attacks",
           "lpmst_finding", "marvell_findings", "run_tapped", "view_attacks"]

EPOCHS = 20  # the audit's runs: 100 overlap rows of the digits, 2 batches per epoch
#: the audit's defended run: both label defences at the frontier's tightest budget
DEFENDED_EPSILON = 1.0
#: the audit's Marvell run: power bound s on the binary digits (digit 8 against the rest), 200 overlap rows
DEFENDED_MARVELL = 4.0
DP_KIND = "split.dp_gradient"
MARVELL_KIND = "split.marvell_gradient"
NOISE_CHECK, RR_CHECK = noise_check_name(DP_KIND), rr_check_name(DP_KIND)
MARVELL_CHECK = f"{MARVELL_KIND}: Marvell's noise at the solved covariance"
#: the representation kinds under the parties' embedding noise
EMBED_KINDS = ("split.dp_representation", "split.dp_test_representation")
EMBED_CHECK = embed_check_name("split")
CHECKS: tuple[Check, ...] = (
    *defence_checks(DP_KIND, (DP_KIND,)),
    Check(MARVELL_CHECK, (MARVELL_KIND,), Protection.NOISED,
          "Marvell's noise dropped or scaled down (less than half the solved variance in the rows sent)", 0.5),
    embed_check("split", EMBED_KINDS),
)
EMBED_LABEL = f"embedding noise (epsilon = {DEFENDED_EPSILON:g} for each party's rows, delta = 1/n^2)"


def run_tapped(server: ServerData, parties: list[PartyData], cfg: SplitConfig) -> tuple[RepRun, AuditTap]:
    tap = AuditTap()
    return run_local(server, parties, config=cfg, tap=tap), tap


def _epoch_rows(tap: AuditTap, p: str, kind: str, n: int, batches: list[np.ndarray], field: str, *,
                last_epoch: bool, epoch: int = 0) -> np.ndarray | None:
    """One epoch's ``field`` arrays of ``kind`` (received by party ``p``, or sent by it to the server) in row order:
    the last epoch's, or that of ``epoch`` (the first by default; ``batches`` are that epoch's)."""
    msgs = tap.received(p, kind) if field == "G" else tap.received(None, kind, sender=p)
    msgs = msgs[-len(batches):] if last_epoch else msgs[epoch * len(batches): (epoch + 1) * len(batches)]
    return batch_rows(msgs, batches, n, field) if len(msgs) == len(batches) else None


def attacked_epoch(cfg: SplitConfig) -> int:
    """The epoch whose gradients the label attacks read: the first; under LP-MST the first of stage 2 (in stage 1
    the rows whose labels are not yet released get zero gradients, which would flatter the defence)."""
    return lpmst_stage2_epoch(cfg.epochs) if cfg.label_mechanism == "lpmst" else 0


def label_attacks(tap: AuditTap, names: list[str], kind: str, y: np.ndarray, cfg: SplitConfig,
                   n_classes: int) -> list[EmpiricalFinding]:
    """Each party's k-means on the batch gradients of the first epoch (``kind``: the gradient message the run sends)
    (ARI), then norm and direction scoring on them and model completion on the last epoch's representations it sent;
    under LP-MST the gradients are those of stage 2's first epoch (:func:`attacked_epoch`)."""
    n, e = len(y), attacked_epoch(cfg)
    first = epoch_batches(n, cfg.batch_size, cfg.seed, e)
    last = epoch_batches(n, cfg.batch_size, cfg.seed, cfg.epochs - 1)
    out = [batch_gradient_finding(tap, p, kind, y, first, n_classes, e) for p in names]
    for p in names:
        out += _published_label_attacks(tap, p, kind, y, first, last, e)
    return out


def _published_label_attacks(tap: AuditTap, party: str, kind: str, y: np.ndarray, first: list[np.ndarray],
                             last: list[np.ndarray], epoch: int = 0) -> list[EmpiricalFinding]:
    """``party``'s norm and direction scoring on the gradient rows of ``epoch`` it received (``kind``; the first by
    default, ``first`` its batches) and model completion on the last epoch's representations it sent (an
    in-process audit and a recorded view alike)."""
    n = len(y)
    rep = "split.dp_representation" if tap.received(None, "split.dp_representation", sender=party) \
        else "split.representation"
    return label_attack_findings(party, kind, _epoch_rows(tap, party, kind, n, first, "G", last_epoch=False,
                                                          epoch=epoch),
                                 rep, _epoch_rows(tap, party, rep, n, last, "H", last_epoch=True), y)


def view_attacks(view: RecordedView, y: np.ndarray | None) -> list[EmpiricalFinding]:
    """The published attacks on one party's recorded view of a network run (``vflcrypto party ... train split
    --keep-messages``): a feature party's norm and direction scoring on the first epoch's (LP-MST: stage 2's first
    epoch's) gradient rows it received
    (``split.gradient``, ``split.dp_gradient`` under a DP defence, ``split.marvell_gradient`` under Marvell) and model
    completion on the last epoch's
    representations it sent, from the setup and the messages it kept alone; ``y`` (the true labels of its overlap
    rows, in their order) only scores them. The server's decoder needs the party's true columns to score and is
    not run on a recorded view."""
    kinds = ("split.gradient", "split.representation")
    if view.role != PARTY:
        return [not_measured(view.party, "attacks on a recorded view", kinds, None,
                             f"no published attack on a recorded {view.role} view of split learning (the feature "
                             "parties' label attacks run on a party's view)")]
    setups = view.tap.received(view.party, "split.setup")
    if len(setups) != 1 or y is None:
        why = "no labels to score against (--truth)" if y is None else f"{len(setups)} split.setup messages"
        return [not_measured(view.party, "label attacks on its recorded view", kinds, None, why)]
    s, y = setups[0], np.asarray(y)
    if len(y) != s.n_overlap:
        raise AuditError(f"{len(y)} labels for the {s.n_overlap} overlap rows of the recorded run")
    kind = gradient_kind_received(view.tap, view.party)
    e = lpmst_stage2_epoch(s.epochs) if s.label_mechanism == "lpmst" else 0
    first = epoch_batches(s.n_overlap, s.batch_size, s.seed, e)
    last = epoch_batches(s.n_overlap, s.batch_size, s.seed, s.epochs - 1)
    return _published_label_attacks(view.tap, view.party, kind, y, first, last, e)


def gradient_kind_received(tap: AuditTap, party: str) -> str:
    """The gradient message ``party`` received: ``split.dp_gradient``, ``split.marvell_gradient`` or
    ``split.gradient``."""
    return next((k for k in (DP_KIND, MARVELL_KIND) if tap.received(party, k)), "split.gradient")


def inversion_attacks(tap: AuditTap, names: Sequence[str], X_of: dict[str, np.ndarray], cfg: SplitConfig,
                      n: int) -> list[EmpiricalFinding]:
    """The server's trained decoder (He et al.) of each party's raw columns from the representations it received
    (``split.dp_representation`` under embedding noise): on the last epoch's, and on each row's mean over the epochs
    (every release of it; noise of a fixed extractor would average out as 1/sqrt(epochs))."""
    kind = "split.dp_representation" if tap.received(SERVER, "split.dp_representation") else "split.representation"
    epochs = [epoch_batches(n, cfg.batch_size, cfg.seed, e) for e in range(cfg.epochs)]
    out = inversion_findings(tap, list(names), [(kind, "features")], rows=lambda p, k: (
        None if (H := _epoch_rows(tap, p, k, n, epochs[-1], "H", last_epoch=True)) is None else (H, X_of[p])))
    for p in names:
        msgs, per = tap.received(SERVER, kind, sender=p), len(epochs[0])
        if len(msgs) != per * len(epochs):
            out.append(not_measured(SERVER, f"{kind} from {p}: raw columns, mean of its releases, by a trained decoder",
                                    (kind,), None, f"{len(msgs)} {kind} messages from {p}, expected "
                                                   f"{per * len(epochs)}"))
            continue
        mean = np.mean([batch_rows(msgs[e * per:(e + 1) * per], b, n, "H") for e, b in enumerate(epochs)], axis=0)
        out.append(literature.representation_inversion(
            SERVER, f"{kind} from {p}: raw columns, mean of its releases, by a trained decoder", mean, X_of[p],
            attacks=(kind,)))
    return out


def defence_findings(tap: AuditTap, names: Sequence[str], n_classes: int) -> list[EmpiricalFinding]:
    """The checks of the label defences on a defended run: each party's noise check on the rows it received
    (multiplied back by their batch sizes, from the public schedule and the setup it received), and the label
    holder's randomized response against its keep probability (its training labels against its true labels)."""
    out = []
    for p in names:
        setup = tap.received(p, "split.setup")
        msgs = tap.received(p, DP_KIND)
        if not setup or setup[0].noise_multiplier is None or not msgs:
            out.append(not_measured(p, NOISE_CHECK, (DP_KIND,), Protection.DP,
                                    f"{p} received no {DP_KIND} under announced gradient noise"))
            continue
        s = setup[0]
        sizes = [len(b) for e in range(s.epochs) for b in epoch_batches(s.n_overlap, s.batch_size, s.seed, e)]
        rows = [np.asarray(m.G, np.float64) * b for m, b in zip(msgs, sizes, strict=False)]
        out.append(noise_floor_finding(p, NOISE_CHECK, rows, s.noise_multiplier * s.clip, attacks=(DP_KIND,)))
    setups = tap.received(names[0], "split.setup") if names else []
    if setups and setups[0].label_epsilon is not None and setups[0].label_mechanism == "lpmst":
        out.append(lpmst_finding(tap, setups[0].label_epsilon))
    else:
        out.append(rr_finding(tap, names, "split.setup", RR_CHECK, (DP_KIND,), n_classes))
    return out


def lpmst_finding(tap: AuditTap, epsilon: float) -> EmpiricalFinding:
    """The randomized-response check of an LP-MST run: the label holder's released labels (both stages, from its own
    records) against the keep probability RRWithPrior gives each row under the prior it used (exact
    Poisson-binomial tail); every overlap row's label must have been released exactly once."""
    recs = tap.held(SERVER, "lpmst_releases")
    if not recs:
        return not_measured(SERVER, RR_CHECK, (DP_KIND,), Protection.DP, "no LP-MST release recorded")
    rows = np.concatenate([r[0] for r in recs])
    if len(np.unique(rows)) != len(rows):
        raise AuditError("LP-MST released a row's label more than once")
    return keep_rate_finding(SERVER, RR_CHECK, np.concatenate([r[2] for r in recs]),
                             np.concatenate([r[1] for r in recs]), np.concatenate([r[3] for r in recs]),
                             f"LP-MST (RRWithPrior at epsilon = {epsilon:g}, two stages)", attacks=(DP_KIND,))


def marvell_findings(tap: AuditTap, names: Sequence[str]) -> list[EmpiricalFinding]:
    """The check of Marvell on a run under it: for each party, the rows it received less the clean rows the label
    holder computed, whitened by the covariance the label holder solved for each row's label (λ_1k along Δ̂, λ_2k
    across it), must carry unit variance in every coordinate that was to be noised (the noise check of
    :func:`~vflcrypto.audit.defences.noise_floor_finding` at std 1). From the label holder's own records, like the
    randomized-response check: a party cannot check it alone (the covariance depends on the labels)."""
    steps = tap.held(SERVER, "marvell_steps")
    out = []
    for p in names:
        msgs = tap.received(p, MARVELL_KIND)
        mine = [rec[1:] for rec in steps if rec[0] == p]
        if not msgs or len(mine) != len(msgs):
            out.append(not_measured(p, MARVELL_CHECK, (MARVELL_KIND,), Protection.NOISED,
                                    f"{p} received {len(msgs)} {MARVELL_KIND} for {len(mine)} solved steps"))
            continue
        rows = []
        for msg, (G, y, sol, unit) in zip(msgs, mine, strict=True):
            noise = np.asarray(msg.G, np.float64) - np.asarray(G, np.float64)
            along = noise @ unit
            across = noise - np.outer(along, unit)
            for label, lam1, lam2 in ((1, sol.lam11, sol.lam21), (0, sol.lam10, sol.lam20)):
                m = np.asarray(y) == label
                if lam2 > 0 and lam1 > 0:  # Σ^(-1/2) n: d coordinates of unit variance
                    rows.append(across[m] / np.sqrt(lam2) + np.outer(along[m] / np.sqrt(lam1), unit))
                elif lam1 > 0:  # noise along Δ̂ only
                    rows.append(along[m] / np.sqrt(lam1))
        out.append(noise_floor_finding(p, MARVELL_CHECK, rows, 1.0, attacks=(MARVELL_KIND,),
                                       protection=Protection.NOISED))
    return out


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """Split learning on the digits halves (100 overlap rows, 20 epochs), attacked per role; then a defended run.

    * each party: k-means (K = C) on every batch gradient of the first epoch, scored by
      the ARI against the batch rows' true labels (the gradient packet carries the label
      partition of every batch, every round);
    * the server: a linear probe from the representations of the last epoch's batches to
      each party's raw columns (held-out R^2);
    * the scorecard's published attacks: each party's norm and direction scoring on the
      first epoch's gradient rows and passive model completion on the last epoch's
      representations it sent; the server's trained decoder on the last epoch's
      representations (:func:`~vflcrypto.protocols._repvfl_audit.label_attack_findings`,
      :func:`~vflcrypto.protocols._repvfl_audit.inversion_findings`);
    * the defended run (randomized response and gradient noise, both at ε = 1): the checks
      that each defence runs as announced (:func:`defence_findings`); an LP-MST run at ε = 1
      (two stages), whose released labels are checked against RRWithPrior's per-row keep
      probabilities (:func:`lpmst_finding`, the same declared check); and a Marvell run on the
      binary digits (:func:`~vflcrypto.protocols._repvfl.binary_digits_example`, 200 overlap rows,
      s = 4), whose rows are checked against the noise the label holder solved
      (:func:`marvell_findings`). What the defences do to the attacks, at several budgets, is
      the frontier (:func:`~.frontier.frontier`);
    * the embedding-defended run (every party's representations clipped to 1 and noised for
      ε = 1 over the epochs, δ = 1/n²): the server's check that each party's rows carry the
      announced noise (:func:`~vflcrypto.protocols._repvfl_embed_audit.embed_noise_findings`),
      and the decoder's R² on what it received (metrics; the frontier re-runs it per budget).

    No key is involved (``key_bits`` is unused): nothing here is encrypted, by design.
    """
    require_torch()
    server, parties = digits_example(100, seed=0)
    cfg = SplitConfig(epochs=EPOCHS)
    names, y, n = party_names(len(parties)), server.y_overlap, len(server.y_overlap)
    run, tap = run_tapped(server, parties, cfg)
    last = epoch_batches(n, cfg.batch_size, cfg.seed, cfg.epochs - 1)
    findings = label_attacks(tap, names, "split.gradient", y, cfg, server.n_classes)
    probes = []
    for p in names:
        msgs = tap.received(SERVER, "split.representation", sender=p)[-len(last):]
        H = np.concatenate([np.asarray(m.H) for m in msgs])
        X = np.asarray(tap.held(p, "features")[0])[np.concatenate(last)]
        probes.append(probe_finding(SERVER, f"split.representation from {p}: raw columns by a linear probe", H, X,
                                    attacks=("split.representation",), protection=None,
                                    description="held-out R^2 of a ridge regression from the last epoch's "
                                                f"representations of {p} to its raw columns; by design"))
    metrics = {"batch_gradient_kmeans_ari": min(f.value for f in findings if "label partition" in f.name),
               "probe_r2": max(f.value for f in probes), "test_accuracy": float(run.test_accuracy or 0.0)}
    findings += probes
    X_of = {p: np.asarray(tap.held(p, "features")[0]) for p in names}
    findings += inversion_findings(tap, names, [("split.representation", "features")], rows=lambda p, kind: (
        None if (H := _epoch_rows(tap, p, kind, n, last, "H", last_epoch=True)) is None else (H, X_of[p])))
    dcfg = SplitConfig(epochs=EPOCHS, label_dp=DEFENDED_EPSILON, grad_epsilon=DEFENDED_EPSILON)
    drun, dtap = run_tapped(server, parties, dcfg)
    findings += defence_findings(dtap, names, server.n_classes)
    metrics["defended_test_accuracy"] = float(drun.test_accuracy or 0.0)
    for name, g in drun.server.privacy.items():
        metrics[f"defended_{name.replace('-', '_')}_epsilon"] = g["epsilon"]
        metrics[f"defended_{name.replace('-', '_')}_delta"] = g["delta"]
    lrun, ltap = run_tapped(server, parties, SplitConfig(epochs=EPOCHS, label_dp=DEFENDED_EPSILON,
                                                         label_mechanism="lpmst"))
    findings += defence_findings(ltap, names, server.n_classes)[-1:]  # its label check (no gradient noise)
    metrics["lpmst_test_accuracy"] = float(lrun.test_accuracy or 0.0)
    metrics["lpmst_epsilon"] = lrun.server.privacy["label-lpmst"]["epsilon"]
    bserver, bparties = binary_digits_example(200, seed=0)
    mrun, mtap = run_tapped(bserver, bparties, SplitConfig(epochs=EPOCHS, marvell_bound=DEFENDED_MARVELL))
    findings += marvell_findings(mtap, names)
    marvell = mrun.server.privacy["marvell"]["params"]
    metrics.update(marvell_test_accuracy=float(mrun.test_accuracy or 0.0), marvell_max_sum_kl=marvell["max_sum_kl"],
                   marvell_leak_auc_bound=marvell["leak_auc_bound"])
    erun, etap = run_tapped(server, parties, SplitConfig(epochs=EPOCHS, embed_epsilon=DEFENDED_EPSILON))
    findings += embed_noise_findings(etap, names, "split", EMBED_KINDS)
    einv = inversion_attacks(etap, names, X_of, cfg, n)
    metrics["embed_defended_test_accuracy"] = float(erun.test_accuracy or 0.0)
    metrics["embed_defended_inversion_r2"] = max(f.value for f in einv if f.measured)
    for p, res in zip(names, erun.parties, strict=True):  # each party's own accounting of its rows' releases
        g = res.privacy["embed-gauss"]
        key = p.replace("-", "_")
        metrics[f"embed_defended_epsilon_{key}"], metrics[f"embed_defended_delta_{key}"] = g["epsilon"], g["delta"]
    label = f"label defences (randomized response and gradient noise, epsilon = {DEFENDED_EPSILON:g} each)"
    runs = {"undefended": run.transcript, label: drun.transcript,
            f"LP-MST label defence (two stages, epsilon = {DEFENDED_EPSILON:g})": lrun.transcript,
            f"Marvell (s = {DEFENDED_MARVELL:g}) on the binary digits": mrun.transcript,
            EMBED_LABEL: erun.transcript}
    report, sections = audit_runs(runs)
    return AuditOutcome("split", report, tuple(findings), metrics, sections=sections, transcripts=tuple(runs.items()))


@needs_torch
def demo_step(ctx: DemoContext) -> dict[str, Any]:
    """Split learning (vanilla VFL) on the bundled digits: the many-round baseline of one-shot VFL."""
    server, parties = digits_example(100, seed=0)
    cfg = SplitConfig(epochs=50 if ctx.quick else 200)
    t0 = time.perf_counter()
    run = run_local(server, parties, config=cfg)
    secs, nbytes = time.perf_counter() - t0, run.transcript.total_bytes
    ctx.say(f"digits halves, 100 overlap rows, {cfg.epochs} epochs: test accuracy {run.test_accuracy:.1%}, "
            f"{nbytes:,} B in {len(run.transcript.sent()):,} messages, {secs:.1f} s")
    return {"test_accuracy": run.test_accuracy, "bytes": nbytes, "seconds": round(secs, 3)}
