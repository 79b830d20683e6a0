"""The HTML audit report: self-contained, every role and message kind of the run drawn, renders in a browser.

The browser test runs Debian's headless Chromium (``.ci/run`` installs it; the test skips
cleanly where it is absent), checks that the report's script ran without console errors
and that the rendered page names every role and kind, and keeps a screenshot in
``artifacts/`` (``$VFLCRYPTO_ARTIFACTS`` overrides the directory).
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from vflcrypto.protocols import align

from vflcrypto.audit import literature as L
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, Figure, audit_runs
from vflcrypto.audit.report import arrows, protection_class, render_html, write_plots
from vflcrypto.cli.audit import load_all_protocols
from vflcrypto.runtime.declarations import Protection

ROOT = Path(__file__).resolve().parents[1]
load_all_protocols()  # every declaration registered: the colours come from them


@pytest.fixture(scope="module")
def outcome() -> AuditOutcome:
    both = align.run_local([f"i{k}" for k in range(30)], [f"i{k}" for k in range(10, 40)], mode="both")
    size = align.run_local([f"i{k}" for k in range(30)], [f"i{k}" for k in range(10, 40)], mode="size")
    runs = {"both learn": both.transcript, "size only": size.transcript}
    report, sections = audit_runs(runs)
    findings = (EmpiricalFinding("passive", "a held protection", 0.01, 0.05, "KS distance", attacks=("align.blinded",),
                                 protection=Protection.BLINDED, flagged=False),
                EmpiricalFinding("active", "a leak by design", 20.0, 0.0, "the intersection", flagged=True,
                                 figure=Figure.contingency("classes against clusters", [0, 0, 1, 1, 1],
                                                           [5, 5, 7, 7, 5])),
                EmpiricalFinding("active", "tiny bins", 0.5, 0.0, "bins", flagged=True,
                                 figure=Figure.histogram("rows per bin", [3, 1, 0], ["1", "2", "3+"])))
    return AuditOutcome("align", report, findings, {"intersection": 20.0}, sections=sections,
                        transcripts=tuple(runs.items()), curves={"a curve": [3.0, 2.0, 1.5, 1.4]})


def test_the_report_is_self_contained_and_names_every_role_and_kind(outcome: AuditOutcome) -> None:
    page = render_html(outcome)
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', page)  # nothing fetched from anywhere
    for row in outcome.report.rows:
        assert f"data-kind=\"{row.kind}\"" in page and row.receiver in page
        assert html.escape(row.reveals[:40]) in page
    sends = sum(len(arrows(t.entries())) for _, t in outcome.transcripts)
    assert page.count('<g class="arrow"') == sends
    assert page.count('<g class="finding"') == 3
    assert 'class="figure matrix"' in page and 'class="figure histogram"' in page and "classes against clusters" in page
    assert 'data-verdict="held"' in page and 'data-verdict="by-design"' in page
    assert "Run 1: both learn" in page and "Run 2: size only" in page and "a curve" in page


def test_protection_colours_follow_the_declarations() -> None:
    assert protection_class("align.blinded")[0] == "blinded"
    assert protection_class("secagg.masked_input")[0] == "masked"
    assert protection_class("protovfl.embedding")[0] == "plaintext"
    cls, label = protection_class("secagg.forward")
    assert cls == "ciphertext" and "key: client" in label
    assert protection_class("no.such_kind") == ("undeclared", "undeclared")


def test_plots_are_png_files(outcome: AuditOutcome, tmp_path: Path) -> None:
    paths = write_plots(outcome, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == ["align-bytes.png", "align-checks.png", "align-curves.png", "align-sequence-1.png",
                     "align-sequence-2.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_audit_cli_writes_the_report(tmp_path: Path) -> None:
    from vflcrypto.cli import main

    html, plots = tmp_path / "r" / "exchange.html", tmp_path / "png"
    old = os.umask(0o022)
    try:
        assert main(["audit", "exchange", "--key-bits", "512", "--allow-insecure", "--html", str(html),
                     "--plot", str(plots)]) == 0
    finally:
        os.umask(old)
    assert html.stat().st_mode & 0o777 == 0o644  # the usual mode, not a temporary file's 0600
    page = html.read_text(encoding="utf-8")
    assert "exchange.encrypted_residuals" in page and "Empirical checks" in page
    assert (plots / "exchange-sequence-1.png").is_file()


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _chromium_args(tmp_path: Path) -> list[str]:
    """Headless Chromium with its own profile, logging console messages to stderr."""
    exe = _chromium()
    assert exe is not None
    return [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]


@pytest.mark.skipif(_chromium() is None, reason="no Chromium (Debian package 'chromium'; .ci/run installs it)")
def test_the_report_renders_in_headless_chromium(outcome: AuditOutcome, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_html(outcome), encoding="utf-8")
    common = _chromium_args(tmp_path)
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [ln for ln in dom.stderr.splitlines() if re.search(r":CONSOLE[:(]|Uncaught", ln)]
    assert not console, console  # the report logs nothing: any console line is an error or a warning
    rendered = dom.stdout
    assert 'data-rendered="yes"' in rendered  # the report's script ran to its end
    kinds = {r.kind for r in outcome.report.rows}
    assert f"{sum(len(arrows(t.entries())) for _, t in outcome.transcripts)} arrows, {len(kinds)} message kinds" \
        in rendered
    for row in outcome.report.rows:
        assert row.kind in rendered and f"{row.receiver} ({row.receiver_role})" in rendered
    artifacts = Path(os.environ.get("VFLCRYPTO_ARTIFACTS", ROOT / "artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "audit-report.png"
    res = subprocess.run([*common, f"--screenshot={shot}", "--window-size=1400,2400", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", res.stderr[-2000:]


# --------------------------------------------------------------------------- layout: no label clipped or overlapped

#: writes the box of every <text> of every <svg> (relative to its SVG) and every arrowhead into the page
_MEASURE = """
<script>
(function () {
  var out = [];
  document.querySelectorAll('svg').forEach(function (svg) {
    var r = svg.getBoundingClientRect();
    var d = {cls: svg.getAttribute('class'), width: r.width, height: r.height, texts: [], heads: []};
    svg.querySelectorAll('text').forEach(function (t) {
      var b = t.getBoundingClientRect();
      d.texts.push({text: t.textContent, x: b.left - r.left, y: b.top - r.top, w: b.width, h: b.height,
                    rotated: t.hasAttribute('transform')});
    });
    svg.querySelectorAll('g.arrow line').forEach(function (l) {
      var x = +l.getAttribute('x2'), y = +l.getAttribute('y2');
      d.heads.push({text: 'arrowhead', x: x - 10, y: y - 5, w: 20, h: 10});
    });
    out.push(d);
  });
  var pre = document.createElement('pre');
  pre.id = 'boxes';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def _stress_outcome() -> AuditOutcome:
    """A run drawn at the limits: seven parties with long names, arrows between neighbours and across the page,
    long protection labels, an undeclared kind wider than the page, a repeated round, more arrows than are drawn,
    and checks of every verdict with long names."""
    import random

    from vflcrypto.runtime.transcript import Endpoint, Transcript

    parties = [Endpoint(f"party-with-a-rather-long-name-{i}" if i % 2 else f"p{i}", "active" if i == 0 else "passive")
               for i in range(7)]
    kinds = ["logreg.masked_gradient", "secagg.forward", "exchange.encrypted_residuals", "logreg.ack",
             "vendor.an_undeclared_message_kind_" + "with_a_very_long_name_" * 8]
    t = Transcript()

    def send(a: int, b: int, kind: str, n: int = 1) -> None:
        for _ in range(n):
            t.record("send", 0, parties[a], parties[b], kind, 123_456_789)
            t.record("recv", 0, parties[a], parties[b], kind, 123_456_789)

    send(0, 1, kinds[0], 3)  # neighbours at the left edge
    send(1, 0, kinds[2])
    send(6, 5, kinds[1])  # neighbours at the right edge
    send(6, 0, kinds[4])  # across the page, wider than the page
    for _ in range(5):  # a repeated round
        send(0, 1, kinds[1])
        send(2, 3, kinds[0])
        send(3, 2, kinds[3])
    rng = random.Random(1)  # layout test data, not a secret
    for _ in range(160):  # more arrows than MAX_ARROWS
        a, b = rng.sample(range(7), 2)
        send(a, b, rng.choice(kinds))
    report, sections = audit_runs({"stress": t})
    long = "a check whose name is much longer than the column it is drawn in, " * 3
    findings = (EmpiricalFinding("p0", "held " + long, 0.01, 0.05, "d", protection=Protection.MASKED),
                EmpiricalFinding("p0", "failed " + long, 123456.0, 0.5, "d", protection=Protection.CIPHERTEXT,
                                 flagged=True),
                EmpiricalFinding("p2", "by design " + long, 1.0, 0.6227, "d", flagged=True,
                                 figure=Figure.contingency("long labels", ["a-long-class-name"] * 3 + ["b"] * 2,
                                                           ["a-long-cluster-name", 2, 2, 3, 3])),
                EmpiricalFinding("p4", "nothing to test", float("nan"), None, "d", protection=Protection.SHUFFLED,
                                 measured=False, figure=Figure.histogram("wide bins", [3, 1, 123456],
                                                                         ["a-rather-wide-bin", "2", "3+"])))
    return AuditOutcome("stress", report, findings, sections=sections, transcripts=(("stress", t),),
                        curves={"a curve whose name is far too long to be the title of so small a plot": [3.0, 1.0]})


def _boxes(page: str, tmp_path: Path) -> list[dict[str, Any]]:
    """The measured boxes of every SVG of ``page`` (in headless Chromium)."""
    return _measure(page, tmp_path)[0]


def _measure(page: str, tmp_path: Path) -> tuple[list[dict[str, Any]], str]:
    """The measured boxes of every SVG of ``page`` and the rendered DOM (the page must log nothing)."""
    import json

    path = tmp_path / "measured.html"
    path.write_text(page.replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    res = subprocess.run([*_chromium_args(tmp_path), "--window-size=1400,2400", "--dump-dom", path.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    console = [ln for ln in res.stderr.splitlines() if re.search(r":CONSOLE[:(]|Uncaught", ln)]
    assert not console, console
    found = re.search(r'<pre id="boxes">(.*?)</pre>', res.stdout, re.DOTALL)
    assert found, "the measuring script did not run"
    svgs: list[dict[str, Any]] = json.loads(html.unescape(found.group(1)))
    return svgs, res.stdout


def _overlap(a: dict[str, float], b: dict[str, float], slack: float = 0.5) -> bool:
    return (min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"]) > slack
            and min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"]) > slack)


def _layout_faults(svgs: list[dict[str, Any]]) -> list[str]:
    """Every label outside its SVG, every two labels of one SVG that overlap, every label on an arrowhead."""
    faults = []
    for svg in svgs:
        texts = [t for t in svg["texts"] if t["w"] > 0]
        for t in texts:
            if t["x"] < -0.5 or t["y"] < -0.5 or t["x"] + t["w"] > svg["width"] + 0.5 \
                    or t["y"] + t["h"] > svg["height"] + 0.5:
                faults.append(f"{svg['cls']}: {t['text'][:60]!r} at {t} leaves the {svg['width']}x{svg['height']} SVG")
        flat = [t for t in texts if not t["rotated"]]
        for i, a in enumerate(flat):
            for b in flat[i + 1:] + svg["heads"]:
                if _overlap(a, b):
                    faults.append(f"{svg['cls']}: {a['text'][:60]!r} overlaps {b['text'][:60]!r}")
    return faults


@pytest.mark.skipif(_chromium() is None, reason="no Chromium (Debian package 'chromium'; .ci/run installs it)")
def test_every_label_of_every_diagram_lies_inside_its_svg_and_clear_of_the_others(
        outcome: AuditOutcome, tmp_path: Path) -> None:
    for case in (outcome, _stress_outcome()):
        svgs = _boxes(render_html(case), tmp_path)
        sequences = [s for s in svgs if s["cls"] == "sequence"]
        assert len(sequences) == len(case.transcripts) and all(s["texts"] and s["heads"] for s in sequences)
        assert {"findings", "figure matrix", "figure histogram", "curve"} <= {s["cls"] for s in svgs}
        assert not _layout_faults(svgs), "\n".join(_layout_faults(svgs)[:20])


def test_the_layout_check_sees_a_clipped_and_an_overlapping_label() -> None:
    """The check above can fail: a label past the edge, two labels on one spot, a label on an arrowhead."""
    box = {"text": "a", "x": 10.0, "y": 10.0, "w": 50.0, "h": 12.0, "rotated": False}
    svg = {"cls": "sequence", "width": 100.0, "height": 40.0, "heads": [], "texts": [box]}
    assert not _layout_faults([svg])
    assert _layout_faults([{**svg, "texts": [{**box, "x": -3.0}]}])
    assert _layout_faults([{**svg, "texts": [box, {**box, "x": 40.0, "text": "b"}]}])
    assert _layout_faults([{**svg, "heads": [{"text": "arrowhead", "x": 50.0, "y": 15.0, "w": 20.0, "h": 10.0}]}])


def test_the_sequence_diagram_spreads_its_lifelines_over_the_page(outcome: AuditOutcome) -> None:
    from vflcrypto.audit.diagram import SEQUENCE_WIDTH, sequence_svg

    for label, t in outcome.transcripts:
        svg = sequence_svg(label, t.entries())
        xs = sorted({float(x) for x in re.findall(r'<line x1="([\d.]+)" y1="26"', svg)})
        assert len(xs) == 2 and xs[-1] - xs[0] >= SEQUENCE_WIDTH / 2, xs  # two parties, half the page apart
        assert f'width="{SEQUENCE_WIDTH}"' in svg


def test_check_bars_show_their_verdicts_in_full(outcome: AuditOutcome) -> None:
    page = render_html(outcome)
    assert "· leaks (by design)</text>" in page and "· holds (blinded)</text>" in page


# --------------------------------------------------------------------------- every protocol's audit run


def _every_audit() -> list[str]:
    from vflcrypto.protocols import registry

    return sorted(registry())


@pytest.mark.slow
@pytest.mark.parametrize("name", _every_audit())
def test_every_protocols_audit_run_renders(name: str, tmp_path: Path) -> None:
    """The audit run of every registered protocol as a report: every role and kind it recorded is on the page,
    and (with Chromium) the page renders without a console message."""
    from conftest import honest_audit

    if name in ("split", "oneshot", "fewshot", "protovfl"):
        pytest.importorskip("torch")
    outcome = honest_audit(name)
    assert outcome.transcripts, f"{name}: the audit keeps no transcript to draw"
    page = tmp_path / f"{name}.html"
    page.write_text(render_html(outcome), encoding="utf-8")
    text = page.read_text(encoding="utf-8")
    for row in outcome.report.rows:
        assert row.kind in text and f"{html.escape(row.receiver)} ({html.escape(row.receiver_role)})" in text
    if _chromium() is not None:
        svgs, rendered = _measure(text, tmp_path)
        assert 'data-rendered="yes"' in rendered
        assert all(row.kind in rendered for row in outcome.report.rows)
        assert not _layout_faults(svgs), "\n".join(_layout_faults(svgs)[:20])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["split", "oneshot", "fewshot"])
def test_every_representation_vfl_audit_shows_its_scorecard(name: str) -> None:
    """Each party: norm and direction scoring and model completion; the server: the decoder per representation kind
    and party. These protocols leak by design: every attack beats its baseline on the digits. (Here, beside the
    report test, so that one worker's cached audits serve both.)"""
    from conftest import honest_audit

    pytest.importorskip("torch")
    outcome = honest_audit(name)
    card = outcome.scorecard()
    kinds = {"split": 1, "oneshot": 2, "fewshot": 3}[name]
    assert len(card) == 2 * 3 + 2 * kinds
    assert {r["paper"] for r in card} == {L.LI_2022, L.FU_2022, L.HE_2019}
    assert {r["role"] for r in card} == {"party", "server"}
    assert all(r["verdict"] == "leaks (by design)" for r in card), card
    assert not outcome.unmeasured()
    direction = [r for r in card if "direction scoring" in r["attack"]]
    assert all(r["score"] >= 0.9 for r in direction)


def test_repeated_rounds_are_drawn_once_whatever_the_order_within_them() -> None:
    from vflcrypto.audit.report import rounds

    def a(s: str, r: str, k: str) -> dict[str, object]:
        return {"sender": s, "receiver": r, "kind": k, "count": 1, "bytes": 10}

    setup = [a("A", "B", "setup"), a("A", "C", "setup")]
    one = [a("A", "B", "req"), a("A", "C", "req"), a("B", "A", "rep"), a("C", "A", "rep")]
    swapped = [one[1], one[0], one[3], one[2]]  # the parties answered in another order
    items = [*setup, *one, *swapped, *one, a("A", "B", "done")]
    assert rounds(items) == [(0, 1, 1), (1, 1, 1), (2, 4, 3), (14, 1, 1)]


def test_train_html_draws_every_run_the_command_made(tmp_path: Path) -> None:
    from vflcrypto.cli import main

    rows = range(30)
    (tmp_path / "a.csv").write_text("id,y,x\n" + "".join(f"r{i},{i % 5},{i % 3}\n" for i in rows))
    (tmp_path / "b.csv").write_text("id,z\n" + "".join(f"r{i},{(i * 7) % 4}\n" for i in range(5, 35)))
    out = tmp_path / "train.html"
    assert main(["train", "linreg", "--active", str(tmp_path / "a.csv"), "--passive", str(tmp_path / "b.csv"),
                 "--id-column", "id", "--label", "y", "--epochs", "2", "--key-bits", "512", "--allow-insecure",
                 "--test-fraction", "0.2", "--html", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "Run 1: 1. align" in page and "Run 2: 2. linreg" in page and "linreg.encrypted_u" in page
    assert "s from the first message to the last" in page


def test_a_contingency_figure_counts_every_pair() -> None:
    fig = Figure.contingency("t", ["a", "a", "b", "b", "b"], [1, 1, 2, 2, 1])
    assert fig.rows == ("class a", "class b") and fig.columns == ("cluster 1", "cluster 2")
    assert fig.values == ((2.0, 0.0), (1.0, 2.0))


def test_the_attack_pictures_of_the_audits() -> None:
    from conftest import honest_audit

    pytest.importorskip("torch")
    one = honest_audit("oneshot")
    mats = [f.figure for f in one.findings if f.figure is not None and f.figure.kind == "matrix"]
    assert mats and all(sum(map(sum, m.values)) > 0 for m in mats)
    sb = honest_audit("secureboost")
    hists = [f.figure for f in sb.findings if f.figure is not None and f.figure.kind == "histogram"]
    assert hists and all(sum(h.values[0]) > 0 for h in hists)
