"""The audit of the feature parties' embedding defences (:mod:`._repvfl_embed`): their check and frontier columns.

* :func:`embed_check` / :func:`embed_noise_findings`: the server, which receives the noised
  representations (a protocol's ``dp_`` representation kinds), tests that each party's rows carry
  at least the Gaussian noise the setup announced (σ·C per coordinate: a chi-square lower-tail
  test, :func:`vflcrypto.audit.defences.noise_floor_finding`), the mirror of the parties' check
  of the label holder's gradient noise; proven by a mutation that drops the parties' noise;
* :func:`embed_defended_run`: one-/few-shot VFL's embedding-defended run (its check and metrics);
* :data:`EMBED_FRONTIER_ATTACKS`, :data:`EMBED_PATTERNS`: the frontier's columns (the server's
  trained decoder of each party's raw columns, He et al. 2019), :data:`BUDGET_NAMES` (what a
  budget is: ε for embed-gauss, the penalty's weight λ for dcor, which has no ε),
  :func:`embed_config` (a budget as configuration fields) and :func:`received_frontier` (one-/few-shot
  VFL's frontier on the digits; split's runs per epoch: :func:`vflcrypto.protocols.split.frontier.embed_frontier`).

The check is of the mechanism; what the defences do to the decoder, and what they cost, is the
frontier (``vflcrypto audit split --defence embed-gauss|dcor``), never a bound a check holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import not_measured
from vflcrypto.audit.checks import Check
from vflcrypto.audit.defences import Frontier, FrontierRun, frontier_point, noise_floor_finding
from vflcrypto.audit.ledger import EmpiricalFinding
from vflcrypto.errors import InputDataError
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection

from ._repvfl import SERVER, PartyData, RepRun, ServerData, digits_example, party_names, require_torch
from ._repvfl_audit import inversion_findings
from ._repvfl_embed import EMBED_DEFENCES

__all__ = ["BUDGET_NAMES", "DEFENDED_EMBED", "EMBED_FRONTIER_ATTACKS", "EMBED_PATTERNS", "embed_check",
           "embed_check_name", "embed_config", "embed_defended_run", "embed_noise_findings", "received_frontier",
           "received_inversions"]

#: the embedding-defended run of one-/few-shot VFL's audit: every party's representations clipped to 1 and noised for
#: ε = 1 over an overlap row's releases (δ = 1/n²), no local or head training (its check reads what the server
#: received; what the defence costs is the frontier)
DEFENDED_EMBED: dict[str, Any] = {"embed_epsilon": 1.0, "ssl_epochs": 0, "head_epochs": 0}

#: the frontiers' columns: attack -> what it is
EMBED_FRONTIER_ATTACKS = {
    "inversion_r2": "the server's trained decoder (He et al., ACSAC 2019) from the representations it received of a "
                    "party's rows (split: the last epoch's; one-/few-shot: U1, U2 and H_u, the best of them) to the "
                    "party's raw columns, knowing half of the rows' raw values; held-out R^2 (baseline: rows "
                    "shuffled)",
    "inversion_mean_r2": "split learning: the same decoder on each row's representations averaged over its releases "
                         "(one per epoch): the server's use of the repeated noised releases the accountant composes",
    "inversion_u1_r2": "one-/few-shot: the same decoder on U1 alone (the untrained extractor's representations, sent "
                       "before any local training: dCor cannot act on them)",
    "inversion_u2_r2": "one-/few-shot: the same decoder on U2 alone (after local training)",
    "inversion_hu_r2": "few-shot: the same decoder on the unaligned rows' H_u alone (after local training)",
}
#: column -> the pattern of its findings' names
EMBED_PATTERNS = {"inversion_r2": "raw columns by a trained decoder", "inversion_mean_r2": "mean of its releases",
                  "inversion_u1_r2": "[U1]", "inversion_u2_r2": "[U2]", "inversion_hu_r2": "[H_u]"}
#: defence -> what its budgets are
BUDGET_NAMES = {"embed-gauss": "epsilon (embed)", "dcor": "dCor weight"}


def embed_check_name(protocol: str) -> str:
    return f"{protocol} representations: Gaussian noise at the announced scale"


def embed_check(protocol: str, kinds: Sequence[str]) -> Check:
    """The server's noise check of every noised representation kind of ``protocol``."""
    return Check(embed_check_name(protocol), tuple(kinds), Protection.DP,
                 "the parties' embedding noise dropped or scaled down (less than half the announced variance in "
                 "the rows)", 0.5)


def embed_noise_findings(tap: AuditTap, names: Sequence[str], protocol: str,
                         kinds: Sequence[str]) -> list[EmpiricalFinding]:
    """The server tests, per party, that the noised representations it received from that party (every message of
    ``kinds``, rows as sent) carry at least the noise the setup announced (σ·C per coordinate)."""
    out = []
    for p in names:
        setup = tap.received(p, f"{protocol}.setup")
        rows = [np.asarray(m.H) for k in kinds for m in tap.received(SERVER, k, sender=p)]
        if not setup or setup[0].embed_noise_multiplier is None or not rows:
            out.append(not_measured(SERVER, embed_check_name(protocol), tuple(kinds), Protection.DP,
                                    f"the server received no noised representations from {p} under announced "
                                    "embedding noise"))
            continue
        s = setup[0]
        std = s.embed_noise_multiplier * s.embed_clip
        out.append(noise_floor_finding(SERVER, embed_check_name(protocol), rows, std, attacks=tuple(kinds)))
    return out


def embed_defended_run(protocol: str, run_local: Callable[..., RepRun], config: Any, server: ServerData,
                       parties: Sequence[PartyData], kinds: Sequence[str]
                       ) -> tuple[RepRun, list[EmpiricalFinding], dict[str, float]]:
    """One-/few-shot VFL's embedding-defended run (``config``: :data:`DEFENDED_EMBED` and the protocol's own): the
    server's noise check of every party, and each party's (ε, δ) as it accounted its own rows' releases."""
    tap = AuditTap()
    run = run_local(server, parties, config=config, tap=tap)
    names = party_names(len(parties))
    metrics: dict[str, float] = {}
    for p, res in zip(names, run.parties, strict=True):
        g, key = res.privacy["embed-gauss"], p.replace("-", "_")
        metrics[f"embed_defended_epsilon_{key}"], metrics[f"embed_defended_delta_{key}"] = g["epsilon"], g["delta"]
    return run, embed_noise_findings(tap, names, protocol, kinds), metrics


def received_inversions(tap: AuditTap, names: Sequence[str], protocol: str,
                        kinds: Sequence[tuple[str, str, str]]) -> list[EmpiricalFinding]:
    """The server's decoder from each representation kind it received (``kinds``: (the plain kind's suffix, the held
    name of the raw rows, a short label), e.g. ``("representation_update", "features", "U2")``; its ``dp_`` kind
    where that was sent); each finding's name ends with its label in brackets (the frontier's per-kind columns)."""
    out = []
    for suffix, held, label in kinds:
        dp = f"{protocol}.dp_{suffix}"
        kind = dp if tap.received(SERVER, dp) else f"{protocol}.{suffix}"
        found = inversion_findings(tap, names, [(kind, held)])
        out += [dataclasses.replace(f, name=f"{f.name} [{label}]") for f in found]
    return out


def received_frontier(protocol: str, run_local: Callable[..., RepRun], make_config: Callable[..., Any], defence: str,
                      budgets: Sequence[float], repeats: int, kinds: Sequence[tuple[str, str, str]],
                      covers: Mapping[str, str], setting: str) -> Frontier:
    """One-/few-shot VFL's embedding frontier on the digits (100 overlap rows, the default training): the server's
    decoder of each party's raw columns from every representation kind it received (the best of them, the worst
    party; and each kind's own column) and the test accuracy, undefended and at each budget (embed-gauss: ε at
    δ = 1/n², rows clipped to the default 1; dcor: the weight λ); each point the mean of ``repeats`` runs."""
    require_torch()
    if repeats < 1:
        raise InputDataError(f"the frontier needs >= 1 run per budget, got {repeats}")
    server, parties = digits_example(100, seed=0)
    names = party_names(len(parties))

    def runner(cfg: Any) -> Callable[[], FrontierRun]:
        def once() -> FrontierRun:
            tap = AuditTap()
            run = run_local(server, parties, config=cfg, tap=tap)
            return ({"test_accuracy": float(run.test_accuracy or 0.0)}, run.server.privacy,
                    received_inversions(tap, names, protocol, kinds))

        return once

    labels = {"U1": "inversion_u1_r2", "U2": "inversion_u2_r2", "H_u": "inversion_hu_r2"}
    columns = {"inversion_r2": EMBED_PATTERNS["inversion_r2"],
               **{labels[label]: EMBED_PATTERNS[labels[label]] for _, _, label in kinds}}
    points = [frontier_point(None, defence, repeats, runner(make_config()), columns)]
    for b in budgets:
        points.append(frontier_point(b, defence, repeats, runner(make_config(**embed_config(defence, b))), columns))
    statement = f"{defence} protects {covers[defence]}; {setting}"
    return Frontier(protocol, defence, statement, tuple(points), {c: EMBED_FRONTIER_ATTACKS[c] for c in columns},
                    budget_name=BUDGET_NAMES[defence])


def embed_config(defence: str, budget: float) -> dict[str, Any]:
    """The configuration fields of one budget: embed-gauss at ε = ``budget`` (δ = 1/n²), dcor at weight
    λ = ``budget``."""
    if defence not in EMBED_DEFENCES:
        raise InputDataError(f"the embedding defences are {', '.join(EMBED_DEFENCES)}, not {defence!r}")
    return {"embed_epsilon": budget} if defence == "embed-gauss" else {"dcor_weight": budget}
