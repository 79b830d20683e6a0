"""Attacks on what each role of a representation-VFL run received (split, oneshot, fewshot audits).

* a party runs k-means (K = the class count it was told, or the problem's C) on the
  gradient rows it received, or takes the cluster ids it received, and the partition is
  scored against the true overlap labels (adjusted Rand index; the seed's "same-class
  gradients point the same way");
* the server fits a linear probe from the representations it received to the sending
  party's raw columns (what the party holds: scored, never used by the probe);
* in few-shot client-return mode a party names its clusters with the class pseudo-labels
  it received, and the named overlap labels are scored;
* the published attacks of :mod:`vflcrypto.audit.literature` (the audit's scorecard):
  norm and direction scoring on the gradient rows a party received (Li et al., ICLR 2022),
  passive model completion on the representations it sent, with 4 known labels per class
  (Fu et al., USENIX Security 2022), and the server's trained decoder from each
  representation kind it received to the sender's raw columns, knowing half of the rows'
  raw values (He et al., ACSAC 2019).

Every attack reads the payloads from the run's :class:`~vflcrypto.runtime.channel.AuditTap`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vflcrypto.audit import literature
from vflcrypto.audit.attacks import accuracy_finding, not_measured, partition_finding, probe_finding
from vflcrypto.audit.ledger import EmpiricalFinding, Figure
from vflcrypto.errors import AuditError, InputDataError
from vflcrypto.ml.cluster import kmeans
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.record import RecordedView
from vflcrypto.spec import DemoContext

from ._repvfl import PARTY, SERVER, require_torch

__all__ = [
    "COMPLETION_LABELS",
    "batch_gradient_finding",
    "batch_rows",
    "d1_finding",
    "inversion_findings",
    "label_attack_findings",
    "naming_finding",
    "needs_torch",
    "probe_findings",
    "received_label_attacks",
    "view_attacks",
]

#: the labels per class the feature party is assumed to know for model completion (Fu et al. grant 40 for
#: CIFAR-10's 10 classes); direction scoring assumes one per class (Li et al.: one known example)
COMPLETION_LABELS = 4


def needs_torch(step: Callable[[DemoContext], dict[str, Any]]) -> Callable[[DemoContext], dict[str, Any]]:
    """A demo step that says it is skipped, instead of failing, without the ``deep`` extra."""

    @functools.wraps(step)
    def run(ctx: DemoContext) -> dict[str, Any]:
        try:
            require_torch()
        except InputDataError as exc:
            ctx.say(f"skipped: {exc}")
            return {"skipped": str(exc)}
        return step(ctx)

    return run


def d1_finding(tap: AuditTap, party: str, kind: str, y: np.ndarray) -> EmpiricalFinding:
    """The label partition a party reads from its one download (gradients via k-means, or cluster ids)."""
    (msg,) = tap.received(party, kind)
    if hasattr(msg, "G"):
        guess = kmeans(np.asarray(msg.G), int(msg.n_classes), seed=12345).labels
        how = f"k-means (K = C = {msg.n_classes}, the C it received) on the rows of the gradient it received"
    else:
        guess, how = np.asarray(msg.clusters), "the cluster ids it received"
    why = ("under the run's label defences (randomized-response labels and/or clipped, noised rows)" if ".dp_" in kind
           else "by design (D1 carries the partition, not the class names)")
    found = partition_finding(party, f"{kind}: label partition of the overlap rows", guess, y, attacks=(kind,),
                              protection=None, description=f"ARI of {how} against the true overlap labels; {why}")
    return dataclasses.replace(found, figure=Figure.contingency(
        f"{party}: the overlap rows' true classes against the groups it found in {kind}", y, guess))


def batch_gradient_finding(tap: AuditTap, party: str, kind: str, y: np.ndarray, batches: Sequence[np.ndarray],
                           n_classes: int, epoch: int = 0) -> EmpiricalFinding:
    """Split learning: k-means on each received batch gradient (K = C), pooled over the batches of ``epoch`` (the
    first by default; ``batches`` are that epoch's, every epoch has as many)."""
    msgs = tap.received(party, kind)[epoch * len(batches): (epoch + 1) * len(batches)]
    guess, truth, offset = [], [], 0
    for msg, rows in zip(msgs, batches, strict=False):
        G = np.asarray(msg.G)
        k = min(n_classes, len(G))
        guess.append(kmeans(G, k, seed=12345).labels + offset)  # clusters of different batches are distinct
        truth.append(y[rows])
        offset += k
    from vflcrypto.ml.metrics import adjusted_rand_index

    per_batch = [adjusted_rand_index(g, t) for g, t in zip(guess, truth, strict=True)]
    finding = partition_finding(party, f"{kind}: label partition of each batch", np.concatenate(guess),
                                np.concatenate(truth), attacks=(kind,), protection=None,
                                description=f"k-means (K = C) on each of the {len(msgs)} batch gradients of epoch "
                                            f"{epoch} "
                                            f"(mean per-batch ARI {np.mean(per_batch):.3f}); by design, "
                                            "repeated every round")
    first: Any = kmeans(np.asarray(msgs[0].G), min(n_classes, len(msgs[0].G)), seed=12345).labels if msgs else []
    return dataclasses.replace(finding, figure=Figure.contingency(
        f"{party}: the first batch's true classes against the k-means clusters of its gradient",
        y[batches[0]] if msgs else [], first))


def probe_findings(tap: AuditTap, parties: Sequence[str], kinds: Sequence[tuple[str, str]]) -> list[EmpiricalFinding]:
    """The server's linear probe from each received representation kind to the sender's raw columns.

    ``kinds`` lists (message kind, the held label of the sender's matching raw rows).
    """
    out = []
    for party in parties:
        for kind, held in kinds:
            name = f"{kind} from {party}: raw columns by a linear probe"
            msgs = tap.received(SERVER, kind, sender=party)
            if not msgs:
                out.append(not_measured(SERVER, name, (kind,), None, f"the server received no {kind} from {party}"))
                continue
            X = np.asarray(tap.held(party, held)[0])
            H = np.asarray(msgs[-1].H)
            if len(H) != len(X) or len(H) < 10:
                out.append(not_measured(SERVER, name, (kind,), None,
                                        f"{len(H)} representations for {len(X)} raw rows (a probe needs >= 10 "
                                        "matching rows)"))
                continue
            out.append(probe_finding(SERVER, name, H, X,
                                     attacks=(kind,), protection=None,
                                     description="held-out R^2 of a ridge regression from the representations "
                                                 f"{party} sent to its raw columns; by design (plaintext)"))
    return out


def naming_finding(tap: AuditTap, party: str, kind: str, y: np.ndarray) -> EmpiricalFinding:
    """Few-shot client return: the party names its overlap clusters with the class pseudo-labels it received.

    Its own local classifier assigns each unaligned row a cluster (held by the party);
    the returned pseudo-labels give some of those rows class names; each cluster takes
    the majority name, which names the party's temporary labels of the overlap rows.
    """
    msgs: list[Any] = tap.received(party, kind)
    if not msgs:
        return not_measured(party, f"{kind}: the overlap labels, named", (kind,), None, f"{party} received no {kind}")
    msg = msgs[0]
    clusters_u = np.asarray(tap.held(party, "unaligned_clusters")[0])
    pseudo_o = np.asarray(tap.held(party, "pseudo_labels")[0])
    rows, labels = np.asarray(msg.rows), np.asarray(msg.labels)
    names: dict[int, int] = {}
    for c in np.unique(clusters_u[rows]) if len(rows) else []:
        vals, counts = np.unique(labels[clusters_u[rows] == c], return_counts=True)
        names[int(c)] = int(vals[counts.argmax()])
    guess = np.asarray([names.get(int(c), -1) for c in pseudo_o])
    C = int(max(y.max(), labels.max(initial=0))) + 1
    return accuracy_finding(party, f"{kind}: the overlap labels, named", guess, y, 1.0 / C, attacks=(kind,),
                            protection=None,
                            description="its clusters of the overlap rows named by the majority pseudo-label of "
                                        "its unaligned rows in each cluster; declared: client return hands "
                                        "out class names; baseline 1/C")


# --------------------------------------------------------------------------- the published attacks (scorecard)


def batch_rows(msgs: Sequence[Any], batches: Sequence[np.ndarray], n: int, field: str) -> np.ndarray:
    """Split learning: the per-batch arrays ``field`` of ``msgs`` put back in overlap-row order (one epoch)."""
    parts = [np.asarray(getattr(m, field)) for m in msgs]
    out = np.full((n, parts[0].shape[1] if parts else 0), np.nan)
    for part, rows in zip(parts, batches, strict=True):
        out[rows] = part
    return out


def received_label_attacks(tap: AuditTap, parties: Sequence[str], protocol: str, y: np.ndarray,
                           kind: str | None = None) -> list[EmpiricalFinding]:
    """:func:`label_attack_findings` of each party on the first-round gradients it received (``kind``: by default
    ``<protocol>.gradient``; ``<protocol>.dp_gradient`` under a label defence) and the last representation update it
    sent (``<protocol>.representation_update``, or ``<protocol>.dp_representation_update`` under embedding noise)."""
    kind = kind or f"{protocol}.gradient"
    out: list[EmpiricalFinding] = []
    for p in parties:
        (d1,) = tap.received(p, kind)
        update = f"{protocol}.dp_representation_update"
        if not tap.received(None, update, sender=p):
            update = f"{protocol}.representation_update"
        u2 = tap.received(None, update, sender=p)
        out += label_attack_findings(p, kind, np.asarray(d1.G), update, np.asarray(u2[-1].H) if u2 else None, y)
    return out


def view_attacks(protocol: str) -> Callable[[RecordedView, np.ndarray | None], list[EmpiricalFinding]]:
    """The published attacks on a feature party's recorded view of a network run of ``protocol`` (one-shot,
    few-shot): :func:`received_label_attacks` on the messages it kept (``--keep-messages``: D1 as
    ``<protocol>.gradient``, or ``<protocol>.dp_gradient`` under a label defence); the labels of its overlap rows, in
    their order, only score them."""

    def attacks(view: RecordedView, y: np.ndarray | None) -> list[EmpiricalFinding]:
        if view.role != PARTY:
            return [not_measured(view.party, "attacks on a recorded view",
                                 (f"{protocol}.gradient", f"{protocol}.representation_update"), None,
                                 f"no published attack on a recorded {view.role} view of {protocol} (the feature "
                                 "parties' label attacks run on a party's view)")]
        dp = f"{protocol}.dp_gradient"
        kinds = (dp if view.tap.received(view.party, dp) else f"{protocol}.gradient",
                 f"{protocol}.representation_update")
        got = view.tap.received(view.party, kinds[0])
        if y is None or len(got) != 1:
            why = "no labels to score against (--truth)" if y is None else f"{len(got)} {kinds[0]} messages"
            return [not_measured(view.party, "label attacks on its recorded view", kinds, None, why)]
        if len(y) != len(got[0].G):
            raise AuditError(f"{len(y)} labels for the {len(got[0].G)} overlap rows of the recorded run")
        return received_label_attacks(view.tap, [view.party], protocol, np.asarray(y), kinds[0])

    return attacks


def label_attack_findings(party: str, gradient_kind: str, G: np.ndarray | None, own_kind: str, H: np.ndarray | None,
                          y: np.ndarray) -> list[EmpiricalFinding]:
    """The published label attacks of a feature party on the gradient rows it received (``G``, one row per overlap
    row) and on the representations it sent (``H``): norm and direction scoring (Li et al.), passive model
    completion with :data:`COMPLETION_LABELS` known labels per class (Fu et al.)."""
    names = (f"{gradient_kind}: norm scoring label inference", f"{gradient_kind}: direction scoring label inference",
             f"{own_kind}: passive model completion ({COMPLETION_LABELS} known labels per class)")
    out: list[EmpiricalFinding] = []
    if G is None or not np.isfinite(G).all():
        out += [not_measured(party, n, (gradient_kind,), None, f"{party} received no {gradient_kind} row for every "
                                                                 "overlap row") for n in names[:2]]
    else:
        out.append(literature.norm_scoring(party, names[0], G, y, attacks=(gradient_kind,)))
        out.append(literature.direction_scoring(party, names[1], G, y, literature.known_labels(y, 1),
                                                attacks=(gradient_kind,)))
    if H is None or not np.isfinite(H).all():
        out.append(not_measured(party, names[2], (gradient_kind, own_kind), None,
                                f"{party} sent no {own_kind} row for every overlap row"))
    else:
        out.append(literature.model_completion(party, names[2], H, y, literature.known_labels(y, COMPLETION_LABELS),
                                               attacks=(gradient_kind, own_kind)))
    return out


def inversion_findings(tap: AuditTap, parties: Sequence[str], kinds: Sequence[tuple[str, str]],
                       rows: Callable[[str, str], tuple[np.ndarray, np.ndarray] | None] | None = None,
                       ) -> list[EmpiricalFinding]:
    """The server's trained decoder (He et al.) from each representation kind it received to the sender's raw
    columns, knowing half of the rows' raw values; ``kinds`` lists (kind, the held name of the sender's raw rows),
    ``rows`` (split learning) maps (party, kind) to the (H, X) pairs of one epoch."""
    out = []
    for party in parties:
        for kind, held in kinds:
            name = f"{kind} from {party}: raw columns by a trained decoder"
            pair = rows(party, kind) if rows is not None else None
            if pair is None:
                msgs = tap.received(SERVER, kind, sender=party)
                pair = (np.asarray(msgs[-1].H), np.asarray(tap.held(party, held)[0])) if msgs else None
            if pair is None or len(pair[0]) != len(pair[1]) or len(pair[0]) < 10:
                out.append(not_measured(SERVER, name, (kind,), None, f"the server received no {kind} from {party} "
                                                                     "matching >= 10 raw rows"))
                continue
            out.append(literature.representation_inversion(SERVER, name, pair[0], pair[1], attacks=(kind,)))
    return out
