"""Attacks on what each party received in a VOLE PSI session (read from the audit tap).

Each attack uses only what its observer holds (its IDs, its own VOLE secrets, the public
keys both derive from the hellos); the other side's secrets score it.

* the sender's view of the IKNP matrix against the receiver's correlated-OT choice bits
  (the silent VOLE's noise; ``align.vole_matrix``, masked);
* the receiver's attempt to open the GGM level sums it did not choose with its own OT keys
  (``align.vole_trees``, masked: one opened sum gives it the punctured leaf, and so Δ);
* the sender's decoding of the masked OKVS at its own IDs, against ``H(x)`` (``align.okvs_masked``,
  masked: without the VOLE's mask a common ID decodes to its own ``H(x)``);
* the receiver's dictionary attack on the sender's values with its own ``C`` (``align.oprf_values``,
  blinded: with Δ = 0 the sender's values are the receiver's own function of any ID);
* the receiver's recovery of the bits of Δ from the base-OT points (``align.ot_choice``, blinded);
* the order of the sender's values against the sender's file (``align.oprf_values``, shuffled).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from vflcrypto.audit.attacks import adjacent_order_finding, not_measured
from vflcrypto.audit.checks import EXACT, Check
from vflcrypto.audit.ledger import EmpiricalFinding
from vflcrypto.errors import AuditError
from vflcrypto.psi import kkrt, okvs, rr22, vole
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection

from .kkrt_audit import bit_agreement_finding, choice_finding
from .messages import ACTIVE, PASSIVE, OkvsMasked, OprfValues, VoleMatrix, VoleTrees

__all__ = ["RR22_CHECKS", "rr22_findings"]

MATRIX = "the receiver's VOLE noise choices in the IKNP matrix"
TREES = "the GGM level sums off the receiver's choices"
OKVS = "the receiver's OKVS decoded at the sender's IDs"
DICTIONARY = "dictionary attack on the sender's VOLE PSI values"
CHOICE = "the sender's base-OT choice bits (its VOLE key Δ)"
ORDER = "order of the sender's VOLE PSI values (sender's file)"

#: the VOLE PSI checks of a declared protection (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
RR22_CHECKS = (
    Check(MATRIX, ("align.vole_matrix",), Protection.MASKED,
          "choice bits sent without their PRG masks (every bit equals the receiver's choice bit)", 0.9),
    Check(TREES, ("align.vole_trees",), Protection.MASKED,
          "both sums of a level under one OT key (the receiver opens the side it did not choose)", EXACT),
    Check(OKVS, ("align.okvs_masked",), Protection.MASKED,
          "the OKVS sent without the VOLE's mask (common IDs decode to their own H(x))", EXACT),
    Check(DICTIONARY, ("align.oprf_values",), Protection.BLINDED,
          "a VOLE key Δ the receiver can guess (Δ = 0: every candidate ID's value computable)", EXACT),
    Check(CHOICE, ("align.ot_choice",), Protection.BLINDED,
          "one base-OT scalar for every point (the bits of Δ readable)", 0.9),
    Check(ORDER, ("align.oprf_values",), Protection.SHUFFLED,
          "values sent in the sender's file order", 0.9),
)


def _matrix_finding(tap: AuditTap) -> EmpiricalFinding:
    msgs = tap.received(PASSIVE, VoleMatrix)
    try:
        choice = np.asarray(tap.held_one(ACTIVE, "rr22_cot_choice"), np.uint8)
    except AuditError as exc:
        return not_measured(PASSIVE, MATRIX, ("align.vole_matrix",), Protection.MASKED, str(exc))
    if len(msgs) != 1:
        return not_measured(PASSIVE, MATRIX, ("align.vole_matrix",), Protection.MASKED,
                            f"{len(msgs)} IKNP matrices received, expected one")
    u = np.frombuffer(msgs[0].columns, np.uint8).reshape(vole.BITS, -1)
    same = np.unpackbits(~(u ^ np.packbits(choice, bitorder="little")[None, :]))
    return bit_agreement_finding(
        PASSIVE, MATRIX, "align.vole_matrix", int(same.sum()), same.size,
        f"share of the {same.size:,} IKNP-matrix bits the sender received that equal the receiver's secret "
        "choice bit of that correlated OT (the VOLE noise's positions and values): one half when masked")


def _trees_finding(tap: AuditTap) -> EmpiricalFinding:
    """The receiver unmasks each level's *other* sum with the one key it holds; does it get the true sum?"""
    msgs = tap.received(ACTIVE, VoleTrees)
    try:
        choice = np.asarray(tap.held_one(ACTIVE, "rr22_cot_choice"), np.uint8)
        t_rows = np.asarray(tap.held_one(ACTIVE, "rr22_t_rows"), np.uint8)
        truth = np.asarray(tap.held_one(PASSIVE, "rr22_level_sums"), np.uint8)
    except AuditError as exc:
        return not_measured(ACTIVE, TREES, ("align.vole_trees",), Protection.MASKED, str(exc))
    if len(msgs) != 1:
        return not_measured(ACTIVE, TREES, ("align.vole_trees",), Protection.MASKED,
                            f"{len(msgs)} tree messages received, expected one")
    instances, trees, depth = truth.shape[:3]
    sums = np.frombuffer(msgs[0].sums, np.uint8).reshape(truth.shape)
    per = trees * (vole.BITS + depth)
    index = (np.arange(instances)[:, None] * per + trees * vole.BITS + np.arange(trees * depth)[None, :]).ravel()
    key = vole._ot_hash(t_rows[index], index).reshape(instances, trees, depth, 16)
    other = 1 - choice[index].reshape(instances, trees, depth)
    opened = np.take_along_axis(sums, other[..., None, None], axis=3)[..., 0, :] ^ key
    real = np.take_along_axis(truth, other[..., None, None], axis=3)[..., 0, :]
    hits = int((opened == real).all(axis=-1).sum())
    return EmpiricalFinding(
        ACTIVE, TREES, float(hits), 0.0,
        f"of the {other.size:,} level sums it did not choose, how many its own OT key opens to the sender's "
        "true sum (one opened sum on a punctured path gives it that leaf, and with β the key Δ)",
        attacks=("align.vole_trees",), protection=Protection.MASKED, flagged=hits > 0, samples=other.size,
        detects="any one sum opened", min_effect=0.0)


def _okvs_finding(tap: AuditTap, enc: Mapping[str, Sequence[bytes]]) -> EmpiricalFinding:
    """The sender decodes what it received at each of its own IDs and compares with the public H(x)."""
    chunks = tap.received(PASSIVE, OkvsMasked)
    try:
        okvs_key, _ = tap.held_one(PASSIVE, "rr22_public_keys")
    except AuditError as exc:
        return not_measured(PASSIVE, OKVS, ("align.okvs_masked",), Protection.MASKED, str(exc))
    own = list(enc[PASSIVE])
    if not chunks or not own:
        return not_measured(PASSIVE, OKVS, ("align.okvs_masked",), Protection.MASKED,
                            f"{len(chunks)} masked-OKVS chunks received, {len(own)} own IDs")
    masked = np.frombuffer(b"".join(c.values for c in chunks), np.uint8).reshape(-1, 16)
    starts, bands, values = okvs.rows(kkrt.item_hashes(own), okvs_key, len(masked))
    hits = int((okvs.decode(masked, starts, bands) == values).all(axis=1).sum())
    return EmpiricalFinding(
        PASSIVE, OKVS, float(hits), 0.0,
        f"of its {len(own)} own IDs, how many decode from the masked OKVS to their own H(x) (a common ID "
        "does when the OKVS is sent unmasked; with the VOLE's mask none does)",
        attacks=("align.okvs_masked",), protection=Protection.MASKED, flagged=hits > 0, samples=len(own),
        detects="any one ID's membership", min_effect=0.0)


def _dictionary_finding(tap: AuditTap, candidates: Sequence[bytes], own: Sequence[bytes]) -> EmpiricalFinding:
    """The receiver evaluates its own function ``H'(Decode(C, x))`` on IDs outside its set."""
    outside = sorted(set(candidates) - set(own))
    values = tap.received(ACTIVE, OprfValues)
    try:
        okvs_key, hash_key = tap.held_one(ACTIVE, "rr22_public_keys")
        c = np.asarray(tap.held_one(ACTIVE, "rr22_vole_c"), np.uint8)
    except AuditError as exc:
        return not_measured(ACTIVE, DICTIONARY, ("align.oprf_values",), Protection.BLINDED, str(exc))
    if not values or not outside:
        return not_measured(ACTIVE, DICTIONARY, ("align.oprf_values",), Protection.BLINDED,
                            f"{len(values)} chunks of values received, {len(outside)} candidate IDs to test")
    received = {bytes(v) for v in np.frombuffer(b"".join(m.values for m in values), np.uint8)
                .reshape(-1, rr22.OUTPUT_BYTES)}
    starts, bands, _ = okvs.rows(kkrt.item_hashes(outside), okvs_key, len(c))
    guesses = rr22.receiver_values(c, starts, bands, hash_key)
    hits = sum(bytes(g) in received for g in guesses)
    return EmpiricalFinding(
        ACTIVE, DICTIONARY, float(hits), 0.0,
        f"{len(outside)} candidate IDs outside its own set, evaluated with its own VOLE output C (the "
        "sender's function when Δ = 0), matched against the values the sender sent",
        attacks=("align.oprf_values",), protection=Protection.BLINDED, flagged=hits > 0,
        samples=len(outside), detects="any one candidate ID recovered", min_effect=0.0)


def _order_finding(tap: AuditTap, enc: Mapping[str, Sequence[bytes]]) -> EmpiricalFinding:
    """Do the values it matched arrive in the sender's file order?"""
    values = np.frombuffer(b"".join(m.values for m in tap.received(ACTIVE, OprfValues)), np.uint8)
    try:
        own_values = np.asarray(tap.held_one(ACTIVE, "rr22_own_values"), np.uint8)
    except AuditError as exc:
        return not_measured(ACTIVE, ORDER, ("align.oprf_values",), Protection.SHUFFLED, str(exc))
    row_of = {bytes(v): i for i, v in enumerate(own_values)}
    sender_row = {x: i for i, x in enumerate(enc[PASSIVE])}
    hits = [row_of[bytes(v)] for v in values.reshape(-1, rr22.OUTPUT_BYTES) if bytes(v) in row_of]
    in_file = [sender_row[enc[ACTIVE][r]] for r in hits]
    return adjacent_order_finding(
        ACTIVE, ORDER, "align.oprf_values", [np.asarray(in_file)],
        f"share of neighbours among the {len(hits)} values it matched, in arrival order, whose rows in the "
        "sender's file increase (an unshuffled sender sends them in its own order)")


def rr22_findings(tap: AuditTap, enc: Mapping[str, Sequence[bytes]], universe: Sequence[bytes]
                  ) -> list[EmpiricalFinding]:
    """Every VOLE PSI attack on the session recorded in ``tap`` (active = receiver)."""
    return [_matrix_finding(tap), _trees_finding(tap), _okvs_finding(tap, enc),
            _dictionary_finding(tap, universe, enc[ACTIVE]),
            choice_finding(tap, CHOICE, "rr22_ot_point", "rr22_delta_bits"), _order_finding(tap, enc)]
