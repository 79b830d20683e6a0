"""The trained models of linear, SSHE logistic and Poisson regression against references that
share no code with the package: numpy's least squares and scikit-learn's estimators.

Everything but the secure run is written here: the data (numpy's generator, a few hundred rows,
the columns split between the parties), the parties' standardization (z-scores with the
population standard deviation, the convention each protocol documents) and the reference fit.
From the package the tests take only ``run_local`` and the weights it returns, so a fault in
the protocol's batching, scaling, quantization or gradient that its own plaintext reference
shares still shows here. Unlike the FATE comparisons (``../shared`` data, skipped when absent),
these run everywhere. 512-bit keys: test speed only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression, PoissonRegressor
from sklearn.metrics import roc_auc_score
from vflcrypto.protocols import linreg, poisson, sshelr

from vflcrypto.data.tables import PartyTable
from vflcrypto.he.paillier import generate_keypair


def _zscore(X: np.ndarray) -> np.ndarray:
    return (X - X.mean(axis=0)) / X.std(axis=0)


def _correlated(rng: np.random.Generator, n: int, mixing: np.ndarray, scale: np.ndarray,
                shift: np.ndarray) -> np.ndarray:
    """Example data only (numpy's generator): correlated columns in units far from z-scores."""
    return rng.normal(size=(n, mixing.shape[0])) @ mixing.T * scale + shift


# --------------------------------------------------------------------------- linear regression


def test_linreg_full_batch_weights_equal_numpy_lstsq_on_the_standardized_design() -> None:
    """300 rows, columns 3 / 2 / 1 over the active and two passive parties, correlated across
    parties (so a missing cross term moves every weight), in units from 0.5 to 10 around offsets
    up to 100; the label around 97 (standard deviation 7.5). Each party standardizes its
    columns and the active party its label, so after full-batch descent the weights are numpy's
    least-squares solution of the standardized label on the standardized columns plus an
    intercept; mapped back, they are the least-squares coefficients and predictions in the
    original units.

    Tolerance 1e-6 on the standardized weights: heavy-ball descent (η 0.5, μ 0.5) on this design
    (eigenvalues of the correlation matrix 0.14 to 2.06) is within 2e-9 of the solution after 80
    epochs in exact arithmetic, and the 32-bit fixed point adds ~1e-9 (measured gap 2e-9). A
    fault is far above it: the parties fitting the label each on their own columns (no cross
    terms) land 0.46 from least squares. (A wrong step size converges to the same point: that
    is the plaintext-reference tests' to catch.)
    """
    rng = np.random.default_rng(2024)
    n = 300
    mixing = np.array([[1.0, 0, 0, 0, 0, 0], [0.6, 0.8, 0, 0, 0, 0], [0.3, -0.4, 0.9, 0, 0, 0],
                       [0.5, 0.2, 0.1, 0.8, 0, 0], [-0.4, 0.3, 0.2, 0.3, 0.8, 0], [0.2, 0, -0.3, 0, 0.4, 0.9]])
    X = _correlated(rng, n, mixing, np.array([2.0, 0.5, 10.0, 1.0, 3.0, 4.0]), np.array([5, -2, 100, 0, 1, 7.0]))
    y = 50 + X @ np.array([1.5, -4.0, 0.3, 2.0, -1.0, 0.5]) + rng.normal(0, 2.0, n)
    blocks = [X[:, :3], X[:, 3:5], X[:, 5:]]
    ids = tuple(f"r{i}" for i in range(n))
    active = PartyTable(ids, ("a0", "a1", "a2"), blocks[0], y, "y")
    passives = [PartyTable(ids, ("p0", "p1"), blocks[1]), PartyTable(ids, ("q0",), blocks[2])]
    cfg = linreg.LinRegConfig(epochs=80, lr=0.5, momentum=0.5, tol=None, key_bits=512,
                              preprocess="standardize", fit_intercept=True, label_scaling="standardize")
    run = linreg.run_local(active, passives, config=cfg, allow_insecure=True,
                           keys=generate_keypair(512, allow_insecure=True))

    # the reference, on the same standardization: the active block is [columns, 1]
    Z, ys = _zscore(X), (y - y.mean()) / y.std()
    design = np.hstack([Z[:, :3], np.ones((n, 1)), Z[:, 3:]])
    coef = np.linalg.lstsq(design, ys, rcond=None)[0]
    got = np.concatenate([m.weights for m in run.models])
    assert got.shape == coef.shape
    np.testing.assert_allclose(got, coef, rtol=0, atol=1e-6)

    # in the label's units: the model's label scaling is the label's mean and standard deviation,
    # and its slopes, intercept and predictions are those of least squares on the raw columns
    assert (run.models[0].label_offset, run.models[0].label_scale) == pytest.approx((y.mean(), y.std()), rel=1e-12)
    raw = np.linalg.lstsq(np.hstack([X, np.ones((n, 1))]), y, rcond=None)[0]
    slopes = y.std() * np.delete(got, 3) / X.std(axis=0)
    intercept = y.mean() + y.std() * got[3] - slopes @ X.mean(axis=0)
    np.testing.assert_allclose(slopes, raw[:-1], rtol=1e-6)  # measured 3e-9
    assert intercept == pytest.approx(raw[-1], rel=1e-6)
    # 1e-4 on a label of ~97: the weights' 1e-6 times the label's 7.5 times Σ|z| of a row (< 15)
    pred = y.std() * (design @ got) + y.mean()
    np.testing.assert_allclose(pred, np.hstack([X, np.ones((n, 1))]) @ raw, rtol=0, atol=1e-4)  # measured 2e-8


# --------------------------------------------------------------------------- SSHE logistic regression


def _auc_acc(z: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    return float(roc_auc_score(y, z)), float(np.mean((z > 0) == (y == 1)))


def test_sshelr_weights_solve_the_taylor_objective_and_rank_like_scikit_learn() -> None:
    """400 rows from two Gaussian classes with a shared covariance (40 % positives), 2 columns at
    the active party and 3 at the passive one, correlated across the parties. The protocol has no
    penalty, so the reference is scikit-learn's unpenalized LogisticRegression (``C=inf``) on the
    same standardized columns.

    Two references, each computed here:

    * FATE's Taylor sigmoid ``1/2 + z/4`` makes the gradient that of ``(1/8) Σ (z − (4y − 2))²``
      (the protocol's documented objective); its minimizer is numpy's least squares of ``4y − 2``
      on ``[Z_A, 1, Z_P]``. 30 full-batch epochs at η = 4 contract the error by at most 0.5 per
      epoch (eigenvalues of the correlation matrix 0.5 to 1.5), so ~1e-9 is left; the features'
      20-bit and the weights' 32-bit fixed point add ~1e-7 (measured gap 4e-8). Tolerance 1e-6.
    * Against logistic regression the Taylor model ranks the rows, not their probabilities, the
      same: σ(z) is not calibrated (measured: probabilities differ from scikit-learn's by 0.09 on
      average, 0.14 at most), so the test compares the logits' correlation (measured 0.9992; at
      least 0.99), the AUC (measured gap 3e-4; at most 0.005) and the accuracy (measured gap
      0.005; at most 0.02). Broken gradients exceed these: without the cross-party terms the
      correlation is 0.97 and the AUC 0.008 lower; with the passive party's weights at zero,
      0.90 and 0.036 lower; with their sign flipped, 0.63 and 0.16 lower.
    """
    rng = np.random.default_rng(7)
    n = 400
    y = (rng.random(n) < 0.4).astype(float)
    cov = np.array([[1, 0.3, 0.2, 0, 0.1], [0.3, 1, 0, 0.2, 0], [0.2, 0, 1, 0.3, 0.1], [0, 0.2, 0.3, 1, 0],
                    [0.1, 0, 0.1, 0, 1.0]])
    X = rng.multivariate_normal(np.zeros(5), cov, size=n) + np.outer(y, [0.9, -0.6, 0.5, 0.0, -0.8])
    X = X * np.array([3.0, 0.5, 1.0, 20.0, 2.0]) + np.array([1, 10, -3, 50, 0])
    Xa, Xp = X[:, :2], X[:, 2:]
    keys = generate_keypair(512, allow_insecure=True), generate_keypair(512, allow_insecure=True)
    run = sshelr.run_local(Xa, y, Xp, params=sshelr.SSHELRParams(epochs=30, learning_rate=4.0), keys=keys,
                           allow_insecure=True)

    Z = _zscore(X)
    design = np.hstack([Z[:, :2], np.ones((n, 1)), Z[:, 2:]])  # the active block ends with its intercept
    got = np.concatenate([run.active, run.passive])
    taylor = np.linalg.lstsq(design, 4 * y - 2, rcond=None)[0]
    np.testing.assert_allclose(got, taylor, rtol=0, atol=1e-6)

    ref = LogisticRegression(C=np.inf, max_iter=10_000, tol=1e-10).fit(Z, y)
    z, z_ref = design @ got, ref.decision_function(Z)
    assert np.corrcoef(z, z_ref)[0, 1] >= 0.99
    (auc, acc), (ref_auc, ref_acc) = _auc_acc(z, y), _auc_acc(z_ref, y)
    assert abs(auc - ref_auc) <= 0.005, (auc, ref_auc)
    assert abs(acc - ref_acc) <= 0.02, (acc, ref_acc)
    assert ref_auc > 0.85  # the data carry the signal the comparison needs (measured 0.883)


# --------------------------------------------------------------------------- Poisson regression


def _mean_deviance(y: np.ndarray, mu: np.ndarray) -> float:
    """Mean Poisson deviance ``(2/m) Σ (y log(y/μ) − (y − μ))``, with ``0 log 0 = 0``."""
    ylogy = np.where(y > 0, y * np.log(np.where(y > 0, y, 1.0) / mu), 0.0)
    return float(2 * np.mean(ylogy - (y - mu)))


def test_poisson_weights_equal_scikit_learns_unpenalized_poisson_regressor() -> None:
    """400 counts (mean ~1.8) from a log-linear model of 5 correlated columns, 2 at the active
    party and 3 at the passive one. scikit-learn's PoissonRegressor without penalty
    (``alpha=0``) on the same standardized columns is the maximum-likelihood fit the secure
    descent must reach.

    Tolerance 1e-6 on the weights: 60 full-batch epochs (η 0.5, heavy-ball μ 0.5) leave ~1e-8
    from the optimum (the Hessian's eigenvalues are 0.9 to 3.2), scikit-learn's L-BFGS stops
    ~1e-8 from it (measured gap 1.0e-8, equal for the plaintext iterations); the fixed point of
    32 bits adds ~1e-11. A broken fit is far off: without the passive party's columns the
    deviance is 13 % above the optimum, and the test's own deviance must match to 1e-9.
    """
    rng = np.random.default_rng(11)
    n = 400
    mixing = np.array([[1, 0.3, 0, 0, 0], [0, 1, 0.2, 0, 0], [0, 0, 1, 0.3, 0], [0.2, 0, 0, 1, 0], [0, 0, 0.1, 0, 1.0]])
    X = _correlated(rng, n, mixing, np.array([10.0, 1.0, 0.5, 3.0, 2.0]), np.array([40, 0, 1, 5, -2.0]))
    Z = _zscore(X)
    y = rng.poisson(np.exp(0.5 + Z @ np.array([0.3, -0.2, 0.25, 0.1, -0.15]))).astype(float)
    Xa, Xp = X[:, :2], X[:, 2:]
    run = poisson.run_local(Xa, y, Xp, params=poisson.PoissonParams(epochs=60, learning_rate=0.5, momentum=0.5),
                            keys=generate_keypair(512, allow_insecure=True), allow_insecure=True)

    ref: Any = PoissonRegressor(alpha=0, max_iter=1000, tol=1e-12).fit(Z, y)
    want = np.concatenate([ref.coef_[:2], [ref.intercept_], ref.coef_[2:]])  # the active block ends with 1
    design = np.hstack([Z[:, :2], np.ones((n, 1)), Z[:, 2:]])
    got = np.concatenate([run.active, run.passive])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    dev, dev_ref = _mean_deviance(y, np.exp(design @ got)), _mean_deviance(y, ref.predict(Z))
    assert dev == pytest.approx(dev_ref, rel=1e-9)
    # the coordinator's last loss (taken before the last update) is the mean negative log-likelihood
    # at the optimum; rel 1e-7: the active party scales the encrypted sum by 1/m at 32 fractional
    # bits, 1/400 ·2^32 rounded to an integer (4.7e-8 relative at most; measured 2.2e-8)
    eta = design @ want
    assert run.losses[-1] == pytest.approx(float(np.mean(np.exp(eta) - y * eta)), rel=1e-7)
