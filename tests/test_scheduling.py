"""The suite's pytest-xdist scheduling (tests/conftest.py): which tests share one work unit."""

from __future__ import annotations

from pathlib import Path

from conftest import HONEST_AUDIT_UNIT, honest_audit_tests


def test_the_tests_that_call_honest_audit_are_found_in_the_sources(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text(
        "from conftest import honest_audit\n"
        "def test_uses():\n    assert honest_audit('linreg')\n"
        "def test_nested():\n    def inner():\n        return honest_audit('align')\n    assert inner()\n"
        "def test_other():\n    assert audit('linreg')\n"
        "def helper():\n    return honest_audit('x')\n", encoding="utf-8")
    (tmp_path / "helpers.py").write_text("def test_x():\n    honest_audit('y')\n", encoding="utf-8")
    assert honest_audit_tests(tmp_path) == {f"{tmp_path.name}/test_a.py::test_uses",
                                            f"{tmp_path.name}/test_a.py::test_nested"}


def test_the_suites_consumers_of_the_linreg_audit_share_one_unit() -> None:
    found = honest_audit_tests()
    assert {"tests/test_report.py::test_every_protocols_audit_run_renders",
            "tests/test_linreg.py::test_audit_run_attacks_the_coordinators_view",
            "tests/test_privacy_mutations.py::test_no_declared_protection_is_flagged_in_an_honest_run"} <= found
    assert HONEST_AUDIT_UNIT not in {name.split("::", 1)[0] for name in found}
