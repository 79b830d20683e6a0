"""The audit of a run: its transcript joined with the leakage declarations, per receiving role.

:func:`audit` reports, per role, every message received, its protection, what it reveals
and its bytes (:class:`AuditReport`); empirical checks add :class:`EmpiricalFinding` objects
and :class:`Figure` objects, gathered with the ledger in one :class:`AuditOutcome` per
protocol audit. :func:`render_security_md` regenerates the per-protocol tables in
SECURITY.md from the declarations (:mod:`vflcrypto.runtime.declarations`), so the document
cannot drift from the code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import AuditError, UndeclaredMessageError
from ..runtime.declarations import Protection, declaration_for, declarations

if TYPE_CHECKING:
    from ..runtime.transcript import Transcript

__all__ = [
    "INAPPLICABLE",
    "VERDICTS",
    "WRONG",
    "AuditOutcome",
    "AuditReport",
    "AuditRow",
    "EmpiricalFinding",
    "Figure",
    "RoleVerdict",
    "audit",
    "audit_runs",
    "markdown_table",
    "render_security_md",
    "role_verdicts",
]


# --------------------------------------------------------------------------- audit


@dataclass(frozen=True)
class AuditRow:
    """One message kind as seen by one receiving party."""

    receiver: str
    receiver_role: str
    sender: str
    kind: str
    count: int
    bytes: int
    protection: str
    reveals: str
    declared: bool


@dataclass(frozen=True)
class AuditReport:
    """Per receiving party: every message kind it received, how protected, what it reveals."""

    rows: tuple[AuditRow, ...]

    @property
    def undeclared(self) -> list[AuditRow]:
        return [r for r in self.rows if not r.declared]

    def check(self) -> None:
        """Raise :class:`UndeclaredMessageError` if any received message was undeclared."""
        if self.undeclared:
            kinds = sorted({r.kind for r in self.undeclared})
            raise UndeclaredMessageError(f"undeclared message kinds in transcript: {kinds}")

    def for_party(self, party: str) -> list[AuditRow]:
        return [r for r in self.rows if r.receiver == party]

    def kinds_received(self, party: str) -> set[str]:
        return {r.kind for r in self.for_party(party)}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for r in self.rows:
            party = out.setdefault(r.receiver, {"role": r.receiver_role, "received": []})
            party["received"].append(
                {
                    "kind": r.kind,
                    "from": r.sender,
                    "count": r.count,
                    "bytes": r.bytes,
                    "protection": r.protection,
                    "reveals": r.reveals,
                    "declared": r.declared,
                }
            )
        return {"parties": out}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_text(self) -> str:
        lines: list[str] = []
        for party in dict.fromkeys(r.receiver for r in self.rows):
            rows = self.for_party(party)
            lines.append(f"{party} ({rows[0].receiver_role}) received:")
            for r in rows:
                mark = "" if r.declared else "  ** UNDECLARED **"
                lines.append(
                    f"  {r.kind:<32} from {r.sender:<14} x{r.count:<4} {r.bytes:>12,} B  "
                    f"[{r.protection}]{mark}"
                )
                lines.append(f"      reveals: {r.reveals}")
        return "\n".join(lines) if lines else "(no messages)"


def audit_runs(runs: Mapping[str, Transcript]) -> tuple[AuditReport, tuple[tuple[str, AuditReport], ...]]:
    """The joined report of several runs (e.g. a protocol's plain and secure mode) and one section per run.

    The sections keep what each role received in each run apart (a reader sees that a
    party got plaintext residuals in the plain run and ciphertexts in the secure one,
    not both in one run); the joined report is what every check over all kinds uses.
    """
    from ..runtime.transcript import Transcript as _Transcript

    merged = _Transcript()
    for t in runs.values():
        merged.merge(t)
    return audit(merged), tuple((label, audit(t)) for label, t in runs.items())


def audit(transcript: Transcript) -> AuditReport:
    """Join the received messages of ``transcript`` with their declarations."""
    grouped: dict[tuple[str, str, str, str], list[int]] = {}
    for e in transcript.received():
        key = (e.receiver, e.receiver_role, e.sender, e.kind)
        acc = grouped.setdefault(key, [0, 0])
        acc[0] += 1
        acc[1] += e.nbytes
    rows = []
    for (receiver, role, sender, kind), (count, nbytes) in grouped.items():
        try:
            decl = declaration_for(kind)
            rows.append(AuditRow(receiver, role, sender, kind, count, nbytes,
                                 decl.protection_label, decl.reveals, True))
        except UndeclaredMessageError:
            rows.append(AuditRow(receiver, role, sender, kind, count, nbytes,
                                 "?", "UNDECLARED", False))
    return AuditReport(tuple(rows))


@dataclass(frozen=True)
class Figure:
    """A picture of what an attack saw, for the HTML report: a ``matrix`` (counts, row and column labels,
    e.g. true classes against the clusters an attacker found) or a ``histogram`` (counts per labelled bin)."""

    kind: str
    title: str
    values: tuple[tuple[float, ...], ...]
    rows: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()

    @classmethod
    def contingency(cls, title: str, truth: Any, guess: Any, row: str = "class", column: str = "cluster") -> Figure:
        """Counts of every (true label, attacker's group) pair."""
        import numpy as np

        t, g = np.asarray(truth).ravel(), np.asarray(guess).ravel()
        ts, gs = np.unique(t), np.unique(g)
        m = tuple(tuple(float(np.count_nonzero((t == a) & (g == b))) for b in gs) for a in ts)
        return cls("matrix", title, m, tuple(f"{row} {a}" for a in ts.tolist()),
                   tuple(f"{column} {b}" for b in gs.tolist()))

    @classmethod
    def histogram(cls, title: str, counts: Sequence[float], bins: Sequence[str]) -> Figure:
        return cls("histogram", title, (tuple(float(c) for c in counts),), (), tuple(bins))


WRONG, FAILED, NOT_MEASURED, LEAKS, HOLDS, NO_LEAK, NO_CHECK = (
    "wrong result", "protection failed", "not measured", "leaks by design", "holds", "no leak measured", "no check")
#: the verdicts of a check, strongest first: a result the audit verified and found wrong (an inexact secure
#: sum, a model that differs from its plaintext reference), a protection that failed or could not be tested,
#: a leak the declarations admit, a protection that held, a by-design leak the attack did not find, a role
#: nobody attacked
VERDICTS = (WRONG, FAILED, NOT_MEASURED, LEAKS, HOLDS, NO_LEAK, NO_CHECK)
#: the scorecard outcome of a published attack that does not apply to what a role receives (no score, no verdict)
INAPPLICABLE = "does not apply"


@dataclass(frozen=True)
class EmpiricalFinding:
    """A measured leakage: what ``observer`` inferred from the messages it received.

    ``value`` is computed from the attack's output (e.g. the label-recovery accuracy of
    its guesses) and set beside ``baseline`` (what a guess without the messages achieves).
    ``attacks`` names the message kinds whose received payloads the attack read.
    ``protection`` is the declared protection the check tests (a mutation that switches
    it off must make the check flag); ``None`` marks a leak the declarations admit by
    design (e.g. plaintext residuals). ``flagged`` is the check's verdict: the attack did
    better than chance, at ``p_value`` below :data:`vflcrypto.audit.attacks.ALPHA` or by an
    exact criterion stated in ``description``; ``detects`` states the smallest effect the
    check detects with its sample size.
    """

    observer: str
    name: str
    value: float
    baseline: float | None
    description: str
    attacks: tuple[str, ...] = ()
    protection: Protection | None = None
    flagged: bool = False
    p_value: float | None = None
    samples: int | None = None
    detects: str = ""
    #: what the attack saw, drawn by the HTML report (optional)
    figure: Figure | None = None
    #: False when the check had nothing to test (e.g. too few items) or too little power: its protection is
    #: unverified, and the audit fails (:meth:`AuditOutcome.unmeasured`)
    measured: bool = True
    #: the smallest effect, in :attr:`value`'s units, that the check flags at its sample size (0 for an exact check)
    min_effect: float | None = None
    #: False when the figure the finding verified from the tap is wrong (an inexact sum, a model that differs
    #: from its reference): the verdict is *wrong result*, a failure of the audit, whatever the protection
    correct: bool = True
    #: the effect, in :attr:`value`'s units, of the failure the check exists for (from its declared
    #: :class:`~vflcrypto.audit.checks.Check`): the check has power when :attr:`min_effect` is below it
    effect: float | None = None
    #: the publication whose attack the finding reproduces (:mod:`vflcrypto.audit.literature`): such findings
    #: make up the audit's scorecard (:meth:`AuditOutcome.scorecard`); empty for the audit's own checks
    paper: str = ""

    @property
    def by_design(self) -> bool:
        """A leak the declarations admit (no protection claimed against it)."""
        return self.protection is None

    @property
    def verdict(self) -> str:
        """One of :data:`VERDICTS`: what the check found (a value that is not a number was not measured)."""
        if not self.correct:
            return WRONG
        if not self.measured or self.value != self.value or abs(self.value) == float("inf"):
            return NOT_MEASURED
        if self.protection is None:
            return LEAKS if self.flagged else NO_LEAK
        return FAILED if self.flagged else HOLDS

    def verdict_label(self, *, loud: bool = False) -> str:
        """The verdict in words with the protection it concerns (``holds (ciphertext)``, ``leaks (by design)``);
        ``loud`` writes the verdicts that reveal something in capitals (``PROTECTION FAILED (masked)``)."""
        v = self.verdict
        word = "leaks" if v == LEAKS else v
        word = word.upper() if loud and v in (WRONG, FAILED, NOT_MEASURED, LEAKS) else word
        if v == LEAKS:
            return f"{word} (by design)"
        return word if self.protection is None else f"{word} ({self.protection.value})"

    def to_dict(self) -> dict[str, Any]:
        return {"observer": self.observer, "name": self.name, "value": self.value,
                "baseline": self.baseline, "description": self.description,
                "attacks": list(self.attacks),
                "protection": None if self.protection is None else self.protection.value,
                "flagged": self.flagged, "p_value": self.p_value, "samples": self.samples,
                "detects": self.detects, "min_effect": self.min_effect, "effect": self.effect,
                "measured": self.measured, "correct": self.correct, "verdict": self.verdict, "paper": self.paper}


@dataclass(frozen=True)
class RoleVerdict:
    """What one role can learn, by the strongest finding of the checks on what its parties received."""

    role: str
    parties: tuple[str, ...]
    #: one of :data:`VERDICTS`: the strongest verdict of the role's checks (``no check`` if none)
    verdict: str
    #: the finding that decided the verdict (``None`` for a role no check attacked)
    strongest: EmpiricalFinding | None
    #: the runs (section labels) in which the strongest finding's observer received what it attacked
    runs: tuple[str, ...]
    #: number of the role's checks per verdict
    counts: Mapping[str, int]
    #: the verdict in words, capitals where something leaks or is unverified: ``LEAKS (by design)``
    headline: str
    #: what the strongest finding measured, where, and how the role's other checks ended
    detail: str

    @property
    def line(self) -> str:
        """The verdict as one line of text (what the CLI prints and the report shows first)."""
        return f"{self.role}: {self.headline}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        s = self.strongest
        return {"role": self.role, "parties": list(self.parties), "verdict": self.verdict,
                "strongest": None if s is None else {"observer": s.observer, "name": s.name, "value": s.value,
                                                     "baseline": s.baseline, "verdict": s.verdict_label()},
                "runs": list(self.runs), "counts": dict(self.counts), "headline": self.headline, "detail": self.detail,
                "line": self.line}


#: how the other checks of a role ended, in the summary line ("other checks: 3 held")
_ENDED = {WRONG: "were wrong", FAILED: "failed", NOT_MEASURED: "not measured", LEAKS: "leaked by design", HOLDS: "held",
          NO_LEAK: "found no leak"}


def _runs_of(finding: EmpiricalFinding, sections: Sequence[tuple[str, AuditReport]]) -> tuple[int, ...]:
    """The runs (indices into ``sections``) in which the finding's observer (a party or a role) received a kind
    the check attacked."""
    return tuple(i for i, (_, rep) in enumerate(sections)
                 if any(finding.observer in (r.receiver, r.receiver_role) and r.kind in finding.attacks
                        for r in rep.rows))


def _in_runs(runs: Sequence[int], sections: Sequence[tuple[str, AuditReport]]) -> str:
    """``in the plain run``, ``in every run``, ``in runs 1 and 3 (a / c)``: where the finding was measured."""
    if not runs or len(sections) < 2:
        return ""
    if len(runs) == len(sections):
        return " in every run"
    labels = [sections[i][0] for i in runs]
    if len(runs) == 1 and not any(c in labels[0] for c in ",()/"):
        return f" in the {labels[0]} run"
    nums = [str(i + 1) for i in runs]
    numbered = nums[0] if len(nums) == 1 else ", ".join(nums[:-1]) + " and " + nums[-1]
    return f" in run{'s' if len(runs) > 1 else ''} {numbered} ({' / '.join(labels)})"


def role_verdicts(report: AuditReport, findings: Sequence[EmpiricalFinding],
                  sections: Sequence[tuple[str, AuditReport]] = ()) -> list[RoleVerdict]:
    """One :class:`RoleVerdict` per role that received messages or was attacked, strongest verdict first.

    A finding belongs to its observer's role (the observer is a party of the ledger, or a
    role itself). Within a role the strongest finding decides (:data:`VERDICTS` order: a
    protection that failed or could not be measured, then a leak by design, then a
    protection that held); roles no check attacked say what they received in the clear.
    """
    role_of: dict[str, str] = {}
    parties: dict[str, dict[str, None]] = {}
    for r in report.rows:
        role_of.setdefault(r.receiver, r.receiver_role)
        parties.setdefault(r.receiver_role, {})[r.receiver] = None
    by_role: dict[str, list[EmpiricalFinding]] = {role: [] for role in parties}
    for f in findings:
        role = role_of.get(f.observer, f.observer)
        by_role.setdefault(role, []).append(f)
        if f.observer in role_of:
            parties.setdefault(role, {})[f.observer] = None
    out: list[RoleVerdict] = []
    for role, fs in by_role.items():
        members = tuple(parties.get(role, {}))
        counts = {v: n for v in VERDICTS if (n := sum(f.verdict == v for f in fs))}
        if not fs:
            rows = [r for r in report.rows if r.receiver_role == role]
            kinds = sorted({r.kind for r in rows})
            clear = sorted({r.kind for r in rows if "plaintext" in r.protection})
            what = f", {len(clear)} of them in the clear ({', '.join(clear)})" if clear else ", none in the clear"
            out.append(RoleVerdict(role, members, NO_CHECK, None, (), {}, "no check",
                                   f"receives {len(kinds)} message kind{'s' if len(kinds) != 1 else ''}{what}"))
            continue
        strongest = min(fs, key=lambda f: VERDICTS.index(f.verdict))
        runs = _runs_of(strongest, sections)
        who = "" if strongest.observer == role else f"{strongest.observer}: "
        base = "" if strongest.baseline is None else f" (baseline {strongest.baseline:.4g})"
        rest = dict(counts)
        rest[strongest.verdict] -= 1
        also = ", ".join(f"{n} {_ENDED[v]}" for v, n in rest.items() if n)
        head = strongest.verdict_label(loud=True) + (" (counts as a failure)" if strongest.verdict == NOT_MEASURED
                                                     else "")
        out.append(RoleVerdict(role, members, strongest.verdict, strongest, tuple(sections[i][0] for i in runs),
                               counts, head,
                               f"{who}{strongest.name} = {strongest.value:.4g}{base}{_in_runs(runs, sections)}"
                               + (f"; other checks: {also}" if also else "")))
    return sorted(out, key=lambda v: VERDICTS.index(v.verdict))


@dataclass(frozen=True)
class AuditOutcome:
    """What ``vflcrypto audit NAME`` prints: declared leakage per role plus measured leakage."""

    protocol: str
    report: AuditReport
    findings: tuple[EmpiricalFinding, ...] = ()
    #: headline numbers of the attacks (e.g. ``gradient_kmeans_ari``), also top-level keys of :meth:`to_dict`
    metrics: Mapping[str, float] = field(default_factory=dict)
    #: one (run label, report) per run of the audit (mode, variant), when it ran the protocol more than once
    sections: tuple[tuple[str, AuditReport], ...] = ()
    #: the transcripts of the runs the audit attacked (run label, transcript): the HTML report draws them
    transcripts: tuple[tuple[str, Transcript], ...] = ()
    #: training curves of the audited runs (name -> values per step or epoch), for the report's plots
    curves: Mapping[str, Sequence[float]] = field(default_factory=dict)
    #: published attacks that do not apply to what a role receives: (role, attack, paper, why). The scorecard lists
    #: each as "does not apply: why" (so every protocol's scorecard says what was considered); verdicts ignore them
    inapplicable: tuple[tuple[str, str, str, str], ...] = ()

    def finding(self, name: str, observer: str | None = None) -> EmpiricalFinding:
        """The one finding called ``name`` (of ``observer``); ``KeyError`` listing the names if none."""
        hits = [f for f in self.findings if f.name == name and (observer is None or f.observer == observer)]
        if len(hits) != 1:
            names = sorted({f"{f.observer}: {f.name}" for f in self.findings})
            raise AuditError(f"{len(hits)} findings named {name!r} (observer {observer}); have {names}")
        return hits[0]

    def verdicts(self) -> list[RoleVerdict]:
        """What each role can learn, strongest finding first (:func:`role_verdicts`)."""
        return role_verdicts(self.report, self.findings, self.sections)

    def broken_protections(self) -> list[EmpiricalFinding]:
        """Findings that test a declared protection and flagged it as failing."""
        return [f for f in self.findings if f.protection is not None and f.flagged]

    def unmeasured(self) -> list[EmpiricalFinding]:
        """Checks that could not run or had too little power: each counts as a failure of the audit."""
        return [f for f in self.findings if f.verdict == NOT_MEASURED]

    def failures(self) -> list[str]:
        """One line per check that failed, was not measured or found a wrong result (what ``vflcrypto audit``
        prints before exiting 1)."""
        return [f"{f.verdict_label(loud=True)}: [{f.observer}] {f.name}: {f.description}"
                for f in self.findings if f.verdict in (WRONG, FAILED, NOT_MEASURED)]

    def scorecard(self) -> list[dict[str, Any]]:
        """The published attacks run on each role's view (the findings that name a ``paper``), per role: attack,
        paper, score, baseline and verdict (in words, and ``outcome``: one of :data:`VERDICTS`), roles in the order
        of :meth:`verdicts`; the attacks that do not apply (:attr:`inapplicable`) have no score and the outcome
        :data:`INAPPLICABLE`."""
        role_of = {r.receiver: r.receiver_role for r in self.report.rows}
        order = {v.role: i for i, v in enumerate(self.verdicts())}
        rows = [{"role": role_of.get(f.observer, f.observer), "observer": f.observer, "attack": f.name,
                 "paper": f.paper, "score": f.value, "baseline": f.baseline, "p_value": f.p_value,
                 "samples": f.samples, "verdict": f.verdict_label(), "outcome": f.verdict}
                for f in self.findings if f.paper]
        rows += [{"role": role, "observer": role, "attack": attack, "paper": paper, "score": None, "baseline": None,
                  "p_value": None, "samples": None, "verdict": f"does not apply: {why}", "outcome": INAPPLICABLE}
                 for role, attack, paper, why in self.inapplicable]
        return sorted(rows, key=lambda r: order.get(r["role"], len(order)))

    def checks(self) -> list[dict[str, Any]]:
        """Every check of the audit: what it attacked, its verdict, sample size and smallest detectable effect."""
        return [{"check": f.name, "observer": f.observer, "attacks": list(f.attacks),
                 "protection": None if f.protection is None else f.protection.value, "verdict": f.verdict,
                 "samples": f.samples, "min_effect": f.min_effect, "effect": f.effect, "p_value": f.p_value,
                 "value": f.value, "detects": f.detects} for f in self.findings]

    def to_dict(self) -> dict[str, Any]:
        runs = [{"run": label, **report.to_dict()} for label, report in self.sections]
        return {"protocol": self.protocol, "summary": [v.to_dict() for v in self.verdicts()],
                **self.report.to_dict(), "runs": runs, "checks": self.checks(), "scorecard": self.scorecard(),
                "empirical": [f.to_dict() for f in self.findings], "metrics": dict(self.metrics), **self.metrics}

    def to_text(self) -> str:
        lines = [f"Leakage audit: {self.protocol}", "",
                 "What each role can learn (strongest finding first; the ledgers and checks follow):",
                 *(f"  {v.line}" for v in self.verdicts()), ""]
        if self.sections:
            for i, (label, report) in enumerate(self.sections):
                lines += [*([""] if i else []), f"== run {i + 1} of {len(self.sections)}: {self.protocol}, {label} ==",
                          report.to_text()]
        else:
            lines.append(self.report.to_text())
        if self.findings:
            lines += ["", "Empirical checks (attacks on the messages each role received):"]
            for f in self.findings:
                base = "" if f.baseline is None else f" (baseline {f.baseline:.4g})"
                verdict = f.verdict_label(loud=True)
                pv = "" if f.p_value is None else f", p = {f.p_value:.2g}"
                lines.append(f"  [{f.observer}] {f.name}: {f.value:.4g}{base}{pv} -> {verdict}")
                lines.append(f"      {f.description}")
                if f.detects:
                    lines.append(f"      detects: {f.detects}")
        card = self.scorecard()
        if card:
            lines += ["", "Scorecard (published attacks on what each role received; score vs baseline):"]
            for row in card:
                base = "" if row["baseline"] is None else f" (baseline {row['baseline']:.4g})"
                score = "" if row["score"] is None else f" {row['score']:.4g}{base} ->"
                lines.append(f"  {row['role']:<8} [{row['observer']}] {row['attack']}:{score} {row['verdict']}")
                lines.append(f"      {row['paper']}")
        if self.metrics:
            lines += ["", "Headline numbers: " + ", ".join(f"{k} = {v:.4g}" for k, v in self.metrics.items())]
        return "\n".join(lines)


# --------------------------------------------------------------------------- SECURITY.md


def markdown_table(protocol: str) -> str:
    """The per-message leakage table of ``protocol`` as Markdown."""
    lines = [
        "| message | sender → receiver | protection | what the receiver can learn |",
        "|---|---|---|---|",
    ]
    for d in declarations(protocol):
        route = f"{'/'.join(d.sender)} → {'/'.join(d.receiver)}"
        reveals = d.reveals.replace("|", "\\|")
        lines.append(f"| `{d.kind}` | {route} | {d.protection_label} | {reveals} |")
    return "\n".join(lines)


_BLOCK = re.compile(
    r"(<!-- BEGIN leakage:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- END leakage:(?P=name) -->)",
    re.DOTALL,
)


def render_security_md(text: str, blocks: Mapping[str, str] | None = None) -> str:
    """Replace every ``<!-- BEGIN leakage:P -->…<!-- END leakage:P -->`` block by P's table.

    ``blocks`` supplies the text of blocks that are not a protocol's declarations (the
    entry layer generates them, e.g. what the Flower App relays).
    """
    extra = dict(blocks or {})

    def repl(m: re.Match[str]) -> str:
        name = m.group("name")
        body = extra[name] if name in extra else markdown_table(name)
        return f"{m.group(1)}{body}\n{m.group(4)}"

    return _BLOCK.sub(repl, text)
