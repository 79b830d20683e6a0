"""SecureBoost's label defences (``protocols/secureboost/defence.py``): rounds on the active party's features alone
and Gaussian noise on the G sums (label DP), their plan checks, accounting, audit check and frontier.

Tolerances of the frontier test (the mean of 6 runs at epsilon = 1, on the bundled bank/shop data; 200 single runs
measured: first-split leak AUC 0.538 on average, standard deviation 0.062; majority vote 0.677 (sd 0.041) against
a 0.677 baseline; ID2Graph 0.649 (sd 0.069) against 0.686): the first-split leak within 0.15 of chance (0.5), the
majority vote within 0.07 and ID2Graph within 0.08 of the majority class's share (each about 4 standard deviations
of a 6-run mean above its average), while the undefended run is at least 0.2, 0.1 and 0.05 above the baselines.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from vflcrypto.protocols import secureboost as sb
from vflcrypto.protocols.secureboost import audit as sb_audit
from vflcrypto.protocols.secureboost import defence, frontier
from vflcrypto.protocols.secureboost.messages import DpLevelRequest
from vflcrypto.protocols.secureboost.passive import _plan_differences

from vflcrypto.cli import main
from vflcrypto.data.files import write_csv_atomic
from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.privacy import gaussian_epsilon
from vflcrypto.privacy import mechanisms as dpm
from vflcrypto.runtime.channel import AuditTap

PARAMS = sb.BoostParams(n_trees=3, max_depth=2, max_bin=16)


@pytest.mark.parametrize("change", [
    {"active_only_trees": 3}, {"first_tree_active_only": True, "n_trees": 1}, {"active_only_trees": -1},
    {"dp_epsilon": 0.0}, {"dp_epsilon": 1.0, "dp_clip": 0.0}, {"dp_epsilon": 1.0, "dp_delta": 1.0},
    {"dp_epsilon": 1.0, "objective": "multiclass"}, {"dp_epsilon": 1.0, "objective": "regression"},
    {"dp_epsilon": 1.0, "top_rate": 0.2, "other_rate": 0.1},
    {"dp_epsilon": 1.0, "validation_fraction": 0.2, "early_stopping_rounds": 2},
])
def test_the_plan_refuses_defences_it_cannot_keep(change: dict[str, object]) -> None:
    with pytest.raises(InputDataError):
        dataclasses.replace(PARAMS, **change).validate()  # type: ignore[arg-type]


def test_first_tree_active_only_sends_the_passive_parties_nothing_of_it(small_paillier_keys) -> None:
    Xa, y, _, Xp, _ = sb.example(200)
    tap = AuditTap()
    params = dataclasses.replace(PARAMS, first_tree_active_only=True)
    run = sb.run_local(Xa, y, [Xp], params=params, keys=small_paillier_keys, allow_insecure=True, tap=tap)
    assert [m.tree for m in tap.received("passive-0", sb.EncryptedGradients)] == [1, 2]
    levels = [m for m in tap.received("passive-0", sb.LevelRequest) if m.tree == 0]
    assert len(levels) == 1 and levels[0].done and not len(levels[0].node_of_row)  # only the tree's end
    assert not [m for m in tap.received("passive-0", sb.SplitRequest) if m.tree == 0]
    assert not tap.received("passive-0", DpLevelRequest)
    m = run.active.model
    assert not (m.kind[m.offsets[0]:m.offsets[1]] == 2).any() and (m.kind[m.offsets[0]:m.offsets[1]] == 1).any()
    assert (m.kind == 2).sum() == len(run.passive["passive-0"].model.record_ids) > 0
    assert not tap.held("passive-0", "instance_partition")[0].any()  # its view of tree 0: one cell
    pred = sb.predict_local(m, Xa, [(run.passive["passive-0"].model, Xp)])
    assert np.allclose(pred, run.active.train_predictions(), atol=1e-12)
    assert m.privacy["active-only"]["rounds"] == 1 == run.passive["passive-0"].model.privacy["active-only"]["rounds"]


def _setup(params: sb.BoostParams, n: int) -> sb.Setup:
    return sb.Setup("m", n, b"", True, None, params)


def test_a_passive_party_refuses_the_instance_space_of_a_round_the_plan_keeps_from_it() -> None:
    X = np.random.default_rng(0).normal(size=(20, 2))  # example data
    role = sb.PassiveRole(X)
    nxt = role.on_setup(_setup(dataclasses.replace(PARAMS, active_only_trees=2), 20))
    assert nxt.wait is not None and nxt.wait.kind is sb.LevelRequest  # no gradients of tree 0 expected
    with pytest.raises(ProtocolError, match="features alone"):
        role.on_level(sb.LevelRequest(0, 0, False, np.zeros(20, np.int32), np.zeros(1, np.int32),
                                      np.zeros((0, 3), np.int32)))
    dp = sb.PassiveRole(X)
    dp.on_setup(_setup(dataclasses.replace(PARAMS, dp_epsilon=1.0), 20))
    assert dp.on_gradients(sb.PlainGradients(0, 8, np.packbits(np.ones(20, bool)), np.zeros((20, 1), np.int64),
                                             np.ones((20, 1), np.int64))).wait.kind is DpLevelRequest
    # a network party run with other flags names the defence flags that differ
    differ = _plan_differences((PARAMS, True, False), _setup(dataclasses.replace(PARAMS, dp_epsilon=2.0,
                                                                                 first_tree_active_only=True), 20))
    assert differ == ["first-tree-active-only True (here False)", "dp-epsilon 2.0 (here None)"]


def test_label_dp_is_accounted_by_the_library_and_checked_against_the_true_sums(tmp_path: Path) -> None:
    Xa, y, _, Xp, _ = sb.example(300)
    tap = AuditTap()
    params = dataclasses.replace(PARAMS, dp_epsilon=2.0)
    run = sb.run_local(Xa, y, [Xp], params=params, plaintext=True, tap=tap)
    g = run.active.model.privacy["hist-gauss"]
    z, steps = g["params"]["noise_multiplier"], g["params"]["releases"]
    assert steps == 1 + 3 * (2 + 1) == defence.releases(params)
    assert g["epsilon"] == gaussian_epsilon(z, steps, 1.0, 1e-5) and 2.0 - 1e-3 < g["epsilon"] <= 2.0
    assert run.passive["passive-0"].model.privacy == run.active.model.privacy
    assert tap.received("passive-0", DpLevelRequest) and not tap.received("passive-0", sb.LevelRequest)
    found, = sb_audit.dp_findings(tap)
    assert found.measured and not found.flagged and abs(found.value) < 0.3, found  # mean square ~ 1
    run.active.model.save(tmp_path / "a.npz")
    assert sb.ActiveModel.load(tmp_path / "a.npz").privacy == run.active.model.privacy


def test_the_check_flags_a_run_whose_noise_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dpm, "gaussian_noise", lambda shape, std: np.zeros(shape))
    Xa, y, _, Xp, _ = sb.example(300)
    tap = AuditTap()
    sb.run_local(Xa, y, [Xp], params=dataclasses.replace(PARAMS, dp_epsilon=2.0), plaintext=True, tap=tap)
    found, = sb_audit.dp_findings(tap)
    assert found.flagged and found.value > 0.99


def test_label_attacks_fall_to_their_baselines_at_the_tightest_budget() -> None:
    data = frontier.frontier_data()
    base = sb.BoostParams(**frontier.FRONTIER_PARAMS)
    none = frontier._point(data, base, "hist-gauss", None, 1)
    tight = frontier._point(data, dataclasses.replace(base, dp_epsilon=1.0), "hist-gauss", 1.0, 6)
    b = tight.baselines
    assert none.scores["first_split"] > b["first_split"] + 0.2
    assert none.scores["majority_vote"] > b["majority_vote"] + 0.1
    assert none.scores["id2graph"] > b["id2graph"] + 0.05
    assert tight.scores["first_split"] <= b["first_split"] + 0.15, tight
    assert tight.scores["majority_vote"] <= b["majority_vote"] + 0.07, tight
    assert tight.scores["id2graph"] <= b["id2graph"] + 0.08, tight
    assert tight.epsilon is not None and 1.0 - 1e-3 < tight.epsilon <= 1.0 and tight.delta == 1e-5
    assert 0.6 < tight.utility["test_auc"] < none.utility["test_auc"]  # cost: AUC 0.76 on average, not 0.905


def test_the_active_only_frontier_attacks_the_first_tree_the_passive_party_sees() -> None:
    f = sb.SPEC.frontier("active-only", [2], 1)  # type: ignore[misc]
    _, two = f.points
    assert two.epsilon is None and two.params == {"rounds": 2} and two.accuracy is not None
    assert all(v == v for v in two.scores.values())  # measured on tree 2
    assert set(f.floors) == set(f.attacks) and "label-free" in f.to_text()
    assert json.loads(json.dumps(f.to_dict()))["points"][1]["utility"]["test_auc"] == two.utility["test_auc"]
    assert "test auc" in f.to_text() and f.budget_name != "epsilon"
    with pytest.raises(InputDataError):
        sb.SPEC.frontier("active-only", [1.5], 1)  # type: ignore[misc]


def test_the_command_prints_each_partys_accounting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Xa, y, _, Xp, _ = sb.example(150)
    active, passive = tmp_path / "a.csv", tmp_path / "p.csv"
    write_csv_atomic(active, ["id", "y", "a0", "a1", "a2"], [[i, int(y[i]), *Xa[i]] for i in range(150)])
    write_csv_atomic(passive, ["id", "p0", "p1", "p2", "p3"], [[i, *Xp[i]] for i in range(150)])
    assert main(["train", "secureboost", "--active", str(active), "--passive", str(passive), "--id-column", "id",
                 "--label", "y", "--trees", "2", "--depth", "2", "--aligned", "--plaintext", "--dp-epsilon", "4",
                 "--active-only-trees", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["privacy"]) == {"active", "passive-0"}
    assert 4 - 1e-3 < out["privacy"]["passive-0"]["hist-gauss"]["epsilon"] <= 4
    assert out["privacy"]["active"]["active-only"]["rounds"] == 1
