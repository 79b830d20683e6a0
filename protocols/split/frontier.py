"""Split learning's privacy–utility frontier: the audit's label attacks and the test utility at several budgets.

``vflcrypto audit split --defence D --budgets ...`` (and ``bench/privacy_frontier.py``) call
:func:`frontier`, which measures each budget's point with the shared
:func:`~vflcrypto.audit.defences.frontier_point` (the columns, patterns and model completion's
baseline of every representation-VFL frontier: :mod:`vflcrypto.protocols._repvfl_defence_audit`).
Two settings:

* the audit's: the digits, 10 classes, 100 overlap rows (``label-rr``, ``label-lpmst`` and ``grad-gauss``);
* **binary digits** (``marvell``, which protects binary labels only, and any other defence with
  ``binary=True`` beside it, ``vflcrypto audit split --defence grad-gauss --binary``): the
  bundled digits with the public rule *digit 8 is the positive label, every other digit
  negative* (:func:`~vflcrypto.protocols._repvfl.binary_digits_example`; about 10 % positives,
  imbalanced like the click-through data of Li et al.'s experiments, which is what norm
  scoring needs, and 8 is the digit a model confuses most, so utility has room to fall),
  :data:`BINARY_OVERLAP` overlap rows, the same 360 test rows. There the attacks are the
  paper's: norm and direction scoring, each as a **leak AUC folded** to max(AUC, 1 − AUC)
  (the authors' |AUC − 0.5|: an attacker who learns which way the score points, e.g. from
  one known label), on the first epoch's rows (as the audit) and on the **worst epoch** of the
  run (each epoch's rows scored, the largest folded AUC kept: the authors summarise the leak
  AUCs of all batches of training by their 95 % quantile). The worst of 20 chance AUCs is not
  0.5: its baseline is simulated (:func:`worst_epoch_baseline`). The utility is the test
  accuracy and the test AUC (the paper's metric; the point's ``utility["test_auc"]``).

The budgets: ε for ``label-rr``, ``label-lpmst`` (two-stage LP-MST) and ``grad-gauss`` (δ = 1e-5, accounted
by ``dp-accounting``), Marvell's power bound s for ``marvell`` (larger s: more noise, less leakage; no ε).

The feature parties' embedding defences (``embed-gauss``: ε of the representations' noise, δ = 1/n²;
``dcor``: NoPeek's weight λ, no ε) run in the audit's setting with the server's decoder of each
party's raw columns as the columns instead (:func:`embed_frontier`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from vflcrypto.audit import literature
from vflcrypto.audit.defences import Frontier, FrontierRun, frontier_point
from vflcrypto.audit.ledger import EmpiricalFinding
from vflcrypto.errors import InputDataError
from vflcrypto.runtime.channel import AuditTap

from .._repvfl import POSITIVE_DIGIT, ServerData, binary_digits_example, digits_example, party_names, require_torch
from .._repvfl_audit import batch_rows
from .._repvfl_defence_audit import ATTACK_PATTERNS, FRONTIER_ATTACKS, own_columns_completion
from .._repvfl_embed import EMBED_DEFENCES
from .._repvfl_embed_audit import BUDGET_NAMES, EMBED_FRONTIER_ATTACKS, EMBED_PATTERNS, embed_config
from .audit import EPOCHS, gradient_kind_received, inversion_attacks, label_attacks, run_tapped
from .defence import COVERS, DEFENCES
from .roles import SplitConfig, epoch_batches

__all__ = ["BINARY_OVERLAP", "BINARY_PATTERNS", "FRONTIER_ATTACKS_BINARY", "embed_frontier", "epoch_leak_findings",
           "frontier", "worst_epoch_baseline"]

#: overlap rows of the binary frontier (about 50 positives: a folded leak AUC of pure chance has sd ~0.03)
BINARY_OVERLAP = 500

#: the binary frontier's columns: attack -> what it is
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
_WORST = {"norm_worst_epoch": "largest per-epoch leak AUC, norm", "direction_worst_epoch":
          "largest per-epoch leak AUC, direction"}
#: column -> the pattern of its findings' names (the worst-epoch findings: :func:`epoch_leak_findings`)
BINARY_PATTERNS = {"norm_scoring": ATTACK_PATTERNS["norm_scoring"],
                   "direction_scoring": ATTACK_PATTERNS["direction_scoring"], **_WORST,
                   "model_completion": ATTACK_PATTERNS["model_completion"]}
_FOLDED = (ATTACK_PATTERNS["norm_scoring"], ATTACK_PATTERNS["direction_scoring"])


def worst_epoch_baseline(n1: int, n0: int, epochs: int, draws: int = 4000) -> float:
    """The mean over simulated runs of the largest of ``epochs`` folded chance AUCs at n1 positives and n0 negatives
    (each AUC normal around 0.5 with the Mann–Whitney standard deviation): the worst-epoch statistic's chance level."""
    sd = float(np.sqrt((n1 + n0 + 1) / (12.0 * n1 * n0)))
    rng = np.random.default_rng(0)  # a null distribution's simulation, not a secret
    return float(0.5 + np.mean(np.max(np.abs(rng.normal(0.0, sd, (draws, epochs))), axis=1)))


def _folded(f: EmpiricalFinding) -> EmpiricalFinding:
    """A binary norm- or direction-scoring finding with its leak AUC folded to max(AUC, 1 − AUC)."""
    if f.measured and any(pattern in f.name for pattern in _FOLDED):
        return dataclasses.replace(f, value=max(f.value, 1.0 - f.value))
    return f


def epoch_leak_findings(tap: AuditTap, names: Sequence[str], kind: str, y: np.ndarray, cfg: SplitConfig,
                        chance: float) -> list[EmpiricalFinding]:
    """Each party's norm and direction scoring (binary) on every epoch's gradient rows it received (``kind``): the
    largest folded leak AUC over the epochs, one finding per party and attack (named by :data:`BINARY_PATTERNS`);
    ``chance`` is the statistic's chance level over every epoch and party (:func:`worst_epoch_baseline`)."""
    n = len(y)
    known = literature.known_labels(y, 1)
    out = []
    for p in names:
        msgs = tap.received(p, kind)
        worst = {"norm_worst_epoch": 0.5, "direction_worst_epoch": 0.5}
        start = epochs = 0
        for e in range(cfg.epochs):
            batches = epoch_batches(n, cfg.batch_size, cfg.seed, e)
            part = msgs[start:start + len(batches)]
            start += len(batches)
            if len(part) != len(batches):
                break
            G = batch_rows(part, batches, n, "G")
            epochs += 1
            for key, f in (("norm_worst_epoch", literature.norm_scoring(p, "norm", G, y, attacks=())),
                           ("direction_worst_epoch", literature.direction_scoring(p, "dir", G, y, known, attacks=()))):
                worst[key] = max(worst[key], f.value, 1 - f.value)
        out += [EmpiricalFinding(p, f"{kind}: {_WORST[key]}", value, chance,
                                 f"the largest folded leak AUC over the {epochs} epochs of {kind} rows {p} received "
                                 f"(chance level {chance:.3f}, simulated)", attacks=(kind,), samples=n,
                                 measured=epochs == cfg.epochs)
                for key, value in worst.items()]
    return out


def _test_auc(server: ServerData, proba: np.ndarray) -> float | None:
    if server.n_classes != 2 or server.y_test is None or not len(server.y_test):
        return None
    return literature.roc_auc(np.asarray(proba)[:, 1], np.asarray(server.y_test) == 1)


def frontier(defence: str, budgets: Sequence[float], repeats: int = 1, *, binary: bool | None = None,
             overlap: int | None = None, epochs: int = EPOCHS, undefended: bool = True) -> Frontier:
    """The label attacks and the test utility of split learning at each budget of ``budgets`` under ``defence``
    (``label-rr``: randomized response at ε; ``label-lpmst``: two-stage LP-MST at ε; ``grad-gauss``: gradient
    noise calibrated to (ε, δ = 1e-5);
    ``marvell``: Marvell at power bound s), beside the undefended run; each point the mean of ``repeats`` runs
    (fresh randomness each). ``binary`` (default: only for Marvell) runs on the binary digits; ``overlap`` and
    ``epochs`` shrink the setting, ``undefended=False`` leaves the undefended run out (tests). The embedding
    defences (``embed-gauss``, ``dcor``) measure the server's decoder instead (:func:`embed_frontier`)."""
    require_torch()
    if defence not in DEFENCES:
        raise InputDataError(f"split's defences are {', '.join(DEFENCES)}, not {defence!r}")
    if repeats < 1:
        raise InputDataError(f"the frontier needs >= 1 run per budget, got {repeats}")
    if defence in EMBED_DEFENCES:
        if binary:
            raise InputDataError(f"{defence} protects the parties' raw columns: its frontier runs on the digits")
        return embed_frontier(defence, budgets, repeats, overlap=overlap, epochs=epochs, undefended=undefended)
    binary = defence == "marvell" if binary is None else binary
    if defence == "marvell" and not binary:
        raise InputDataError("Marvell protects binary labels only: its frontier runs on the binary digits")
    n = overlap or (BINARY_OVERLAP if binary else 100)
    server, parties = binary_digits_example(n, seed=0) if binary else digits_example(n, seed=0)
    names, y = party_names(len(parties)), server.y_overlap
    baselines = {"model_completion": own_columns_completion(server, parties)}
    chance = 0.5
    if binary:
        n1 = int(np.sum(y == 1))
        chance = worst_epoch_baseline(n1, len(y) - n1, epochs * len(names))
        baselines.update(dict.fromkeys(_WORST, chance))

    def runner(cfg: SplitConfig) -> Callable[[], FrontierRun]:
        def once() -> FrontierRun:
            run, tap = run_tapped(server, parties, cfg)
            kind = gradient_kind_received(tap, names[0])
            figures = {"test_accuracy": float(run.test_accuracy or 0.0)}
            found = label_attacks(tap, names, kind, y, cfg, server.n_classes)
            if binary:
                if (auc := _test_auc(server, run.server.test_proba)) is not None:
                    figures["test_auc"] = auc
                found = [_folded(f) for f in found] + epoch_leak_findings(tap, names, kind, y, cfg, chance)
            return figures, run.server.privacy, found

        return once

    patterns = BINARY_PATTERNS if binary else ATTACK_PATTERNS
    points = [frontier_point(None, defence, repeats, runner(SplitConfig(epochs=epochs)), patterns, baselines)
              ] if undefended else []
    for b in budgets:
        cfg = (SplitConfig(epochs=epochs, label_dp=b) if defence == "label-rr"
               else SplitConfig(epochs=epochs, label_dp=b, label_mechanism="lpmst") if defence == "label-lpmst"
               else SplitConfig(epochs=epochs, marvell_bound=b) if defence == "marvell"
               else SplitConfig(epochs=epochs, grad_epsilon=b))
        points.append(frontier_point(b, defence, repeats, runner(cfg), patterns, baselines))
    setting = f"binary digits (digit {POSITIVE_DIGIT} against the rest)" if binary else "the digits"
    statement = (f"{defence} protects {COVERS[defence]}; split learning on {setting}, {n} overlap rows, "
                 f"{epochs} epochs, batch 64")
    return Frontier("split", defence, statement, tuple(points), FRONTIER_ATTACKS_BINARY if binary else FRONTIER_ATTACKS,
                    budget_name="power bound s" if defence == "marvell" else "epsilon")


def embed_frontier(defence: str, budgets: Sequence[float], repeats: int = 1, *, overlap: int | None = None,
                   epochs: int = EPOCHS, undefended: bool = True) -> Frontier:
    """The server's decoder of each party's raw columns (last epoch, and each row's mean over its releases) and the
    test accuracy at each budget of an embedding defence (``embed-gauss``: the parties' representations clipped to 1
    and noised, calibrated to ε over the epochs at δ = 1/n²; ``dcor``: NoPeek at weight λ = each budget, no ε),
    beside the undefended run, on the digits (the audit's setting)."""
    n = overlap or 100
    server, parties = digits_example(n, seed=0)
    names = party_names(len(parties))
    X_of = {p: d.X_overlap for p, d in zip(names, parties, strict=True)}

    def runner(cfg: SplitConfig) -> Callable[[], FrontierRun]:
        def once() -> FrontierRun:
            run, tap = run_tapped(server, parties, cfg)
            return ({"test_accuracy": float(run.test_accuracy or 0.0)}, run.server.privacy,
                    inversion_attacks(tap, names, X_of, cfg, n))

        return once

    points = [frontier_point(None, defence, repeats, runner(SplitConfig(epochs=epochs)), EMBED_PATTERNS)
              ] if undefended else []
    for b in budgets:
        cfg = SplitConfig(epochs=epochs, **embed_config(defence, b))
        points.append(frontier_point(b, defence, repeats, runner(cfg), EMBED_PATTERNS))
    clip = (f", every representation row clipped to {SplitConfig().embed_clip:g}, delta = 1/n^2 over the "
            f"{n + len(parties[0].X_test)} overlap and test rows") if defence == "embed-gauss" else ""
    statement = (f"{defence} protects {COVERS[defence]}; split learning on the digits, {n} overlap rows, {epochs} "
                 f"epochs, batch 64{clip}")
    return Frontier("split", defence, statement, tuple(points), EMBED_FRONTIER_ATTACKS,
                    budget_name=BUDGET_NAMES[defence])
