"""The secure-aggregation audit (the server attacks what it received) and the demo step."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from vflcrypto.audit.attacks import ring_mask_findings
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit
from vflcrypto.errors import ProtocolError
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection
from vflcrypto.sharing.shamir import SHARE_BYTES, reconstruct
from vflcrypto.spec import DemoContext

from .math import SecAggConfig, encode_ring
from .messages import SERVER, MaskedInput, Setup, Shares
from .roles import client_names, run_local

__all__ = ["audit_run", "demo_step", "share_reading_finding"]

RING = 1 << 64


def _inputs(n: int = 6, rounds: int = 3, length: int = 300) -> list[list[np.ndarray]]:
    """Slowly changing inputs over rounds, like model updates (public example data)."""
    rng = np.random.default_rng(0)  # example data, not secret
    base = [rng.normal(size=length) for _ in range(n)]
    return [[b + 0.01 * r for r in range(rounds)] for b in base]


def share_reading_finding(tap: AuditTap, clients: list[str]) -> EmpiricalFinding:
    """The server reads the share ciphertexts it relayed as plaintext shares and tries each client's self-mask seed."""
    recovered, tried = 0, 0
    setup = tap.received(clients[0], Setup)[0]
    for u in clients:
        for msg, seed in zip(tap.received(SERVER, Shares, sender=u), tap.held(u, "self_mask_seed"), strict=False):
            pts = {}
            for v, ct in zip(msg.to, msg.ciphertexts, strict=True):
                body = ct if len(ct) == 2 * SHARE_BYTES else ct[12:12 + 2 * SHARE_BYTES]
                pts[setup.clients.index(v) + 1] = int.from_bytes(body[SHARE_BYTES:], "big")
            tried += 1
            try:
                got = reconstruct(pts, setup.threshold)
            except ProtocolError:  # garbage shares (the honest case) do not interpolate to a seed
                got = -1
            recovered += int(got == int.from_bytes(seed, "big"))
    return EmpiricalFinding(
        SERVER, "secagg.shares: self-mask seeds read from the relayed shares", float(recovered), 0.0,
        f"the server parses the {tried} share messages it relayed as plaintext Shamir shares and "
        "reconstructs each client's self-mask seed (compared with the seed the client held)",
        attacks=("secagg.shares",), protection=Protection.CIPHERTEXT, flagged=recovered > 0, samples=tried,
        detects="exact (one seed recovered)")


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """Six clients, three rounds of slowly changing vectors, one client dropping in round 2; the server attacks.

    * its masked inputs, per client over rounds: uniform mod 2^64, fresh per round
      (a reused mask cancels in the differences), uncorrelated with the inputs;
    * the share ciphertexts it relayed, read as plaintext shares.

    No key size applies (X25519 and AES-256 are fixed); ``key_bits`` is unused.
    """
    inputs, cfg = _inputs(), SecAggConfig()
    clients = client_names(len(inputs))
    tap = AuditTap()
    run = run_local(inputs, config=cfg, vanish={clients[5]: (2, "masked")}, tap=tap)
    streams = [[m.y.tolist() for m in tap.received(SERVER, MaskedInput, sender=c)] for c in clients]
    truth = [[encode_ring(x, cfg.frac_bits, cfg.value_bits).view(np.int64).astype(np.float64)
              for x in tap.held(c, "input")][: len(streams[i])] for i, c in enumerate(clients)]
    findings = ring_mask_findings(SERVER, "secagg.masked_input", "masked inputs", streams, RING, truth=truth,
                                  truth_protection=Protection.AGGREGATE)
    findings.append(share_reading_finding(tap, clients))
    exact = all(np.allclose(r.total, np.sum([inputs[clients.index(c)][k] for c in r.survivors], 0), atol=1e-5)
                for k, r in enumerate(run.rounds))
    findings.append(EmpiricalFinding(
        SERVER, "the sum over the survivors (the output)", float(len(run.rounds[-1].survivors)), None,
        f"the server learns each round's sum over the survivors and who survived (round 3: "
        f"{len(run.rounds[-1].survivors)} of {len(clients)}); sums exact: {exact}; by design",
        attacks=("secagg.survivors",), flagged=True, samples=len(run.rounds), detects="exact"))
    return AuditOutcome("secagg", audit(run.transcript), tuple(findings),
                        {"survivors_last_round": float(len(run.rounds[-1].survivors))},
                        transcripts=(("secure aggregation", run.transcript),))


def demo_step(ctx: DemoContext) -> dict[str, Any]:
    """Ten clients sum 10,000 values each; two vanish mid-round; the sum over the survivors is exact."""
    rng = np.random.default_rng(7)  # example data
    xs = [rng.normal(size=10_000) for _ in range(10)]
    t0 = time.perf_counter()
    run = run_local(xs, vanish={"client-3": (0, "masked"), "client-8": (0, "shares")}, timeout=5)
    secs = time.perf_counter() - t0
    res = run.rounds[0]
    want = np.sum([xs[int(c.split("-")[1])] for c in res.survivors], 0)
    err = float(np.abs(res.total - want).max())
    ctx.say(f"10 clients, 2 dropped mid-round: sum over {len(res.survivors)} survivors, max error {err:.1e} "
            f"(fixed point 2^-24), {run.transcript.total_bytes:,} B, {secs:.2f} s")
    return {"survivors": len(res.survivors), "max_error": err, "bytes": run.transcript.total_bytes,
            "seconds": round(secs, 3)}
