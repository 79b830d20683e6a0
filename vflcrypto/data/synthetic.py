"""Synthetic vertical splits for examples and tests (public data: numpy's PRNG)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vflcrypto.data.tables import PartyTable

__all__ = ["synthetic_split"]


def synthetic_split(n_rows: int = 200, p_active: int = 3, p_passive: Sequence[int] = (2,),
                    noise: float = 0.1, seed: int = 7) -> tuple[PartyTable, list[PartyTable]]:
    """A deterministic synthetic regression split (non-secret test data: numpy PRNG)."""
    rng = np.random.default_rng(seed)
    ids = tuple(f"id{i:05d}" for i in range(n_rows))
    Xb = rng.normal(size=(n_rows, p_active))
    Xps = [rng.normal(size=(n_rows, p)) for p in p_passive]
    w_true = rng.normal(size=p_active + sum(p_passive))
    y = np.hstack([Xb, *Xps]) @ w_true + 1.5 + noise * rng.normal(size=n_rows)
    active = PartyTable(ids, tuple(f"b{j}" for j in range(p_active)), Xb, y, "y")
    passives = [PartyTable(ids, tuple(f"a{k}_{j}" for j in range(p)), X)
                for k, (p, X) in enumerate(zip(p_passive, Xps, strict=True))]
    return active, passives
