"""What bucketed alignment reveals beyond the PSI: its per-bucket set sizes (:mod:`.buckets`).

Both parties know the bucket key, so ``align.bucket_sizes`` is a histogram, over the
sender's set, of a hash the receiver can evaluate on any ID. Two findings, both of a
leak the declarations admit (``protection=None``):

* an exact check that the bucket sizes are the *only* new size information: the sizes
  received equal the keyed histogram of the peer's set, they add up to its (public) set
  size, and every per-bucket PSI's ``align.hello`` announces exactly its bucket's size
  (a bucket empty at either side runs no PSI); value = the number of size figures that
  differ from that (0);
* what the histogram tells about membership: the active party, knowing its own rows of
  the intersection, subtracts them from the counts; for a candidate ID outside its own
  set it scores the remaining count of the candidate's bucket. Members lift their
  bucket's count by one, so the AUC between members and non-members is about
  Φ(1/√(2λ)) ≈ ½ + 1/√(4πλ) for λ non-common peer IDs per bucket: 0.56 at λ = 25,
  0.5003 at λ = 10⁶ (a bucket of a 2 GiB budget holds millions). The audit runs with
  small buckets (λ ≈ 6) so the effect is measurable, and reports the AUC and its p-value
  (Mann–Whitney, normal approximation).
"""

from __future__ import annotations

import importlib.resources
import itertools
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vflcrypto.audit.attacks import ALPHA, normal_isf, normal_sf, not_measured
from vflcrypto.audit.ledger import EmpiricalFinding
from vflcrypto.errors import AuditError
from vflcrypto.psi import primitives as psi
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.transcript import Transcript

from .buckets import BYTES_PER_ID, FIXED_BYTES, align_files_bucketed
from .idtable import read_id_table
from .messages import ACTIVE, PASSIVE, BucketSizes, Hello
from .spill import bucket_index

__all__ = ["AUDIT_BUCKETS", "bucket_findings", "membership_auc"]

AUDIT_BUCKETS = 64
SIZES = "bucketed PSI: size information beyond the per-bucket sizes"
MEMBERSHIP = "bucketed PSI: membership of the passive party's IDs from its bucket sizes"


def membership_auc(scores_members: np.ndarray, scores_others: np.ndarray) -> tuple[float, float, float]:
    """AUC of ``members`` over ``others`` (ties count half), its one-sided p-value and the AUC that flags.

    Mann–Whitney U with the normal approximation (no tie correction: conservative).
    """
    n1, n2 = len(scores_members), len(scores_others)
    both = np.concatenate([scores_members, scores_others]).astype(float)
    order = np.argsort(both, kind="stable")
    ranks = np.empty(len(both))
    sorted_vals = both[order]
    i = 0
    while i < len(both):  # average ranks of ties
        j = i
        while j + 1 < len(both) and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    u = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    sd = math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    p = normal_sf((u - n1 * n2 / 2) / sd)
    return u / (n1 * n2), p, 0.5 + normal_isf(ALPHA) * sd / (n1 * n2)


def _sizes_finding(tap: AuditTap, key: bytes, peer_ids: Sequence[bytes], buckets: int) -> EmpiricalFinding:
    got = tap.received(ACTIVE, BucketSizes)
    if len(got) != 1:
        return not_measured(ACTIVE, SIZES, ("align.bucket_sizes",), None, f"{len(got)} bucket-size messages received")
    sizes = np.asarray(got[0].sizes, np.int64)
    truth = np.bincount(bucket_index(key, list(peer_ids), buckets), minlength=buckets)
    mine = np.asarray(tap.held_one(ACTIVE, "own_bucket_sizes"), np.int64)
    hellos = [h.set_size for h in tap.received(ACTIVE, Hello)]
    expected = [int(s) for s, m in zip(sizes, mine, strict=True) if s and m]
    wrong = int(np.sum(sizes != truth)) + int(sizes.sum() != len(peer_ids)) + \
        (len(hellos) != len(expected)) + sum(a != b for a, b in zip(hellos, expected, strict=False))
    return EmpiricalFinding(
        ACTIVE, SIZES, float(wrong), 0.0,
        f"of {buckets} bucket sizes, {int(np.sum(sizes != truth))} differ from the keyed histogram of the passive "
        f"party's {len(peer_ids)} IDs (sum {int(sizes.sum())}); the {len(hellos)} per-bucket align.hello set sizes "
        f"{'equal' if hellos == expected else 'differ from'} the sizes of the buckets non-empty at both parties: "
        "the histogram is the only new size information",
        attacks=("align.bucket_sizes", "align.hello"), protection=None, flagged=wrong > 0, samples=buckets,
        detects="any one size figure beyond the declared histogram", min_effect=0.0)


def _membership_finding(tap: AuditTap, key: bytes, own: Sequence[bytes], peer: Sequence[bytes],
                        buckets: int) -> EmpiricalFinding:
    sizes = np.asarray(tap.received(ACTIVE, BucketSizes)[0].sizes, np.int64)
    own_set, peer_set = set(own), set(peer)
    common = [x for x in own if x in peer_set]  # the active party's output in mode both
    rest = sizes - np.bincount(bucket_index(key, common, buckets), minlength=buckets)
    members = [y for y in peer if y not in own_set]
    # non-members of the same form as the demo's IDs (CUST- and six digits), outside both sets
    pool = (f"CUST-{i:06d}".encode() for i in range(10**6))
    others = list(itertools.islice((c for c in pool if c not in own_set and c not in peer_set), len(members)))
    if len(members) < 20:
        return not_measured(ACTIVE, MEMBERSHIP, ("align.bucket_sizes",), None,
                            f"only {len(members)} passive IDs outside the active party's set")
    score_m = rest[bucket_index(key, members, buckets)]
    score_o = rest[bucket_index(key, others, buckets)]
    auc, p, flags_at = membership_auc(score_m, score_o)
    lam = len(members) / buckets
    big = (2**31 - FIXED_BYTES) // BYTES_PER_ID  # IDs per bucket under a 2 GiB budget
    return EmpiricalFinding(
        ACTIVE, MEMBERSHIP, auc, 0.5,
        f"scores {len(members)} passive IDs outside its set and {len(others)} non-members by the count left in "
        f"their bucket once its own common rows are subtracted: AUC {auc:.3f} at {lam:.1f} such IDs per bucket "
        f"(predicted ≈ {0.5 + 1 / math.sqrt(4 * math.pi * lam):.3f}; at a 2 GiB budget's ~{big:,} "
        f"IDs per bucket ≈ {0.5 + 1 / math.sqrt(4 * math.pi * big):.4f}): a per-bucket histogram of the peer's set, "
        "by design",
        attacks=("align.bucket_sizes",), protection=None, flagged=p < ALPHA, p_value=p,
        samples=len(members) + len(others), detects=f"AUC ≥ {flags_at:.3f}", min_effect=flags_at - 0.5)


def bucket_findings() -> tuple[list[EmpiricalFinding], Transcript]:
    """Run the demo files bucketed (:data:`AUDIT_BUCKETS` buckets, ECDH, both learn) and attack the sizes."""
    data = importlib.resources.files("vflcrypto") / "data"
    tap = AuditTap()
    with importlib.resources.as_file(data / "bank.csv") as bank, \
            importlib.resources.as_file(data / "shop.csv") as shop, tempfile.TemporaryDirectory() as tmp:
        left, right = read_id_table(bank, "id"), read_id_table(shop, "id")
        out = Path(tmp)
        part = align_files_bucketed(left, right, protocol="ecdh", reveal="both", work_dir=out / "work",
                                    paths={"left": out / "l.csv", "right": out / "r.csv"}, budget=FIXED_BYTES, tap=tap,
                                    propose=AUDIT_BUCKETS)
        own, peer = psi.canonicalize_ids(left.ids).encoded, psi.canonicalize_ids(right.ids).encoded
    try:
        key = tap.held_one(ACTIVE, "bucket_key")
    except AuditError as exc:
        why = f"no bucket key recorded ({exc})"
        return ([not_measured(ACTIVE, n, ("align.bucket_sizes",), None, why) for n in (SIZES, MEMBERSHIP)],
                part["_transcript"])
    buckets = part["buckets"]
    assert tap.held_one(PASSIVE, "bucket_key") == key  # both parties drew the same key
    return ([_sizes_finding(tap, key, peer, buckets), _membership_finding(tap, key, own, peer, buckets)],
            part["_transcript"])
