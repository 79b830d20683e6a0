"""Published attacks on private set intersection, run on one role's view and scored against a baseline.

The companion of :mod:`vflcrypto.audit.literature` for entity alignment (same contract: what
one role received in real runs in, an :class:`~vflcrypto.audit.ledger.EmpiricalFinding`
naming its paper out; the truth only scores):

* :func:`differential_membership` — a party that runs PSI twice with sets that differ by one
  target ID reads the target's membership in the other party's set off the two intersection
  sizes it received (:data:`~vflcrypto.audit.literature.GUO_2022`, the attack's one-target
  form);
* :func:`tree_search` and :func:`tree_search_finding` — the same paper's *baseline attack*: with
  a budget of PSI invocations, the attacker splits its candidate IDs in halves and follows
  the densest half, and every subset whose received size is 0 or its full size settles the
  membership of all its IDs with certainty;
* :func:`beyond_intersection` — what a party of multi-party PSI learns beyond the all-party
  intersection (the functionality of :data:`~vflcrypto.audit.literature.KMPRT_2017`: the
  intersection and nothing else), e.g. the pairwise intersections a star of two-party runs
  hands the hub.

The size a run revealed comes from a *size oracle* the protocol's audit supplies: one real
PSI run with the attacker's chosen set, the size read from what the attacker received in
that run. Randomness here only shuffles the attacker's own candidate list: a seeded numpy
generator, no secret.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import AuditError
from ..runtime.declarations import Protection
from .attacks import accuracy_finding
from .ledger import EmpiricalFinding
from .literature import GUO_2022, KMPRT_2017

__all__ = ["SizeOracle", "TreeSearch", "beyond_intersection", "differential_membership", "tree_search",
           "tree_search_finding"]

#: one PSI run with the attacker's set (its argument: IDs) against the victim's: the intersection size the attacker
#: received in that run
SizeOracle = Callable[[Sequence[Any]], int]


def differential_membership(observer: str, name: str, with_target: Sequence[int], without_target: Sequence[int],
                            member: Sequence[bool], *, attacks: Sequence[str], protection: Protection | None = None,
                            description: str = "") -> EmpiricalFinding:
    """Membership of one target ID per pair of runs (Guo et al., USENIX Security 2022): member iff the size grew.

    ``with_target[i]`` and ``without_target[i]`` are the intersection sizes the attacker received
    in two runs whose sets differ only by target ``i``; ``member[i]`` (scoring only) whether
    target ``i`` is in the victim's set. With the victim's set fixed between the runs, the
    difference is exactly the membership bit; the guess is "member" where the size grew. The
    value is the accuracy over the targets, against the majority class's share among them
    (0.5 on balanced targets: what a guess without the sizes achieves), by an exact binomial
    test. A victim whose set changes between runs (or sizes that do not depend on the set)
    leaves the guess independent of the truth: the accuracy stays at the baseline.
    """
    w, wo = np.asarray(with_target, np.int64).ravel(), np.asarray(without_target, np.int64).ravel()
    truth = np.asarray(member, bool).ravel()
    if not (w.shape == wo.shape == truth.shape) or len(truth) < 2:
        raise AuditError(f"{name}: need one pair of sizes per target (>= 2), got {w.size}, {wo.size} for "
                         f"{truth.size} targets")
    guess = (w - wo) >= 1
    share = float(truth.mean())
    found = accuracy_finding(
        observer, name, guess, truth, max(share, 1.0 - share), attacks=attacks, protection=protection,
        description=(description or f"{len(truth)} target IDs ({int(truth.sum())} in the victim's set), two runs "
                     "each whose sets differ by the target: member where the received size grew")
        + "; baseline: the majority class's share among the targets")
    return dataclasses.replace(found, paper=GUO_2022)


@dataclass(frozen=True)
class TreeSearch:
    """The outcome of :func:`tree_search`: the IDs settled as members / non-members, and the runs it took."""

    members: frozenset[Any]
    non_members: frozenset[Any]
    invocations: int
    targets: int


def tree_search(oracle: SizeOracle, targets: Sequence[Any], budget: int, *, seed: int = 0) -> TreeSearch:
    """Guo et al.'s baseline attack (USENIX Security 2022) within ``budget`` PSI invocations.

    The attacker shuffles its candidate IDs into a binary tree of halves and runs PSI with
    the whole list, then repeatedly with one half of the densest unsettled node (the other
    half's size is the difference: one run per split); it follows the denser half and keeps
    the other for later (a priority queue by the share of members). A node whose size is 0
    holds only non-members, one whose size is its length only members: both are settled with
    certainty. AnonPSI (Jiang, Du and Yan, NDSS 2024) reimplements this search as the paper's
    baseline; we also settle full nodes (size = length), which that version leaves to the leaves.
    """
    if budget < 1 or not targets:
        raise AuditError("a tree search needs at least one invocation and one target ID")
    rng = np.random.default_rng(seed)  # the attacker's own shuffle of its candidates: not secret
    order = [targets[i] for i in rng.permutation(len(targets))]
    members: set[Any] = set()
    non_members: set[Any] = set()
    calls = 0

    def size(lo: int, hi: int) -> int:
        nonlocal calls
        calls += 1
        return int(oracle(order[lo:hi]))

    def settled(lo: int, hi: int, c: int) -> bool:
        if c == 0 or c == hi - lo:
            (non_members if c == 0 else members).update(order[lo:hi])
            return True
        return False

    queue: list[tuple[float, int, int, int]] = []  # (-density, lo, hi, size): the densest node first
    c0 = size(0, len(order))
    if not settled(0, len(order), c0):
        queue.append((-c0 / len(order), 0, len(order), c0))
    while queue and calls < budget:
        _, lo, hi, c = heapq.heappop(queue)
        while calls < budget:
            mid = (lo + hi) // 2  # the left half is the smaller one (or equal): the run asks for it
            left = size(lo, mid)
            halves = [(lo, mid, left), (mid, hi, c - left)]
            open_ = sorted((h for h in halves if not settled(*h)), key=lambda h: -h[2] / (h[1] - h[0]))
            if not open_:
                break
            for h in open_[1:]:
                heapq.heappush(queue, (-h[2] / (h[1] - h[0]), *h))
            lo, hi, c = open_[0]
    return TreeSearch(frozenset(members), frozenset(non_members), calls, len(order))


def tree_search_finding(observer: str, name: str, result: TreeSearch, truth: Collection[Any], *,
                        attacks: Sequence[str], protection: Protection | None = None) -> EmpiricalFinding:
    """The members :func:`tree_search` settled (the paper's measure: set members inferred per attack), against 0.

    Without the sizes no ID's membership is certain, so the baseline is 0 members; the check
    is exact (any member settled flags it). ``truth`` (the victim's IDs, scoring only) verifies
    every settled ID: an inference that contradicts it would mean the sizes were wrong, and the
    finding is then a *wrong result* (``correct=False``).
    """
    victim = set(truth)
    wrong = len(result.members - victim) + len(result.non_members & victim)
    hits = len(result.members)
    return EmpiricalFinding(
        observer, name, float(hits), 0.0,
        f"{hits} members and {len(result.non_members)} non-members of the victim's set settled with certainty among "
        f"{result.targets} candidate IDs in {result.invocations} PSI runs, from the intersection sizes it received "
        f"(halving search, densest half first); {wrong} settled wrongly",
        attacks=tuple(attacks), protection=protection, flagged=hits > 0, samples=result.targets,
        detects="any one member settled (exact)", min_effect=0.0, correct=wrong == 0, paper=GUO_2022)


def beyond_intersection(observer: str, name: str, learned: Mapping[str, Collection[bytes]], final: Collection[bytes],
                        *, attacks: Sequence[str], truth: Mapping[str, Collection[bytes]] | None = None,
                        truth_final: Collection[bytes] | None = None) -> EmpiricalFinding:
    """What a party of multi-party PSI learned beyond the all-party intersection (leak by design when > 0).

    ``learned`` maps each peer to the observer's own IDs it found common with that peer
    (decoded from what it received), ``final`` the all-party intersection it received. The
    multi-party functionality (Kolesnikov et al., CCS 2017) reveals ``final`` alone; every
    ID in some ``learned`` set but not in ``final`` is on that peer and missing from some other
    party — more than the functionality allows. The value is their number (baseline 0,
    exact). ``truth`` and ``truth_final`` (scoring only) check the decoding: a learned set
    that differs from the true pairwise intersection makes the finding a wrong result.
    """
    fin = set(final)
    extra = set().union(*(set(v) for v in learned.values())) - fin if learned else set()
    ok = truth is None or all(set(learned.get(k, ())) == set(v) for k, v in truth.items())
    ok = ok and (truth_final is None or fin == set(truth_final))
    sizes = ", ".join(f"{len(set(v))} with {k}" for k, v in learned.items()) or "none"
    return EmpiricalFinding(
        observer, name, float(len(extra)), 0.0,
        f"its own IDs common with each peer, read from what it received ({sizes}), against the all-party "
        f"intersection it received ({len(fin)}): {len(extra)} IDs it knows to be on a peer but not on every party",
        attacks=tuple(attacks), protection=None, flagged=bool(extra), samples=len(set().union(fin, extra)),
        detects="any one ID beyond the all-party intersection (exact)", min_effect=0.0, correct=ok, paper=KMPRT_2017)
