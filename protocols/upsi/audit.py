"""What each party of unbalanced PSI learns, attacked from what it received (the audit tap).

Two runs on example IDs (a numbered customer-ID space, the kind an attacker can
enumerate): a first run with a full transfer, then one after IDs were added to the
large set (the cache updated incrementally, a delta shipped). Checks:

* the small party's **dictionary attack on the transferred values** (``upsi.values``):
  every candidate ID of the ID space that is not its own, evaluated under every function
  it can compute without the large party's key (an unkeyed hash, a zero key, its own
  blinding scalar); any candidate found among the values is a large-set member learned
  beyond the intersection. Honest values are ``F_a(x)`` under a secret key: none found.
* the small party's **key-recovery test on the answers** (``upsi.answer``): is each
  answer its query raised to a key it can guess (so that it could evaluate ``F`` on any ID)?
* the large party's **dictionary attack on the queries** (``upsi.query``): does any query
  point equal ``H(y)`` or ``k·H(y)`` for a guessable ``k``, for a candidate ``y``?
* a correctness check: the small party's result equals the plain set intersection, and
  the declared leaks (set sizes, the delta's size) recorded as leak-by-design findings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from vflcrypto.audit.attacks import not_measured
from vflcrypto.audit.checks import EXACT, Check
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit_runs
from vflcrypto.errors import AuditError
from vflcrypto.psi import oprf
from vflcrypto.psi import primitives as psi
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection

from . import store
from .messages import LARGE, SMALL, Answer, Hello, Query, Values
from .roles import LocalRun, run_local

__all__ = ["ANSWER", "CHECKS", "DICTIONARY", "QUERY", "audit_run", "demo_sets"]

DICTIONARY = "upsi.values: dictionary attack on the transferred OPRF values"
ANSWER = "upsi.answer: the large party's key guessable from the answers"
QUERY = "upsi.query: dictionary attack on the small party's blinded IDs"
ZERO_KEY = bytes(32)

CHECKS = (
    Check(DICTIONARY, ("upsi.values",), Protection.BLINDED,
          "values any ID's value can be computed for without the key (unkeyed hashes, a guessable key)", EXACT),
    Check(ANSWER, ("upsi.answer",), Protection.BLINDED,
          "answers under a key the small party can guess (it could then evaluate F on every ID)", EXACT),
    Check(QUERY, ("upsi.query",), Protection.BLINDED,
          "queries without the small party's blinding (plain hashes of its IDs)", EXACT),
)


def demo_sets(n_large: int = 1500, n_small: int = 150, space: int = 4000) -> tuple[list[str], list[str], list[str]]:
    """Example IDs (numpy RNG: example data only): the large set, the small set (half of it common), the
    new IDs added later, all from a numbered ID space of ``space`` customers."""
    rng = np.random.default_rng(35)
    ids = [f"cust-{i:06d}" for i in rng.permutation(space)]
    large, rest = ids[:n_large], ids[n_large:]
    small = large[: n_small // 2] + rest[: n_small - n_small // 2]
    added = rest[n_small // 2 - 5 : n_small // 2 + 20]  # 5 of the small party's outsiders join the large set
    return large, small, added


def _space(space: int = 4000) -> list[bytes]:
    return [f"cust-{i:06d}".encode() for i in range(space)]


def _under(key: bytes) -> Callable[[bytes], bytes]:
    priv = X25519PrivateKey.from_private_bytes(key)

    def value(x: bytes) -> bytes:
        return oprf.output_of_point(priv.exchange(X25519PublicKey.from_public_bytes(oprf.oprf_hash(x))))

    return value


def _guess_functions(blind_secret: bytes) -> dict[str, Callable[[bytes], bytes]]:
    """What the small party can evaluate on a candidate ID without the large party's key."""
    return {"no key (a plain hash)": lambda x: oprf.output_of_point(oprf.oprf_hash(x)),
            "a zero key": _under(ZERO_KEY), "its own blinding scalar": _under(blind_secret)}


def _dictionary(taps: Sequence[AuditTap], own: set[bytes], space: Sequence[bytes]) -> EmpiricalFinding:
    hellos = [h for tap in taps for h in tap.received(SMALL, Hello)]
    chunks = [m.values for tap in taps for m in tap.received(SMALL, Values)]
    try:
        secrets_ = [s for tap in taps for s in tap.held(SMALL, "blind_secret")]
    except AuditError as exc:
        return not_measured(SMALL, DICTIONARY, ("upsi.values",), Protection.BLINDED, str(exc))
    widths = {h.value_bytes for h in hellos if h.values_total}
    if not chunks or len(widths) != 1:
        return not_measured(SMALL, DICTIONARY, ("upsi.values",), Protection.BLINDED,
                            f"{len(chunks)} value chunks received with widths {sorted(widths)}")
    width = widths.pop()
    received = {b[i : i + width] for b in chunks for i in range(0, len(b), width)}
    candidates = [x for x in space if x not in own]
    hits: dict[str, int] = {}
    for label, fn in _guess_functions(secrets_[0]).items():
        hits[label] = sum(fn(x)[:width] in received for x in candidates)
    found = sum(hits.values())
    return EmpiricalFinding(
        SMALL, DICTIONARY, found / max(1, len(candidates)), 0.0,
        f"{found} of {len(candidates):,} candidate IDs (the ID space less the small party's own) found among the "
        f"{len(received):,} transferred {width}-byte values when evaluated without the large party's key "
        f"({'; '.join(f'{k}: {v}' for k, v in hits.items())}): any hit is a large-set member learned beyond "
        "the intersection",
        attacks=("upsi.values",), protection=Protection.BLINDED, flagged=found > 0, samples=len(candidates),
        detects="any one candidate ID whose value is computable without the key", min_effect=0.0)


def _answer(taps: Sequence[AuditTap]) -> EmpiricalFinding:
    queries = [m.points for tap in taps for m in tap.received(LARGE, Query)]
    answers = [m.points for tap in taps for m in tap.received(SMALL, Answer)]
    q, a = b"".join(queries), b"".join(answers)
    if not a or len(q) != len(a):
        return not_measured(SMALL, ANSWER, ("upsi.answer",), Protection.BLINDED,
                            f"{len(a)} answer bytes for {len(q)} query bytes")
    guess = X25519PrivateKey.from_private_bytes(ZERO_KEY)
    pairs = [(q[i : i + 32], a[i : i + 32]) for i in range(0, len(q), 32)]
    hits = sum(ans == pt or ans == guess.exchange(X25519PublicKey.from_public_bytes(pt)) for pt, ans in pairs)
    return EmpiricalFinding(
        SMALL, ANSWER, hits / len(pairs), 0.0,
        f"{hits} of {len(pairs)} answers equal the query point itself or the query under a zero key: the small "
        "party would hold the OPRF key and could evaluate F on every ID",
        attacks=("upsi.answer",), protection=Protection.BLINDED, flagged=hits > 0, samples=len(pairs),
        detects="any one answer under a guessable key", min_effect=0.0)


def _query(taps: Sequence[AuditTap], space: Sequence[bytes]) -> EmpiricalFinding:
    points = b"".join(m.points for tap in taps for m in tap.received(LARGE, Query))
    if not points:
        return not_measured(LARGE, QUERY, ("upsi.query",), Protection.BLINDED, "the large party received no queries")
    received = {points[i : i + 32] for i in range(0, len(points), 32)}
    zero = X25519PrivateKey.from_private_bytes(ZERO_KEY)
    hits = 0
    for x in space:
        u = oprf.oprf_hash(x)
        hits += (oprf.canonical_u(u) in received) + (zero.exchange(X25519PublicKey.from_public_bytes(u)) in received)
    return EmpiricalFinding(
        LARGE, QUERY, hits / len(received), 0.0,
        f"{hits} of {len(received)} query points equal H(y) or a zero-key multiple of it for a candidate ID y "
        f"among {len(space):,}: the large party would read the small party's IDs",
        attacks=("upsi.query",), protection=Protection.BLINDED, flagged=hits > 0, samples=len(received),
        detects="any one query point computable from a candidate ID", min_effect=0.0)


def _correct(run: LocalRun, large: set[bytes], small: psi.CanonicalIds, label: str) -> EmpiricalFinding:
    res = run.results[SMALL]
    got = {small.encoded[int(np.searchsorted(small.rows, r))] for r in (res.rows if res.rows is not None else [])}
    want = large & set(small.encoded)
    ok = got == want
    return EmpiricalFinding(
        SMALL, f"intersection and |large set| ({label})", float(len(got)), float(len(want)),
        f"the small party learns the intersection ({len(got)} IDs; the plain intersection has {len(want)}) and "
        f"|large set| = {res.peer_size}; the large party learns |small set| = {run.results[LARGE].peer_size} "
        "(declared outputs)" + ("" if ok else ": WRONG RESULT"),
        attacks=("upsi.hello", "upsi.answer"), protection=None, flagged=False, samples=len(small),
        min_effect=0.0, correct=ok)


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """Run unbalanced PSI twice (full transfer; then a delta after an incremental update) and attack both views.

    ``key_bits`` and ``allow_insecure`` are unused (no Paillier key); kept for the common signature.
    """
    large, small, added = demo_sets()
    lc, sc, ac = (psi.canonicalize_ids(s) for s in (large, small, added))
    key = store.new_key()
    cache = store.build_cache(key, lc.encoded)
    taps = [AuditTap(), AuditTap()]
    first = run_local(lc, sc, key=key, cache=cache, tap=taps[0], chunk_size=64, max_small=1000)
    cache2, _ = store.update_cache(cache, key, ac.encoded)
    second = run_local(lc, sc, key=key, cache=cache2, transfer=first.results[SMALL].transfer, tap=taps[1],
                       chunk_size=64)
    space = _space()
    own = set(sc.encoded)
    findings = [
        _dictionary(taps, own, space), _answer(taps), _query(taps, space),
        _correct(first, set(lc.encoded), sc, "full transfer"),
        _correct(second, set(lc.encoded) | set(ac.encoded), sc, "after a delta"),
    ]
    delta = second.results[SMALL].received_values
    findings.append(EmpiricalFinding(
        SMALL, "upsi.values: size of a delta", float(delta), 0.0,
        f"a delta tells the small party how many IDs were added ({delta}) and, for its own IDs, which of them "
        "joined the large set since its last run (declared with the values)",
        attacks=("upsi.values",), protection=None, flagged=False, samples=delta, min_effect=0.0))
    report, sections = audit_runs({"full transfer": first.transcript, "delta after an update": second.transcript})
    return AuditOutcome("upsi", report, tuple(findings), sections=sections,
                        transcripts=(("full transfer", first.transcript), ("delta", second.transcript)))
