"""The one-shot VFL audit (attacks on what each role received), its label and embedding defences' checks and
frontiers, and its demo step."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from vflcrypto.audit.checks import Check
from vflcrypto.audit.defences import Frontier
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit_runs
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.spec import DemoContext

from .._repvfl import RepRun, digits_example, party_names, require_torch
from .._repvfl_audit import d1_finding, inversion_findings, needs_torch, probe_findings, received_label_attacks
from .._repvfl_defence_audit import d1_frontier, defence_checks, defence_findings, noise_check_name, rr_check_name
from .._repvfl_embed import EMBED_DEFENCES
from .._repvfl_embed_audit import (
    DEFENDED_EMBED,
    embed_check,
    embed_check_name,
    embed_defended_run,
    received_frontier,
)
from .defence import COVERS, FRONTIER_CLIP
from .roles import OneShotConfig, run_local

__all__ = ["CHECKS", "DEFENDED", "EMBED_CHECK", "EMBED_KINDS", "EMBED_LABEL", "NOISE_CHECK", "RR_CHECK", "audit_run",
           "defended_run", "demo_step", "frontier"]

DP_KIND = "oneshot.dp_gradient"
NOISE_CHECK, RR_CHECK = noise_check_name(DP_KIND), rr_check_name(DP_KIND)
#: the representation kinds under the parties' embedding noise
EMBED_KINDS = ("oneshot.dp_representation", "oneshot.dp_representation_update", "oneshot.dp_test_representation")
EMBED_CHECK = embed_check_name("oneshot")
CHECKS: tuple[Check, ...] = (*defence_checks(DP_KIND, (DP_KIND, "oneshot.dp_partition")),
                             embed_check("oneshot", EMBED_KINDS))
#: the audit's defended run: both label defences at ε = 1 (the frontier's tightest budget), no local or head training
#: (its checks read D1 and the label holder's training labels; what the defences cost is the frontier)
DEFENDED: dict[str, Any] = {"label_dp": 1.0, "grad_epsilon": 1.0, "grad_clip": FRONTIER_CLIP, "ssl_epochs": 0,
                            "head_epochs": 0}
DEFENDED_LABEL = "label defences (randomized response and D1 noise, epsilon = 1 each; no local training)"
EMBED_LABEL = "embedding noise (epsilon = 1 for each party's rows, delta = 1/n^2; no local training)"
#: the frontier's inversion attack: (the suffix of the plain kind, the held raw rows, its column's label)
INVERTED = (("representation", "features", "U1"), ("representation_update", "features", "U2"))


def defended_run(protocol: str, run: RepRun, tap: AuditTap, n_classes: int, y: Any,
                 names: Sequence[str]) -> tuple[list[EmpiricalFinding], dict[str, float]]:
    """The checks of a defended one-/few-shot run (every party's noise check on its D1, the label holder's
    randomized response), the label partition each party still reads from D1, and the metrics: each guarantee's
    (ε, δ) as the server accounted it and the worst party's ARI."""
    findings = defence_findings(tap, names, protocol, n_classes)
    ari = [d1_finding(tap, p, f"{protocol}.dp_gradient", y) for p in names]
    metrics = {"defended_gradient_kmeans_ari": max(f.value for f in ari)}
    for name, g in run.server.privacy.items():
        metrics[f"defended_{name.replace('-', '_')}_epsilon"] = g["epsilon"]
        metrics[f"defended_{name.replace('-', '_')}_delta"] = g["delta"]
    return findings + ari, metrics


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False, undefended: bool = True) -> AuditOutcome:
    """One-shot VFL on the digits halves (100 overlap rows), both D1 variants, attacked per role; then a defended run.

    * each party: the label partition of the overlap rows from its D1 (k-means on the
      gradient rows with the C it received, or the cluster ids of the partition variant),
      scored by the ARI against the true labels;
    * the server: a linear probe from the U1 and U2 representations to each party's raw
      columns (held-out R^2);
    * the scorecard's published attacks (gradient variant): each party's norm and direction
      scoring on its D1 and passive model completion on the U2 it sent; the server's trained
      decoder on U1 and U2;
    * the defended run (:data:`DEFENDED`: randomized response and D1 noise, both at ε = 1): the
      checks that each defence runs as announced (:func:`defended_run`), and the label partition
      each party still reads from its D1. What the defences do to every attack, and to the
      accuracy, at several budgets is the frontier (:func:`frontier`);
    * the embedding-defended run (every party's U1, U2 and test representations clipped to 1 and
      noised for ε = 1 over an overlap row's two releases, no local training): the server's check
      that each party's rows carry the announced noise.

    ``undefended=False`` runs the defended run alone (the mutation tests of the defences). No key is
    involved (``key_bits`` is unused): nothing here is encrypted, by design.
    """
    require_torch()
    server, parties = digits_example(100, seed=0)
    names, y = party_names(len(parties)), server.y_overlap
    dtap = AuditTap()
    drun = run_local(server, parties, config=OneShotConfig(**DEFENDED), tap=dtap)
    dfound, dmetrics = defended_run("oneshot", drun, dtap, server.n_classes, y, names)
    erun, efound, emetrics = embed_defended_run("oneshot", run_local, OneShotConfig(**DEFENDED_EMBED), server,
                                                parties, EMBED_KINDS)
    dfound, dmetrics = dfound + efound, {**dmetrics, **emetrics}
    if not undefended:
        druns = {DEFENDED_LABEL: drun.transcript, EMBED_LABEL: erun.transcript}
        report, sections = audit_runs(druns)
        return AuditOutcome("oneshot", report, tuple(dfound), dmetrics, sections=sections,
                            transcripts=tuple(druns.items()))
    tap, ptap = AuditTap(), AuditTap()
    run = run_local(server, parties, tap=tap)
    prun = run_local(server, parties, config=OneShotConfig(variant="partition"), tap=ptap)
    grad = [d1_finding(tap, p, "oneshot.gradient", y) for p in names]
    part = [d1_finding(ptap, p, "oneshot.partition", y) for p in names]
    probes = probe_findings(tap, names, [("oneshot.representation", "features"),
                                         ("oneshot.representation_update", "features")])
    papers = received_label_attacks(tap, names, "oneshot", y)
    papers += inversion_findings(tap, names, [("oneshot.representation", "features"),
                                              ("oneshot.representation_update", "features")])
    runs = {"D1 = gradients": run.transcript, "D1 = partition": prun.transcript, DEFENDED_LABEL: drun.transcript,
            EMBED_LABEL: erun.transcript}
    report, sections = audit_runs(runs)
    metrics = {"gradient_kmeans_ari": min(f.value for f in grad), "partition_ari": min(f.value for f in part),
               "probe_r2_u1": max(f.value for f in probes if "representation from" in f.name),
               "probe_r2_u2": max(f.value for f in probes if "representation_update" in f.name),
               "test_accuracy": float(run.test_accuracy or 0.0), **dmetrics}
    return AuditOutcome("oneshot", report, (*grad, *part, *probes, *papers, *dfound), metrics, sections=sections,
                        transcripts=tuple(runs.items()))


def frontier(defence: str, budgets: Sequence[float], repeats: int = 1) -> Frontier:
    """The label attacks (k-means, norm and direction scoring on D1; model completion on U2) and the test accuracy
    of one-shot VFL on the digits (the audit's setting, gradient variant) at each ε of ``budgets`` under ``defence``
    (``label-rr``: randomized response at ε; ``grad-gauss``: D1 clipped to :data:`FRONTIER_CLIP` and noised,
    calibrated to (ε, δ = 1e-5) over its one release), beside the undefended run; each point the mean of
    ``repeats`` runs. Under an embedding defence (``embed-gauss`` at ε, ``dcor`` at weight λ) the columns are the
    server's decoder of the parties' raw columns from U1 and U2 instead."""
    if defence in EMBED_DEFENCES:
        return received_frontier("oneshot", run_local, OneShotConfig, defence, budgets, repeats, INVERTED, COVERS,
                                 "one-shot VFL on the digits, 100 overlap rows, two parties, D1 = gradients, 60 local "
                                 "epochs")
    return d1_frontier("oneshot", run_local, OneShotConfig, defence, budgets, repeats, clip=FRONTIER_CLIP,
                       covers=COVERS, setting="one-shot VFL on the digits, 100 overlap rows, two parties, D1 = "
                                          "gradients, 60 local epochs")


@needs_torch
def demo_step(ctx: DemoContext) -> dict[str, Any]:
    """One-shot VFL on the bundled digits (left and right image halves, 100 overlap rows)."""
    server, parties = digits_example(100, seed=0)
    t0 = time.perf_counter()
    tap = AuditTap()
    run = run_local(server, parties, tap=tap)
    ari = min(d1_finding(tap, p, "oneshot.gradient", server.y_overlap).value for p in party_names(len(parties)))
    nbytes = run.transcript.total_bytes
    secs = time.perf_counter() - t0
    ctx.say(f"digits halves, 100 overlap rows: test accuracy {run.test_accuracy:.1%} on 360 rows, "
            f"{nbytes:,} B in 2 uploads + 1 download per party (+ test rows), {secs:.1f} s")
    ctx.say(f"  by design, each party's D1 gives away the overlap label partition: k-means ARI {ari:.3f}")
    return {"test_accuracy": run.test_accuracy, "bytes": nbytes, "gradient_kmeans_ari": ari,
            "seconds": round(secs, 3)}
