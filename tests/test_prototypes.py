"""vflcrypto.ml.prototypes against the seed's worked numbers (seeds 000 and 002, SEEDS.md) and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vflcrypto.errors import InputDataError
from vflcrypto.ml import prototypes as pt


def test_mixed_priors_of_both_seeds() -> None:
    np.testing.assert_allclose(pt.mix_prior([0.70, 0.20, 0.10], [0.34, 0.33, 0.33], 0.5), [0.52, 0.265, 0.215],
                               rtol=0, atol=1e-12)  # 002, exact
    np.testing.assert_allclose(pt.mix_prior([0.70, 0.20, 0.10], [0.40, 0.35, 0.25], 0.5), [0.55, 0.275, 0.175],
                               rtol=0, atol=1e-12)  # 000, position by position
    np.testing.assert_allclose(pt.mix_prior([1, 0], [0, 1], 1.0), [1, 0])


def test_similarities_rank_classes_with_the_margin() -> None:
    order, margin = pt.ranking([0.8, 0.2, 0.5])
    assert order.tolist() == [0, 2, 1]  # the seed's "class 1 > 3 > 2"
    assert margin == pytest.approx(0.3)


def test_posterior_with_a_prior() -> None:
    q = pt.posterior([0.8, 0.2, 0.5], [0.3, 0.5, 0.2])[0]
    w = np.array([0.3 * math.exp(0.8), 0.5 * math.exp(0.2), 0.2 * math.exp(0.5)])
    np.testing.assert_allclose(q, w / w.sum(), rtol=1e-12)
    np.testing.assert_allclose(q, [0.4152, 0.3798, 0.2051], atol=1e-4)  # SEEDS.md
    np.testing.assert_allclose(q, [0.42, 0.38, 0.20], atol=0.01)  # as the seed prints it
    # shift-invariant in s (the seed's positive similarities are fine)
    np.testing.assert_allclose(pt.posterior(np.array([0.8, 0.2, 0.5]) - 7.0, [0.3, 0.5, 0.2])[0], q, rtol=1e-12)


def test_nearest_prototype_and_its_cost() -> None:
    """Distances 100 / 150 / 200 → class 1 at cost 10,000; next round 80 / 140 / 190 → 6,400."""
    for dists, cost in (((100.0, 150.0, 200.0), 10_000.0), ((80.0, 140.0, 190.0), 6_400.0)):
        mu = np.array([[d, 0.0] for d in dists])
        D = pt.squared_distances(np.zeros((1, 2)), mu)
        assert int(pt.similarity(np.zeros((1, 2)), mu).argmax()) == 0
        assert D[0].min() == pytest.approx(cost)


def test_the_two_halves_of_the_two_way_loss() -> None:
    """Row minima 100, 60, 20 → 14,000/3; prototype minima 40, 50, 90 → 12,200/3 (two matrices: the
    seed's combined example cannot come from one, its smallest row and column minima differ)."""
    rows = np.array([[100.0, 300, 400], [500, 60, 700], [800, 900, 20]]) ** 2
    cols = np.array([[40.0, 300, 400], [500, 50, 700], [800, 900, 90]]) ** 2
    assert pt.two_way_terms(rows)[0] == pytest.approx(14_000 / 3)
    assert pt.two_way_terms(cols)[1] == pytest.approx(12_200 / 3)
    assert 14_000 / 3 + 12_200 / 3 == pytest.approx(8_733.33, abs=0.01)  # the seed's "≈ 8,734" rounds halves
    F, mu = np.random.default_rng(0).normal(size=(6, 3)), np.random.default_rng(1).normal(size=(3, 3))
    D = pt.squared_distances(F, mu)
    np.testing.assert_allclose(D, ((F[:, None] - mu[None]) ** 2).sum(-1), atol=1e-12)
    assert pt.two_way_loss(F, mu) == pytest.approx(sum(pt.two_way_terms(D)))
    # the smooth variant tends to the hard loss and bounds it from above
    assert pt.smooth_two_way_loss(D, 1e-4) == pytest.approx(pt.two_way_loss(F, mu), rel=1e-6)
    assert pt.smooth_two_way_loss(D, 1.0) >= pt.two_way_loss(F, mu)


def test_em_steps_refresh_prior_and_prototypes() -> None:
    F = np.array([[0.0, 0.0], [0.0, 2.0], [10.0, 10.0]])
    q = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(pt.prior_refresh(q), [2 / 3, 1 / 3])
    np.testing.assert_allclose(pt.prototype_update(F, q), [[0.0, 1.0], [10.0, 10.0]])
    # a class without mass keeps its previous prototype
    np.testing.assert_allclose(pt.prototype_update(F[:2], q[:2], fallback=[[9.0, 9], [7, 7]]), [[0, 1], [7, 7]])
    np.testing.assert_allclose(pt.mix_prototypes([[0.0, 0.0]], [[2.0, 4.0]], 0.25), [[1.5, 3.0]])


def test_gated_fusion_in_r256() -> None:
    g = np.random.default_rng(2).normal(size=(3, 256))
    z = pt.fuse(g, [0.80, 0.18, 0.02])
    np.testing.assert_allclose(z, 0.80 * g[0] + 0.18 * g[1] + 0.02 * g[2], atol=1e-12)
    batch = np.stack([g, 2 * g], axis=1)  # 3 parties x 2 rows x 256
    zz = pt.fuse(batch, [[0.8, 0.18, 0.02], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(zz, [z, 2 * g[2]], atol=1e-12)


def test_cross_entropy_of_the_seed() -> None:
    assert pt.cross_entropy([0, 1, 0], [0.10, 0.75, 0.15]) == pytest.approx(-math.log(0.75))
    assert pt.cross_entropy([0, 1, 0], [0.10, 0.75, 0.15]) == pytest.approx(0.288, abs=5e-4)
    assert pt.cross_entropy([0, 1, 0], [0.05, 0.90, 0.05]) == pytest.approx(0.105, abs=5e-4)
    assert pt.cross_entropy([1], [[0.85, 0.10, 0.05]]) == pytest.approx(2.303, abs=5e-4)  # p = 0.10 on the true class


def test_stopping_rule() -> None:
    assert not pt.converged(None, 1.0, 1e-6)
    assert pt.converged(84.5, 84.5 + 1e-6, 1e-6) and not pt.converged(84.5, 81.2, 1e-3)
    assert pt.converged(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-9]), 1e-8)


@pytest.mark.parametrize("bad, match", [([0.5, 0.6, -0.1], "negative"), ([0.5, 0.6, 0.1], "sum"),
                                        ([0.5, float("nan"), 0.5], "finite")])
def test_a_prior_must_be_a_distribution(bad: list[float], match: str) -> None:
    with pytest.raises(InputDataError, match=match):
        pt.mix_prior(bad, [1 / 3] * 3, 0.5)
    with pytest.raises(InputDataError, match=match):
        pt.posterior([0.1, 0.2, 0.3], bad)


def test_hostile_inputs_get_clear_errors() -> None:
    with pytest.raises(InputDataError, match="NaN"):
        pt.similarity([[0.0, float("nan")]], [[0.0, 0.0]])
    with pytest.raises(InputDataError, match="dimensions"):
        pt.similarity(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(InputDataError, match="alpha"):
        pt.mix_prior([1, 0], [0, 1], 1.5)
    with pytest.raises(InputDataError, match="gate weights"):
        pt.fuse(np.zeros((3, 4)), [0.9, 0.2, -0.1])
    with pytest.raises(InputDataError, match="temperature"):
        pt.smooth_two_way_loss(np.ones((2, 2)), 0.0)
