"""The checks a protocol's audit must run, declared like its messages, so that no check can go blind.

A :class:`Check` names one attack on one declared protection of one or more message
kinds, the failure it exists for (a mask dropped, a mask reused, a shuffle skipped, a
ciphertext without randomness) and that failure's effect in the finding's units (a
Kolmogorov–Smirnov distance, a rank correlation, a count of ciphertexts read without the
key). Each protocol lists its checks in its specification; :func:`expect` holds an
audit's findings to them:

* a declared check that produced no finding (its messages were missing, a helper
  failed) becomes a finding with the verdict *not measured*, never silence;
* a check whose smallest detectable effect at its sample size is not below the effect
  of its failure is *underpowered*: it could not have flagged the failure, so it is
  *not measured* as well (unless it flagged anyway);
* every finding of a declared check carries the check's effect, so the report and
  ``vflcrypto audit NAME --json`` show the power beside the verdict.

An audit with a check *not measured* fails (``vflcrypto audit`` exits 1 and names the
check and why; the suite's honest-run test fails). The privacy-mutation suite proves
each check with its own mutation: a seam that breaks exactly that protection must make
exactly that check flag.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..runtime.declarations import Protection
from .ledger import AuditOutcome, EmpiricalFinding

__all__ = ["CORRELATION_FAILURE", "EXACT", "FLOODING_FAILURE", "KS_MASK_FAILURE", "RANK_FAILURE", "Check",
           "checks_table", "expect", "flooding_check", "mask_checks", "unrandomized_check", "verified_result"]

#: the KS distance a dropped or reused mask leaves (values, or consecutive differences, bunched at the ends of
#: the range, so the empirical CDF jumps by about one half): the distance a mask check must detect
KS_MASK_FAILURE = 0.5
#: the |Pearson r| between masked values and their secrets that a check must detect (a dropped mask gives about 1)
CORRELATION_FAILURE = 0.5
#: the rank correlation an order check must detect (a sender's order that survives in half of the items)
RANK_FAILURE = 0.5
#: the variance shortfall a flooding check must detect (:mod:`vflcrypto.audit.noise`): flooding at half its
#: declared σ leaves a quarter of the variance (0.75); switched off, none (1.0)
FLOODING_FAILURE = 0.75
#: the effect of an exact check (one ciphertext read without the key, one seed recovered): always in reach
EXACT = 0.0


@dataclass(frozen=True)
class Check:
    """One declared check: the finding ``name`` attacks ``kinds`` for ``protection`` and must detect ``failure``.

    ``effect`` is the size of that failure in the finding's units; the check has power
    when its finding's ``min_effect`` is below it (``EXACT`` checks always have).
    """

    name: str
    kinds: tuple[str, ...]
    protection: Protection
    failure: str
    effect: float = KS_MASK_FAILURE

    def covers(self, kind: str, protection: Protection) -> bool:
        return protection is self.protection and kind in self.kinds


def mask_checks(what: str, kind: str, *, real: bool = False, fresh: bool = True,
                correlation: Protection | None = Protection.MASKED) -> tuple[Check, ...]:
    """The checks of :func:`~vflcrypto.audit.attacks.ring_mask_findings` (``real``:
    :func:`~vflcrypto.audit.attacks.real_mask_findings`) named after ``what``: uniformity (a dropped mask),
    freshness (a mask reused across messages; not with ``fresh=False``, where one key serves one message)
    and, unless ``correlation`` is ``None``, the correlation with the secrets (a dropped mask), labelled
    with the protection that check tests."""
    uniform = f"{what}: uniform on [-R, R]" if real else f"{what}: uniform over Z_M"
    out = [Check(uniform, (kind,), Protection.MASKED, "a dropped mask (values bunched at the ends of the range)")]
    if fresh:
        out.append(Check(f"{what}: fresh mask per message", (kind,), Protection.MASKED,
                         "a mask reused across messages (it cancels in their differences)"))
    if correlation is not None:
        out.append(Check(f"{what}: correlation with the secret", (kind,), correlation,
                         "a dropped mask (what is received is the secret itself)", CORRELATION_FAILURE))
    return tuple(out)


def unrandomized_check(kind: str) -> Check:
    """The check of :func:`~vflcrypto.audit.attacks.unrandomized_finding` on ``kind`` (a ciphertext without
    randomness is read without the key, exactly)."""
    return Check(f"{kind}: ciphertexts read without the key", (kind,), Protection.CIPHERTEXT,
                 "a ciphertext encrypted or sent without fresh randomness (c = 1 + m n mod n^2)", EXACT)


def flooding_check(name: str, kind: str) -> Check:
    """The check of :func:`~vflcrypto.audit.noise.flooding_finding` on ``kind``: its CKKS decryptions carry
    their declared flooding noise."""
    return Check(name, (kind,), Protection.FLOODED,
                 "a decryption released without its flooding noise (or with half of it): C's key-dependent CKKS "
                 "error reaches the receiver", FLOODING_FAILURE)


def verified_result(observer: str, name: str, error: float, tolerance: float, description: str, *,
                    attacks: Sequence[str], samples: int) -> EmpiricalFinding:
    """A by-design finding that verifies its figure: what ``observer`` learns by design (a secure sum, a
    model) recomputed from what it received and compared with an independent reference; ``error`` (the
    largest deviation) above ``tolerance`` makes the verdict *wrong result*, a failure of the audit."""
    ok = bool(error <= tolerance)
    return EmpiricalFinding(observer, name, float(error), tolerance,
                            f"{description}; largest deviation {error:.3g} (tolerance {tolerance:.3g}): "
                            f"{'as expected' if ok else 'WRONG'}", attacks=tuple(attacks), flagged=True,
                            samples=samples, detects=f"any deviation above {tolerance:.3g}", correct=ok)


def _not_run(check: Check) -> EmpiricalFinding:
    return EmpiricalFinding(
        "audit", check.name, float("nan"), None,
        f"the check did not run: the audit produced no finding for it (it exists to detect {check.failure})",
        attacks=check.kinds, protection=check.protection, measured=False, effect=check.effect)


def _held_to(finding: EmpiricalFinding, check: Check) -> EmpiricalFinding:
    """``finding`` with its check's effect, and *not measured* if it had too little power to flag it."""
    underpowered = (finding.measured and not finding.flagged and check.effect > EXACT
                    and (finding.min_effect is None or finding.min_effect >= check.effect))
    if not underpowered:
        return dataclasses.replace(finding, effect=check.effect)
    have = "no stated power" if finding.min_effect is None else f"detects only >= {finding.min_effect:.3g}"
    return dataclasses.replace(
        finding, effect=check.effect, measured=False,
        description=f"{finding.description} (UNDERPOWERED: {have} at {finding.samples} samples, but "
                    f"{check.failure} shows as {check.effect:.3g})")


def expect(outcome: AuditOutcome, checks: Sequence[Check]) -> AuditOutcome:
    """``outcome`` held to its protocol's declared ``checks`` (see the module docstring)."""
    by_name = {c.name: c for c in checks}
    seen = {f.name for f in outcome.findings}
    findings = [(_held_to(f, by_name[f.name]) if f.name in by_name else f) for f in outcome.findings]
    findings += [_not_run(c) for c in checks if c.name not in seen]
    return dataclasses.replace(outcome, findings=tuple(findings))


def checks_table(checks: Iterable[Check]) -> str:
    """SECURITY.md's Markdown table of a protocol's checks: per protection, the check and the failure it detects."""
    lines = ["| protection | message kinds | check | fails on | effect it must detect |", "|---|---|---|---|---|"]
    for c in sorted(checks, key=lambda c: (c.protection.value, c.kinds, c.name)):
        effect = "exact (any occurrence)" if c.effect == EXACT else f"{c.effect:.2g}"
        kinds = ", ".join(f"`{k}`" for k in c.kinds)
        lines.append(f"| {c.protection.value} | {kinds} | {c.name} | {c.failure} | {effect} |")
    return "\n".join(lines)
