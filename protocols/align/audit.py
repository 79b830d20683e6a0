"""The alignment audit (attacks on what each party received) and its demo step."""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import accuracy_finding, not_measured, order_finding
from vflcrypto.audit.checks import EXACT, RANK_FAILURE, Check
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit, audit_runs
from vflcrypto.errors import AuditError
from vflcrypto.psi import primitives as psi
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection

from .bucket_audit import AUDIT_BUCKETS, bucket_findings
from .files import align_files, read_id_table
from .kkrt_audit import KKRT_CHECKS, kkrt_findings
from .membership_audit import membership_findings
from .messages import ACTIVE, PASSIVE, BlindedChunk, DoubledChunk, DoubledShuffledChunk, TagChunk
from .roles import LocalRun, run_local
from .rr22_audit import RR22_CHECKS, rr22_findings

__all__ = ["CHECKS", "audit_run", "demo_ids", "demo_step", "ecdh_findings", "session_findings", "unblinded_point"]


def _data_dir() -> Any:
    return importlib.resources.files("vflcrypto") / "data"


def demo_step(ctx: Any) -> dict[str, Any]:
    """Align the bundled bank.csv (active) and shop.csv (passive); both learn the rows."""
    data = _data_dir()
    with importlib.resources.as_file(data / "bank.csv") as bank, \
            importlib.resources.as_file(data / "shop.csv") as shop:
        summary = align_files(bank, shop, id_column="id", protocol="ecdh", reveal="both",
                              out_dir=ctx.workdir)
    run: LocalRun = summary.pop("_run")
    ctx.state["aligned"] = {"bank": Path(summary["outputs"]["left"]),
                            "shop": Path(summary["outputs"]["right"])}
    ctx.say(f"bank: {summary['left_size']} IDs, shop: {summary['right_size']} IDs, "
            f"common: {summary['intersection']} (ECDH-PSI over X25519, both learn)")
    ctx.say(f"{summary['bytes_sent']:,} bytes on the wire in {summary['seconds']:.2f} s; "
            f"aligned files in {ctx.where(ctx.workdir)}")
    ctx.say(audit(run.transcript).to_text())
    return {k: summary[k] for k in ("left_size", "right_size", "intersection", "bytes_sent")}


def demo_ids() -> tuple[list[str], list[str]]:
    data = _data_dir()
    with importlib.resources.as_file(data / "bank.csv") as bank, \
            importlib.resources.as_file(data / "shop.csv") as shop:
        return read_id_table(bank, "id").ids, read_id_table(shop, "id").ids


def _split(blob: bytes, width: int = psi.DIGEST_BYTES) -> list[bytes]:
    return [blob[i : i + width] for i in range(0, len(blob), width)]


def _received_blob(tap: AuditTap, party: str, kind: type, attr: str) -> bytes:
    return b"".join(getattr(m, attr) for m in tap.received(party, kind))


@dataclass(frozen=True)
class _Observer:
    """One party's view of an ECDH session, from the tap: what it received and holds."""

    name: str
    own: Sequence[bytes]  # its canonical IDs, in input order
    secret: bytes
    order: np.ndarray  # its sending order of its own IDs
    blinded: list[bytes]  # the peer's blinded points, in arrival order
    doubled: list[bytes]  # digests of its own points re-blinded by the peer, in arrival order

    @classmethod
    def of(cls, tap: AuditTap, name: str, own: Sequence[bytes], doubled_kind: type = DoubledChunk) -> _Observer:
        blinded = _received_blob(tap, name, BlindedChunk, "points")
        return cls(name, own, tap.held_one(name, "ecdh_secret"), tap.held_one(name, "send_order"),
                   _split(blinded, psi.POINT_BYTES), _split(_received_blob(tap, name, doubled_kind, "digests")))

    def own_blinded(self) -> list[bytes]:
        """Its own blinded points in sending order (it can recompute them: they are its own)."""
        return _split(psi.blind_ids(self.secret, [self.own[j] for j in self.order]), psi.POINT_BYTES)

    def common_positions(self) -> dict[int, bytes]:
        """Arrival position of each peer point it can identify (the common IDs) -> that ID."""
        mine = {d: self.own[self.order[i]] for i, d in enumerate(self.doubled)}
        rebl = _split(psi.reblind_points(self.secret, b"".join(self.blinded)))
        return {j: mine[d] for j, d in enumerate(rebl) if d in mine}


def unblinded_point(id_bytes: bytes) -> bytes:
    """H(x) as the curve point X25519 reads it (RFC 7748 ignores the top bit): an unblinded ID."""
    u = bytearray(psi.hash_to_u(id_bytes))
    u[31] &= 0x7F
    return bytes(u)


def _ecdh_names(me: str, peer: str) -> tuple[str, str, str, str]:
    """The names of the four ECDH checks of observer ``me`` (constant per role)."""
    return (f"dictionary attack on the {peer}'s blinded IDs", f"{peer}'s IDs linked across two sessions",
            f"align.doubled: re-blinding by the {peer}'s scalar", f"order of the {peer}'s blinded IDs")


PEER = {ACTIVE: PASSIVE, PASSIVE: ACTIVE}

def _ecdh_checks(me: str, peer: str) -> tuple[Check, ...]:
    """The four ECDH checks of observer ``me``."""
    dictionary, linked, reblind, order = _ecdh_names(me, peer)
    return (Check(dictionary, ("align.blinded",), Protection.BLINDED,
                  "IDs sent unblinded (every candidate ID's point computable)", EXACT),
            Check(linked, ("align.blinded",), Protection.BLINDED,
                  "a scalar fixed across sessions (the same ID gives the same point twice)", EXACT),
            Check(reblind, ("align.doubled",), Protection.BLINDED,
                  "a peer that skips its scalar (the receiver computes the doubled points itself)", EXACT),
            Check(order, ("align.blinded",), Protection.SHUFFLED, "points sent in the sender's row order",
                  RANK_FAILURE))


#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (
    *_ecdh_checks(ACTIVE, PASSIVE), *_ecdh_checks(PASSIVE, ACTIVE),
    Check("align.doubled_shuffled: re-blinding by the passive's scalar", ("align.doubled_shuffled",),
          Protection.BLINDED, "a peer that skips its scalar (the receiver computes the doubled points itself)", EXACT),
    Check("which own rows are common (cardinality mode)", ("align.doubled_shuffled",), Protection.SHUFFLED,
          "doubled points returned in the receiver's order (it tells which of its rows match)", 0.9),
    *(Check(f"order of the {peer}'s keyed-hash tags", ("align.tags",), Protection.SHUFFLED,
            "tags sent in the sender's row order", RANK_FAILURE) for peer in (PASSIVE, ACTIVE)),
    *KKRT_CHECKS,
    *RR22_CHECKS,
)


def _observer(tap: AuditTap, name: str, own: Sequence[bytes], doubled_kind: type = DoubledChunk
              ) -> _Observer | str:
    """``name``'s view of an ECDH session, or why there is none (it recorded no scalar, received no points)."""
    try:
        obs = _Observer.of(tap, name, own, doubled_kind)
    except AuditError as exc:
        return f"{name} recorded no scalar or sending order ({exc})"
    return obs if obs.blinded else f"{name} received no blinded points"


def _dictionary_finding(obs: _Observer, candidates: list[bytes], name: str) -> EmpiricalFinding:
    """Match every candidate ID, hashed and blinded as far as ``obs`` can, against the peer's points.

    Without the peer's scalar a candidate's blinded point k_p·H(c) is out of reach; the
    attack tries H(c) (the peer did not blind) and k_o·H(c) with the observer's own
    scalar (the peer reused it). Only candidates outside the observer's own set count.
    """
    received = set(obs.blinded)
    own = set(obs.own)
    outside = [c for c in candidates if c not in own]
    if not outside:
        return not_measured(obs.name, name, ("align.blinded",), Protection.BLINDED,
                          "no candidate ID outside the observer's own set")
    mine = set(_split(psi.blind_ids(obs.secret, outside), psi.POINT_BYTES))
    hits = sum(unblinded_point(c) in received for c in outside) + len(mine & received)
    return EmpiricalFinding(
        obs.name, name, float(hits), 0.0,
        f"{len(outside)} candidate IDs outside its own set, hashed (unblinded) and blinded with its "
        f"own scalar, matched against the {len(obs.blinded)} points the peer sent",
        attacks=("align.blinded",), protection=Protection.BLINDED, flagged=hits > 0,
        samples=len(outside), detects="any one candidate ID recovered", min_effect=0.0)


def _linkage_finding(first: _Observer, second: _Observer | str, name: str) -> EmpiricalFinding:
    """Link the peer's blinded IDs across two sessions (equal points = the same ID)."""
    if isinstance(second, str):
        return not_measured(first.name, name, ("align.blinded",), Protection.BLINDED, f"no second session: {second}")
    linked = len(set(first.blinded) & set(second.blinded))
    return EmpiricalFinding(
        first.name, name, float(linked), 0.0,
        f"of the {len(second.blinded)} points the peer sent in a second session, {linked} "
        "equal a point of the first: a scalar reused across sessions links every ID it blinds, "
        "common or not",
        attacks=("align.blinded",), protection=Protection.BLINDED, flagged=linked > 0,
        samples=len(second.blinded), detects="any one ID linked", min_effect=0.0)


def _unblinded_finding(obs: _Observer, kind: str, name: str) -> EmpiricalFinding:
    """Do the peer's re-blinded digests equal the observer's own single-blinded points?"""
    doubled = obs.doubled
    if not doubled:
        return not_measured(obs.name, name, (kind,), Protection.BLINDED, f"it received no {kind} digests")
    own = {psi.point_digest(pt) for pt in obs.own_blinded()}
    hits = sum(d in own for d in doubled)
    return EmpiricalFinding(
        obs.name, name, hits / len(doubled), 0.0,
        f"{hits} of {len(doubled)} digests equal the digest of the observer's own blinded point: "
        "the peer applied no secret scalar (its other points are then plain hashes)",
        attacks=(kind,), protection=Protection.BLINDED, flagged=hits > 0, samples=len(doubled),
        detects="any one digest without the peer's scalar", min_effect=0.0)


def ecdh_findings(tap: AuditTap, second: AuditTap, me: str, enc: Mapping[str, Sequence[bytes]],
                  universe: list[bytes]) -> list[EmpiricalFinding]:
    """The four ECDH checks of ``me`` on a both-learn session (``second``: a second session, for linkage)."""
    peer = PEER[me]
    names = _ecdh_names(me, peer)
    obs = _observer(tap, me, enc[me])
    if isinstance(obs, str):
        return [not_measured(me, n, (k,), pr, obs) for n, k, pr in
                zip(names, ("align.blinded", "align.blinded", "align.doubled", "align.blinded"),
                    (Protection.BLINDED, Protection.BLINDED, Protection.BLINDED, Protection.SHUFFLED), strict=True)]
    row_of = {x: i for i, x in enumerate(enc[peer])}
    hits = obs.common_positions() if obs.doubled else {}
    return [
        _dictionary_finding(obs, universe, names[0]),
        _linkage_finding(obs, _observer(second, me, enc[me]), names[1]),
        _unblinded_finding(obs, "align.doubled", names[2]),
        order_finding(
            me, names[3], "align.blinded",
            np.fromiter(hits, dtype=np.int64), np.asarray([row_of[x] for x in hits.values()], np.int64),
            f"Spearman rho between the arrival position of the {len(hits)} peer points it identified "
            f"(the common IDs) and their row in the {peer}'s file"),
    ]


def session_findings(taps: Sequence[AuditTap], enc: Mapping[str, Sequence[bytes]], universe: list[bytes]
                     ) -> list[EmpiricalFinding]:
    """Every check on the audit's six sessions: ECDH both-learn twice, ECDH size-only, keyed hash, KKRT, VOLE PSI.

    A check whose messages are absent from its session's tap says so in a finding that is
    not measured (never an empty list).
    """
    findings: list[EmpiricalFinding] = []
    for me in (ACTIVE, PASSIVE):
        findings += ecdh_findings(taps[0], taps[1], me, enc, universe)
    findings += _cardinality_findings(taps[2], enc)
    findings += _keyed_hash_findings(taps[3], enc, universe)
    findings += kkrt_findings(taps[4], enc, universe)
    findings += rr22_findings(taps[5], enc, universe)
    return findings


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """Align the demo data and attack what each party received.

    Sessions: ECDH both-learn twice (the second for cross-session linkage), ECDH
    cardinality-only, keyed-hash both-learn, KKRT both-learn, VOLE PSI both-learn; every attack reads that
    session's tap. The published attacks on the outputs (:mod:`.membership_audit`) run their
    own small sessions: membership from intersection sizes (Guo et al. 2022, a few hundred
    runs of 17 against 64 IDs) and one 3-party run of mode ``all`` (its transcript joins the
    report); one bucketed run (:mod:`.bucket_audit`) measures what its bucket sizes reveal.
    ``key_bits`` and ``allow_insecure`` are unused (PSI has no Paillier key); kept for the
    common signature of audits.
    """
    bank, shop = demo_ids()
    enc = {ACTIVE: psi.canonicalize_ids(bank).encoded, PASSIVE: psi.canonicalize_ids(shop).encoded}
    taps = [AuditTap() for _ in range(6)]
    run = run_local(bank, shop, protocol="ecdh", mode="both", tap=taps[0])
    run_local(bank, shop, protocol="ecdh", mode="both", tap=taps[1])
    size_run = run_local(bank, shop, protocol="ecdh", mode="size", tap=taps[2])
    hash_run = run_local(bank, shop, protocol="hash", mode="both", tap=taps[3])
    kkrt_run = run_local(bank, shop, protocol="kkrt", mode="both", tap=taps[4])
    rr22_run = run_local(bank, shop, protocol="rr22", mode="both", tap=taps[5])
    universe = sorted(set(enc[ACTIVE]) | set(enc[PASSIVE]))
    findings = session_findings(taps, enc, universe)
    published, multi_run = membership_findings(bank, shop)
    findings += published
    bucketed, bucket_transcript = bucket_findings()
    findings += bucketed
    runs = {"ECDH, both learn": run.transcript, "ECDH, size only": size_run.transcript,
            "keyed hash": hash_run.transcript, "KKRT (OT extension), both learn": kkrt_run.transcript,
            "VOLE PSI (RR22), both learn": rr22_run.transcript,
            "ECDH, 3 parties (mode all)": multi_run.transcript,
            f"ECDH bucketed ({AUDIT_BUCKETS} buckets), both learn": bucket_transcript}
    report, sections = audit_runs(runs)
    return AuditOutcome("align", report, tuple(findings), sections=sections, transcripts=tuple(runs.items()))


def _cardinality_findings(tap: AuditTap, enc: Mapping[str, Sequence[bytes]]) -> list[EmpiricalFinding]:
    """Cardinality mode: can the active party tell *which* of its rows are common?"""
    names = ("align.doubled_shuffled: re-blinding by the passive's scalar",
             "which own rows are common (cardinality mode)")
    obs = _observer(tap, ACTIVE, enc[ACTIVE], DoubledShuffledChunk)
    if isinstance(obs, str) or not obs.doubled:
        why = obs if isinstance(obs, str) else "it received no reshuffled digests"
        return [not_measured(ACTIVE, names[0], ("align.doubled_shuffled",), Protection.BLINDED, why),
                not_measured(ACTIVE, names[1], ("align.doubled_shuffled",), Protection.SHUFFLED, why)]
    peer_digests = set(_split(psi.reblind_points(obs.secret, b"".join(obs.blinded))))
    # Read the reshuffled digests as if they were still in its own sending order.
    guess = np.zeros(len(obs.own), dtype=np.int8)
    for i, d in enumerate(obs.doubled):
        if d in peer_digests:
            guess[obs.order[i]] = 1
    truth = np.isin(np.asarray(obs.own, dtype=object), np.asarray(enc[PASSIVE], dtype=object)).astype(np.int8)
    q = int(guess.sum()) / len(obs.own)  # the intersection size it learns (its matches), per own row
    return [
        _unblinded_finding(obs, "align.doubled_shuffled", names[0]),
        accuracy_finding(
            ACTIVE, names[1], guess, truth, q * q + (1 - q) ** 2,
            attacks=("align.doubled_shuffled",), protection=Protection.SHUFFLED,
            description="marks its rows common where the reshuffled double-blinded digests, read in "
                        "its own sending order, match the peer's; baseline = the accuracy of a "
                        "random guess with the known intersection size"),
    ]


def _keyed_hash_findings(tap: AuditTap, enc: Mapping[str, Sequence[bytes]], universe: list[bytes]
                         ) -> list[EmpiricalFinding]:
    """Keyed-hash PSI: the order of the peer's tags, and the dictionary attack the key allows."""
    out = []
    keys: dict[str, bytes] = {}
    for me, peer in ((ACTIVE, PASSIVE), (PASSIVE, ACTIVE)):
        name = f"order of the {peer}'s keyed-hash tags"
        try:
            keys[me] = key = tap.held_one(me, "psi_key")
        except AuditError as exc:
            out.append(not_measured(me, name, ("align.tags",), Protection.SHUFFLED, f"no keyed-hash session ({exc})"))
            continue
        tags = _split(_received_blob(tap, me, TagChunk, "tags"))
        own_tag = dict(zip(_split(psi.keyed_digests(key, enc[me])), enc[me], strict=True))
        row_of = {x: i for i, x in enumerate(enc[peer])}
        pos = [j for j, t in enumerate(tags) if t in own_tag]
        out.append(order_finding(
            me, name, "align.tags", np.asarray(pos, np.int64),
            np.asarray([row_of[own_tag[tags[j]]] for j in pos], np.int64),
            f"Spearman rho between the arrival position of the {len(pos)} tags it matched and their "
            f"row in the {peer}'s file"))
    name = "dictionary attack on the passive party's keyed-hash tags"
    received = set(_split(_received_blob(tap, ACTIVE, TagChunk, "tags")))
    outside = [c for c in universe if c not in set(enc[ACTIVE])]
    if ACTIVE not in keys or not received or not outside:
        out.append(not_measured(ACTIVE, name, ("align.tags",), None, "no tags, key or candidate IDs to test"))
        return out
    hits = sum(t in received for t in _split(psi.keyed_digests(keys[ACTIVE], outside)))
    out.append(EmpiricalFinding(
        ACTIVE, name, float(hits), 0.0,
        f"with the shared HMAC key, {hits} of {len(outside)} candidate IDs outside its own set match "
        "a received tag: keyed-hash PSI does not protect guessable IDs from the other party",
        attacks=("align.tags",), protection=None, flagged=hits > 0, samples=len(outside),
        detects="any one candidate ID recovered", min_effect=0.0))
    return out
