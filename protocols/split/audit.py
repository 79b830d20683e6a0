"""The split-learning audit (attacks on what each role received) and its demo step."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import not_measured, probe_finding
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit
from vflcrypto.errors import AuditError
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.record import RecordedView
from vflcrypto.spec import DemoContext

from .._repvfl import PARTY, SERVER, digits_example, party_names, require_torch
from .._repvfl_audit import batch_gradient_finding, batch_rows, inversion_findings, label_attack_findings, needs_torch
from .messages import Setup
from .roles import SplitConfig, epoch_batches, run_local

__all__ = ["audit_run", "demo_step", "epoch_rows", "party_label_attacks", "view_attacks"]


def epoch_rows(tap: AuditTap, party: str, kind: str, batches: Sequence[np.ndarray], field: str, *,
               last_epoch: bool) -> np.ndarray | None:
    """One epoch of ``party``'s batch arrays ``field`` in overlap-row order: the gradients it received
    (``field="G"``) or the representations it sent (``"H"``); ``None`` if the epoch is incomplete."""
    msgs = tap.received(party, kind) if field == "G" else tap.received(None, kind, sender=party)
    msgs = msgs[-len(batches):] if last_epoch else msgs[: len(batches)]
    n = sum(len(b) for b in batches)
    return batch_rows(msgs, batches, n, field) if len(msgs) == len(batches) else None


def party_label_attacks(tap: AuditTap, party: str, y: np.ndarray, first: Sequence[np.ndarray],
                        last: Sequence[np.ndarray]) -> list[EmpiricalFinding]:
    """A party's published label attacks (the scorecard): norm and direction scoring on the gradient rows
    of the first epoch (``first``: its batches), model completion on its representations of the last."""
    return label_attack_findings(party, "split.gradient",
                                 epoch_rows(tap, party, "split.gradient", first, "G", last_epoch=False),
                                 "split.representation",
                                 epoch_rows(tap, party, "split.representation", last, "H", last_epoch=True), y)


def view_attacks(view: RecordedView, y: np.ndarray | None) -> list[EmpiricalFinding]:
    """The published attacks on one party's recorded view of a network run (``vflcrypto party ... train split
    --keep-messages``): a feature party's label attacks, from the setup, gradients and representations in its
    own messages alone; ``y`` (the true labels of its overlap rows, in their order) only scores them.

    The server's decoder needs the party's true columns to score and is not run on a recorded view.
    """
    kinds = ("split.gradient", "split.representation")
    if view.role != PARTY:
        return [not_measured(view.party, "attacks on a recorded view", kinds, None,
                             f"no published attack on a recorded {view.role} view of split learning (the feature "
                             "parties' label attacks run on a party's view)")]
    setups = view.tap.received(view.party, Setup)
    if len(setups) != 1 or y is None:
        why = "no labels to score against (--truth)" if y is None else f"{len(setups)} split.setup messages"
        return [not_measured(view.party, "label attacks on its recorded view", kinds, None, why)]
    s = setups[0]
    if len(y) != s.n_overlap:
        raise AuditError(f"{len(y)} labels for the {s.n_overlap} overlap rows of the recorded run")
    first = epoch_batches(s.n_overlap, s.batch_size, s.seed, 0)
    last = epoch_batches(s.n_overlap, s.batch_size, s.seed, s.epochs - 1)
    return party_label_attacks(view.tap, view.party, np.asarray(y), first, last)


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

    findings += [f for p in names for f in party_label_attacks(tap, p, y, first, last)]
    X_of = {p: np.asarray(tap.held(p, "features")[0]) for p in names}
    findings += inversion_findings(tap, names, [("split.representation", "features")], rows=lambda p, kind: (
        None if (H := epoch_rows(tap, p, kind, last, "H", last_epoch=True)) is None else (H, X_of[p])))
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
