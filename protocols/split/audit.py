"""The split-learning audit (attacks on what each role received), its label defences' checks and frontier,
and its demo step."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import not_measured, probe_finding
from vflcrypto.audit.checks import Check
from vflcrypto.audit.defences import Frontier, FrontierPoint, FrontierRun, frontier_point, noise_floor_finding
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit_runs
from vflcrypto.errors import AuditError, InputDataError
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection
from vflcrypto.runtime.record import RecordedView
from vflcrypto.spec import DemoContext

from .._repvfl import PARTY, SERVER, PartyData, RepRun, ServerData, digits_example, party_names, require_torch
from .._repvfl_audit import (
    batch_gradient_finding,
    batch_rows,
    inversion_findings,
    label_attack_findings,
    needs_torch,
)
from .._repvfl_defence_audit import (
    ATTACK_PATTERNS,
    FRONTIER_ATTACKS,
    defence_checks,
    noise_check_name,
    own_columns_completion,
    rr_check_name,
    rr_finding,
)
from .defence import COVERS, DEFENCES
from .roles import SplitConfig, epoch_batches, run_local

__all__ = ["CHECKS", "DEFENDED_EPSILON", "NOISE_CHECK", "RR_CHECK", "audit_run", "defence_findings", "demo_step",
           "frontier", "view_attacks"]

EPOCHS = 20  # the audit's runs: 100 overlap rows of the digits, 2 batches per epoch
#: the audit's defended run: both label defences at the frontier's tightest budget
DEFENDED_EPSILON = 1.0
DP_KIND = "split.dp_gradient"
NOISE_CHECK, RR_CHECK = noise_check_name(DP_KIND), rr_check_name(DP_KIND)
CHECKS: tuple[Check, ...] = defence_checks(DP_KIND, (DP_KIND,))


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
        out += _published_label_attacks(tap, p, kind, y, first, last)
    return out


def _published_label_attacks(tap: AuditTap, party: str, kind: str, y: np.ndarray, first: list[np.ndarray],
                             last: list[np.ndarray]) -> list[EmpiricalFinding]:
    """``party``'s norm and direction scoring on the first epoch's gradient rows it received (``kind``) and model
    completion on the last epoch's representations it sent (an in-process audit and a recorded view alike)."""
    n = len(y)
    return label_attack_findings(party, kind, _epoch_rows(tap, party, kind, n, first, "G", last_epoch=False),
                                 "split.representation",
                                 _epoch_rows(tap, party, "split.representation", n, last, "H", last_epoch=True), y)


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
    return _published_label_attacks(view.tap, view.party, kind, y, first, last)

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
    out.append(rr_finding(tap, names, "split.setup", RR_CHECK, (DP_KIND,), n_classes))
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


def _point(server: ServerData, parties: list[PartyData], cfg: SplitConfig, defence: str, budget: float | None,
           own: float, repeats: int) -> FrontierPoint:
    """One budget's point: the mean over ``repeats`` runs of the test accuracy and of each attack's worst score."""
    kind = DP_KIND if cfg.defence().on else "split.gradient"

    def once() -> FrontierRun:
        run, tap = _run(server, parties, cfg)
        found = _label_attacks(tap, party_names(len(parties)), kind, server.y_overlap, cfg, server.n_classes)
        return {"test_accuracy": float(run.test_accuracy or 0.0)}, run.server.privacy, found

    return frontier_point(budget, defence, repeats, once, ATTACK_PATTERNS, {"model_completion": own})


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
    own = own_columns_completion(server, parties)
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
