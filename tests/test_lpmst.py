"""LP-MST (Ghazi et al., "Deep Learning with Label Differential Privacy", NeurIPS 2021) as split learning's label
defence: RRWithPrior's choice of k and output distribution against the paper's Algorithms 1–2, its pure ε-DP bound
over every pair of labels, the check of its keep rate, and a small two-stage split run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from vflcrypto.audit.defences import keep_rate_finding
from vflcrypto.errors import InputDataError
from vflcrypto.privacy import mechanisms as m
from vflcrypto.privacy import rr_keep_probability

PRIORS = (
    np.array([0.5, 0.3, 0.1, 0.05, 0.05]),
    np.array([0.9, 0.04, 0.03, 0.02, 0.01]),
    np.full(5, 0.2),  # uniform: k* = K, plain randomized response
    np.array([0.05, 0.1, 0.6, 0.05, 0.2]),
)


def _paper_k(prior: np.ndarray, eps: float) -> int:
    """Algorithm 2, steps 1–2, written out: w_k = e^ε / (e^ε + k − 1) · (the k largest priors summed)."""
    top = np.sort(prior)[::-1]
    w = [math.exp(eps) / (math.exp(eps) + k - 1) * float(top[:k].sum()) for k in range(1, len(prior) + 1)]
    return int(np.argmax(w)) + 1


def _paper_distribution(prior: np.ndarray, eps: float, y: int) -> np.ndarray:
    """Algorithm 1 (RRTop-k at k*) written out: the output distribution for true label ``y``."""
    k = _paper_k(prior, eps)
    top = np.argsort(-prior, kind="stable")[:k]
    out = np.zeros(len(prior))
    if y in top:
        out[top] = 1 / (math.exp(eps) + k - 1)
        out[y] = math.exp(eps) / (math.exp(eps) + k - 1)
    else:
        out[top] = 1 / k
    return out


def test_rr_with_prior_chooses_the_papers_k_and_draws_from_its_distribution() -> None:
    """For each prior and ε, k* is the paper's argmax, and 40 000 draws for a label inside and one outside the top k*
    match RRTop-k's probabilities (keep e^ε / (e^ε + k* − 1)) within 5 standard errors in every class."""
    n = 40_000
    for prior in PRIORS:
        for eps in (0.5, 1.0, 2.0, 4.0):
            k = _paper_k(prior, eps)
            assert int(m.rr_with_prior_k(prior[None], eps)[0]) == k
            for y in (int(np.argmax(prior)), int(np.argmin(prior))):
                expected = _paper_distribution(prior, eps, y)
                np.testing.assert_allclose(m.rr_with_prior_matrix(prior, eps)[y], expected, atol=1e-12)
                out = m.rr_with_prior(np.full(n, y), np.tile(prior, (n, 1)), eps)
                freq = np.bincount(out, minlength=len(prior)) / n
                se = np.sqrt(expected * (1 - expected) / n)
                assert np.all(np.abs(freq - expected) <= 5 * se + 1e-12), (prior, eps, y, freq, expected)
                keep = m.rr_with_prior_keep(np.array([y]), prior[None], eps)[0]
                assert keep == pytest.approx(expected[y])
    # the uniform prior is plain randomized response over the K classes
    assert m.rr_with_prior_keep(np.array([3]), np.full((1, 5), 0.2), 1.0)[0] == pytest.approx(
        rr_keep_probability(1.0, 5))


def test_rr_with_prior_is_pure_epsilon_dp_over_every_pair_of_labels() -> None:
    """Exact probabilities: for a fixed prior, Pr[c | y] <= e^ε Pr[c | y'] for every output c and labels y, y'
    (Lemma 1, Corollary 2), with equality reached when k* > 1 (the bound is tight, not loose); no output outside
    the top k*."""
    rng = np.random.default_rng(7)  # example priors only
    priors = [*PRIORS, *(rng.dirichlet(np.full(10, a)) for a in (0.1, 0.5, 1.0, 5.0) for _ in range(5))]
    for prior in priors:
        for eps in (0.1, 0.5, 1.0, 2.0, 4.0, 8.0):
            M = m.rr_with_prior_matrix(prior, eps)
            np.testing.assert_allclose(M.sum(axis=1), 1.0)
            ratio = M[:, None, :] / np.where(M[None, :, :] > 0, M[None, :, :], np.inf)
            assert np.all(M[:, None, :] <= math.exp(eps) * M[None, :, :] * (1 + 1e-12)), (prior, eps)
            assert int(np.sum(M.sum(axis=0) > 0)) == _paper_k(prior, eps)  # outputs only within the top k*
            if _paper_k(prior, eps) > 1:
                assert ratio.max() == pytest.approx(math.exp(eps))


def test_the_keep_rate_check_flags_labels_kept_more_often_than_announced() -> None:
    """The Poisson-binomial check: honest draws at per-row rates q_i pass; every label kept flags, and so does one
    label kept that the mechanism could not have kept (q_i = 0)."""
    n = 200
    y = np.arange(n) % 10
    prior = np.tile(np.array([0.3, 0.2, 0.1, *([0.4 / 7] * 7)]), (n, 1))
    q = m.rr_with_prior_keep(y, prior, 1.0)
    honest = keep_rate_finding("server", "kept", m.rr_with_prior(y, prior, 1.0), y, q, "RRWithPrior", attacks=())
    assert not honest.flagged and honest.min_effect < 1.0 and honest.samples == n
    assert keep_rate_finding("server", "kept", y, y, q, "RRWithPrior", attacks=()).flagged
    one = m.rr_with_prior(y, prior, 1.0)
    i = int(np.flatnonzero(q == 0)[0])
    one[i] = y[i]
    assert keep_rate_finding("server", "kept", one, y, q, "RRWithPrior", attacks=()).p_value == 0.0


def test_lpmst_in_split_learning_releases_each_label_once_over_two_stages(
        capsys: pytest.CaptureFixture[str]) -> None:
    """60 overlap rows, 4 epochs at ε = 1: the stage-1 rows are the public half, every label is released once,
    stage-1 gradients are zero on the other half, every party accounts the announced label-lpmst guarantee
    (pure ε), the audit's check passes, and the frontier runs from the command line."""
    pytest.importorskip("torch")
    from vflcrypto.protocols import split
    from vflcrypto.protocols._repvfl import digits_example
    from vflcrypto.protocols.split import audit
    from vflcrypto.protocols.split.defence import lpmst_stage2

    from vflcrypto.cli import main
    from vflcrypto.errors import ProtocolError

    server, parties = digits_example(60, seed=0)
    cfg = split.SplitConfig(epochs=4, label_dp=1.0, label_mechanism="lpmst")
    run, tap = audit.run_tapped(server, parties, cfg)
    g = run.server.privacy["label-lpmst"]
    assert set(run.server.privacy) == {"label-lpmst"} and (g["epsilon"], g["delta"]) == (1.0, 0.0)
    assert all(p.privacy["label-lpmst"]["epsilon"] == 1.0 for p in run.parties)
    stage2 = lpmst_stage2(60, cfg.seed)
    assert stage2.sum() == 30
    recs = tap.held(split.SERVER, "lpmst_releases")
    assert np.array_equal(np.sort(recs[0][0]), np.flatnonzero(~stage2))  # stage 1: the public half, at start
    rows = np.concatenate([r[0] for r in recs])
    assert np.array_equal(np.sort(rows), np.arange(60))  # every label released once
    nb = len(split.epoch_batches(60, cfg.batch_size, cfg.seed, 0))
    for msg, batch in zip(tap.received("party-0", "split.dp_gradient")[: 2 * nb],
                          [b for e in (0, 1) for b in split.epoch_batches(60, cfg.batch_size, cfg.seed, e)],
                          strict=True):
        assert not np.any(np.asarray(msg.G)[stage2[batch]])  # stage 1 (epochs 0-1): no signal from half 2
    assert "split.gradient" not in {e.kind for e in run.transcript.sent()}
    found = audit.defence_findings(tap, ["party-0", "party-1"], server.n_classes)[-1]
    assert found.name == audit.RR_CHECK and found.measured and not found.flagged and found.min_effect < 1.0
    with pytest.raises(InputDataError, match="lpmst"):
        split.SplitConfig(epochs=4, label_mechanism="lpmst")
    with pytest.raises(InputDataError, match="LP-MST"):
        split.SplitConfig(epochs=4, label_dp=1.0, grad_noise=1.0, label_mechanism="lpmst")
    with pytest.raises(InputDataError, match="two epochs"):
        split.SplitConfig(epochs=1, label_dp=1.0, label_mechanism="lpmst")
    role = split.PartyRole(parties[0], index=0, config=cfg)
    role.start()
    with pytest.raises(ProtocolError, match="label defences"):  # RR announced, LP-MST asked for
        role.on_setup(split.Setup(60, len(parties[0].X_test), 16, 4, 64, 0, label_epsilon=1.0))
    assert main(["audit", "split", "--defence", "label-lpmst", "--budgets", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["defence"] == "label-lpmst" and out["points"][1]["epsilon"] == 4.0
