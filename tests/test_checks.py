"""Audits cannot go blind: a declared check that did not run, or ran without power, fails the audit.

Each test here stands for one structural cause of a blind audit (silent absence, a check
without power, a by-design finding that hides a failure) and fails on an audit that lets
it through.
"""

from __future__ import annotations

import json
import secrets

import numpy as np
import pytest

from vflcrypto.audit import attacks
from vflcrypto.audit.checks import (
    CORRELATION_FAILURE,
    EXACT,
    KS_MASK_FAILURE,
    Check,
    checks_table,
    expect,
    mask_checks,
    unrandomized_check,
)
from vflcrypto.audit.ledger import FAILED, HOLDS, NOT_MEASURED, AuditOutcome, AuditReport, EmpiricalFinding
from vflcrypto.runtime.declarations import Protection

M = (1 << 61) - 1


def _outcome(*findings: EmpiricalFinding) -> AuditOutcome:
    return AuditOutcome("x", AuditReport(()), findings)


def test_a_mask_check_without_messages_is_not_measured_never_silent() -> None:
    found = attacks.ring_mask_findings("c", "x.masked", "v", [[], []], M)
    assert [(f.name, f.verdict) for f in found] == [("v: uniform over Z_M", NOT_MEASURED),
                                                   ("v: fresh mask per message", NOT_MEASURED)]
    assert "received no x.masked" in found[0].description
    real = attacks.real_mask_findings("c", "x.masked", "v", [[]], 1.0)
    assert [f.verdict for f in real] == [NOT_MEASURED, NOT_MEASURED]


def test_one_message_per_sender_leaves_freshness_not_measured() -> None:
    one = [[[secrets.randbelow(M) for _ in range(50)]] for _ in range(3)]
    found = {f.name: f for f in attacks.ring_mask_findings("c", "x.masked", "v", one, M)}
    assert found["v: uniform over Z_M"].verdict == HOLDS
    assert found["v: fresh mask per message"].verdict == NOT_MEASURED
    assert "two x.masked messages" in found["v: fresh mask per message"].description


def test_a_declared_check_that_produced_no_finding_fails_the_audit() -> None:
    check = Check("v: the attack", ("x.masked",), Protection.MASKED, "a dropped mask")
    held = expect(_outcome(), (check,))
    assert [(f.name, f.verdict, f.protection) for f in held.findings] == [
        ("v: the attack", NOT_MEASURED, Protection.MASKED)]
    assert held.failures() and "did not run" in held.failures()[0]


def test_a_check_too_small_to_detect_its_failure_is_underpowered() -> None:
    """Six KS samples flag only a distance >= 0.9: a reused mask (about 0.5) could never be detected."""
    six = [[[secrets.randbelow(M) for _ in range(2)] for _ in range(3)]]
    small = attacks.ring_mask_findings("c", "x.masked", "v", six, M)
    assert small[0].min_effect is not None and small[0].min_effect > KS_MASK_FAILURE
    held = expect(_outcome(*small), mask_checks("v", "x.masked", correlation=None))
    uniform = held.finding("v: uniform over Z_M")
    assert uniform.verdict == NOT_MEASURED and "UNDERPOWERED" in uniform.description
    big = [[[secrets.randbelow(M) for _ in range(40)] for _ in range(4)]]
    held = expect(_outcome(*attacks.ring_mask_findings("c", "x.masked", "v", big, M)),
                  mask_checks("v", "x.masked", correlation=None))
    assert {f.verdict for f in held.findings} == {HOLDS}
    assert all(f.min_effect is not None and f.min_effect < KS_MASK_FAILURE for f in held.findings)


def test_an_underpowered_check_that_flags_still_reports_the_failure() -> None:
    flagged = EmpiricalFinding("c", "v: uniform over Z_M", 0.99, 0.9, "d", attacks=("x.masked",),
                               protection=Protection.MASKED, flagged=True, samples=6, min_effect=0.9)
    held = expect(_outcome(flagged), mask_checks("v", "x.masked", correlation=None)[:1])
    assert held.findings[0].verdict == FAILED


def test_exact_checks_always_have_power() -> None:
    found = attacks.unrandomized_finding("p", "x.ct", [None, None])
    held = expect(_outcome(found), (unrandomized_check("x.ct"),))
    assert held.findings[0].verdict == HOLDS and held.findings[0].effect == EXACT
    nothing = attacks.unrandomized_finding("p", "x.ct", [])
    assert expect(_outcome(nothing), (unrandomized_check("x.ct"),)).findings[0].verdict == NOT_MEASURED


def test_correlation_check_power_follows_its_sample_size() -> None:
    """|r| = 0.5 needs about 70 values at alpha = 1e-5: 48 cannot reach it, 96 can."""
    rng = np.random.default_rng(4)  # test data
    for n, powered in ((48, False), (96, True)):
        truth = [[rng.normal(size=n)]]
        stream = [[[secrets.randbelow(M) for _ in range(n)]]]
        (_, _, corr) = attacks.ring_mask_findings("c", "x.m", "v", stream, M, truth=truth)
        assert (corr.min_effect is not None and corr.min_effect < CORRELATION_FAILURE) is powered, corr.min_effect


def test_the_checks_table_names_each_protection_check_and_failure() -> None:
    table = checks_table((*mask_checks("v", "x.masked"), unrandomized_check("x.ct")))
    assert "| masked | `x.masked` | v: fresh mask per message | a mask reused across messages" in table
    assert "| ciphertext | `x.ct` | x.ct: ciphertexts read without the key |" in table
    assert "exact (any occurrence)" in table


def test_audit_json_lists_every_check_with_verdict_samples_and_power(capsys: pytest.CaptureFixture[str]) -> None:
    from vflcrypto.protocols import get

    from vflcrypto.cli import main

    assert main(["audit", "pearson", "--key-bits", "512", "--allow-insecure", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_name = {c["check"]: c for c in data["checks"]}
    for declared in get("pearson").checks:
        c = by_name[declared.name]
        assert c["verdict"] == HOLDS and c["samples"] > 0 and c["effect"] == declared.effect
        assert (c["min_effect"] is not None and c["min_effect"] < declared.effect) or declared.effect == EXACT


def test_audit_exits_1_and_names_a_check_that_did_not_run(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    from vflcrypto.protocols import pearson

    from vflcrypto.cli import main

    ghost = Check("masked products: a check that never runs", ("pearson.masked_products",), Protection.MASKED,
                  "nothing")
    from vflcrypto.protocols import registry

    monkeypatch.setitem(registry(), "pearson", dataclasses.replace(pearson.SPEC, checks=(*pearson.SPEC.checks, ghost)))
    assert main(["audit", "pearson", "--key-bits", "512", "--allow-insecure"]) == 1
    err = capsys.readouterr().err
    assert "NOT MEASURED" in err and "a check that never runs" in err


def test_a_verified_result_that_deviates_is_a_wrong_result() -> None:
    from vflcrypto.audit.checks import verified_result
    from vflcrypto.audit.ledger import LEAKS, WRONG

    ok = verified_result("s", "the sum", 1e-9, 1e-6, "d", attacks=("x.sum",), samples=3)
    bad = verified_result("s", "the sum", 1e-3, 1e-6, "d", attacks=("x.sum",), samples=3)
    assert ok.verdict == LEAKS and bad.verdict == WRONG
    assert _outcome(bad).failures() == [f"WRONG RESULT: [s] the sum: {bad.description}"]
    assert not _outcome(ok).failures()


def test_an_inexact_secure_aggregate_fails_the_hfl_audit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's unmasking is off by one unit in the last place: the by-design output check must say so."""
    import threading

    from vflcrypto.protocols import get
    from vflcrypto.protocols.secagg import math as sm

    from vflcrypto.audit.ledger import WRONG

    honest = sm.self_mask

    def off_by_one_at_the_server(b: bytes, length: int, ring_bits: int = 64) -> np.ndarray:
        mask = honest(b, length, ring_bits)
        if threading.current_thread().name.startswith("party-server"):
            mask = mask + np.ones_like(mask)  # the server removes one unit too much
        return mask

    monkeypatch.setenv("VFLCRYPTO_WORKERS", "1")
    monkeypatch.setattr(sm, "self_mask", off_by_one_at_the_server)
    outcome = get("hfl").run_audit(512, allow_insecure=True)
    found = outcome.finding("the global model over secure aggregation equals the plaintext one")
    assert found.verdict == WRONG and found.value > 0


def test_small_residues_flag_one_unmasked_value_where_ks_has_no_power() -> None:
    ring = 1 << 256
    masked = [secrets.randbelow(ring) for _ in range(6)]
    assert not attacks.small_residues_finding("p", "w: uniform over Z_M", "x.w", masked, ring).flagged
    weights = [12345, ring - 678, 0, 5, 6, 7]  # fixed-point weights sent as they are (negative ones wrap)
    found = attacks.small_residues_finding("p", "w: uniform over Z_M", "x.w", weights, ring)
    assert found.flagged and found.value == 1.0 and found.p_value is not None and found.p_value < 1e-15
    assert attacks.small_residues_finding("p", "w", "x.w", [], ring).verdict == NOT_MEASURED
