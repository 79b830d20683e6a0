"""Attacks on what each party received in a KKRT session (read from the audit tap).

* the sender's view of the OT-extension matrix against the receiver's secret code words
  (``align.oprf_matrix``, masked);
* the receiver's recovery of the sender's base-OT choice bits from their points
  (``align.ot_choice``, blinded);
* the receiver's dictionary attack on the sender's OPRF values under the keys it could
  guess (``align.oprf_values``, blinded);
* the order of the sender's values against the table rows they belong to and against
  the sender's own file (``align.oprf_values``, shuffled).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist

import nacl.bindings as sodium
import numpy as np

from vflcrypto.audit.attacks import ALPHA, accuracy_finding, adjacent_order_finding, binomial_sf, not_measured
from vflcrypto.audit.checks import EXACT, Check
from vflcrypto.audit.ledger import EmpiricalFinding
from vflcrypto.errors import AuditError
from vflcrypto.psi import kkrt, ot
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection

from .messages import ACTIVE, PASSIVE, OprfMatrix, OprfValues, OtChoice

__all__ = ["KKRT_CHECKS", "bit_agreement_finding", "choice_finding", "kkrt_findings"]

_Z = NormalDist().inv_cdf(1 - ALPHA / 2)  # two-sided critical value at the audit's level

MATRIX = "the receiver's code words in the OT-extension matrix"
CHOICE = "the sender's base-OT choice bits (its OPRF key)"
DICTIONARY = "dictionary attack on the sender's OPRF values"
ORDER_ROWS = "order of the sender's OPRF values (table rows)"
ORDER_FILE = "order of the sender's OPRF values (sender's file)"

#: the KKRT checks of a declared protection (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
KKRT_CHECKS = (
    Check(MATRIX, ("align.oprf_matrix",), Protection.MASKED,
          "code words sent without their PRG masks (every bit equals the receiver's code bit)", 0.9),
    Check(CHOICE, ("align.ot_choice",), Protection.BLINDED,
          "one base-OT scalar for every point (the sender's choice bits, its OPRF key, readable)", 0.9),
    Check(DICTIONARY, ("align.oprf_values",), Protection.BLINDED,
          "an OPRF key the receiver can guess (every candidate ID's value computable)", EXACT),
    *(Check(name, ("align.oprf_values",), Protection.SHUFFLED,
            "OPRF values sent in the sender's table or file order", 0.9) for name in (ORDER_ROWS, ORDER_FILE)),
)


def _rows(blob: bytes, width: int) -> np.ndarray:
    return np.frombuffer(blob, np.uint8).reshape(-1, width)


def _matrix_finding(tap: AuditTap) -> EmpiricalFinding:
    """How often a bit the sender received equals the receiver's code bit there (½ if masked)."""
    chunks = tap.received(PASSIVE, OprfMatrix)
    try:
        codes = tap.held(ACTIVE, "kkrt_codes")
    except AuditError as exc:
        codes, why = [], str(exc)
    if not chunks or len(codes) != len(chunks):
        return not_measured(PASSIVE, MATRIX, ("align.oprf_matrix",), Protection.MASKED,
                          f"{len(chunks)} matrix chunks received, {len(codes)} code blocks recorded"
                          + (f" ({why})" if not codes and chunks else ""))
    equal = total = 0
    for msg, c in zip(chunks, codes, strict=True):
        u = np.frombuffer(msg.columns, np.uint8).reshape(kkrt.WIDTH, -1)
        same = np.unpackbits(~(u ^ ot.transpose_bits(c)))
        equal, total = equal + int(same.sum()), total + same.size
    return bit_agreement_finding(
        PASSIVE, MATRIX, "align.oprf_matrix", equal, total,
        f"share of the {total:,} matrix bits the sender received that equal the receiver's secret code "
        "bit in the same place (its IDs, cuckoo-placed): one half when every column is masked")


def bit_agreement_finding(observer: str, name: str, kind: str, equal: int, total: int,
                          description: str) -> EmpiricalFinding:
    """A masked bit matrix against the secret bits under it: the share of equal bits is ½ when masked
    (two-sided binomial test at the audit's level)."""
    p = min(1.0, 2 * min(binomial_sf(equal, total, 0.5), binomial_sf(total - equal, total, 0.5)))
    effect = _Z * 0.5 / math.sqrt(max(1, total))
    return EmpiricalFinding(
        observer, name, equal / max(1, total), 0.5, description,
        attacks=(kind,), protection=Protection.MASKED, flagged=p < ALPHA, p_value=p,
        samples=total, detects=f"a share outside 0.5 ± {effect:.4f}", min_effect=0.5 + effect)


def choice_finding(tap: AuditTap, name: str = CHOICE, point_label: str = "kkrt_ot_point",
                   truth_label: str = "kkrt_choice") -> EmpiricalFinding:
    """The receiver guesses s_j = 1 where B_j − A is another of the sender's points (KKRT's s or the VOLE's Δ)."""
    msgs = tap.received(ACTIVE, OtChoice)
    try:
        a_point = tap.held_one(ACTIVE, point_label)
        truth = np.asarray(tap.held_one(PASSIVE, truth_label), np.uint8)
    except AuditError as exc:
        msgs, why = [], str(exc)
    else:
        why = f"{len(msgs)} base-OT choice messages received, expected one"
    if len(msgs) != 1 or not msgs[0].points:
        return not_measured(ACTIVE, name, ("align.ot_choice",), Protection.BLINDED, why)
    (msg,) = msgs
    points = [msg.points[i : i + ot.POINT_BYTES] for i in range(0, len(msg.points), ot.POINT_BYTES)]
    known = set(points)
    guess = np.asarray([bytes(sodium.crypto_core_ed25519_sub(b, a_point)) in known for b in points], np.uint8)
    return accuracy_finding(
        ACTIVE, name, guess, truth, 0.5,
        attacks=("align.ot_choice",), protection=Protection.BLINDED,
        description="marks s_j = 1 where B_j − A equals another received point (a base-OT scalar "
                    "used twice); baseline = a coin flip per bit")


def _dictionary_finding(tap: AuditTap, candidates: Sequence[bytes], own: Sequence[bytes]) -> EmpiricalFinding:
    """Evaluate the sender's OPRF on candidate IDs under the guessable key s = 1…1.

    (s = 0…0 would give every candidate the receiver's own output at that row, which says
    nothing about the candidate; values equal to its own outputs are left out.)
    """
    own_set = set(own)
    outside = [c for c in candidates if c not in own_set]
    values = tap.received(ACTIVE, OprfValues)
    try:
        hash_key, *code_keys = tap.held_one(ACTIVE, "kkrt_public_keys")
        t = np.concatenate(tap.held(ACTIVE, "kkrt_t"))
        codes = np.concatenate(tap.held(ACTIVE, "kkrt_codes"))
        bins = tap.held_one(ACTIVE, "kkrt_bins")
        own_values = tap.held(ACTIVE, "kkrt_row_values")
    except AuditError as exc:
        return not_measured(ACTIVE, DICTIONARY, ("align.oprf_values",), Protection.BLINDED, str(exc))
    if not values or not outside:
        return not_measured(ACTIVE, DICTIONARY, ("align.oprf_values",), Protection.BLINDED,
                          f"{len(values)} chunks of OPRF values received, {len(outside)} candidate IDs to test")
    received = {bytes(v) for v in _rows(b"".join(m.values for m in values), kkrt.OUTPUT_BYTES)}
    received -= {bytes(v) for _, vals in own_values for v in vals}
    hits = 0
    if bins:
        h0 = kkrt.item_hashes(outside)
        locs = kkrt.locations(h0, hash_key, bins)
        found = np.zeros(len(outside), bool)
        for h in range(kkrt.HASHES):
            rows = locs[:, h]
            cand = kkrt.code_words(h0, np.full(len(outside), h), code_keys)
            vals = kkrt.hash_rows(t[rows] ^ codes[rows] ^ cand, rows)
            found |= np.asarray([bytes(v) in received for v in vals])
        hits = int(found.sum())
    return EmpiricalFinding(
        ACTIVE, DICTIONARY, float(hits), 0.0,
        f"{len(outside)} candidate IDs outside its own set, evaluated at their cuckoo bins under the "
        f"OPRF key it can guess (s all ones), matched against the {len(received)} values the sender "
        "sent that are not its own outputs",
        attacks=("align.oprf_values",), protection=Protection.BLINDED, flagged=hits > 0,
        samples=len(outside), detects="any one candidate ID recovered", min_effect=0.0)


def _order_findings(tap: AuditTap, enc: Mapping[str, Sequence[bytes]]) -> list[EmpiricalFinding]:
    """Does the arrival order of the values it matched follow the table rows, or the sender's file?"""
    values = _rows(b"".join(m.values for m in tap.received(ACTIVE, OprfValues)), kkrt.OUTPUT_BYTES)
    try:
        table = tap.held_one(ACTIVE, "kkrt_table")  # item per table row (-1: empty)
        held = tap.held(ACTIVE, "kkrt_row_values")
    except AuditError as exc:
        return [not_measured(ACTIVE, n, ("align.oprf_values",), Protection.SHUFFLED, str(exc))
                for n in (ORDER_ROWS, ORDER_FILE)]
    row_of = {bytes(v): int(r) for rows, vals in held for r, v in zip(rows, vals, strict=True)}  # own output -> row
    sender_row = {x: i for i, x in enumerate(enc[PASSIVE])}
    hits = [row_of[bytes(v)] for v in values if bytes(v) in row_of]  # table rows, in arrival order
    in_file = [sender_row[enc[ACTIVE][int(table[r])]] for r in hits]
    n = len(hits)
    return [
        adjacent_order_finding(
            ACTIVE, ORDER_ROWS, "align.oprf_values",
            [np.asarray(hits)], f"share of neighbours among the {n} values it matched, in arrival order, whose "
                                "cuckoo-table rows increase (an unshuffled sender sends them by row)"),
        adjacent_order_finding(
            ACTIVE, ORDER_FILE, "align.oprf_values",
            [np.asarray(in_file)], f"share of neighbours among the {n} values it matched, in arrival order, "
                                   "whose rows in the sender's file increase (an unshuffled sender sends "
                                   "them by its own row within each hash function)"),
    ]


def kkrt_findings(tap: AuditTap, enc: Mapping[str, Sequence[bytes]], universe: Sequence[bytes]
                  ) -> list[EmpiricalFinding]:
    """Every KKRT attack on the session recorded in ``tap`` (active = receiver)."""
    return [_matrix_finding(tap), choice_finding(tap), _dictionary_finding(tap, universe, enc[ACTIVE]),
            *_order_findings(tap, enc)]
