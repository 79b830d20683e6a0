"""The audit's statistics against SciPy, and each attack's power on views built by hand."""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from vflcrypto.audit import attacks
from vflcrypto.errors import AuditError
from vflcrypto.runtime.declarations import Protection

stats = pytest.importorskip("scipy.stats")
special = pytest.importorskip("scipy.special")


@pytest.mark.parametrize("lam", [0.0, 0.05, 0.3, 0.6, 0.9, 1.0, 1.2, 1.8, 2.5, 4.0])
def test_kolmogorov_distribution_matches_scipy(lam: float) -> None:
    assert attacks.kolmogorov_sf(lam) == pytest.approx(float(special.kolmogorov(lam)), rel=1e-9, abs=1e-15)


def test_ks_statistic_of_zero_has_p_one() -> None:
    d, p = attacks.ks_two_sample([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert d == 0.0 and p == 1.0


def test_ks_tests_match_scipy() -> None:
    rng = np.random.default_rng(4)
    for n in (50, 400, 3000):
        x = rng.uniform(size=n) ** 1.05  # slightly non-uniform
        d, p = attacks.ks_one_sample(x)
        ref = stats.kstest(x, "uniform")
        assert d == pytest.approx(ref.statistic, abs=1e-12)
        assert p == pytest.approx(ref.pvalue, rel=0.1, abs=1e-3)  # Stephens' approximation vs exact
        y = rng.normal(size=n // 2)
        d2, p2 = attacks.ks_two_sample(x, y)
        ref2 = stats.ks_2samp(x, y, method="asymp")
        assert d2 == pytest.approx(ref2.statistic, abs=1e-12)
        assert p2 == pytest.approx(ref2.pvalue, rel=0.15, abs=1e-3)


def test_ks_critical_value_is_where_the_p_value_crosses_alpha() -> None:
    for n in (30, 200, 5000):
        crit = attacks.ks_critical(n)
        assert attacks.ks_one_sample(np.linspace(0, 1, n) * (1 - crit * 1.001))[1] <= attacks.ALPHA * 10
        scale = np.sqrt(n) + 0.12 + 0.11 / np.sqrt(n)
        assert attacks.kolmogorov_sf(scale * crit * 0.999) > attacks.ALPHA > attacks.kolmogorov_sf(scale * crit * 1.001)


@pytest.mark.parametrize(("k", "n", "p"),
                         [(0, 10, 0.3), (7, 10, 0.3), (60, 100, 0.5), (900, 1000, 0.62), (11, 10, 0.5)])
def test_binomial_tail_matches_scipy(k: int, n: int, p: float) -> None:
    assert attacks.binomial_sf(k, n, p) == pytest.approx(float(stats.binom.sf(k - 1, n, p)), rel=1e-9, abs=1e-300)


def test_correlations_match_scipy() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=300)
    y = 0.2 * x + rng.normal(size=300)
    r, p = attacks.pearson(x, y)
    ref = stats.pearsonr(x, y)
    assert r == pytest.approx(ref.statistic, abs=1e-12)
    assert p == pytest.approx(ref.pvalue, rel=0.05)
    rho, _ = attacks.spearman(x, np.round(y, 1))  # ties get average ranks
    assert rho == pytest.approx(stats.spearmanr(x, np.round(y, 1)).statistic, abs=1e-12)
    assert attacks.pearson(np.ones(10), x[:10]) == (0.0, 1.0)


# --------------------------------------------------------------------------- attack power


M = 2**61 - 1


def _masked(values: list[int], *, mask: list[int] | None = None) -> list[int]:
    masks = mask if mask is not None else [secrets.randbelow(M) for _ in values]
    return [(v + r) % M for v, r in zip(values, masks, strict=True)]


def test_ring_checks_pass_fresh_masks_and_flag_each_failure() -> None:
    rng = np.random.default_rng(0)
    secrets_ = [rng.integers(-1000, 1000, size=40).tolist() for _ in range(6)]
    truth = [[np.asarray(s, dtype=float) for s in secrets_]]

    def verdicts(stream: list[list[int]]) -> dict[str, bool]:
        found = attacks.ring_mask_findings("c", "x.masked", "v", [stream], M, truth=truth)
        return {f.name.split(": ")[1]: f.flagged for f in found}

    fresh = verdicts([_masked(s) for s in secrets_])
    assert fresh == {"uniform over Z_M": False, "fresh mask per message": False, "correlation with the secret": False}
    assert all(verdicts([list(np.mod(s, M)) for s in secrets_]).values())  # no mask at all
    one = [secrets.randbelow(M) for _ in range(40)]
    reused = verdicts([_masked(s, mask=one) for s in secrets_])
    assert reused["fresh mask per message"]  # the reuse cancels in consecutive differences
    short = verdicts([_masked(s, mask=[secrets.randbelow(2**20) for _ in s]) for s in secrets_])
    assert short["uniform over Z_M"]  # a 20-bit mask mod a 61-bit ring leaves the residues near 0


def test_real_mask_checks() -> None:
    rng = np.random.default_rng(1)
    R = 2.0**18
    g = [rng.normal(size=50) for _ in range(5)]
    fresh = attacks.real_mask_findings("c", "x.m", "v", [[v + rng.uniform(-R, R, 50) for v in g]], R, truth=[g])
    assert not any(f.flagged for f in fresh)
    one = rng.uniform(-R, R, 50)
    reused = attacks.real_mask_findings("c", "x.m", "v", [[v + one for v in g]], R)
    assert {f.name: f.flagged for f in reused}["v: fresh mask per message"]


def test_unrandomized_and_stripped_paillier_decoding(small_paillier_keys) -> None:
    pk, _sk = small_paillier_keys
    n, nsq = int(pk.n), int(pk.nsquare)
    bare = [(1 + m * n) % nsq for m in (5, 7)]
    assert attacks.unrandomized_paillier(n, bare) == [5, 7]
    proper = pk.encrypt([5, 7]).ciphertexts()
    assert attacks.unrandomized_paillier(n, proper) == [None, None]
    # [[u]] * g^r without fresh randomness: whoever knows [[u]] strips it and reads r
    derived = [c * (1 + r * n) % nsq for c, r in zip(proper, (11, 13), strict=True)]
    assert attacks.strip_known_paillier(n, derived, [proper]) == [11, 13]
    fresh = pk.encrypt([11, 13]).ciphertexts()
    assert attacks.strip_known_paillier(n, [a * b % nsq for a, b in zip(derived, fresh, strict=True)],
                                        [proper]) == [None, None]
    f = attacks.unrandomized_finding("p", "x.ct", [None, 3])
    assert f.flagged and f.value == 0.5 and f.protection is Protection.CIPHERTEXT


def test_accuracy_and_order_findings() -> None:
    truth = np.array([0, 1] * 100)
    coin = attacks.accuracy_finding("p", "labels", np.zeros(200), truth, 0.5, attacks=("x",), protection=None,
                                    description="")
    assert coin.value == 0.5 and not coin.flagged
    assert attacks.accuracy_finding("p", "labels", truth, truth, 0.5, attacks=("x",), protection=None,
                                    description="").flagged
    pos = np.arange(300)
    assert attacks.order_finding("a", "o", "x", pos, pos, "").flagged
    assert not attacks.order_finding("a", "o", "x", pos, np.random.default_rng(3).permutation(300), "").flagged
    runs = [np.sort(np.random.default_rng(k).integers(0, 50, 12)) for k in range(20)]
    assert attacks.adjacent_order_finding("a", "o", "x", runs, "").flagged
    shuffled = [np.random.default_rng(k).permutation(b) for k, b in enumerate(runs)]
    assert not attacks.adjacent_order_finding("a", "o", "x", shuffled, "").flagged


@pytest.mark.parametrize("sizes", [(1,), (2,), (4,), (3, 4), (5, 2, 1)])
def test_ascents_distribution_is_exact(sizes: tuple[int, ...]) -> None:
    import itertools

    counts: dict[int, int] = {}
    for orders in itertools.product(*(itertools.permutations(range(n)) for n in sizes)):
        k = sum(int(b > a) for order in orders for a, b in itertools.pairwise(order))
        counts[k] = counts.get(k, 0) + 1
    total = sum(counts.values())
    for k in range(-1, sum(sizes) + 1):
        want = sum(v for j, v in counts.items() if j >= k) / total
        assert attacks.ascents_sf(sizes, k) == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_exact_adjacent_order_finding() -> None:
    sorted_pair = [np.arange(7), np.arange(7)]  # two sorted runs of 7: p = 1 / 7!^2
    hit = attacks.adjacent_order_finding("a", "o", "x", sorted_pair, "", exact=True)
    assert hit.flagged and hit.p_value == pytest.approx(1 / 5040**2) and hit.min_effect == pytest.approx(11 / 12)
    assert not attacks.adjacent_order_finding("a", "o", "x", [np.array([3, 0, 6, 1, 5, 2, 4])] * 2, "",
                                              exact=True).flagged
    short = attacks.adjacent_order_finding("a", "o", "x", [np.arange(7)], "", exact=True)  # 1/7! > ALPHA
    assert not short.measured and not short.flagged
    with pytest.raises(AuditError):
        attacks.adjacent_order_finding("a", "o", "x", [np.array([1, 1, 2])], "", exact=True)


def test_linear_probe_finds_a_linear_view_and_not_noise() -> None:
    from vflcrypto.audit.attacks import linear_probe_r2, probe_finding

    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 6))
    H = X @ rng.normal(size=(6, 8)) + 0.01 * rng.normal(size=(200, 8))  # a linear view of X
    assert linear_probe_r2(H, X) > 0.95
    f = probe_finding("server", "probe", H, X, attacks=("k",), protection=None, description="")
    assert f.flagged and f.value > 0.95
    noise = rng.normal(size=(200, 8))
    g = probe_finding("server", "probe", noise, X, attacks=("k",), protection=None, description="")
    assert not g.flagged and g.value < 0.1


def test_partition_finding_scores_ari_against_a_shuffled_null() -> None:
    from vflcrypto.audit.attacks import partition_finding

    y = np.repeat(np.arange(5), 20)
    same = partition_finding("party", "p", (y + 2) % 5, y, attacks=("k",), protection=None, description="")
    assert same.value == 1.0 and same.flagged
    rng = np.random.default_rng(0)
    rand = partition_finding("party", "p", rng.integers(0, 5, 100), y, attacks=("k",), protection=None,
                             description="")
    assert abs(rand.value) < 0.1 and not rand.flagged
