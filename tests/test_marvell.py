"""Marvell (Li et al., ICLR 2022): the solver, the noise, the bound, and split learning under ``--marvell-bound``.

* the solver meets its power constraint and finds the least symmetrised KL (against a
  brute-force search over the feasible covariances);
* the noise drawn has the solved covariance and the power P on average;
* the leak-AUC bound holds for two Gaussians whose exact AUC is known;
* split learning on the binary digits: at a tight bound the worst-epoch norm and direction
  leak AUCs fall to their chance level; C > 2 is refused in one line; every party reads the
  announced bound and the server reports its symmetrised KL;
* the frontier against isotropic Gaussian noise, as measured (see the last test).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from vflcrypto.errors import InputDataError
from vflcrypto.privacy.marvell import batch_statistics, leak_auc_bound, marvell_noise, solve, sym_kl

# --------------------------------------------------------------------------- the solver and the noise


def _feasible(rng: np.random.Generator, u: float, v: float, d: int, p: float, power: float) -> tuple[float, ...]:
    """A random covariance meeting the power constraint with equality (λ_2k <= λ_1k, both classes noised)."""
    w = rng.dirichlet(np.ones(4))  # shares of the power: along/across for negatives and positives
    l10, l11 = w[0] * power / (1 - p), w[2] * power / p
    l20 = min(w[1] * power / ((1 - p) * (d - 1)), l10)
    l21 = min(w[3] * power / (p * (d - 1)), l11)
    spent = p * (l11 + (d - 1) * l21) + (1 - p) * (l10 + (d - 1) * l20)
    scale = power / spent
    return l10 * scale, l20 * scale, l11 * scale, l21 * scale


@pytest.mark.parametrize("case", [
    dict(u=0.2, v=0.5, d=16, g=3.0, p=0.1, power=3.0),   # negatives less spread (the usual: u < v)
    dict(u=0.6, v=0.1, d=8, g=1.0, p=0.3, power=0.25),   # positives less spread
    dict(u=1e-4, v=2e-4, d=32, g=1e-2, p=0.12, power=4e-2),
    dict(u=0.0, v=0.0, d=4, g=2.0, p=0.5, power=1.0),    # point masses: one-dimensional
])
def test_the_solver_meets_the_power_constraint_and_no_feasible_noise_leaks_less(case: dict[str, float]) -> None:
    """The optimum spends exactly P (more noise never raises the KL), keeps λ >= 0 and λ_2k <= λ_1k with one λ_2k
    zero (the paper's case split on u <= v), lowers the symmetrised KL below the noiseless one, and no random feasible
    covariance (2,000 draws, the numpy RNG simulating candidates) beats it by more than 1e-9 relative."""
    s = solve(case["u"], case["v"], int(case["d"]), case["g"], case["p"], case["power"])
    assert s.expected_power == pytest.approx(case["power"], rel=1e-9)
    assert min(s.lam10, s.lam20, s.lam11, s.lam21) >= 0
    assert s.lam20 <= s.lam10 + 1e-15 and s.lam21 <= s.lam11 + 1e-15 and min(s.lam20, s.lam21) == 0
    u, v, d, g = case["u"], case["v"], int(case["d"]), case["g"]
    assert s.sum_kl <= float(sym_kl(0, 0, 0, 0, u, v, d, g))
    rng = np.random.default_rng(7)
    draws = np.array([_feasible(rng, u, v, d, case["p"], case["power"]) for _ in range(2000)])
    others = sym_kl(draws[:, 0], draws[:, 1], draws[:, 2], draws[:, 3], u, v, d, g)
    assert float(np.min(others)) >= s.sum_kl * (1 - 1e-9) - 1e-12
    more = solve(u, v, d, g, case["p"], 4 * case["power"])
    assert more.sum_kl <= s.sum_kl + 1e-12


def test_the_solver_refuses_what_it_cannot_solve() -> None:
    with pytest.raises(InputDataError, match="both labels"):
        solve(0.1, 0.1, 4, 1.0, 0.0, 1.0)
    with pytest.raises(InputDataError):
        solve(-1.0, 0.1, 4, 1.0, 0.5, 1.0)
    with pytest.raises(InputDataError, match="binary"):
        marvell_noise(np.zeros((4, 2)), np.array([0, 1, 2, 1]), 1.0)
    with pytest.raises(InputDataError, match="first batch"):
        marvell_noise(np.zeros((4, 2)), np.array([1, 1, 1, 1]), 1.0)


def test_the_noise_has_the_solved_covariance_and_power() -> None:
    """20,000 rows of a two-class batch (the numpy RNG makes the example gradients): the noise added (rows out less
    rows in) has mean squared norm P = s·‖Δ‖² within 3 % (its relative sd here is < 0.5 %), and each class's variance
    along Δ̂ and across it matches λ_1k and λ_2k within 5 %; a batch of one label reuses the last solution."""
    rng = np.random.default_rng(3)
    n, d = 20_000, 8
    y = (rng.random(n) < 0.2).astype(np.int64)
    G = rng.normal(0, 0.3, (n, d)) + np.where(y[:, None] == 1, -1.0, 0.1) * np.linspace(1, 2, d)
    out, sol, unit = marvell_noise(G, y, 2.0)
    _, _, delta, _ = batch_statistics(G, y)
    assert sol.power == pytest.approx(2.0 * float(delta @ delta))
    noise = out - G
    assert float(np.mean(np.sum(noise**2, axis=1))) == pytest.approx(sol.power, rel=0.03)
    along = noise @ unit
    across = noise - np.outer(along, unit)
    for label, lam1, lam2 in ((1, sol.lam11, sol.lam21), (0, sol.lam10, sol.lam20)):
        m = y == label
        if lam1 > 0:
            assert float(np.var(along[m])) == pytest.approx(lam1, rel=0.05)
        assert float(np.sum(across[m] ** 2) / (m.sum() * (d - 1))) == pytest.approx(lam2, rel=0.05, abs=1e-12)
    ones = np.ones(50, np.int64)
    again, reused, same = marvell_noise(G[:50], ones, 2.0, sol, unit)
    assert reused is sol and same is unit and not np.array_equal(again, G[:50])


def test_the_leak_auc_bound_holds_for_gaussians_of_known_auc() -> None:
    """N(0, 1) against N(μ, 1): symmetrised KL μ², exact AUC of the best score Φ(μ/√2) <= ½ + μ/2 − μ²/8."""
    assert leak_auc_bound(0.0) == 0.5 and leak_auc_bound(4.0) == 1.0
    for mu in np.linspace(0.05, 1.95, 20):
        kl = float(sym_kl(0, 0, 0, 0, 1.0, 1.0, 1, mu * mu))
        assert kl == pytest.approx(mu * mu)
        exact = 0.5 * (1 + math.erf(mu / 2))  # Φ(μ/√2)
        assert exact <= leak_auc_bound(kl) + 1e-12


# --------------------------------------------------------------------------- split learning under --marvell-bound


def test_marvell_is_refused_for_more_than_two_classes(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from vflcrypto.protocols import split
    from vflcrypto.protocols._repvfl import digits_example
    from vflcrypto.protocols.split.frontier import frontier

    from vflcrypto.cli import main

    server, parties = digits_example(60, seed=0)
    with pytest.raises(InputDataError, match="binary labels only, this task has 10 classes"):
        split.run_local(server, parties, config=split.SplitConfig(epochs=1, marvell_bound=1.0))
    with pytest.raises(InputDataError, match="binary"):
        frontier("marvell", [1.0], binary=False)
    with pytest.raises(InputDataError, match="runs alone"):
        split.SplitConfig(marvell_bound=1.0, label_dp=1.0)
    assert main(["train", "split", "--dataset", "digits", "--overlap", "60", "--epochs", "1",
                 "--marvell-bound", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Marvell protects binary labels only, this task has 10 classes" in err[0]


def test_every_party_reads_the_bound_and_the_server_reports_its_kl() -> None:
    """On the binary digits the gradients travel as split.marvell_gradient only; the parties state the announced s
    (no ε), the server the symmetrised KL of every step and the leak-AUC bound of the largest."""
    pytest.importorskip("torch")
    from vflcrypto.protocols import split
    from vflcrypto.protocols._repvfl import binary_digits_example

    from vflcrypto.privacy.marvell import leak_auc_bound as bound

    server, parties = binary_digits_example(120, seed=0)
    run = split.run_local(server, parties, config=split.SplitConfig(epochs=2, marvell_bound=4.0))
    kinds = {e.kind for e in run.transcript.sent()}
    assert "split.marvell_gradient" in kinds and not {"split.gradient", "split.dp_gradient"} & kinds
    g = run.server.privacy["marvell"]
    assert g["epsilon"] is None and g["delta"] is None
    assert g["params"]["steps"] == 2 * 2 * 2  # epochs x batches x parties
    assert g["params"]["leak_auc_bound"] == pytest.approx(bound(g["params"]["max_sum_kl"]))
    for p in run.parties:
        assert p.privacy["marvell"]["params"] == {"power_scale": 4.0}


def test_a_party_refuses_a_setup_whose_marvell_bound_differs_from_its_own() -> None:
    """Marvell's flag is a defence of the shared framework: announced in split.setup, read by every party, and a
    party started with --marvell-bound refuses a setup without it or with another bound (as for the DP flags); a
    setup that announces it beside a DP defence is invalid."""
    pytest.importorskip("torch")
    from vflcrypto.protocols import split
    from vflcrypto.protocols._repvfl import binary_digits_example

    from vflcrypto.errors import ProtocolError

    _, parties = binary_digits_example(60, seed=0)
    n_test = len(parties[0].X_test)
    for announced in ({}, {"marvell_bound": 2.0}, {"label_epsilon": 1.0}):
        role = split.PartyRole(parties[0], index=0, config=split.SplitConfig(epochs=1, marvell_bound=4.0))
        role.start()
        with pytest.raises(ProtocolError, match="label defences"):
            role.on_setup(split.Setup(60, n_test, 16, 1, 64, 0, **announced))
    role = split.PartyRole(parties[0], index=0, config=split.SplitConfig(epochs=1))
    role.start()
    with pytest.raises(ProtocolError, match=r"invalid label defences.*runs alone"):
        role.on_setup(split.Setup(60, n_test, 16, 1, 64, 0, label_epsilon=1.0, marvell_bound=4.0))


@pytest.fixture(scope="module")
def binary_frontiers() -> tuple[Any, Any]:
    """Binary digits, 500 overlap rows (49 positives), 10 epochs: Marvell at s = 16 beside the undefended run, and
    grad-gauss at ε = 64 (δ = 1e-5, noise multiplier 0.83), each point the mean of 2 runs."""
    pytest.importorskip("torch")
    from vflcrypto.protocols.split.frontier import frontier

    return (frontier("marvell", [16.0], 2, overlap=500, epochs=10),
            frontier("grad-gauss", [64.0], 2, binary=True, overlap=500, epochs=10, undefended=False))


def test_at_a_tight_bound_the_gradient_attacks_fall_to_chance(binary_frontiers: tuple[Any, Any]) -> None:
    """Undefended, norm and direction scoring recover the labels (folded leak AUC > 0.9 on the first epoch, > 0.95
    on the worst). At s = 16 (per-batch bound 0.62): on the first epoch both are within 0.15 of chance (0.5; measured
    over 9 single runs 0.51-0.57 norm, 0.53-0.63 direction), norm scoring on the worst epoch within 0.1 of that
    statistic's chance level (the largest of 10 epochs x 2 parties folded chance AUCs, 0.60; measured 0.57-0.65).
    Direction scoring's worst epoch stays a little above its chance level (measured 0.61-0.70): the rows leak up to
    the per-batch bound (its per-epoch folded AUC averages 0.56-0.59 at 20 epochs, chance 0.53; SECURITY.md), and the
    largest of 20 noisy estimates adds to that."""
    marvell, _ = binary_frontiers
    none, tight = marvell.points
    assert none.scores["norm_scoring"] > 0.9 and none.scores["direction_scoring"] > 0.95
    assert none.scores["norm_worst_epoch"] > 0.95 and none.scores["direction_worst_epoch"] > 0.95
    for key in ("norm_scoring", "direction_scoring"):
        assert tight.scores[key] <= 0.5 + 0.15, (key, tight.scores[key])
    assert tight.scores["norm_worst_epoch"] <= tight.baselines["norm_worst_epoch"] + 0.1
    assert tight.params["leak_auc_bound"] < 0.65 and tight.epsilon is None


def test_marvell_does_not_dominate_clipped_gaussian_noise_here(binary_frontiers: tuple[Any, Any]) -> None:
    """The issue's claim, measured: Marvell does *not* dominate isotropic Gaussian noise at equal leakage on the
    binary digits. At s = 16 Marvell's test AUC is 0.69-0.94 (9 single runs, most 0.86-0.89) with a worst-epoch leak
    (the worse of norm and direction) of 0.61-0.70; grad-gauss at ε = 64 reaches 0.87-0.94 (7 runs) at 0.61-0.65.
    Asserted only as far as it is robust: Marvell is not better on both axes at once by 0.02 (bench/privacy_frontier.py
    draws the whole frontiers; SECURITY.md explains why: per-example clipping already removes the norm signal, and
    Marvell's power s·‖Δ‖² is many times the rows' own on an imbalanced binary task)."""
    marvell, gauss = binary_frontiers
    m, g = marvell.points[-1], gauss.points[-1]

    def leak(p: Any) -> float:
        return max(p.scores["norm_worst_epoch"], p.scores["direction_worst_epoch"])

    m_auc, g_auc = m.utility["test_auc"], g.utility["test_auc"]
    assert not (m_auc >= g_auc + 0.02 and leak(m) <= leak(g) - 0.02), (m_auc, leak(m), g_auc, leak(g))


def test_the_frontier_command_draws_html_and_png(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``vflcrypto audit split --defence marvell --budgets 1,4 --binary --html F --plot D``: the command passes the
    setting to the protocol's frontier and draws what it returns (a canned frontier here: the runs are the other
    tests'); ``--binary`` is refused for a protocol whose frontier has no such setting."""
    import dataclasses

    import vflcrypto.protocols as protocols

    from vflcrypto.audit.defences import Frontier, FrontierPoint
    from vflcrypto.cli import main

    asked: dict[str, Any] = {}

    def fake(defence: str, budgets: list[float], repeats: int, **setting: Any) -> Frontier:
        asked.update(defence=defence, budgets=budgets, repeats=repeats, **setting)
        pts = [FrontierPoint(b, None, None, 0.9 - 0.01 * i, {"norm_scoring": 0.9 - 0.1 * i}, {"norm_scoring": 0.5},
                             utility={"test_auc": 0.95 - 0.02 * i}) for i, b in enumerate([None, *budgets])]
        return Frontier("split", defence, "canned", tuple(pts), {"norm_scoring": "norm"}, budget_name="power bound s")

    assert main(["audit", "hfl", "--defence", "dp-fedavg", "--budgets", "1", "--binary"]) == 2  # split's setting only
    assert "--binary" in capsys.readouterr().err
    real = protocols.get
    monkeypatch.setattr(protocols, "get", lambda name: dataclasses.replace(real(name), frontier=fake))
    html, plots = tmp_path / "f.html", tmp_path / "png"
    assert main(["audit", "split", "--defence", "marvell", "--budgets", "1,4", "--binary", "--html", str(html),
                 "--plot", str(plots)]) == 0
    assert asked == {"defence": "marvell", "budgets": [1.0, 4.0], "repeats": 1, "binary": True}
    page = html.read_text()
    assert "<svg" in page and "test AUC against norm_scoring" in page and "No epsilon for marvell" in page
    png = plots / "split-frontier-marvell.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "defence marvell (budget: power bound s)" in capsys.readouterr().out
