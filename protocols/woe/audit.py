"""The WOE/IV audit (attacks on what each party received) and its demo step."""

from __future__ import annotations

from typing import Any

import numpy as np

from vflcrypto.audit.attacks import (
    accuracy_finding,
    adjacent_order_finding,
    strip_known_paillier,
    unrandomized_finding,
    unrandomized_paillier,
)
from vflcrypto.audit.checks import EXACT, Check, unrandomized_check
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit_runs
from vflcrypto.audit.literature import TAKAHASHI_2023, WENG_2020
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection

from .math import COUNT_BITS, WoeParams, plain_counts
from .messages import ACTIVE, PASSIVE, EncryptedCounts, EncryptedLabels
from .roles import WoeRun, run_local

__all__ = ["BIN_ORDER", "CHECKS", "FEATURE_ORDER", "LABELS_READ", "NOT_RERANDOMIZED", "SMALL_BINS", "audit_run",
           "demo_step", "example"]

LABELS_READ = "woe.labels: ciphertexts read without the key"
SMALL_BINS = "bins below the minimum bin size among the passive party's counts"
BIN_ORDER = "order of the passive party's bins within each feature"
FEATURE_ORDER = "order of the passive party's features"
NOT_RERANDOMIZED = "bin sums that are products of the active party's own label ciphertexts"

#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (
    unrandomized_check("woe.labels"),
    Check(SMALL_BINS, ("woe.counts",), Protection.AGGREGATE,
          "a bin smaller than the minimum bin size (a few customers' label sum)", EXACT),
    Check(NOT_RERANDOMIZED, ("woe.counts",), Protection.AGGREGATE,
          "bin sums sent without re-randomization (the active party tests guesses of bin membership)", EXACT),
    Check(BIN_ORDER, ("woe.counts",), Protection.SHUFFLED,
          "bins sent in edge order (share of increasing neighbours near 1)", 0.9),
    Check(FEATURE_ORDER, ("woe.counts",), Protection.SHUFFLED,
          "features sent in the party's column order (every neighbour increasing)", 1.0),
)


def example(n: int = 800, seed: int = 11) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], np.ndarray,
                                                   tuple[str, ...]]:
    """Public synthetic credit-style data: ``(y, X_active, active columns, X_passive, passive columns)``.

    The active party (a bank) holds income and age and the default label; the passive
    party (a shop) holds spending, visits, returns, a loyalty tier, two noise columns and
    a rare count (chargebacks) whose unmerged bins can hold a single customer.
    """
    rng = np.random.default_rng(seed)
    income, age = rng.lognormal(8, 0.5, n), rng.integers(18, 80, n).astype(float)
    spend, visits = rng.gamma(2.0, 50.0, n), rng.poisson(6, n).astype(float)
    returns, tier = rng.poisson(1.0, n).astype(float), rng.integers(0, 4, n).astype(float)
    noise_a, noise_b = rng.standard_normal(n), rng.uniform(size=n)
    chargebacks = (rng.geometric(0.8, n) - 1).astype(float)  # rare high counts: a value may be one customer's
    logit = -1.0 - 0.6 * (np.log(income) - 8) / 0.5 + 0.01 * (45 - age) - 0.008 * (spend - 100) \
        + 0.35 * (returns - 1) - 0.3 * (tier - 1.5)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return (y, np.column_stack([income, age]), ("income", "age"),
            np.column_stack([spend, visits, returns, tier, noise_a, noise_b, chargebacks]),
            ("spend", "visits", "returns", "tier", "noise_a", "noise_b", "chargebacks"))


def demo_step(ctx: Any) -> dict[str, Any]:
    """WOE/IV of both parties' features against the bank's labels; the selected features."""
    y, Xa, ca, Xp, cp = example(400 if ctx.quick else 800)
    run = run_local(y, Xa, [Xp], key_bits=ctx.key_bits, allow_insecure=ctx.allow_insecure,
                    active_columns=ca, passive_columns=[cp])
    for f in run.active.features:
        ctx.say(f"  {f.party:>10} {f.name:<8} IV {f.iv:6.3f}  {'selected' if f.selected else ''}")
    ctx.say(f"passive-0 learns only which of its columns were selected: {run.passive['passive-0'].selected}")
    ctx.say(f"{run.transcript.total_bytes:,} bytes, {run.seconds:.2f} s")
    return {"features": len(run.active.features), "selected": len(run.active.selected()),
            "bytes": run.transcript.total_bytes}


def _small_bin_finding(tap: AuditTap, sk: Any, min_size: int) -> EmpiricalFinding:
    """Bins whose decrypted counts describe fewer rows than the agreed minimum bin size."""
    msgs = tap.received(ACTIVE, EncryptedCounts)
    vals = [v for m in msgs for v in sk.decrypt(m.counts)]
    sizes = np.asarray([(v >> COUNT_BITS) + (v & ((1 << COUNT_BITS) - 1)) for v in vals])
    small = int(np.sum(sizes < min_size))
    return EmpiricalFinding(
        ACTIVE, SMALL_BINS, float(small), 0.0,
        f"{small} of {len(sizes)} decrypted bins hold fewer than {min_size} rows (the smallest holds "
        f"{int(sizes.min())}): a one-row bin's counts are its row's label, a small bin of one label gives "
        "every one of its rows",
        attacks=("woe.counts",), protection=Protection.AGGREGATE, flagged=small > 0, samples=len(sizes),
        detects=f"any one bin of fewer than {min_size} rows", min_effect=0.0)


def _received_blocks(tap: AuditTap, sk: Any, y: np.ndarray) -> list[tuple[int | None, np.ndarray]]:
    """Per feature as it arrived at the active party: which of the passive party's columns it is,
    and the party's own number of each of its bins, in the order they arrived (for scoring).

    The active party decrypts the counts it received; each received block is matched, by its
    (events, non-events) per bin, against the party's real bins (ground truth). A feature whose
    counts another feature repeats is left out (column ``None``, no bins), and so are bins whose
    counts repeat within their feature.
    """
    (msg,) = tap.received(ACTIVE, EncryptedCounts)
    low = (1 << COUNT_BITS) - 1
    got = [(v >> COUNT_BITS, v & low) for v in sk.decrypt(msg.counts)]
    bins = tap.held_one("passive-0", "bins")
    truth = [list(zip(ev.tolist(), ne.tolist(), strict=True))
             for ev, ne in plain_counts(bins, bins.max(axis=0) + 1, y)]
    out: list[tuple[int | None, np.ndarray]] = []
    at = 0
    for w in np.asarray(msg.widths).tolist():
        block = got[at : at + w]
        at += w
        same = [f for f in range(len(truth)) if sorted(truth[f]) == sorted(block)]
        if len(same) != 1:
            out.append((None, np.zeros(0, np.int64)))
            continue
        f = same[0]
        unique = {c: b for b, c in enumerate(truth[f]) if truth[f].count(c) == 1}
        out.append((f, np.asarray([unique[c] for c in block if c in unique], np.int64)))
    return out


def _order_finding(blocks: list[tuple[int | None, np.ndarray]]) -> EmpiricalFinding:
    """Do each feature's bins arrive in the party's own bin order (edges ascending)?

    Tested within features, whose bins are shuffled independently of each other and of
    the features' order (:func:`.roles.bin_order`).
    """
    within = [b for _, b in blocks]
    return adjacent_order_finding(
        ACTIVE, BIN_ORDER, "woe.counts", within,
        f"share of neighbouring bins, within each of the {len(within)} features as they arrived, that follow "
        "the party's own bin order (an unshuffled party sends every feature's bins by ascending edge)")


def _feature_order_finding(runs: list[list[tuple[int | None, np.ndarray]]]) -> EmpiricalFinding:
    """Do the features arrive in the party's own column order (:func:`.roles.feature_order`)?

    Under anonymous numbers, a feature's place is all that could tell the active party
    which column it is. One run's few features are too short a sequence for
    ``p < ALPHA`` (7 features: a sorted order has p = 1/7! = 2e-4), so the sequences of
    two runs (independent orders) are pooled and scored by the exact null of their
    increasing neighbours.
    """
    seqs = [np.asarray([f for f, _ in run if f is not None], np.int64) for run in runs]
    return adjacent_order_finding(
        ACTIVE, FEATURE_ORDER, "woe.counts", seqs,
        f"share of neighbouring features, in the order they arrived in {len(seqs)} runs, that follow the party's "
        "own column order (an unshuffled party sends its features by column)", exact=True)


def _rerandomized_finding(taps: list[AuditTap], n: int) -> EmpiricalFinding:
    """Are the received bin sums products of the active party's own label ciphertexts?

    Without re-randomization a bin's sum is exactly prod_{i in bin} [[y_i]] mod n^2, built
    from ciphertexts the active party made: it can then test any guess of which rows
    share a bin (multiply their ciphertexts, compare), i.e. learn the partition of rows the
    passive party's feature values induce. Every feature's bins partition the rows, so the
    one guess that is always right is "all rows": the product of a feature's received sums
    divided by the product of all label ciphertexts is exactly 1 (:func:`strip_known_paillier`
    reads m = 0 without the key). A re-randomized sum carries a fresh encryption of zero
    and meets this with negligible probability.
    """
    nsq = n * n
    products, known = [], []
    for tap in taps:
        (labels,) = tap.held(ACTIVE, "label_ciphertexts")
        everything = 1
        for c in labels.ciphertexts():
            everything = everything * int(c) % nsq
        for msg in tap.received(ACTIVE, EncryptedCounts):
            cts, at = [int(c) for c in msg.counts.ciphertexts()], 0
            for w in np.asarray(msg.widths).tolist():
                prod = 1
                for c in cts[at : at + w]:
                    prod = prod * c % nsq
                at += w
                products.append(prod)
                known.append(everything)
    hits = sum(m is not None for m in strip_known_paillier(n, products, [known]))
    return EmpiricalFinding(
        ACTIVE, NOT_RERANDOMIZED, hits / max(1, len(products)), 0.0,
        f"{hits} of {len(products)} features' received bin sums multiply to exactly the product of the active "
        "party's own label ciphertexts (no fresh randomness: any guess of which rows share a bin could be tested "
        "by multiplying their ciphertexts)", attacks=("woe.counts",), protection=Protection.AGGREGATE,
        flagged=hits > 0, samples=len(products), detects="any one feature's bin sums sent without fresh randomness",
        min_effect=0.0)


def _bin_rates(woe: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Event rate per bin from its WOE and size: solve Σ s_b σ(ln k + w_b) = n k / (1 + k) for k = E/N."""
    n = float(sizes.sum())

    def excess(log_k: float) -> float:
        k = np.exp(log_k)
        return float(np.sum(sizes / (1 + np.exp(-(log_k + woe))))) - n * k / (1 + k)

    lo, hi = -20.0, 20.0
    for _ in range(100):  # bisection: a public computation on what the party received
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return 1 / (1 + np.exp(-((lo + hi) / 2 + woe)))


def _label_finding(run: WoeRun, tap: AuditTap, y: np.ndarray) -> list[EmpiricalFinding]:
    """With return_results: the passive party's label estimate per row from its bins' WOE."""
    res = run.passive["passive-0"]
    bins = tap.held_one("passive-0", "bins")
    assert res.woe is not None
    # the most informative of its features: the one whose bins' WOE spread is widest
    f = int(np.argmax([float(np.ptp(w)) for w in res.woe]))
    rates = _bin_rates(res.woe[f], np.bincount(bins[:, f], minlength=len(res.woe[f])).astype(float))
    guess = (rates[bins[:, f]] > 0.5).astype(np.int64)
    base = max(float(np.mean(y)), 1 - float(np.mean(y)))
    pure = int(np.sum((rates[bins[:, f]] < 1e-3) | (rates[bins[:, f]] > 1 - 1e-3)))
    return [accuracy_finding(
        "passive-0", "labels from the returned WOE of its own bins", guess, y, base,
        attacks=("woe.results",), protection=None,
        description=f"solves its bins' event rates from their WOE and sizes and guesses an event where the "
                    f"rate of its row's bin exceeds 1/2 (its feature with the widest WOE range); baseline = "
                    f"always the majority class; rows in bins of one label only (labels exact): {pure}")]


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """Two runs on the example data: results kept by the active party (default) and returned.

    * passive: tries to read the encrypted labels without the key;
    * active: decrypts the counts it received: bins below the minimum size, the order of
      each feature's bins and the order of the features against the passive party's own
      (both runs pooled), and tests whether the bin sums are bare products of its own
      label ciphertexts (not re-randomized);
    * passive (results returned, the declared leak): its label estimate per row.
    """
    y, Xa, ca, Xp, cp = example(600)
    keys = generate_keypair(key_bits, allow_insecure=allow_insecure)
    taps = [AuditTap(), AuditTap()]
    kept = run_local(y, Xa, [Xp], keys=keys, allow_insecure=allow_insecure, active_columns=ca,
                     passive_columns=[cp], tap=taps[0])
    returned = run_local(y, Xa, [Xp], keys=keys, allow_insecure=allow_insecure, active_columns=ca,
                         passive_columns=[cp], tap=taps[1], params=WoeParams(return_results=True))
    n = int(keys[0].n)
    labels = [c for m in taps[0].received("passive-0", EncryptedLabels) for c in m.labels.ciphertexts()]
    blocks = [_received_blocks(tap, keys[1], y) for tap in taps]
    findings = [unrandomized_finding("passive-0", "woe.labels", unrandomized_paillier(n, labels), what=LABELS_READ),
                _small_bin_finding(taps[0], keys[1], WoeParams().min_bin_size),
                _order_finding([b for run in blocks for b in run]), _feature_order_finding(blocks),
                _rerandomized_finding(taps, n), *_label_finding(returned, taps[1], y)]
    runs = {"WOE/IV, results kept by the active party": kept.transcript,
            "WOE/IV, results returned to the feature party": returned.transcript}
    report, sections = audit_runs(runs)
    return AuditOutcome("woe", report, tuple(findings), sections=sections, transcripts=tuple(runs.items()),
                        inapplicable=INAPPLICABLE)


#: the published attacks that do not apply to what each party receives (the scorecard says so)
INAPPLICABLE = (
    (PASSIVE, "residuals from its own gradients (reverse multiplication)", WENG_2020,
     "no gradient or per-row value reaches it: the labels only as ciphertexts, then which of its features are "
     "selected and (with return_results) each of its bins' WOE, an event rate per bin it already groups its rows "
     "by (declared; measured above)"),
    (ACTIVE, "label or feature inference from instance spaces (ID2Graph)", TAKAHASHI_2023,
     "it holds the labels and receives per-bin counts only, under anonymous feature numbers in a shuffled order: "
     "no per-row partition of the passive party's rows to build a graph from"),
)
