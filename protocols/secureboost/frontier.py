"""SecureBoost's privacy–utility frontier (``vflcrypto audit secureboost --defence D --budgets ...``): the audit's
label attacks on a passive party's instance spaces and the test accuracy and AUC, at each budget of a defence
(:mod:`.defence`), beside the undefended run, the plaintext XGBoost model on the same rows and the attacks' floors.

The setting is the bundled default_credit-like data (``bank.csv`` with the label ``defaulted`` at the active party,
``shop.csv`` at the passive party, joined by ID: 800 rows), a public seeded 70/30 train/test split, and the
parameters :data:`FRONTIER_PARAMS`. Runs are in plaintext mode: encrypted runs grow the same trees bit for bit
(the fixed-point sums are exact) and send the same instance spaces, so no figure here depends on the encryption;
it only costs time. Randomness: the label shuffles of the floors and the known rows are simulations (seeded numpy);
the defences' own randomness comes from the OS CSPRNG (every run draws fresh noise).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import accuracy_finding
from vflcrypto.audit.defences import Frontier, FrontierPoint, FrontierRun, frontier_point
from vflcrypto.audit.ledger import EmpiricalFinding
from vflcrypto.data.tables import train_test_split
from vflcrypto.errors import InputDataError
from vflcrypto.ml.metrics import roc_auc
from vflcrypto.runtime.channel import AuditTap, Transcript

from .audit import _demo_data, label_inference_attack, literature_findings
from .defence import COVERS, DEFENCES
from .local import run_local
from .predict import predict_local
from .tree import BoostParams

__all__ = ["ATTACK_PATTERNS", "FRONTIER_ATTACKS", "FRONTIER_PARAMS", "attack_findings", "frontier", "frontier_data"]

#: the frontier's training parameters (every run: undefended, defended, the label-free floors, XGBoost's)
FRONTIER_PARAMS: dict[str, Any] = {"n_trees": 10, "max_depth": 3, "max_bin": 16, "reg_lambda": 10.0,
                                   "min_child_weight": 5.0}
TEST_FRACTION = 0.3
PASSIVE = "passive-0"
#: the frontier's columns: attack -> what it is
FRONTIER_ATTACKS = {
    "id2graph": "ID2Graph (Takahashi et al. 2023): Louvain communities of the rows' co-occurrence in the nodes of "
                "every tree the passive party received, each labelled by the majority of 2.5 % known labels per "
                "class; accuracy on the other training rows (baseline: the majority class's share)",
    "first_split": "first-split leak: the two sides of the root split of the first tree the passive party received, "
                   "scored by the same known labels' positive share; leak AUC (baseline 0.5)",
    "majority_vote": "the audit's attack: majority vote of 5 % known labels in each cell of the finest partition the "
                     "passive party saw in the first tree it took part in (instance space and its own left sets); "
                     "accuracy on the other rows (baseline: the majority class's share)",
}


@dataclasses.dataclass(frozen=True)
class FrontierData:
    Xa: np.ndarray
    y: np.ndarray
    Xp: np.ndarray
    train: np.ndarray
    test: np.ndarray
    source: str


def frontier_data() -> FrontierData:
    """The bundled bank/shop tables joined by ID, split 70/30 by the public seed 0."""
    Xa, y, _, Xp, _, source = _demo_data(None)
    train, test = train_test_split(len(y), TEST_FRACTION, 0)
    return FrontierData(Xa, y, Xp, train, test, source)


#: the frontier's columns -> the name of their finding (:func:`attack_findings`)
ATTACK_PATTERNS = {"id2graph": "(ID2Graph)", "first_split": "root split", "majority_vote": "(majority vote)"}


def attack_findings(tap: AuditTap, y: np.ndarray, first_tree: int, party: str = PASSIVE) -> list[EmpiricalFinding]:
    """The frontier's attacks on what ``party`` received in one run (``y``: the training labels, which only
    score): the scorecard's ID2Graph and first-split leak, and the audit's majority vote on the first tree it
    takes part in (``first_tree``: the rounds before it grown on the active party's features alone)."""
    n = len(y)
    found = literature_findings(tap, party, y, per_class=max(2, round(0.025 * n)))
    guess, unknown = label_inference_attack(tap.held(party, "instance_partition")[first_tree], y)
    found.append(accuracy_finding(party, "label inference from the first instance spaces it received (majority vote)",
                                  guess[unknown], y[unknown], float(max(np.mean(y[unknown]), 1 - np.mean(y[unknown]))),
                                  attacks=("secureboost.level", "secureboost.dp_level"), protection=None,
                                  description="majority vote of 5 % known labels per cell of the finest partition "
                                              "it saw in the first tree it took part in"))
    return found


def _run(data: FrontierData, params: BoostParams, y: np.ndarray | None = None) -> FrontierRun:
    """One plaintext run on the training rows (labels ``y`` instead of the true ones, for the floors): its test
    accuracy and AUC (against the true labels), its guarantees (the active-only rounds as ``params``, without
    epsilon) and the attacks' findings against the true training labels."""
    tr, te = data.train, data.test
    tap = AuditTap()
    run = run_local(data.Xa[tr], data.y[tr] if y is None else y, [data.Xp[tr]], params=params, plaintext=True,
                    tap=tap)
    pred = predict_local(run.active.model, data.Xa[te], [(run.passive[PASSIVE].model, data.Xp[te])],
                         transcript=Transcript())
    privacy: dict[str, Any] = dict(run.active.model.privacy)
    if "active-only" in privacy:
        privacy["active-only"] = {"epsilon": None, "delta": None, "params": {"rounds": params.active_only_rounds}}
    figures = {"test_accuracy": float(np.mean((pred >= 0.5) == data.y[te])), "test_auc": roc_auc(data.y[te], pred)}
    return figures, privacy, attack_findings(tap, data.y[tr], params.active_only_rounds)


def _point(data: FrontierData, params: BoostParams, defence: str, budget: float | None,
           repeats: int) -> FrontierPoint:
    """One budget's point: the mean over ``repeats`` runs of the test accuracy and AUC and of each attack's
    score (:func:`~vflcrypto.audit.defences.frontier_point`)."""
    return frontier_point(budget, defence, repeats, lambda: _run(data, params), ATTACK_PATTERNS)


def _floors(data: FrontierData, params: BoostParams, repeats: int) -> dict[str, float]:
    """Each attack's mean score over ``repeats`` undefended runs grown from shuffled training labels (seeded numpy:
    a simulation), scored against the true labels: what a tree structure independent of the labels reveals."""
    rng = np.random.default_rng(0)  # which permutation: a simulation, not a secret
    return dict(frontier_point(None, "none", repeats, lambda: _run(data, params, rng.permutation(data.y[data.train])),
                               ATTACK_PATTERNS).scores)


def _xgboost(data: FrontierData, params: BoostParams) -> dict[str, dict[str, float]]:
    """The plaintext XGBoost model with the same parameters on the joined columns: its test accuracy and AUC ({}
    without xgboost)."""
    try:
        import xgboost
    except ImportError:
        return {}
    X = np.column_stack([data.Xa, data.Xp])
    model = xgboost.XGBClassifier(n_estimators=params.n_trees, max_depth=params.max_depth,
                                  learning_rate=params.learning_rate, max_bin=params.max_bin, tree_method="hist",
                                  reg_lambda=params.reg_lambda, min_child_weight=params.min_child_weight, n_jobs=1)
    model.fit(X[data.train], data.y[data.train])
    pred = model.predict_proba(X[data.test])[:, 1]
    return {"plaintext XGBoost (same parameters, joined columns)":
            {"test_accuracy": float(np.mean((pred >= 0.5) == data.y[data.test])),
             "test_auc": roc_auc(data.y[data.test], pred)}}


def frontier(defence: str, budgets: Sequence[float], repeats: int = 1) -> Frontier:
    """The label attacks and the test accuracy and AUC of SecureBoost on the bundled data at each budget of
    ``defence``: ``active-only`` (budget K: the first K rounds on the active party's features alone; no epsilon) or
    ``hist-gauss`` (budget epsilon: Gaussian noise on the G sums calibrated to (epsilon, 1e-5)), beside the
    undefended run; each point the mean of ``repeats`` runs."""
    if defence not in DEFENCES:
        raise InputDataError(f"secureboost's defences are {', '.join(DEFENCES)}, not {defence!r}")
    if repeats < 1:
        raise InputDataError(f"the frontier needs >= 1 run per budget, got {repeats}")
    base = BoostParams(**FRONTIER_PARAMS)
    if defence == "active-only" and any(b != int(b) or not 1 <= b < base.n_trees for b in budgets):
        raise InputDataError(f"active-only takes whole numbers of rounds in 1..{base.n_trees - 1} as budgets")
    data = frontier_data()
    points = [_point(data, base, defence, None, repeats)]
    for b in budgets:
        params = (dataclasses.replace(base, active_only_trees=int(b)) if defence == "active-only"
                  else dataclasses.replace(base, dp_epsilon=float(b)))
        points.append(_point(data, params, defence, b, repeats))
    n_tr = len(data.train)
    statement = (f"{defence} protects {COVERS[defence]}; SecureBoost on the {data.source} ({n_tr} training and "
                 f"{len(data.test)} test rows), {base.n_trees} trees of depth {base.max_depth}, {base.max_bin} bins, "
                 f"lambda {base.reg_lambda:g}, min_child_weight {base.min_child_weight:g}; plaintext mode (the same "
                 "trees and instance spaces as encrypted runs)")
    return Frontier("secureboost", defence, statement, tuple(points), FRONTIER_ATTACKS,
                    floors=_floors(data, base, repeats), references=_xgboost(data, base),
                    budget_name="epsilon" if defence == "hist-gauss" else
                    "rounds grown on the active party's features alone (no epsilon)")
