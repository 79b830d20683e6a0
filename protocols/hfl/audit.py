"""The HFL audit: what the server reads from the updates, plaintext against secure, two published attacks, the demo.

The scenario of :func:`audit_run`: FedAvg on the digits across five non-IID clients (each
draws 80 % of its rows from two home classes, so one client's update differs from the
others': with IID clients the mean update would already be every client's), three rounds,
client-4 drops out of round 2 after training (in both modes). The server attacks:

* plaintext mode: every client's n_i and update, read from ``hfl.update`` (by design);
* secure mode: the masked updates (uniform, fresh per round, uncorrelated with the
  updates) and the share ciphertexts it relayed (read as plaintext shares);
* the round-difference attack (So et al., AAAI 2023; by design): the sums of rounds 1 and
  2, whose survivors differ by client-4, subtract to client-4's update plus the others'
  change between the rounds, and to its n_i exactly;
* the model-inconsistency attack (Pasquini, Francati and Ateniese, CCS 2022), an active
  server: in a further round it sends the victim one model and every other client
  another, chosen so that the sum is the victim's update (:class:`InconsistentServer`).
  Every client signs the digest of the model it received into its secure-aggregation
  advertisement and aborts the round unless its neighbours' digests equal its own
  (:func:`~vflcrypto.protocols.secagg.math.check_contexts`): the attack is detected
  before any masked input exists. The check of :data:`MODEL_CONSISTENCY` flags when the
  server nevertheless obtains the sum of clients that trained from different models;
* a defended run, DP-FedAvg (:mod:`.defence`) at ε = :data:`DEFENDED_EPSILON` with the same
  dropout: the check that every sum the server obtained carries at least the announced
  noise (:data:`NOISE_CHECK`; the true unnoised sums are the audit's ground truth), and the
  round-difference attack again. What the defence does at several budgets is the frontier
  (:func:`frontier`, ``vflcrypto audit hfl --defence dp-fedavg --budgets 1,2,4,8``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import not_measured, ring_mask_findings
from vflcrypto.audit.checks import EXACT, Check, mask_checks, verified_result
from vflcrypto.audit.defences import Frontier, FrontierPoint, noise_floor_finding
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit_runs
from vflcrypto.audit.literature import PASQUINI_2022
from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection
from vflcrypto.runtime.steps import Next
from vflcrypto.spec import DemoContext

from ..secagg.audit import round_difference_finding, share_reading_finding
from ..secagg.math import SecAggConfig, encode_ring
from ..secagg.messages import SERVER, MaskedInput
from ..secagg.roles import client_names
from .data import digits_clients
from .defence import COVERS, DEFENCE, DEFENCES, DpFedAvg
from .math import HFLConfig
from .messages import CLIENT, Done, GlobalModel, PlainUpdate
from .roles import ClientData, ServerRole, run_local

__all__ = ["CHECKS", "DEFENDED_EPSILON", "MODEL_CONSISTENCY", "NOISE_CHECK", "ROUND_DIFFERENCE", "ROUND_DIFFERENCE_DP",
           "InconsistentServer", "audit_run", "demo_step", "dp_findings", "frontier", "model_inconsistency_finding",
           "noise_finding"]

#: the model-inconsistency attack succeeded: the server got the sum of clients that trained from different models
MODEL_CONSISTENCY = "model inconsistency: one client's update isolated from the sum"
ROUND_DIFFERENCE = "round difference: a dropped client's update from two rounds' sums"
ROUND_DIFFERENCE_DP = f"{ROUND_DIFFERENCE}, under DP-FedAvg"
_KIND = "secagg.masked_input"
NOISE_CHECK = f"{_KIND}: the sums carry DP-FedAvg's announced noise"
#: the audit's defended run: DP-FedAvg at the frontier's tightest budget (delta 1e-5, clip 1, m = every client)
DEFENDED_EPSILON = 1.0
_CONSISTENCY_KINDS = ("hfl.model", "secagg.advertise", "secagg.keys", "secagg.masked_input")
#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (*mask_checks("masked updates", "secagg.masked_input", correlation=Protection.AGGREGATE),
          Check("secagg.shares: self-mask seeds read from the relayed shares", ("secagg.shares",),
                Protection.CIPHERTEXT, "shares relayed unencrypted (the server reconstructs a self-mask seed)",
                EXACT),
          Check(MODEL_CONSISTENCY, ("secagg.advertise", "secagg.masked_input"), Protection.AGGREGATE,
                "clients that do not compare the model digests their neighbours signed (a server that sends one "
                "client another model isolates its update in the sum)", EXACT),
          Check(NOISE_CHECK, (_KIND,), Protection.DP, "the clients' DP-FedAvg noise dropped or scaled down (the sums "
                "carry less than half the announced variance)", 0.5))
#: non-IID clients: the share of each client's rows drawn from its two home classes
SKEW = 0.8
#: the victim of the model-inconsistency attack, and the class the server's model for it predicts for every row
VICTIM, VICTIM_CLASS = "client-4", 0
#: the scale that saturates the current model for the other clients (their correctly classified rows: no gradient)
SATURATE = 1e4


class InconsistentServer(ServerRole):
    """A malicious HFL server (Pasquini et al., CCS 2022): from ``start``, ``victim`` gets one model, the rest another.

    The paper's server chooses the parameters so that the aggregate carries the target's
    update only. For softmax regression, the other clients get the current model ``w``
    scaled by :data:`SATURATE` (saturated: every row it classifies correctly gives exactly
    no gradient) and the victim a model that puts every row in one class (every row of
    another class gives a full gradient). The sum is then mostly the victim's update.
    """

    def __init__(self, *, start: np.ndarray, victim: str = VICTIM, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state.w, self.victim = np.asarray(start, np.float64).copy(), victim

    def _broadcast(self) -> Next:
        nxt = super()._broadcast()
        w = self.state.w
        one_class = np.zeros((len(w) // self.C, self.C))
        one_class[-1, VICTIM_CLASS] = SATURATE  # the bias row: every row's logit of one class
        sends = []
        for to, msg in nxt.sends:
            if isinstance(msg, GlobalModel):
                msg = dataclasses.replace(msg, w=one_class.ravel() if to == self.victim else SATURATE * w)
            sends.append((to, msg))
        return Next(tuple(sends), nxt.wait, nxt.result)


def _r2(estimate: np.ndarray, truth: np.ndarray) -> float:
    """R^2 of ``estimate`` as ``truth`` (1: exact; 0: no better than truth's mean)."""
    return 1.0 - float(((truth - estimate) ** 2).sum()) / float(((truth - truth.mean()) ** 2).sum())


def model_inconsistency_finding(clients: list[ClientData], start: np.ndarray, honest: AuditTap, *,
                                victim: str = VICTIM) -> EmpiricalFinding:
    """Run one round with :class:`InconsistentServer` from the model ``start``; score what the server got.

    Value: R^2 of the round's sum (its model part) taken as the victim's update (its true
    update: scoring only); 0 when the round aborted and the server got no sum. Baseline:
    the server's best estimate of the victim's update without the attack, the sum divided
    by the number of survivors, in the honest run ``honest`` (mean over the rounds the
    victim survived). Exact: flags when the attacked round completed.
    """
    p = len(start)
    tap = AuditTap()
    server = functools.partial(InconsistentServer, start=start, victim=victim)
    try:
        run_local(clients, 10, config=HFLConfig(rounds=1), tap=tap, server=server)
        sums, refused = tap.held(SERVER, "aggregate"), ""
    except ProtocolError as exc:
        sums, refused = [], str(exc)
    base = [_r2(np.asarray(s)[:p] / len(alive), np.asarray(u)[:p])
            for s, alive, u in zip(honest.held(SERVER, "aggregate"), honest.held(SERVER, "survivors"),
                                   honest.held(victim, "update"), strict=False) if victim in alive]
    baseline = float(np.mean(base)) if base else None
    if sums:
        value = _r2(np.asarray(sums[0])[:p], np.asarray(tap.held(victim, "update")[0])[:p])
        what = (f"the round completed: the server's sum explains the victim's update with R^2 {value:.3f} (its "
                "update isolated; secure aggregation eluded)")
    else:
        value = 0.0
        what = f"the clients refused the round before any masked input (\"{refused}\"): no sum, R^2 0"
    return EmpiricalFinding(
        SERVER, MODEL_CONSISTENCY, value, baseline,
        f"a malicious server sends {victim} a model that puts every row in class {VICTIM_CLASS} and every other "
        f"client its current model x {SATURATE:g}, then takes the round's sum as {victim}'s update: {what}; "
        f"baseline: the honest run's sum / survivors as {victim}'s update (R^2, {len(base)} rounds); flags when the "
        "server obtains the sum of clients that trained from different models",
        attacks=_CONSISTENCY_KINDS, protection=Protection.AGGREGATE, flagged=bool(sums), samples=p,
        detects="exact (one round summed over different models)", min_effect=0.0, paper=PASQUINI_2022)


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """FedAvg on non-IID digits (5 clients, 3 rounds, one dropout), plaintext and over secagg; the server attacks.

    Plaintext: it reads every client's sample count n_i and update from ``hfl.update`` (by
    design of that mode). Secure: the masked inputs are tested for uniformity, fresh masks
    per round and correlation with the true updates; the share ciphertexts it relayed
    are read as plaintext shares; the round-difference and model-inconsistency attacks
    (module doc). Defended (DP-FedAvg at ε = 1, the same dropout): :func:`dp_findings`.
    ``key_bits`` is unused (X25519/AES-256).
    """
    clients, cfg, sa = digits_clients(5, seed=0, skew=SKEW), HFLConfig(rounds=3), SecAggConfig()
    names = client_names(len(clients))
    drop = {names[4]: (2, "masked")}
    ptap, stap = AuditTap(), AuditTap()
    plain = run_local(clients, 10, config=HFLConfig(rounds=3, secure=False), tap=ptap, vanish=drop)
    secure = run_local(clients, 10, config=cfg, tap=stap, vanish=drop)
    read = sent = 0
    for i, n in enumerate(names):
        for msg in ptap.received(SERVER, PlainUpdate, sender=n):
            vec = np.asarray(msg.y).view(np.int64).astype(np.float64) / 2.0 ** sa.frac_bits
            read += int(round(vec[-1]) == len(clients[i].y))  # the last entry: n_i
            sent += 1
    findings: list[EmpiricalFinding] = [EmpiricalFinding(
        SERVER, "hfl.update: each client's sample count and update (plaintext mode)", float(read), 0.0,
        f"the server decodes every plaintext update: n_i read exactly in {read} of {sent} updates, "
        "and the update itself; by design of --plain", attacks=("hfl.update",), flagged=read > 0,
        samples=sent, detects="exact")]
    streams = [[m.y.tolist() for m in stap.received(SERVER, MaskedInput, sender=n)] for n in names]
    truth = [[encode_ring(v, sa.frac_bits, sa.value_bits).view(np.int64).astype(np.float64)
              for v in stap.held(n, "update")][: len(streams[i])] for i, n in enumerate(names)]
    findings += ring_mask_findings(SERVER, "secagg.masked_input", "masked updates", streams, 1 << 64, truth=truth,
                                   truth_protection=Protection.AGGREGATE)
    findings.append(share_reading_finding(stap, names))
    p = len(secure.result.w)
    updates = {n: [np.asarray(u) for u in stap.held(n, "update")] for n in names}
    diff = round_difference_finding(stap, updates, what="update (its model part)", coords=slice(0, p),
                                    name=ROUND_DIFFERENCE)
    sums, alive = stap.held(SERVER, "aggregate"), [set(a) for a in stap.held(SERVER, "survivors")]
    exact = []
    for a, b in ((a, b) for a in range(len(sums)) for b in range(len(sums)) if alive[b] < alive[a]):
        if len(alive[a] - alive[b]) == 1:
            (who,) = alive[a] - alive[b]
            exact.append(f"{who}: {float(sums[a][p] - sums[b][p]):g} (true {len(clients[names.index(who)].y)})")
    findings.append(dataclasses.replace(diff, description=f"{diff.description}; the sample-count entry of each "
                                        f"difference is the client's n_i exactly: {', '.join(exact)}"))
    findings.append(model_inconsistency_finding(clients, secure.result.w, stap))
    dtap = AuditTap()
    dcfg = HFLConfig(rounds=3, dp_epsilon=DEFENDED_EPSILON)
    defended = run_local(clients, 10, config=dcfg, tap=dtap, vanish=drop)
    dp = dcfg.dp(len(clients))
    assert dp is not None  # dp_epsilon is set
    findings += dp_findings(dtap, dp, names, p)
    runs = {"plaintext updates": plain.transcript, "secure aggregation": secure.transcript,
            f"DP-FedAvg (epsilon = {DEFENDED_EPSILON:g}) over secure aggregation": defended.transcript}
    report, sections = audit_runs(runs)
    w_plain = np.asarray(ptap.received(names[0], Done)[-1].w)
    w_secure = np.asarray(stap.received(names[0], Done)[-1].w)
    findings.append(verified_result(
        CLIENT, "the global model over secure aggregation equals the plaintext one", float(np.max(np.abs(
            w_secure - w_plain))), 0.0, "the final model a client received (hfl.done) in the secure run against "
        "the one of the plaintext run: secure aggregation must change nothing but what the server sees",
        attacks=("hfl.done",), samples=int(w_plain.size)))
    same = bool(np.array_equal(plain.result.w, secure.result.w))
    g = defended.result.privacy[DEFENCE]
    metrics = {"test_accuracy": float(secure.test_accuracy or 0.0), "secure_equals_plain": float(same),
               "defended_test_accuracy": float(defended.test_accuracy or 0.0), "defended_epsilon": g["epsilon"],
               "defended_delta": g["delta"], "defended_round_difference_r": _value(findings, ROUND_DIFFERENCE_DP)}
    return AuditOutcome("hfl", report, tuple(findings), metrics, sections=sections, transcripts=tuple(runs.items()))


def _value(findings: Sequence[EmpiricalFinding], name: str) -> float:
    """The value of the finding ``name`` (NaN when it is missing)."""
    return next((f.value for f in findings if f.name == name), float("nan"))


def noise_finding(tap: AuditTap, dp: DpFedAvg, p: int) -> EmpiricalFinding:
    """Every sum the server obtained carries at least DP-FedAvg's announced noise.

    Each round's sum (the server's output, its model part) minus the survivors' true clipped
    updates (the clients' own vectors before their noise: the audit's ground truth, for
    scoring only) is the noise in it, N(0, σ²C² s_r / m) per coordinate with s_r survivors;
    scaled by √(m / s_r) to σC and tested by :func:`noise_floor_finding` (chi-square lower
    tail: less variance than announced means noise missing).
    """
    rows = []
    for r, (total, alive) in enumerate(zip(tap.held(SERVER, "aggregate"), tap.held(SERVER, "survivors"),
                                           strict=False)):
        clean = [np.asarray(tap.held(c, "update")[r], np.float64)[:p] for c in alive]
        scale = math.sqrt(dp.min_clients / len(alive))
        rows.append((np.asarray(total, np.float64)[:p] - np.sum(clean, axis=0)) * scale)
    if not rows:
        return not_measured(SERVER, NOISE_CHECK, (_KIND,), Protection.DP, "the server obtained no sum")
    f = noise_floor_finding(SERVER, NOISE_CHECK, rows, dp.noise_multiplier * dp.clip, attacks=(_KIND,))
    return dataclasses.replace(f, description=f"each round's sum minus the survivors' true clipped updates (ground "
                                              f"truth), scaled to sigma*C = {dp.noise_multiplier * dp.clip:.4g}: "
                                              f"{f.description}")


def dp_findings(tap: AuditTap, dp: DpFedAvg, names: Sequence[str], p: int) -> list[EmpiricalFinding]:
    """The defended run's findings: :func:`noise_finding` and the round-difference attack on its sums (its target
    each client's clipped update before its noise)."""
    updates = {n: [np.asarray(u) for u in tap.held(n, "update")] for n in names}
    return [noise_finding(tap, dp, p),
            round_difference_finding(tap, updates, what="clipped update (DP-FedAvg)", coords=slice(0, p),
                                     name=ROUND_DIFFERENCE_DP)]


#: the frontier's population: the audit's non-IID digits over 50 clients (SecAgg+, 8 neighbours each), 3 rounds, the
#: last client dropping out of the last round; DP-FedAvg's noise is shared among clients, so its cost falls with them
FRONTIER_CLIENTS, FRONTIER_DEGREE = 50, 8
#: the frontier's columns: attack -> what it is
FRONTIER_ATTACKS = {
    "round_difference_r": "round difference (So et al., AAAI 2023): the sums of two rounds whose survivors differ by "
                          "the dropped client, subtracted, as its update (its clipped update under DP-FedAvg), "
                          "Pearson r (baseline: two rounds with the same survivors against the same update)",
    "round_difference_r2": "the same differences as estimates of the update, R^2 (1: exact; 0: no better than the "
                           "update's own mean; baseline 0)",
    "sample_count": "the share of those differences whose count entry is the dropped client's n_i exactly (DP-FedAvg "
                    "sends weight 1 instead; baseline 0)",
}


def _difference_extras(tap: AuditTap, n_rows: dict[str, int], p: int) -> tuple[float, float]:
    """R^2 (pooled) of every two rounds' difference whose survivors differ by one client as that client's update,
    and the share of them whose count entry equals its n_i (rounded)."""
    sums, alive = tap.held(SERVER, "aggregate"), [set(a) for a in tap.held(SERVER, "survivors")]
    res = tot = 0.0
    exact = pairs = 0
    for a in range(len(sums)):
        for b in range(len(sums)):
            if alive[b] < alive[a] and len(alive[a] - alive[b]) == 1:
                (v,) = alive[a] - alive[b]
                d = np.asarray(sums[a], np.float64) - np.asarray(sums[b], np.float64)
                t = np.asarray(tap.held(v, "update")[a], np.float64)[:p]
                res, tot = res + float(((t - d[:p]) ** 2).sum()), tot + float(((t - t.mean()) ** 2).sum())
                exact, pairs = exact + int(round(float(d[p])) == n_rows[v]), pairs + 1
    return (1.0 - res / tot if tot else float("nan")), (exact / pairs if pairs else float("nan"))


def _point(clients: list[ClientData], cfg: HFLConfig, sa: SecAggConfig, budget: float | None,
           repeats: int) -> FrontierPoint:
    """One budget's point: the mean over ``repeats`` runs of the test accuracy and the attacks' scores."""
    t0 = time.perf_counter()
    names = client_names(len(clients))
    drop = {names[-1]: (cfg.rounds - 1, "masked")}
    n_rows = {n: len(c.y) for n, c in zip(names, clients, strict=True)}
    scores: dict[str, list[float]] = {}
    baselines: dict[str, float] = {"round_difference_r2": 0.0, "sample_count": 0.0}
    accuracy: list[float] = []
    privacy: dict[str, Any] = {}
    for _ in range(repeats):
        tap = AuditTap()
        run = run_local(clients, 10, config=cfg, secagg=sa, tap=tap, vanish=drop, timeout=30.0)
        accuracy.append(float(run.test_accuracy or 0.0))
        p, privacy = len(run.result.w), run.result.privacy
        updates = {n: [np.asarray(u) for u in tap.held(n, "update")] for n in names}
        diff = round_difference_finding(tap, updates, coords=slice(0, p))
        r2, count = _difference_extras(tap, n_rows, p)
        for key, value in (("round_difference_r", diff.value), ("round_difference_r2", r2), ("sample_count", count)):
            scores.setdefault(key, []).append(value)
        baselines["round_difference_r"] = float(diff.baseline or 0.0)
    g = privacy.get(DEFENCE)
    return FrontierPoint(budget, g["epsilon"] if g else None, g["delta"] if g else None, float(np.mean(accuracy)),
                         {k: float(np.mean(v)) for k, v in scores.items()}, baselines,
                         dict(g["params"]) if g else {}, time.perf_counter() - t0, repeats)


def frontier(defence: str, budgets: Sequence[float], repeats: int = 1, *,
             clients: int = FRONTIER_CLIENTS) -> Frontier:
    """The test accuracy and the round-difference attack of FedAvg on the non-IID digits over ``clients`` clients
    (3 rounds, the last client dropping out of the last round) at each ε of ``budgets`` under DP-FedAvg (noise
    calibrated to (ε, δ = 1e-5) over the rounds, clip 1, m = every client: the ε reported is the realised one,
    accounted with the survivors of every round), beside the undefended run; each point the mean of ``repeats``
    runs (fresh noise each)."""
    if defence not in DEFENCES:
        raise InputDataError(f"hfl's defences are {', '.join(DEFENCES)}, not {defence!r}")
    if repeats < 1:
        raise InputDataError(f"the frontier needs >= 1 run per budget, got {repeats}")
    data = digits_clients(clients, seed=0, skew=SKEW)
    sa = SecAggConfig(degree=FRONTIER_DEGREE if clients > FRONTIER_DEGREE + 1 else None)
    points = [_point(data, HFLConfig(rounds=3), sa, None, repeats)]
    points += [_point(data, HFLConfig(rounds=3, dp_epsilon=b), sa, b, repeats) for b in budgets]
    graph = f"SecAgg+ with {sa.degree} neighbours" if sa.degree else "every client a neighbour"
    statement = (f"{defence} protects {COVERS}; FedAvg on the non-IID digits (skew {SKEW:g}) over {clients} clients "
                 f"({graph}), 3 rounds, the last client dropping out of the last round; delta 1e-5, clip 1, each "
                 "client's noise shared for m = every client, epsilon realised (accounted with each round's survivors)")
    return Frontier("hfl", defence, statement, tuple(points), FRONTIER_ATTACKS)


def demo_step(ctx: DemoContext) -> dict[str, Any]:
    """FedAvg, FedProx and SCAFFOLD on non-IID digits over secure aggregation; one client drops in round 2."""
    clients = digits_clients(5, seed=0, skew=0.8)
    rounds = 5 if ctx.quick else 10
    out: dict[str, Any] = {}
    for alg in ("fedavg", "fedprox", "scaffold"):
        t0 = time.perf_counter()
        run = run_local(clients, 10, config=HFLConfig(algorithm=alg, rounds=rounds),
                        vanish={"client-4": (1, "masked")}, timeout=5)
        secs = time.perf_counter() - t0
        surv = [len(s) for s in run.result.survivors]
        ctx.say(f"{alg:>8}: {rounds} rounds, test accuracy {run.test_accuracy:.1%}, survivors {surv}, "
                f"{run.transcript.total_bytes:,} B, {secs:.1f} s")
        out[alg] = {"test_accuracy": run.test_accuracy, "survivors": surv, "seconds": round(secs, 3)}
    return out
