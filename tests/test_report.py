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

import pytest
from vflcrypto.protocols import align

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
    assert main(["audit", "exchange", "--key-bits", "512", "--allow-insecure", "--html", str(html),
                 "--plot", str(plots)]) == 0
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


# --------------------------------------------------------------------------- every protocol's audit run


def _every_audit() -> list[str]:
    from vflcrypto.protocols import registry

    return sorted(registry())


def _render_in_chromium(page: Path, tmp_path: Path) -> str:
    res = subprocess.run([*_chromium_args(tmp_path), "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    console = [ln for ln in res.stderr.splitlines() if re.search(r":CONSOLE[:(]|Uncaught", ln)]
    assert not console, console
    return res.stdout


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
        rendered = _render_in_chromium(page, tmp_path)
        assert 'data-rendered="yes"' in rendered
        assert all(row.kind in rendered for row in outcome.report.rows)


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
