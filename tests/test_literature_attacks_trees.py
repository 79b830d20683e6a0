"""The published attacks on SecureBoost and coordinator linear regression (vflcrypto.audit.literature_tabular): each
succeeds on an unprotected setting, stays at its baseline where it should, and the audits list it in the scorecard.

* ID2Graph and the first-split leak (Takahashi et al., arXiv:2307.10318, 2023): a passive party of
  SecureBoost labels rows from the instance spaces it received. The paper reports clustering
  quality, not accuracy with known labels, so the tests state our own effect: well above the
  majority-class share on the audit's example.
* Reverse multiplication (Weng et al., arXiv:2011.09290, 2020; SecretFlow's batch-size warning):
  with a batch of no more rows than its features, a passive party's own gradient determines the
  batch's residuals exactly; the default configuration refuses such a batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from vflcrypto.audit import literature_tabular as T
from vflcrypto.audit.literature import TAKAHASHI_2023, WENG_2020, known_labels
from vflcrypto.errors import AuditError, ConfigurationError
from vflcrypto.runtime.channel import AuditTap

KIND = ("test.level",)


# --------------------------------------------------------------------------- graph and communities


def test_louvain_finds_two_cliques_joined_by_one_edge() -> None:
    A = np.zeros((10, 10))
    A[:5, :5] = A[5:, 5:] = 1.0
    A[4, 5] = A[5, 4] = 1.0
    np.fill_diagonal(A, 0.0)
    comm = T.louvain(A)
    assert len(set(comm[:5])) == 1 and len(set(comm[5:])) == 1 and comm[0] != comm[9]


def test_instance_space_graph_counts_shared_cells() -> None:
    A = T.instance_space_graph([np.array([0, 0, 1, -1]), np.array([2, 2, 2, 2])], decay=0.5)
    assert A[0, 1] == 1.5 and A[0, 2] == 0.5 and A[2, 3] == 0.5 and A[0, 3] == 0.5 and A[0, 0] == 0.0
    with pytest.raises(AuditError):
        T.instance_space_graph([])


def _tree_partitions(y: np.ndarray, trees: int, purity: float, seed: int) -> list[np.ndarray]:
    """Cells of ~25 rows drawn per tree; with probability ``purity`` a row's cell holds only its own class."""
    rng = np.random.default_rng(seed)  # example data
    parts = []
    for _ in range(trees):
        pure = rng.random(len(y)) < purity
        cell = np.where(pure, y * 100 + rng.integers(0, 4, len(y)), 1000 + rng.integers(0, 8, len(y)))
        parts.append(cell)
    return parts


def test_id2graph_recovers_labels_from_label_pure_cells_and_not_from_random_ones() -> None:
    rng = np.random.default_rng(0)  # example data
    y = (rng.random(400) < 0.35).astype(np.int64)
    known = known_labels(y, 10)
    leak = T.id2graph("p", "id2graph", _tree_partitions(y, 5, 0.8, 1), y, known, attacks=KIND)
    assert leak.flagged and leak.value > 0.9 and leak.paper == TAKAHASHI_2023
    blind = T.id2graph("p", "id2graph", _tree_partitions(rng.permutation(y), 5, 0.8, 1), y, known, attacks=KIND)
    assert not blind.flagged and blind.value < blind.baseline + 0.1


def test_first_split_scores_the_side_by_its_known_labels() -> None:
    rng = np.random.default_rng(2)  # example data
    y = (rng.random(300) < 0.4).astype(np.int64)
    side = np.where(rng.random(300) < 0.85, y, 1 - y)
    known = known_labels(y, 8)
    leak = T.first_split("p", "first split", side, y, known, attacks=KIND)
    assert leak.flagged and leak.value > 0.8
    blind = T.first_split("p", "first split", rng.integers(0, 2, 300), y, known, attacks=KIND)
    assert not blind.flagged


# --------------------------------------------------------------------------- SecureBoost runs


@pytest.fixture(scope="module")
def boost_tap() -> tuple[AuditTap, np.ndarray]:
    from vflcrypto.protocols.secureboost.audit import example
    from vflcrypto.protocols.secureboost.local import run_local
    from vflcrypto.protocols.secureboost.tree import BoostParams

    Xa, y, _, Xp, _ = example()
    tap = AuditTap()
    run_local(Xa, y, [Xp], params=BoostParams(n_trees=3, max_depth=3, max_bin=16), plaintext=True, tap=tap)
    return tap, y


def test_secureboost_instance_spaces_leak_labels_to_the_passive_party(boost_tap: tuple[AuditTap, np.ndarray]) -> None:
    from vflcrypto.protocols.secureboost.audit import literature_findings, received_instance_spaces

    tap, y = boost_tap
    spaces, root = received_instance_spaces(tap, "passive-0")
    assert len(spaces) == 3 and root is not None and len(np.unique(root[root >= 0])) == 2
    graph, first = literature_findings(tap, "passive-0", y)
    assert graph.paper == first.paper == TAKAHASHI_2023
    assert graph.flagged and graph.value > graph.baseline + 0.1, graph
    assert first.flagged and first.value > 0.7, first


def test_secureboost_instance_spaces_stay_at_baseline_for_labels_they_were_not_built_on(
        boost_tap: tuple[AuditTap, np.ndarray]) -> None:
    """Scored against labels the run never saw (a permutation of the labels), both attacks stay at the baseline."""
    from vflcrypto.protocols.secureboost.audit import literature_findings

    tap, y = boost_tap
    other = np.random.default_rng(5).permutation(y)  # example data: labels unrelated to the trees
    for f in literature_findings(tap, "passive-0", other):
        assert not f.flagged, f


def test_secureboost_audit_lists_the_attacks_in_its_scorecard() -> None:
    from conftest import honest_audit

    outcome = honest_audit("secureboost")
    rows = {r["attack"]: r for r in outcome.scorecard()}
    for name in ("label inference from every tree's instance spaces (ID2Graph)",
                 "label inference from the first tree's root split"):
        assert rows[name]["paper"] == TAKAHASHI_2023 and rows[name]["observer"] == "passive-0"


# --------------------------------------------------------------------------- linear regression: residuals


def test_recover_residuals_is_exact_with_no_more_rows_than_features() -> None:
    rng = np.random.default_rng(4)  # example data
    X, d = rng.normal(size=(3, 5)), rng.normal(size=3)
    assert np.allclose(T.recover_residuals(X, X.T @ d), d)
    X, d = rng.normal(size=(12, 5)), rng.normal(size=12)
    assert not np.allclose(T.recover_residuals(X, X.T @ d), d, atol=1e-3)


def test_small_batches_are_refused_by_default() -> None:
    from vflcrypto.protocols.linreg.config import LinRegConfig
    from vflcrypto.protocols.linreg.local import run_local
    from vflcrypto.protocols.linreg.math import refuse_small_batches, smallest_batch

    from vflcrypto.data.synthetic import synthetic_split

    assert smallest_batch(31, 10) == 1 and smallest_batch(30, 10) == 10 and smallest_batch(5, 10) == 5
    with pytest.raises(ConfigurationError, match="residuals"):
        refuse_small_batches(31, 10, 4, "passive-0", allowed=False)  # the epoch's last batch holds one row
    refuse_small_batches(31, 10, 4, "passive-0", allowed=True)
    refuse_small_batches(30, 10, 4, "passive-0", allowed=False)
    active, passives = synthetic_split(n_rows=30, p_active=2, p_passive=(4,))
    with pytest.raises(ConfigurationError, match="allow_small_batches"):
        run_local(active, passives, config=LinRegConfig(epochs=1, batch_size=3, key_bits=512), allow_insecure=True)


def test_a_passive_party_and_the_coordinator_refuse_small_batches_in_the_plan(small_paillier_keys) -> None:
    """Beyond run_local: a passive party refuses the plan, and C returns no gradient wider than its batch."""
    from vflcrypto.protocols.linreg.coordinator import CoordinatorRole
    from vflcrypto.protocols.linreg.messages import MaskedGradient, TrainingPlan
    from vflcrypto.protocols.linreg.roles import PassiveRole

    from vflcrypto.data.synthetic import synthetic_split
    from vflcrypto.data.tables import ids_digest
    from vflcrypto.errors import ProtocolError

    _, passives = synthetic_split(n_rows=30, p_active=2, p_passive=(4,))
    plan = TrainingPlan(30, 3, 1, 0.1, 0.0, 0.0, None, 1, 1, ids_digest(passives[0].ids, "linreg"))
    with pytest.raises(ConfigurationError, match="3 rows"):
        PassiveRole(passives[0], index=0).on_plan(plan)
    coord = CoordinatorRole(key_bits=512, allow_insecure=True, keys=small_paillier_keys)
    coord.state.plan, coord.state.k = plan, 1  # the passive party's turn
    pk = small_paillier_keys[0]
    with pytest.raises(ProtocolError, match="batch of 3 rows"):
        coord.on_masked_gradient(MaskedGradient(pk.encrypt_fixed(np.zeros(4), 32)))


def _linreg_tap(batch_size: int, *, allow: bool) -> AuditTap:
    from vflcrypto.protocols.linreg.config import LinRegConfig
    from vflcrypto.protocols.linreg.local import run_local

    from vflcrypto.data.synthetic import synthetic_split

    active, passives = synthetic_split(n_rows=30, p_active=2, p_passive=(4,))
    tap = AuditTap()
    cfg = LinRegConfig(epochs=1, batch_size=batch_size, key_bits=512, tol=None, momentum=0.0,
                       allow_small_batches=allow)
    run_local(active, passives, config=cfg, allow_insecure=True, tap=tap)
    return tap


def test_reverse_multiplication_recovers_every_residual_of_small_batches() -> None:
    from vflcrypto.protocols.linreg.audit import residual_recovery_finding

    f = residual_recovery_finding(_linreg_tap(3, allow=True), "passive-0", ["passive-0"])
    assert f.paper == WENG_2020 and f.flagged and f.value == 1.0 and f.samples == 30, f


def test_reverse_multiplication_recovers_nothing_from_batches_larger_than_the_features() -> None:
    from vflcrypto.protocols.linreg.audit import residual_recovery_finding

    f = residual_recovery_finding(_linreg_tap(10, allow=False), "passive-0", ["passive-0"])
    assert f.measured and not f.flagged and f.value == 0.0, f


def test_linreg_audit_scorecard_lists_reverse_multiplication_at_zero() -> None:
    from conftest import honest_audit

    rows = [r for r in honest_audit("linreg").scorecard() if r["paper"] == WENG_2020]
    assert {r["observer"] for r in rows} == {"passive-0", "passive-1"}
    assert all(r["score"] == 0.0 for r in rows)


def _logreg_tap(n_rows: int, features: int, *, allow: bool, keys: Any) -> AuditTap:
    """Secure logistic regression with one passive party of ``features`` columns on ``n_rows`` rows."""
    from vflcrypto.protocols.logreg.roles import run_local

    rng = np.random.default_rng(5)  # example data only
    X = rng.normal(size=(n_rows, features))
    y = (X[:, 0] + rng.normal(size=n_rows) > 0).astype(np.float64)
    y[:2] = (0.0, 1.0)  # both classes
    tap = AuditTap()
    run_local([X], y, secure=True, steps=2, key_bits=512, allow_insecure=True, keys=keys, tap=tap,
              allow_small_batches=allow)
    return tap


def test_logreg_refuses_a_passive_gradient_as_wide_as_the_rows(small_paillier_keys: Any) -> None:
    """The active party refuses before it decrypts anything: 6 features on 6 rows would give away every residual."""
    with pytest.raises(ConfigurationError, match=r"6 entries for 6 training rows.*allow_small_batches"):
        _logreg_tap(6, 6, allow=False, keys=small_paillier_keys)


def test_logreg_reverse_multiplication_recovers_the_residuals_only_when_allowed(small_paillier_keys: Any) -> None:
    from vflcrypto.protocols.logreg.audit import residual_recovery_finding

    leaked = residual_recovery_finding(_logreg_tap(6, 6, allow=True, keys=small_paillier_keys), "passive-0")
    assert leaked.paper == WENG_2020 and leaked.flagged and leaked.value == 1.0 and leaked.samples == 12, leaked
    safe = residual_recovery_finding(_logreg_tap(40, 6, allow=False, keys=small_paillier_keys), "passive-0")
    assert safe.measured and not safe.flagged and safe.value == 0.0, safe
