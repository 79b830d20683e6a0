"""The audit of the representation-VFL protocols' label defences: their checks and their privacy–utility frontier.

* :func:`defence_checks`: the two declared checks of a protocol's defended gradient kind (split's
  ``split.dp_gradient``, one-/few-shot's ``<protocol>.dp_gradient``), each proven by its own mutation;
* :func:`rr_finding`: the label holder's training labels against randomized response's keep rate
  (exact binomial), and :func:`d1_noise_findings`: each party's test that the noised D1 it received
  carries the announced Gaussian noise (:mod:`vflcrypto.audit.defences`);
* :data:`FRONTIER_ATTACKS`, :data:`ATTACK_PATTERNS` and :func:`own_columns_completion`: the frontier's
  columns (the audits' label attacks) and model completion's baseline, shared by every frontier here;
* :func:`d1_frontier`: one-shot and few-shot VFL's frontier on the digits (split's runs per epoch:
  :func:`vflcrypto.protocols.split.audit.frontier`).

The checks are of the mechanism (the noise is there, the labels are randomized at the announced
rate); what the defences do to the attacks is the frontier, never a ceiling a check holds them to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from vflcrypto.audit import literature
from vflcrypto.audit.attacks import not_measured
from vflcrypto.audit.checks import Check
from vflcrypto.audit.defences import Frontier, FrontierRun, frontier_point, noise_floor_finding
from vflcrypto.audit.defences import randomized_response_finding as _rr
from vflcrypto.audit.ledger import EmpiricalFinding
from vflcrypto.errors import InputDataError
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection

from ._repvfl import SERVER, PartyData, ServerData, digits_example, party_names, require_torch
from ._repvfl_audit import COMPLETION_LABELS, d1_finding, received_label_attacks
from ._repvfl_defence import DEFENCES, DefendedConfig

__all__ = ["ATTACK_PATTERNS", "FRONTIER_ATTACKS", "d1_frontier", "d1_noise_findings", "defence_checks",
           "defence_findings", "noise_check_name", "own_columns_completion", "rr_check_name", "rr_finding"]


def noise_check_name(kind: str) -> str:
    return f"{kind}: Gaussian noise at the announced scale"


def rr_check_name(kind: str) -> str:
    return f"{kind}: training labels kept at randomized response's rate"


def defence_checks(kind: str, rr_kinds: Sequence[str]) -> tuple[Check, Check]:
    """The noise check of the noised gradient ``kind`` and the randomized-response check of the label holder's
    training labels, which every kind of ``rr_kinds`` is computed from."""
    return (Check(noise_check_name(kind), (kind,), Protection.DP,
                  "the gradient noise dropped or scaled down (less than half the announced variance in the rows)", 0.5),
            Check(rr_check_name(kind), tuple(rr_kinds), Protection.DP,
                  "randomized response skipped (every training label kept)", 1.0))


def rr_finding(tap: AuditTap, names: Sequence[str], setup_kind: str, name: str, kinds: Sequence[str],
               n_classes: int) -> EmpiricalFinding:
    """The label holder's training labels against randomized response at the ε its setup announced (to the first
    party): kept no more often than e^ε / (e^ε + C − 1) allows."""
    setups = tap.received(names[0], setup_kind) if names else []
    if not setups or setups[0].label_epsilon is None:
        return not_measured(SERVER, name, tuple(kinds), Protection.DP, "no randomized response announced")
    return _rr(SERVER, name, tap.held(SERVER, "training_labels")[0], tap.held(SERVER, "labels")[0],
               setups[0].label_epsilon, n_classes, attacks=tuple(kinds))


def d1_noise_findings(tap: AuditTap, names: Sequence[str], protocol: str) -> list[EmpiricalFinding]:
    """Each party tests that the noised D1 it received (``<protocol>.dp_gradient``, the rows as sent: the summed
    loss needs no rescaling) carries at least the noise its setup announced (σ·C per coordinate)."""
    kind = f"{protocol}.dp_gradient"
    out = []
    for p in names:
        setup = tap.received(p, f"{protocol}.setup")
        msgs = tap.received(p, kind)
        if not setup or setup[0].noise_multiplier is None or not msgs:
            out.append(not_measured(p, noise_check_name(kind), (kind,), Protection.DP,
                                    f"{p} received no {kind} under announced gradient noise"))
            continue
        s = setup[0]
        out.append(noise_floor_finding(p, noise_check_name(kind), [np.asarray(m.G) for m in msgs],
                                       s.noise_multiplier * s.clip, attacks=(kind,)))
    return out


def defence_findings(tap: AuditTap, names: Sequence[str], protocol: str, n_classes: int) -> list[EmpiricalFinding]:
    """One-/few-shot VFL's checks on a defended run: every party's noise check on its D1 and the label holder's
    randomized response (which both D1 variants, ``dp_gradient`` and ``dp_partition``, are computed from)."""
    kinds = (f"{protocol}.dp_gradient", f"{protocol}.dp_partition")
    return [*d1_noise_findings(tap, names, protocol),
            rr_finding(tap, names, f"{protocol}.setup", rr_check_name(kinds[0]), kinds, n_classes)]


# --------------------------------------------------------------------------- the frontier

#: the frontiers' columns: attack -> what it is
FRONTIER_ATTACKS = {
    "kmeans_ari": "k-means (K = C) on the gradient rows a party received (split: each first-epoch batch; one-/few-"
                  "shot: D1), ARI against the true labels (baseline 0)",
    "norm_scoring": "norm scoring (Li et al., ICLR 2022), mean one-vs-rest AUC of the row norms (baseline: shuffled)",
    "direction_scoring": "direction scoring (Li et al.), accuracy from one known label per class (baseline: majority)",
    "model_completion": "passive model completion (Fu et al., USENIX Security 2022) on the representations it sent, "
                        f"{COMPLETION_LABELS} known labels per class, accuracy (baseline: the same head on the "
                        "party's own raw columns, what it predicts without any message)",
}
#: column -> the pattern of its findings' names
ATTACK_PATTERNS = {"kmeans_ari": "label partition", "norm_scoring": "norm scoring",
                   "direction_scoring": "direction scoring", "model_completion": "model completion"}


def own_columns_completion(server: ServerData, parties: Sequence[PartyData]) -> float:
    """Model completion's head on each party's own raw columns instead of its representations (the best over the
    parties): the labels a party predicts from what it holds, with no message at all."""
    y = server.y_overlap
    known = literature.known_labels(y, COMPLETION_LABELS)
    return max(literature.model_completion(p, "own columns", d.X_overlap, y, known, attacks=()).value
               for p, d in zip(party_names(len(parties)), parties, strict=True))


def d1_frontier(protocol: str, run_local: Callable[..., Any], make_config: Callable[..., DefendedConfig],
                defence: str, budgets: Sequence[float], repeats: int, *, clip: float, covers: Mapping[str, str],
                setting: str) -> Frontier:
    """One-/few-shot VFL's label attacks (k-means on D1, norm and direction scoring on D1, model completion on U2)
    and test accuracy on the digits (100 overlap rows) at each ε of ``budgets`` under ``defence`` (``label-rr``:
    randomized response at ε; ``grad-gauss``: D1 clipped to ``clip`` and noised, calibrated to (ε, δ = 1e-5) over
    its one release), beside the undefended run; each point the mean of ``repeats`` runs (fresh randomness each).
    ``covers`` (defence -> what it protects) and ``setting`` describe the run in the frontier's statement."""
    require_torch()
    if defence not in DEFENCES:
        raise InputDataError(f"{protocol}'s defences are {', '.join(DEFENCES)}, not {defence!r}")
    if repeats < 1:
        raise InputDataError(f"the frontier needs >= 1 run per budget, got {repeats}")
    server, parties = digits_example(100, seed=0)
    names, y = party_names(len(parties)), server.y_overlap
    own = {"model_completion": own_columns_completion(server, parties)}

    def runner(cfg: DefendedConfig) -> Callable[[], FrontierRun]:
        kind = f"{protocol}.dp_gradient" if cfg.defence().on else f"{protocol}.gradient"

        def once() -> FrontierRun:
            tap = AuditTap()
            run = run_local(server, parties, config=cfg, tap=tap)
            found = [d1_finding(tap, p, kind, y) for p in names]
            found += received_label_attacks(tap, names, protocol, y, kind)
            return {"test_accuracy": float(run.test_accuracy or 0.0)}, run.server.privacy, found

        return once

    points = [frontier_point(None, defence, repeats, runner(make_config()), ATTACK_PATTERNS, own)]
    for b in budgets:
        cfg = make_config(label_dp=b) if defence == "label-rr" else make_config(grad_epsilon=b, grad_clip=clip)
        points.append(frontier_point(b, defence, repeats, runner(cfg), ATTACK_PATTERNS, own))
    clipped = f", D1 rows clipped to {clip:g}" if defence == "grad-gauss" else ""
    statement = f"{defence} protects {covers[defence]}; {setting}{clipped}"
    return Frontier(protocol, defence, statement, tuple(points), FRONTIER_ATTACKS)
