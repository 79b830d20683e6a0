"""All-party-only intersection (vflcrypto.psi.mpsi): A exactly, and S's view uniform outside A,
also for rows that only some of the parties hold (no pairwise intersection leaks)."""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from vflcrypto.audit.attacks import ks_one_sample, ks_two_sample
from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.psi import mpsi


def _seeds(n: int) -> dict[int, dict[int, bytes]]:
    pair = {(a, b): secrets.token_bytes(32) for a in range(n) for b in range(a + 1, n)}
    return {m: {o: pair[min(m, o), max(m, o)] for o in range(n) if o != m} for m in range(n)}


def run(sets: list[list[str]], miss_bits: int = 40) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray],
                                                           mpsi.MPSIParams]:
    params = mpsi.plan(len(sets), max(len(s) for s in sets), miss_bits=miss_bits)
    key, seeds = secrets.token_bytes(32), _seeds(len(sets))
    enc = [mpsi.encode(s, m, params, key, seeds[m]) for m, s in enumerate(sets)]
    zero = mpsi.combine([t for t, _ in enc], params)
    rows = [mpsi.decode(pl, zero, params) for _, pl in enc]
    return rows, zero, [t for t, _ in enc], params


def test_every_party_learns_exactly_the_all_party_intersection() -> None:
    """The seed's case: a row on C1 and C2 but not C3 is not aligned. What every party receives
    from S, the zero cells, are exactly the cells in which all three parties keep one same row
    of A: none points at a row outside A (a false zero has probability p^-2 ≈ 2^-62 per cell)."""
    rng = np.random.default_rng(0)  # public test data
    pool = [f"id{i}" for i in range(3000)]
    common = pool[:20]
    c1_c2 = pool[20:400]  # on C1 and C2 only
    sets = [common + c1_c2 + pool[400:900], common + c1_c2 + pool[900:2900], common + pool[2900:2902]]
    sets = [[s[i] for i in rng.permutation(len(s))] for s in sets]
    params = mpsi.plan(3, max(len(s) for s in sets))
    key, seeds = secrets.token_bytes(32), _seeds(3)
    enc = [mpsi.encode(s, m, params, key, seeds[m]) for m, s in enumerate(sets)]
    zero = mpsi.combine([t for t, _ in enc], params)
    for s, (_, placement) in zip(sets, enc, strict=True):
        assert sorted(s[i] for i in mpsi.decode(placement, zero, params)) == sorted(common)
    # flat cell (table · cells + cell) -> the ID a party keeps there
    kept = [{j * params.cells + c: s[r] for j, cells in enumerate(pl.rows) for c, r in cells.items()}
            for s, (_, pl) in zip(sets, enc, strict=True)]
    shared = {f for f, x in kept[0].items() if x in common and all(k.get(f) == x for k in kept[1:])}
    assert set(zero.tolist()) == shared
    assert 20 <= len(zero) <= 20 * params.tables  # every row of A in at least one table


@pytest.mark.parametrize("case", ["disjoint", "identical", "one_empty", "single"])
def test_edge_cases_equal_the_plain_set_computation(case: str) -> None:
    a = [f"a{i}" for i in range(50)]
    sets = {"disjoint": [a, [f"b{i}" for i in range(40)], a[:10]], "identical": [a, list(a), list(a)],
            "one_empty": [a, a[:30], []], "single": [["x"], ["x"], ["x", "y"]]}[case]
    rows, _, _, _ = run(sets)
    want = set(sets[0]).intersection(*map(set, sets[1:]))
    for s, r in zip(sets, rows, strict=True):
        assert {s[i] for i in r} == want


def test_no_row_of_a_is_missed_at_scale() -> None:
    sets = [[f"u{i}" for i in range(2000)], [f"u{i}" for i in range(1000, 3000)], [f"u{i}" for i in range(500, 2500)]]
    rows, _, _, _ = run(sets)
    assert [len(r) for r in rows] == [1000, 1000, 1000]


def test_the_aggregators_view_is_uniform_outside_a_also_for_pairwise_rows() -> None:
    """S's sums at the cells of rows on C1 and C2 only look exactly like the cells of rows on
    one party only (and like the uniform distribution); one party's table alone is uniform."""
    common, pairwise, alone = [f"c{i}" for i in range(5)], [f"p{i}" for i in range(600)], [f"s{i}" for i in range(600)]
    sets = [common + pairwise, common + pairwise + alone, common]
    params = mpsi.plan(3, len(sets[1]))
    key, seeds = secrets.token_bytes(32), _seeds(3)
    enc = [mpsi.encode(s, m, params, key, seeds[m]) for m, s in enumerate(sets)]
    total = sum(t.astype(object) for t, _ in enc) % mpsi.FIELD  # what S computes
    ids = sets[1]
    u_pair, u_alone = [], []
    for j, place in enumerate(enc[1][1].rows):  # every table: the cells C2 filled
        for c, r in place.items():
            (u_pair if ids[r].startswith("p") else u_alone if ids[r].startswith("s") else []).append(
                float(total[j, c, 0]) / mpsi.FIELD)
    assert len(u_pair) > 500 and len(u_alone) > 500
    assert ks_one_sample(u_pair)[1] > 1e-3 and ks_one_sample(u_alone)[1] > 1e-3
    assert ks_two_sample(u_pair, u_alone)[1] > 1e-3  # S cannot tell C1∩C2 rows from C2-only rows
    assert min(u_pair) > 0  # never a zero: a pairwise row is not in A
    own = enc[0][0][..., 0].ravel().astype(float) / mpsi.FIELD
    assert ks_one_sample(own)[1] > 1e-3


def test_bad_input_and_tampered_tables_get_clear_errors() -> None:
    params = mpsi.plan(3, 10)
    key, seeds = secrets.token_bytes(32), _seeds(3)
    with pytest.raises(InputDataError, match="duplicate"):
        mpsi.encode(["a", "a"], 0, params, key, seeds[0])
    with pytest.raises(InputDataError, match="exceed"):
        mpsi.encode([str(i) for i in range(11)], 0, params, key, seeds[0])
    with pytest.raises(InputDataError, match="pairwise seed"):
        mpsi.encode(["a"], 0, params, key, {1: seeds[0][1]})
    t = [mpsi.encode(["a"], m, params, key, seeds[m])[0] for m in range(3)]
    with pytest.raises(ProtocolError, match="shape"):
        mpsi.combine([t[0], t[1], t[2][:1]], params)
    bad = t[2].copy()
    bad[0, 0, 0] = mpsi.FIELD
    with pytest.raises(ProtocolError, match="outside the field"):
        mpsi.combine([t[0], t[1], bad], params)
    with pytest.raises(ProtocolError, match="3 parties"):
        mpsi.combine(t[:2], params)
    with pytest.raises(ProtocolError, match="outside the tables"):
        mpsi.decode(mpsi.encode(["a"], 0, params, key, seeds[0])[1], [params.tables * params.cells], params)
    with pytest.raises(InputDataError):
        mpsi.plan(1, 10)


def test_plan_meets_the_miss_bound() -> None:
    for n in (2, 3, 4, 8):
        p = mpsi.plan(n, 1000, miss_bits=40)
        q = n * 1000 / (2.0 * p.cells)
        assert q ** p.tables <= 2.0 ** -40




def _coalition(tables: list[np.ndarray], c: int, key: bytes, seeds: dict[int, bytes], guesses: list[str],
               params: mpsi.MPSIParams) -> tuple[dict[int, set[str]], set[str]]:
    """S colluding with party c (k and c's seeds): the guesses it finds in each other party's table alone, and
    those it finds in the sum of the others' tables (the two lines of the mpsi docstring).

    For the masks, the coalition tries what it can know of them: c's pairwise term, or nothing.
    """
    p = np.uint64(mpsi.FIELD)
    at = np.arange(params.tables)[:, None], mpsi.positions(guesses, key, params)
    h = mpsi.encodings(guesses, key)[None]

    def found(target: np.ndarray, *candidates: np.ndarray) -> set[str]:
        hit = np.any([np.any(np.all(r[at] == target, axis=2), axis=0) for r in candidates], axis=0)
        return {g for g, x in zip(guesses, hit, strict=True) if x}

    others = [m for m in range(params.parties) if m != c]
    single = {m: found((mpsi.coefficients(key, m, params)[at] * h) % p, tables[m],
                       (tables[m] + p - mpsi.pair_term(m, c, seeds[m], params)) % p) for m in others}
    z_c = sum((mpsi.pair_term(c, m, seeds[m], params) for m in others), np.zeros(params.shape, np.uint64))
    rest = sum((tables[m] for m in others), np.zeros(params.shape, np.uint64)) % p
    joint = found((p - (mpsi.coefficients(key, c, params)[at] * h) % p) % p, rest, (rest + z_c) % p)
    return single, joint


def _collusion_case(n: int) -> tuple[list[list[str]], list[np.ndarray], bytes, dict[int, dict[int, bytes]],
                                     mpsi.MPSIParams]:
    base = [f"a{i}" for i in range(40)]
    sets = [base[:10] + [f"c{i}" for i in range(5)], base[:30] + [f"x{i}" for i in range(20)], base][:n]
    params = mpsi.plan(n, max(map(len, sets)))
    key, seeds = secrets.token_bytes(32), _seeds(n)
    return sets, [mpsi.encode(s, m, params, key, seeds[m])[0] for m, s in enumerate(sets)], key, seeds, params


def test_the_zero_sharing_hides_one_party_from_the_server_colluding_with_another() -> None:
    """Three parties: S with party 0 finds none of its guesses in party 1's or party 2's table alone, but it
    finds every guess on both of them in their sum (A plus what 1 and 2 share outside party 0's set)."""
    sets, tables, key, seeds, params = _collusion_case(3)
    guesses = sorted(set(sets[1]) | set(sets[2]) | {f"z{i}" for i in range(20)})
    single, joint = _coalition(tables, 0, key, seeds[0], guesses, params)
    assert single == {1: set(), 2: set()}
    assert joint == set(sets[1]) & set(sets[2])  # base[:30]: 20 of them not on party 0 (declared)


def test_without_the_zero_sharing_the_coalition_reads_each_party(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mpsi, "_zero_share", lambda me, s, params: np.zeros(params.tables * params.cells
                                                                            * mpsi.REPS, np.uint64))
    sets, tables, key, seeds, params = _collusion_case(3)
    guesses = sorted(set(sets[1]) | set(sets[2]) | {f"z{i}" for i in range(20)})
    single, _ = _coalition(tables, 0, key, seeds[0], guesses, params)
    assert single == {1: set(sets[1]), 2: set(sets[2])}


def test_with_two_parties_the_coalition_knows_the_other_zero_share() -> None:
    """Two parties: the colluding party holds the one seed of the other's z, so S with it reads the other's set."""
    sets, tables, key, seeds, params = _collusion_case(2)
    guesses = sorted(set(sets[0]) | set(sets[1]))
    single, _ = _coalition(tables, 0, key, seeds[0], guesses, params)
    assert single == {1: set(sets[1])}
