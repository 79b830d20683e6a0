"""Privacy mutation suite: switch off one protection at a time and see the audit flag it.

Every protection a leakage declaration claims against its receiver
(:attr:`vflcrypto.runtime.declarations.Declaration.claimed_protections`) must be covered by a mutation
below: a test-only seam (a monkeypatch of the function that provides the protection)
that drops a mask, reuses it across iterations, fixes or skips a secret scalar, skips a
shuffle, or sends a ciphertext without randomness. Under the mutation the protocol's
own ``audit_run`` must flag a finding that attacks that message kind for that
protection; without any mutation no declared protection may be flagged. A declaration
without a covering mutation fails :func:`test_every_declared_protection_has_a_mutation`.

Seams that act in one party only check the thread name (``run_parties`` runs party
``p`` in thread ``party-p``). The process pool is disabled so that every seam runs in
the calling process.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from vflcrypto.protocols import get
from vflcrypto.protocols.fewshot import audit as fewshot_audit
from vflcrypto.protocols.hfl import audit as hfl_audit
from vflcrypto.protocols.logreg import audit as logreg_audit
from vflcrypto.protocols.oneshot import audit as oneshot_audit
from vflcrypto.protocols.protovfl import audit as protovfl_audit
from vflcrypto.protocols.secureboost import audit as secureboost_audit
from vflcrypto.protocols.split import audit as split_audit
from vflcrypto.protocols.upsi import audit as upsi_audit

from vflcrypto.audit.ledger import AuditOutcome
from vflcrypto.cli.audit import load_all_protocols
from vflcrypto.he import ckks, flooding, paillier
from vflcrypto.he.paillier import fixed_base
from vflcrypto.privacy import marvell as dp_marvell
from vflcrypto.privacy import mechanisms as dp_mechanisms
from vflcrypto.psi import primitives as psi
from vflcrypto.runtime.declarations import Protection, declarations
from vflcrypto.sharing import masking

KEY_BITS = 512  # insecure size: audits at test speed

PROTOVFL_COLLUDED_TABLE = protovfl_audit.COLLUDED_TABLE
PROTOVFL_ZERO_CELLS = protovfl_audit.ZERO_CELLS

P = Protection


def _only_in(party_prefix: str, weak: Callable[..., Any], strong: Callable[..., Any]) -> Callable[..., Any]:
    """Call ``weak`` in the threads of parties whose name starts with ``party_prefix``."""

    def seam(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name.startswith(f"party-{party_prefix}"):
            return weak(*args, **kwargs)
        return strong(*args, **kwargs)

    return seam


def _reuse(fn: Callable[..., Any], key: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` that returns its first result again for every later call with the same key."""
    cache: dict[Any, Any] = {}

    def seam(*args: Any) -> Any:
        k = key(*args)
        if k not in cache:
            cache[k] = fn(*args)
        return cache[k]

    return seam


def _dropped(*what: str) -> tuple[str, ...]:
    """The checks a dropped mask must fail: :func:`ring_mask_findings`' uniformity and correlation."""
    return tuple(f"{w}: {c}" for w in what for c in ("uniform over Z_M", "correlation with the secret"))


def _reused(*what: str) -> tuple[str, ...]:
    """The check a mask reused across messages must fail: freshness of consecutive differences."""
    return tuple(f"{w}: fresh mask per message" for w in what)


def _read(*kinds: str) -> tuple[str, ...]:
    """The check a ciphertext without randomness must fail: read without the key."""
    return tuple(f"{k}: ciphertexts read without the key" for k in kinds)


# --------------------------------------------------------------------------- seams


def drop_uniform_masks(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(masking, "uniform_mod", lambda modulus, size: [0] * size)


def reuse_uniform_masks(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(masking, "uniform_mod", _reuse(masking.uniform_mod, lambda modulus, size: (modulus, size)))


def drop_statistical_masks(party: str) -> Callable[[pytest.MonkeyPatch], None]:
    """``party`` draws no statistical masks (all zero); the other parties' masks stay fresh."""

    def seam(mp: pytest.MonkeyPatch) -> None:
        mp.setattr(masking, "statistical_masks", _only_in(party, lambda size, value_bits, sec_bits=40, **kw: [0] * size,
                                                          masking.statistical_masks))

    return seam


def reuse_statistical_masks(party: str) -> Callable[[pytest.MonkeyPatch], None]:
    """``party`` draws its statistical masks once per (size, width) and reuses them in every later call
    (across epochs); the other parties' masks stay fresh."""

    def seam(mp: pytest.MonkeyPatch) -> None:
        honest = masking.statistical_masks
        reused = _reuse(honest, lambda size, value_bits, sec_bits=40: (size, value_bits))
        mp.setattr(masking, "statistical_masks", _only_in(party, reused, honest))

    return seam


def unrandomized_paillier(mp: pytest.MonkeyPatch) -> None:
    """Every Paillier obfuscator (DJN h_s^a, public and CRT paths) becomes 1."""
    strong = fixed_base._random_digits  # every encryptor looks it up there (paillier.kernels)
    mp.setattr(fixed_base, "_random_digits", lambda count, nbytes, w: [[0] * len(r) for r in strong(count, nbytes, w)])


def reuse_coordinator_obfuscators(mp: pytest.MonkeyPatch) -> None:
    """The key holder's obfuscator stock hands out the same encryptions of zero again for every
    request of the same size (across iterations and parties) instead of fresh ones."""
    from vflcrypto.he.obfuscators import ObfuscatorStock

    mp.setattr(ObfuscatorStock, "take", _reuse(ObfuscatorStock.take, lambda stock, count: count))


def no_rerandomization(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(paillier.PaillierVector, "rerandomize", lambda self: self)


def drop_ckks_masks(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(ckks, "uniform_real_mask", lambda context, size, bound, levels_left=0: np.zeros(size))


def reuse_ckks_masks(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(ckks, "uniform_real_mask",
               _reuse(ckks.uniform_real_mask, lambda context, size, bound, levels_left=0: size))


def no_ckks_flooding(mp: pytest.MonkeyPatch) -> None:
    """Every flooded CKKS decryption is released raw: the flooding noise is zero."""
    mp.setattr(flooding, "gaussian", lambda size, sigma: np.zeros(size))


def _fixed_scalar(side: str, mp: pytest.MonkeyPatch) -> None:
    """One ECDH scalar for every session of ``side`` (instead of a fresh one per session)."""
    fixed = psi.generate_secret()
    mp.setattr(psi, "generate_secret", _only_in(side, lambda: fixed, psi.generate_secret))


def _skips_blinding(side: str, mp: pytest.MonkeyPatch) -> None:
    """``side`` sends H(x) for k·H(x) and digests the peer's points without its scalar."""
    from vflcrypto.protocols.align.audit import unblinded_point

    def no_reblind(secret: bytes, points: bytes) -> bytes:
        return b"".join(psi.point_digest(points[i : i + psi.POINT_BYTES])
                        for i in range(0, len(points), psi.POINT_BYTES))

    mp.setattr(psi, "blind_ids", _only_in(side, lambda secret, ids: b"".join(map(unblinded_point, ids)),
                                          psi.blind_ids))
    mp.setattr(psi, "reblind_points", _only_in(side, no_reblind, psi.reblind_points))


def _skips_shuffle(side: str, mp: pytest.MonkeyPatch) -> None:
    mp.setattr(psi, "random_permutation", _only_in(side, lambda n: np.arange(n, dtype=np.int64),
                                                   psi.random_permutation))
    # the VOLE PSI sender's values go sorted by value instead: in its own order under the mutation
    mp.setattr(psi, "value_order", _only_in(side, lambda v: np.arange(len(v), dtype=np.int64), psi.value_order))


# each ECDH seam in one party only (its thread): the other keeps its protection
passive_fixed_scalar, active_fixed_scalar = (functools.partial(_fixed_scalar, s) for s in ("passive", "active"))
passive_skips_blinding, active_skips_blinding = (functools.partial(_skips_blinding, s) for s in ("passive", "active"))
passive_skips_shuffle, active_skips_shuffle = (functools.partial(_skips_shuffle, s) for s in ("passive", "active"))


def kkrt_codes_unmasked(mp: pytest.MonkeyPatch) -> None:
    """KKRT receiver: the OT-extension matrix is its code words themselves (no PRG masks)."""
    from vflcrypto.psi import kkrt, ot

    honest = kkrt.receiver_matrix
    mp.setattr(kkrt, "receiver_matrix", lambda k0, k1, codes, start:
               (ot.transpose_bits(codes), honest(k0, k1, codes, start)[1]))


def kkrt_guessable_oprf_key(mp: pytest.MonkeyPatch) -> None:
    """KKRT sender: its OPRF key s (the base-OT choice bits) is all ones instead of random."""
    from vflcrypto.psi import kkrt

    mp.setattr(kkrt, "random_choice_bits", _only_in("passive", lambda: np.ones(kkrt.WIDTH, np.uint8),
                                                    kkrt.random_choice_bits))


def kkrt_values_in_row_order(mp: pytest.MonkeyPatch) -> None:
    """KKRT sender: evaluates its (row, item) pairs in cuckoo-table row order and sends its OPRF values unshuffled."""
    from vflcrypto.protocols.align import kkrt as ak

    honest = ak.KkrtSession._sender_pairs

    def by_row(self: Any) -> None:
        honest(self)
        st = self.state
        order = np.argsort(st.pair_rows, kind="stable")  # row order keeps each matrix chunk's slice
        st.pair_rows, st.pair_items, st.pair_tags = st.pair_rows[order], st.pair_items[order], st.pair_tags[order]

    mp.setattr(ak.KkrtSession, "_sender_pairs", by_row)
    passive_skips_shuffle(mp)


def kkrt_base_ot_scalar_reused(mp: pytest.MonkeyPatch) -> None:
    """KKRT sender (base-OT receiver): one scalar b for every base-OT point."""
    from vflcrypto.psi import ot

    fixed = ot._scalar()
    mp.setattr(ot, "_scalar", _only_in("passive", lambda: fixed, ot._scalar))


def rr22_choices_unmasked(mp: pytest.MonkeyPatch) -> None:
    """VOLE PSI receiver: the IKNP matrix is its choice bits themselves (no PRG masks)."""
    from vflcrypto.psi import vole

    honest = vole.VoleReceiver.extend

    def bare(self: Any, points: bytes) -> bytes:
        honest(self, points)
        bits = np.packbits(self.choice, bitorder="little")
        return np.broadcast_to(bits, (vole.BITS, len(bits))).tobytes()

    mp.setattr(vole.VoleReceiver, "extend", bare)


def rr22_one_key_per_level(mp: pytest.MonkeyPatch) -> None:
    """VOLE PSI sender: both sums of each GGM level under the side-0 key H(q) (no Δ in the other key)."""
    from vflcrypto.psi import vole

    mp.setattr(vole, "level_keys", lambda q, delta, index: (vole._ot_hash(q, index),) * 2)


def rr22_okvs_unmasked(mp: pytest.MonkeyPatch) -> None:
    """VOLE PSI receiver: sends its OKVS P itself instead of P xor A."""
    from vflcrypto.psi import rr22

    mp.setattr(rr22, "mask", lambda p, a: p)


def rr22_zero_delta(mp: pytest.MonkeyPatch) -> None:
    """VOLE PSI sender: its key Δ is zero (a key the receiver can guess)."""
    from vflcrypto.psi import vole

    mp.setattr(vole, "random_delta_bits", _only_in("passive", lambda: np.zeros(vole.BITS, np.uint8),
                                                   vole.random_delta_bits))


def upsi_unkeyed_cache(mp: pytest.MonkeyPatch) -> None:
    """Unbalanced PSI: the large party's cache (and so its transfer) holds unkeyed hashes of its IDs."""
    from vflcrypto.psi import oprf

    mp.setattr(oprf, "evaluate_ids", lambda secret, ids: np.array(
        [oprf.output_of_point(oprf.oprf_hash(i)) for i in ids], dtype=f"S{oprf.OUTPUT_BYTES}"))


def upsi_zero_key(mp: pytest.MonkeyPatch) -> None:
    """Unbalanced PSI: the large party's OPRF key is all zeros (a key the small party can guess)."""
    from vflcrypto.protocols.upsi import store

    from vflcrypto.psi import oprf

    mp.setattr(store, "new_key", lambda: store.OprfKey(bytes(32), oprf.key_id(bytes(32))))


def upsi_unblinded_queries(mp: pytest.MonkeyPatch) -> None:
    """Unbalanced PSI: the small party sends H(y) for b·H(y) (no blinding scalar)."""
    from vflcrypto.psi import oprf

    mp.setattr(oprf.Blinder, "blind", lambda self, ids: (
        b"".join(oprf.canonical_u(oprf.oprf_hash(i)) for i in ids), bytes(len(ids))))


def woe_unshuffled_features(mp: pytest.MonkeyPatch) -> None:
    from vflcrypto.protocols.woe import roles

    mp.setattr(roles, "shuffle_order", lambda n: np.arange(n, dtype=np.int64))


def woe_features_in_own_order(mp: pytest.MonkeyPatch) -> None:
    """The feature party sends its features by column; each feature's bins are still shuffled."""
    from vflcrypto.protocols.woe import roles

    mp.setattr(roles, "feature_order", lambda n: np.arange(n, dtype=np.int64))


def woe_bins_in_own_order(mp: pytest.MonkeyPatch) -> None:
    """The feature party sends each feature's bins by ascending edge; the features are still shuffled."""
    from vflcrypto.protocols.woe import roles

    mp.setattr(roles, "bin_order", lambda n: np.arange(n, dtype=np.int64))


def passive_no_rerandomization(mp: pytest.MonkeyPatch) -> None:
    """Only the passive parties skip re-randomization (the active party's own encryptions keep their randomness)."""
    honest = paillier.PaillierVector.rerandomize
    mp.setattr(paillier.PaillierVector, "rerandomize", _only_in("passive", lambda self: self, honest))


def woe_small_bins_kept(mp: pytest.MonkeyPatch) -> None:
    """The feature party merges no small bin (a rare value keeps a bin of its own)."""
    from vflcrypto.protocols.woe import math as wm

    mp.setattr(wm, "merge_small_bins", lambda bins, min_size: np.unique(bins, return_inverse=True)[1].astype(np.int32))


def drop_pairwise_masks(mp: pytest.MonkeyPatch) -> None:
    from vflcrypto.protocols.logreg import math as lg

    mp.setattr(lg, "pairwise_masks", lambda seed, size, modulus: [0] * size)


def reuse_pairwise_masks(mp: pytest.MonkeyPatch) -> None:
    from vflcrypto.protocols.logreg import math as lg

    mp.setattr(lg, "pair_step_seed", lambda seed, label: seed)  # the same PRG output every step


def unshuffled_candidates(mp: pytest.MonkeyPatch) -> None:
    from vflcrypto.protocols.secureboost import passive

    mp.setattr(passive, "shuffle_candidates", lambda flat: np.asarray(flat, dtype=np.int64))


def one_bin_per_value(mp: pytest.MonkeyPatch) -> None:
    """The passive party bins every distinct value on its own: candidates sum single rows."""
    from vflcrypto.protocols.secureboost import passive

    strong = passive.bin_features
    mp.setattr(passive, "bin_features", lambda X, max_bin, fit=None: strong(X, 10**6, fit))


def secagg_without_masks(mp: pytest.MonkeyPatch) -> None:
    from vflcrypto.protocols.secagg import math as sm

    mp.setattr(sm, "self_mask", lambda b, length, bits=64: np.zeros(length, np.uint64))
    mp.setattr(sm, "pair_mask", lambda s_sk, pk, me, peer, run_id, rnd, n, bits=64: np.zeros(n, np.uint64))


def secagg_masks_reused_across_rounds(mp: pytest.MonkeyPatch) -> None:
    """One set of keys for every round, and pair masks not bound to the round: every mask repeats."""
    from vflcrypto.protocols.secagg import math as sm
    from vflcrypto.protocols.secagg import session

    fixed: dict[str, tuple[bytes, bytes, bytes]] = {}
    honest_keys, honest_pair = session.generate_keys, sm.pair_mask

    def keys_once() -> tuple[bytes, bytes, bytes]:
        name = threading.current_thread().name
        return fixed.setdefault(name, honest_keys())

    mp.setattr(session, "generate_keys", keys_once)
    mp.setattr(sm, "pair_mask", lambda s_sk, pk, me, peer, run_id, rnd, n, bits=64:
               honest_pair(s_sk, pk, me, peer, run_id, 0, n, bits))


def secagg_shares_unencrypted(mp: pytest.MonkeyPatch) -> None:
    from vflcrypto.protocols.secagg import math as sm

    from vflcrypto.sharing.shamir import SHARE_BYTES

    mp.setattr(sm, "encrypt_shares", lambda c_sk, pk, a, b, run, rnd, s, t: s.to_bytes(SHARE_BYTES, "big")
               + t.to_bytes(SHARE_BYTES, "big"))
    mp.setattr(sm, "decrypt_shares", lambda c_sk, pk, a, b, run, rnd, ct: (int.from_bytes(ct[:SHARE_BYTES], "big"),
                                                                          int.from_bytes(ct[SHARE_BYTES:], "big")))


def secagg_pairwise_masks_dropped(mp: pytest.MonkeyPatch) -> None:
    """Clients add no pairwise masks (self-masks kept): once the server removes b_u, x_u is bare."""
    from vflcrypto.protocols.secagg import math as sm

    mp.setattr(sm, "pair_mask", lambda s_sk, pk, me, peer, run_id, rnd, n, bits=64: np.zeros(n, np.uint64))


def secagg_constant_pair_seed(mp: pytest.MonkeyPatch) -> None:
    """The pairwise seed is a constant (all zero) instead of the X25519 agreement: the masks still cancel."""
    from vflcrypto.protocols.secagg import math as sm

    mp.setattr(sm, "agree_seed", lambda private_key, peer_public, context: bytes(32))


def secagg_without_self_mask(mp: pytest.MonkeyPatch) -> None:
    """Clients add no self-mask (pairwise masks kept): a late client's input is bare once its mask key is out."""
    from vflcrypto.protocols.secagg import math as sm

    mp.setattr(sm, "self_mask", lambda b, length, bits=64: np.zeros(length, np.uint64))


def secagg_reveals_both_secrets(mp: pytest.MonkeyPatch) -> None:
    """The unmasking rule reveals a dropped client's self-mask seed as well as its mask key (clients send both
    and the server, which checks the shares against the same rule, accepts them)."""
    from vflcrypto.protocols.secagg import math as sm

    mp.setattr(sm, "reveals", lambda owner, survivors: (owner not in survivors, True))


def secagg_server_keeps_dropped_masks(mp: pytest.MonkeyPatch) -> None:
    """The server's unmasking does not add back the dropped clients' pairwise masks: a wrong sum."""
    from vflcrypto.protocols.secagg import math as sm

    honest = sm.pair_mask
    mp.setattr(sm, "pair_mask", _only_in("server", lambda s_sk, pk, me, peer, run_id, rnd, n, bits=64:
                                         np.zeros(n, np.uint64), honest))


def model_digests_unchecked(mp: pytest.MonkeyPatch) -> None:
    """Clients do not compare the context digests (the global model) their neighbours signed with their own: the
    HFL audit's inconsistent server (one model for the victim, another for everyone else) gets its round summed."""
    from vflcrypto.protocols.secagg import math as sm

    mp.setattr(sm, "check_contexts", lambda me, mine, names, contexts: None)


def psi_tables_unmasked(mp: pytest.MonkeyPatch) -> None:
    """Prototype VFL's alignment: empty cells left 0 and no zero-sharing (the masks of the tables)."""
    from vflcrypto.psi import mpsi

    mp.setattr(mpsi, "uniform_field", lambda n: np.zeros(n, np.uint64))
    mp.setattr(mpsi, "_zero_share", lambda me, seeds, params: np.zeros(params.tables * params.cells * mpsi.REPS,
                                                                       np.uint64))


def psi_tables_without_zero_sharing(mp: pytest.MonkeyPatch) -> None:
    """Prototype VFL's alignment: no zero-sharing z_m; the empty cells keep their uniform filler."""
    from vflcrypto.psi import mpsi

    mp.setattr(mpsi, "_zero_share", lambda me, seeds, params: np.zeros(params.tables * params.cells * mpsi.REPS,
                                                                       np.uint64))


def psi_empty_cells_unfilled(mp: pytest.MonkeyPatch) -> None:
    """Prototype VFL's alignment: empty cells hold z_m alone (no uniform filler); the zero-sharing is kept."""
    from vflcrypto.psi import mpsi

    mp.setattr(mpsi, "uniform_field", lambda n: np.zeros(n, np.uint64))


def table_key_unwrapped(mp: pytest.MonkeyPatch) -> None:
    from vflcrypto.protocols.protovfl import align

    mp.setattr(align, "wrap_key", lambda key, seed, aad: key)
    mp.setattr(align, "unwrap_key", lambda wrapped, seed, aad: wrapped)


# --------------------------------------------------------------------------- the suite


@dataclass(frozen=True)
class Mutation:
    """One weakened protection: where (protocol module), what it breaks, how, and audit options."""

    name: str
    module: str
    covers: tuple[tuple[str, Protection], ...]
    seam: Callable[[pytest.MonkeyPatch], None]
    audit_kwargs: dict[str, Any] = field(default_factory=dict)
    #: names of the findings that must flag under this mutation: the checks it proves
    checks: tuple[str, ...] = ()


#: linear regression's audit without its CKKS session (~97 % of its time), for a mutation of a protection that
#: only the Paillier session's messages carry
PAILLIER_ONLY: dict[str, Any] = {"ckks": False}


def _sshelr_masked(kind: str, tests: tuple[str, ...] = ("uniform on [-R, R]", "fresh mask per message",
                                                          "correlation with the secret")) -> tuple[str, ...]:
    """The names of SSHE-LR's checks of one masked-product kind, both stages (logit and gradient terms)."""
    return tuple(f"sshelr.{kind}, {term} cross terms: {test}" for term in ("logit", "gradient") for test in tests)


def _secagg_except(*broken: str) -> tuple[str, ...]:
    """Every declared secagg check but those whose names start with one of ``broken`` (what a seam breaks)."""
    from vflcrypto.protocols.secagg.audit import CHECKS

    return tuple(c.name for c in CHECKS if not c.name.startswith(broken))


def _in_server(weak: Callable[..., Any], strong: Callable[..., Any]) -> Callable[..., Any]:
    """Call ``weak`` in the representation-VFL server's thread (``run_parties`` names it ``party-server``), ``strong``
    elsewhere."""

    def seam(*args: Any, **kwargs: Any) -> Any:
        return (weak if threading.current_thread().name == "party-server" else strong)(*args, **kwargs)

    return seam


def drop_gradient_noise(mp: pytest.MonkeyPatch) -> None:
    """The label holder adds no Gaussian noise to the clipped gradients it sends (it still clips them); the feature
    parties' embedding noise stays."""
    mp.setattr(dp_mechanisms, "gaussian_noise", _in_server(lambda shape, std: np.zeros(shape),
                                                           dp_mechanisms.gaussian_noise))


def drop_embedding_noise(mp: pytest.MonkeyPatch) -> None:
    """The feature parties add no Gaussian noise to the clipped representations they send (they still clip them
    and the setup still announces the noise); the label holder's gradient noise stays."""
    mp.setattr(dp_mechanisms, "gaussian_noise", _only_in("party-", lambda shape, std: np.zeros(shape),
                                                         dp_mechanisms.gaussian_noise))


def drop_client_noise(mp: pytest.MonkeyPatch) -> None:
    """HFL's clients add no DP-FedAvg noise to their clipped updates (they still clip them and announce the noise)."""
    mp.setattr(dp_mechanisms, "gaussian_noise", lambda shape, std: np.zeros(shape))


def drop_histogram_noise(mp: pytest.MonkeyPatch) -> None:
    """SecureBoost's active party adds no Gaussian noise to the G sums under --dp-epsilon (it still clips g)."""
    mp.setattr(dp_mechanisms, "gaussian_noise", lambda shape, std: np.zeros(shape))


def skip_randomized_response(mp: pytest.MonkeyPatch) -> None:
    """The label holder trains on the true labels while announcing randomized response."""
    mp.setattr(dp_mechanisms, "randomized_response", lambda labels, k, epsilon: np.asarray(labels).copy())


def skip_rr_with_prior(mp: pytest.MonkeyPatch) -> None:
    """Split learning's server releases the true labels in both LP-MST stages while announcing RRWithPrior."""
    mp.setattr(dp_mechanisms, "rr_with_prior", lambda labels, priors, epsilon: np.asarray(labels).copy())


def drop_marvell_noise(mp: pytest.MonkeyPatch) -> None:
    """Split learning's server solves Marvell's covariance for every batch but sends the rows without its noise."""
    mp.setattr(dp_marvell, "draw", lambda positive, sol, unit: np.zeros((len(positive), len(unit))))


MUTATIONS = (
    # split learning's label defences (the audit's defended run)
    Mutation("split: gradient noise dropped", "split", (("split.dp_gradient", P.DP),), drop_gradient_noise,
             checks=(split_audit.NOISE_CHECK,)),
    Mutation("split: randomized response skipped", "split", (("split.dp_gradient", P.DP),), skip_randomized_response,
             checks=(split_audit.RR_CHECK,)),
    Mutation("split: LP-MST's randomization skipped", "split", (("split.dp_gradient", P.DP),), skip_rr_with_prior,
             checks=(split_audit.RR_CHECK,)),
    Mutation("split: Marvell's noise dropped", "split", (("split.marvell_gradient", P.NOISED),), drop_marvell_noise,
             checks=(split_audit.MARVELL_CHECK,)),
    # the feature parties' embedding noise (split's audit: its own defended run)
    Mutation("split: embedding noise dropped", "split",
             tuple((k, P.DP) for k in split_audit.EMBED_KINDS), drop_embedding_noise,
             checks=(split_audit.EMBED_CHECK,)),
    # one-shot and few-shot VFL's label and embedding defences (the audits' defended runs alone)
    *(m for proto, audit in (("oneshot", oneshot_audit), ("fewshot", fewshot_audit)) for m in (
        Mutation(f"{proto}: D1 noise dropped", proto, ((f"{proto}.dp_gradient", P.DP),), drop_gradient_noise,
                 {"undefended": False}, checks=(audit.NOISE_CHECK,)),
        Mutation(f"{proto}: embedding noise dropped", proto, tuple((k, P.DP) for k in audit.EMBED_KINDS),
                 drop_embedding_noise, {"undefended": False}, checks=(audit.EMBED_CHECK,)),
        Mutation(f"{proto}: randomized response skipped", proto,
                 ((f"{proto}.dp_gradient", P.DP), (f"{proto}.dp_partition", P.DP)), skip_randomized_response,
                 {"undefended": False}, checks=(audit.RR_CHECK,)))),
    # logistic regression's label defence (the audit's defended plain run)
    Mutation("logreg: randomized response skipped", "logreg", (("logreg.dp_residual", P.DP),),
             skip_randomized_response, checks=(logreg_audit.RR_CHECK,)),
    # alignment
    Mutation("ECDH: passive party's scalar fixed across sessions", "align",
             (("align.blinded", P.BLINDED),), passive_fixed_scalar,
             checks=("passive's IDs linked across two sessions",)),
    Mutation("ECDH: active party's scalar fixed across sessions", "align",
             (("align.blinded", P.BLINDED),), active_fixed_scalar,
             checks=("active's IDs linked across two sessions",)),
    Mutation("ECDH: passive party applies no scalar", "align",
             (("align.blinded", P.BLINDED), ("align.doubled", P.BLINDED),
              ("align.doubled_shuffled", P.BLINDED)), passive_skips_blinding,
             checks=("dictionary attack on the passive's blinded IDs",
                     "align.doubled: re-blinding by the passive's scalar",
                     "align.doubled_shuffled: re-blinding by the passive's scalar")),
    Mutation("ECDH: active party applies no scalar", "align",
             (("align.blinded", P.BLINDED), ("align.doubled", P.BLINDED)), active_skips_blinding,
             checks=("dictionary attack on the active's blinded IDs",
                     "align.doubled: re-blinding by the active's scalar")),
    Mutation("PSI: passive party skips its shuffles", "align",
             (("align.blinded", P.SHUFFLED), ("align.doubled_shuffled", P.SHUFFLED),
              ("align.tags", P.SHUFFLED), ("align.oprf_values", P.SHUFFLED)), passive_skips_shuffle,
             checks=("order of the passive's blinded IDs", "which own rows are common (cardinality mode)",
                     "order of the passive's keyed-hash tags", "order of the sender's OPRF values (sender's file)",
                     "order of the sender's VOLE PSI values (sender's file)")),
    Mutation("PSI: active party skips its shuffles", "align",
             (("align.blinded", P.SHUFFLED), ("align.tags", P.SHUFFLED)), active_skips_shuffle,
             checks=("order of the active's blinded IDs", "order of the active's keyed-hash tags")),
    Mutation("KKRT: receiver sends its code words unmasked", "align",
             (("align.oprf_matrix", P.MASKED),), kkrt_codes_unmasked,
             checks=("the receiver's code words in the OT-extension matrix",)),
    Mutation("KKRT: sender sends its OPRF values in table-row order", "align",
             (("align.oprf_values", P.SHUFFLED),), kkrt_values_in_row_order,
             checks=("order of the sender's OPRF values (table rows)",)),
    Mutation("KKRT: sender's OPRF key is all ones", "align",
             (("align.oprf_values", P.BLINDED),), kkrt_guessable_oprf_key,
             checks=("dictionary attack on the sender's OPRF values",)),
    Mutation("KKRT and VOLE PSI: sender reuses one base-OT scalar", "align",
             (("align.ot_choice", P.BLINDED),), kkrt_base_ot_scalar_reused,
             checks=("the sender's base-OT choice bits (its OPRF key)",
                     "the sender's base-OT choice bits (its VOLE key Δ)")),
    Mutation("VOLE PSI: receiver sends its correlated-OT choice bits unmasked", "align",
             (("align.vole_matrix", P.MASKED),), rr22_choices_unmasked,
             checks=("the receiver's VOLE noise choices in the IKNP matrix",)),
    Mutation("VOLE PSI: sender puts both sums of a GGM level under one key", "align",
             (("align.vole_trees", P.MASKED),), rr22_one_key_per_level,
             checks=("the GGM level sums off the receiver's choices",)),
    Mutation("VOLE PSI: receiver sends its OKVS unmasked", "align",
             (("align.okvs_masked", P.MASKED),), rr22_okvs_unmasked,
             checks=("the receiver's OKVS decoded at the sender's IDs",)),
    Mutation("VOLE PSI: sender's key Δ is zero", "align",
             (("align.oprf_values", P.BLINDED),), rr22_zero_delta,
             checks=("dictionary attack on the sender's VOLE PSI values",)),
    # unbalanced PSI
    Mutation("upsi: transferred values are unkeyed hashes", "upsi", (("upsi.values", P.BLINDED),),
             upsi_unkeyed_cache, checks=(upsi_audit.DICTIONARY,)),
    Mutation("upsi: the large party's OPRF key is guessable", "upsi", (("upsi.answer", P.BLINDED),),
             upsi_zero_key, checks=(upsi_audit.ANSWER, upsi_audit.DICTIONARY)),
    Mutation("upsi: the small party sends its IDs unblinded", "upsi", (("upsi.query", P.BLINDED),),
             upsi_unblinded_queries, checks=(upsi_audit.QUERY,)),
    # gradient exchange
    Mutation("exchange: gradient mask dropped", "exchange",
             (("exchange.masked_gradient", P.MASKED),), drop_uniform_masks,
             checks=_dropped("masked gradient")),
    Mutation("exchange: gradient mask reused across runs", "exchange",
             (("exchange.masked_gradient", P.MASKED),), reuse_uniform_masks,
             checks=_reused("masked gradient")),
    Mutation("exchange: residuals encrypted without randomness", "exchange",
             (("exchange.encrypted_residuals", P.CIPHERTEXT),), unrandomized_paillier,
             checks=_read("exchange.encrypted_residuals")),
    # linear regression
    Mutation("linreg: gradient and prediction masks dropped", "linreg",
             (("linreg.masked_gradient", P.MASKED), ("linreg.predict_masked", P.MASKED)), drop_uniform_masks,
             PAILLIER_ONLY, checks=_dropped("masked gradient", "masked prediction sum")),
    Mutation("linreg: gradient mask reused across iterations", "linreg",
             (("linreg.masked_gradient", P.MASKED),), reuse_uniform_masks, PAILLIER_ONLY,
             checks=_reused("masked gradient")),
    Mutation("linreg: CKKS gradient mask dropped", "linreg",
             (("linreg.masked_gradient_ckks", P.MASKED),), drop_ckks_masks,
             checks=("masked gradient (CKKS): uniform on [-R, R]",
                     "masked gradient (CKKS): correlation with the secret")),
    Mutation("linreg: CKKS gradient mask reused across iterations", "linreg",
             (("linreg.masked_gradient_ckks", P.MASKED),), reuse_ckks_masks,
             checks=_reused("masked gradient (CKKS)")),
    Mutation("linreg: CKKS decryptions returned without flooding", "linreg",
             (("linreg.gradient_return_ckks", P.FLOODED),), no_ckks_flooding,
             checks=("CKKS gradient returns: flooding noise",)),
    Mutation("linreg: ciphertexts without randomness", "linreg",
             (("linreg.encrypted_u", P.CIPHERTEXT), ("linreg.partial_sum", P.CIPHERTEXT),
              ("linreg.cross_term", P.CIPHERTEXT), ("linreg.encrypted_residual", P.CIPHERTEXT),
              ("linreg.predict_partial", P.CIPHERTEXT), ("linreg.obfuscators", P.CIPHERTEXT)),
             unrandomized_paillier, PAILLIER_ONLY,
             checks=_read(*(f"linreg.{k}" for k in ("obfuscators", "encrypted_u", "partial_sum", "cross_term",
                                                     "encrypted_residual", "predict_partial")))),
    Mutation("linreg: coordinator's obfuscators reused across iterations", "linreg",
             (("linreg.encrypted_u", P.CIPHERTEXT),), reuse_coordinator_obfuscators, PAILLIER_ONLY,
             checks=("linreg.encrypted_u: differences read through shared obfuscators",)),
    Mutation("linreg: derived ciphertexts not re-randomized", "linreg",
             (("linreg.encrypted_residual", P.CIPHERTEXT), ("linreg.cross_term", P.CIPHERTEXT)),
             no_rerandomization, PAILLIER_ONLY,
             checks=_read("linreg.encrypted_residual", "linreg.cross_term")),
    Mutation("linreg: losses over batches of one row", "linreg",
             (("linreg.encrypted_loss", P.AGGREGATE),), lambda mp: None,
             {"batch_size": 1, "n_rows": 12, **PAILLIER_ONLY},
             checks=("losses that C decrypted over a single row",)),
    # logistic regression
    Mutation("logreg: pairwise logit masks dropped", "logreg",
             (("logreg.masked_logits", P.MASKED), ("logreg.masked_logits", P.AGGREGATE)), drop_pairwise_masks,
             checks=_dropped("masked logits")),
    Mutation("logreg: pairwise logit masks reused across steps", "logreg",
             (("logreg.masked_logits", P.MASKED),), reuse_pairwise_masks,
             checks=_reused("masked logits")),
    Mutation("logreg: gradient mask dropped", "logreg",
             (("logreg.masked_gradient", P.MASKED),), drop_uniform_masks,
             checks=_dropped("masked gradient")),
    Mutation("logreg: gradient mask reused across steps", "logreg",
             (("logreg.masked_gradient", P.MASKED),), reuse_uniform_masks,
             checks=_reused("masked gradient")),
    Mutation("logreg: residuals encrypted without randomness", "logreg",
             (("logreg.encrypted_residual", P.CIPHERTEXT),), unrandomized_paillier,
             checks=("label recovery from logreg.encrypted_residual",)),
    # Poisson regression
    Mutation("poisson: gradient masks dropped", "poisson", (("poisson.masked_gradient", P.MASKED),),
             drop_uniform_masks,
             checks=_dropped("masked gradients")),
    Mutation("poisson: gradient masks reused across epochs", "poisson", (("poisson.masked_gradient", P.MASKED),),
             reuse_uniform_masks,
             checks=_reused("masked gradients")),
    Mutation("poisson: values encrypted without randomness", "poisson",
             (("poisson.exp_u", P.CIPHERTEXT), ("poisson.residual", P.CIPHERTEXT)), unrandomized_paillier,
             checks=_read("poisson.exp_u", "poisson.residual")),
    # two-party SSHE logistic regression
    Mutation("sshelr: initial weight shares not random", "sshelr", (("sshelr.weight_share", P.MASKED),),
             drop_uniform_masks, checks=("initial weight shares for the passive party: uniform over Z_M",
                                         "initial weight shares for the active party: uniform over Z_M")),
    Mutation("sshelr: active party's product masks dropped", "sshelr", (("sshelr.masked_for_passive", P.MASKED),),
             drop_statistical_masks("active"), checks=_sshelr_masked("masked_for_passive")),
    Mutation("sshelr: passive party's product masks dropped", "sshelr", (("sshelr.masked_for_active", P.MASKED),),
             drop_statistical_masks("passive"), checks=_sshelr_masked("masked_for_active")),
    Mutation("sshelr: active party's product masks reused across epochs", "sshelr",
             (("sshelr.masked_for_passive", P.MASKED),), reuse_statistical_masks("active"),
             checks=_sshelr_masked("masked_for_passive", ("fresh mask per message",))),
    Mutation("sshelr: passive party's product masks reused across epochs", "sshelr",
             (("sshelr.masked_for_active", P.MASKED),), reuse_statistical_masks("passive"),
             checks=_sshelr_masked("masked_for_active", ("fresh mask per message",))),
    Mutation("sshelr: shares encrypted without randomness", "sshelr",
             (("sshelr.active_ciphertexts", P.CIPHERTEXT), ("sshelr.passive_ciphertexts", P.CIPHERTEXT)),
             unrandomized_paillier, checks=("sshelr.active_ciphertexts: ciphertexts read without the key",
                                            "sshelr.passive_ciphertexts: ciphertexts read without the key")),
    # cross-party Pearson correlation
    Mutation("pearson: product masks dropped", "pearson", (("pearson.masked_products", P.MASKED),),
             drop_uniform_masks,
             checks=_dropped("masked products")),
    Mutation("pearson: product masks reused across runs", "pearson", (("pearson.masked_products", P.MASKED),),
             reuse_uniform_masks,
             checks=_reused("masked products")),
    Mutation("pearson: columns encrypted without randomness", "pearson", (("pearson.columns", P.CIPHERTEXT),),
             unrandomized_paillier,
             checks=_read("pearson.columns")),
    # WOE/IV binning
    Mutation("woe: labels encrypted without randomness", "woe", (("woe.labels", P.CIPHERTEXT),),
             unrandomized_paillier, checks=("woe.labels: ciphertexts read without the key",)),
    Mutation("woe: features and bins sent in the party's own order", "woe", (("woe.counts", P.SHUFFLED),),
             woe_unshuffled_features, checks=("order of the passive party's bins within each feature",
                                              "order of the passive party's features")),
    Mutation("woe: features sent by column, bins shuffled", "woe", (("woe.counts", P.SHUFFLED),),
             woe_features_in_own_order, checks=("order of the passive party's features",)),
    Mutation("woe: bins sent by edge, features shuffled", "woe", (("woe.counts", P.SHUFFLED),),
             woe_bins_in_own_order, checks=("order of the passive party's bins within each feature",)),
    Mutation("woe: small bins not merged", "woe", (("woe.counts", P.AGGREGATE),), woe_small_bins_kept,
             checks=("bins below the minimum bin size among the passive party's counts",)),
    Mutation("woe: bin sums not re-randomized", "woe", (("woe.counts", P.AGGREGATE),), passive_no_rerandomization,
             checks=("bin sums that are products of the active party's own label ciphertexts",)),
    # SecureBoost
    Mutation("secureboost: gradients encrypted without randomness", "secureboost",
             (("secureboost.gradients", P.CIPHERTEXT),), unrandomized_paillier,
             checks=("label recovery from secureboost.gradients",
                     "label recovery from secureboost.gradients (OU): equal ciphertexts")),
    Mutation("secureboost: candidates not shuffled", "secureboost",
             (("secureboost.histograms", P.SHUFFLED), ("secureboost.plain_histograms", P.SHUFFLED)),
             unshuffled_candidates,
             checks=("secureboost.histograms: candidate order", "secureboost.plain_histograms: candidate order")),
    Mutation("secureboost: label-DP noise on the G sums dropped", "secureboost", (("secureboost.dp_level", P.DP),),
             drop_histogram_noise, checks=(secureboost_audit.DP_CHECK,)),
    # secure aggregation
    Mutation("secagg: no self-masks and no pairwise masks", "secagg",
             (("secagg.masked_input", P.MASKED), ("secagg.masked_input", P.AGGREGATE)), secagg_without_masks,
             checks=("masked inputs: uniform over Z_M", "masked inputs: correlation with the secret")),
    Mutation("secagg: keys and masks reused across rounds", "secagg",
             (("secagg.masked_input", P.MASKED),), secagg_masks_reused_across_rounds,
             checks=("masked inputs: fresh mask per message",)),
    Mutation("secagg: shares relayed unencrypted", "secagg",
             (("secagg.shares", P.CIPHERTEXT),), secagg_shares_unencrypted,
             checks=("secagg.shares: self-mask seeds read from the relayed shares",)),
    Mutation("secagg: pairwise masks dropped, self-masks kept", "secagg",
             (("secagg.masked_input", P.AGGREGATE),), secagg_pairwise_masks_dropped,
             checks=("remainders after the self-masks are removed: uniform over Z_M",
                     "remainders after the self-masks are removed: correlation with the secret")),
    Mutation("secagg: pairwise seeds a constant", "secagg",
             (("secagg.masked_input", P.AGGREGATE),), secagg_constant_pair_seed,
             checks=("remainders after the self-masks are removed: fresh mask per message",
                     "key agreement: pairwise masks from public material removed")),
    Mutation("secagg: self-masks dropped, pairwise masks kept", "secagg",
             (("secagg.masked_input", P.AGGREGATE),), secagg_without_self_mask,
             checks=("a late client's input after the masks the server reconstructs are removed: uniform over Z_M",
                     "a late client's input after the masks the server reconstructs are removed: correlation "
                     "with the secret")),
    Mutation("secagg: a dropped client's self-mask seed revealed with its mask key", "secagg",
             (("secagg.unmask", P.AGGREGATE),), secagg_reveals_both_secrets,
             checks=("secagg.unmask: both secrets of one client reconstructable",)),
    Mutation("secagg: the server keeps the dropped clients' pairwise masks in the sum", "secagg",
             (("secagg.masked_input", P.AGGREGATE),), secagg_server_keeps_dropped_masks,
             checks=("the sum over the survivors is exact",)),
    # HFL over secure aggregation
    Mutation("hfl: updates without secagg masks", "hfl",
             (("secagg.masked_input", P.MASKED), ("secagg.masked_input", P.AGGREGATE)), secagg_without_masks,
             checks=_dropped("masked updates")),
    Mutation("hfl: keys and masks reused across rounds", "hfl", (("secagg.masked_input", P.MASKED),),
             secagg_masks_reused_across_rounds, checks=_reused("masked updates")),
    Mutation("hfl: shares relayed unencrypted", "hfl", (("secagg.shares", P.CIPHERTEXT),), secagg_shares_unencrypted,
             checks=("secagg.shares: self-mask seeds read from the relayed shares",)),
    Mutation("hfl: clients do not compare their neighbours' model digests", "hfl",
             (("secagg.masked_input", P.AGGREGATE),), model_digests_unchecked,
             checks=(hfl_audit.MODEL_CONSISTENCY,)),
    Mutation("hfl: DP-FedAvg noise dropped", "hfl", (("secagg.masked_input", P.DP),), drop_client_noise,
             checks=(hfl_audit.NOISE_CHECK,)),
    # prototype VFL (its statistics through secagg; its alignment)
    Mutation("protovfl: statistics without secagg masks", "protovfl",
             (("secagg.masked_input", P.MASKED), ("secagg.masked_input", P.AGGREGATE)), secagg_without_masks,
             checks=("masked class statistics: uniform over Z_M", "masked class statistics: fresh mask per message",
                     "masked class statistics: correlation with the secret")),
    Mutation("protovfl: PSI tables unmasked", "protovfl", (("protovfl.psi_table", P.MASKED),), psi_tables_unmasked,
             checks=("masked hash tables: uniform over Z_M", PROTOVFL_COLLUDED_TABLE, PROTOVFL_ZERO_CELLS)),
    Mutation("protovfl: PSI tables without the zero-sharing", "protovfl", (("protovfl.psi_table", P.MASKED),),
             psi_tables_without_zero_sharing, checks=(PROTOVFL_COLLUDED_TABLE,)),
    Mutation("protovfl: PSI empty cells without the uniform filler", "protovfl", (("protovfl.psi_table", P.MASKED),),
             psi_empty_cells_unfilled, checks=(PROTOVFL_ZERO_CELLS,)),
    Mutation("protovfl: secagg shares relayed unencrypted", "protovfl", (("secagg.shares", P.CIPHERTEXT),),
             secagg_shares_unencrypted, checks=("secagg.shares: self-mask seeds read from the relayed shares",)),
    Mutation("protovfl: table key relayed unwrapped", "protovfl",
             (("protovfl.psi_wrapped_keys", P.CIPHERTEXT), ("protovfl.psi_wrapped_key", P.CIPHERTEXT)),
             table_key_unwrapped,
             checks=("protovfl.psi_wrapped_key: the table key read from the relayed wrapping",)),
    Mutation("secureboost: one bin per distinct value", "secureboost",
             (("secureboost.histograms", P.AGGREGATE), ("secureboost.plain_histograms", P.AGGREGATE)),
             one_bin_per_value,
             checks=tuple(f"secureboost.{k}: rows singled out by a candidate"
                          for k in ("histograms", "plain_histograms"))),
)

MODULES = sorted({m.module for m in MUTATIONS})

#: per mutation, checks that must *not* flag under it: the seam breaks one protection only, and a
#: check of another party's (or another kind's) protection that flags too would not be proven blind-free
#: by it (a seam that breaks two things at once proves only that *some* check of them works)
UNAFFECTED: dict[str, tuple[str, ...]] = {
    "linreg: CKKS decryptions returned without flooding": ("masked gradient (CKKS): uniform on [-R, R]",
                                                            "masked gradient (CKKS): fresh mask per message"),
    # the server's gradient noise and Marvell's both draw from the same CSPRNG noise in the server's thread: the
    # gradient-noise seam (the server's thread only) flags Marvell's check too, never the parties' embedding noise
    "split: gradient noise dropped": (split_audit.RR_CHECK, split_audit.EMBED_CHECK),
    "split: randomized response skipped": (split_audit.NOISE_CHECK, split_audit.MARVELL_CHECK, split_audit.EMBED_CHECK),
    "split: LP-MST's randomization skipped": (split_audit.NOISE_CHECK, split_audit.MARVELL_CHECK,
                                              split_audit.EMBED_CHECK),
    "split: Marvell's noise dropped": (split_audit.NOISE_CHECK, split_audit.RR_CHECK, split_audit.EMBED_CHECK),
    "split: embedding noise dropped": (split_audit.NOISE_CHECK, split_audit.RR_CHECK, split_audit.MARVELL_CHECK),
    **{f"{proto}: {seam}": tuple(c for c in (audit.NOISE_CHECK, audit.RR_CHECK, audit.EMBED_CHECK) if c != proven)
       for proto, audit in (("oneshot", oneshot_audit), ("fewshot", fewshot_audit))
       for seam, proven in (("D1 noise dropped", audit.NOISE_CHECK), ("randomized response skipped", audit.RR_CHECK),
                            ("embedding noise dropped", audit.EMBED_CHECK))},
    "logreg: randomized response skipped":
        tuple(c.name for c in logreg_audit.CHECKS if c.name != logreg_audit.RR_CHECK),
    "woe: features sent by column, bins shuffled": ("order of the passive party's bins within each feature",),
    "woe: bins sent by edge, features shuffled": ("order of the passive party's features",),
    "woe: bin sums not re-randomized": ("woe.labels: ciphertexts read without the key",),
    "sshelr: active party's product masks dropped": _sshelr_masked("masked_for_active"),
    "sshelr: passive party's product masks dropped": _sshelr_masked("masked_for_passive"),
    "sshelr: active party's product masks reused across epochs": _sshelr_masked("masked_for_active"),
    "sshelr: passive party's product masks reused across epochs": _sshelr_masked("masked_for_passive"),
    "secagg: pairwise masks dropped, self-masks kept": _secagg_except("remainders", "key agreement"),
    "secagg: pairwise seeds a constant": _secagg_except("remainders", "key agreement"),
    "secagg: self-masks dropped, pairwise masks kept": _secagg_except("a late client"),
    "secagg: a dropped client's self-mask seed revealed with its mask key":
        _secagg_except("secagg.unmask", "a late client"),  # with both secrets the late client is bare too
    "secagg: the server keeps the dropped clients' pairwise masks in the sum":
        _secagg_except("the sum over the survivors is exact"),
    "hfl: clients do not compare their neighbours' model digests":
        tuple(c.name for c in hfl_audit.CHECKS if c.name != hfl_audit.MODEL_CONSISTENCY),
    "hfl: DP-FedAvg noise dropped": tuple(c.name for c in hfl_audit.CHECKS if c.name != hfl_audit.NOISE_CHECK),
    "upsi: transferred values are unkeyed hashes": (upsi_audit.ANSWER, upsi_audit.QUERY),
    "upsi: the small party sends its IDs unblinded": (upsi_audit.DICTIONARY, upsi_audit.ANSWER),
}


def _audit(protocol: str, **kwargs: Any) -> AuditOutcome:
    return get(protocol).run_audit(KEY_BITS, allow_insecure=True, **kwargs)


@pytest.fixture(autouse=True)
def _in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "1")


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_audit_flags_the_switched_off_protection(mutation: Mutation, monkeypatch: pytest.MonkeyPatch) -> None:
    mutation.seam(monkeypatch)
    outcome = _audit(mutation.module, **mutation.audit_kwargs)
    broken = outcome.broken_protections()
    for kind, protection in mutation.covers:
        assert any(kind in f.attacks and f.protection is protection for f in broken), (
            f"{mutation.name}: no finding flagged {protection.value} of {kind}; "
            f"flagged: {[(f.observer, f.name) for f in broken]}")
    for name in mutation.checks:
        hits = [f for f in outcome.findings if f.name == name]
        assert hits and any(f.flagged for f in hits), (
            f"{mutation.name}: check {name!r} did not flag; "
            f"findings: {[(f.name, f.flagged) for f in outcome.findings]}")
    for name in UNAFFECTED.get(mutation.name, ()):
        hits = [f for f in outcome.findings if f.name == name]
        assert hits and not any(f.flagged for f in hits), (
            f"{mutation.name}: check {name!r} of a protection the seam keeps flagged (or is missing)")


@pytest.mark.parametrize("module", MODULES)
def test_no_declared_protection_is_flagged_in_an_honest_run(module: str) -> None:
    from conftest import honest_audit

    outcome = honest_audit(module)
    assert not outcome.broken_protections(), [(f.name, f.value, f.p_value) for f in outcome.broken_protections()]
    assert not outcome.failures(), "checks failed, not measured (no messages, or too little power) or found a " \
        "wrong result:\n" + "\n".join(outcome.failures())
    outcome.report.check()
    declared = {d.kind for d in declarations()}
    for f in outcome.findings:
        assert set(f.attacks) <= declared, f"{f.name} attacks undeclared kinds {f.attacks}"
        assert f.value == f.value, f"{f.name}: NaN figure"  # computed, never missing



def test_every_declared_protection_has_a_mutation() -> None:
    load_all_protocols()
    covered = {pair for m in MUTATIONS for pair in m.covers}
    shipped = [d for d in declarations() if d.protocol != "test"]  # "test.*": fixtures of other tests
    missing = [(d.kind, p.value) for d in shipped for p in d.claimed_protections if (d.kind, p) not in covered]
    assert not missing, f"declared protections without a mutation test: {missing}"
    stale = sorted(k for k, _ in covered if k not in {d.kind for d in declarations()})
    assert not stale, f"mutations cover kinds that are no longer declared: {stale}"


def test_every_declared_protection_has_a_declared_check() -> None:
    from vflcrypto.protocols import registry

    load_all_protocols()
    checks = [c for spec in registry().values() for c in spec.checks]
    shipped = [d for d in declarations() if d.protocol != "test"]
    missing = [(d.kind, p.value) for d in shipped for p in d.claimed_protections
               if not any(c.covers(d.kind, p) for c in checks)]
    assert not missing, f"declared protections that no declared check attacks: {missing}"


def test_every_declared_check_is_proven_by_its_own_mutation() -> None:
    from vflcrypto.protocols import registry

    proven = {(m.module, name) for m in MUTATIONS for name in m.checks}
    unproven = [(name, c.name) for name, spec in registry().items() for c in spec.checks
                if (name, c.name) not in proven]
    assert not unproven, f"declared checks without a mutation that makes them flag: {unproven}"
    declared = {(name, c.name) for name, spec in registry().items() for c in spec.checks}
    stale = sorted(proven - declared)
    assert not stale, f"mutations name checks their protocol does not declare: {stale}"
