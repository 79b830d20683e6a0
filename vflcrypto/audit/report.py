"""The audit as pictures: one self-contained HTML report of a run, and the same figures as PNG.

:func:`render_html` turns an :class:`~vflcrypto.audit.ledger.AuditOutcome` into one HTML file
that needs no network to open (inline SVG and CSS, a few lines of inline script):

* per run, a **sequence diagram**: one lifeline per party, one arrow per run of
  consecutive messages of one kind between two parties (``kind ×count``, bytes,
  protection), coloured by protection (plaintext, ciphertext under whose key, masked,
  aggregate, public, blinded or shuffled);
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import UndeclaredMessageError
from ..runtime.declarations import Protection, declaration_for
from ..runtime.transcript import Transcript, TranscriptEntry
from .ledger import AuditOutcome, AuditReport, EmpiricalFinding, Figure

__all__ = ["PROTECTION_COLOURS", "arrows", "lifelines", "protection_class", "render_html", "rounds", "write_plots"]

#: one colour per protection class (colour-blind-safe where it matters: red = in the clear)
PROTECTION_COLOURS = {
    "plaintext": "#d62728", "ciphertext": "#1f77b4", "masked": "#9467bd", "aggregate": "#2ca02c",
    "public": "#7f7f7f", "blinded": "#17becf", "undeclared": "#000000",
}
MAX_ARROWS = 120  # per run; the rest is summarised in one line
_ORDER = ("plaintext", "ciphertext", "masked", "aggregate", "blinded", "public")


def protection_class(kind: str) -> tuple[str, str]:
    """(colour class, label) of a message kind: the weakest protection it declares decides the colour."""
    try:
        decl = declaration_for(kind)
    except UndeclaredMessageError:  # an undeclared kind in a recorded transcript: drawn black
        return "undeclared", "undeclared"
    names = {p.value for p in decl.protection}
    names = {"blinded" if n in (Protection.BLINDED.value, Protection.SHUFFLED.value) else n for n in names}
    cls = next(c for c in _ORDER if c in names or c == "public")
    label = " + ".join(sorted(p.value for p in decl.protection))
    if Protection.CIPHERTEXT in decl.protection and decl.key_owner:
        label += f" (key: {decl.key_owner})"
    return cls, label


def lifelines(entries: Sequence[TranscriptEntry]) -> list[str]:
    """The parties of a run in order of first appearance."""
    seen: dict[str, None] = {}
    for e in entries:
        seen.setdefault(e.sender, None)
        seen.setdefault(e.receiver, None)
    return list(seen)


def arrows(entries: Sequence[TranscriptEntry]) -> list[dict[str, Any]]:
    """Consecutive sends of one kind between the same two parties, merged: sender, receiver, kind, count, bytes."""
    out: list[dict[str, Any]] = []
    for e in entries:
        if e.event != "send":
            continue
        last = out[-1] if out else None
        if last is not None and (last["sender"], last["receiver"], last["kind"]) == (e.sender, e.receiver, e.kind):
            last["count"] += 1
            last["bytes"] += e.nbytes
            continue
        out.append({"sender": e.sender, "receiver": e.receiver, "kind": e.kind, "count": 1, "bytes": e.nbytes,
                    "step": e.step_name})
    return out


MAX_PERIOD = 48  # longest round (in arrows) that rounds() looks for


def rounds(items: Sequence[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """The run's arrows as (start, length, repeats) blocks: a round repeated k times is drawn once, "×k".

    Two consecutive blocks are the same round when they hold the same arrows (sender,
    receiver, kind), in any order: parties answer concurrently, so the order within a
    round varies from one round to the next. Greedy, shortest period first.
    """
    from collections import Counter

    keys = [(a["sender"], a["receiver"], a["kind"]) for a in items]
    out: list[tuple[int, int, int]] = []
    i = 0
    while i < len(keys):
        best = (1, 1)
        for p in range(1, min(MAX_PERIOD, (len(keys) - i) // 2) + 1):
            block = Counter(keys[i : i + p])
            k = 1
            while i + (k + 1) * p <= len(keys) and Counter(keys[i + k * p : i + (k + 1) * p]) == block:
                k += 1
            if k > 1 and k * p > best[0] * best[1]:
                best = (p, k)
        out.append((i, best[0], best[1]))
        i += best[0] * best[1]
    return out


def _nbytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


# --------------------------------------------------------------------------- SVG pieces


def _sequence_svg(label: str, entries: Sequence[TranscriptEntry]) -> str:
    parties = lifelines(entries)
    every = arrows(entries)
    rows: list[dict[str, Any]] = []
    blocks: list[tuple[int, int, int]] = []  # (first row, rows, repeats) of the repeated rounds drawn
    for start, length, repeats in rounds(every):
        if repeats > 1:
            blocks.append((len(rows), length, repeats))
        region = every[start : start + length * repeats]
        totals: dict[tuple[str, str, str], list[int]] = {}
        for x in region:  # per arrow key over all repeats (the order within a round varies)
            t = totals.setdefault((x["sender"], x["receiver"], x["kind"]), [0, 0, 0])
            t[0], t[1], t[2] = t[0] + x["count"], t[1] + x["bytes"], t[2] + 1
        for j in range(length):
            a = dict(every[start + j])
            if repeats > 1:  # one round drawn: the count and bytes of all its repeats
                count, nbytes, arrows_of_key = totals[(a["sender"], a["receiver"], a["kind"])]
                per_round = arrows_of_key // repeats
                a["count"], a["bytes"], a["rounds"] = count // per_round, nbytes // per_round, repeats
            rows.append(a)
    shown, hidden = rows[:MAX_ARROWS], rows[MAX_ARROWS:]
    col, top, step = (260 if len(parties) <= 3 else 190), 46, 26
    width = max(col * len(parties), 340) + 110
    height = top + step * (len(shown) + 1) + (step if hidden else 0) + 10
    x = {p: col // 2 + i * col for i, p in enumerate(parties)}
    parts = [f'<svg class="sequence" role="img" aria-label="message sequence of {_esc(label)}" '
             f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
             '<defs>' + "".join(
                 f'<marker id="arrow-{c}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
                 f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
                 for c, colour in PROTECTION_COLOURS.items()) + '</defs>']
    for p in parties:
        parts.append(f'<text class="lifeline-name" x="{x[p]}" y="18" text-anchor="middle">{_esc(p)}</text>')
        parts.append(f'<line x1="{x[p]}" y1="26" x2="{x[p]}" y2="{height - 6}" stroke="#bbb" stroke-dasharray="4 3"/>')
    for first, length, repeats in blocks:
        if first >= len(shown):
            continue
        y0, y1 = top + step * first - 17, top + step * min(first + length, len(shown)) - 14
        parts.append(f'<g class="round" data-repeats="{repeats}"><rect x="4" y="{y0}" width="{width - 8}" '
                     f'height="{y1 - y0}" fill="#f4f6fb" stroke="#c9d2e6"/><text x="{width - 10}" y="{y0 + 14}" '
                     f'text-anchor="end" font-size="11" fill="#456">×{repeats} rounds</text></g>')
    for i, a in enumerate(shown):
        y = top + step * i
        cls, prot = protection_class(a["kind"])
        colour = PROTECTION_COLOURS[cls]
        x1, x2 = x[a["sender"]], x[a["receiver"]]
        try:
            reveals = declaration_for(a["kind"]).reveals
        except UndeclaredMessageError:
            reveals = "undeclared"
        times = f" ×{a['count']}" if a["count"] > 1 else ""
        text = f"{a['kind']}{times} · {_nbytes(a['bytes'])}{' in all' if a.get('rounds') else ''} · {prot}"
        parts.append(f'<g class="arrow" data-kind="{_esc(a["kind"])}" data-protection="{cls}">'
                     f'<title>{_esc(a["sender"])} → {_esc(a["receiver"])}, step {_esc(a["step"])}: '
                     f'{_esc(reveals)}</title>'
                     f'<line x1="{x1}" y1="{y}" x2="{x2}" y2="{y}" stroke="{colour}" stroke-width="2" '
                     f'marker-end="url(#arrow-{cls})"/>'
                     f'<text x="{(x1 + x2) / 2}" y="{y - 5}" text-anchor="middle" fill="{colour}" '
                     f'font-size="11">{_esc(text)}</text></g>')
    if hidden:
        n = sum(a["count"] for a in hidden)
        kinds = sorted({a["kind"] for a in hidden})
        parts.append(f'<text x="10" y="{top + step * len(shown)}" font-size="12" fill="#555">… {n} more messages '
                     f'({_esc(", ".join(kinds))})</text>')
    parts.append("</svg>")
    return "".join(parts)


def _verdict(f: EmpiricalFinding) -> tuple[str, str]:
    if f.protection is None:
        return ("by-design", "leaks (by design)") if f.flagged else ("no-leak", "no leak measured")
    return ("failed", f"protection failed ({f.protection.value})") if f.flagged else \
        ("held", f"holds ({f.protection.value})")


_VERDICT_COLOURS = {"failed": "#d62728", "held": "#2ca02c", "by-design": "#ff7f0e", "no-leak": "#7f7f7f"}


def _findings_svg(findings: Sequence[EmpiricalFinding]) -> str:
    width, label_w, bar_w, row = 900, 430, 330, 30
    height = row * len(findings) + 30
    parts = [f'<svg class="findings" role="img" aria-label="empirical checks" xmlns="http://www.w3.org/2000/svg" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
             f'<text x="{label_w}" y="14" font-size="11" fill="#555">measured value (bar) against the baseline '
             f'(black tick); each row on its own scale</text>']
    for i, f in enumerate(findings):
        y = 24 + i * row
        cls, verdict = _verdict(f)
        scale = max(abs(f.value), abs(f.baseline or 0.0), 1e-12)
        w = bar_w * abs(f.value) / scale
        parts.append(f'<g class="finding" data-verdict="{cls}"><title>{_esc(f.description)}</title>'
                     f'<text x="4" y="{y + 15}" font-size="11">[{_esc(f.observer)}] {_esc(f.name[:70])}</text>'
                     f'<rect x="{label_w}" y="{y + 4}" width="{w:.1f}" height="14" fill="{_VERDICT_COLOURS[cls]}"/>')
        if f.baseline is not None:
            bx = label_w + bar_w * abs(f.baseline) / scale
            parts.append(f'<line x1="{bx:.1f}" y1="{y}" x2="{bx:.1f}" y2="{y + 22}" stroke="#000" stroke-width="2"/>')
        parts.append(f'<text x="{label_w + bar_w + 8}" y="{y + 15}" font-size="11">{f.value:.4g}'
                     f'{"" if f.baseline is None else f" vs {f.baseline:.4g}"} · {_esc(verdict)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _figure_svg(fig: Figure) -> str:
    """A finding's picture: a heatmap of counts (matrix) or bars (histogram), with the numbers written in."""
    if fig.kind == "matrix":
        cell, left, top = 34, 90, 90
        rows, cols = len(fig.values), len(fig.values[0]) if fig.values else 0
        width, height = left + cell * cols + 10, top + cell * rows + 10
        peak = max((v for r in fig.values for v in r), default=1.0) or 1.0
        parts = [f'<svg class="figure matrix" role="img" aria-label="{_esc(fig.title)}" '
                 f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                 f'viewBox="0 0 {width} {height}">']
        for j, c in enumerate(fig.columns):
            x = left + cell * j + cell / 2
            parts.append(f'<text x="{x}" y="{top - 6}" font-size="10" transform="rotate(-60 {x} {top - 6})">'
                         f'{_esc(c)}</text>')
        for i, (label, row) in enumerate(zip(fig.rows, fig.values, strict=True)):
            y = top + cell * i
            parts.append(f'<text x="{left - 6}" y="{y + cell / 2 + 4}" font-size="10" text-anchor="end">'
                         f'{_esc(label)}</text>')
            for j, v in enumerate(row):
                shade = int(255 - 200 * v / peak)
                parts.append(f'<rect x="{left + cell * j}" y="{y}" width="{cell - 1}" height="{cell - 1}" '
                             f'fill="rgb({shade},{shade},255)"/><text x="{left + cell * j + cell / 2}" '
                             f'y="{y + cell / 2 + 4}" font-size="10" text-anchor="middle">{v:g}</text>')
        return "".join([*parts, "</svg>"])
    counts = fig.values[0] if fig.values else ()
    width, height, pad = 60 + 52 * len(counts), 170, 30
    peak = max(counts, default=1.0) or 1.0
    parts = [f'<svg class="figure histogram" role="img" aria-label="{_esc(fig.title)}" '
             f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    for j, (label, v) in enumerate(zip(fig.columns, counts, strict=True)):
        h = (height - 2 * pad) * v / peak
        x = 30 + 52 * j
        parts.append(f'<rect x="{x}" y="{height - pad - h:.1f}" width="40" height="{h:.1f}" fill="#ff7f0e"/>'
                     f'<text x="{x + 20}" y="{height - pad - h - 4:.1f}" font-size="10" text-anchor="middle">{v:g}'
                     f'</text><text x="{x + 20}" y="{height - pad + 14}" font-size="10" text-anchor="middle">'
                     f'{_esc(label)}</text>')
    return "".join([*parts, "</svg>"])


def _line_svg(title: str, values: Sequence[float], width: int = 420, height: int = 180) -> str:
    vals = [float(v) for v in values]
    pad = 34
    parts = [f'<svg class="curve" role="img" aria-label="{_esc(title)}" xmlns="http://www.w3.org/2000/svg" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
             f'<text x="{width / 2}" y="14" text-anchor="middle" font-size="12">{_esc(title)}</text>']
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
    width, label_w, row = 760, 280, 20
    height = row * len(items) + 24
    top = max((b for _, b in items), default=1) or 1
    parts = [f'<svg class="bytes" role="img" aria-label="bytes per message kind, {_esc(label)}" '
             f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    for i, (kind, b) in enumerate(items):
        y = 6 + i * row
        cls, _ = protection_class(kind)
        parts.append(f'<text x="4" y="{y + 13}" font-size="11">{_esc(kind)}</text>'
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
th{background:#f5f5f5;text-align:left}code{font-size:12px}.chip{display:inline-block;width:10px;height:10px;
margin-right:5px;border-radius:2px}.legend span{margin-right:14px}.scroll{overflow-x:auto}
.metrics td:first-child{font-family:monospace}details summary{cursor:pointer;font-weight:600}
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


def render_html(outcome: AuditOutcome, *, title: str | None = None) -> str:
    """The whole report as one HTML document (no external resources)."""
    runs: list[tuple[str, Transcript]] = list(outcome.transcripts)
    sections = dict(outcome.sections) if outcome.sections else {}
    name = title or f"vflcrypto audit: {outcome.protocol}"
    legend = "".join(f'<span><span class="chip" style="background:{c}"></span>{k}</span>'
                     for k, c in PROTECTION_COLOURS.items() if k != "undeclared")
    body = [f"<h1>{_esc(name)}</h1>",
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
                    f'<h3>Message sequence</h3><div class="scroll">{_sequence_svg(label, entries)}</div>'
                    f"<h3>Bytes per message kind</h3>{_bytes_svg(label, entries)}")
        body.append("<h3>What each role received</h3>" + _ledger(report if report is not None else
                                                                  _report_of(transcript)))
    if not runs:
        body.append("<h2>What each role received</h2>" + _ledger(outcome.report))
    if outcome.findings:
        body.append("<h2>Empirical checks (attacks on the messages each role received)</h2>"
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

    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []

    def save(fig: Any, name: str) -> None:
        paths.append(out_dir / name)
        fig.savefig(paths[-1], dpi=130, bbox_inches="tight")
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
