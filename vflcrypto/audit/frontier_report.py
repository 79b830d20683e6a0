"""A defence's privacy–utility frontier as pictures: a self-contained HTML page and a PNG.

The figures of ``vflcrypto audit NAME --defence D --budgets ... --html FILE / --plot DIR`` and of
``bench/privacy_frontier.py``: for one or several :class:`~vflcrypto.audit.defences.Frontier` of
the same setting, the utility (test AUC where the task is binary, else test accuracy) against
each attack's score, one curve per defence, the undefended run marked, the attack's baseline
and (when given) the plaintext model's utility drawn as reference lines; and the utility against
ε for the defences that have one (an empirical defence, Marvell, has none and is said so).

Nothing here knows a protocol: everything comes from the frontiers.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .defences import Frontier, FrontierPoint

__all__ = ["attack_keys", "render_frontier_html", "utility", "utility_name", "write_frontier_png"]

_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def utility_name(frontiers: Sequence[Frontier]) -> str:
    """``test AUC`` when every point of every frontier has one (a binary task), else ``test accuracy``."""
    pts = [p for f in frontiers for p in f.points]
    return "test AUC" if pts and all("test_auc" in p.utility for p in pts) else "test accuracy"


def utility(p: FrontierPoint, name: str) -> float | None:
    return p.utility.get("test_auc") if name == "test AUC" else p.accuracy


def attack_keys(frontiers: Sequence[Frontier]) -> list[str]:
    """The attacks every frontier scored, in the first frontier's order."""
    keys = [k for k in frontiers[0].attacks] if frontiers else []
    return [k for k in keys if all(k in f.attacks for f in frontiers)]


def _series(f: Frontier, x: str, uname: str) -> list[tuple[float, float, str]]:
    out = []
    for p in f.points:
        u = utility(p, uname)
        xv = p.epsilon if x == "epsilon" else p.scores.get(x)
        if u is not None and xv is not None and math.isfinite(xv):
            out.append((float(xv), float(u), "none" if p.budget is None else f"{p.budget:g}"))
    return sorted(out)  # a frontier: drawn along its x axis


def _xy_svg(title: str, xlabel: str, ylabel: str, series: dict[str, list[tuple[float, float, str]]], *,
            vline: float | None = None, hline: tuple[str, float] | None = None, logx: bool = False,
            colours: dict[str, str] | None = None, width: int = 460, height: int = 300) -> str:
    """A small scatter-and-line chart as inline SVG (one polyline per series, points labelled by budget)."""
    colours = colours or {name: _COLOURS[i % len(_COLOURS)] for i, name in enumerate(series)}
    pts = [(x, y) for s in series.values() for x, y, _ in s]
    if not pts:
        return f'<p class="empty">{html.escape(title)}: nothing to draw</p>'
    fx = (lambda v: math.log10(v)) if logx else (lambda v: v)
    xs = [fx(x) for x, _ in pts] + ([fx(vline)] if vline is not None else [])
    ys = [y for _, y in pts] + ([hline[1]] if hline else [])
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    x0, x1 = (x0 - 0.5, x1 + 0.5) if x1 - x0 < 1e-9 else (x0 - 0.05 * (x1 - x0), x1 + 0.05 * (x1 - x0))
    y0, y1 = (y0 - 0.05, y1 + 0.05) if y1 - y0 < 1e-9 else (y0 - 0.05 * (y1 - y0), y1 + 0.05 * (y1 - y0))
    L, R, T, B = 52, 12, 26, 40

    def px(x: float) -> float:
        return L + (fx(x) - x0) / (x1 - x0) * (width - L - R)

    def py(y: float) -> float:
        return height - B - (y - y0) / (y1 - y0) * (height - T - B)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" class="frontier-chart">',
             f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="12">{html.escape(title)}</text>',
             f'<line x1="{L}" y1="{height - B}" x2="{width - R}" y2="{height - B}" stroke="#444"/>',
             f'<line x1="{L}" y1="{T}" x2="{L}" y2="{height - B}" stroke="#444"/>',
             f'<text x="{width / 2}" y="{height - 6}" text-anchor="middle" font-size="11">{html.escape(xlabel)}</text>',
             f'<text x="12" y="{height / 2}" font-size="11" transform="rotate(-90 12 {height / 2})" '
             f'text-anchor="middle">{html.escape(ylabel)}</text>']
    for v in (y0, (y0 + y1) / 2, y1):
        parts.append(f'<text x="{L - 4}" y="{py(v) + 4:.1f}" text-anchor="end" font-size="9">{v:.3f}</text>')
    for v in (x0, (x0 + x1) / 2, x1):
        shown = 10**v if logx else v
        parts.append(f'<text x="{L + (v - x0) / (x1 - x0) * (width - L - R):.1f}" y="{height - B + 12}" '
                     f'text-anchor="middle" font-size="9">{shown:.3g}</text>')
    if vline is not None:
        parts.append(f'<line x1="{px(vline):.1f}" y1="{T}" x2="{px(vline):.1f}" y2="{height - B}" stroke="#999" '
                     'stroke-dasharray="4 3"><title>the attack\'s baseline</title></line>')
    if hline is not None:
        parts.append(f'<line x1="{L}" y1="{py(hline[1]):.1f}" x2="{width - R}" y2="{py(hline[1]):.1f}" '
                     f'stroke="#555" stroke-dasharray="1 3"><title>{html.escape(hline[0])}: {hline[1]:.3f}'
                     '</title></line>')
    for name, s in series.items():
        colour = colours.get(name, _COLOURS[0])
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in s)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        for x, y, lab in s:
            shape = (f'<rect x="{px(x) - 4:.1f}" y="{py(y) - 4:.1f}" width="8" height="8" fill="{colour}">'
                     if lab == "none" else f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{colour}">')
            tag = "rect" if lab == "none" else "circle"
            parts.append(f"{shape}<title>{html.escape(name)} budget {lab}: ({x:.3f}, {y:.3f})</title></{tag}>")
        parts.append(f'<text x="{width - R - 4}" y="{T + 12 + 13 * list(series).index(name)}" text-anchor="end" '
                     f'font-size="10" fill="{colour}">{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None or x != x else format(x, fmt)


def _table(f: Frontier) -> str:
    extra = sorted({k for p in f.points for k in p.utility})  # as Frontier.to_text: e.g. the test AUC
    names = ["budget", "epsilon", "delta", "test acc", *(k.replace("_", " ") for k in extra), *f.attacks]
    rows = [["none" if p.budget is None else f"{p.budget:g}", _num(p.epsilon), _num(p.delta, ".0e"), _num(p.accuracy),
             *(_num(p.utility.get(k)) for k in extra), *(_num(p.scores.get(k)) for k in f.attacks)] for p in f.points]
    base = f.points[0].baselines if f.points else {}
    rows.append(["baseline", "", "", "", *("" for _ in extra), *(_num(base.get(k)) for k in f.attacks)])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    attacks = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in f.attacks.items())
    return (f"<h2>{html.escape(f.protocol)}: defence {html.escape(f.defence)} (budget: {html.escape(f.budget_name)})"
            f"</h2><p>{html.escape(f.guarantee)}</p><table><tr>{head}</tr>{body}</table><ul>{attacks}</ul>")


def render_frontier_html(frontiers: Sequence[Frontier], *, title: str | None = None,
                         plaintext: float | None = None) -> str:
    """The frontiers as one HTML page (no external resources): per attack, the utility against its score, one curve
    per defence; the utility against ε; and each frontier's table and statement."""
    if not frontiers:
        raise ValueError("no frontier to draw")
    uname = utility_name(frontiers)
    name = title or f"vflcrypto privacy-utility frontier: {frontiers[0].protocol}"
    ref = ("plaintext model", plaintext) if plaintext is not None else None
    colours = {f.defence: _COLOURS[i % len(_COLOURS)] for i, f in enumerate(frontiers)}
    charts = []
    for key in attack_keys(frontiers):
        base = frontiers[0].points[0].baselines.get(key) if frontiers[0].points else None
        charts.append(_xy_svg(f"{uname} against {key}", f"{key} (worst party; dashed: baseline)", uname,
                              {f.defence: _series(f, key, uname) for f in frontiers}, vline=base, hline=ref,
                              colours=colours))
    with_eps = {f.defence: _series(f, "epsilon", uname) for f in frontiers if any(p.epsilon for p in f.points)}
    if with_eps:
        charts.append(_xy_svg(f"{uname} against epsilon", "epsilon (log scale)", uname, with_eps, logx=True,
                              hline=ref, colours=colours))
    no_eps = [f.defence for f in frontiers if not any(p.epsilon for p in f.points)]
    note = (f"<p>No epsilon for {', '.join(no_eps)}: an empirical defence, drawn against the attacks only.</p>"
            if no_eps else "")
    css = ("body{font-family:sans-serif;max-width:1400px;margin:1em auto}table{border-collapse:collapse}"
           "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}.charts{display:flex;flex-wrap:wrap;gap:8px}")
    undefended = "; ".join(f"{f.defence}: undefended {uname} {utility(f.points[0], uname) or float('nan'):.3f}"
                           for f in frontiers if f.points)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(name)}</title>'
            f"<style>{css}</style></head><body><h1>{html.escape(name)}</h1><p>Squares: the undefended run; "
            f"points labelled by budget on hover. {html.escape(undefended)}"
            f"{'' if plaintext is None else f'; plaintext model {plaintext:.3f} (dotted)'}.</p>{note}"
            f'<div class="charts">{"".join(charts)}</div>{"".join(_table(f) for f in frontiers)}</body></html>')


def write_frontier_png(frontiers: Sequence[Frontier], path: str | Path, *, plaintext: float | None = None) -> Path:
    """The same charts as one PNG (matplotlib): a panel per attack and one against ε; written atomically (inside
    :func:`~vflcrypto.data.atomic.atomic_set`, published with the command's other outputs)."""
    import matplotlib

    from ..data.files import atomic_open

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    uname = utility_name(frontiers)
    keys = attack_keys(frontiers)
    eps = [f for f in frontiers if any(p.epsilon for p in f.points)]
    n = max(len(keys) + (1 if eps else 0), 1)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.8 * rows), squeeze=False)
    panels: list[tuple[str, list[Frontier]]] = [(k, list(frontiers)) for k in keys]
    panels += [("epsilon", eps)] if eps else []
    colours: dict[str, Any] = {f.defence: _COLOURS[i % len(_COLOURS)] for i, f in enumerate(frontiers)}
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    for ax, (key, fs) in zip(axes.ravel(), panels, strict=False):
        for f in fs:
            s = _series(f, key, uname)
            if not s:
                continue
            colour = colours[f.defence]
            ax.plot([x for x, _, _ in s], [y for _, y, _ in s], "-o", color=colour, ms=4, label=f.defence)
            for x, y, lab in s:
                if lab == "none":
                    ax.plot([x], [y], "s", color=colour, ms=8)
            for x, y, lab in s:
                ax.annotate(lab, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        if key == "epsilon":
            ax.set_xscale("log")
        else:
            base = fs[0].points[0].baselines.get(key) if fs and fs[0].points else None
            if base is not None:
                ax.axvline(base, color="#999", ls="--", lw=1, label="baseline")
        if plaintext is not None:
            ax.axhline(plaintext, color="#555", ls=":", lw=1, label="plaintext model")
        ax.set_xlabel(key if key != "epsilon" else "epsilon (log)")
        ax.set_ylabel(uname)
        ax.legend(fontsize=7)
    fig.suptitle(f"{frontiers[0].protocol}: privacy-utility frontier (squares: undefended)", fontsize=10)
    out = Path(path)
    try:
        with atomic_open(out, "wb") as fh:
            fig.savefig(fh, format="png", dpi=130, bbox_inches="tight")
    finally:
        plt.close(fig)
    return out
