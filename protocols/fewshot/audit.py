"""The few-shot VFL audit (attacks on what each role received), its label and embedding defences' checks and
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

from .._repvfl import SERVER, digits_example, party_names, require_torch
from .._repvfl_audit import (
    d1_finding,
    inversion_findings,
    naming_finding,
    needs_torch,
    probe_findings,
    received_label_attacks,
)
from .._repvfl_defence_audit import d1_frontier, defence_checks, noise_check_name, rr_check_name
from .._repvfl_embed import EMBED_DEFENCES
from .._repvfl_embed_audit import (
    DEFENDED_EMBED,
    embed_check,
    embed_check_name,
    embed_defended_run,
    received_frontier,
)
from ..oneshot.audit import DEFENDED, DEFENDED_LABEL, defended_run
from ..oneshot.defence import COVERS, FRONTIER_CLIP
from .roles import FewShotConfig, run_local

__all__ = ["CHECKS", "EMBED_CHECK", "EMBED_KINDS", "NOISE_CHECK", "RR_CHECK", "audit_run", "demo_step", "frontier"]

DP_KIND = "fewshot.dp_gradient"
NOISE_CHECK, RR_CHECK = noise_check_name(DP_KIND), rr_check_name(DP_KIND)
#: the representation kinds under the parties' embedding noise (the audit's embedding-defended run is in client
#: return, so that every one of them is sent and checked)
EMBED_KINDS = ("fewshot.dp_representation", "fewshot.dp_representation_update", "fewshot.dp_unaligned_representation",
               "fewshot.dp_refit", "fewshot.dp_test_representation")
EMBED_CHECK = embed_check_name("fewshot")
CHECKS: tuple[Check, ...] = (*defence_checks(DP_KIND, (DP_KIND, "fewshot.dp_partition")),
                             embed_check("fewshot", EMBED_KINDS))
EMBED_LABEL = "embedding noise (epsilon = 1 for each party's rows, delta = 1/n^2; client return; no local training)"
#: the frontier's inversion attack: (the suffix of the plain kind, the held raw rows, its column's label)
INVERTED = (("representation", "features", "U1"), ("representation_update", "features", "U2"),
            ("unaligned_representation", "unaligned_features", "H_u"))


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False, undefended: bool = True) -> AuditOutcome:
    """Few-shot VFL on the digits halves (100 overlap rows), server-side expansion and client return; then a
    defended run.

    * each party: the overlap label partition from D1 (as in one-shot VFL); in client
      return, the overlap labels *named* with the pseudo-labels it received;
    * the server: which rows each party holds that the others lack (their count, exact)
      and a linear probe from every representation it received (U1, U2 and the unaligned
      H_u) to the party's raw columns;
    * the scorecard's published attacks (server-side expansion run): each party's norm and
      direction scoring on its D1 and passive model completion on the U2 it sent; the
      server's trained decoder on U1, U2 and H_u;
    * the defended run (server mode, one-shot VFL's :data:`~vflcrypto.protocols.oneshot.audit.DEFENDED`:
      randomized response and D1 noise at ε = 1, no local training): the checks that each defence runs
      as announced. What the defences do to every attack at several budgets is the frontier;
    * the embedding-defended run (client return, so that U1, U2, H_u, the refit and the test
      representations are all sent noised; ε = 1 over an overlap row's three releases; no local
      training): the server's check that each party's rows carry the announced noise.

    ``undefended=False`` runs the defended run alone (the mutation tests of the defences).
    """
    require_torch()
    server, parties = digits_example(100, seed=0)
    names, y = party_names(len(parties)), server.y_overlap
    dtap = AuditTap()
    drun = run_local(server, parties, config=FewShotConfig(**DEFENDED), tap=dtap)
    dfound, dmetrics = defended_run("fewshot", drun, dtap, server.n_classes, y, names)
    erun, efound, emetrics = embed_defended_run("fewshot", run_local, FewShotConfig(**DEFENDED_EMBED, mode="client"),
                                                server, parties, EMBED_KINDS)
    dfound, dmetrics = dfound + efound, {**dmetrics, **emetrics}
    if not undefended:
        druns = {DEFENDED_LABEL: drun.transcript, EMBED_LABEL: erun.transcript}
        report, sections = audit_runs(druns)
        return AuditOutcome("fewshot", report, tuple(dfound), dmetrics, sections=sections,
                            transcripts=tuple(druns.items()))
    tap, ctap = AuditTap(), AuditTap()
    run = run_local(server, parties, tap=tap)
    crun = run_local(server, parties, config=FewShotConfig(mode="client"), tap=ctap)
    findings: list[EmpiricalFinding] = [d1_finding(tap, p, "fewshot.gradient", y) for p in names]
    findings += probe_findings(tap, names, [("fewshot.representation", "features"),
                                            ("fewshot.representation_update", "features"),
                                            ("fewshot.unaligned_representation", "unaligned_features")])
    for p, data in zip(names, parties, strict=True):
        (hu,) = tap.received(SERVER, "fewshot.unaligned_representation", sender=p)
        findings.append(EmpiricalFinding(
            SERVER, f"fewshot.unaligned_representation from {p}: its unaligned rows", float(len(hu.H)), None,
            f"the server learns exactly how many rows {p} holds that the other parties lack ({len(hu.H)}; "
            f"truth {len(data.X_unaligned)}), and their representations; by design",
            attacks=("fewshot.unaligned_representation",), flagged=True, samples=len(hu.H),
            detects="exact (a row count)"))
    findings += received_label_attacks(tap, names, "fewshot", y)
    findings += inversion_findings(tap, names, [("fewshot.representation", "features"),
                                                ("fewshot.representation_update", "features"),
                                                ("fewshot.unaligned_representation", "unaligned_features")])
    naming = [naming_finding(ctap, p, "fewshot.pseudo_labels", y) for p in names]
    findings += naming
    metrics = {"gradient_kmeans_ari": min(f.value for f in findings[: len(names)]),
               "cluster_naming_accuracy": max((f.value for f in naming), default=0.0),
               "test_accuracy": float(run.test_accuracy or 0.0),
               "test_accuracy_client": float(crun.test_accuracy or 0.0), **dmetrics}
    findings += dfound
    runs = {"server-side expansion": run.transcript, "client return": crun.transcript, DEFENDED_LABEL: drun.transcript,
            EMBED_LABEL: erun.transcript}
    report, sections = audit_runs(runs)
    return AuditOutcome("fewshot", report, tuple(findings), metrics, sections=sections, transcripts=tuple(runs.items()))


def frontier(defence: str, budgets: Sequence[float], repeats: int = 1) -> Frontier:
    """One-shot VFL's frontier (:func:`vflcrypto.protocols.oneshot.audit.frontier`) on few-shot VFL in its default
    server mode: the label attacks on D1 and U2 and the test accuracy at each ε of ``budgets``; under an embedding
    defence the server's decoder from U1, U2 and H_u instead."""
    if defence in EMBED_DEFENCES:
        return received_frontier("fewshot", run_local, FewShotConfig, defence, budgets, repeats, INVERTED, COVERS,
                                 "few-shot VFL on the digits, 100 overlap rows, two parties with their unaligned rows, "
                                 "server mode, D1 = gradients, 60 local epochs")
    return d1_frontier("fewshot", run_local, FewShotConfig, defence, budgets, repeats, clip=FRONTIER_CLIP,
                       covers=COVERS, setting="few-shot VFL on the digits, 100 overlap rows, two parties with their "
                                          "unaligned rows, server mode, D1 = gradients, 60 local epochs")


@needs_torch
def demo_step(ctx: DemoContext) -> dict[str, Any]:
    """Few-shot VFL on the bundled digits: one-shot plus the parties' unaligned rows at the server."""
    server, parties = digits_example(100, seed=0)
    t0 = time.perf_counter()
    run = run_local(server, parties)
    secs, nbytes = time.perf_counter() - t0, run.transcript.total_bytes
    ctx.say(f"digits halves, 100 overlap rows: test accuracy {run.test_accuracy:.1%}, {nbytes:,} B, {secs:.1f} s; "
            f"the server also learns {sum(len(p.X_unaligned) for p in parties)} unaligned rows' representations")
    return {"test_accuracy": run.test_accuracy, "bytes": nbytes, "seconds": round(secs, 3)}
