"""scikit-learn estimators over simulated VFL: equal to run_local, scikit-learn's checks, pipelines, DataFrames."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sklearn.datasets import make_classification, make_regression
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from vflcrypto.estimators import (
    SecureBoostClassifier,
    SecureBoostRegressor,
    SecureLinearRegression,
    SecureLogisticRegression,
    SplitLearningClassifier,
)

SMALL = {"key_bits": 512, "allow_insecure": True}

FAST = [SecureBoostClassifier(n_trees=2, max_depth=2, plaintext=True),
        SecureBoostRegressor(n_trees=3, max_depth=2, plaintext=True),
        SecureLogisticRegression(secure=False, steps=10),
        SecureLinearRegression(epochs=10, **SMALL)]
try:  # split learning trains PyTorch extractors (the deep extra)
    import torch  # noqa: F401

    FAST.append(SplitLearningClassifier(epochs=8, dim=4, hidden=8))
except ImportError:
    pass


@parametrize_with_checks(FAST)
def test_scikit_learn_checks(estimator: Any, check: Any) -> None:
    """Every applicable check passes. Multi-class checks do not apply (the tag says binary only); a single
    feature is refused with the message the check accepts (vertical FL needs a column per party)."""
    check(estimator)


@pytest.fixture(scope="module")
def binary() -> tuple[np.ndarray, np.ndarray]:
    X, y = make_classification(n_samples=90, n_features=5, n_informative=3, random_state=1)
    return X, np.where(y == 1, "yes", "no")


def test_secureboost_classifier_equals_run_local(binary: tuple[np.ndarray, np.ndarray]) -> None:
    from vflcrypto.protocols import secureboost as sb

    X, y = binary
    groups = [[0, 1], [2, 3, 4]]
    est = SecureBoostClassifier(groups, n_trees=2, max_depth=2, max_bin=8, **SMALL).fit(X, y)
    y01 = (y == "yes").astype(float)
    run = sb.run_local(X[:, :2], y01, [X[:, 2:]], params=sb.BoostParams(n_trees=2, max_depth=2, max_bin=8), **SMALL)
    want = sb.predict_local(run.active.model, X[:, :2], [(run.passive["passive-0"].model, X[:, 2:])])
    np.testing.assert_allclose(est.predict_proba(X)[:, 1], want, rtol=1e-12)
    assert set(est.predict(X)) <= {"yes", "no"} and list(est.classes_) == ["no", "yes"]
    kinds = {e.kind for e in est.transcript_}
    assert "secureboost.gradients" in kinds and "secureboost.plain_gradients" not in kinds  # encrypted
    assert "secureboost.gradients" in est.audit_.kinds_received("passive-0")


def test_secure_logistic_regression_equals_run_local(binary: tuple[np.ndarray, np.ndarray]) -> None:
    from vflcrypto.protocols import logreg

    X, y = binary
    est = SecureLogisticRegression([[0, 1], [2], [3, 4]], steps=5, **SMALL).fit(X, y)
    blocks = [np.column_stack([np.ones(len(X)), X[:, :2]]), X[:, [2]], X[:, 3:]]
    run = logreg.run_local(blocks, (y == "yes").astype(float), secure=True, steps=5, **SMALL)
    np.testing.assert_allclose(np.concatenate(est.weights_), run.weights, rtol=1e-12)
    np.testing.assert_allclose(est.predict_proba(X)[:, 1], run.active.train_probabilities, rtol=1e-9, atol=1e-12)
    assert "logreg.masked_logits" in {e.kind for e in est.transcript_}


def test_secure_linear_regression_equals_run_local() -> None:
    from vflcrypto.protocols import linreg

    from vflcrypto.data.tables import PartyTable

    X, y = make_regression(n_samples=60, n_features=4, noise=0.5, random_state=2)
    est = SecureLinearRegression([[0], [1, 2, 3]], epochs=8, **SMALL).fit(X, y)
    ids = tuple(f"r{i}" for i in range(len(X)))
    active = PartyTable(ids, ("x0",), X[:, :1], y, "y")
    passive = PartyTable(ids, ("x1", "x2", "x3"), X[:, 1:])
    cfg = linreg.LinRegConfig(epochs=8, key_bits=512)
    run = linreg.run_local(active, [passive], config=cfg, allow_insecure=True)
    want, _ = linreg.predict_local(run.models, [PartyTable(ids, ("x0",), X[:, :1]), passive], key_bits=512,
                                   allow_insecure=True)
    np.testing.assert_allclose(est.predict(X), want, rtol=1e-9, atol=1e-9)
    assert "linreg.encrypted_u" in {e.kind for e in est.transcript_}


def test_pipelines_cross_validation_and_dataframes(binary: tuple[np.ndarray, np.ndarray]) -> None:
    pd = pytest.importorskip("pandas")
    X, y = binary
    scores = cross_val_score(make_pipeline(StandardScaler(), SecureLogisticRegression(secure=False, steps=30)), X, y,
                             cv=3)
    assert scores.shape == (3,) and scores.mean() > 0.6
    df = pd.DataFrame(X, columns=["income", "age", "basket", "visits", "returns"])
    est = SecureBoostClassifier([["income", "age"], ["basket", "visits", "returns"]], n_trees=2, plaintext=True)
    est.fit(df, y)
    assert list(est.feature_names_in_) == list(df.columns) and [g.tolist() for g in est.groups_] == [[0, 1], [2, 3, 4]]
    with pytest.warns(UserWarning, match="feature names"):  # scikit-learn's own: fitted on names, given an array
        np.testing.assert_array_equal(est.predict(df), est.predict(X))
    with pytest.raises(ValueError, match="disjoint"):
        SecureBoostClassifier([["income", "age"], ["age"]], plaintext=True).fit(df, y)


def test_column_names_reach_the_estimator_through_a_pandas_pipeline(binary: tuple[np.ndarray, np.ndarray]) -> None:
    """With set_output(transform="pandas") the scaler hands on a DataFrame: names resolve in every fold."""
    pd = pytest.importorskip("pandas")
    X, y = binary
    df = pd.DataFrame(X, columns=["income", "age", "basket", "visits", "returns"])
    est = SecureLogisticRegression([["income", "age"], ["basket", "visits", "returns"]], secure=False, steps=30)
    pipe = make_pipeline(StandardScaler(), est).set_output(transform="pandas")
    scores = cross_val_score(pipe, df, y, cv=3, error_score="raise")
    assert scores.shape == (3,) and scores.mean() > 0.6
    fitted = pipe.fit(df, y)[-1]
    assert list(fitted.feature_names_in_) == list(df.columns) and [g.tolist() for g in fitted.groups_] == [[0, 1],
                                                                                                            [2, 3, 4]]


def test_column_names_lost_in_a_pipeline_are_refused_in_one_line(binary: tuple[np.ndarray, np.ndarray]) -> None:
    import re

    pd = pytest.importorskip("pandas")
    X, y = binary
    df = pd.DataFrame(X, columns=["income", "age", "basket", "visits", "returns"])
    groups = [["income", "age"], ["basket", "visits", "returns"]]
    pipe = make_pipeline(StandardScaler(), SecureLogisticRegression(groups, secure=False, steps=2))
    message = ("party_columns names columns but X has none: a pipeline step returned an array; "
               "use set_output(transform='pandas')")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        pipe.fit(df, y)
    with pytest.raises(ValueError, match=re.escape("party_columns names ['salary'] but X's columns are ['income'")):
        SecureBoostClassifier([["salary", "age"], ["basket"]], plaintext=True).fit(df, y)


def test_split_learning_classifier_equals_run_local() -> None:
    pytest.importorskip("torch")
    from vflcrypto.protocols import split
    from vflcrypto.protocols._repvfl import PartyData, ServerData

    X, y = make_classification(n_samples=80, n_features=6, n_informative=4, n_classes=3, random_state=3)
    est = SplitLearningClassifier([[0, 1, 2], [3, 4, 5]], epochs=5, dim=4, hidden=8).fit(X, y)
    Xf = X.astype(np.float32)
    run = split.run_local(ServerData(y, 3, y), [PartyData(Xf[:, :3], Xf[:, :3]), PartyData(Xf[:, 3:], Xf[:, 3:])],
                          config=split.SplitConfig(epochs=5, dim=4, hidden=8))
    np.testing.assert_allclose(est.predict_proba(X), run.server.test_proba, rtol=1e-5, atol=1e-6)
    assert "split.gradient" in {e.kind for e in est.transcript_}
