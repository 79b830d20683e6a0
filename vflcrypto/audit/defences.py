"""The audit of a defence: checks that its mechanism runs as announced, and its privacy–utility frontier.

* :func:`noise_floor_finding`: the receiver of noised rows checks that they carry at least
  the announced Gaussian noise (a chi-square lower-tail test of their sum of squares);
* :func:`randomized_response_finding`: the label holder's training labels keep the true
  label no more often than randomized response at the announced ε allows;
* :func:`keep_rate_finding`: the same for a mechanism whose keep probability differs per row
  (RRWithPrior: e^ε / (e^ε + k* − 1) or 0), by the exact Poisson-binomial tail;
* :class:`Frontier`: one protocol's attacks and utility re-measured at several privacy
  budgets beside the undefended run (``vflcrypto audit NAME --defence D --budgets ...``);
  :func:`frontier_point` measures one budget's point from a protocol's run-and-attack function.

The checks are of the mechanism, not bounds on what an attack may reach: a DP guarantee
bounds how much a message changes with one row's label, not how well an attacker guesses
from what it already holds (its own features predict labels too), so an attack's score
under a defence is reported on the frontier, beside its baseline, never held to a ceiling.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..privacy.mechanisms import rr_keep_probability
from ..runtime.declarations import Protection
from .attacks import ALPHA, accuracy_finding, normal_isf, normal_sf
from .ledger import EmpiricalFinding

__all__ = ["Frontier", "FrontierPoint", "frontier_point", "keep_rate_finding", "noise_floor_finding",
           "randomized_response_finding"]


def noise_floor_finding(observer: str, name: str, rows: Sequence[np.ndarray], std: float, *, attacks: Sequence[str],
                        protection: Protection | None = Protection.DP) -> EmpiricalFinding:
    """The received rows carry at least Gaussian noise of ``std`` per coordinate (rows as the mechanism output
    them, before any public rescaling).

    Each coordinate is a bounded signal plus N(0, std²), so the sum of squares over std² is
    at least a chi-square variable with as many degrees of freedom as coordinates (non-central
    with the signal). The value is the shortfall 1 − (sum of squares / std²) / coordinates
    (at most 0 in an honest run; about 1 when the noise is dropped), flagged when a lower-tail
    test (Wilson–Hilferty normal approximation of the chi-square) rejects at ALPHA.
    """
    x = np.concatenate([np.asarray(r, np.float64).ravel() for r in rows]) if rows else np.zeros(0)
    k = int(x.size)
    ratio = float(np.sum(x * x)) / (std * std * k) if k else float("nan")
    a = 2.0 / (9.0 * max(k, 1))
    z = (max(ratio, 0.0) ** (1.0 / 3.0) - (1.0 - a)) / math.sqrt(a) if k else 0.0
    p = normal_sf(-z)
    crit = 1.0 - max(1.0 - a - normal_isf(ALPHA) * math.sqrt(a), 0.0) ** 3
    return EmpiricalFinding(observer, name, 1.0 - ratio, 0.0,
                            f"the {len(rows)} received noised blocks ({k} coordinates): their mean square is "
                            f"{ratio:.4g} times the announced noise variance ({std:.4g}^2); the bounded signal "
                            "only adds to it, so a shortfall means noise missing", attacks=tuple(attacks),
                            protection=protection, flagged=p < ALPHA, p_value=p, samples=k, min_effect=crit,
                            detects=f"a noise variance >= {crit:.3f} below the announced one on {k} coordinates")


def randomized_response_finding(observer: str, name: str, trained: np.ndarray, truth: np.ndarray, epsilon: float,
                                n_classes: int, *, attacks: Sequence[str],
                                protection: Protection | None = Protection.DP) -> EmpiricalFinding:
    """The share of rows whose training label is the true label, against randomized response's keep probability
    e^ε / (e^ε + C − 1): one-sided exact binomial test (labels kept that the mechanism should have replaced)."""
    keep = rr_keep_probability(epsilon, n_classes)
    return accuracy_finding(observer, name, np.asarray(trained), np.asarray(truth), keep, attacks=attacks,
                            protection=protection,
                            description=f"the labels it trains on, as guesses of the true labels: randomized "
                                        f"response at epsilon = {epsilon:g} over {n_classes} classes keeps a label "
                                        f"with probability {keep:.3f} (the baseline); more kept means a weaker "
                                        "mechanism than announced")


def _poisson_binomial(q: np.ndarray) -> np.ndarray:
    """The exact distribution of the number of successes of independent Bernoulli(q_i) (convolution, O(n²))."""
    dist = np.ones(1)
    for qi in q:
        dist = np.concatenate([dist * (1 - qi), [0.0]]) + np.concatenate([[0.0], dist * qi])
    return dist


def keep_rate_finding(observer: str, name: str, trained: np.ndarray, truth: np.ndarray, keep: np.ndarray,
                      mechanism: str, *, attacks: Sequence[str],
                      protection: Protection | None = Protection.DP) -> EmpiricalFinding:
    """The share of rows whose released label is the true label, against a mechanism that keeps row i's label with
    probability ``keep[i]`` (RRWithPrior: e^ε / (e^ε + k* − 1) if the label is among the k* classes of largest
    prior, else 0): one-sided exact Poisson-binomial test (labels kept that the mechanism should have replaced); a
    label kept where q_i = 0 is an outcome of probability 0 under the announced mechanism (p = 0)."""
    y, t, q = np.asarray(trained).ravel(), np.asarray(truth).ravel(), np.clip(np.asarray(keep, np.float64), 0, 1)
    n = int(t.size)
    kept = int(np.sum(y == t))
    tail = np.cumsum(_poisson_binomial(q)[::-1])[::-1]  # tail[j] = P(X >= j)
    impossible = int(np.sum((y == t) & (q == 0)))  # kept where the mechanism cannot keep: probability 0
    p = 0.0 if impossible else float(min(max(tail[kept], 0.0), 1.0))
    crit = int(np.argmax(tail < ALPHA)) if np.any(tail < ALPHA) else n + 1  # the smallest count that flags
    return EmpiricalFinding(observer, name, kept / max(n, 1), float(q.mean()) if n else 0.0,
                            f"the labels it trained on, as guesses of the true labels: {mechanism} keeps row i's label "
                            f"with probability q_i (mean {float(q.mean()) if n else 0.0:.3f}, the baseline); more kept "
                            f"means a weaker mechanism than announced ({impossible} kept where q_i = 0)",
                            attacks=tuple(attacks), protection=protection,
                            flagged=p < ALPHA, p_value=p, samples=n, min_effect=crit / max(n, 1),
                            detects=f"a kept share >= {min(crit, n) / max(n, 1):.3f} on {n} rows")


@dataclass(frozen=True)
class FrontierPoint:
    """One run of a frontier: the budget asked for, the accounted (ε, δ), the utility and each attack's score."""

    #: the ε asked for, or an empirical defence's own budget (Marvell's power bound); ``None``: the undefended run
    budget: float | None
    epsilon: float | None
    delta: float | None
    accuracy: float | None
    #: attack name -> its score in this run (the worst over the attacked parties)
    scores: Mapping[str, float]
    #: attack name -> what the attack reaches without the messages
    baselines: Mapping[str, float]
    #: the defence's parameters in this run (noise multiplier, keep probability)
    params: Mapping[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    #: the runs the accuracy and the scores are the mean of
    runs: int = 1
    #: further utility figures beside the accuracy (e.g. ``test_auc``)
    utility: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "epsilon": self.epsilon, "delta": self.delta, "test_accuracy": self.accuracy,
                **({"utility": dict(self.utility)} if self.utility else {}),
                "scores": dict(self.scores), "baselines": dict(self.baselines), "params": dict(self.params),
                "runs": self.runs, "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class Frontier:
    """A defence's privacy–utility frontier: the undefended run first, then one point per budget."""

    protocol: str
    defence: str
    #: what the guarantee covers and how it is accounted (the defence's own statement)
    guarantee: str
    points: tuple[FrontierPoint, ...]
    #: attack name -> what it is (in the order of the table's columns)
    attacks: Mapping[str, str]
    #: attack name -> its score on the structure a label-independent run reveals (the floor a defence that
    #: hides the labels entirely leaves: the features' own share), where the protocol measures one
    floors: Mapping[str, float] = field(default_factory=dict)
    #: reference model -> its utility figures on the same rows (``test_accuracy`` and the points' other keys,
    #: e.g. the plaintext XGBoost model's)
    references: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: what the budgets are (``epsilon``; Marvell's ``power bound s``; a count of rounds of an empirical defence;
    #: NoPeek's ``dCor weight``)
    budget_name: str = "epsilon"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"protocol": self.protocol, "defence": self.defence, "guarantee": self.guarantee,
                               "budget_name": self.budget_name, "attacks": dict(self.attacks),
                               "points": [p.to_dict() for p in self.points]}
        if self.floors:
            out["floors"] = dict(self.floors)
        if self.references:
            out["references"] = {k: dict(v) for k, v in self.references.items()}
        return out

    def to_text(self) -> str:
        def num(x: float | None, fmt: str = ".3f") -> str:
            return "-" if x is None or x != x else format(x, fmt)

        names = list(self.attacks)
        extra = sorted({k for p in self.points for k in p.utility})
        head = [self.budget_name, "epsilon", "delta", "test acc", *(k.replace("_", " ") for k in extra), *names]
        rows = [head]
        for p in self.points:
            rows.append(["none" if p.budget is None else f"{p.budget:g}", num(p.epsilon), num(p.delta, ".0e"),
                         num(p.accuracy), *(num(p.utility.get(k)) for k in extra),
                         *(num(p.scores.get(n)) for n in names)])
        base = self.points[0].baselines if self.points else {}
        rows.append(["baseline", "", "", "", *("" for _ in extra), *(num(base.get(n)) for n in names)])
        if self.floors:
            rows.append(["label-free", "", "", "", *("" for _ in extra), *(num(self.floors.get(n)) for n in names)])
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [f"Privacy-utility frontier: {self.protocol}, defence {self.defence} (budget: {self.budget_name})", "",
                 self.guarantee, ""]
        lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        lines += [f"{name}: " + ", ".join(f"{k.replace('_', ' ')} {num(v)}" for k, v in figures.items())
                  for name, figures in self.references.items()]
        lines += ["", "Attacks (score: the worst over the attacked parties; baseline: without the messages"
                      + ("; label-free: on the structure of runs grown from shuffled labels" if self.floors else "")
                      + "):"]
        lines += [f"  {n}: {what}" for n, what in self.attacks.items()]
        secs, runs = sum(p.seconds for p in self.points), sum(p.runs for p in self.points)
        per = self.points[0].runs if self.points else 1
        lines += ["", f"{runs} runs in {secs:.1f} s; each row the mean of {per} run{'s' if per > 1 else ''} (every "
                      "run draws fresh noise: figures vary run to run)"]
        return "\n".join(lines)


#: one run of a frontier's point: its utility figures (``test_accuracy`` and any others), the guarantees the run
#: reported (defence name -> a dict with ``epsilon``, ``delta``, ``params``) and the attacks' findings
FrontierRun = tuple[Mapping[str, float], Mapping[str, Any], Sequence[EmpiricalFinding]]


def frontier_point(budget: float | None, defence: str, repeats: int, run: Callable[[], FrontierRun],
                   attacks: Mapping[str, str], baselines: Mapping[str, float] | None = None) -> FrontierPoint:
    """One budget's point: ``run`` (a protocol's run and its attacks, fresh randomness each call) ``repeats``
    times; each attack's score is the worst (largest) value over the measured findings whose name contains its
    pattern (``attacks``: column -> pattern), averaged over the runs, as are the utility figures. The baseline
    of a column is ``baselines[column]`` where given, else the findings' own; (ε, δ) and the parameters are the
    run's reported guarantee for ``defence`` (none: the undefended run)."""
    t0 = time.perf_counter()
    scores: dict[str, list[float]] = {}
    utility: dict[str, list[float]] = {}
    base: dict[str, float] = {}
    privacy: Mapping[str, Any] = {}
    for _ in range(repeats):
        figures, privacy, found = run()
        for key, value in figures.items():
            utility.setdefault(key, []).append(float(value))
        for key, pattern in attacks.items():
            hits = [f for f in found if pattern in f.name and f.measured]
            if hits:
                scores.setdefault(key, []).append(max(f.value for f in hits))
                base[key] = (baselines or {}).get(key, max(f.baseline or 0.0 for f in hits))
    g = privacy.get(defence)
    accuracy = utility.pop("test_accuracy", None)
    return FrontierPoint(budget, g["epsilon"] if g else None, g["delta"] if g else None,
                         float(np.mean(accuracy)) if accuracy else None,
                         {k: float(np.mean(v)) for k, v in scores.items()}, base, dict(g["params"]) if g else {},
                         time.perf_counter() - t0, repeats, {k: float(np.mean(v)) for k, v in utility.items()})
