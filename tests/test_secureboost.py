"""SecureBoost: parity (encrypted = plaintext = centralized reference), quality, hostile peers, audit."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import tamper_sends
from vflcrypto.protocols import secureboost as sb

from vflcrypto.audit.ledger import audit
from vflcrypto.data.tables import read_party_csv
from vflcrypto.errors import (
    ConfigurationError,
    InputDataError,
    KeyMismatchError,
    PeerTimeoutError,
    ProtocolError,
)
from vflcrypto.he.paillier import PaillierVector, generate_keypair
from vflcrypto.ml.metrics import rmse, roc_auc

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
FATE = SHARED / "fate"
TIMEOUT = 20.0


# --------------------------------------------------------------------------- data


def _data(n: int = 160, seed: int = 3, objective: str = "binary", k: int = 2):
    rng = np.random.default_rng(seed)
    Xa = rng.normal(size=(n, 2))
    Xa[:, 1] = np.round(Xa[:, 1])  # few distinct values
    Xps = [rng.normal(size=(n, 3)) for _ in range(k)]
    z = Xa[:, 0] + 1.5 * Xps[0][:, 1] - (Xps[-1][:, 2] > 0.5) + 0.3 * rng.normal(size=n)
    y = (z > 0).astype(float) if objective == "binary" else 3 * z + 10
    return Xa, y, Xps


def _load_fate(name: str):
    a = read_party_csv(FATE / f"{name}_hetero_guest.csv", "id", label="y")
    p = read_party_csv(FATE / f"{name}_hetero_host.csv", "id")
    pos = {k: i for i, k in enumerate(p.ids)}
    return a.X, a.label, p.X[[pos[k] for k in a.ids]]


def _trees(run: sb.LocalRun) -> list[list[tuple]]:
    """Per tree, BFS list of (kind, owner, feature, bin, leaf value) with passive lookups resolved."""
    m = run.active.model
    names = list(m.passive_parties)
    out = []
    for t in range(m.n_trees):
        nodes = []
        for g in range(int(m.offsets[t]), int(m.offsets[t + 1])):
            kind = int(m.kind[g])
            if kind == 0:
                val = m.value[g]
                nodes.append((0, -1, -1, -1, float(val[0]) if len(val) == 1 else tuple(val.tolist())))
            elif kind == 1:
                nodes.append((1, 0, int(m.feature[g]), int(m.bin[g]), 0.0))
            else:
                p = int(m.party[g])
                pm = run.passive[names[p]].model
                j = int(np.flatnonzero(pm.record_ids == m.record[g])[0])
                nodes.append((2, p + 1, int(pm.feature[j]), int(pm.bin[j]), 0.0))
        out.append(nodes)
    return out


def _assert_same_trees(a: list[list[tuple]], b: list[list[tuple]], tol: float = 1e-9) -> None:
    assert len(a) == len(b)
    for ta, tb in zip(a, b, strict=True):
        assert [n[:4] for n in ta] == [n[:4] for n in tb]
        va = [np.ravel(n[4]) if n[0] == 0 else np.zeros(0) for n in ta]
        vb = [np.ravel(n[4]) if n[0] == 0 else np.zeros(0) for n in tb]
        assert all(a.shape == b.shape for a, b in zip(va, vb, strict=True))
        assert np.allclose(np.concatenate(va), np.concatenate(vb), rtol=0, atol=tol)


# --------------------------------------------------------------------------- centralized references


def reference_train(blocks: list[np.ndarray], y: np.ndarray, params: sb.BoostParams):
    """Gradient boosting on the joined table, written from Chen & Guestrin (KDD 2016) alone.

    Independent of the protocol's code: its own logistic/squared-error derivatives, base
    score, split gain (eq. 7), leaf weight (eq. 5) and candidate filter, in float64, with
    recursion over explicit candidate lists (no levels, no shuffling, no subtraction, no
    fixed point, no packing). The only shared input is the bins (``sb.bin_features``):
    "the same bins" is the specification, and binning is tested on its own above.
    Ties: highest gain, then lowest owner, feature, bin (the data below has no exact ties).
    """
    n, lam = len(y), params.reg_lambda
    binned = [sb.bin_features(X, params.max_bin)[0] for X in blocks]
    if params.objective == "binary":
        rate = np.mean(y)
        margin = np.full(n, np.log(rate / (1 - rate)))
    else:
        margin = np.full(n, float(np.mean(y)))
    trees = []
    for _ in range(params.n_trees):
        if params.objective == "binary":
            prob = 1 / (1 + np.exp(-margin))
            g, h = prob - y, prob * (1 - prob)
        else:
            g, h = margin - y, np.ones(n)
        nodes: list[list] = []
        queue = [(np.arange(n), 0)]
        leaves = []
        while queue:
            rows, depth = queue.pop(0)
            G, H = g[rows].sum(), h[rows].sum()
            best = None
            for owner, B in enumerate(binned if depth < params.max_depth else []):
                for f in range(B.shape[1]):
                    for b in np.unique(B[rows, f])[:-1]:  # every threshold that splits the node
                        left = B[rows, f] <= b
                        GL, HL = g[rows][left].sum(), h[rows][left].sum()
                        if min(HL, H - HL) < params.min_child_weight:
                            continue
                        gain = 0.5 * (GL**2 / (HL + lam) + (G - GL) ** 2 / (H - HL + lam)
                                      - G**2 / (H + lam)) - params.gamma
                        if gain > 1e-9 and (best is None or gain > best[0]):
                            best = (gain, owner, f, int(b), left)
            if best is None:
                nodes.append([0, -1, -1, -1, 0.0])
                leaves.append((len(nodes) - 1, rows, G, H))
            else:
                _, owner, f, b, left = best
                nodes.append([1 if owner == 0 else 2, owner, f, b, 0.0])
                queue += [(rows[left], depth + 1), (rows[~left], depth + 1)]
        for idx, rows, G, H in leaves:
            nodes[idx][4] = -G / (H + lam)
            margin[rows] += params.learning_rate * nodes[idx][4]
        trees.append([tuple(nd) for nd in nodes])
    return trees, margin


def xgboost_exact(blocks: list[np.ndarray], y: np.ndarray, params: sb.BoostParams):
    """XGBoost's exact greedy split finding (``tree_method="exact"``) on the same bins.

    The joined bin-index matrix is XGBoost's input, so its thresholds (midpoints between
    the bin indices present in a node) are our "bin <= b" splits with b the largest bin
    present below the threshold. Returns per tree the BFS list of ``(global feature, b)``
    or ``None`` for a leaf, and the training margins.
    """
    import json

    xgb = pytest.importorskip("xgboost")
    bins = np.column_stack([sb.bin_features(X, params.max_bin)[0] for X in blocks]).astype(np.float64)
    kw = {"n_estimators": params.n_trees, "max_depth": params.max_depth, "learning_rate": params.learning_rate,
          "reg_lambda": params.reg_lambda, "gamma": params.gamma, "min_child_weight": params.min_child_weight,
          "tree_method": "exact", "n_jobs": 1}
    if params.objective == "binary":
        model = xgb.XGBClassifier(base_score=float(np.mean(y)), **kw).fit(bins, y)
    else:
        model = xgb.XGBRegressor(base_score=float(np.mean(y)), **kw).fit(bins, y)
    trees = []
    for dump in model.get_booster().get_dump(dump_format="json"):
        level, out = [(json.loads(dump), np.arange(len(y)))], []
        while level:
            nxt = []
            for node, rows in level:
                if "leaf" in node:
                    out.append(None)
                    continue
                f, cut = int(node["split"][1:]), node["split_condition"]
                col = bins[rows, f]
                out.append((f, int(col[col < cut].max())))
                kids = {c["nodeid"]: c for c in node["children"]}
                nxt += [(kids[node["yes"]], rows[col < cut]), (kids[node["no"]], rows[col >= cut])]
            level = nxt
        trees.append(out)
    return trees, model.predict(bins, output_margin=True)


# --------------------------------------------------------------------------- math


def test_binning_semantics() -> None:
    x = np.array([5.0, 1.0, 3.0, 3.0, np.nan, 9.0, 1.0])
    splits, bins = sb.bin_feature(x, 32)
    assert splits.tolist() == [1.0, 3.0, 5.0]
    for b, s in enumerate(splits):  # left at bin b  <=>  x <= s[b]  (NaN always right)
        assert np.array_equal(bins <= b, np.nan_to_num(x, nan=np.inf) <= s)
    splits, bins = sb.bin_feature(np.full(10, 2.0), 32)  # constant: no split at all
    assert len(splits) == 0 and not bins.any()
    rng = np.random.default_rng(0)
    splits, bins = sb.bin_feature(rng.normal(size=1000), 32)
    assert len(splits) <= 31 and np.bincount(bins).max() < 60


def test_unpack_rejects_out_of_range() -> None:
    spec = sb.tree.packing_spec(100, 24, 2)
    with pytest.raises(ProtocolError):
        sb.tree.unpack_candidates([1 << (2 * spec.slot_bits)], spec)  # bits above the slots
    with pytest.raises(ProtocolError):
        sb.tree.unpack_candidates([5], spec)  # zero rows


# --------------------------------------------------------------------------- parity


@pytest.mark.parametrize("objective", ["binary", "regression"])
def test_plaintext_matches_centralized_reference(objective: str) -> None:
    Xa, y, Xps = _data(objective=objective)
    params = sb.BoostParams(objective=objective, n_trees=3, max_depth=3, max_bin=8)
    run = sb.run_local(Xa, y, Xps, params=params, plaintext=True, timeout=TIMEOUT)
    ref_trees, ref_margin = reference_train([Xa, *Xps], y, params)
    # same splits; leaves differ only by the protocol's fixed-point gradients (<= 2^-24 each)
    _assert_same_trees(_trees(run), ref_trees, tol=1e-5)
    assert np.allclose(run.active.train_margin, ref_margin, atol=1e-5)
    owners = {n[1] for t in ref_trees for n in t if n[0]}
    assert {0, 1, 2} <= owners  # the data makes every party win splits


@pytest.mark.parametrize("objective", ["binary", "regression"])
def test_plaintext_matches_xgboost_exact_on_the_same_bins(objective: str) -> None:
    Xa, y, Xps = _data(objective=objective)
    params = sb.BoostParams(objective=objective, n_trees=3, max_depth=3, max_bin=8)
    run = sb.run_local(Xa, y, Xps, params=params, plaintext=True, timeout=TIMEOUT)
    xgb_trees, xgb_margin = xgboost_exact([Xa, *Xps], y, params)
    offset = np.cumsum([0, Xa.shape[1], *[X.shape[1] for X in Xps]])
    ours = [[None if kind == 0 else (int(offset[owner]) + f, b) for kind, owner, f, b, _ in tree]
            for tree in _trees(run)]
    assert ours == xgb_trees
    assert np.allclose(run.active.train_margin, xgb_margin, atol=1e-5)  # XGBoost works in float32


def test_encrypted_matches_plaintext_two_passive(small_paillier_keys) -> None:
    Xa, y, Xps = _data(n=120)
    params = sb.BoostParams(n_trees=2, max_depth=3, max_bin=8)
    enc = sb.run_local(Xa, y, Xps, params=params, keys=small_paillier_keys, allow_insecure=True, timeout=TIMEOUT)
    plain = sb.run_local(Xa, y, Xps, params=params, plaintext=True, timeout=TIMEOUT)
    _assert_same_trees(_trees(enc), _trees(plain))
    assert np.allclose(enc.active.train_margin, plain.active.train_margin, atol=1e-9)


def test_ties_are_resolved_independently_of_the_shuffle(small_paillier_keys) -> None:
    """Duplicate passive features and an active copy: the active copy wins, and among the
    passive party's identical features always the first (never shuffle-dependent)."""
    rng = np.random.default_rng(5)
    n = 100
    x = rng.normal(size=n)
    y = (x + 0.3 * rng.normal(size=n) > 0).astype(float)
    Xp = np.column_stack([x, x, rng.normal(size=n)])
    Xa = rng.normal(size=(n, 1))
    params = sb.BoostParams(n_trees=2, max_depth=2, max_bin=8)
    runs = [sb.run_local(Xa, y, [Xp], params=params, keys=small_paillier_keys, allow_insecure=True, timeout=TIMEOUT)
            for _ in range(2)]
    runs.append(sb.run_local(Xa, y, [Xp], params=params, plaintext=True, timeout=TIMEOUT))
    trees = [_trees(r) for r in runs]
    assert trees[0] == trees[1] == trees[2]
    assert all(nd[2] != 1 for t in trees[0] for nd in t if nd[0] == 2)
    both = sb.run_local(np.column_stack([Xa, x]), y, [Xp], params=params, plaintext=True)
    root = _trees(both)[0][0]
    assert root[:3] == (1, 0, 1)  # equal gain: the active party (owner 0) wins


@pytest.mark.shared_data
@pytest.mark.skipif(not FATE.is_dir(), reason="../shared/data absent")
def test_encrypted_breast_1024_matches_plaintext(paillier_keys) -> None:
    Xa, y, Xp = _load_fate("breast")
    params = sb.BoostParams(n_trees=2, max_depth=3, max_bin=32)
    enc = sb.run_local(Xa, y, [Xp], params=params, keys=paillier_keys, allow_insecure=True, timeout=60)
    plain = sb.run_local(Xa, y, [Xp], params=params, plaintext=True)
    _assert_same_trees(_trees(enc), _trees(plain))
    assert roc_auc(y, enc.active.train_predictions()) > 0.98


# --------------------------------------------------------------------------- quality


@pytest.mark.shared_data
@pytest.mark.skipif(not FATE.is_dir(), reason="../shared/data absent")
@pytest.mark.parametrize(("name", "objective", "trees", "bound"), [
    ("breast", "binary", 10, 0.995),
    ("default_credit", "binary", 30, 0.79),
    ("student", "regression", 50, 2.7),
])
def test_quality_on_fate_data(name: str, objective: str, trees: int, bound: float) -> None:
    Xa, y, Xp = _load_fate(name)
    params = sb.BoostParams(objective=objective, n_trees=trees, max_depth=3, learning_rate=0.3,
                            max_bin=32)
    run = sb.run_local(Xa, y, [Xp], params=params, plaintext=True, timeout=60)
    pred = run.active.train_predictions()
    if objective == "binary":
        assert roc_auc(y, pred) >= bound
    else:
        assert rmse(y, pred) <= bound


@pytest.mark.shared_data
@pytest.mark.skipif(not FATE.is_dir(), reason="../shared/data absent")
@pytest.mark.parametrize(("name", "objective", "trees"), [("breast", "binary", 10),
                                                          ("student", "regression", 50)])
def test_close_to_xgboost(name: str, objective: str, trees: int) -> None:
    xgb = pytest.importorskip("xgboost")
    Xa, y, Xp = _load_fate(name)
    X = np.column_stack([Xa, Xp])
    common = {"n_estimators": trees, "max_depth": 3, "learning_rate": 0.3, "max_bin": 32,
              "tree_method": "hist", "reg_lambda": 1.0, "min_child_weight": 1.0, "n_jobs": 1}
    params = sb.BoostParams(objective=objective, n_trees=trees, max_depth=3, learning_rate=0.3)
    ours = sb.run_local(Xa, y, [Xp], params=params, plaintext=True).active.train_predictions()
    if objective == "binary":
        ref = xgb.XGBClassifier(**common).fit(X, y).predict_proba(X)[:, 1]
        assert abs(roc_auc(y, ours) - roc_auc(y, ref)) < 0.01
    else:
        ref = xgb.XGBRegressor(**common).fit(X, y).predict(X)
        assert abs(rmse(y, ours) - rmse(y, ref)) < 0.25


# --------------------------------------------------------------------------- multiclass


STRATEGIES = ("multi_output_tree", "one_output_per_tree")


def _mc_data(n: int = 240, seed: int = 3, k: int = 1):
    """Four classes, each driven by another party's feature (so every party wins splits)."""
    rng = np.random.default_rng(seed)
    Xa = rng.normal(size=(n, 2))
    Xa[:, 1] = np.round(Xa[:, 1])
    Xps = [rng.normal(size=(n, 3)) for _ in range(k)]
    z = np.column_stack([Xa[:, 0], Xps[0][:, 1], Xps[-1][:, 2] - Xa[:, 1], 0.3 * rng.normal(size=n)])
    y = np.argmax(z + 0.5 * rng.normal(size=z.shape), axis=1).astype(float)
    return Xa, y, Xps


def xgboost_multiclass(blocks: list[np.ndarray], y: np.ndarray, params: sb.BoostParams,
                       base: np.ndarray) -> np.ndarray:
    """XGBoost's softmax on the same bins (the joined bin-index matrix) and the same initial
    margins: ``exact`` for one tree per class, ``hist`` (every bin index its own bin) for
    multi-output trees. Returns its training margins (n, K)."""
    xgb = pytest.importorskip("xgboost")
    bins = np.column_stack([sb.bin_features(X, params.max_bin)[0] for X in blocks]).astype(np.float64)
    d = xgb.DMatrix(bins, label=y, base_margin=np.tile(base, (len(y), 1)))
    method = "exact" if params.multi_strategy == "one_output_per_tree" else "hist"
    booster = xgb.train({"objective": "multi:softprob", "num_class": len(base), "max_depth": params.max_depth,
                         "eta": params.learning_rate, "lambda": params.reg_lambda, "gamma": params.gamma,
                         "min_child_weight": params.min_child_weight, "tree_method": method, "max_bin": 256,
                         "multi_strategy": params.multi_strategy, "nthread": 1}, d, params.n_trees)
    return booster.predict(d, output_margin=True)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_multiclass_plaintext_matches_xgboost_on_the_same_bins(strategy: str) -> None:
    """Softmax gradients, XGBoost's hessian 2p(1-p), summed per-class gains, vector leaves:
    the training margins equal XGBoost's on the same bins (float32 there). XGBoost's
    multi-output trees treat min_child_weight differently (see select_split): 0 here."""
    Xa, y, Xps = _mc_data()
    mcw = 0.0 if strategy == "multi_output_tree" else 1.0
    params = sb.BoostParams(objective="multiclass", multi_strategy=strategy, n_trees=3, max_depth=3, max_bin=8,
                            min_child_weight=mcw)
    run = sb.run_local(Xa, y, Xps, params=params, plaintext=True, timeout=TIMEOUT)
    model = run.active.model
    assert model.n_outputs == 4 and model.n_trees == (3 if strategy == "multi_output_tree" else 12)
    assert run.active.train_margin.shape == (len(y), 4)
    ref = xgboost_multiclass([Xa, *Xps], y, params, model.base_score)
    assert np.abs(run.active.train_margin - ref).max() < 1e-5
    assert {int(o) for t in _trees(run) for o in [n[1] for n in t if n[0]]} == {0, 1}
    probs = run.active.train_predictions()
    assert probs.shape == (len(y), 4) and np.allclose(probs.sum(axis=1), 1.0)
    assert np.mean(np.argmax(probs, axis=1) == y) > 0.6


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_multiclass_encrypted_matches_plaintext(small_paillier_keys, strategy: str) -> None:
    """All four classes' (g, h) packed in one ciphertext per row (multi-output) or one class
    per tree: the encrypted trees are the plaintext mode's, bit for bit."""
    Xa, y, Xps = _mc_data(n=150, k=2)
    params = sb.BoostParams(objective="multiclass", multi_strategy=strategy, n_trees=2, max_depth=3, max_bin=8)
    enc = sb.run_local(Xa, y, Xps, params=params, keys=small_paillier_keys, allow_insecure=True, timeout=TIMEOUT)
    plain = sb.run_local(Xa, y, Xps, params=params, plaintext=True, timeout=TIMEOUT)
    _assert_same_trees(_trees(enc), _trees(plain))
    np.testing.assert_array_equal(enc.active.train_margin, plain.active.train_margin)
    grads = [e for e in enc.transcript.sent() if e.kind == "secureboost.gradients"]
    assert len(grads) == 2 * (2 if strategy == "multi_output_tree" else 8)  # trees x passive parties


def test_multiclass_model_round_trip_and_joint_prediction(tmp_path: Path) -> None:
    Xa, y, Xps = _mc_data(n=120)
    params = sb.BoostParams(objective="multiclass", n_trees=2, max_depth=2, max_bin=8)
    run = sb.run_local(Xa, y, Xps, params=params, plaintext=True, timeout=TIMEOUT)
    run.active.model.save(tmp_path / "active.npz")
    run.passive["passive-0"].model.save(tmp_path / "passive-0.npz")
    am = sb.ActiveModel.load(tmp_path / "active.npz")
    pm = sb.PassiveModel.load(tmp_path / "passive-0.npz")
    pred = sb.predict_local(am, Xa, [(pm, Xps[0])], timeout=TIMEOUT)
    assert pred.shape == (len(y), 4)
    np.testing.assert_allclose(pred, run.active.train_predictions(), atol=1e-12)


def test_multiclass_bad_labels_and_key_too_small() -> None:
    Xa, y, Xps = _mc_data(n=60)
    for bad, match in ((y - 1, "integer class labels"), (y + 0.5, "integer class labels"),
                       (np.zeros_like(y), "at least two classes"), (y * 30, "at most")):
        with pytest.raises(InputDataError, match=match):
            sb.run_local(Xa, bad, Xps, params=sb.BoostParams(objective="multiclass", n_trees=1), plaintext=True,
                         timeout=TIMEOUT)
    # 12 classes x 2 slots do not fit one 512-bit plaintext: a clear error before any message
    keys = generate_keypair(512, allow_insecure=True)
    y12 = np.arange(len(y)) % 12
    with pytest.raises(InputDataError, match="one_output_per_tree"):
        sb.run_local(Xa, y12, Xps, params=sb.BoostParams(objective="multiclass", n_trees=1), keys=keys,
                     allow_insecure=True, timeout=TIMEOUT)


def test_multiclass_malformed_plaintext_histograms_are_refused() -> None:
    """A passive party that answers a 4-output tree with single-output histograms."""
    Xa, y, Xps = _mc_data(n=80)
    params = sb.BoostParams(objective="multiclass", n_trees=1, max_depth=2, max_bin=8)

    def narrow(msg):
        return sb.PlainHistograms(msg.tree, msg.depth, msg.nodes, msg.counts, msg.grad[:, :1].copy(),
                                  msg.hess[:, :1].copy(), msg.rows)

    def hostile(channels):
        return sb.run_passive(tamper_sends(channels, sb.PlainHistograms, narrow), Xps[0], timeout=TIMEOUT)

    with pytest.raises(ProtocolError, match="malformed plaintext histograms"):
        sb.run_local(Xa, y, Xps, params=params, plaintext=True, timeout=TIMEOUT, overrides={"passive-0": hostile})


@pytest.mark.shared_data
@pytest.mark.skipif(not FATE.is_dir(), reason="../shared/data absent")
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_vehicle_scale_within_one_point_of_xgboost(strategy: str) -> None:
    """FATE's 4-class vehicle_scale: cross-validated accuracy (3 x 5 public stratified folds:
    one 5-fold split moves the difference by about a point) within 1 point of XGBoost's with
    the same settings (30 rounds, depth 3, 32 bins, lr 0.3) on the raw features."""
    xgb = pytest.importorskip("xgboost")
    from sklearn.model_selection import StratifiedKFold

    Xa, y, Xp = _load_fate("vehicle_scale")
    X = np.column_stack([Xa, Xp])
    params = sb.BoostParams(objective="multiclass", multi_strategy=strategy, n_trees=30, max_depth=3, max_bin=32)
    ours, ref = [], []
    folds = [f for seed in range(3) for f in StratifiedKFold(5, shuffle=True, random_state=seed).split(X, y)]
    for tr, te in folds:
        run = sb.run_local(Xa[tr], y[tr], [Xp[tr]], params=params, plaintext=True, timeout=60)
        pred = sb.predict_local(run.active.model, Xa[te], [(run.passive["passive-0"].model, Xp[te])])
        ours.append(np.mean(np.argmax(pred, axis=1) == y[te]))
        m = xgb.XGBClassifier(n_estimators=30, max_depth=3, learning_rate=0.3, max_bin=32, tree_method="hist",
                              multi_strategy=strategy, n_jobs=1).fit(X[tr], y[tr])
        ref.append(np.mean(m.predict(X[te]) == y[te]))
    assert abs(np.mean(ours) - np.mean(ref)) <= 0.01, (np.mean(ours), np.mean(ref))


# --------------------------------------------------------------------------- models & prediction


def test_save_load_and_joint_prediction(tmp_path: Path, small_paillier_keys) -> None:
    Xa, y, Xps = _data(n=120)
    params = sb.BoostParams(n_trees=2, max_depth=3, max_bin=8)
    run = sb.run_local(Xa, y, Xps, params=params, keys=small_paillier_keys, allow_insecure=True, timeout=TIMEOUT)
    run.active.model.save(tmp_path / "active.npz")
    for name, res in run.passive.items():
        res.model.save(tmp_path / f"{name}.npz")
    am = sb.ActiveModel.load(tmp_path / "active.npz")
    pms = [sb.PassiveModel.load(tmp_path / f"passive-{i}.npz") for i in range(2)]
    pred = sb.predict_local(am, Xa, [(pms[1], Xps[1]), (pms[0], Xps[0])], timeout=TIMEOUT)
    assert np.allclose(pred, run.active.train_predictions(), atol=1e-12)
    # a passive party's file holds only its lookup table; the active file no passive thresholds
    assert set(np.load(tmp_path / "passive-0.npz").files) == {
        "__meta__", "a_record_ids", "a_feature", "a_bin", "a_threshold"}
    assert (am.threshold[am.kind == 2] == 0).all()
    with pytest.raises(InputDataError):
        sb.ActiveModel.load(tmp_path / "passive-0.npz")


def test_prediction_with_stale_or_unknown_record_fails_clearly(small_paillier_keys) -> None:
    Xa, y, Xps = _data(n=120, k=1)
    params = sb.BoostParams(n_trees=2, max_depth=2, max_bin=8)
    run = sb.run_local(Xa, y, Xps, params=params, plaintext=True, timeout=TIMEOUT)
    other = sb.run_local(Xa, y, Xps, params=params, plaintext=True, timeout=TIMEOUT)
    stale = other.passive["passive-0"].model
    with pytest.raises(ProtocolError, match="stale or mismatched"):
        sb.predict_local(run.active.model, Xa, [(stale, Xps[0])], timeout=TIMEOUT)
    pm = run.passive["passive-0"].model
    assert len(pm.record_ids) > 0
    truncated = sb.PassiveModel(pm.model_id, pm.party, pm.columns, pm.record_ids[:0],
                                pm.feature[:0], pm.bin[:0], pm.threshold[:0])
    with pytest.raises(ProtocolError, match="unknown record id"):
        sb.predict_local(run.active.model, Xa, [(truncated, Xps[0])], timeout=TIMEOUT)


# --------------------------------------------------------------------------- hostile and edge cases


def _hostile_passive(make_histogram):
    """A passive party that follows the protocol up to the first histogram, then cheats."""

    def role(channels):
        ch = channels["active"]
        setup = ch.recv(sb.Setup, timeout=TIMEOUT)
        ch.keyring.add(setup.public_key)
        ch.recv(sb.EncryptedGradients, timeout=TIMEOUT)
        req = ch.recv(sb.LevelRequest, timeout=TIMEOUT)
        ch.send(make_histogram(setup, req))
        return None

    return role


def test_histogram_under_wrong_key_is_refused(small_paillier_keys) -> None:
    other_pk, _ = generate_keypair(512, allow_insecure=True)

    def bad(setup, req):
        vec = other_pk.encrypt([1, 2])
        return sb.EncryptedHistograms(0, 0, np.zeros(1, np.int32), np.array([2], np.int32),
                                      10, 5, vec)

    Xa, y, Xps = _data(n=60, k=1)
    with pytest.raises(KeyMismatchError):
        sb.run_local(Xa, y, Xps, params=sb.BoostParams(n_trees=1), keys=small_paillier_keys, allow_insecure=True,
                     timeout=TIMEOUT, overrides={"passive-0": _hostile_passive(bad)})


@pytest.mark.parametrize("fault", ["layout", "garbage", "count"])
def test_malformed_histogram_is_refused(small_paillier_keys, fault: str) -> None:
    pk = small_paillier_keys[0]

    def bad(setup, req):
        spec = sb.tree.packing_spec(60, sb.tree.choose_frac_bits(2, 60), 2)
        bits = 2 * spec.slot_bits
        per = (pk.bits - 1) // bits
        if fault == "layout":  # declared 7 candidates, but ciphertexts for far more
            return sb.EncryptedHistograms(0, 0, np.zeros(1, np.int32), np.array([7], np.int32),
                                          bits, per, pk.encrypt(list(range(9))))
        if fault == "garbage":  # right key and layout, plaintexts that are no histogram
            return sb.EncryptedHistograms(0, 0, np.zeros(1, np.int32), np.array([1], np.int32),
                                          bits, per, pk.encrypt([(1 << bits) - 1]))
        return sb.EncryptedHistograms(0, 0, np.zeros(1, np.int32), np.array([3], np.int32),
                                      bits + 1, per, pk.encrypt([1]))

    Xa, y, Xps = _data(n=60, k=1)
    with pytest.raises(ProtocolError):
        sb.run_local(Xa, y, Xps, params=sb.BoostParams(n_trees=1), keys=small_paillier_keys, allow_insecure=True,
                     timeout=TIMEOUT, overrides={"passive-0": _hostile_passive(bad)})


class _Tamper:
    """A channel proxy that rewrites the passive party's split responses (a lying owner)."""

    def __init__(self, ch) -> None:
        self._ch = ch

    def __getattr__(self, name):
        return getattr(self._ch, name)

    def send(self, msg, **kw):
        if isinstance(msg, sb.SplitResponse) and len(msg.left_bits):
            bits = msg.left_bits.copy()
            bits[0] ^= 0x80  # move the first row of the node to the other side
            msg = sb.SplitResponse(msg.tree, msg.depth, msg.nodes, msg.record_ids, bits)
        return self._ch.send(msg, **kw)


def test_wrong_left_instance_set_is_refused() -> None:
    _, y, Xps = _data(n=80, k=1)

    def liar(channels):
        return sb.run_passive({k: _Tamper(v) for k, v in channels.items()}, Xps[0], timeout=TIMEOUT)

    with pytest.raises(ProtocolError, match="left instance set"):
        sb.run_local(np.zeros((80, 1)), y, Xps, params=sb.BoostParams(n_trees=1), plaintext=True,
                     timeout=TIMEOUT, overrides={"passive-0": liar})


def test_stalled_passive_party_times_out(small_paillier_keys) -> None:
    release = threading.Event()

    def stall(channels):
        ch = channels["active"]
        setup = ch.recv(sb.Setup, timeout=TIMEOUT)
        ch.keyring.add(setup.public_key)
        release.wait(1.5)  # never answers in time

    Xa, y, Xps = _data(n=40, k=1)
    with pytest.raises(PeerTimeoutError):
        sb.run_local(Xa, y, Xps, params=sb.BoostParams(n_trees=1), keys=small_paillier_keys, allow_insecure=True,
                     timeout=0.5, overrides={"passive-0": stall})
    release.set()


def test_constant_features_and_single_bin(small_paillier_keys) -> None:
    Xa, y, _ = _data(n=80, k=1)
    Xp = np.column_stack([np.full(80, 3.0), np.zeros(80)])  # every row in one bin
    params = sb.BoostParams(n_trees=2, max_depth=3, max_bin=8)
    run = sb.run_local(Xa, y, [Xp], params=params, keys=small_paillier_keys, allow_insecure=True, timeout=TIMEOUT)
    assert not (run.active.model.kind == 2).any()
    assert len(run.passive["passive-0"].model.record_ids) == 0
    # nothing splits anywhere: every tree is a single leaf
    flat = sb.run_local(np.ones((80, 1)), y, [Xp], params=params, plaintext=True, timeout=TIMEOUT)
    assert (flat.active.model.kind == 0).all() and flat.active.model.n_trees == 2
    pred = sb.predict_local(flat.active.model, np.ones((80, 1)),
                            [(flat.passive["passive-0"].model, Xp)])
    assert np.allclose(pred, pred[0])


def test_missing_feature_values_go_right_consistently(small_paillier_keys) -> None:
    Xa, y, Xps = _data(n=100, k=1)
    Xp = Xps[0].copy()
    Xp[::7, 1] = np.nan
    Xa = Xa.copy()
    Xa[::5, 0] = np.nan
    params = sb.BoostParams(n_trees=2, max_depth=3, max_bin=8)
    run = sb.run_local(Xa, y, [Xp], params=params, keys=small_paillier_keys, allow_insecure=True, timeout=TIMEOUT)
    pred = sb.predict_local(run.active.model, Xa, [(run.passive["passive-0"].model, Xp)])
    assert np.allclose(pred, run.active.train_predictions(), atol=1e-12)


def test_bad_labels_and_alignment() -> None:
    Xa, y, Xps = _data(n=40, k=1)
    with pytest.raises(InputDataError, match="one class"):
        sb.run_local(Xa, np.ones(40), Xps, plaintext=True, timeout=TIMEOUT)
    with pytest.raises(InputDataError, match="0/1"):
        sb.run_local(Xa, y * 2, Xps, plaintext=True, timeout=TIMEOUT)
    with pytest.raises(InputDataError, match="not aligned"):
        sb.run_local(Xa, y, [Xps[0][:30]], plaintext=True, timeout=TIMEOUT)
    with pytest.raises(InputDataError):
        sb.run_local(Xa, y, Xps, params=sb.BoostParams(objective="poisson"), plaintext=True)


# --------------------------------------------------------------------------- audit


def test_audit_kinds_per_role_and_check() -> None:
    outcome = sb.audit_run(key_bits=512, allow_insecure=True)
    report = outcome.report
    report.check()
    # the encrypted and the plaintext-mode run, the defended runs (label DP: secureboost.dp_level) and the
    # prediction service (secureboost.serve_request / serve_rows)
    assert report.kinds_received("passive-0") == {
        "secureboost.setup", "secureboost.gradients", "secureboost.plain_gradients", "secureboost.level",
        "secureboost.dp_level", "secureboost.split_request", "secureboost.predict_query", "secureboost.serve_request"}
    assert report.kinds_received("active") == {
        "secureboost.histograms", "secureboost.plain_histograms", "secureboost.split_response",
        "secureboost.predict_answer", "secureboost.serve_rows"}
    attack = outcome.finding("label inference from tree-1 instance sets")
    assert attack.flagged and attack.by_design and attack.value > attack.baseline  # instance sets leak
    assert outcome.finding("label recovery from secureboost.plain_gradients").value == 1.0
    encrypted = outcome.finding("label recovery from secureboost.gradients")
    assert not encrypted.flagged and encrypted.value == encrypted.baseline  # it read nothing
    assert outcome.finding("secureboost.histograms: candidate order").samples > 500


def test_plaintext_mode_declares_its_kinds() -> None:
    Xa, y, Xps = _data(n=60, k=1)
    run = sb.run_local(Xa, y, Xps, params=sb.BoostParams(n_trees=1), plaintext=True)
    report = audit(run.transcript)
    report.check()
    assert "secureboost.plain_gradients" in report.kinds_received("passive-0")
    assert report.kinds_received("active") == {"secureboost.plain_histograms",
                                               "secureboost.split_response"}
    row = next(r for r in report.for_party("passive-0") if r.kind == "secureboost.plain_gradients")
    assert row.protection == "plaintext"


def test_gradients_are_only_ciphertexts_in_encrypted_mode(small_paillier_keys) -> None:
    """What the passive party received: per tree one PaillierVector under the active party's key,
    one ciphertext per row, every one a fresh unit of Z_n² above n (a plaintext or packed
    integer sent as it is would be below n; a ciphertext is below n with probability 1/n)."""
    from vflcrypto.runtime.channel import AuditTap

    Xa, y, Xps = _data(n=60, k=1)
    pk = small_paillier_keys[0]
    tap = AuditTap()
    run = sb.run_local(Xa, y, Xps, params=sb.BoostParams(n_trees=2), keys=small_paillier_keys, allow_insecure=True,
                       tap=tap)
    assert not {k for k in run.transcript.kinds() if "plain_" in k}
    assert not tap.received("passive-0", sb.PlainGradients)
    got = tap.received("passive-0", sb.EncryptedGradients, sender="active")
    assert [m.tree for m in got] == [0, 1]
    n = int(pk.n)
    for m in got:
        assert type(m.gh) is PaillierVector and m.gh.public_key == pk
        cs = m.gh.ciphertexts()
        assert len(cs) == 60 and len(set(cs)) == 60
        assert all(n < c < n * n for c in cs)


# --------------------------------------------------------------------------- Okamoto-Uchiyama


@pytest.fixture(scope="module")
def ou_keys():
    from vflcrypto.he import ou

    return ou.generate_keypair(1024, allow_insecure=True)


def test_ou_grows_the_plaintext_modes_trees(ou_keys) -> None:
    """Encrypted under OU (two passive parties, multiclass included) = plaintext mode, bit for bit."""
    Xa, y, Xps = _data(n=120)
    params = sb.BoostParams(n_trees=2, max_depth=3, max_bin=8)
    enc = sb.run_local(Xa, y, Xps, params=params, keys=ou_keys, allow_insecure=True, timeout=TIMEOUT)
    plain = sb.run_local(Xa, y, Xps, params=params, plaintext=True, timeout=TIMEOUT)
    _assert_same_trees(_trees(enc), _trees(plain))
    assert np.array_equal(enc.active.train_margin, plain.active.train_margin)
    assert enc.active.public_key == ou_keys[0]
    yk = np.digitize(Xa[:, 0], [-0.5, 0.5]).astype(np.float64)
    mparams = sb.BoostParams(n_trees=2, max_depth=2, max_bin=8, objective="multiclass")
    menc = sb.run_local(Xa, yk, Xps, params=mparams, keys=ou_keys, allow_insecure=True, timeout=TIMEOUT)
    mplain = sb.run_local(Xa, yk, Xps, params=mparams, plaintext=True, timeout=TIMEOUT)
    assert np.array_equal(menc.active.train_margin, mplain.active.train_margin)


def test_ou_by_scheme_name_and_heu_parameters() -> None:
    Xa, y, Xps = _data(n=60, k=1)
    params = sb.BoostParams(n_trees=1, max_depth=2, max_bin=8)
    plain = sb.run_local(Xa, y, Xps, params=params, plaintext=True, timeout=TIMEOUT)
    for scheme, bits in (("ou", 768), ("ou-heu", 2048)):
        run = sb.run_local(Xa, y, Xps, params=params, scheme=scheme, key_bits=bits, allow_insecure=True,
                           timeout=TIMEOUT)
        assert np.array_equal(run.active.train_margin, plain.active.train_margin)
        assert run.active.public_key is not None and run.active.public_key.bits == bits
    with pytest.raises(ConfigurationError):
        sb.run_local(Xa, y, Xps, params=params, scheme="rsa", key_bits=768, allow_insecure=True, timeout=TIMEOUT)


def test_ou_histograms_outside_the_plaintext_range_are_refused(ou_keys) -> None:
    """A passive party pushing a candidate past the plaintext bound (the OU oracle's first step) is refused."""
    pk = ou_keys[0]

    def bad(setup, req):
        spec = sb.tree.packing_spec(60, sb.tree.choose_frac_bits(2, 60), 2)
        bits = 2 * spec.slot_bits
        per = pk.plaintext_bits // bits
        past = pk.encrypt([2 ** (pk.plaintext_bits - 1)]) * 8
        return sb.EncryptedHistograms(0, 0, np.zeros(1, np.int32), np.array([1], np.int32), bits, per, past)

    Xa, y, Xps = _data(n=60, k=1)
    with pytest.raises(ProtocolError, match="outside the plaintext range"):
        sb.run_local(Xa, y, Xps, params=sb.BoostParams(n_trees=1), keys=ou_keys, allow_insecure=True,
                     timeout=TIMEOUT, overrides={"passive-0": _hostile_passive(bad)})


def test_a_passive_party_refuses_another_scheme(ou_keys) -> None:
    Xa, y, Xps = _data(n=60, k=1)
    with pytest.raises(ConfigurationError, match="--scheme"):
        sb.run_local(Xa, y, Xps, params=sb.BoostParams(n_trees=1), keys=ou_keys, allow_insecure=True,
                     timeout=TIMEOUT, overrides={"passive-0": lambda chans: sb.run_passive(
                         chans, Xps[0], scheme="paillier", timeout=TIMEOUT)})


def test_ou_audit_flags_deterministic_encryption(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without randomness every first-tree OU ciphertext is one of two values: the passive party's attack on
    the ciphertexts it received groups them and recovers the labels; the honest run's attack stays at chance."""
    from vflcrypto.he.paillier import fixed_base

    name = "label recovery from secureboost.gradients (OU): equal ciphertexts"
    honest = {f.name: f for f in sb.audit_run(512, allow_insecure=True).findings}[name]
    assert not honest.flagged and honest.value < 0.7
    strong = fixed_base._random_digits
    monkeypatch.setattr(fixed_base, "_random_digits", lambda count, nbytes, w: [[0] * len(r) for r in
                                                                                 strong(count, nbytes, w)])
    broken = {f.name: f for f in sb.audit_run(512, allow_insecure=True).findings}[name]
    assert broken.flagged and broken.value > 0.95


def test_precomputed_obfuscators_give_the_same_trees(ou_keys, small_paillier_keys) -> None:
    """The active party's stock (filled on the low-priority pool between trees) serves every row's encryption
    exactly once, stocked or online, under either scheme; the trees stay the plaintext mode's."""
    Xa, y, Xps = _data(n=120, k=1)
    params = sb.BoostParams(n_trees=3, max_depth=2, max_bin=8)
    plain = sb.run_local(Xa, y, Xps, params=params, plaintext=True, timeout=TIMEOUT)
    for keys in (small_paillier_keys, ou_keys):
        run = sb.run_local(Xa, y, Xps, params=params, keys=keys, allow_insecure=True, timeout=TIMEOUT,
                           precompute=True)
        stats = run.active.obfuscators
        assert stats is not None and stats.from_stock + stats.online == 3 * 120
        assert np.array_equal(run.active.train_margin, plain.active.train_margin)
        off = sb.run_local(Xa, y, Xps, params=params, keys=keys, allow_insecure=True, timeout=TIMEOUT)
        assert off.active.obfuscators is None  # in one process: off by default
