"""The audit as pictures: one self-contained HTML report of a run, and the same figures as PNG.

:func:`render_html` turns an :class:`~vflcrypto.audit.ledger.AuditOutcome` into one HTML file
that needs no network to open (inline SVG and CSS, a few lines of inline script):

* first, **what each role can learn**: one line per role, strongest finding first
  (:meth:`~vflcrypto.audit.ledger.AuditOutcome.verdicts`, the lines the CLI prints first);
* the **scorecard**: the published attacks (:mod:`vflcrypto.audit.literature`) run on each
  role's view, with paper, score, baseline and verdict
  (:meth:`~vflcrypto.audit.ledger.AuditOutcome.scorecard`);
* per run, a **sequence diagram** across the page (:mod:`vflcrypto.audit.diagram`): one
  lifeline per party, one arrow per run of consecutive messages of one kind between two
  parties (``kind ×count``, bytes, protection), coloured by protection (plaintext,
  ciphertext under whose key, masked, aggregate, public, blinded or shuffled);
* per run and role, the **ledger**: what it received and what each message reveals (the
  text audit's content, from the declarations);
* the **empirical checks**: each finding's measured value beside its baseline, coloured by
  verdict (a protection that held, one that failed, a leak by design);
* **training curves** (``outcome.curves``) and **bytes** per message kind and over the run.

:func:`write_plots` writes the figures as PNG (matplotlib) for papers. Nothing here knows
a protocol: everything comes from the transcripts and the declarations.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..runtime.transcript import Transcript, TranscriptEntry
from .diagram import (
    MAX_ARROWS,
    PROTECTION_COLOURS,
    arrows,
    fit,
    lifelines,
    nbytes,
    protection_class,
    rounds,
    sequence_svg,
    text_width,
)
from .ledger import (
    FAILED,
    HOLDS,
    INAPPLICABLE,
    LEAKS,
    NO_CHECK,
    NO_LEAK,
    NOT_MEASURED,
    WRONG,
    AuditOutcome,
    AuditReport,
    EmpiricalFinding,
    Figure,
)

__all__ = ["MAX_ARROWS", "PROTECTION_COLOURS", "arrows", "lifelines", "protection_class", "render_html", "rounds",
           "write_plots"]

def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


_nbytes = nbytes


_VERDICT_CLASSES = {WRONG: "failed", FAILED: "failed", NOT_MEASURED: "not-measured", LEAKS: "by-design", HOLDS: "held",
                    NO_LEAK: "no-leak", NO_CHECK: "no-check", INAPPLICABLE: "no-check"}
_VERDICT_COLOURS = {"failed": "#d62728", "not-measured": "#d62728", "held": "#2ca02c", "by-design": "#ff7f0e",
                    "no-leak": "#7f7f7f", "no-check": "#7f7f7f"}


def _verdict(f: EmpiricalFinding) -> tuple[str, str]:
    """(CSS class, verdict in words) of a check."""
    return _VERDICT_CLASSES[f.verdict], f.verdict_label()


def _findings_svg(findings: Sequence[EmpiricalFinding]) -> str:
    """Each check's value as a bar beside its baseline, its name on the left, value and verdict in full on the right."""
    bar_w, row, size = 300, 30, 11
    names = [f"[{f.observer}] {f.name}" for f in findings]
    label_w = min(max((text_width(n, size) for n in names), default=0.0) + 14, 520)
    rights = [f'{f.value:.4g}{"" if f.baseline is None else f" vs {f.baseline:.4g}"} · {_verdict(f)[1]}'
              for f in findings]
    header = "measured value (bar) against the baseline (black tick); each row on its own scale"
    width = int(label_w + max(bar_w + 8 + max((text_width(r, size) for r in rights), default=0.0),
                              text_width(header, size)) + 8)
    height = row * len(findings) + 30
    parts = [f'<svg class="findings" role="img" aria-label="empirical checks" xmlns="http://www.w3.org/2000/svg" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
             f'<text x="{label_w:.1f}" y="14" font-size="{size}" fill="#555">{header}</text>']
    for i, (f, name, right) in enumerate(zip(findings, names, rights, strict=True)):
        y = 24 + i * row
        cls, _ = _verdict(f)
        finite = [abs(v) for v in (f.value, f.baseline) if v is not None and math.isfinite(v)]
        scale = max([*finite, 1e-12])
        w = bar_w * abs(f.value) / scale if math.isfinite(f.value) else 0.0
        parts.append(f'<g class="finding" data-verdict="{cls}"><title>{_esc(f.description)}</title>'
                     f'<text x="4" y="{y + 15}" font-size="{size}">{_esc(fit(name, label_w - 10, size))}</text>'
                     f'<rect x="{label_w:.1f}" y="{y + 4}" width="{w:.1f}" height="14" '
                     f'fill="{_VERDICT_COLOURS[cls]}"/>')
        if f.baseline is not None and math.isfinite(f.baseline):
            bx = label_w + bar_w * abs(f.baseline) / scale
            parts.append(f'<line x1="{bx:.1f}" y1="{y}" x2="{bx:.1f}" y2="{y + 22}" stroke="#000" stroke-width="2"/>')
        parts.append(f'<text x="{label_w + bar_w + 8:.1f}" y="{y + 15}" font-size="{size}">{_esc(right)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _figure_svg(fig: Figure) -> str:
    """A finding's picture: a heatmap of counts (matrix) or bars (histogram), with the numbers written in."""
    size = 10
    if fig.kind == "matrix":
        cell = 34
        col_w = max((text_width(c, size) for c in fig.columns), default=0.0)
        left = int(max((text_width(r, size) for r in fig.rows), default=0.0) + 14)
        top = int(col_w * 0.87 + 16)  # column labels rise at 60 degrees
        rows, cols = len(fig.values), len(fig.values[0]) if fig.values else 0
        width = int(left + cell * cols + max(10.0, col_w / 2 - cell / 2 + 8))
        height = top + cell * rows + 10
        peak = max((v for r in fig.values for v in r), default=1.0) or 1.0
        parts = [f'<svg class="figure matrix" role="img" aria-label="{_esc(fig.title)}" '
                 f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                 f'viewBox="0 0 {width} {height}">']
        for j, c in enumerate(fig.columns):
            x = left + cell * j + cell / 2
            parts.append(f'<text x="{x}" y="{top - 6}" font-size="{size}" transform="rotate(-60 {x} {top - 6})">'
                         f'{_esc(c)}</text>')
        for i, (label, row) in enumerate(zip(fig.rows, fig.values, strict=True)):
            y = top + cell * i
            parts.append(f'<text x="{left - 6}" y="{y + cell / 2 + 4}" font-size="{size}" text-anchor="end">'
                         f'{_esc(label)}</text>')
            for j, v in enumerate(row):
                shade = int(255 - 200 * v / peak)
                parts.append(f'<rect x="{left + cell * j}" y="{y}" width="{cell - 1}" height="{cell - 1}" '
                             f'fill="rgb({shade},{shade},255)"/><text x="{left + cell * j + cell / 2}" '
                             f'y="{y + cell / 2 + 4}" font-size="{size}" text-anchor="middle">{v:g}</text>')
        return "".join([*parts, "</svg>"])
    counts = fig.values[0] if fig.values else ()
    step = int(max(52.0, *(text_width(c, size) + 10 for c in fig.columns), *(text_width(f"{v:g}", size) + 10
                                                                               for v in counts)))
    width, height, pad = 20 + step * len(counts), 170, 30
    peak = max(counts, default=1.0) or 1.0
    parts = [f'<svg class="figure histogram" role="img" aria-label="{_esc(fig.title)}" '
             f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    for j, (label, v) in enumerate(zip(fig.columns, counts, strict=True)):
        h = (height - 2 * pad) * v / peak
        x = 10 + step * j + step / 2
        parts.append(f'<rect x="{x - 20}" y="{height - pad - h:.1f}" width="40" height="{h:.1f}" fill="#ff7f0e"/>'
                     f'<text x="{x}" y="{height - pad - h - 4:.1f}" font-size="{size}" text-anchor="middle">{v:g}'
                     f'</text><text x="{x}" y="{height - pad + 14}" font-size="{size}" text-anchor="middle">'
                     f'{_esc(label)}</text>')
    return "".join([*parts, "</svg>"])


def _line_svg(title: str, values: Sequence[float], width: int = 420, height: int = 180) -> str:
    vals = [float(v) for v in values]
    pad = 34
    parts = [f'<svg class="curve" role="img" aria-label="{_esc(title)}" xmlns="http://www.w3.org/2000/svg" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
             f'<text x="{width / 2}" y="14" text-anchor="middle" font-size="12"><title>{_esc(title)}</title>'
             f"{_esc(fit(title, width - 8, 12))}</text>"]
    finite = [v for v in vals if v == v and abs(v) != float("inf")]
    if len(finite) >= 1:
        lo, hi = min(finite), max(finite)
        span = (hi - lo) or 1.0
        n = max(len(vals) - 1, 1)
        w, h = width - 2 * pad, height - 2 * pad
        pts = " ".join(f"{pad + w * i / n:.1f},{height - pad - h * (v - lo) / span:.1f}"
                       for i, v in enumerate(vals) if v in finite)
        parts += [f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{pts}"/>',
                  f'<text x="4" y="{pad}" font-size="10">{hi:.4g}</text>',
                  f'<text x="4" y="{height - pad}" font-size="10">{lo:.4g}</text>',
                  f'<text x="{width - pad}" y="{height - 8}" font-size="10" text-anchor="end">'
                  f'{len(vals)} points</text>']
    parts.append(f'<rect x="{pad}" y="{pad - 10}" width="{width - 2 * pad}" height="{height - 2 * pad + 10}" '
                 'fill="none" stroke="#ddd"/></svg>')
    return "".join(parts)


def _bytes_svg(label: str, entries: Sequence[TranscriptEntry]) -> str:
    per_kind: dict[str, int] = {}
    for e in entries:
        if e.event == "send":
            per_kind[e.kind] = per_kind.get(e.kind, 0) + e.nbytes
    items = sorted(per_kind.items(), key=lambda kv: -kv[1])
    row = 20
    label_w = min(max(280, int(max((text_width(k, 11) for k, _ in items), default=0.0)) + 14), 520)
    width = label_w + 480
    height = row * len(items) + 24
    top = max((b for _, b in items), default=1) or 1
    parts = [f'<svg class="bytes" role="img" aria-label="bytes per message kind, {_esc(label)}" '
             f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    for i, (kind, b) in enumerate(items):
        y = 6 + i * row
        cls, _ = protection_class(kind)
        parts.append(f'<text x="4" y="{y + 13}" font-size="11"><title>{_esc(kind)}</title>'
                     f"{_esc(fit(kind, label_w - 10, 11))}</text>"
                     f'<rect x="{label_w}" y="{y + 3}" width="{360 * b / top:.1f}" height="13" '
                     f'fill="{PROTECTION_COLOURS[cls]}"/>'
                     f'<text x="{label_w + 368}" y="{y + 13}" font-size="11">{_nbytes(b)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _ledger(report: AuditReport) -> str:
    out = []
    for party in dict.fromkeys(r.receiver for r in report.rows):
        rows = report.for_party(party)
        out.append(f'<details class="ledger" open><summary>{_esc(party)} ({_esc(rows[0].receiver_role)}) received '
                   f'{sum(r.count for r in rows)} messages</summary><table><tr><th>kind</th><th>from</th>'
                   '<th>count</th><th>bytes</th><th>protection</th><th>what it reveals</th></tr>')
        for r in rows:
            cls, _ = protection_class(r.kind)
            out.append(f'<tr class="{cls}"><td><code>{_esc(r.kind)}</code></td><td>{_esc(r.sender)}</td>'
                       f'<td>{r.count}</td><td>{r.bytes:,}</td><td><span class="chip" style="background:'
                       f'{PROTECTION_COLOURS[cls]}"></span>{_esc(r.protection)}</td><td>{_esc(r.reveals)}</td></tr>')
        out.append("</table></details>")
    return "".join(out)


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}h3{font-size:15px}
table{border-collapse:collapse;margin:6px 0 14px}td,th{border:1px solid #ddd;padding:3px 6px;vertical-align:top}
th{background:#f5f5f5;text-align:left}code{font-size:12px;overflow-wrap:anywhere}.chip{display:inline-block;width:10px;height:10px;
margin-right:5px;border-radius:2px}.legend span{margin-right:14px}.scroll{overflow-x:auto}
.metrics td:first-child{font-family:monospace}details summary{cursor:pointer;font-weight:600}
ul.verdicts{list-style:none;padding:0;margin:8px 0;font-size:15px}ul.verdicts li{margin:4px 0}
.tag{color:#fff;border-radius:3px;padding:1px 6px;font-weight:600;font-size:13px}
"""

_SCRIPT = """
(function () {
  var arrows = document.querySelectorAll('g.arrow');
  var kinds = {};
  arrows.forEach(function (a) { kinds[a.getAttribute('data-kind')] = true; });
  var note = document.getElementById('summary-counts');
  if (note) { note.textContent = arrows.length + ' arrows, ' + Object.keys(kinds).length + ' message kinds drawn'; }
  document.body.setAttribute('data-rendered', 'yes');
})();
"""


def _verdicts(outcome: AuditOutcome) -> str:
    """The report's first lines: per role what it can learn, strongest finding first (the CLI prints the same)."""
    items = "".join(f'<li class="verdict" data-verdict="{_VERDICT_CLASSES[v.verdict]}"><b>{_esc(v.role)}</b>: '
                    f'<span class="tag" style="background:{_VERDICT_COLOURS[_VERDICT_CLASSES[v.verdict]]}">'
                    f"{_esc(v.headline)}</span> {_esc(v.detail)}</li>" for v in outcome.verdicts())
    more = ' Each check in full: <a href="#checks">empirical checks</a>.' if outcome.findings else ""
    return (f'<section id="verdicts"><h2>What each role can learn</h2><ul class="verdicts">{items}</ul>'
            f"<p>Strongest finding first: a protection that failed (or could not be measured), then a leak the "
            f"declarations admit, then protections that held.{more}</p></section>")


def _scorecard(outcome: AuditOutcome) -> str:
    """The published attacks run on each role's view: role, attack, paper, score beside baseline, verdict."""
    card = outcome.scorecard()
    if not card:
        return ""
    rows = "".join(
        f'<tr class="score" data-verdict="{_VERDICT_CLASSES[r["outcome"]]}"><td>{_esc(r["role"])}</td>'
        f'<td>{_esc(r["observer"])}</td><td>{_esc(r["attack"])}</td><td>{_esc(r["paper"])}</td>'
        f'<td>{"" if r["score"] is None else format(r["score"], ".4g")}</td>'
        f'<td>{"" if r["baseline"] is None else format(r["baseline"], ".4g")}</td>'
        f'<td><span class="tag" style="background:{_VERDICT_COLOURS[_VERDICT_CLASSES[r["outcome"]]]}">'
        f'{_esc(r["verdict"])}</span></td></tr>' for r in card)
    return ('<section id="scorecard"><h2>Scorecard: published attacks on what each role received</h2>'
            "<p>Each attack from the literature run on one role's view of this run (the messages it received and its "
            "own data), its score beside the baseline it must beat (chance, the majority class, or the same attack "
            "on shuffled rows).</p><table class=\"scorecard\"><tr><th>role</th><th>observer</th><th>attack</th>"
            f"<th>paper</th><th>score</th><th>baseline</th><th>verdict</th></tr>{rows}</table></section>")


def render_html(outcome: AuditOutcome, *, title: str | None = None) -> str:
    """The whole report as one HTML document (no external resources)."""
    runs: list[tuple[str, Transcript]] = list(outcome.transcripts)
    sections = dict(outcome.sections) if outcome.sections else {}
    name = title or f"vflcrypto audit: {outcome.protocol}"
    legend = "".join(f'<span><span class="chip" style="background:{c}"></span>{k}</span>'
                     for k, c in PROTECTION_COLOURS.items() if k != "undeclared")
    body = [f"<h1>{_esc(name)}</h1>", _verdicts(outcome), _scorecard(outcome),
            f'<p>{len(runs)} run(s); <span id="summary-counts"></span>. Colours: <span class="legend">{legend}'
            "</span>. Hover an arrow or a check for what it reveals.</p>"]
    if outcome.metrics:
        body.append('<table class="metrics"><tr><th>headline</th><th>value</th></tr>' + "".join(
            f"<tr><td>{_esc(k)}</td><td>{v:.4g}</td></tr>" for k, v in outcome.metrics.items()) + "</table>")
    for i, (label, transcript) in enumerate(runs):
        entries = transcript.entries()
        report = sections.get(label)
        body.append(f'<h2 id="run-{i + 1}">Run {i + 1}: {_esc(label)}</h2>'
                    f'<p>{len([e for e in entries if e.event == "send"])} messages, '
                    f'{_nbytes(sum(e.nbytes for e in entries if e.event == "send"))}, '
                    f'{(entries[-1].time - entries[0].time) if entries else 0.0:.2f} s from the first message to '
                    f'the last, parties: {_esc(", ".join(lifelines(entries)))}</p>'
                    f'<h3>Message sequence</h3><div class="scroll">{sequence_svg(label, entries)}</div>'
                    f"<h3>Bytes per message kind</h3>{_bytes_svg(label, entries)}")
        body.append("<h3>What each role received</h3>" + _ledger(report if report is not None else
                                                                  _report_of(transcript)))
    if not runs:
        body.append("<h2>What each role received</h2>" + _ledger(outcome.report))
    if outcome.findings:
        body.append('<h2 id="checks">Empirical checks (attacks on the messages each role received)</h2>'
                    + _findings_svg(outcome.findings) + '<table class="checks"><tr><th>observer</th><th>check</th>'
                    "<th>value</th><th>baseline</th><th>verdict</th><th>how</th></tr>" + "".join(
                        f'<tr><td>{_esc(f.observer)}</td><td>{_esc(f.name)}</td><td>{f.value:.4g}</td>'
                        f'<td>{"" if f.baseline is None else f"{f.baseline:.4g}"}</td><td>{_esc(_verdict(f)[1])}</td>'
                        f'<td>{_esc(f.description)}{"" if not f.detects else " — detects: " + _esc(f.detects)}</td>'
                        "</tr>" for f in outcome.findings) + "</table>")
    pictured = [f for f in outcome.findings if f.figure is not None]
    if pictured:
        body.append("<h2>What the attacks saw</h2>" + "".join(
            f'<figure class="finding-figure"><figcaption>{_esc(f.figure.title)}</figcaption>'
            f"{_figure_svg(f.figure)}</figure>" for f in pictured if f.figure is not None))
    if outcome.curves:
        body.append("<h2>Training curves</h2>" + "".join(_line_svg(k, v) for k, v in outcome.curves.items()))
    data = {"protocol": outcome.protocol, "runs": [label for label, _ in runs],
            "roles": sorted({r.receiver_role for r in outcome.report.rows}),
            "kinds": sorted({r.kind for r in outcome.report.rows})}
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(name)}</title><style>{_CSS}</style></head><body>{''.join(body)}"
            f'<script type="application/json" id="report-data">{_esc(json.dumps(data))}</script>'
            f"<script>{_SCRIPT}</script></body></html>")


def _report_of(transcript: Transcript) -> AuditReport:
    from .ledger import audit

    return audit(transcript)


# --------------------------------------------------------------------------- PNG


def write_plots(outcome: AuditOutcome, directory: str | Path) -> list[Path]:
    """The report's figures as PNG files in ``directory``: sequence per run, checks, curves, bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..data.files import atomic_open

    out_dir = Path(directory)
    paths: list[Path] = []

    def save(fig: Any, name: str) -> None:
        paths.append(out_dir / name)
        try:
            with atomic_open(paths[-1], "wb") as fh:  # inside atomic_set: published with the other figures
                fig.savefig(fh, format="png", dpi=130, bbox_inches="tight")
        finally:
            plt.close(fig)
    for i, (label, transcript) in enumerate(outcome.transcripts):
        entries = transcript.entries()
        parties, rows = lifelines(entries), arrows(entries)[:MAX_ARROWS]
        fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(parties)), max(3, 0.32 * len(rows) + 1)))
        for j, p in enumerate(parties):
            ax.axvline(j, color="#bbb", ls="--", lw=1)
            ax.text(j, 0.6, p, ha="center", va="bottom", fontsize=9)
        for k, a in enumerate(rows):
            cls, _ = protection_class(a["kind"])
            x1, x2 = parties.index(a["sender"]), parties.index(a["receiver"])
            ax.annotate("", xy=(x2, -k), xytext=(x1, -k),
                        arrowprops={"arrowstyle": "->", "color": PROTECTION_COLOURS[cls], "lw": 1.5})
            count = f" x{a['count']}" if a["count"] > 1 else ""
            ax.text((x1 + x2) / 2, -k + 0.12, f"{a['kind']}{count} ({_nbytes(a['bytes'])})", ha="center",
                    fontsize=7, color=PROTECTION_COLOURS[cls])
        ax.set_xlim(-0.6, len(parties) - 0.4)
        ax.set_ylim(-len(rows), 1.2)
        ax.axis("off")
        ax.set_title(f"{outcome.protocol}: {label}", fontsize=10)
        save(fig, f"{outcome.protocol}-sequence-{i + 1}.png")
    if outcome.findings:
        fs = outcome.findings
        fig, ax = plt.subplots(figsize=(9, 0.35 * len(fs) + 1))
        for k, f in enumerate(fs):
            scale = max(abs(f.value), abs(f.baseline or 0.0), 1e-12)
            ax.barh(k, abs(f.value) / scale, color=_VERDICT_COLOURS[_verdict(f)[0]])
            if f.baseline is not None:
                ax.plot([abs(f.baseline) / scale] * 2, [k - 0.4, k + 0.4], color="black")
        ax.set_yticks(range(len(fs)), [f"[{f.observer}] {f.name[:60]}" for f in fs], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("value / max(value, baseline); black: baseline")
        ax.set_title(f"{outcome.protocol}: empirical checks", fontsize=10)
        save(fig, f"{outcome.protocol}-checks.png")
    if outcome.curves:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for name, values in outcome.curves.items():
            ax.plot(range(len(values)), list(values), label=name)
        ax.legend(fontsize=7)
        ax.set_xlabel("step / epoch / round")
        ax.set_title(f"{outcome.protocol}: training curves", fontsize=10)
        save(fig, f"{outcome.protocol}-curves.png")
    if outcome.transcripts:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for label, transcript in outcome.transcripts:
            sent = [e.nbytes for e in transcript.entries() if e.event == "send"]
            total, cum = 0, []
            for b in sent:
                total += b
                cum.append(total)
            ax.plot(range(len(cum)), cum, label=label)
        ax.set_xlabel("message")
        ax.set_ylabel("bytes sent so far")
        ax.legend(fontsize=7)
        ax.set_title(f"{outcome.protocol}: bytes", fontsize=10)
        save(fig, f"{outcome.protocol}-bytes.png")
    return paths
