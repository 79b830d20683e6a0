"""The published attacks on the remaining protocols' views (gradient exchange, Poisson regression), and the
scorecard's rows for the attacks that do not apply to what a role receives (SSHE-LR, WOE, Pearson, exchange).

* Reverse multiplication (Weng et al., arXiv:2011.09290, 2020): a party that learns its own gradient
  ``Zᵀd`` on no more rows than its columns' rank solves it for every residual (the labels, or the
  counts, at the first step); with more rows it recovers none, and the protocols refuse the small
  setting unless ``allow_small_batches``.
* Attacks that do not apply: :attr:`~vflcrypto.audit.ledger.AuditOutcome.inapplicable` rows are listed
  as "does not apply: why" in the scorecard (JSON, text, HTML) and change no verdict.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from vflcrypto.audit.ledger import INAPPLICABLE, AuditOutcome, AuditReport, EmpiricalFinding
from vflcrypto.audit.literature import WENG_2020
from vflcrypto.errors import ConfigurationError
from vflcrypto.runtime.channel import AuditTap

# --------------------------------------------------------------------------- gradient exchange


def _exchange_tap(rows: int, features: int, keys: Any, *, allow: bool) -> tuple[AuditTap, np.ndarray]:
    from vflcrypto.protocols.exchange.roles import run_local

    rng = np.random.default_rng(1)  # example data only
    d, X = rng.standard_normal(rows) * 0.5, rng.standard_normal((rows, features))
    tap = AuditTap()
    run_local(d, X, keys=keys, allow_insecure=True, tap=tap, allow_small_batches=allow)
    return tap, d


def test_exchange_refuses_a_gradient_as_wide_as_the_rows(small_paillier_keys: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"8 entries for 6 rows.*allow_small_batches"):
        _exchange_tap(6, 8, small_paillier_keys, allow=False)


def test_exchange_reverse_multiplication_recovers_d_only_on_few_rows(small_paillier_keys: Any) -> None:
    from vflcrypto.protocols.exchange.audit import residual_recovery_finding

    leaked = residual_recovery_finding(*_exchange_tap(6, 8, small_paillier_keys, allow=True))
    assert leaked.paper == WENG_2020 and leaked.flagged and leaked.value == 1.0 and leaked.samples == 6
    held = residual_recovery_finding(*_exchange_tap(40, 8, small_paillier_keys, allow=False))
    assert not held.flagged and held.value == 0.0 and held.measured and held.samples == 40


# --------------------------------------------------------------------------- Poisson regression


def _poisson_tap(rows: int, keys: Any, *, allow: bool) -> tuple[AuditTap, np.ndarray]:
    from vflcrypto.protocols.poisson.math import PoissonParams
    from vflcrypto.protocols.poisson.roles import run_local

    rng = np.random.default_rng(2)  # example data only
    Xa, Xp = rng.standard_normal((rows, 4)), rng.standard_normal((rows, 6))
    y = rng.poisson(2.0, rows).astype(float)
    tap = AuditTap()
    run_local(Xa, y, Xp, params=PoissonParams(epochs=2), keys=keys, allow_insecure=True, tap=tap,
              allow_small_batches=allow)
    return tap, y


def test_poisson_refuses_no_more_rows_than_a_partys_columns(small_paillier_keys: Any) -> None:
    with pytest.raises(ConfigurationError, match="allow_small_batches"):
        _poisson_tap(5, small_paillier_keys, allow=False)


def test_poisson_reverse_multiplication_recovers_the_residuals_only_on_few_rows(small_paillier_keys: Any) -> None:
    from vflcrypto.protocols.poisson.audit import residual_recovery_finding

    tap, y = _poisson_tap(5, small_paillier_keys, allow=True)
    active, passive = (residual_recovery_finding(tap, p, y) for p in ("active", "passive-0"))
    # the active party's 4 columns and intercept solve the 5 residuals (so μ: the passive party's exp(u_A));
    # the passive party's 6 centred columns give them up to their mean (at epoch 0: the counts up to their mean)
    assert active.flagged and active.value == 1.0 and active.paper == WENG_2020
    assert passive.flagged and passive.value == 1.0 and "up to their mean" in passive.name
    tap, y = _poisson_tap(30, small_paillier_keys, allow=False)
    for p in ("active", "passive-0"):
        f = residual_recovery_finding(tap, p, y)
        assert f.measured and not f.flagged and f.value == 0.0 and f.samples == 60


# --------------------------------------------------------------------------- attacks that do not apply


def _outcome() -> AuditOutcome:
    found = EmpiricalFinding("passive", "residuals", 0.0, 0.0, "none recovered", samples=10, min_effect=0.0,
                             paper=WENG_2020)
    return AuditOutcome("demo", AuditReport(()), (found,),
                        inapplicable=(("active", "label inference", "Fu et al.", "it holds the labels"),))


def test_inapplicable_attacks_are_listed_in_the_scorecard_without_changing_verdicts() -> None:
    from vflcrypto.audit.report import render_html

    outcome = _outcome()
    card = outcome.scorecard()
    rows = {r["attack"]: r for r in card}
    assert rows["label inference"]["outcome"] == INAPPLICABLE and rows["label inference"]["score"] is None
    assert rows["label inference"]["verdict"] == "does not apply: it holds the labels"
    assert rows["residuals"]["score"] == 0.0
    assert [v.role for v in outcome.verdicts()] == ["passive"] and not outcome.failures()
    assert "label inference: does not apply: it holds the labels" in outcome.to_text()
    assert outcome.to_dict()["scorecard"] == card
    assert "does not apply: it holds the labels" in render_html(outcome)


@pytest.mark.parametrize("protocol", ["sshelr", "woe", "pearson", "exchange"])
def test_each_protocol_without_an_applicable_attack_says_why_per_role(protocol: str) -> None:
    import importlib

    rows = importlib.import_module(f"vflcrypto.protocols.{protocol}.audit").INAPPLICABLE
    roles = {r[0] for r in rows}
    assert roles == ({"active", "passive"} if protocol != "exchange" else {"active"})
    assert all(len(r) == 4 and all(r) for r in rows)
