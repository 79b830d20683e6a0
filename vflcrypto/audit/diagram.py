"""The sequence diagram of a run (inline SVG) and the text measure every diagram of the report lays out with.

The diagram spans the page (:data:`SEQUENCE_WIDTH`): one lifeline per party, evenly spread,
and one row per arrow (a run of consecutive messages of one kind between two parties),
its label above it in its own band. A label is centred on its arrow, then moved inside
the diagram and wrapped at its `` · `` separators when the gap between lifelines is too
narrow, so no label is clipped, overlaps another or sits on an arrowhead. Labels are
measured with the advance widths of DejaVu Sans (:func:`text_width`), the widest of the
usual sans-serif fonts, so a browser with any of them draws every label within its box.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..errors import UndeclaredMessageError
from ..runtime.declarations import Protection, declaration_for
from ..runtime.transcript import TranscriptEntry

__all__ = ["MAX_ARROWS", "PROTECTION_COLOURS", "SEQUENCE_WIDTH", "arrows", "fit", "lifelines", "nbytes",
           "protection_class", "rounds", "sequence_svg", "text_width", "wrap"]

#: one colour per protection class (colour-blind-safe where it matters: red = in the clear)
PROTECTION_COLOURS = {
    "plaintext": "#d62728", "ciphertext": "#1f77b4", "masked": "#9467bd", "aggregate": "#2ca02c",
    "public": "#7f7f7f", "blinded": "#17becf", "dp": "#ff7f0e", "undeclared": "#000000",
}
MAX_ARROWS = 120  # per run; the rest is summarised in one line
MAX_PERIOD = 48  # longest round (in arrows) that rounds() looks for
SEQUENCE_WIDTH = 1300  # px: the report's page width (1400 px) less its margins
_ORDER = ("plaintext", "ciphertext", "masked", "aggregate", "dp", "blinded", "public")

# advance widths of DejaVu Sans, characters 32..126, in hundredths of an em
_WIDTHS = (32, 40, 46, 84, 64, 95, 78, 27, 39, 39, 50, 84, 32, 36, 32, 34, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
           34, 34, 84, 84, 84, 53, 100, 68, 69, 70, 77, 63, 58, 77, 75, 29, 29, 66, 56, 86, 75, 79, 60, 79, 69, 63,
           61, 73, 68, 99, 69, 61, 69, 39, 34, 39, 84, 50, 50, 61, 63, 55, 63, 62, 35, 63, 63, 28, 28, 58, 28, 97,
           63, 61, 63, 63, 41, 52, 39, 63, 59, 82, 59, 59, 52, 64, 34, 64, 84)
_SAFETY = 1.08  # other fonts and hinting: measure a little wide
_BOLD = 1.3  # DejaVu Sans Bold is up to 26 % wider than Book


def text_width(text: str, size: float, *, bold: bool = False) -> float:
    """Estimated width in px of ``text`` drawn at ``size`` px (never narrower than DejaVu Sans draws it)."""
    ems = sum(_WIDTHS[o - 32] if 32 <= (o := ord(c)) < 127 else 100 for c in text) / 100
    return ems * size * _SAFETY * (_BOLD if bold else 1.0)


def fit(text: str, width: float, size: float, *, bold: bool = False) -> str:
    """``text``, cut with "…" to fit ``width`` px."""
    if text_width(text, size, bold=bold) <= width:
        return text
    while text and text_width(text + "…", size, bold=bold) > width:
        text = text[:-1]
    return text + "…"


def wrap(pieces: Sequence[str], width: float, size: float, sep: str = " · ") -> list[str]:
    """Lines of at most ``width`` px: the pieces joined by ``sep``, a new line where the next piece does not fit
    (a piece wider than a line on its own is cut with "…")."""
    lines: list[str] = []
    for piece in (fit(p, width, size) for p in pieces):
        if lines and text_width(lines[-1] + sep + piece, size) <= width:
            lines[-1] += sep + piece
        else:
            lines.append(piece)
    return lines


def nbytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def protection_class(kind: str) -> tuple[str, str]:
    """(colour class, label) of a message kind: the weakest protection it declares decides the colour."""
    try:
        decl = declaration_for(kind)
    except UndeclaredMessageError:  # an undeclared kind in a recorded transcript: drawn black
        return "undeclared", "undeclared"
    names = {p.value for p in decl.protection}
    names = {"blinded" if n in (Protection.BLINDED.value, Protection.SHUFFLED.value) else n for n in names}
    names = {"dp" if n == Protection.DP.value else n for n in names}
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


def rounds(items: Sequence[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """The run's arrows as (start, length, repeats) blocks: a round repeated k times is drawn once, "×k".

    Two consecutive blocks are the same round when they hold the same arrows (sender,
    receiver, kind), in any order: parties answer concurrently, so the order within a
    round varies from one round to the next. Greedy, shortest period first.
    """
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


def _drawn_rows(entries: Sequence[TranscriptEntry]) -> tuple[list[dict[str, Any]], list[tuple[int, int, int]]]:
    """The arrows to draw (a repeated round once, with the count and bytes of all its repeats) and the
    (first row, rows, repeats) of each repeated round."""
    every = arrows(entries)
    rows: list[dict[str, Any]] = []
    blocks: list[tuple[int, int, int]] = []
    for start, length, repeats in rounds(every):
        if repeats > 1:
            blocks.append((len(rows), length, repeats))
        totals: dict[tuple[str, str, str], list[int]] = {}
        for x in every[start : start + length * repeats]:  # per arrow key over all repeats (order varies)
            t = totals.setdefault((x["sender"], x["receiver"], x["kind"]), [0, 0, 0])
            t[0], t[1], t[2] = t[0] + x["count"], t[1] + x["bytes"], t[2] + 1
        for j in range(length):
            a = dict(every[start + j])
            if repeats > 1:
                count, nb, arrows_of_key = totals[(a["sender"], a["receiver"], a["kind"])]
                per_round = arrows_of_key // repeats
                a["count"], a["bytes"], a["rounds"] = count // per_round, nb // per_round, repeats
            rows.append(a)
    return rows, blocks


# layout (px): label font, line pitch, margin, arrowhead half-height, band of a round's "×k rounds" label
_FONT, _LINE, _PAD, _HEAD, _BAND = 11, 13, 6, 5, 18


def sequence_svg(label: str, entries: Sequence[TranscriptEntry], width: int = SEQUENCE_WIDTH) -> str:
    """The run as a sequence diagram ``width`` px wide (see the module docstring for the layout rules)."""
    parties = lifelines(entries)
    rows, blocks = _drawn_rows(entries)
    shown, hidden = rows[:MAX_ARROWS], rows[MAX_ARROWS:]
    col = width / max(len(parties), 1)
    x = {p: col * (i + 0.5) for i, p in enumerate(parties)}
    room = width - 2 * _PAD
    body: list[str] = []
    backs: list[str] = []  # the rounds' boxes, drawn under the lifelines and arrows
    y = 34.0  # below the lifeline names
    starts = {first: (length, repeats) for first, length, repeats in blocks}
    open_block: tuple[float, int, int] | None = None  # (top, last row, repeats)

    def close(bottom: float) -> None:
        nonlocal open_block
        if open_block is not None:
            top, _, repeats = open_block
            backs.append(f'<g class="round" data-repeats="{repeats}"><rect x="2" y="{top:.1f}" '
                           f'width="{width - 4}" height="{bottom - top:.1f}" fill="#f4f6fb" stroke="#c9d2e6"/>'
                           f'<text x="{_PAD + 4}" y="{top + 13:.1f}" font-size="{_FONT}" fill="#456">'
                           f"×{repeats} rounds (drawn once)</text></g>")
            open_block = None

    for i, a in enumerate(shown):
        if i in starts:
            close(y - 2)
            length, repeats = starts[i]
            open_block = (y, i + length - 1, repeats)
            y += _BAND
        cls, prot = protection_class(a["kind"])
        colour = PROTECTION_COLOURS[cls]
        x1, x2 = x[a["sender"]], x[a["receiver"]]
        try:
            reveals = declaration_for(a["kind"]).reveals
        except UndeclaredMessageError:
            reveals = "undeclared"
        times = f" ×{a['count']}" if a["count"] > 1 else ""
        lines = wrap([f"{a['kind']}{times}", f"{nbytes(a['bytes'])}{' in all' if a.get('rounds') else ''}", prot],
                     room, _FONT)
        spans = []
        for k, line in enumerate(lines):
            w = text_width(line, _FONT)
            left = min(max((x1 + x2) / 2 - w / 2, _PAD), width - _PAD - w)
            spans.append(f'<tspan x="{left:.1f}" y="{y + 11 + _LINE * k:.1f}">{_esc(line)}</tspan>')
        ya = y + _LINE * len(lines) + _HEAD + 2
        body.append(f'<g class="arrow" data-kind="{_esc(a["kind"])}" data-protection="{cls}">'
                    f'<title>{_esc(a["sender"])} → {_esc(a["receiver"])}, step {_esc(a["step"])}: '
                    f'{_esc(reveals)}</title>'
                    f'<line x1="{x1:.1f}" y1="{ya:.1f}" x2="{x2:.1f}" y2="{ya:.1f}" stroke="{colour}" '
                    f'stroke-width="2" marker-end="url(#arrow-{cls})"/>'
                    f'<text class="label" fill="{colour}" font-size="{_FONT}">{"".join(spans)}</text></g>')
        y = ya + _HEAD + 3
        if open_block is not None and i == open_block[1]:
            close(y + 1)
            y += 4
    close(y + 1)
    if hidden:
        n = sum(a["count"] for a in hidden)
        kinds = sorted({a["kind"] for a in hidden})
        lines = wrap([f"… {n} more messages, of kinds {kinds[0]}", *kinds[1:]], room, 12, sep=", ")
        body.append('<text class="more" font-size="12" fill="#555">' + "".join(
            f'<tspan x="{_PAD}" y="{y + 12 + 15 * k:.1f}">{_esc(t)}</tspan>' for k, t in enumerate(lines)) + "</text>")
        y += 15 * len(lines) + 4
    height = int(y + 10)
    head = [f'<svg class="sequence" role="img" aria-label="message sequence of {_esc(label)}" '
            f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
            "<defs>" + "".join(
                f'<marker id="arrow-{c}" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" '
                f'markerWidth="{2 * _HEAD}" markerHeight="{2 * _HEAD}" orient="auto-start-reverse">'
                f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
                for c, colour in PROTECTION_COLOURS.items()) + "</defs>"]
    for p in parties:
        name = fit(p, col - 2 * _PAD, 12, bold=True)
        w = text_width(name, 12, bold=True)
        cx = min(max(x[p], _PAD + w / 2), width - _PAD - w / 2)
        head.append(f'<line x1="{x[p]:.1f}" y1="26" x2="{x[p]:.1f}" y2="{height - 6}" stroke="#bbb" '
                    'stroke-dasharray="4 3"/>'
                    f'<text class="lifeline-name" x="{cx:.1f}" y="18" text-anchor="middle" font-size="12" '
                    f'font-weight="600"><title>{_esc(p)}</title>{_esc(name)}</text>')
    return "".join([head[0], head[1], *backs, *head[2:], *body, "</svg>"])
