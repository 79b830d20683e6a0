"""Every Paillier protocol at 3072- and 4096-bit keys (small data): bounds past a float's range
must be handled without float conversions (linreg: tests/test_linreg.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from vflcrypto.he.paillier import generate_keypair


@pytest.fixture(scope="module", params=[3072, 4096])
def big_keys(request: pytest.FixtureRequest) -> Any:
    return generate_keypair(request.param)


@pytest.mark.slow
def test_the_gradient_exchange(big_keys: Any) -> None:
    from vflcrypto.protocols import exchange

    rng = np.random.default_rng(0)
    d, X = rng.normal(size=10), rng.normal(size=(10, 2))
    run = exchange.run_local(d, X, keys=big_keys)
    np.testing.assert_allclose(run.gradient, X.T @ d, atol=1e-6)


@pytest.mark.slow
def test_secure_logistic_regression_equals_plain(big_keys: Any) -> None:
    from vflcrypto.protocols import logreg

    rng = np.random.default_rng(1)
    X = [rng.normal(size=(12, 2)) for _ in range(2)]
    y = (rng.random(12) > 0.5).astype(float)
    secure = logreg.run_local(X, y, secure=True, steps=2, keys=big_keys)
    plain = logreg.run_local(X, y, secure=False, steps=2)
    np.testing.assert_allclose(secure.active.loss_history, plain.active.loss_history, rtol=1e-9)
    np.testing.assert_allclose(secure.weights, plain.weights, rtol=1e-9, atol=1e-12)


@pytest.mark.slow
def test_secureboost_equals_its_plaintext_mode(big_keys: Any) -> None:
    from vflcrypto.protocols import secureboost as sb

    Xa, y, _, Xp, _ = sb.example(n=30)
    params = sb.BoostParams(n_trees=1, max_depth=2, max_bin=4)
    enc = sb.run_local(Xa, y, [Xp], params=params, keys=big_keys)
    plain = sb.run_local(Xa, y, [Xp], params=params, plaintext=True)
    np.testing.assert_array_equal(enc.active.train_margin, plain.active.train_margin)
