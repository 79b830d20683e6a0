"""The bundled digits split as seed 002 describes: three parties, few aligned rows, lopsided unaligned pools.

Each 8×8 image is cut into three horizontal bands of pixel rows: party-0 holds image
rows 0-2 (24 columns), party-1 rows 3-5 (24), party-2 rows 6-7 (16), like the seed's
parties of 40, 60 and 50 columns. A public, seeded shuffle picks the held-out aligned
test rows and ``aligned`` training rows on every party (their labels at the server);
every other row is offered to the parties' unaligned pools, of sizes scaled like the
seed's 500 / 5000 / 2. The pools of party-0 and party-1 overlap, so some rows sit on
those two and not on party-2: unaligned for both, the seed's "row on C1 and C2" case.
No pool row is on all three parties (it would be aligned).

:func:`digits_tables` gives the same split as per-party ID tables (the server's labels
by ID, each party's IDs and columns) for the alignment and the CLI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vflcrypto.data.digits import load_digits
from vflcrypto.data.tables import PartyTable
from vflcrypto.errors import InputDataError

from .._repvfl import PartyData, ServerData

__all__ = ["BANDS", "POOLS", "ProtoSplit", "digits_example", "digits_split", "digits_tables"]

BANDS = ((0, 3), (3, 6), (6, 8))  # image rows of each party
POOLS = (130, 1300, 2)  # unaligned rows per party: the seed's 500 / 5000 / 2 scaled to the digits' 1,417 spare rows


@dataclass(frozen=True)
class ProtoSplit:
    """Row indices into the digits: aligned training, held-out test, and each party's unaligned pool."""

    aligned: np.ndarray
    test: np.ndarray
    pools: tuple[np.ndarray, ...]
    X: np.ndarray
    y: np.ndarray

    def columns(self, party: int) -> np.ndarray:
        lo, hi = BANDS[party]
        return np.asarray(self.X).reshape(len(self.X), 8, 8)[:, lo:hi, :].reshape(len(self.X), 8 * (hi - lo))


def digits_split(aligned: int = 20, *, pools: Sequence[int] = POOLS, n_test: int = 360, seed: int = 0) -> ProtoSplit:
    """The public split (``seed``: example data, not a secret)."""
    X, y = load_digits()
    spare = len(y) - n_test - aligned
    if not 2 <= aligned or spare < 0 or len(pools) != len(BANDS) or min(pools) < 0 or max(pools) > spare:
        raise InputDataError(f"need aligned >= 2, {len(BANDS)} pool sizes of at most {max(spare, 0)} rows")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    # test and training rows in index order, which is the CLI's canonical ID order ("d0042"): the
    # demo's inputs are then exactly what `train protovfl --dataset digits` gets after its PSI
    test, train, rest = np.sort(order[:n_test]), np.sort(order[n_test : n_test + aligned]), order[n_test + aligned :]
    p0 = rng.choice(rest, pools[0], replace=False)
    p1 = rng.choice(rest, pools[1], replace=False)
    both = np.intersect1d(p0, p1)
    free = np.setdiff1d(rest, both)
    if pools[2] > len(free):
        raise InputDataError("the pools of party-0 and party-1 leave too few rows for party-2")
    p2 = rng.choice(free, pools[2], replace=False)
    return ProtoSplit(train, test, (np.sort(p0), np.sort(p1), np.sort(p2)), X, y)


def digits_example(aligned: int = 20, *, pools: Sequence[int] = POOLS, seed: int = 0) -> tuple[ServerData,
                                                                                                 list[PartyData]]:
    """The protocol's inputs: the server's labels, each party's aligned, test and unaligned rows."""
    sp = digits_split(aligned, pools=pools, seed=seed)
    parties = []
    for m in range(len(BANDS)):
        cols = sp.columns(m)
        parties.append(PartyData(cols[sp.aligned], cols[sp.test], cols[sp.pools[m]]))
    return ServerData(sp.y[sp.aligned], 10, sp.y[sp.test]), parties


def digits_tables(aligned: int = 20, *, pools: Sequence[int] = POOLS,
                  seed: int = 0) -> tuple[PartyTable, list[PartyTable], list[str]]:
    """The same split as ID tables: the server's labels (aligned and test rows), each party's rows; the test IDs."""
    sp = digits_split(aligned, pools=pools, seed=seed)
    ids = np.asarray([f"d{i:04d}" for i in range(len(sp.y))])
    labelled = np.concatenate([sp.aligned, sp.test])
    server = PartyTable(tuple(ids[labelled]), (), np.zeros((len(labelled), 0)), sp.y[labelled].astype(np.float64),
                        "digit")
    tables = []
    for m in range(len(BANDS)):
        rows = np.concatenate([sp.aligned, sp.test, sp.pools[m]])
        rng = np.random.default_rng(seed + 1 + m)  # each party's file in its own order
        rows = rows[rng.permutation(len(rows))]
        cols = sp.columns(m)
        tables.append(PartyTable(tuple(ids[rows]), tuple(f"px{m}_{j}" for j in range(cols.shape[1])),
                                 cols[rows].astype(np.float64)))
    return server, tables, [str(i) for i in ids[sp.test]]
