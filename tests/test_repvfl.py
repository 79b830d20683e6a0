"""Representation VFL with few overlapping rows (seed 000): split learning, one-shot and few-shot VFL.

The seed's worked numbers (SEEDS.md): the gradient rows at a uniform prediction and their
k-means partition, the Eq. 9 gate cases, the attention transform by hand; the message
budget of one-shot VFL (2 uploads + 1 download per party); every message declared and
seen by the audit; hostile and broken inputs each with a specific error. Accuracy
targets live in bench/repvfl_bench.py, not here.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sklearn.metrics import adjusted_rand_score  # noqa: E402
from vflcrypto.protocols import fewshot, oneshot, split  # noqa: E402
from vflcrypto.protocols._repvfl import PartyData, ServerData, binary_digits_example, digits_example  # noqa: E402
from vflcrypto.protocols.fewshot.math import attention_estimate, dual_gate  # noqa: E402

from vflcrypto.audit.ledger import audit  # noqa: E402
from vflcrypto.errors import InputDataError, PeerTimeoutError, ProtocolError  # noqa: E402
from vflcrypto.ml import nn as vnn  # noqa: E402
from vflcrypto.ml.cluster import canonical_labels, kmeans  # noqa: E402
from vflcrypto.ml.metrics import adjusted_rand_index  # noqa: E402
from vflcrypto.runtime.channel import AuditTap  # noqa: E402
from vflcrypto.runtime.declarations import declarations  # noqa: E402

FAST = {"ssl_epochs": 3, "head_epochs": 10}


@pytest.fixture(scope="module")
def small() -> tuple[ServerData, list[PartyData]]:
    """60 overlap rows, 360 test rows, the digits' unaligned rows (every party its half)."""
    return digits_example(60, seed=1)


# --------------------------------------------------------------------------- the seed's numbers


def test_gradient_rows_at_a_uniform_prediction_and_their_partition() -> None:
    """SEEDS.md: W = [I3 | I3], H = 0, labels S0 = 0, S1 = 1, S2 = 0, S3 = 2 -> rows (p - onehot)."""
    head = torch.nn.Linear(6, 3)
    with torch.no_grad():
        head.weight.copy_(torch.cat([torch.eye(3), torch.eye(3)], dim=1))
        head.bias.zero_()
    y = np.array([0, 1, 0, 2])
    G_A, G_B = vnn.grad_wrt_inputs(head, [np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32)], y)
    expected = np.array([[-2, 1, 1], [1, -2, 1], [-2, 1, 1], [1, 1, -2]]) / 3
    np.testing.assert_allclose(G_A, expected, atol=1e-6)
    np.testing.assert_allclose(G_B, expected, atol=1e-6)
    assert G_A.shape == (4, 3) and np.concatenate([np.zeros((4, 3)), np.zeros((4, 3))], 1).shape == (4, 6)
    part = kmeans(G_A, 3).labels
    groups = {frozenset(np.flatnonzero(part == c).tolist()) for c in set(part.tolist())}
    assert groups == {frozenset({0, 2}), frozenset({1}), frozenset({3})}  # {S0, S2}, {S1}, {S3}
    assert canonical_labels(part).tolist() == [0, 1, 0, 2]


@pytest.mark.parametrize(("c_a", "p_a", "c_ab", "p_ab", "t", "want"), [
    (1, 0.85, 1, 0.94, 0.8, 0.94),  # keep with p^ = p_AB*
    (1, 0.85, 1, 0.94, 0.9, 0.0),  # p_A* below t
    (1, 0.85, 0, 0.94, 0.8, 0.0),  # the heads disagree
])
def test_dual_classifier_gate_eq9(c_a: int, p_a: float, c_ab: int, p_ab: float, t: float, want: float) -> None:
    got = dual_gate(np.array([c_a]), np.array([p_a]), np.array([c_ab]), np.array([p_ab]), t)
    assert got.tolist() == [pytest.approx(want)]


def test_attention_transform_by_hand() -> None:
    """softmax(H_u^A (H_o^A)^T / sqrt(d)) H_o^B for d = 2: scores (1/sqrt 2, 0) for the one unaligned row."""
    Hu, Ho_a, Ho_b = np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[2.0, 0.0], [0.0, 4.0]])
    w0 = np.exp(1 / np.sqrt(2)) / (np.exp(1 / np.sqrt(2)) + 1)  # 0.66976...
    np.testing.assert_allclose(attention_estimate(Hu, Ho_a, Ho_b), [[2 * w0, 4 * (1 - w0)]], rtol=1e-12)
    assert 2 * w0 == pytest.approx(1.33952, abs=1e-5)
    with pytest.raises(InputDataError):
        attention_estimate(Hu, Ho_a, Ho_b[:1])


def test_adjusted_rand_index_matches_scikit_learn() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = rng.integers(0, 5, 80), rng.integers(0, 4, 80)
        assert adjusted_rand_index(a, b) == pytest.approx(adjusted_rand_score(a, b), abs=1e-12)
    assert adjusted_rand_index([0, 0, 1, 2], [5, 5, 9, 1]) == 1.0


def test_kmeans_is_deterministic_and_refuses_bad_input() -> None:
    X = np.random.default_rng(3).normal(size=(50, 4))
    assert kmeans(X, 4, seed=7).labels.tolist() == kmeans(X, 4, seed=7).labels.tolist()
    with pytest.raises(InputDataError):
        kmeans(X, 51)
    with pytest.raises(InputDataError):
        kmeans(np.full((5, 2), np.nan), 2)


# --------------------------------------------------------------------------- one-shot VFL


def _kinds_by_party(transcript: Any) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for e in transcript.sent():
        party = e.receiver if e.sender == "server" else e.sender
        direction = "down" if e.sender == "server" else "up"
        out.setdefault(party, Counter())[(direction, e.kind)] += 1
    return out


def test_one_shot_sends_two_uploads_and_one_download_per_party(small: Any) -> None:
    server, parties = small
    run = oneshot.run_local(server, parties, config=oneshot.OneShotConfig(**FAST))
    for party, counts in _kinds_by_party(run.transcript).items():
        training = {k: v for k, v in counts.items() if not k[1].endswith("test_representation")}
        assert training == {("down", "oneshot.setup"): 1, ("up", "oneshot.representation"): 1,
                            ("down", "oneshot.gradient"): 1, ("up", "oneshot.representation_update"): 1}, party
        assert counts[("up", "oneshot.test_representation")] == 1
    assert run.test_accuracy is not None and run.test_accuracy > 0.3  # far above 0.1 even after 3 epochs
    for p in run.parties:  # the temporary labels are the overlap partition (the declared leak)
        assert adjusted_rand_index(p.pseudo_labels, server.y_overlap) > 0.9


def test_partition_variant_sends_only_cluster_ids(small: Any) -> None:
    server, parties = small
    tap = AuditTap()
    run = oneshot.run_local(server, parties, config=oneshot.OneShotConfig(variant="partition", **FAST), tap=tap)
    (got,) = tap.received("party-0", "oneshot.partition")
    ids = np.asarray(got.clusters)
    assert ids.dtype.kind == "i" and ids.shape == (60,) and ids[0] == 0
    assert canonical_labels(ids).tolist() == ids.tolist()  # numbered by first appearance: only the partition
    assert "oneshot.gradient" not in {e.kind for e in run.transcript.sent()}


def test_runs_are_reproducible(small: Any) -> None:
    server, parties = small
    cfg = oneshot.OneShotConfig(**FAST)
    a, b = oneshot.run_local(server, parties, config=cfg), oneshot.run_local(server, parties, config=cfg)
    np.testing.assert_array_equal(a.server.test_proba, b.server.test_proba)


def test_a_users_own_extractor_is_used(small: Any) -> None:
    server, parties = small
    mine = torch.nn.Sequential(torch.nn.Linear(32, 16))
    run = oneshot.run_local(server, parties, config=oneshot.OneShotConfig(**FAST), extractors=[mine, None])
    assert len(run.parties[0].extractor) == 2  # the Linear's weight and bias, not the default MLP's
    np.testing.assert_array_equal(run.parties[0].extractor[0], mine[0].weight.detach().numpy())  # trained in place


def test_labels_that_disagree_with_the_class_count_are_refused() -> None:
    with pytest.raises(InputDataError, match=r"labels must lie in 0\.\.2"):
        ServerData(np.array([0, 1, 3, 2]), 3)
    with pytest.raises(InputDataError, match="at least 2 classes"):
        ServerData(np.array([0, 0]), 1)
    with pytest.raises(InputDataError, match="integers"):
        ServerData(np.array([0.5, 1.0]), 2)


def test_misaligned_party_is_refused(small: Any) -> None:
    server, parties = small
    short = PartyData(parties[0].X_overlap[:-1], parties[0].X_test, parties[0].X_unaligned)
    with pytest.raises(InputDataError):
        oneshot.run_local(server, [short, parties[1]], config=oneshot.OneShotConfig(**FAST))


class _Rewrite:
    """A channel proxy that rewrites the messages its party sends."""

    def __init__(self, ch: Any, fn: Any) -> None:
        self._ch, self._fn = ch, fn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ch, name)

    def send(self, msg: Any, **kw: Any) -> None:
        self._ch.send(self._fn(msg), **kw)


def _hostile_party(small: Any, fn: Any) -> Any:
    from vflcrypto.runtime.steps import drive

    _, parties = small

    def task(channels: Any) -> Any:
        role = oneshot.PartyRole(parties[0], index=0, config=oneshot.OneShotConfig(**FAST))
        return drive(role, {k: _Rewrite(v, fn) for k, v in channels.items()})

    return task


@pytest.mark.parametrize(("fault", "match"), [
    ("nan", "NaN"), ("shape", "shape"), ("dtype", "float64"), ("rows", "shape")])
def test_broken_representations_are_refused(small: Any, fault: str, match: str) -> None:
    def break_(msg: Any) -> Any:
        if not isinstance(msg, oneshot.Representation):
            return msg
        H = msg.H.copy()
        if fault == "nan":
            H[3, 2] = np.nan
        elif fault == "shape":
            H = H[:, :-1].copy()
        elif fault == "dtype":
            H = H.astype(np.float64)
        else:
            H = np.concatenate([H, H[:1]])
        return oneshot.Representation(H)

    server, parties = small
    with pytest.raises(ProtocolError, match=match):
        oneshot.run_local(server, parties, config=oneshot.OneShotConfig(**FAST), timeout=20,
                          overrides={"party-0": _hostile_party(small, break_)})


def test_oversized_representation_is_refused(small: Any) -> None:
    """Wider than the announced d (and than MAX_DIM): refused on receipt, before any use."""

    def huge(msg: Any) -> Any:
        return oneshot.Representation(np.zeros((60, 5000), np.float32)) if isinstance(msg, oneshot.Representation) \
            else msg

    server, parties = small
    with pytest.raises(ProtocolError, match=r"shape \(60, 5000\), expected \(60, 16\)"):
        oneshot.run_local(server, parties, config=oneshot.OneShotConfig(**FAST), timeout=20,
                          overrides={"party-0": _hostile_party(small, huge)})


@pytest.mark.parametrize("fault", ["classes", "gradient_shape", "gradient_nan"])
def test_a_broken_download_is_refused_by_the_party(small: Any, fault: str) -> None:
    _, parties = small
    role = oneshot.PartyRole(parties[0], index=0, config=oneshot.OneShotConfig(**FAST))
    role.start()
    role.on_setup(oneshot.Setup(60, 360, 16, "gradient", 0))
    G = np.zeros((60, 16), np.float32)
    if fault == "classes":
        msg = oneshot.Gradient(G, 61)  # more classes than rows
    elif fault == "gradient_shape":
        msg = oneshot.Gradient(G[:, :3].copy(), 10)
    else:
        G[0, 0] = np.inf
        msg = oneshot.Gradient(G, 10)
    with pytest.raises(ProtocolError):
        role.on_gradient(msg)
    with pytest.raises(ProtocolError, match="malformed partition"):
        role.on_partition(oneshot.Partition(np.full(60, 12, np.int64), 10))


def test_a_stalled_party_times_out(small: Any) -> None:
    server, parties = small
    release = threading.Event()

    def stall(channels: Any) -> None:
        channels["server"].recv(oneshot.Setup, timeout=10)
        release.wait(3)

    with pytest.raises(PeerTimeoutError):
        oneshot.run_local(server, parties, config=oneshot.OneShotConfig(**FAST), timeout=0.5,
                          overrides={"party-1": stall})
    release.set()


# --------------------------------------------------------------------------- split learning and few-shot VFL


def test_split_learning_round_trips_every_batch_and_learns_above_chance(small: Any) -> None:
    server, parties = small
    cfg = split.SplitConfig(epochs=2, batch_size=32)
    run = split.run_local(server, parties, config=cfg)
    counts = _kinds_by_party(run.transcript)
    for party in ("party-0", "party-1"):
        assert counts[party][("up", "split.representation")] == 4  # 2 epochs x 2 batches of 60 rows
        assert counts[party][("down", "split.gradient")] == 4
    assert run.parties[0].steps == 4
    # 360 test rows of 10 digits: chance 0.10 (standard deviation 0.016); measured 0.27 after 2 epochs
    assert run.test_accuracy == pytest.approx(np.mean(run.server.test_proba.argmax(1) == server.y_test))
    assert run.test_accuracy is not None and run.test_accuracy > 0.18


def test_split_party_state_survives_the_wire_with_its_optimizer(small: Any) -> None:
    """What a Flower ClientApp does between messages: the extractor and Adam's moments persist."""
    _, parties = small
    role = split.PartyRole(parties[0], index=0, config=split.SplitConfig(epochs=1, batch_size=32))
    role.start()
    nxt = role.on_setup(split.Setup(60, 360, 16, 1, 32, 0))
    H = nxt.sends[0][1].H
    role.on_gradient(split.BatchGradient(0, 0, np.ones_like(H)))
    fresh = split.PartyRole(parties[0], index=0, config=split.SplitConfig(epochs=1, batch_size=32))
    fresh.load_state(role.dump_state())
    for a, b in zip(vnn.module_arrays(fresh.f), vnn.module_arrays(role.f), strict=True):
        np.testing.assert_array_equal(a, b)
    assert len(vnn.optimizer_arrays(fresh.opt)) == len(vnn.optimizer_arrays(role.opt)) > 0
    with pytest.raises(ProtocolError, match="expected 0/1"):
        fresh.on_gradient(split.BatchGradient(0, 0, np.ones_like(H)))  # a replayed batch


@pytest.mark.parametrize("mode", ["server", "client"])
def test_few_shot_sends_unaligned_representations_and_learns_above_chance(small: Any, mode: str) -> None:
    server, parties = small
    tap = AuditTap()
    run = fewshot.run_local(server, parties, config=fewshot.FewShotConfig(mode=mode, gate=0.5, **FAST), tap=tap)
    (hu,) = tap.received("server", "fewshot.unaligned_representation")[:1]
    assert hu.H.shape == (len(parties[0].X_unaligned), 16)
    kinds = {e.kind for e in run.transcript.sent()}
    assert ("fewshot.pseudo_labels" in kinds) == (mode == "client")
    # 360 test rows of 10 digits: chance 0.10 (standard deviation 0.016); measured 0.33 in both modes
    assert run.test_accuracy == pytest.approx(np.mean(run.server.test_proba.argmax(1) == server.y_test))
    assert run.test_accuracy is not None and run.test_accuracy > 0.2


def test_pseudo_labels_naming_unknown_rows_are_refused(small: Any) -> None:
    _, parties = small
    role = fewshot.PartyRole(parties[0], index=0, config=fewshot.FewShotConfig(mode="client", **FAST))
    role.start()
    role.on_setup(fewshot.Setup(60, 360, 16, "gradient", 0, mode="client"))
    role.fs.n_classes = 10
    bad = fewshot.PseudoLabels(np.array([10**6]), np.array([1]), np.array([0.9], np.float32))
    with pytest.raises(ProtocolError, match="unknown rows"):
        role.on_pseudo_labels(bad)


# --------------------------------------------------------------------------- declarations


def test_every_message_is_declared_and_the_audit_sees_each(small: Any) -> None:
    server, parties = small
    seen: set[str] = set()
    runs = [oneshot.run_local(server, parties, config=oneshot.OneShotConfig(**FAST)),
            oneshot.run_local(server, parties, config=oneshot.OneShotConfig(variant="partition", **FAST)),
            fewshot.run_local(server, parties, config=fewshot.FewShotConfig(mode="client", gate=0.5, **FAST)),
            fewshot.run_local(server, parties, config=fewshot.FewShotConfig(variant="partition", **FAST)),
            split.run_local(server, parties, config=split.SplitConfig(epochs=1)),
            split.run_local(server, parties, config=split.SplitConfig(epochs=1, label_dp=1.0)),  # split.dp_gradient
            split.run_local(*binary_digits_example(60, seed=1),  # Marvell (binary labels): split.marvell_gradient
                            config=split.SplitConfig(epochs=1, marvell_bound=1.0)),
            # the label defences' kinds: D1 as dp_gradient and dp_partition
            oneshot.run_local(server, parties, config=oneshot.OneShotConfig(label_dp=1.0, **FAST)),
            oneshot.run_local(server, parties, config=oneshot.OneShotConfig(variant="partition", grad_noise=4.0,
                                                                           **FAST)),
            fewshot.run_local(server, parties, config=fewshot.FewShotConfig(grad_noise=4.0, **FAST)),
            fewshot.run_local(server, parties, config=fewshot.FewShotConfig(variant="partition", label_dp=1.0,
                                                                           **FAST)),
            # the embedding defences' kinds: every representation as its dp_ kind (few-shot: with the refit)
            split.run_local(server, parties, config=split.SplitConfig(epochs=1, embed_noise=1.0)),
            oneshot.run_local(server, parties, config=oneshot.OneShotConfig(embed_noise=1.0, **FAST)),
            fewshot.run_local(server, parties, config=fewshot.FewShotConfig(mode="client", gate=0.5, embed_noise=1.0,
                                                                           **FAST))]
    for run in runs:
        report = audit(run.transcript)
        assert not report.undeclared
        seen |= {row.kind for row in report.rows}
    for proto in ("oneshot", "fewshot", "split"):
        assert {d.kind for d in declarations(proto)} <= seen, proto
