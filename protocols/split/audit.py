"""The split-learning audit (attacks on what each role received), its label and embedding defences' checks and
frontiers, and its demo step."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.audit import literature
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
from .._repvfl_embed import EMBED_DEFENCES
from .._repvfl_embed_audit import (
    BUDGET_NAMES,
    EMBED_FRONTIER_ATTACKS,
    EMBED_PATTERNS,
    embed_check,
    embed_check_name,
    embed_config,
    embed_noise_findings,
)
from .defence import COVERS, DEFENCES
from .roles import SplitConfig, epoch_batches, run_local

__all__ = ["CHECKS", "DEFENDED_EPSILON", "EMBED_CHECK", "NOISE_CHECK", "RR_CHECK", "audit_run", "defence_findings",
           "demo_step", "frontier", "inversion_attacks", "view_attacks"]

EPOCHS = 20  # the audit's runs: 100 overlap rows of the digits, 2 batches per epoch
#: the audit's defended run: both label defences at the frontier's tightest budget
DEFENDED_EPSILON = 1.0
DP_KIND = "split.dp_gradient"
NOISE_CHECK, RR_CHECK = noise_check_name(DP_KIND), rr_check_name(DP_KIND)
#: the representation kinds under the parties' embedding noise
EMBED_KINDS = ("split.dp_representation", "split.dp_test_representation")
EMBED_CHECK = embed_check_name("split")
CHECKS: tuple[Check, ...] = (*defence_checks(DP_KIND, (DP_KIND,)), embed_check("split", EMBED_KINDS))
EMBED_LABEL = f"embedding noise (epsilon = {DEFENDED_EPSILON:g} for each party's rows, delta = 1/n^2)"


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
    rep = "split.dp_representation" if tap.received(None, "split.dp_representation", sender=party) \
        else "split.representation"
    return label_attack_findings(party, kind, _epoch_rows(tap, party, kind, n, first, "G", last_epoch=False),
                                 rep, _epoch_rows(tap, party, rep, n, last, "H", last_epoch=True), y)


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
      to the attacks, at several budgets, is the frontier (:func:`frontier`);
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
    erun, etap = _run(server, parties, SplitConfig(epochs=EPOCHS, embed_epsilon=DEFENDED_EPSILON))
    findings += embed_noise_findings(etap, names, "split", EMBED_KINDS)
    einv = inversion_attacks(etap, names, X_of, cfg, n)
    metrics["embed_defended_test_accuracy"] = float(erun.test_accuracy or 0.0)
    metrics["embed_defended_inversion_r2"] = max(f.value for f in einv if f.measured)
    for p, res in zip(names, erun.parties, strict=True):  # each party's own accounting of its rows' releases
        g = res.privacy["embed-gauss"]
        key = p.replace("-", "_")
        metrics[f"embed_defended_epsilon_{key}"], metrics[f"embed_defended_delta_{key}"] = g["epsilon"], g["delta"]
    label = f"label defences (randomized response and gradient noise, epsilon = {DEFENDED_EPSILON:g} each)"
    runs = {"undefended": run.transcript, label: drun.transcript, EMBED_LABEL: erun.transcript}
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
    to (ε, δ = 1e-5)), beside the undefended run; each point the mean of ``repeats`` runs (fresh randomness each).
    Under an embedding defence (``embed-gauss``: the parties' representations clipped to 1 and noised, calibrated
    to ε over the epochs at δ = 1/n²; ``dcor``: NoPeek at weight λ = each budget, no ε) the columns are the server's
    decoder of the parties' raw columns instead (:func:`_embed_frontier`)."""
    require_torch()
    if defence not in DEFENCES:
        raise InputDataError(f"split's defences are {', '.join(DEFENCES)}, not {defence!r}")
    if repeats < 1:
        raise InputDataError(f"the frontier needs >= 1 run per budget, got {repeats}")
    server, parties = digits_example(100, seed=0)
    if defence in EMBED_DEFENCES:
        return _embed_frontier(server, parties, defence, budgets, repeats)
    own = own_columns_completion(server, parties)
    points = [_point(server, parties, SplitConfig(epochs=EPOCHS), defence, None, own, repeats)]
    for b in budgets:
        cfg = (SplitConfig(epochs=EPOCHS, label_dp=b) if defence == "label-rr"
               else SplitConfig(epochs=EPOCHS, grad_epsilon=b))
        points.append(_point(server, parties, cfg, defence, b, own, repeats))
    statement = (f"{defence} protects {COVERS[defence]}; split learning on the digits, 100 overlap rows, "
                 f"{EPOCHS} epochs, batch 64")
    return Frontier("split", defence, statement, tuple(points), FRONTIER_ATTACKS)


def _embed_frontier(server: ServerData, parties: list[PartyData], defence: str, budgets: Sequence[float],
                    repeats: int) -> Frontier:
    """The server's decoder of each party's raw columns (last epoch, and each row's mean over its releases) and the
    test accuracy at each budget of an embedding defence, beside the undefended run."""
    names, n = party_names(len(parties)), len(server.y_overlap)
    X_of = {p: d.X_overlap for p, d in zip(names, parties, strict=True)}

    def runner(cfg: SplitConfig) -> Any:
        def once() -> FrontierRun:
            run, tap = _run(server, parties, cfg)
            return ({"test_accuracy": float(run.test_accuracy or 0.0)}, run.server.privacy,
                    inversion_attacks(tap, names, X_of, cfg, n))

        return once

    points = [frontier_point(None, defence, repeats, runner(SplitConfig(epochs=EPOCHS)), EMBED_PATTERNS)]
    for b in budgets:
        cfg = SplitConfig(epochs=EPOCHS, **embed_config(defence, b))
        points.append(frontier_point(b, defence, repeats, runner(cfg), EMBED_PATTERNS))
    clip = (f", every representation row clipped to {SplitConfig().embed_clip:g}, delta = 1/n^2 over the "
            f"{n + len(parties[0].X_test)} overlap and test rows") if defence == "embed-gauss" else ""
    statement = (f"{defence} protects {COVERS[defence]}; split learning on the digits, 100 overlap rows, {EPOCHS} "
                 f"epochs, batch 64{clip}")
    return Frontier("split", defence, statement, tuple(points), EMBED_FRONTIER_ATTACKS, BUDGET_NAMES[defence])


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
