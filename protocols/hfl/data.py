"""The bundled digits split horizontally across clients (same 64 pixel columns, different rows)."""

from __future__ import annotations

import numpy as np

from vflcrypto.data.digits import load_digits
from vflcrypto.errors import InputDataError

from .roles import ClientData

__all__ = ["digits_clients"]


def digits_clients(n_clients: int = 5, *, seed: int = 0, skew: float = 0.0,
                   test_fraction: float = 0.2) -> list[ClientData]:
    """Each client a share of the digits (pixels / 16), a held-out fraction of its rows for testing.

    ``skew`` in [0, 1): the share of each client's rows drawn from two "home" classes
    (non-IID data, where SCAFFOLD's drift correction matters); 0 deals rows uniformly.
    The shuffle uses ``seed`` (example data, not a secret).
    """
    if n_clients < 2 or not 0 <= skew < 1 or not 0 <= test_fraction < 1:
        raise InputDataError("need >= 2 clients, 0 <= skew < 1 and 0 <= test_fraction < 1")
    X, y = load_digits()
    X = X.astype(np.float64) / 16.0
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    share = [list() for _ in range(n_clients)]  # type: list[list[int]]
    for i in order:
        home = [k for k in range(n_clients) if y[i] in ((2 * k) % 10, (2 * k + 1) % 10)]
        k = int(rng.choice(home)) if home and rng.random() < skew else int(rng.integers(n_clients))
        share[k].append(int(i))
    out = []
    for rows in share:
        r = np.asarray(rows, np.int64)
        n_test = round(len(r) * test_fraction)
        out.append(ClientData(X[r[n_test:]], y[r[n_test:]], X[r[:n_test]], y[r[:n_test]]))
    return out
