"""Private entity alignment (PSI) for vertical federated learning.

Parties and data
    Two parties, the **active** party (holds the labels; CLI ``--left``) and the
    **passive** party (CLI ``--right``), each hold a list of IDs (one per row). For three
    or more parties: one active party and passive parties ``passive-0``, ``passive-1``, ...

Outputs (per mode)
    ``both``  both parties learn the intersection: their own row indices of the common
              IDs, in the *same* canonical order on both sides (sorted by the common
              double-blinded digest, or HMAC tag), so row ``i`` is the same person
              everywhere. Vertical FL needs this mode.
    ``left``  only the active party learns the intersection; the passive party learns
              only the active party's set size.
    ``size``  cardinality only (ECDH): the active party learns |X ∩ Y| and tells the
              passive party; neither learns which rows. Not offered for keyed-hash PSI,
              where the key holder always learns the rows, nor for KKRT, where the OPRF
              receiver matches values against its own per-row outputs. The size is
              still an output: a party that runs again with one ID more learns that
              ID's membership in the other set (Guo et al., USENIX Security 2022;
              measured by the audit); nothing in the protocol limits reruns.
    ``all``   (3+ parties, :func:`run_multiparty_local`) every party learns its rows of
              the all-party intersection in one common order. Extra leakage (declared):
              the active party learns each pairwise intersection with each passive
              party, and passive party ``j`` learns its pairwise intersection with the
              active party before it learns the all-party one.
    Always public: every party's set size (sent in the hello).

Threat model
    Semi-honest parties. Two-party: nothing to collude with; each party must not see the
    other's secret scalar (ECDH) — the keyed-hash variant *shares* its key, so it is only
    as strong as the secrecy of that key from outsiders, and offers no protection of one
    party's non-common IDs against the other if IDs are guessable (SECURITY.md).
    Multi-party: the active party sees all pairwise intersections; passive parties must
    not collude with each other (they could compare what they learned) — they learn
    nothing about each other's sets except through the all-party output.
    Security of ECDH-PSI rests on DDH / one-more-DH in Curve25519 (and its twist) with
    the hash to u-coordinates modelled as a random oracle.

Citation
    C. Meadows, "A more efficient cryptographic matchmaking protocol", IEEE S&P 1986;
    B. Huberman, M. Franklin, T. Hogg, "Enhancing privacy and trust in electronic
    communities", ACM EC 1999 (DH-PSI); B. Pinkas, T. Schneider, M. Zohner, "Scalable
    private set intersection based on OT extension", ACM TOPS 2018 (§ on DH-PSI and
    naive hashing; the cuckoo-table bound); V. Kolesnikov, R. Kumaresan, M. Rosulek,
    N. Trieu, "Efficient batched oblivious PRF with applications to private set
    intersection", ACM CCS 2016 (KKRT); T. Chou, C. Orlandi, "The simplest protocol for
    oblivious transfer", LATINCRYPT 2015 (its base OTs); SecretFlow/OpenMined PSI for
    the mode vocabulary.

Choice of protocol (``--protocol auto``, the commands' default; :mod:`.choice`)
    0. both → peer   ``align.offer``  version, role, mode, set size, the protocols this
       build can run; both pick the VOLE PSI from 10,000 IDs in all, else ECDH (ECDH for
       mode size and 3+ parties, which exchange no offer). Then the chosen protocol's flow.

Message flow (two parties, ECDH; chunks of ``chunk_size`` IDs)
    1. both → peer   ``align.hello``  protocol, mode, version, role, set size (mismatch → ProtocolError)
    2. both → peer   ``align.blinded``  k·H(x) for each own ID, shuffled
    3. passive → active  ``align.doubled``  k_p·(k_a·H(a)) digests in the active party's
       sending order (mode both/left), or ``align.doubled_shuffled`` reshuffled (mode size)
       active → passive  ``align.doubled``  k_a·(k_p·H(p)) digests (mode both only)
    4. each learner intersects its own doubled digests with the digests it computed for
       the peer's points; active → passive ``align.cardinality`` (mode size only)
    5. (3+ parties) active → passive-j ``align.global_order``: positions into passive j's
       pairwise-intersection list, in the all-party order.

Message flow (keyed-hash): 1. ``align.hello`` with a signed ephemeral X25519 key; both
derive the HMAC key (HKDF over the hello transcript); 2. ``align.tags``: shuffled HMAC
tags from each party whose peer learns (both: both ways; left: passive → active).

Message flow (KKRT, :mod:`.kkrt`; the active party is the OPRF receiver): 1.
``align.hello`` both ways; 2. active → passive ``align.ot_setup`` (code width, cuckoo
bins, stash, base-OT point); 3. passive → active ``align.ot_choice`` (base-OT points of
its secret OPRF key); 4. active → passive ``align.oprf_matrix`` (the OT-extension
matrix, chunked by table rows); 5. passive → active ``align.oprf_values`` (its OPRF
values at each ID's three bins, shuffled once); 6. mode both: active → passive
``align.common_values`` (the matched values' places in the passive party's sending order, in the
order of the values: the common order).

Message flow (VOLE PSI, :mod:`.rr22`; the active party is the OPRF receiver): 1.
``align.hello`` both ways; 2. active → passive ``align.vole_setup`` (OKVS size and band,
base-OT point); 3. passive → active ``align.ot_choice`` (base-OT points of the bits of its
secret Δ); 4. active → passive ``align.vole_matrix`` (the IKNP matrix of its correlated OTs);
5. passive → active ``align.vole_trees`` (the silent VOLE's GGM level sums under the OT
keys); 6. active → passive ``align.okvs_masked`` (its OKVS masked by the VOLE, chunked);
7. passive → active ``align.oprf_values`` (one value per ID, shuffled once); 8. mode both:
``align.common_values``, as KKRT's.

Message flow (bucketed, ``--memory-budget``; :mod:`.buckets`): 1. ``align.bucket_hello`` both
ways (proposed bucket count, a commitment to a nonce; on resume, the first unfinished bucket and
the plan's digest); 2. ``align.bucket_nonce`` both ways (the bucket key is SHA-256 of both
nonces); 3. ``align.bucket_sizes`` both ways (distinct IDs per bucket); 4. per bucket, the
two-party flow above.

Modules: :mod:`.messages` (declarations, results), :mod:`.session` (one pairwise ECDH or
keyed-hash session as named steps: start, on_hello, on_blinded, on_doubled,
on_doubled_shuffled, on_cardinality, on_tags), :mod:`.kkrt` (one KKRT session: start,
on_hello, on_ot_setup, on_ot_choice, on_oprf_matrix, on_oprf_values, on_common_values),
:mod:`.kkrt_audit` (its attacks), :mod:`.rr22` and :mod:`.rr22_audit` (one VOLE PSI session and its
attacks), :mod:`.roles` (the roles and local runs), :mod:`.idtable` (a
party's CSV, streamed), :mod:`.files` (CSV alignment), :mod:`.buckets` and :mod:`.spill` (bucketed,
streamed PSI in bounded memory, resumable; ``--memory-budget``), :mod:`.bucket_audit` (what its
bucket sizes reveal), :mod:`.audit` (attacks and demo), :mod:`.membership_audit` (the published attacks on
the outputs: membership from intersection sizes, pairwise intersections of mode ``all``),
:mod:`.cli` (``vflcrypto align`` and the network task).
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping
from typing import Any

from vflcrypto.spec import Command, FlowerSpec, PartyTask, ProtocolSpec

from . import cli
from .audit import CHECKS as AUDIT_CHECKS
from .audit import audit_run, demo_step
from .files import IdTable, align_files, canon_table, read_id_table
from .messages import (
    ACTIVE,
    MODES,
    PASSIVE,
    PROTOCOL_VERSION,
    PROTOCOLS,
    AlignmentResult,
    BlindedChunk,
    Cardinality,
    CommonValues,
    DoubledChunk,
    DoubledShuffledChunk,
    GlobalOrder,
    Hello,
    OkvsMasked,
    OprfMatrix,
    OprfValues,
    OtChoice,
    OtSetup,
    TagChunk,
    VoleMatrix,
    VoleSetup,
    VoleTrees,
)
from .roles import (
    ActiveRole,
    LocalRun,
    MultipartyActiveRole,
    PassiveRole,
    canonical,
    run_active,
    run_active_multiparty,
    run_local,
    run_multiparty_local,
    run_passive,
)
from .session import check_hello

__all__ = [
    "ACTIVE", "MODES", "PASSIVE", "PROTOCOLS", "PROTOCOL_VERSION", "SPEC", "ActiveRole", "AlignmentResult",
    "BlindedChunk", "Cardinality", "CommonValues", "DoubledChunk", "DoubledShuffledChunk", "GlobalOrder", "Hello",
    "IdTable", "LocalRun", "MultipartyActiveRole", "OkvsMasked", "OprfMatrix", "OprfValues", "OtChoice", "OtSetup",
    "PassiveRole", "TagChunk", "VoleMatrix", "VoleSetup", "VoleTrees", "align_files", "audit_run", "canon_table",
    "canonical", "check_hello", "demo_step", "read_id_table", "run_active", "run_active_multiparty", "run_local",
    "run_multiparty_local", "run_passive",
]


def _flower_parties(run_config: Mapping[str, Any]) -> dict[str, str]:
    return {ACTIVE: ACTIVE, PASSIVE: PASSIVE}


def _flower_identities(party: str, run_config: Mapping[str, Any]) -> dict[str, Any]:
    """Keyed-hash PSI: this party's identity key and the peer's pin, from ``party-config``.

    The run config names a party configuration (``vflcrypto certs`` writes one) whose
    active and passive party pin their Ed25519 identity keys; each party reads only its
    own identity key file, as ``vflcrypto party`` does. Nothing is distributed in-band.
    """
    from vflcrypto.errors import ConfigurationError
    from vflcrypto.psi.primitives import IdentityKey
    from vflcrypto.runtime.partyconfig import load_party_config
    from vflcrypto.spec import TaskContext

    path = str(run_config.get("party-config", "") or "")
    if not path:
        raise ConfigurationError("psi = 'hash' needs party-config = <parties.toml> pinning both parties' "
                                 "identity keys (vflcrypto certs --party active --party passive-0 writes one)")
    config = load_party_config(path)
    roles = {n: p.role for n, p in config.parties.items()}
    ctx = TaskContext("", "", roles, {}, config)
    me, peer = (ctx.one(ACTIVE), ctx.one(PASSIVE)) if party == ACTIVE else (ctx.one(PASSIVE), ctx.one(ACTIVE))
    ctx.me, ctx.role = me, roles[me]
    return {"identity": IdentityKey(ctx.identity()), "peer_identity": ctx.peer_identity(peer)}


def _flower_role(party: str, run_config: Mapping[str, Any]) -> Any:
    """The bundled bank (active) and shop (passive) files; run config ``psi`` (ecdh, kkrt, rr22, hash) and ``mode``."""
    data = importlib.resources.files("vflcrypto") / "data"
    with importlib.resources.as_file(data / ("bank.csv" if party == ACTIVE else "shop.csv")) as path:
        canon = canon_table(read_id_table(path, "id"), "error", False)
    protocol, mode = str(run_config.get("psi", "ecdh")), str(run_config.get("mode", "both"))
    kw = _flower_identities(party, run_config) if protocol == "hash" else {}
    cls = ActiveRole if party == ACTIVE else PassiveRole
    return cls(canon, peer=PASSIVE if party == ACTIVE else ACTIVE, protocol=protocol, mode=mode,
               run_id=str(run_config.get("_run-id", "")), **kw)


def _flower_summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
    res = results[ACTIVE]
    return {"lines": [f"[vflcrypto] align ({res.protocol}, {res.mode}): {res.own_size} and {res.peer_sizes} IDs, "
                      f"intersection {res.size}"],
            "intersection": res.size}


SPEC = ProtocolSpec(
    name="align",
    title="Entity alignment (PSI: ECDH, KKRT OT extension, keyed hash)",
    roles={ACTIVE: ActiveRole, PASSIVE: PassiveRole},
    run_local=run_local,
    audit=audit_run,
    checks=AUDIT_CHECKS,
    demo=demo_step,
    demo_order=10,
    commands=(Command("align", "private entity alignment (PSI) of two CSV files", cli.add_align_arguments,
                      cli.align, group=None, description=cli.__doc__),),
    party_tasks=(PartyTask("align", "private entity alignment (ECDH PSI)", cli.add_party_arguments,
                           cli.party_task, group=None, needs_identity=cli.needs_identity),),
    flower=FlowerSpec(ACTIVE, _flower_parties, _flower_role, _flower_summary),
)
