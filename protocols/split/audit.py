"""The split-learning audit (attacks on what each role received), its label defences' checks and frontier,
and its demo step."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.audit import literature
from vflcrypto.audit.attacks import not_measured, probe_finding
from vflcrypto.audit.checks import Check
from vflcrypto.audit.defences import Frontier, FrontierPoint, noise_floor_finding, randomized_response_finding
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit_runs
from vflcrypto.errors import AuditError, InputDataError
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection
from vflcrypto.runtime.record import RecordedView
from vflcrypto.spec import DemoContext

from .._repvfl import PARTY, SERVER, PartyData, RepRun, ServerData, digits_example, party_names, require_torch
from .._repvfl_audit import (
    COMPLETION_LABELS,
    batch_gradient_finding,
    batch_rows,
    inversion_findings,
    label_attack_findings,
    needs_torch,
)
from .defence import COVERS, DEFENCES
from .roles import SplitConfig, epoch_batches, run_local

__all__ = ["CHECKS", "DEFENDED_EPSILON", "NOISE_CHECK", "RR_CHECK", "audit_run", "defence_findings", "demo_step",
           "frontier", "view_attacks"]

EPOCHS = 20  # the audit's runs: 100 overlap rows of the digits, 2 batches per epoch
#: the audit's defended run: both label defences at the frontier's tightest budget
DEFENDED_EPSILON = 1.0
DP_KIND = "split.dp_gradient"
NOISE_CHECK = f"{DP_KIND}: Gaussian noise at the announced scale"
RR_CHECK = f"{DP_KIND}: training labels kept at randomized response's rate"
CHECKS: tuple[Check, ...] = (
    Check(NOISE_CHECK, (DP_KIND,), Protection.DP,
          "the gradient noise dropped or scaled down (less than half the announced variance in the rows)", 0.5),
    Check(RR_CHECK, (DP_KIND,), Protection.DP, "randomized response skipped (every training label kept)", 1.0),
)


def _run(server: ServerData, parties: list[PartyData], cfg: SplitConfig) -> tuple[RepRun, AuditTap]:
    tap = AuditTap()
    return run_local(server, parties, config=cfg, tap=tap), tap


def _epoch_rows(tap: AuditTap, p: str, kind: str, n: int, batches: list[np.ndarray], field: str, *,
                last_epoch: bool) -> np.ndarray | None:
    """One epoch's ``field`` arrays of ``kind`` (received by party ``p``, or sent by it to the server) in row order."""
    msgs = tap.received(p, kind) if field == "G" else tap.received(None, kind, sender=p)
    msgs = msgs[-len(batches):] if last_epoch else msgs[: len(batches)]
    return batch_rows(msgs, batches, n, field) if len(msgs) == len(batches) else None


def _label_attacks(tap: AuditTap, names: list[str], kind: str, y: np.ndarray, cfg: SplitConfig,
                   n_classes: int) -> list[EmpiricalFinding]:
    """Each party's k-means on the first epoch's batch gradients (ARI), then norm and direction scoring on them and
    model completion on the last epoch's representations it sent."""
    n = len(y)
    first = epoch_batches(n, cfg.batch_size, cfg.seed, 0)
    last = epoch_batches(n, cfg.batch_size, cfg.seed, cfg.epochs - 1)
    out = [batch_gradient_finding(tap, p, kind, y, first, n_classes) for p in names]
    for p in names:
        out += label_attack_findings(p, kind, _epoch_rows(tap, p, kind, n, first, "G", last_epoch=False),
                                     "split.representation",
                                     _epoch_rows(tap, p, "split.representation", n, last, "H", last_epoch=True), y)
    return out


def view_attacks(view: RecordedView, y: np.ndarray | None) -> list[EmpiricalFinding]:
    """The published attacks on one party's recorded view of a network run (``vflcrypto party ... train split
    --keep-messages``): a feature party's norm and direction scoring on the first epoch's gradient rows it received
    (``split.gradient``, or ``split.dp_gradient`` under gradient noise) and model completion on the last epoch's
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
    kind = DP_KIND if view.tap.received(view.party, DP_KIND) else "split.gradient"
    first = epoch_batches(s.n_overlap, s.batch_size, s.seed, 0)
    last = epoch_batches(s.n_overlap, s.batch_size, s.seed, s.epochs - 1)
    return label_attack_findings(
        view.party, kind, _epoch_rows(view.tap, view.party, kind, s.n_overlap, first, "G", last_epoch=False),
        "split.representation",
        _epoch_rows(view.tap, view.party, "split.representation", s.n_overlap, last, "H", last_epoch=True), y)

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
    if not setups or setups[0].label_epsilon is None:
        out.append(not_measured(SERVER, RR_CHECK, (DP_KIND,), Protection.DP, "no randomized response announced"))
    else:
        out.append(randomized_response_finding(SERVER, RR_CHECK, tap.held(SERVER, "training_labels")[0],
                                               tap.held(SERVER, "labels")[0], setups[0].label_epsilon, n_classes,
                                               attacks=(DP_KIND,)))
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
      that each defence runs as announced (:func:`defence_findings`). What the defences do
      to the attacks, at several budgets, is the frontier (:func:`frontier`).

    No key is involved (``key_bits`` is unused): nothing here is encrypted, by design.
    """
    require_torch()
    server, parties = digits_example(100, seed=0)
    cfg = SplitConfig(epochs=EPOCHS)
    names, y, n = party_names(len(parties)), server.y_overlap, len(server.y_overlap)
    run, tap = _run(server, parties, cfg)
    last = epoch_batches(n, cfg.batch_size, cfg.seed, cfg.epochs - 1)
    findings = _label_attacks(tap, names, "split.gradient", y, cfg, server.n_classes)
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
    drun, dtap = _run(server, parties, dcfg)
    findings += defence_findings(dtap, names, server.n_classes)
    metrics["defended_test_accuracy"] = float(drun.test_accuracy or 0.0)
    for name, g in drun.server.privacy.items():
        metrics[f"defended_{name.replace('-', '_')}_epsilon"] = g["epsilon"]
        metrics[f"defended_{name.replace('-', '_')}_delta"] = g["delta"]
    label = f"label defences (randomized response and gradient noise, epsilon = {DEFENDED_EPSILON:g} each)"
    runs = {"undefended": run.transcript, label: drun.transcript}
    report, sections = audit_runs(runs)
    return AuditOutcome("split", report, tuple(findings), metrics, sections=sections, transcripts=tuple(runs.items()))


#: the frontier's columns: attack -> what it is
FRONTIER_ATTACKS = {
    "kmeans_ari": "k-means (K = C) on each first-epoch batch gradient, ARI against the true labels (baseline 0)",
    "norm_scoring": "norm scoring (Li et al., ICLR 2022), mean one-vs-rest AUC of the row norms (baseline: shuffled)",
    "direction_scoring": "direction scoring (Li et al.), accuracy from one known label per class (baseline: majority)",
    "model_completion": "passive model completion (Fu et al., USENIX Security 2022) on the representations it sent, "
                        "4 known labels per class, accuracy (baseline: the same head on the party's own raw columns, "
                        "what it predicts without any message)",
}
_PREFIX = {"kmeans_ari": "label partition", "norm_scoring": "norm scoring", "direction_scoring": "direction scoring",
           "model_completion": "model completion"}


def _own_columns_completion(server: ServerData, parties: list[PartyData]) -> float:
    """Model completion's head on each party's own raw columns instead of its representations (the best over the
    parties): the labels a party predicts from what it holds, with no message at all."""
    y = server.y_overlap
    known = literature.known_labels(y, COMPLETION_LABELS)
    return max(literature.model_completion(p, "own columns", d.X_overlap, y, known, attacks=()).value
               for p, d in zip(party_names(len(parties)), parties, strict=True))


def _point(server: ServerData, parties: list[PartyData], cfg: SplitConfig, defence: str, budget: float | None,
           own: float, repeats: int) -> FrontierPoint:
    """One budget's point: the mean over ``repeats`` runs of the test accuracy and of each attack's worst score."""
    t0 = time.perf_counter()
    dfn = cfg.defence()
    kind = DP_KIND if dfn.on else "split.gradient"
    scores: dict[str, list[float]] = {}
    baselines: dict[str, float] = {}
    accuracy: list[float] = []
    for _ in range(repeats):
        run, tap = _run(server, parties, cfg)
        accuracy.append(float(run.test_accuracy or 0.0))
        found = _label_attacks(tap, party_names(len(parties)), kind, server.y_overlap, cfg, server.n_classes)
        for key, prefix in _PREFIX.items():
            hits = [f for f in found if prefix in f.name and f.measured]
            if hits:
                scores.setdefault(key, []).append(max(f.value for f in hits))
                baselines[key] = own if key == "model_completion" else max(f.baseline or 0.0 for f in hits)
    g = run.server.privacy.get(defence)
    return FrontierPoint(budget, g["epsilon"] if g else None, g["delta"] if g else None, float(np.mean(accuracy)),
                         {k: float(np.mean(v)) for k, v in scores.items()}, baselines, dict(g["params"]) if g else {},
                         time.perf_counter() - t0, repeats)


def frontier(defence: str, budgets: Sequence[float], repeats: int = 1) -> Frontier:
    """The label attacks and the test accuracy of split learning on the digits (the audit's setting) at each ε of
    ``budgets`` under ``defence`` (``label-rr``: randomized response at ε; ``grad-gauss``: gradient noise calibrated
    to (ε, δ = 1e-5)), beside the undefended run; each point the mean of ``repeats`` runs (fresh randomness each)."""
    require_torch()
    if defence not in DEFENCES:
        raise InputDataError(f"split's defences are {', '.join(DEFENCES)}, not {defence!r}")
    if repeats < 1:
        raise InputDataError(f"the frontier needs >= 1 run per budget, got {repeats}")
    server, parties = digits_example(100, seed=0)
    own = _own_columns_completion(server, parties)
    points = [_point(server, parties, SplitConfig(epochs=EPOCHS), defence, None, own, repeats)]
    for b in budgets:
        cfg = (SplitConfig(epochs=EPOCHS, label_dp=b) if defence == "label-rr"
               else SplitConfig(epochs=EPOCHS, grad_epsilon=b))
        points.append(_point(server, parties, cfg, defence, b, own, repeats))
    statement = (f"{defence} protects {COVERS[defence]}; split learning on the digits, 100 overlap rows, "
                 f"{EPOCHS} epochs, batch 64")
    return Frontier("split", defence, statement, tuple(points), FRONTIER_ATTACKS)


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
