"""Horizontal FL over secure aggregation: FedAvg, FedProx (mu = 0 is FedAvg), SCAFFOLD (option II)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from vflcrypto.protocols import hfl
from vflcrypto.protocols.hfl.math import local_train, softmax_gradient

from vflcrypto.cli import main
from vflcrypto.errors import ProtocolError


@pytest.fixture(scope="module")
def clients() -> list[hfl.ClientData]:
    return hfl.digits_clients(4, seed=1, skew=0.6)


def test_softmax_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(20, 3)), rng.integers(0, 4, 20)
    W = rng.normal(size=(4, 4))

    def loss(W: np.ndarray) -> float:
        Z = X @ W[:-1] + W[-1]
        Z = Z - Z.max(1, keepdims=True)
        return float(np.mean(np.log(np.exp(Z).sum(1)) - Z[np.arange(20), y]))

    g, eps = softmax_gradient(W, X, y), 1e-6
    num = np.zeros_like(W)
    for idx in np.ndindex(W.shape):
        d = np.zeros_like(W)
        d[idx] = eps
        num[idx] = (loss(W + d) - loss(W - d)) / (2 * eps)
    np.testing.assert_allclose(g, num, atol=1e-7)


def test_secure_and_plain_give_the_same_model_bit_for_bit(clients: list[hfl.ClientData]) -> None:
    for alg in hfl.ALGORITHMS:
        s = hfl.run_local(clients, 10, config=hfl.HFLConfig(algorithm=alg, rounds=3))
        p = hfl.run_local(clients, 10, config=hfl.HFLConfig(algorithm=alg, rounds=3, secure=False))
        np.testing.assert_array_equal(s.result.w, p.result.w)
        assert "secagg.masked_input" in {e.kind for e in s.transcript.sent()}
        assert "secagg.masked_input" not in {e.kind for e in p.transcript.sent()}


def test_fedprox_with_mu_zero_is_fedavg(clients: list[hfl.ClientData]) -> None:
    a = hfl.run_local(clients, 10, config=hfl.HFLConfig(algorithm="fedavg", rounds=3))
    b = hfl.run_local(clients, 10, config=hfl.HFLConfig(algorithm="fedprox", mu=0.0, rounds=3))
    np.testing.assert_array_equal(a.result.w, b.result.w)
    c = hfl.run_local(clients, 10, config=hfl.HFLConfig(algorithm="fedprox", mu=1.0, rounds=3))
    assert not np.array_equal(a.result.w, c.result.w)


def test_scaffold_on_identical_clients_makes_no_correction() -> None:
    one = hfl.digits_clients(2, seed=3)[0]
    same = [one, one, one]
    full = {"rounds": 4, "batch_size": None}  # full batches: the clients are exactly identical
    a = hfl.run_local(same, 10, config=hfl.HFLConfig(algorithm="fedavg", **full))
    s = hfl.run_local(same, 10, config=hfl.HFLConfig(algorithm="scaffold", **full))
    np.testing.assert_allclose(s.result.w, a.result.w, atol=1e-6)  # c - c_i = 0 every round


def test_scaffold_option_two_control_variate() -> None:
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(30, 2)), rng.integers(0, 3, 30)
    cfg = hfl.HFLConfig(algorithm="scaffold", local_steps=5, lr=0.2, batch_size=None)
    w = rng.normal(size=9)
    c, ci = rng.normal(size=9) * 0.1, rng.normal(size=9) * 0.1
    wi, ci_new = local_train(w, X, y, cfg, 3, c=c, c_i=ci, seed=0)
    np.testing.assert_allclose(ci_new, ci - c + (w - wi) / (5 * 0.2))


def test_a_client_dropping_mid_round_is_left_out(clients: list[hfl.ClientData]) -> None:
    run = hfl.run_local(clients, 10, config=hfl.HFLConfig(rounds=3), vanish={"client-1": (1, "masked")}, timeout=5)
    assert [len(s) for s in run.result.survivors] == [4, 3, 3]
    assert run.test_accuracy is not None and run.test_accuracy > 0.5


def test_a_client_refuses_a_model_with_other_parameters(clients: list[hfl.ClientData]) -> None:
    import vflcrypto.protocols.hfl.roles as roles

    honest = roles.ServerRole

    class Other(honest):  # type: ignore[misc, valid-type]
        def __init__(self, **kw: object) -> None:
            super().__init__(**{**kw, "config": hfl.HFLConfig(lr=0.5)})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(roles, "ServerRole", Other)
        with pytest.raises(ProtocolError, match="parameters differ"):
            hfl.run_local(clients, 10, config=hfl.HFLConfig(rounds=2), timeout=5)


def test_cli_on_the_digits_and_on_client_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "fedavg", "--dataset", "digits", "--clients", "4", "--rounds", "3", "--drop", "1",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"test_accuracy", "bytes_sent", "seconds", "survivors"} and out["survivors"] == [4, 3, 3]
    paths = []
    for k, c in enumerate(hfl.digits_clients(3, seed=0)):
        p = tmp_path / f"c{k}.csv"
        rows = [",".join(f"{v:.4f}" for v in x) + f",{int(t)}" for x, t in zip(c.X, c.y, strict=True)]
        p.write_text(",".join(f"p{j}" for j in range(64)) + ",digit\n" + "\n".join(rows) + "\n")
        paths.append(str(p))
    assert main(["train", "scaffold", *[a for p in paths for a in ("--client", p)], "--label", "digit",
                 "--rounds", "3", "--plain", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "plain" and out["test_accuracy"] > 0.5
