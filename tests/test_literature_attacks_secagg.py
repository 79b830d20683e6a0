"""The published attacks on secure aggregation and HFL: each succeeds where its paper says it does, stays at its
baseline where it should, and the audits list it in their scorecard.

* The round-difference (disaggregation) attack (So et al., AAAI 2023): the sums of two rounds whose
  survivors differ by one client subtract to that client's input, exactly when the inputs repeat
  across rounds. By design of secure aggregation (it protects one round's sum).
* Model inconsistency (Pasquini, Francati and Ateniese, ACM CCS 2022): a malicious server sends
  the victim one model and the other clients another, so that the round's sum is the victim's
  update. Each client signs the digest of its model into its advertisement and aborts unless
  its neighbours signed the same: the attack succeeds only with that comparison switched off.
"""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest
from vflcrypto.protocols import hfl, secagg
from vflcrypto.protocols.hfl import audit as hfl_audit
from vflcrypto.protocols.secagg import math as sm

from vflcrypto.audit.literature import PAPERS, PASQUINI_2022, SO_2023, round_difference
from vflcrypto.errors import ProtocolError
from vflcrypto.runtime.channel import AuditTap

KINDS = ("secagg.survivors",)
NAMES = [f"client-{i}" for i in range(5)]


def test_the_papers_are_listed() -> None:
    assert PAPERS["so2023"] == SO_2023 and PAPERS["pasquini2022"] == PASQUINI_2022


# --------------------------------------------------------------------------- round difference


def _sums(inputs: dict[str, list[np.ndarray]], survivors: list[list[str]]) -> list[np.ndarray]:
    return [np.sum([inputs[c][k] for c in alive], 0) for k, alive in enumerate(survivors)]


def test_fixed_inputs_and_one_dropout_give_that_clients_input_exactly() -> None:
    rng = np.random.default_rng(0)  # example data
    fixed = {c: [x] * 3 for c, x in zip(NAMES, rng.normal(size=(5, 200)), strict=True)}
    survivors = [NAMES, NAMES, NAMES[:4]]  # client-4 drops in round 2
    f = round_difference("server", "rd", _sums(fixed, survivors), survivors, fixed, attacks=KINDS)
    assert f.paper == SO_2023 and f.protection is None and f.flagged and f.verdict == "leaks by design"
    assert f.value == pytest.approx(1.0, abs=1e-12) and "R^2 1.000" in f.description, f.description
    assert "same survivors" in f.description and f.baseline is not None and f.baseline < 0.3


def test_the_difference_says_nothing_about_a_vector_the_sums_never_held() -> None:
    """Scored against a vector that was in neither round's sum, the attack stays at its baseline."""
    rng = np.random.default_rng(1)  # example data
    inputs = {c: [x] * 3 for c, x in zip(NAMES, rng.normal(size=(5, 200)), strict=True)}
    survivors = [NAMES, NAMES, NAMES[:4]]
    other = {**inputs, "client-4": [rng.normal(size=200)] * 3}  # not what the sums contain
    f = round_difference("server", "rd", _sums(inputs, survivors), survivors, other, attacks=KINDS)
    assert f.measured and not f.flagged and abs(f.value) < 0.3, f


def test_no_two_rounds_differing_by_one_client_is_not_measured() -> None:
    inputs = {c: [np.ones(4)] * 2 for c in NAMES}
    survivors = [NAMES, NAMES[:3]]  # two clients left at once: their sum, not one input
    f = round_difference("server", "rd", _sums(inputs, survivors), survivors, inputs, attacks=KINDS)
    assert not f.measured and f.verdict == "not measured"


def test_secagg_audit_scorecard_lists_the_round_difference() -> None:
    from conftest import honest_audit

    rows = {r["attack"]: r for r in honest_audit("secagg").scorecard()}
    row = rows[secagg.audit.ROUND_DIFFERENCE]
    assert row["paper"] == SO_2023 and row["observer"] == "server" and row["outcome"] == "leaks by design"
    assert row["score"] > 0.999 and row["baseline"] < 0.3, row  # the inputs drift by 0.01 per round only


def test_hfl_audit_scorecard_lists_both_attacks() -> None:
    from conftest import honest_audit

    outcome = honest_audit("hfl")
    rows = {r["attack"]: r for r in outcome.scorecard()}
    diff = rows[hfl_audit.ROUND_DIFFERENCE]
    assert diff["paper"] == SO_2023 and diff["outcome"] == "leaks by design"
    assert diff["score"] > 0.9 and diff["score"] > diff["baseline"] + 0.3, diff
    n4 = len(hfl.digits_clients(5, seed=0, skew=hfl_audit.SKEW)[4].y)
    assert f"client-4: {n4} (true {n4})" in outcome.finding(hfl_audit.ROUND_DIFFERENCE).description
    model = rows[hfl_audit.MODEL_CONSISTENCY]
    assert model["paper"] == PASQUINI_2022 and model["outcome"] == "holds" and model["score"] == 0.0, model
    assert "inconsistent models" in outcome.finding(hfl_audit.MODEL_CONSISTENCY).description


# --------------------------------------------------------------------------- model inconsistency


@pytest.fixture(scope="module")
def honest_run() -> tuple[list[hfl.ClientData], np.ndarray, AuditTap]:
    clients = hfl.digits_clients(5, seed=0, skew=hfl_audit.SKEW)
    tap = AuditTap()
    run = hfl.run_local(clients, 10, config=hfl.HFLConfig(rounds=2), tap=tap, timeout=5)
    return clients, run.result.w, tap


def test_model_inconsistency_isolates_the_victims_update_without_the_digest_check(
        honest_run: tuple[list[hfl.ClientData], np.ndarray, AuditTap], monkeypatch: pytest.MonkeyPatch) -> None:
    clients, w, tap = honest_run
    monkeypatch.setattr(sm, "check_contexts", lambda me, mine, names, contexts: None)
    f = hfl_audit.model_inconsistency_finding(clients, w, tap)
    assert f.paper == PASQUINI_2022 and f.flagged and f.verdict == "protection failed"
    assert f.value > 0.9 and f.baseline is not None and f.baseline < 0.3, f


def test_model_inconsistency_is_detected_and_blocked(
        honest_run: tuple[list[hfl.ClientData], np.ndarray, AuditTap]) -> None:
    clients, w, tap = honest_run
    f = hfl_audit.model_inconsistency_finding(clients, w, tap)
    assert f.measured and not f.flagged and f.value == 0.0 and f.verdict == "holds", f


def test_inconsistent_models_make_the_clients_abort_with_one_clear_line(
        honest_run: tuple[list[hfl.ClientData], np.ndarray, AuditTap]) -> None:
    clients, w, _ = honest_run
    t0 = time.perf_counter()
    with pytest.raises(ProtocolError) as err:
        hfl.run_local(clients, 10, config=hfl.HFLConfig(rounds=1), timeout=5,
                      server=functools.partial(hfl_audit.InconsistentServer, start=w))
    msg = str(err.value)
    assert "\n" not in msg and "inconsistent models" in msg and "round is aborted" in msg, msg
    assert time.perf_counter() - t0 < 4.0  # aborted at once, not after a timeout


def test_the_same_model_to_every_client_trains_as_before(
        honest_run: tuple[list[hfl.ClientData], np.ndarray, AuditTap]) -> None:
    """The digest binds the model, not the client: an honest server's run is unchanged (and bit-identical to plain)."""
    clients, _, _ = honest_run
    secure = hfl.run_local(clients, 10, config=hfl.HFLConfig(rounds=2), timeout=5)
    plain = hfl.run_local(clients, 10, config=hfl.HFLConfig(rounds=2, secure=False), timeout=5)
    np.testing.assert_array_equal(secure.result.w, plain.result.w)
