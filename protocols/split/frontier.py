"""Split learning's privacy–utility frontier: the audit's label attacks and the test utility at several budgets.

``vflcrypto audit split --defence D --budgets ...`` (and ``bench/privacy_frontier.py``) call
:func:`frontier`. Two settings:

* the audit's: the digits, 10 classes, 100 overlap rows (``label-rr`` and ``grad-gauss``);
* **binary digits** (``marvell``, which protects binary labels only, and ``grad-gauss`` with
  ``binary=True`` beside it): the bundled digits with the public rule *digit 8 is the
  positive label, every other digit negative* (:func:`~vflcrypto.protocols._repvfl.binary_digits_example`;
  about 10 % positives,
  imbalanced like the click-through data of Li et al.'s experiments, which is what norm
  scoring needs, and 8 is the digit a model confuses most, so utility has room to fall),
  :data:`BINARY_OVERLAP` overlap rows, the same 360 test rows. There the attacks are the
  paper's: norm and direction scoring, each as a **leak AUC folded** to max(AUC, 1 − AUC)
  (the authors' |AUC − 0.5|: an attacker who learns which way the score points, e.g. from
  one known label), on the first epoch's rows (as the audit) and on the **worst epoch** of the
  run (each epoch's rows scored, the largest folded AUC kept: the authors summarise the leak
  AUCs of all batches of training by their 95 % quantile). The worst of 20 chance AUCs is not
  0.5: its baseline is simulated (:func:`worst_epoch_baseline`). The utility is the test
  accuracy and the test AUC (the paper's metric).

The budgets: ε for ``label-rr`` and ``grad-gauss`` (δ = 1e-5, accounted by ``dp-accounting``),
Marvell's power bound s for ``marvell`` (larger s: more noise, less leakage; no ε).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from vflcrypto.audit import literature
from vflcrypto.audit.defences import Frontier, FrontierPoint
from vflcrypto.errors import InputDataError
from vflcrypto.runtime.channel import AuditTap

from .._repvfl import (
    POSITIVE_DIGIT,
    PartyData,
    ServerData,
    binary_digits_example,
    digits_example,
    party_names,
    require_torch,
)
from .._repvfl_audit import COMPLETION_LABELS, batch_rows
from .audit import DP_KIND, EPOCHS, MARVELL_KIND, label_attacks, run_tapped
from .defence import COVERS, DEFENCES
from .roles import SplitConfig, epoch_batches

__all__ = ["BINARY_OVERLAP", "FRONTIER_ATTACKS", "FRONTIER_ATTACKS_BINARY", "epoch_leaks", "frontier",
           "worst_epoch_baseline"]

#: overlap rows of the binary frontier (about 50 positives: a folded leak AUC of pure chance has sd ~0.03)
BINARY_OVERLAP = 500

#: the frontier's columns: attack -> what it is
FRONTIER_ATTACKS = {
    "kmeans_ari": "k-means (K = C) on each first-epoch batch gradient, ARI against the true labels (baseline 0)",
    "norm_scoring": "norm scoring (Li et al., ICLR 2022), mean one-vs-rest AUC of the row norms (baseline: shuffled)",
    "direction_scoring": "direction scoring (Li et al.), accuracy from one known label per class (baseline: majority)",
    "model_completion": "passive model completion (Fu et al., USENIX Security 2022) on the representations it sent, "
                        "4 known labels per class, accuracy (baseline: the same head on the party's own raw columns, "
                        "what it predicts without any message)",
}
FRONTIER_ATTACKS_BINARY = {
    "norm_scoring": "norm scoring (Li et al., ICLR 2022) on the first epoch's received rows: leak AUC of the row "
                    "norms, folded to max(AUC, 1 - AUC) (baseline 0.5; chance folds to ~0.53 at 50 positives)",
    "direction_scoring": "direction scoring (Li et al.): leak AUC of the cosine with one row known to be positive, "
                         "folded likewise",
    "norm_worst_epoch": "norm scoring on each epoch's received rows, the largest folded leak AUC over the epochs "
                        "and parties (baseline: the same maximum over chance AUCs, simulated)",
    "direction_worst_epoch": "direction scoring likewise, the largest folded leak AUC over the epochs (baseline: "
                             "simulated likewise)",
    "model_completion": FRONTIER_ATTACKS["model_completion"],
}
_PREFIX = {"kmeans_ari": "label partition", "norm_scoring": "norm scoring", "direction_scoring": "direction scoring",
           "model_completion": "model completion"}
_FOLDED = ("norm_scoring", "direction_scoring")


def _own_columns_completion(server: ServerData, parties: list[PartyData]) -> float:
    """Model completion's head on each party's own raw columns instead of its representations (the best over the
    parties): the labels a party predicts from what it holds, with no message at all."""
    y = server.y_overlap
    known = literature.known_labels(y, COMPLETION_LABELS)
    return max(literature.model_completion(p, "own columns", d.X_overlap, y, known, attacks=()).value
               for p, d in zip(party_names(len(parties)), parties, strict=True))


def worst_epoch_baseline(n1: int, n0: int, epochs: int, draws: int = 4000) -> float:
    """The mean over simulated runs of the largest of ``epochs`` folded chance AUCs at n1 positives and n0 negatives
    (each AUC normal around 0.5 with the Mann–Whitney standard deviation): the worst-epoch statistic's chance level."""
    sd = float(np.sqrt((n1 + n0 + 1) / (12.0 * n1 * n0)))
    rng = np.random.default_rng(0)  # a null distribution's simulation, not a secret
    return float(0.5 + np.mean(np.max(np.abs(rng.normal(0.0, sd, (draws, epochs))), axis=1)))


def epoch_leaks(tap: AuditTap, names: list[str], kind: str, y: np.ndarray, cfg: SplitConfig) -> dict[str, float]:
    """Norm and direction scoring (binary) on every epoch's received rows of every party: the largest folded leak
    AUC over the epochs and parties, per attack (its chance level: :func:`worst_epoch_baseline` of epochs × parties
    AUCs)."""
    n = len(y)
    known = literature.known_labels(y, 1)
    worst = {"norm_worst_epoch": 0.5, "direction_worst_epoch": 0.5}
    for p in names:
        msgs = tap.received(p, kind)
        start = 0
        for e in range(cfg.epochs):
            batches = epoch_batches(n, cfg.batch_size, cfg.seed, e)
            part = msgs[start:start + len(batches)]
            start += len(batches)
            if len(part) != len(batches):
                break
            G = batch_rows(part, batches, n, "G")
            for key, f in (("norm_worst_epoch", literature.norm_scoring(p, "norm", G, y, attacks=())),
                           ("direction_worst_epoch", literature.direction_scoring(p, "dir", G, y, known, attacks=()))):
                worst[key] = max(worst[key], f.value, 1 - f.value)
    return worst


def _test_auc(server: ServerData, proba: np.ndarray) -> float | None:
    if server.n_classes != 2 or server.y_test is None or not len(server.y_test):
        return None
    return literature.roc_auc(np.asarray(proba)[:, 1], np.asarray(server.y_test) == 1)


def _point(server: ServerData, parties: list[PartyData], cfg: SplitConfig, defence: str, budget: float | None,
           own: float, repeats: int) -> FrontierPoint:
    """One budget's point: the mean over ``repeats`` runs of the test accuracy (and AUC) and of each attack's worst
    score over the parties (binary: folded leak AUCs)."""
    t0 = time.perf_counter()
    dfn = cfg.defence()
    kind = MARVELL_KIND if dfn.marvell_bound is not None else DP_KIND if dfn.on else "split.gradient"
    binary = server.n_classes == 2
    scores: dict[str, list[float]] = {}
    baselines: dict[str, float] = {}
    accuracy: list[float] = []
    aucs: list[float] = []
    for _ in range(repeats):
        run, tap = run_tapped(server, parties, cfg)
        accuracy.append(float(run.test_accuracy or 0.0))
        if (auc := _test_auc(server, run.server.test_proba)) is not None:
            aucs.append(auc)
        names = party_names(len(parties))
        found = label_attacks(tap, names, kind, server.y_overlap, cfg, server.n_classes)
        if binary:
            for key, v in epoch_leaks(tap, names, kind, server.y_overlap, cfg).items():
                scores.setdefault(key, []).append(v)
            n1 = int(np.sum(server.y_overlap == 1))
            chance = worst_epoch_baseline(n1, len(server.y_overlap) - n1, cfg.epochs * len(names))
            baselines.update(norm_worst_epoch=chance, direction_worst_epoch=chance)
        for key, prefix in _PREFIX.items():
            hits = [f for f in found if prefix in f.name and f.measured]
            if hits:
                fold = binary and key in _FOLDED
                scores.setdefault(key, []).append(max(max(f.value, 1 - f.value) if fold else f.value for f in hits))
                baselines[key] = own if key == "model_completion" else max(f.baseline or 0.0 for f in hits)
    g = run.server.privacy.get(defence)
    return FrontierPoint(budget, g["epsilon"] if g else None, g["delta"] if g else None, float(np.mean(accuracy)),
                         {k: float(np.mean(v)) for k, v in scores.items()}, baselines, dict(g["params"]) if g else {},
                         time.perf_counter() - t0, repeats, test_auc=float(np.mean(aucs)) if aucs else None)


def frontier(defence: str, budgets: Sequence[float], repeats: int = 1, *, binary: bool | None = None,
             overlap: int | None = None, epochs: int = EPOCHS, undefended: bool = True) -> Frontier:
    """The label attacks and the test utility of split learning at each budget of ``budgets`` under ``defence``
    (``label-rr``: randomized response at ε; ``grad-gauss``: gradient noise calibrated to (ε, δ = 1e-5);
    ``marvell``: Marvell at power bound s), beside the undefended run; each point the mean of ``repeats`` runs
    (fresh randomness each). ``binary`` (default: only for Marvell) runs on the binary digits; ``overlap`` and
    ``epochs`` shrink the setting, ``undefended=False`` leaves the undefended run out (tests)."""
    require_torch()
    if defence not in DEFENCES:
        raise InputDataError(f"split's defences are {', '.join(DEFENCES)}, not {defence!r}")
    if repeats < 1:
        raise InputDataError(f"the frontier needs >= 1 run per budget, got {repeats}")
    binary = defence == "marvell" if binary is None else binary
    if defence == "marvell" and not binary:
        raise InputDataError("Marvell protects binary labels only: its frontier runs on the binary digits")
    if binary:
        n = overlap or BINARY_OVERLAP
        server, parties = binary_digits_example(n, seed=0)
        setting = f"binary digits (digit {POSITIVE_DIGIT} against the rest)"
    else:
        n = overlap or 100
        server, parties = digits_example(n, seed=0)
        setting = "the digits"
    own = _own_columns_completion(server, parties)
    points = [_point(server, parties, SplitConfig(epochs=epochs), defence, None, own, repeats)] if undefended else []
    for b in budgets:
        cfg = (SplitConfig(epochs=epochs, label_dp=b) if defence == "label-rr"
               else SplitConfig(epochs=epochs, marvell_bound=b) if defence == "marvell"
               else SplitConfig(epochs=epochs, grad_epsilon=b))
        points.append(_point(server, parties, cfg, defence, b, own, repeats))
    statement = (f"{defence} protects {COVERS[defence]}; split learning on {setting}, {n} overlap rows, "
                 f"{epochs} epochs, batch 64")
    return Frontier("split", defence, statement, tuple(points), FRONTIER_ATTACKS_BINARY if binary else FRONTIER_ATTACKS,
                    budget_name="power bound s" if defence == "marvell" else "epsilon")
