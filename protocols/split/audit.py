"""The split-learning audit (attacks on what each role received) and its demo step."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import probe_finding
from vflcrypto.audit.ledger import AuditOutcome, audit
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.spec import DemoContext

from .._repvfl import SERVER, digits_example, party_names, require_torch
from .._repvfl_audit import batch_gradient_finding, batch_rows, inversion_findings, label_attack_findings, needs_torch
from .roles import SplitConfig, epoch_batches, run_local

__all__ = ["audit_run", "demo_step"]


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """Split learning on the digits halves (100 overlap rows, 20 epochs), attacked per role.

    * each party: k-means (K = C) on every batch gradient of the first epoch, scored by
      the ARI against the batch rows' true labels (the gradient packet carries the label
      partition of every batch, every round);
    * the server: a linear probe from the representations of the last epoch's batches to
      each party's raw columns (held-out R^2);
    * the scorecard's published attacks: each party's norm and direction scoring on the
      first epoch's gradient rows and passive model completion on the last epoch's
      representations it sent; the server's trained decoder on the last epoch's
      representations (:func:`~vflcrypto.protocols._repvfl_audit.label_attack_findings`,
      :func:`~vflcrypto.protocols._repvfl_audit.inversion_findings`).

    No key is involved (``key_bits`` is unused): nothing here is encrypted, by design.
    """
    require_torch()
    server, parties = digits_example(100, seed=0)
    cfg = SplitConfig(epochs=20)
    names, y, n = party_names(len(parties)), server.y_overlap, len(server.y_overlap)
    tap = AuditTap()
    run = run_local(server, parties, config=cfg, tap=tap)
    first = epoch_batches(n, cfg.batch_size, cfg.seed, 0)
    last = epoch_batches(n, cfg.batch_size, cfg.seed, cfg.epochs - 1)
    findings = [batch_gradient_finding(tap, p, "split.gradient", y, first, server.n_classes) for p in names]
    for p in names:
        msgs = tap.received(SERVER, "split.representation", sender=p)[-len(last):]
        H = np.concatenate([np.asarray(m.H) for m in msgs])
        X = np.asarray(tap.held(p, "features")[0])[np.concatenate(last)]
        findings.append(probe_finding(SERVER, f"split.representation from {p}: raw columns by a linear probe", H, X,
                                      attacks=("split.representation",), protection=None,
                                      description="held-out R^2 of a ridge regression from the last epoch's "
                                                  f"representations of {p} to its raw columns; by design"))
    metrics = {"batch_gradient_kmeans_ari": min(f.value for f in findings[: len(names)]),
               "probe_r2": max(f.value for f in findings[len(names):]),
               "test_accuracy": float(run.test_accuracy or 0.0)}

    def epoch_rows(p: str, kind: str, batches: list[np.ndarray], field: str, *, last_epoch: bool) -> np.ndarray | None:
        msgs = tap.received(p, kind) if field == "G" else tap.received(SERVER, kind, sender=p)
        msgs = msgs[-len(batches):] if last_epoch else msgs[: len(batches)]
        return batch_rows(msgs, batches, n, field) if len(msgs) == len(batches) else None

    for p in names:
        findings += label_attack_findings(p, "split.gradient", epoch_rows(p, "split.gradient", first, "G",
                                                                          last_epoch=False),
                                          "split.representation", epoch_rows(p, "split.representation", last, "H",
                                                                             last_epoch=True), y)
    X_of = {p: np.asarray(tap.held(p, "features")[0]) for p in names}
    findings += inversion_findings(tap, names, [("split.representation", "features")], rows=lambda p, kind: (
        None if (H := epoch_rows(p, kind, last, "H", last_epoch=True)) is None else (H, X_of[p])))
    return AuditOutcome("split", audit(run.transcript), tuple(findings), metrics,
                        transcripts=(("split learning", run.transcript),))


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
