"""The published attacks on private set intersection (vflcrypto.audit.literature_psi) on real alignment runs: each
succeeds where its paper says it does, stays at its baseline where it should, and the align audit lists it.

* Guo et al., "Birds of a Feather Flock Together: How Set Bias Helps to Deanonymize You via Revealed
  Intersection Sizes", USENIX Security 2022. Its abstract reports that its two attacks (the baseline attack
  and the feature-aware one) infer 2.0 to 72.7 set members on average in three realistic scenarios, and in
  COVID-19 contact tracing 25.9 members in 135 invocations (the feature-aware attack, 1.5 times the baseline
  attack). Every membership these attacks infer is certain: a size difference is a count. So our tolerance
  for the one-target attack is none (accuracy 1.0 on the targets, every inference right), and the halving
  search must settle a number of members inside the paper's reported range (2.0 to 72.7) with no wrong
  inference. We could not check the paper's per-scenario tables; the figures above are the abstract's.
* Kolesnikov, Matania, Pinkas, Rosulek and Trieu, CCS 2017: multi-party PSI reveals the all-party
  intersection and nothing else. Our 3+-party mode is a star of two-party runs, so each party's pairwise
  intersection with the hub is a leak by design, measured exactly (sizes known from the sets).

Every run here is a real ECDH or keyed-hash run of 17 against 64 IDs; sizes are read from the attacker's tap.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from vflcrypto.audit import literature_psi as P
from vflcrypto.audit.ledger import LEAKS, NO_LEAK
from vflcrypto.audit.literature import GUO_2022, KMPRT_2017, PAPERS
from vflcrypto.errors import AuditError
from vflcrypto.runtime.channel import AuditTap


@pytest.fixture(autouse=True)
def _in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "1")


@pytest.fixture(scope="module")
def demo() -> tuple[dict[str, list[str]], list[str]]:
    from vflcrypto.protocols.align.audit import demo_ids

    bank, shop = demo_ids()
    return {"active": bank, "passive": shop}, sorted(set(bank) | set(shop))


def _setup(demo: tuple[dict[str, list[str]], list[str]], n: int, seed: int
           ) -> tuple[list[str], list[str], list[bool], list[str]]:
    """The active party's set (64 bank IDs), n targets in it and n outside, the passive party's own IDs."""
    files, universe = demo
    rng = np.random.default_rng(seed)  # example data
    victim = [files["active"][i] for i in rng.choice(len(files["active"]), 64, replace=False)]
    outside = [x for x in universe if x not in set(victim)]
    targets = [victim[i] for i in rng.choice(64, n, replace=False)] + \
        [outside[i] for i in rng.choice(len(outside), n, replace=False)]
    pool = [x for x in files["passive"] if x not in set(targets)]
    return victim, targets, [True] * n + [False] * n, pool


def test_the_papers_are_listed() -> None:
    assert PAPERS["guo2022"] == GUO_2022 and "USENIX Security 2022" in GUO_2022
    assert PAPERS["kmprt2017"] == KMPRT_2017 and "CCS 2017" in KMPRT_2017


# --------------------------------------------------------------------------- Guo et al.: one target, two runs


def test_differential_attack_reads_membership_off_two_real_cardinality_runs(demo) -> None:
    """The passive party of mode size, reading align.cardinality: every target right (the paper's attack is exact)."""
    from vflcrypto.protocols.align.membership_audit import size_oracle

    victim, targets, member, pool = _setup(demo, 12, 1)
    oracle = size_oracle("passive", victim, protocol="ecdh", mode="size")
    rng = np.random.default_rng(2)  # example data: the attacker's own IDs beside each target
    w, wo = [], []
    for t in targets:
        base = [pool[i] for i in rng.choice(len(pool), 16, replace=False)]
        w.append(oracle([*base, t]))
        wo.append(oracle(base))
    f = P.differential_membership("passive", "guo", w, wo, member, attacks=("align.cardinality",))
    assert f.value == 1.0 and f.baseline == 0.5 and f.flagged and f.p_value is not None and f.p_value < 1e-7
    assert f.paper == GUO_2022 and f.by_design and f.samples == 24 and f.min_effect is not None


def test_differential_attack_stays_at_chance_without_the_target_change_or_with_a_changing_victim(demo) -> None:
    from vflcrypto.protocols.align.membership_audit import size_oracle

    victim, targets, member, pool = _setup(demo, 20, 3)
    rng = np.random.default_rng(4)  # example data
    bases = [[pool[i] for i in rng.choice(len(pool), 16, replace=False)] for _ in targets]
    # the attacker never adds the target: both runs alike, the guess is "not a member" throughout
    oracle = size_oracle("passive", victim, protocol="ecdh", mode="size")
    same = [oracle(b) for b in bases]
    f = P.differential_membership("passive", "guo", same, same, member, attacks=("align.cardinality",))
    assert f.value == 0.5 and not f.flagged
    # the victim's set drawn afresh from the universe for every run (a defence's effect): the sizes no longer
    # depend on the fixed set that defines the truth
    _, universe = demo

    def changing(own: list[str]) -> int:
        fresh = [universe[i] for i in rng.choice(len(universe), 64, replace=False)]
        return size_oracle("passive", fresh, protocol="ecdh", mode="size")(own)

    w = [changing([*b, t]) for b, t in zip(bases, targets, strict=True)]
    wo = [changing(b) for b in bases]
    f = P.differential_membership("passive", "guo", w, wo, member, attacks=("align.cardinality",))
    assert not f.flagged and abs(f.value - 0.5) <= 0.2, f.value  # 40 targets: sd 0.08 around 0.5


def test_differential_membership_refuses_mismatched_sizes() -> None:
    with pytest.raises(AuditError):
        P.differential_membership("p", "guo", [1, 2], [1], [True, False], attacks=())


def test_size_received_on_an_empty_tap_is_an_audit_error() -> None:
    from vflcrypto.protocols.align.membership_audit import size_received

    for me, protocol, mode in (("passive", "ecdh", "size"), ("active", "ecdh", "size"), ("passive", "hash", "both")):
        with pytest.raises(AuditError):
            size_received(AuditTap(), me, protocol, mode, [b"x"])


# --------------------------------------------------------------------------- Guo et al.: the baseline attack


def test_tree_search_settles_exactly_within_its_budget() -> None:
    """Set-level oracle (the algorithm alone): every settled ID is right, the budget holds, the members are found."""
    rng = np.random.default_rng(5)  # example data
    ids = [f"id-{i}" for i in range(200)]
    victim = {ids[i] for i in rng.choice(200, 60, replace=False)} | {"outside"}
    targets = ids[:100]
    calls = []

    def oracle(s: list[str]) -> int:
        calls.append(len(s))
        return len(set(s) & victim)

    r = P.tree_search(oracle, targets, 1000)
    assert r.members == {t for t in targets if t in victim} and r.non_members == {t for t in targets if t not in victim}
    assert r.invocations == len(calls) < 100  # fewer runs than one per candidate
    small = P.tree_search(oracle, targets, 10)
    assert small.invocations <= 10 and small.members <= victim and not (small.non_members & victim)
    f = P.tree_search_finding("p", "tree", small, victim, attacks=())
    assert f.correct and f.value == len(small.members) and f.paper == GUO_2022
    empty = P.tree_search(lambda s: 0, targets, 10)  # a victim that holds none of the candidates
    assert empty.invocations == 1 and len(empty.non_members) == 100 and not empty.members
    f = P.tree_search_finding("p", "tree", empty, {"outside"}, attacks=())
    assert f.value == 0 and f.baseline == 0 and not f.flagged and f.verdict == NO_LEAK
    wrong = P.tree_search_finding("p", "tree", P.TreeSearch(frozenset({"id-0"}), frozenset(), 1, 1), set(), attacks=())
    assert not wrong.correct  # a settled ID the truth contradicts: a wrong result


def test_tree_search_on_real_cardinality_runs_settles_members_in_the_papers_range(demo) -> None:
    """64 candidates, 8 of them on the active party, at most 32 real runs of mode size read by the passive party."""
    from vflcrypto.protocols.align.membership_audit import TREE_BUDGET, tree_finding

    files, universe = demo
    f = tree_finding(files, universe)
    assert f.correct and f.flagged and f.by_design and f.paper == GUO_2022
    assert 2.0 <= f.value <= 72.7  # the paper's range of members inferred on average (abstract)
    runs = re.search(r"in (\d+) PSI runs", f.description)
    assert runs is not None and int(runs.group(1)) <= TREE_BUDGET


# --------------------------------------------------------------------------- 3+ parties: beyond the all-party set


def test_the_star_of_mode_all_hands_each_party_its_pairwise_intersection(demo) -> None:
    """Sizes known from the sets: active 10 + 8 IDs beyond the 20 on all, passive-0 10, passive-1 8."""
    from vflcrypto.protocols.align.membership_audit import multiparty_findings, multiparty_sets

    _, universe = demo
    findings, run = multiparty_findings(multiparty_sets(universe))
    got = {f.observer: f for f in findings}
    assert {k: f.value for k, f in got.items()} == {"active": 18.0, "passive-0": 10.0, "passive-1": 8.0}
    assert all(f.correct and f.flagged and f.by_design and f.paper == KMPRT_2017 for f in findings)
    assert run.results["active"].size == 20


def test_no_party_learns_more_than_the_all_party_set_when_the_pairwise_sets_equal_it(demo) -> None:
    """The active party's IDs on every passive party: each pairwise intersection is the all-party one."""
    from vflcrypto.protocols.align.membership_audit import multiparty_findings

    _, universe = demo
    core, rest = universe[:25], universe[25:55]
    findings, _ = multiparty_findings([core, core + rest[:10], core + rest[5:20]])
    assert all(f.value == 0 and not f.flagged and f.correct and f.verdict == NO_LEAK for f in findings)


def test_beyond_intersection_flags_a_wrong_decoding() -> None:
    f = P.beyond_intersection("a", "x", {"b": [b"1", b"2"]}, [b"1"], attacks=(), truth={"b": {b"1"}})
    assert f.value == 1 and not f.correct


# --------------------------------------------------------------------------- the align audit's scorecard


def test_the_align_audit_lists_the_psi_attacks_in_its_scorecard() -> None:
    from conftest import honest_audit

    outcome = honest_audit("align")
    card = outcome.scorecard()
    guo = [r for r in card if r["paper"] == GUO_2022]
    multi = [r for r in card if r["paper"] == KMPRT_2017]
    assert {(r["observer"], r["outcome"]) for r in guo} == {("passive", LEAKS), ("active", LEAKS)} and len(guo) == 4
    assert all(r["score"] == 1.0 and r["baseline"] == 0.5 for r in guo if r["attack"].startswith("membership"))
    assert {r["observer"]: r["score"] for r in multi} == {"active": 18.0, "passive-0": 10.0, "passive-1": 8.0}
    assert {r["role"] for r in multi} == {"active", "passive"}
    assert outcome.to_dict()["scorecard"] == card
    assert not outcome.failures()
