"""The numpy metrics agree with scikit-learn's."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import metrics as skm

from vflcrypto.ml.metrics import accuracy, log_loss, r2_score, rmse, roc_auc


@pytest.mark.parametrize("seed", range(5))
def test_metrics_match_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 300)
    score = np.round(rng.random(300), 2)  # rounding creates ties
    assert roc_auc(y, score) == pytest.approx(skm.roc_auc_score(y, score), abs=1e-12)
    assert log_loss(y, score) == pytest.approx(skm.log_loss(y, np.clip(score, 1e-15, 1 - 1e-15)), rel=1e-9)
    assert accuracy(y, score) == pytest.approx(skm.accuracy_score(y, score >= 0.5))
    t, p = rng.standard_normal(100), rng.standard_normal(100)
    assert rmse(t, p) == pytest.approx(np.sqrt(skm.mean_squared_error(t, p)))
    assert r2_score(t, p) == pytest.approx(skm.r2_score(t, p))


def test_auc_of_one_class_is_nan() -> None:
    assert np.isnan(roc_auc(np.ones(5), np.arange(5.0)))

