"""Secure aggregation that survives dropouts (Bonawitz et al., CCS 2017; SecAgg+ graphs).

Parties and data
    * **server** (role ``"server"``): no data; learns, per round, the sum of the
      surviving clients' vectors and who survived.
    * **clients** ``client-0``, ... (role ``"client"``): each holds one vector per round
      (values bounded by ``2^(value_bits - frac_bits)``) and a pinned Ed25519 identity.

Threat model
    Semi-honest server and clients (Bonawitz et al.'s honest-but-curious setting). The
    server learns nothing about one client's input beyond the sum over the survivors
    while fewer than t parties collude (t > half a neighbourhood unless the caller
    explicitly accepts less); the server could otherwise impersonate clients, which the
    signed key advertisements rule out. A server that sends clients different setups or
    (``hfl``) global models, so that a sum isolates one client's update (Pasquini,
    Francati and Ateniese, CCS 2022), is detected: each client signs the digest of its
    context into its advertisement and aborts unless its neighbours' digests equal its own.
    Not covered: a malicious server lying about who dropped (the paper's consistency
    round), which a semi-honest server does not do; what the sums of rounds with different
    survivors reveal together (So et al., AAAI 2023: by design, measured by the audit).

Citations
    K. Bonawitz, V. Ivanov, B. Kreuter, A. Marcedone, H. B. McMahan, S. Patel,
    D. Ramage, A. Segal, K. Seth, "Practical Secure Aggregation for Privacy-Preserving
    Machine Learning", CCS 2017 (the semi-honest protocol, rounds 0-4); J. Bell,
    K. Bonawitz, A. Gascón, T. Lepoint, M. Raykova, "Secure Single-Server Aggregation
    with (Poly)Logarithmic Overhead", CCS 2020 (sparse Harary neighbour graphs);
    A. Shamir, CACM 1979.

Message flow per aggregation round (kinds ``secagg.*``; steps of :mod:`.session`)
    0. server → clients ``setup``: round, clients, neighbour graph, t, length, encoding
       (each client recomputes them from its own parameters and refuses a difference).
    1. client u → server ``advertise``: fresh X25519 keys c_pk (share encryption) and
       s_pk (mask agreement) and the digest of its context (the setup; ``hfl``: and the
       global model), signed with its identity; server → u ``keys``: the neighbours'
       advertisements (U1: who is present); u aborts unless every neighbour's digest is its own.
    2. client u: Shamir shares (threshold t) of s_sk and of a fresh self-mask seed b_u,
       one per neighbour, each encrypted (AES-256-GCM, X25519 key, AAD: both names, run,
       round) → server ``shares``; server → v ``forward``: the ciphertexts addressed to v
       (U2: who shared).
    3. client u → server ``masked_input``: y_u = x_u + PRG(b_u) + Σ_{v∈U2∩N(u)} ±PRG(s_uv)
       mod 2^64 (+ for the smaller name): uniform on its own.
    4. server → survivors ``survivors`` (U3); client v → server ``unmask``: its shares
       of every dropped neighbour's s_sk and of every surviving neighbour's b (never
       both for one client). The server reconstructs them (t shares each), adds back
       the dropped clients' pairwise masks, subtracts the survivors' self-masks: Σ_{U3} x_u.

A client silent past the timeout, or disconnected, at any round is dropped; if some
needed reconstruction lacks t shares the round aborts with ProtocolError (never a wrong
sum). Modules: :mod:`.messages`, :mod:`.math` (parameters, encoding, graph, keys,
masks), :mod:`.session` (one round as steps, reusable by other protocols: ``hfl``),
:mod:`.roles` (the roles and ``run_local``), :mod:`.audit`.
"""

from __future__ import annotations

from vflcrypto.spec import ProtocolSpec

from . import audit
from .flower import flower_spec
from .math import RING_BITS, SecAggConfig, decode_ring, encode_ring, neighbours
from .messages import CLIENT, SERVER, Advertise, Forward, Keys, MaskedInput, Setup, Shares, Survivors, Unmask
from .roles import PHASES, ClientRole, SecAggRun, ServerRole, client_names, run_local
from .session import AggregateResult, ClientAggState, ClientSession, ServerAggState, ServerSession

__all__ = ["CLIENT", "PHASES", "RING_BITS", "SERVER", "SPEC", "Advertise", "AggregateResult", "ClientAggState",
           "ClientRole", "ClientSession", "Forward", "Keys", "MaskedInput", "SecAggConfig", "SecAggRun",
           "ServerAggState", "ServerRole", "ServerSession", "Setup", "Shares", "Survivors", "Unmask",
           "client_names", "decode_ring", "encode_ring", "neighbours", "run_local"]

SPEC = ProtocolSpec(
    name="secagg",
    title="Secure aggregation (dropout-robust)",
    roles={SERVER: ServerRole, CLIENT: ClientRole},
    run_local=run_local,
    audit=audit.audit_run,
    config=SecAggConfig,
    demo=audit.demo_step,
    demo_order=70,
    flower=flower_spec(),
    checks=audit.CHECKS,
)
