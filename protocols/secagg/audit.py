"""The secure-aggregation audit (the server attacks what it received) and the demo step.

The scenario of :func:`audit_run`: six clients, three rounds of 300 slowly changing values
(like model updates); client-4's masked input of round 1 reaches the server after its wait
(a *late* client, ``run_local(late=...)``: the server holds the masked input and, having
counted the client as dropped, gets the survivors' shares of its mask key: the case the
self-mask exists for); client-5 drops in round 2 after sharing. The semi-honest server
attacks, with what it received and what it computes itself (Bonawitz et al., CCS 2017, §4):

* the masked inputs y_u: uniform mod 2^64, fresh per round, uncorrelated with the inputs;
* the relayed share ciphertexts, read as plaintext shares;
* the self-mask removal: the t shares of b_u it receives by design give every survivor's
  PRG(b_u); what is left, r_u = x_u + Σ_v ±PRG(s_uv), must still be uniform, fresh per round
  (a pairwise mask that repeats across rounds cancels in the differences) and uncorrelated
  with x_u; and it must not come off with pairwise seeds the server computes from public
  material alone (:data:`KEY_AGREEMENT`);
* the late client: y_u minus every mask the server can reconstruct (its pairwise masks,
  from its mask key) must still be uniform and uncorrelated with x_u;
* the unmasking shares: the server never gets t shares of both secrets of one client;
* the output: the sum it computed over the survivors equals the survivors' inputs' sum;
* across rounds (by design, the audit's scorecard): the round-difference attack of So et
  al. (AAAI 2023): the sums of two rounds whose survivors differ by one client subtract to
  that client's input, up to the others' drift (:func:`~vflcrypto.audit.literature.round_difference`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from vflcrypto.audit.attacks import not_measured, ring_mask_findings
from vflcrypto.audit.checks import EXACT, Check, mask_checks
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit
from vflcrypto.audit.literature import round_difference
from vflcrypto.errors import ProtocolError
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection
from vflcrypto.sharing.masking import derive_seed, ring_dtype
from vflcrypto.sharing.shamir import SHARE_BYTES, reconstruct
from vflcrypto.spec import DemoContext

from . import math as sm
from .messages import SERVER, Advertise, MaskedInput, Setup, Shares, Unmask
from .roles import SecAggRun, client_names, run_local

__all__ = ["BOTH_SECRETS", "CHECKS", "KEY_AGREEMENT", "ROUND_DIFFERENCE", "SUM_EXACT", "audit_run", "demo_step",
           "round_difference_finding", "share_reading_finding"]

RING = 1 << 64
SHARES_READ = "secagg.shares: self-mask seeds read from the relayed shares"
#: the server removes pairwise masks whose seeds it computes from public material (names, run, keys)
KEY_AGREEMENT = "key agreement: pairwise masks from public material removed"
#: the server holds t shares of both the self-mask seed and the mask key of one client
BOTH_SECRETS = "secagg.unmask: both secrets of one client reconstructable"
SUM_EXACT = "the sum over the survivors is exact"
OUTPUT = "the sum over the survivors (the output)"
#: So et al. (AAAI 2023): two rounds' sums whose survivors differ by one client subtract to its input
ROUND_DIFFERENCE = "round difference: a dropped client's input from two rounds' sums"
_MASKED, _REMAINDER, _LATE = ("masked inputs", "remainders after the self-masks are removed",
                              "a late client's input after the masks the server reconstructs are removed")

_KIND = "secagg.masked_input"
_UNMASKING = ("secagg.masked_input", "secagg.unmask")
#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS: tuple[Check, ...] = (
    *mask_checks(_MASKED, _KIND, correlation=Protection.AGGREGATE),
    Check(SHARES_READ, ("secagg.shares",), Protection.CIPHERTEXT,
          "shares relayed unencrypted (the server reconstructs a self-mask seed)", EXACT),
    *mask_checks(_REMAINDER, _KIND, correlation=Protection.AGGREGATE),
    Check(KEY_AGREEMENT, _UNMASKING, Protection.AGGREGATE,
          "pairwise seeds the server can compute (a constant or broken key agreement): an input recovered", EXACT),
    *mask_checks(_LATE, _KIND, fresh=False, correlation=Protection.AGGREGATE),
    Check(BOTH_SECRETS, ("secagg.unmask",), Protection.AGGREGATE,
          "shares of a client's self-mask seed and of its mask key both revealed (t of each)", EXACT),
    Check(SUM_EXACT, _UNMASKING, Protection.AGGREGATE,
          "a wrong unmasking (a mask left in the sum, an input left out or counted twice)", EXACT),
)


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
        SERVER, SHARES_READ, float(recovered), 0.0,
        f"the server parses the {tried} share messages it relayed as plaintext Shamir shares and "
        "reconstructs each client's self-mask seed (compared with the seed the client held)",
        attacks=("secagg.shares",), protection=Protection.CIPHERTEXT, flagged=recovered > 0, samples=tried,
        detects="exact (one seed recovered)", min_effect=0.0)


# --------------------------------------------------------------------------- the server's view of a round


@dataclass
class _Round:
    """What the server holds after one round: its setup, whom it counted, the keys, inputs and shares it got."""

    setup: Setup
    survivors: list[str]  # the server's own U3 (its output)
    shared: list[str]  # U2: who sent shares
    s_pks: dict[str, bytes]  # advertised mask-agreement keys
    ys: dict[str, np.ndarray]  # every masked input it read (a late one included)
    b_points: dict[str, dict[int, int]] = field(default_factory=dict)  # Shamir shares from the Unmask messages
    s_points: dict[str, dict[int, int]] = field(default_factory=dict)

    def secret(self, points: dict[str, dict[int, int]], owner: str) -> bytes | None:
        """A 32-byte secret from t shares, or None (fewer, or they do not interpolate to one)."""
        try:
            value = reconstruct(points.get(owner, {}), self.setup.threshold)
        except ProtocolError:
            return None
        return value.to_bytes(32, "big") if value < 1 << 256 else None

    def pair_peers(self, u: str) -> list[str]:
        """The clients u masked pairwise with: its neighbours that shared (the senders forwarded to it)."""
        nb = set(self.setup.neighbours[self.setup.clients.index(u)])
        return [v for v in self.shared if v in nb and v != u]


def _rounds(tap: AuditTap, run: SecAggRun, clients: list[str]) -> list[_Round]:
    """The server's view of every round, from what it received (and the setups and survivor lists it made)."""
    setups = {s.round: s for s in tap.received(clients[0], Setup)}  # the server's own setups, as client-0 got them
    out = []
    for k, res in enumerate(run.rounds):
        view = _Round(setups[k], list(res.survivors),
                      [r.entry.sender for r in tap.records(SERVER, Shares) if r.message.round == k],
                      {r.entry.sender: r.message.s_pk for r in tap.records(SERVER, Advertise) if r.message.round == k},
                      {r.entry.sender: np.asarray(r.message.y) for r in tap.records(SERVER, MaskedInput)
                       if r.message.round == k})
        for r in tap.records(SERVER, Unmask):
            msg, x = r.message, setups[k].clients.index(r.entry.sender) + 1
            if msg.round != k:
                continue
            for owners, shares, points in ((msg.b_owners, msg.b_shares, view.b_points),
                                           (msg.s_owners, msg.s_shares, view.s_points)):
                for owner, sh in zip(owners, shares, strict=True):
                    points.setdefault(owner, {})[x] = int.from_bytes(sh, "big")
        out.append(view)
    return out


def _signed(v: np.ndarray) -> np.ndarray:
    """Ring residues as signed integers (two's complement), as floats."""
    return (v.view(np.int64) if v.dtype == np.uint64 else v.astype(np.uint32).view(np.int32)).astype(np.float64)


def _inputs_held(tap: AuditTap, clients: list[str]) -> dict[str, list[np.ndarray]]:
    """Ground truth for scoring only: each client's input of every round it began (in round order)."""
    return {c: [np.asarray(x, np.float64) for x in tap.held(c, "input")] for c in clients}


# --------------------------------------------------------------------------- the attacks


def remainder_findings(views: Sequence[_Round], clients: list[str], truth: dict[str, list[np.ndarray]]
                       ) -> tuple[list[EmpiricalFinding], dict[tuple[int, str], np.ndarray]]:
    """The server removes each survivor's self-mask (its seed b_u from t Unmask shares) and tests the remainder.

    r_u = y_u − PRG(b_u) = x_u + Σ_v ±PRG(s_uv) is what the server may compute by design;
    the pairwise masks alone must keep it uniform mod 2^b, fresh in every round and
    uncorrelated with x_u (:func:`ring_mask_findings`). Returns the findings and the
    remainders by (round, client) for :func:`key_agreement_finding`.
    """
    rem: dict[tuple[int, str], np.ndarray] = {}
    for k, view in enumerate(views):
        s = view.setup
        for u in view.survivors:
            b = view.secret(view.b_points, u)
            if b is not None and u in view.ys:
                rem[k, u] = view.ys[u] - sm.self_mask(b, s.length, s.ring_bits)
    streams = [[rem[k, c].tolist() for k in range(len(views)) if (k, c) in rem] for c in clients]
    held = [[truth[c][k] for k in range(len(views)) if (k, c) in rem] for c in clients]
    found = ring_mask_findings(SERVER, _KIND, _REMAINDER, streams, 1 << views[0].setup.ring_bits, truth=held,
                               truth_protection=Protection.AGGREGATE)
    return found, rem


_RULES = ("an all-zero seed", "the KDF of an all-zero X25519 output", "the KDF of the context alone",
          "the KDF of the two public keys")


def _public_seeds(view: _Round, run_id: str, k: int, u: str, v: str) -> list[bytes]:
    """Pair seeds of (u, v) a broken key agreement would give and the server can compute from public material.

    An all-zero seed (the agreement skipped, or a constant); the protocol's KDF applied
    to an all-zero X25519 output (a low-order public key, or the exchange skipped with the
    KDF kept), to no secret at all (the context alone), and to the two advertised public
    keys in place of the shared secret (an "agreement" that hashes public values). Each
    bound to the pair, run and round as the protocol binds it.
    """
    ctx = sm.pair_context(u, v, run_id, k)
    lo, hi = sorted((u, v))
    return [bytes(32), derive_seed(bytes(32), ctx), derive_seed(b"", ctx),
            derive_seed(view.s_pks.get(lo, b"") + view.s_pks.get(hi, b""), ctx)]


def key_agreement_finding(views: Sequence[_Round], rem: dict[tuple[int, str], np.ndarray], run_id: str,
                          truth: dict[str, list[np.ndarray]]) -> EmpiricalFinding:
    """The server strips from each remainder r_u the pairwise masks of seeds it can compute itself.

    For every survivor u of every round and each candidate rule of :func:`_public_seeds`,
    it subtracts Σ_v ±PRG(seed(u, v)) over the clients u masked with and accepts the result
    as x_u when every value lies within the inputs' public bound 2^value_bits (a residue
    of uniform masks does with probability 2^(value_bits + 1 − ring_bits) per value, 2^-23
    here: never for 300 values). Exact: flags one recovered input. Scored against the
    clients' true inputs (ground truth, not the attacker's input).
    """
    tried = recovered = correct = 0
    for (k, u), r in rem.items():
        view = views[k]
        s = view.setup
        seeds = {v: _public_seeds(view, run_id, k, u, v) for v in view.pair_peers(u)}
        for rule in range(len(_RULES)):
            z = r.copy()
            for v, candidates in seeds.items():
                z = z - sm.expand_pair(candidates[rule], u, v, s.length, s.ring_bits)
            tried += 1
            if bool(np.all(np.abs(_signed(z)) < 2.0 ** s.value_bits)):
                recovered += 1
                want = sm.encode_ring(truth[u][k], s.frac_bits, s.value_bits, s.ring_bits)
                correct += int(np.array_equal(z, want))
    if not tried:
        return not_measured(SERVER, KEY_AGREEMENT, _UNMASKING, Protection.AGGREGATE,
                            "no survivor's self-mask seed reconstructed: no remainder to strip")
    return EmpiricalFinding(
        SERVER, KEY_AGREEMENT, float(recovered), 0.0,
        f"the server removes each survivor's self-mask, then the pairwise masks of seeds computable from public "
        f"material ({'; '.join(_RULES)}), and accepts a vector within the input bound: {recovered} of {tried} tries "
        f"({len(rem)} survivor-rounds x {len(_RULES)} rules) give one, {correct} equal to the client's input",
        attacks=_UNMASKING, protection=Protection.AGGREGATE, flagged=recovered > 0,
        samples=tried, detects="exact (one input recovered)", min_effect=0.0)


def late_findings(views: Sequence[_Round], run_id: str, truth: dict[str, list[np.ndarray]]
                  ) -> list[EmpiricalFinding]:
    """A late client: the server read its masked input but counted it as dropped and so got its mask key.

    From the survivors' t shares of s_u it removes u's pairwise masks (and, if it also got t
    shares of b_u, the self-mask: the protocol never gives both). What is left, x_u + PRG(b_u),
    must be uniform and uncorrelated with x_u: only the self-mask protects it.
    """
    streams: list[list[list[int]]] = []
    held: list[list[np.ndarray]] = []
    for k, view in enumerate(views):
        s = view.setup
        for u, y in view.ys.items():
            raw = view.secret(view.s_points, u) if u not in view.survivors else None
            if raw is None:
                continue
            s_sk = X25519PrivateKey.from_private_bytes(raw)
            if s_sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw) != view.s_pks.get(u):
                continue
            z = y.copy()
            for v in view.pair_peers(u):
                z = z - sm.pair_mask(s_sk, view.s_pks[v], u, v, run_id, k, s.length, s.ring_bits)
            b = view.secret(view.b_points, u)
            if b is not None:
                z = z - sm.self_mask(b, s.length, s.ring_bits)
            streams.append([z.tolist()])
            held.append([truth[u][k]])
    if not streams:
        return [not_measured(SERVER, c.name, c.kinds, c.protection, "no late client whose mask key the server "
                             "reconstructed") for c in CHECKS if c.name.startswith(_LATE)]
    return ring_mask_findings(SERVER, _KIND, _LATE, streams, 1 << views[0].setup.ring_bits, truth=held,
                              truth_protection=Protection.AGGREGATE, fresh=False)


def both_secrets_finding(views: Sequence[_Round]) -> EmpiricalFinding:
    """Does the server get t shares of both b_u and s_u of one client in one round (it must never)?

    With both it removes every mask of u: u's input, should it arrive late (or have
    arrived), is in the clear. Counted from the Unmask messages it received; exact.
    """
    both = owners = 0
    for view in views:
        t = view.setup.threshold
        for u in set(view.b_points) | set(view.s_points):
            owners += 1
            both += int(len(view.b_points.get(u, {})) >= t and len(view.s_points.get(u, {})) >= t)
    return EmpiricalFinding(
        SERVER, BOTH_SECRETS, float(both), 0.0,
        f"for each client and round, the server counts the shares of its self-mask seed and of its mask key in "
        f"the Unmask messages it received: {both} of {owners} (client, round) pairs reach the threshold for both",
        attacks=("secagg.unmask",), protection=Protection.AGGREGATE, flagged=both > 0, samples=owners,
        detects="exact (one client with t shares of both)", min_effect=0.0)


def sum_findings(run: SecAggRun, views: Sequence[_Round], truth: dict[str, list[np.ndarray]],
                 n_clients: int) -> list[EmpiricalFinding]:
    """The server's output, by design, and whether it is exact: Σ over its survivors of the inputs, in the ring."""
    wrong = 0
    for k, (res, view) in enumerate(zip(run.rounds, views, strict=True)):
        s = view.setup
        want = np.zeros(s.length, ring_dtype(s.ring_bits))
        for u in res.survivors:
            want = want + sm.encode_ring(truth[u][k], s.frac_bits, s.value_bits, s.ring_bits)
        wrong += int(not np.array_equal(np.asarray(res.raw), want))
    last = len(run.rounds[-1].survivors)
    return [
        EmpiricalFinding(
            SERVER, SUM_EXACT, float(wrong), 0.0,
            f"the sum the server computed in each round (its raw ring value) against the sum, mod 2^b, of its "
            f"survivors' encoded inputs: {wrong} of {len(run.rounds)} rounds differ (a wrong sum reveals something "
            "other than the survivors' sum: a mask left in, or a client's input in or out)",
            attacks=_UNMASKING, protection=Protection.AGGREGATE, flagged=wrong > 0,
            samples=len(run.rounds), detects="exact (one round's sum off by anything)", min_effect=0.0),
        EmpiricalFinding(
            SERVER, OUTPUT, float(last), None,
            f"the server learns each round's sum over the survivors and who survived (round {len(run.rounds)}: "
            f"{last} of {n_clients}); sums exact: {wrong == 0}; by design",
            attacks=("secagg.survivors",), flagged=True, samples=len(run.rounds), detects="exact", min_effect=0.0),
    ]


def round_difference_finding(tap: AuditTap, truth: dict[str, list[np.ndarray]], *, what: str = "input",
                             coords: slice = slice(None), name: str = ROUND_DIFFERENCE) -> EmpiricalFinding:
    """The server's round-difference attack on its own outputs: every round's sum and survivors (its holdings)."""
    return round_difference(SERVER, name, tap.held(SERVER, "aggregate"), tap.held(SERVER, "survivors"), truth,
                            attacks=("secagg.survivors", *_UNMASKING), what=what, coords=coords)


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """Six clients, three rounds, a late client in round 1 and a dropout in round 2; the server attacks (module doc).

    No key size applies (X25519 and AES-256 are fixed); ``key_bits`` is unused.
    """
    inputs, cfg = _inputs(), sm.SecAggConfig()
    clients = client_names(len(inputs))
    tap = AuditTap()
    run = run_local(inputs, config=cfg, vanish={clients[5]: (2, "masked")}, late={clients[4]: 1}, tap=tap)
    streams = [[m.y.tolist() for m in tap.received(SERVER, MaskedInput, sender=c)] for c in clients]
    truth_in = _inputs_held(tap, clients)
    truth = [[sm.encode_ring(x, cfg.frac_bits, cfg.value_bits).view(np.int64).astype(np.float64)
              for x in truth_in[c]][: len(streams[i])] for i, c in enumerate(clients)]
    findings = ring_mask_findings(SERVER, _KIND, _MASKED, streams, RING, truth=truth,
                                  truth_protection=Protection.AGGREGATE)
    findings.append(share_reading_finding(tap, clients))
    views = _rounds(tap, run, clients)
    found, rem = remainder_findings(views, clients, truth_in)
    findings += found
    findings.append(key_agreement_finding(views, rem, run.run_id, truth_in))
    findings += late_findings(views, run.run_id, truth_in)
    findings.append(both_secrets_finding(views))
    findings += sum_findings(run, views, truth_in, len(clients))
    findings.append(round_difference_finding(tap, truth_in))
    late = sum(len(set(v.ys) - set(v.survivors)) for v in views)
    return AuditOutcome("secagg", audit(run.transcript), tuple(findings),
                        {"survivors_last_round": float(len(run.rounds[-1].survivors)), "late_clients": float(late)},
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
