"""The SecureBoost audit (attacks on the tap), the demo step and the example data."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import (
    accuracy_finding,
    adjacent_order_finding,
    equal_ciphertext_classes,
    not_measured,
    unrandomized_paillier,
)
from vflcrypto.audit.checks import EXACT, Check
from vflcrypto.audit.defences import noise_floor_finding
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, Figure, audit, audit_runs
from vflcrypto.audit.literature import known_labels
from vflcrypto.audit.literature_tabular import first_split, id2graph
from vflcrypto.data.tables import PartyTable
from vflcrypto.errors import InputDataError
from vflcrypto.he.ou import OUVector
from vflcrypto.runtime.channel import AuditTap, Transcript
from vflcrypto.runtime.declarations import Protection

from .defence import residuals
from .histograms import decode_histograms
from .local import run_local
from .messages import (
    ACTIVE,
    DpLevelRequest,
    EncryptedGradients,
    EncryptedHistograms,
    LevelRequest,
    PlainGradients,
    PlainHistograms,
)
from .parts import gradients_by_tree
from .predict import predict_local
from .serve import STOP, serve_local
from .tree import BoostParams, check_labels, unpack_candidates

__all__ = ["CHECKS", "DEFENDED_EPSILON", "DP_CHECK", "audit_run", "demo_step", "dp_findings", "example",
           "goss_findings", "literature_findings", "received_instance_spaces"]

#: the audit's run under label DP (``--dp-epsilon``): its budget
DEFENDED_EPSILON = 1.0
DP_KIND = "secureboost.dp_level"
DP_CHECK = f"{DP_KIND}: G sums noised at the announced scale before the split choice"

#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (
    Check("label recovery from secureboost.gradients", ("secureboost.gradients",), Protection.CIPHERTEXT,
          "gradients readable without the key (labels by their sign)", 0.9),
    Check("label recovery from secureboost.gradients (OU): equal ciphertexts", ("secureboost.gradients",),
          Protection.CIPHERTEXT, "deterministic encryption (equal gradients give equal ciphertexts)", 0.9),
    *(Check(f"{kind}: candidate order", (kind,), Protection.SHUFFLED,
            "candidates sent in feature and bin order (n_L increases along each feature)", 0.8)
      for kind in ("secureboost.histograms", "secureboost.plain_histograms")),
    *(Check(f"{kind}: rows singled out by a candidate", (kind,), Protection.AGGREGATE,
            "a candidate that sums a single row (its gradient in the clear)", EXACT)
      for kind in ("secureboost.histograms", "secureboost.plain_histograms")),
    Check(DP_CHECK, (DP_KIND,), Protection.DP,
          "the noise on the G sums dropped or scaled down (less than half the announced variance)", 0.5),
)


def example(n: int = 600, seed: int = 7) -> tuple[np.ndarray, np.ndarray, tuple[str, ...],
                                                     np.ndarray, tuple[str, ...]]:
    """Deterministic vertical split whose label depends on both parties' features."""
    rng = np.random.default_rng(seed)  # not secret: example data
    Xa = rng.normal(size=(n, 3))
    Xp = rng.normal(size=(n, 4))
    z = 1.2 * Xa[:, 0] - 0.8 * Xa[:, 1] + 1.5 * Xp[:, 0] + np.where(Xp[:, 2] > 0.3, 1.0, -0.5)
    y = (z + rng.normal(scale=0.7, size=n) > 0.2).astype(np.float64)
    return Xa, y, ("a0", "a1", "a2"), Xp, ("p0", "p1", "p2", "p3")


def _join_by_id(a: PartyTable, p: PartyTable) -> tuple[PartyTable, PartyTable]:
    """In-process ID join (demo fallback when the PSI step has not run)."""
    pos = {k: i for i, k in enumerate(p.ids)}
    rows_a = [i for i, k in enumerate(a.ids) if k in pos]
    if not rows_a:
        raise InputDataError("the example files share no IDs")
    return a.take(rows_a), p.take([pos[a.ids[i]] for i in rows_a])


def _demo_data(ctx: Any) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], np.ndarray,
                                  tuple[str, ...], str]:
    from vflcrypto.data.tables import read_party_csv

    aligned = getattr(ctx, "state", {}).get("aligned") if ctx is not None else None
    try:
        if aligned and "bank" in aligned and "shop" in aligned:
            a = read_party_csv(aligned["bank"], "id", label="defaulted")
            p = read_party_csv(aligned["shop"], "id")
            if a.ids != p.ids:
                a, p = _join_by_id(a, p)
            source = "PSI-aligned bank/shop files"
        else:
            import importlib.resources

            data = importlib.resources.files("vflcrypto") / "data"
            with importlib.resources.as_file(data / "bank.csv") as bank, \
                    importlib.resources.as_file(data / "shop.csv") as shop:
                a, p = _join_by_id(read_party_csv(bank, "id", label="defaulted"),
                                   read_party_csv(shop, "id"))
            source = "bundled bank/shop CSVs joined by ID in-process"
        assert a.label is not None
        check_labels("binary", a.label)
        return a.X, a.label, a.columns, p.X, p.columns, source
    except (OSError, InputDataError, FileNotFoundError):
        Xa, y, ca, Xp, cp = example()
        return Xa, y, ca, Xp, cp, "deterministic synthetic split"


def demo_step(ctx: Any) -> dict[str, Any]:
    """SecureBoost on the demo data: a few depth-3 trees, encrypted, then joint prediction."""
    from vflcrypto.ml.metrics import roc_auc

    Xa, y, ca, Xp, cp, source = _demo_data(ctx)
    trees = 2 if ctx.quick else 3
    params = BoostParams(n_trees=trees, max_depth=3, learning_rate=0.3, max_bin=16)
    run = run_local(Xa, y, [Xp], params=params, key_bits=ctx.key_bits,
                    allow_insecure=ctx.allow_insecure, active_columns=ca, passive_columns=[cp])
    auc = roc_auc(y, run.active.train_predictions())
    n_passive = int(np.sum(run.active.model.kind == 2))
    ctx.say(f"data: {source}; {len(y)} rows, active {len(ca)} features + label, passive {len(cp)}")
    ctx.say(f"{trees} trees of depth 3 under {ctx.key_bits}-bit Paillier in {run.seconds:.1f} s; "
            f"train AUC {auc:.3f}; {n_passive} splits on passive features")
    ctx.say(f"{run.transcript.total_bytes:,} bytes on the wire")
    ctx.say(audit(run.transcript).to_text())
    return {"auc": round(auc, 4), "trees": trees, "rows": len(y),
            "passive_splits": n_passive, "bytes_sent": run.transcript.total_bytes}


def label_inference_attack(partition: np.ndarray, y: np.ndarray, known_fraction: float = 0.05,
                           seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A passive party's attack: label each cell of an instance-space partition it saw by the
    majority of a few labels it knows; returns (guesses, mask of the rows it did not know)."""
    rng = np.random.default_rng(seed)  # which labels the attacker knows: a simulation, not a secret
    n = len(y)
    known = np.zeros(n, dtype=bool)
    known[rng.choice(n, size=max(10, int(known_fraction * n)), replace=False)] = True
    guess = np.full(n, float(np.mean(y[known]) >= 0.5))
    for cell in np.unique(partition):
        members = partition == cell
        k = members & known
        if k.any():
            guess[members] = float(np.mean(y[k]) >= 0.5)
    return guess, ~known


def _ou_gradient_label_finding(tap: AuditTap, party: str, y: np.ndarray) -> EmpiricalFinding:
    """A passive party groups the first tree's OU ciphertexts by value and labels each group by the majority
    of the 5 % of labels it is assumed to know.

    In the first tree every row has g = p0 - y and the same h, so a deterministic encryption would split the
    rows into exactly the two label classes; fresh randomness leaves only singletons (then: the majority class).
    """
    gh = gradients_by_tree(tap.received(party, EncryptedGradients))[0].gh
    guess, unknown = label_inference_attack(equal_ciphertext_classes(gh.ciphertexts()), y)
    kind = "secureboost.gradients"
    return accuracy_finding(
        party, f"label recovery from {kind} (OU): equal ciphertexts", guess[unknown], y[unknown],
        float(max(np.mean(y[unknown]), 1 - np.mean(y[unknown]))), attacks=(kind,), protection=Protection.CIPHERTEXT,
        description="groups the rows whose OU ciphertexts are equal and labels each group by the majority of the "
                    "5% labels it knows; baseline = majority-class rate")


def _gradient_label_finding(tap: AuditTap, party: str, y: np.ndarray) -> EmpiricalFinding:
    """A passive party guesses labels from the first tree's gradients (g = p - y < 0 iff y = 1)."""
    received = gradients_by_tree(tap.received(party, EncryptedGradients))
    if received and isinstance(received[0].gh, OUVector):
        return _ou_gradient_label_finding(tap, party, y)
    plain = tap.received(party, PlainGradients)
    if plain:
        g = np.asarray(plain[0].g, dtype=np.float64)[:, 0]
        kind, protection = "secureboost.plain_gradients", None
    else:
        gh = gradients_by_tree(tap.received(party, EncryptedGradients))[0].gh
        assert gh.packing is not None
        decoded = unrandomized_paillier(int(gh.public_key.n), gh.ciphertexts())
        g = np.full(len(decoded), np.nan)
        ok = [i for i, v in enumerate(decoded) if v is not None]
        if ok:
            g[ok] = unpack_candidates([v for v in decoded if v is not None], gh.packing)[0][:, 0]
        kind, protection = "secureboost.gradients", Protection.CIPHERTEXT
    majority = float(np.mean(y) >= 0.5)
    guess = np.where(np.isnan(g), majority, (g < 0).astype(np.float64))
    return accuracy_finding(
        party, f"label recovery from {kind}", guess, y, float(max(np.mean(y), 1 - np.mean(y))),
        attacks=(kind,), protection=protection,
        description=f"guesses y = [g < 0] where it can read g in its first {kind} (plaintext, or a "
                    "ciphertext without randomness) and the majority class elsewhere")


def _smaller_side_histogram(blocks: list[np.ndarray], levels: list[Any], hists: list[Any], party: str,
                            kind: str) -> Figure:
    """How many rows the smaller side of each candidate split holds: the tiny bins the active party saw."""
    sizes = [len(rows) for rows_of, hist in zip(levels, hists, strict=True)
             for rows, k in zip(rows_of, np.asarray(hist.counts).tolist(), strict=True) for _ in range(k)]
    small = np.minimum(np.concatenate(blocks), np.asarray(sizes) - np.concatenate(blocks)) if blocks else np.zeros(0)
    edges = [0, 1, 2, 3, 5, 10, 20, 50, 10**9]
    counts = [int(np.count_nonzero((small >= lo) & (small < hi))) for lo, hi in itertools.pairwise(edges)]
    bins = ["0", "1", "2", "3-4", "5-9", "10-19", "20-49", "50+"]
    return Figure.histogram(f"rows on the smaller side of each candidate split {party} sent ({kind})", counts, bins)


def _histogram_findings(tap: AuditTap, party: str, kind: str) -> list[EmpiricalFinding]:
    """The active party decodes the histogram messages it received with its own key and attacks them.

    * order: are the anonymous candidates of a node still in feature and bin order? (Their
      n_L then increase along runs: a reader would regroup features and rank bins.)
    * aggregation: does a candidate single out one row (n_L or n_node - n_L = 1) whose
      gradient is unique in the node? Then the active party learns that row's extreme rank
      in an unknown passive feature within the node.
    """
    cls = PlainHistograms if kind == "secureboost.plain_histograms" else EncryptedHistograms
    hists = tap.received(ACTIVE, cls, sender=party)
    held_sk = tap.held(ACTIVE, "secret_key") if cls is EncryptedHistograms else [None]
    specs, grads = tap.held(ACTIVE, "packing"), tap.held(ACTIVE, "gradients")
    levels = tap.held(ACTIVE, "node_rows")  # per (tree, depth), in the order the histograms arrive
    blocks: list[np.ndarray] = []
    candidates = singled = 0
    for hist, rows_of in zip(hists, levels, strict=True):
        GL, _HL, NL = decode_histograms(hist, held_sk[0], specs[hist.tree], party)
        g = grads[hist.tree]
        start = 0
        for rows, k in zip(rows_of, np.asarray(hist.counts).tolist(), strict=True):
            gl, nl = GL[start : start + k], NL[start : start + k]
            start += k
            blocks.append(nl)
            candidates += k
            g_node = g[rows]  # (rows, outputs)
            total = g_node.sum(axis=0)
            for a, b in zip(gl, nl.tolist(), strict=True):
                target = a if b == 1 else (total - a if len(rows) - b == 1 else None)
                singled += target is not None and int(np.count_nonzero((g_node == target).all(axis=1))) == 1
    return [
        adjacent_order_finding(
            ACTIVE, f"{kind}: candidate order", kind, blocks,
            f"share of neighbouring candidates (of {len(blocks)} node lists from {party}) whose n_L "
            "increases; baseline = the same for random orders of the same lists"),
        EmpiricalFinding(
            ACTIVE, f"{kind}: rows singled out by a candidate", singled / max(1, candidates), 0.0,
            f"{singled} of {candidates} decoded candidates from {party} sum one row whose gradient is "
            "unique in its node (that row's rank in an unknown passive feature is revealed); "
            "declared: tiny nodes or bins allow this",
            attacks=(kind,), protection=Protection.AGGREGATE, flagged=singled > 0, samples=candidates,
            detects="any one row singled out", figure=_smaller_side_histogram(blocks, levels, hists, party, kind)),
    ]


def goss_findings(tap: AuditTap, party: str, y: np.ndarray) -> list[EmpiricalFinding]:
    """What a passive party learns from the GOSS samples it received (``secureboost.gradients``'s ``sample``).

    * which rows have the largest ``|g|``: it guesses "top" for every sampled row (the sample holds
      every top row and only ``other_rate`` of the rest), scored against the active party's top sets;
    * labels: the first tree's sample splits the rows in two cells, each labelled by the majority
      of the 5 % of labels it is assumed to know (:func:`label_inference_attack`). For the logistic
      loss the top ``|g| = |p - y|`` rows are mostly one class, and in the first tree exactly: every
      row of the class farther from the base rate has the same, larger ``|g|``. (Later trees' samples
      add little: the membership patterns over three trees scored lower on the example data.)
    Both are leaks by design of sampling on gradients that the passive parties must route.
    """
    kind = "secureboost.gradients"
    received = gradients_by_tree(tap.received(party, EncryptedGradients)) or tap.received(party, PlainGradients)
    tops = tap.held(ACTIVE, "goss_top")
    n = len(y)
    if not received or not tops:
        return [EmpiricalFinding(party, name, 0.0, None, "no GOSS run in this audit", attacks=(kind,), measured=False)
                for name in ("rows with the largest |g| from the GOSS samples",
                             "label inference from the GOSS samples")]
    member = np.stack([np.unpackbits(np.asarray(m.sample), count=n).astype(bool) for m in received])
    truth = np.zeros_like(member)
    for t, top in enumerate(tops[: len(member)]):
        truth[t, top] = True
    share = float(truth.mean())
    guess, unknown = label_inference_attack(member[0].astype(np.int64), y)
    return [
        accuracy_finding(
            party, "rows with the largest |g| from the GOSS samples", member.ravel(), truth.ravel(), 1 - share,
            attacks=(kind,), protection=None,
            description=f"guesses that every row in a tree's GOSS sample is one of its top-|g| rows, over "
                        f"{len(member)} trees; baseline = guessing none ({share:.0%} of the rows are top rows)"),
        accuracy_finding(
            party, "label inference from the GOSS samples", guess[unknown], y[unknown],
            float(max(np.mean(y[unknown]), 1 - np.mean(y[unknown]))), attacks=(kind,), protection=None,
            description="majority vote of 5% known labels in and out of the first tree's GOSS sample; "
                        "baseline = majority-class rate"),
    ]


def received_instance_spaces(tap: AuditTap, party: str) -> tuple[list[np.ndarray], np.ndarray | None]:
    """The instance spaces ``party`` received in ``secureboost.level`` (or ``secureboost.dp_level``) messages, per
    tree and as its first split.

    Returns, per tree it received an instance space of, the deepest node each row was seen in
    (one id per (depth, node); -1 if never), and the partition after the root split of the first
    tree it saw split (depth 1; None without one: the first tree when no round is grown on the
    active party's features alone). Reads only the level requests the party received: not its
    own split responses.
    """
    trees: dict[int, np.ndarray] = {}
    roots: dict[int, np.ndarray] = {}
    for req in [*tap.received(party, LevelRequest), *tap.received(party, DpLevelRequest)]:
        node = np.asarray(req.node_of_row, np.int64)
        if req.done or not len(node):
            continue
        cell = trees.setdefault(int(req.tree), np.full(len(node), -1, np.int64))
        seen = node >= 0
        cell[seen] = int(req.depth) * (len(node) + 1) + node[seen]
        if int(req.depth) == 1:
            roots[int(req.tree)] = node.copy()
    return [trees[t] for t in sorted(trees)], roots[min(roots)] if roots else None


def literature_findings(tap: AuditTap, party: str, y: np.ndarray, *, per_class: int = 15) -> list[EmpiricalFinding]:
    """The scorecard's published label attacks by a passive party on the instance spaces it received:
    ID2Graph over every tree and the first tree's root split (Takahashi et al. 2023), each with
    ``per_class`` labels per class it is assumed to know (5 % of the example's 600 rows)."""
    spaces, root = received_instance_spaces(tap, party)
    kinds = ("secureboost.dp_level",) if tap.received(party, DpLevelRequest) else ("secureboost.level",)
    labels = np.asarray(y).astype(np.int64)
    known = known_labels(labels, per_class)
    out = []
    name = "label inference from every tree's instance spaces (ID2Graph)"
    out.append(id2graph(party, name, spaces, labels, known, attacks=kinds) if spaces else EmpiricalFinding(
        party, name, 0.0, None, "no secureboost.level message received", attacks=kinds, measured=False))
    name = "label inference from the first tree's root split"
    out.append(first_split(party, name, root, labels, known, attacks=kinds) if root is not None else EmpiricalFinding(
        party, name, 0.0, None, "the first tree has no second level (depth 1)", attacks=kinds, measured=False))
    return out


def dp_findings(tap: AuditTap) -> list[EmpiricalFinding]:
    """The check of ``--dp-epsilon`` on a defended run: every release's noise (released minus true sums, which the
    active party holds for this audit only, over the announced std: :func:`.defence.residuals`) has at least the
    announced variance (chi-square lower tail, :func:`~vflcrypto.audit.defences.noise_floor_finding`)."""
    records = [*tap.held(ACTIVE, "dp_release"), *tap.held(ACTIVE, "dp_leaves")]
    if not records:
        return [not_measured(ACTIVE, DP_CHECK, (DP_KIND,), Protection.DP, "no release under --dp-epsilon")]
    z = [residuals(r) for r in records]
    z += [np.asarray([(b["noised"] - b["true"]) / b["std"]]) for b in tap.held(ACTIVE, "dp_base")]
    found = noise_floor_finding(ACTIVE, DP_CHECK, z, 1.0, attacks=(DP_KIND,))
    k = int(sum(len(r) for r in z))
    return [dataclasses.replace(found, description=(
        f"the noise of the {len(records)} node and leaf releases and the base score ({k} independent draws), "
        f"released minus true G sums over the announced std: mean square {1 - found.value:.4g} (1 when the noise "
        "is as announced, 0 without noise); the active party's true sums are the audit's ground truth"))]


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """Train encrypted (Paillier, and Okamoto-Uchiyama) and in plaintext mode on the synthetic split and attack
    what each role received.

    * passive: labels from the gradients it received (ciphertexts; plaintext by design in
      the debug mode) and from the instance space (the partition it saw in tree 1, plus 5 %
      of labels it is assumed to know: by design); the scorecard's published attacks on the
      instance spaces of every tree (ID2Graph) and the first tree's root split
      (:func:`literature_findings`);
    * active: decodes the passive candidates it received with its own key and tests their
      order (shuffled?) and whether single candidates isolate single rows;
    * passive, in a GOSS run: the top-``|g|`` rows and the labels from the samples it received
      (:func:`goss_findings`, by design);
    * the defences: a run under ``--dp-epsilon 1`` (encrypted), whose noise is checked against the true
      sums (:func:`dp_findings`), and a plaintext run with the first tree on the active party's features
      alone; the published attacks on both are in the metrics. What the defences do at several budgets is
      the frontier (:func:`.frontier.frontier`);
    * the prediction service (:mod:`.serve`) on two batches and a request with an ID the passive party lacks:
      its messages (the requested IDs, the missing positions, then the batch prediction's) in the report.
    """
    Xa, y, ca, Xp, cp = example()
    params = BoostParams(n_trees=3, max_depth=3, max_bin=16)
    tap, plain_tap = AuditTap(), AuditTap()
    run = run_local(Xa, y, [Xp], params=params, key_bits=key_bits, allow_insecure=allow_insecure,
                    active_columns=ca, passive_columns=[cp], tap=tap)
    predict_local(run.active.model, Xa, [(run.passive["passive-0"].model, Xp)], transcript=run.transcript)
    served = Transcript()  # the prediction service: two batches, an ID the passive party lacks, the stop
    ids = [f"r{i}" for i in range(len(y))]
    serve_local((run.active.model, ids, Xa), [(run.passive["passive-0"].model, ids[:-1], Xp[:-1])],
                [ids[0], " ".join(ids[1:100]), ids[-1], STOP], transcript=served)
    plain = run_local(Xa, y, [Xp], params=params, plaintext=True, tap=plain_tap)
    ou_tap = AuditTap()
    ou_run = run_local(Xa, y, [Xp], params=BoostParams(n_trees=1, max_depth=3, max_bin=16), scheme="ou",
                       key_bits=max(key_bits, 768), allow_insecure=allow_insecure, tap=ou_tap)
    goss_tap = AuditTap()
    goss = run_local(Xa, y, [Xp], params=BoostParams(n_trees=3, max_depth=2, max_bin=16, top_rate=0.2, other_rate=0.1),
                     key_bits=key_bits, allow_insecure=allow_insecure, tap=goss_tap)
    dp_tap, alone_tap = AuditTap(), AuditTap()
    dp = run_local(Xa, y, [Xp], params=BoostParams(n_trees=2, max_depth=3, max_bin=16, dp_epsilon=DEFENDED_EPSILON),
                   key_bits=key_bits, allow_insecure=allow_insecure, tap=dp_tap)
    alone = run_local(Xa, y, [Xp], params=dataclasses.replace(params, first_tree_active_only=True), plaintext=True,
                      tap=alone_tap)
    metrics: dict[str, float] = {}
    for label, t in (("undefended", tap), ("dp_epsilon_1", dp_tap), ("first_tree_active_only", alone_tap)):
        id2g, first = literature_findings(t, "passive-0", y)
        metrics[f"{label}_id2graph_accuracy"], metrics[f"{label}_first_split_auc"] = id2g.value, first.value
    metrics["dp_epsilon_1_epsilon"] = dp.active.model.privacy["hist-gauss"]["epsilon"]
    guess, unknown = label_inference_attack(tap.held("passive-0", "instance_partition")[0], y)
    findings = [
        accuracy_finding(
            "passive-0", "label inference from tree-1 instance sets", guess[unknown], y[unknown],
            float(max(np.mean(y[unknown]), 1 - np.mean(y[unknown]))),
            attacks=("secureboost.level", "secureboost.split_request"), protection=None,
            description="majority vote of 5% known labels per cell of the finest partition the passive "
                        "party saw in the first tree (instance space + its own left sets); baseline = "
                        "majority-class rate"),
        _gradient_label_finding(tap, "passive-0", y),
        _gradient_label_finding(ou_tap, "passive-0", y),
        _gradient_label_finding(plain_tap, "passive-0", y),
        *_histogram_findings(tap, "passive-0", "secureboost.histograms"),
        *_histogram_findings(plain_tap, "passive-0", "secureboost.plain_histograms"),
        *literature_findings(tap, "passive-0", y),
        *goss_findings(goss_tap, "passive-0", y),
        *dp_findings(dp_tap),
    ]
    runs = {"encrypted (Paillier)": run.transcript, "encrypted (OU)": ou_run.transcript,
            "plaintext (debug/parity)": plain.transcript, "encrypted, GOSS (top 20 %, other 10 %)": goss.transcript,
            f"encrypted, label DP (--dp-epsilon {DEFENDED_EPSILON:g}, 2 trees)": dp.transcript,
            "plaintext, first tree on the active party's features alone": alone.transcript,
            "prediction service (party ... serve secureboost: 2 batches, an ID the passive party lacks)": served}
    report, sections = audit_runs(runs)
    return AuditOutcome("secureboost", report, tuple(findings), metrics, sections=sections,
                        transcripts=tuple(runs.items()))
