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
  server nevertheless obtains the sum of clients that trained from different models.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import ring_mask_findings
from vflcrypto.audit.checks import EXACT, Check, mask_checks, verified_result
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit_runs
from vflcrypto.audit.literature import PASQUINI_2022
from vflcrypto.errors import ProtocolError
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection
from vflcrypto.runtime.steps import Next
from vflcrypto.spec import DemoContext

from ..secagg.audit import round_difference_finding, share_reading_finding
from ..secagg.math import SecAggConfig, encode_ring
from ..secagg.messages import SERVER, MaskedInput
from ..secagg.roles import client_names
from .data import digits_clients
from .math import HFLConfig
from .messages import CLIENT, Done, GlobalModel, PlainUpdate
from .roles import ClientData, ServerRole, run_local

__all__ = ["CHECKS", "MODEL_CONSISTENCY", "ROUND_DIFFERENCE", "InconsistentServer", "audit_run", "demo_step",
           "model_inconsistency_finding"]

#: the model-inconsistency attack succeeded: the server got the sum of clients that trained from different models
MODEL_CONSISTENCY = "model inconsistency: one client's update isolated from the sum"
ROUND_DIFFERENCE = "round difference: a dropped client's update from two rounds' sums"
_CONSISTENCY_KINDS = ("hfl.model", "secagg.advertise", "secagg.keys", "secagg.masked_input")
#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (*mask_checks("masked updates", "secagg.masked_input", correlation=Protection.AGGREGATE),
          Check("secagg.shares: self-mask seeds read from the relayed shares", ("secagg.shares",),
                Protection.CIPHERTEXT, "shares relayed unencrypted (the server reconstructs a self-mask seed)",
                EXACT),
          Check(MODEL_CONSISTENCY, ("secagg.advertise", "secagg.masked_input"), Protection.AGGREGATE,
                "clients that do not compare the model digests their neighbours signed (a server that sends one "
                "client another model isolates its update in the sum)", EXACT))
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
    (module doc). ``key_bits`` is unused (X25519/AES-256).
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
    runs = {"plaintext updates": plain.transcript, "secure aggregation": secure.transcript}
    report, sections = audit_runs(runs)
    w_plain = np.asarray(ptap.received(names[0], Done)[-1].w)
    w_secure = np.asarray(stap.received(names[0], Done)[-1].w)
    findings.append(verified_result(
        CLIENT, "the global model over secure aggregation equals the plaintext one", float(np.max(np.abs(
            w_secure - w_plain))), 0.0, "the final model a client received (hfl.done) in the secure run against "
        "the one of the plaintext run: secure aggregation must change nothing but what the server sees",
        attacks=("hfl.done",), samples=int(w_plain.size)))
    same = bool(np.array_equal(plain.result.w, secure.result.w))
    return AuditOutcome("hfl", report, tuple(findings),
                        {"test_accuracy": float(secure.test_accuracy or 0.0), "secure_equals_plain": float(same)},
                        sections=sections, transcripts=tuple(runs.items()))


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
