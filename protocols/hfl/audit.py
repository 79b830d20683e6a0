"""The HFL audit: what the server reads from the updates, plaintext against secure, and the demo step."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import ring_mask_findings
from vflcrypto.audit.checks import EXACT, Check, mask_checks, verified_result
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit_runs
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection
from vflcrypto.spec import DemoContext

from ..secagg.audit import share_reading_finding
from ..secagg.math import SecAggConfig, encode_ring
from ..secagg.messages import SERVER, MaskedInput
from ..secagg.roles import client_names
from .data import digits_clients
from .math import HFLConfig
from .messages import CLIENT, Done, PlainUpdate
from .roles import run_local

__all__ = ["CHECKS", "audit_run", "demo_step"]

#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (*mask_checks("masked updates", "secagg.masked_input", correlation=Protection.AGGREGATE),
          Check("secagg.shares: self-mask seeds read from the relayed shares", ("secagg.shares",),
                Protection.CIPHERTEXT, "shares relayed unencrypted (the server reconstructs a self-mask seed)",
                EXACT))


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """FedAvg on the digits (5 clients, 3 rounds), plaintext and over secagg; the server attacks the updates.

    Plaintext: it reads every client's sample count n_i and update from ``hfl.update`` (by
    design of that mode). Secure: the masked inputs are tested for uniformity, fresh masks
    per round and correlation with the true updates; the share ciphertexts it relayed
    are read as plaintext shares. ``key_bits`` is unused (X25519/AES-256).
    """
    clients, cfg, sa = digits_clients(5, seed=0), HFLConfig(rounds=3), SecAggConfig()
    names = client_names(len(clients))
    ptap, stap = AuditTap(), AuditTap()
    plain = run_local(clients, 10, config=HFLConfig(rounds=3, secure=False), tap=ptap)
    secure = run_local(clients, 10, config=cfg, tap=stap)
    read = 0
    for i, n in enumerate(names):
        for msg in ptap.received(SERVER, PlainUpdate, sender=n):
            vec = np.asarray(msg.y).view(np.int64).astype(np.float64) / 2.0 ** sa.frac_bits
            read += int(round(vec[-1]) == len(clients[i].y))  # the last entry: n_i
    findings: list[EmpiricalFinding] = [EmpiricalFinding(
        SERVER, "hfl.update: each client's sample count and update (plaintext mode)", float(read), 0.0,
        f"the server decodes every plaintext update: n_i read exactly in {read} of {3 * len(names)} updates, "
        "and the update itself; by design of --plain", attacks=("hfl.update",), flagged=read > 0,
        samples=3 * len(names), detects="exact")]
    streams = [[m.y.tolist() for m in stap.received(SERVER, MaskedInput, sender=n)] for n in names]
    truth = [[encode_ring(v, sa.frac_bits, sa.value_bits).view(np.int64).astype(np.float64)
              for v in stap.held(n, "update")] for n in names]
    findings += ring_mask_findings(SERVER, "secagg.masked_input", "masked updates", streams, 1 << 64, truth=truth,
                                   truth_protection=Protection.AGGREGATE)
    findings.append(share_reading_finding(stap, names))
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
