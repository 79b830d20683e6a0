"""An audit over several runs of a protocol keeps each run's messages in its own section (text and JSON)."""

from __future__ import annotations

from vflcrypto.protocols import align

from vflcrypto.audit.ledger import AuditOutcome, audit_runs


def test_each_run_has_its_own_section_and_the_joined_report_keeps_every_kind() -> None:
    both = align.run_local([f"i{k}" for k in range(20)], [f"i{k}" for k in range(10, 30)], mode="both")
    size = align.run_local([f"i{k}" for k in range(20)], [f"i{k}" for k in range(10, 30)], mode="size")
    report, sections = audit_runs({"both learn": both.transcript, "size only": size.transcript})
    assert [label for label, _ in sections] == ["both learn", "size only"]
    kinds = [{r.kind for r in s.rows} for _, s in sections]
    assert kinds[0] != kinds[1] and {r.kind for r in report.rows} == kinds[0] | kinds[1]
    outcome = AuditOutcome("align", report, sections=sections)
    text = outcome.to_text()
    first, second = text.index("== run 1 of 2: align, both learn =="), text.index("== run 2 of 2: align, size only ==")
    assert first < second
    only_both = sorted(kinds[0] - kinds[1])
    assert only_both and all(first < text.index(k) < second for k in only_both)  # listed in its own run only
    runs = outcome.to_dict()["runs"]
    assert [r["run"] for r in runs] == ["both learn", "size only"] and all("parties" in r for r in runs)


def test_a_single_run_audit_prints_one_listing() -> None:
    run = align.run_local(["a", "b"], ["b", "c"], mode="both")
    from vflcrypto.audit.ledger import audit

    text = AuditOutcome("align", audit(run.transcript)).to_text()
    assert "== run" not in text and "received:" in text
