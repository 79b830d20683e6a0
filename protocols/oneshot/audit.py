"""The one-shot VFL audit (attacks on what each role received) and its demo step."""

from __future__ import annotations

import time
from typing import Any

from vflcrypto.audit.ledger import AuditOutcome, audit_runs
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.spec import DemoContext

from .._repvfl import digits_example, party_names, require_torch
from .._repvfl_audit import d1_finding, inversion_findings, needs_torch, probe_findings, received_label_attacks
from .roles import OneShotConfig, run_local

__all__ = ["audit_run", "demo_step"]


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """One-shot VFL on the digits halves (100 overlap rows), both D1 variants, attacked per role.

    * each party: the label partition of the overlap rows from its D1 (k-means on the
      gradient rows with the C it received, or the cluster ids of the partition variant),
      scored by the ARI against the true labels;
    * the server: a linear probe from the U1 and U2 representations to each party's raw
      columns (held-out R^2);
    * the scorecard's published attacks (gradient variant): each party's norm and direction
      scoring on its D1 and passive model completion on the U2 it sent; the server's trained
      decoder on U1 and U2.

    No key is involved (``key_bits`` is unused): nothing here is encrypted, by design.
    """
    require_torch()
    server, parties = digits_example(100, seed=0)
    names, y = party_names(len(parties)), server.y_overlap
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
    runs = {"D1 = gradients": run.transcript, "D1 = partition": prun.transcript}
    report, sections = audit_runs(runs)
    metrics = {"gradient_kmeans_ari": min(f.value for f in grad), "partition_ari": min(f.value for f in part),
               "probe_r2_u1": max(f.value for f in probes if "representation from" in f.name),
               "probe_r2_u2": max(f.value for f in probes if "representation_update" in f.name),
               "test_accuracy": float(run.test_accuracy or 0.0)}
    return AuditOutcome("oneshot", report, (*grad, *part, *probes, *papers), metrics, sections=sections,
                        transcripts=tuple(runs.items()))


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
