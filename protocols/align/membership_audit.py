"""Published attacks on what alignment's outputs reveal (:mod:`vflcrypto.audit.literature_psi`), run on real runs.

* **Membership from intersection sizes** (Guo et al., USENIX Security 2022). Every run tells
  each learning party the intersection size: in mode ``size`` the active party counts its
  matches among ``align.doubled_shuffled`` and tells the passive party in
  ``align.cardinality``; in the both-learn modes it is the number of rows each party matched.
  A party that runs PSI again with one ID more reads that ID's membership in the other
  party's set off the difference (:func:`differential_findings`), and with a budget of runs a
  halving search settles the membership of whole groups of candidates (:func:`tree_finding`).
  The size is the declared output, so these are leaks by design: nothing in the protocol
  limits how often a party may run it, or with which set.
* **Pairwise intersections in the 3+-party mode** (:func:`multiparty_findings`). Mode ``all``
  is a star of two-party both-learn sessions around the active party: it learns its
  intersection with every passive party, and each passive party its intersection with the
  active party, beyond the all-party intersection that the multi-party functionality
  (Kolesnikov et al., CCS 2017) would reveal alone. Passive parties exchange no message, so
  IDs on two passive parties but not on the active party reach no one. (Prototype VFL's
  all-party-only alignment, :mod:`vflcrypto.psi.mpsi`, reveals no pairwise intersection: its
  audit checks the rows a party shares with only some others.)

Every size is read from what the attacking role received in that run (its tap) with its own
secrets; the victim's set only scores. The runs are small (the attacker adds 16 of its own
IDs to each target; the victim holds 64 of its IDs): an ECDH run of that size takes a few
milliseconds. Randomness only draws example sets and targets (a seeded numpy generator).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from vflcrypto.audit.attacks import not_measured
from vflcrypto.audit.ledger import EmpiricalFinding
from vflcrypto.audit.literature_psi import (
    SizeOracle,
    beyond_intersection,
    differential_membership,
    tree_search,
    tree_search_finding,
)
from vflcrypto.errors import AuditError
from vflcrypto.psi import primitives as psi
from vflcrypto.runtime.channel import AuditTap

from .messages import (
    ACTIVE,
    PASSIVE,
    BlindedChunk,
    Cardinality,
    DoubledChunk,
    DoubledShuffledChunk,
    GlobalOrder,
    TagChunk,
)
from .roles import LocalRun, run_local, run_multiparty_local

__all__ = ["differential_findings", "membership_findings", "multiparty_findings", "multiparty_sets", "size_oracle",
           "size_received", "tree_finding"]

VICTIM = 64  # IDs of the victim's own file it holds in each run
BASE = 16  # the attacker's own IDs beside the target in each run
TARGETS = 20  # targets in the victim's set, and as many outside it, per differential attack
TREE_TARGETS, TREE_MEMBERS, TREE_BUDGET = 64, 8, 32  # the halving search's candidates, members among them, runs

PEER = {ACTIVE: PASSIVE, PASSIVE: ACTIVE}


def _split(blob: bytes, width: int = psi.DIGEST_BYTES) -> list[bytes]:
    return [blob[i : i + width] for i in range(0, len(blob), width)]


def _blob(tap: AuditTap, me: str, kind: type, attr: str, sender: str | None = None) -> bytes:
    return b"".join(getattr(m, attr) for m in tap.received(me, kind, sender=sender))


def size_received(tap: AuditTap, me: str, protocol: str, mode: str, own: Sequence[bytes]) -> int:
    """The intersection size ``me`` learned in one two-party run, from what it received and its own secrets.

    ``own``: its canonical IDs. Mode ``size``: the passive party reads ``align.cardinality``;
    the active party re-blinds the passive party's points with its scalar and counts its
    reshuffled doubled digests among them. Both-learn ECDH: the same count over
    ``align.doubled``; keyed hash: the received tags equal to a tag of its own.
    """
    if mode == "size" and me == PASSIVE:
        msgs = tap.received(me, Cardinality)
        if len(msgs) != 1:
            raise AuditError(f"{me} received {len(msgs)} align.cardinality messages, expected one")
        return int(msgs[0].size)
    if protocol == "hash":
        tags = set(_split(_blob(tap, me, TagChunk, "tags")))
        return sum(t in tags for t in _split(psi.keyed_digests(tap.held_one(me, "psi_key"), own)))
    peer = set(_split(psi.reblind_points(tap.held_one(me, "ecdh_secret"), _blob(tap, me, BlindedChunk, "points"))))
    doubled = _split(_blob(tap, me, DoubledShuffledChunk if mode == "size" else DoubledChunk, "digests"))
    return sum(d in peer for d in doubled)


def size_oracle(me: str, victim: Sequence[str], *, protocol: str, mode: str) -> SizeOracle:
    """One real run of ``me``'s chosen set against ``victim``'s set: the size ``me`` read from its own tap."""

    def run(own: Sequence[object]) -> int:
        tap = AuditTap()
        ids = list(own)
        run_local(*((ids, victim) if me == ACTIVE else (victim, ids)), protocol=protocol, mode=mode, tap=tap)
        return size_received(tap, me, protocol, mode, psi.canonicalize_ids(ids).encoded)

    return run


def _victim_and_targets(rng: np.random.Generator, victim_file: Sequence[str], universe: Sequence[str],
                        members: int, others: int) -> tuple[list[str], list[str], list[str]]:
    """The victim's set (VICTIM of its file's IDs), ``members`` targets in it and ``others`` outside it."""
    victim = [victim_file[i] for i in rng.choice(len(victim_file), VICTIM, replace=False)]
    inside = set(victim)
    outside = [x for x in universe if x not in inside]
    return (victim, [victim[i] for i in rng.choice(len(victim), members, replace=False)],
            [outside[i] for i in rng.choice(len(outside), others, replace=False)])


def differential_findings(files: Mapping[str, Sequence[str]], universe: Sequence[str], *, seed: int = 0
                          ) -> list[EmpiricalFinding]:
    """Guo et al.'s one-target attack by each role of mode ``size``, and by the passive party under keyed hash.

    Per target two runs whose sets differ by the target alone: BASE of the attacker's own IDs
    (drawn afresh per target), with and without it. TARGETS targets are in the victim's set,
    as many are not.
    """
    out = []
    for n, (me, protocol, mode, label, kinds) in enumerate((
            (PASSIVE, "ecdh", "size", "ECDH, size only", ("align.cardinality",)),
            (ACTIVE, "ecdh", "size", "ECDH, size only", ("align.blinded", "align.doubled_shuffled")),
            (PASSIVE, "hash", "both", "keyed hash, both learn", ("align.tags",)))):
        peer = PEER[me]
        name = f"membership of one ID in the {peer}'s set from two intersection sizes ({label})"
        rng = np.random.default_rng(seed + n)  # example data: the victim's set, the targets, the attacker's IDs
        victim, inside, outside = _victim_and_targets(rng, files[peer], universe, TARGETS, TARGETS)
        targets = [*inside, *outside]
        chosen = set(targets)
        pool = [x for x in files[me] if x not in chosen]
        oracle = size_oracle(me, victim, protocol=protocol, mode=mode)
        sizes: list[tuple[int, int]] = []
        try:
            for t in targets:
                base = [pool[i] for i in rng.choice(len(pool), BASE, replace=False)]
                sizes.append((oracle([*base, t]), oracle(base)))
        except AuditError as exc:
            out.append(not_measured(me, name, kinds, None, f"a run gave no size to read ({exc})"))
            continue
        w, wo = zip(*sizes, strict=True)
        out.append(differential_membership(
            me, name, w, wo, [True] * len(inside) + [False] * len(outside), attacks=kinds,
            description=f"{len(targets)} target IDs ({len(inside)} in the {peer}'s set of {VICTIM}), each in two "
                        f"real runs with {BASE} of its own IDs, with and without the target (the size read from what "
                        "it received): member where the size grew"))
    return out


def tree_finding(files: Mapping[str, Sequence[str]], universe: Sequence[str], *, seed: int = 10) -> EmpiricalFinding:
    """Guo et al.'s baseline attack by the passive party of mode ``size``: TREE_BUDGET runs over TREE_TARGETS
    candidate IDs of which TREE_MEMBERS are on the active party."""
    name = f"members of the {ACTIVE}'s set settled by a halving search of intersection sizes (ECDH, size only)"
    rng = np.random.default_rng(seed)  # example data: the victim's set and the candidates
    victim, inside, outside = _victim_and_targets(rng, files[ACTIVE], universe, TREE_MEMBERS,
                                                  TREE_TARGETS - TREE_MEMBERS)
    try:
        result = tree_search(size_oracle(PASSIVE, victim, protocol="ecdh", mode="size"), [*inside, *outside],
                             TREE_BUDGET, seed=seed)
    except AuditError as exc:
        return not_measured(PASSIVE, name, ("align.cardinality",), None, f"a run gave no size to read ({exc})")
    return tree_search_finding(PASSIVE, name, result, victim, attacks=("align.cardinality",))


def multiparty_sets(universe: Sequence[str], *, seed: int = 20) -> list[list[str]]:
    """Three overlapping sets (active, passive-0, passive-1) from disjoint blocks of ``universe``: 20 IDs on all,
    10 on the active and passive-0 only, 8 on the active and passive-1 only, 6 on the two passive parties only,
    10 on each party alone."""
    rng = np.random.default_rng(seed)  # example data
    ids = [universe[i] for i in rng.choice(len(universe), 20 + 10 + 8 + 6 + 30, replace=False)]
    blocks, at = {}, 0
    for key, n in (("all", 20), ("a0", 10), ("a1", 8), ("01", 6), ("a", 10), ("0", 10), ("1", 10)):
        blocks[key], at = ids[at : at + n], at + n
    return [blocks["all"] + blocks["a0"] + blocks["a1"] + blocks["a"],
            blocks["all"] + blocks["a0"] + blocks["01"] + blocks["0"],
            blocks["all"] + blocks["a1"] + blocks["01"] + blocks["1"]]


def _common(tap: AuditTap, me: str, peer: str, own: Sequence[bytes], secret: bytes, order: np.ndarray
            ) -> list[bytes]:
    """``me``'s own IDs common with ``peer`` in one both-learn ECDH session, in the session's canonical order.

    Its doubled digests arrive in its own sending order; the peer's points it re-blinds itself;
    sorting the matches by digest is the order both sides use (:func:`psi.match_digests`).
    """
    doubled = _split(_blob(tap, me, DoubledChunk, "digests", peer))
    if len(doubled) != len(own):
        raise AuditError(f"{me} received {len(doubled)} doubled digests from {peer} for {len(own)} own IDs")
    rows = [b""] * len(own)
    for i, d in enumerate(doubled):
        rows[int(order[i])] = d
    peer_digests = psi.reblind_points(secret, _blob(tap, me, BlindedChunk, "points", peer))
    pos = psi.match_digests(psi.digests_to_array(b"".join(rows)), psi.digests_to_array(peer_digests))
    return [own[int(p)] for p in pos]


def multiparty_findings(sets: Sequence[Sequence[str]]) -> tuple[list[EmpiricalFinding], LocalRun]:
    """One real run of mode ``all`` (ECDH): what each party learns beyond the all-party intersection, and the run."""
    tap = AuditTap()
    run = run_multiparty_local(sets, protocol="ecdh", tap=tap)
    names = [ACTIVE, *(f"passive-{j}" for j in range(len(sets) - 1))]
    enc = {n: list(psi.canonicalize_ids(s).encoded) for n, s in zip(names, sets, strict=True)}
    everyone = set.intersection(*(set(v) for v in enc.values()))
    name = "IDs beyond the all-party intersection (3+ parties, mode all)"
    out = []
    try:
        secrets, orders = tap.held(ACTIVE, "ecdh_secret"), tap.held(ACTIVE, "send_order")
        learned = {p: _common(tap, ACTIVE, p, enc[ACTIVE], secrets[j], orders[j]) for j, p in enumerate(names[1:])}
        out.append(beyond_intersection(
            ACTIVE, name, learned, set.intersection(*(set(v) for v in learned.values())),
            attacks=("align.blinded", "align.doubled"), truth_final=everyone,
            truth={p: set(enc[ACTIVE]) & set(enc[p]) for p in names[1:]}))
    except AuditError as exc:
        out.append(not_measured(ACTIVE, name, ("align.blinded", "align.doubled"), None, str(exc)))
    for p in names[1:]:
        kinds = ("align.blinded", "align.doubled", "align.global_order")
        try:
            pair = _common(tap, p, ACTIVE, enc[p], tap.held_one(p, "ecdh_secret"), tap.held_one(p, "send_order"))
            (order,) = tap.received(p, GlobalOrder)
            final = [pair[int(k)] for k in order.positions]
        except (AuditError, ValueError, IndexError) as exc:
            out.append(not_measured(p, name, kinds, None, f"no pairwise session or all-party order to read ({exc})"))
            continue
        out.append(beyond_intersection(p, name, {ACTIVE: pair}, final, attacks=kinds, truth_final=everyone,
                                       truth={ACTIVE: set(enc[p]) & set(enc[ACTIVE])}))
    return out, run


def membership_findings(bank: Sequence[str], shop: Sequence[str]) -> tuple[list[EmpiricalFinding], LocalRun]:
    """Every published attack of this module on the demo IDs (the active party's bank, the passive party's shop),
    and the 3-party run (its transcript joins the audit's report)."""
    files = {ACTIVE: list(bank), PASSIVE: list(shop)}
    universe = sorted(set(bank) | set(shop))
    findings = differential_findings(files, universe)
    findings.append(tree_finding(files, universe))
    multi, run = multiparty_findings(multiparty_sets(universe))
    return findings + multi, run
