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
    "AuditOutcome",
    "AuditReport",
    "AuditRow",
    "EmpiricalFinding",
    "Figure",
    "audit",
    "audit_runs",
    "markdown_table",
    "render_security_md",
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

    @property
    def by_design(self) -> bool:
        """A leak the declarations admit (no protection claimed against it)."""
        return self.protection is None

    def to_dict(self) -> dict[str, Any]:
        return {"observer": self.observer, "name": self.name, "value": self.value,
                "baseline": self.baseline, "description": self.description,
                "attacks": list(self.attacks),
                "protection": None if self.protection is None else self.protection.value,
                "flagged": self.flagged, "p_value": self.p_value, "samples": self.samples,
                "detects": self.detects}


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

    def finding(self, name: str, observer: str | None = None) -> EmpiricalFinding:
        """The one finding called ``name`` (of ``observer``); ``KeyError`` listing the names if none."""
        hits = [f for f in self.findings if f.name == name and (observer is None or f.observer == observer)]
        if len(hits) != 1:
            names = sorted({f"{f.observer}: {f.name}" for f in self.findings})
            raise AuditError(f"{len(hits)} findings named {name!r} (observer {observer}); have {names}")
        return hits[0]

    def broken_protections(self) -> list[EmpiricalFinding]:
        """Findings that test a declared protection and flagged it as failing."""
        return [f for f in self.findings if f.protection is not None and f.flagged]

    def to_dict(self) -> dict[str, Any]:
        runs = [{"run": label, **report.to_dict()} for label, report in self.sections]
        return {"protocol": self.protocol, **self.report.to_dict(), "runs": runs,
                "empirical": [f.to_dict() for f in self.findings], "metrics": dict(self.metrics), **self.metrics}

    def to_text(self) -> str:
        lines = [f"Leakage audit: {self.protocol}", ""]
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
                if f.protection is None:
                    verdict = "LEAKS (by design)" if f.flagged else "no leak measured"
                else:
                    verdict = (f"PROTECTION FAILED ({f.protection.value})" if f.flagged
                               else f"holds ({f.protection.value})")
                pv = "" if f.p_value is None else f", p = {f.p_value:.2g}"
                lines.append(f"  [{f.observer}] {f.name}: {f.value:.4g}{base}{pv} -> {verdict}")
                lines.append(f"      {f.description}")
                if f.detects:
                    lines.append(f"      detects: {f.detects}")
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
