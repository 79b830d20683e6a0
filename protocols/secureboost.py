"""SecureBoost: vertically federated gradient-boosted decision trees.

Parties and data
    * **active party** (role ``"active"``, party ``"active"``): holds the labels ``y`` and
      its own feature block ``X_a`` of the aligned rows, the Paillier key pair, and at
      the end the trees (structure, leaf weights, its own thresholds, and for every
      split on a passive feature only ``[party, record id]``).
    * **passive parties** (role ``"passive"``, parties ``"passive-0"``, ``"passive-1"``,
      ...; k >= 1): each holds a feature block ``X_k`` of the same aligned rows, and at
      the end a lookup table ``record id -> (feature, threshold)`` for the splits it owns.
    Rows are aligned beforehand (:mod:`vflcrypto.protocols.align`); a digest of the ordered row
    IDs in ``secureboost.setup`` makes misaligned inputs fail before training.

Threat model
    Semi-honest parties. The passive parties must not collude with the active party (it
    holds the decryption key of every gradient they see) nor with each other (pooling
    instance spaces and split ownership sharpens label inference). What each role
    learns is declared per message below and summarised in SECURITY.md; notably every
    passive party learns the *instance space* (which rows share a tree node) and the
    active party learns, per node, the left-side sums ``(G_L, H_L, n_L)`` of every
    passive split candidate (anonymous, shuffled), which are the protocol's outputs by
    design in Cheng et al. Plaintext mode (``plaintext=True``) runs the same messages
    without encryption (separately declared kinds ``secureboost.plain_*``) for debugging
    and as the parity reference: there the passive parties see every gradient, and for
    the logistic loss ``g = p - y`` reveals every label.

Citations
    K. Cheng, T. Fan, Y. Jin, Y. Liu, T. Chen, D. Papadopoulos, Q. Yang, "SecureBoost: A
    Lossless Federated Learning Framework", IEEE Intelligent Systems 36(6), 2021
    (arXiv:1901.08755, 2019); FATE's hetero secure boosting (gradient/hessian packing,
    cipher compression, histogram subtraction); SecretFlow SGB; T. Chen, C. Guestrin,
    "XGBoost: A Scalable Tree Boosting System", KDD 2016 (the gain and leaf weight).

Message flow (one tree; every level's nodes are handled in one exchange)
    0. active -> passive ``secureboost.setup``: model id, parameters, row count, ID digest
       and the active party's Paillier public key (once per training run).
    1. active -> passive ``secureboost.gradients``: one ciphertext per row packing
       ``(g_i, h_i)`` (``secureboost.plain_gradients`` in plaintext mode).
    For each depth ``d < max_depth`` while some node can still split:
    2. active -> passive ``secureboost.level``: the node of every row at depth ``d`` and,
       per node, whether to *compute* its histogram (the smaller child of a split) or
       *derive* it as parent minus sibling (histogram subtraction).
    3. passive -> active ``secureboost.histograms``: per node, the encrypted cumulative
       bin sums ``[[G_L]], [[H_L]]`` of every split candidate ``(feature, bin)`` of that
       party, empty-bin duplicates removed, in a fresh ``secrets`` shuffle per node
       (the position is the anonymous candidate id), folded many per ciphertext
       (compression) and re-randomized (``secureboost.plain_histograms`` in plaintext).
    4. active: decrypts, scores every candidate (own and passive) with
       ``gain = 1/2 [G_L^2/(H_L+lambda) + G_R^2/(H_R+lambda) - G^2/(H+lambda)] - gamma``
       and picks the best per node (deterministic tie-break, see :func:`select_split`).
    5. active -> passive ``secureboost.split_request``: the anonymous ids of the nodes a
       passive party won (to every passive party, possibly empty, to keep lockstep).
    6. passive -> active ``secureboost.split_response``: per won node a fresh record id
       and the left instance set. Only the owner learns the real feature and threshold.
    7. after the last level: active -> passive ``secureboost.level`` with ``done=True``;
       the active party sets leaf weights ``w = -G/(H+lambda)`` (never sent).

Prediction (``predict_local``): the active party walks all trees level by level; for
nodes owned by a passive party it sends one ``secureboost.predict_query`` per party per
level (record ids and the rows at each node) and the owner answers left/right bits in
``secureboost.predict_answer``.

Optimisations (and why)
    * g and h are packed into one ciphertext per row (:class:`PackingSpec`, slot offset
      ``2**value_bits`` makes g non-negative; headroom for ``n`` additions).
    * Histogram subtraction happens on the passive side on ciphertexts (``[[parent]] *
      [[smaller child]]^-1``), after the cumulative sums, so the active party still
      receives only anonymous, freshly shuffled candidates per node. Active-side plaintext
      subtraction would be cheaper by one batch inversion per node but needs candidate ids
      that are stable between parent and child, which lets the active party link
      candidates across nodes and reconstruct feature groups and bin order.
      The packed offsets stay correct because nothing is padded: every ciphertext sums
      exactly its ``n_L`` rows, and subtracting sums of real rows keeps real counts.
      ``value_bits`` covers a whole column sum, so the decryptor reads ``n_L`` exactly from
      the offsets in the hessian slot: the per-candidate row count is revealed to the
      active party (declared; FATE reveals it too).
    * Cumulative bin sums are formed on ciphertexts by the passive party (a few hundred
      multiplications per node): the active party sees only left-side sums of anonymous
      candidates, not per-bin statistics in feature order. It can still difference
      candidates with nested left sets, which is why the table in SECURITY.md declares
      the small-bin leak.
    * Many candidates are folded into one ciphertext before decryption (Horner,
      ``acc**(2**b) * c``) in the process pool, then the few folded ciphertexts are
      re-randomized. (:func:`vflcrypto.paillier.compress` does the same fold, but
      sequentially and without re-randomization, which would let the active party test
      subset products of its own row ciphertexts.)
    * The per-row histogram accumulation (the passive party's dominant cost) runs over
      chunks of rows in :mod:`vflcrypto.parallel`'s process pool, all features of all nodes
      of a level in one pass. (``PaillierVector.sum_by_group`` pads every group to the same
      number of packed terms; cumulative sums would then multiply the terms past the
      packing's headroom, and packed vectors cannot be negated for the subtraction, so the
      kernel here sums raw ciphertexts and keeps real row counts instead.) Overall,
      encrypting every row's (g, h) once per tree dominates: see bench/secureboost_bench.py.

Pure helpers (parameters, binning, gain math, quantization, split selection, ciphertext
kernels) live in :mod:`vflcrypto.protocols._tree`; roles and messages stay here.

Exactness: g and h are quantized to ``frac_bits`` fixed-point integers *before*
encryption and plaintext mode uses the same integers, so decrypted sums equal the
plaintext sums exactly and both modes grow bit-identical trees.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gmpy2 import mpz

from vflcrypto.attacks import accuracy_finding, adjacent_order_finding, unrandomized_paillier
from vflcrypto.dataio import PartyTable, ids_digest, load_model, save_model
from vflcrypto.encoding import PackingSpec
from vflcrypto.errors import (
    InputDataError,
    ProtocolError,
)
from vflcrypto.leakage import AuditOutcome, EmpiricalFinding, Protection, audit, declare
from vflcrypto.paillier import (
    DEFAULT_KEY_BITS,
    PaillierPrivateKey,
    PaillierPublicKey,
    PaillierVector,
    batch_invert,
    ciphertext_width,
    fold_ciphertexts,
    generate_keypair,
)
from vflcrypto.runtime import DEFAULT_TIMEOUT, AuditTap, Channel, Endpoint, LocalNetwork, Transcript, run_parties
from vflcrypto.spec import ProtocolSpec

from ._tree import (
    GAIN_EPS,
    BoostParams,
    Choice,
    base_score,
    bin_feature,
    bin_features,
    bin_histograms,
    check_labels,
    choose_frac_bits,
    encrypted_bin_sums,
    gradients,
    leaf_weight,
    packing_spec,
    quantize,
    select_split,
    split_gain,
    unfold_candidates,
    unpack_candidates,
    valid_candidates,
    value_bound_bits,
)

__all__ = [
    "ACTIVE",
    "GAIN_EPS",
    "PASSIVE",
    "SPEC",
    "ActiveModel",
    "ActiveResult",
    "BoostParams",
    "LocalRun",
    "PassiveModel",
    "PassiveResult",
    "audit_run",
    "base_score",
    "bin_feature",
    "bin_features",
    "demo_step",
    "gradients",
    "label_inference_attack",
    "leaf_weight",
    "predict_active",
    "predict_local",
    "predict_passive",
    "run_active",
    "run_local",
    "run_passive",
    "select_split",
    "split_gain",
]

ACTIVE = "active"
PASSIVE = "passive"
# =========================================================================== messages


@declare("secureboost.setup", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
         reveals="the model id, tree/depth/bin parameters, the number of aligned rows, a digest "
                 "of the ordered row IDs (equality check only) and the active party's Paillier "
                 "public key (none in plaintext mode)")
@dataclass(frozen=True)
class Setup:
    model_id: str
    n_rows: int
    n_trees: int
    max_depth: int
    max_bin: int
    ids_digest: bytes
    plaintext: bool
    public_key: PaillierPublicKey | None


@declare("secureboost.gradients", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.CIPHERTEXT, key_owner=ACTIVE,
         reveals="nothing about g and h beyond the row count (IND-CPA under DCR and the DJN "
                 "short-exponent assumption); the public packing layout reveals a power-of-two "
                 "bound on |g| and the fixed-point precision")
@dataclass(frozen=True)
class EncryptedGradients:
    tree: int
    gh: PaillierVector  # one ciphertext per row: slot 0 = g, slot 1 = h


@declare("secureboost.plain_gradients", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.PLAINTEXT,
         reveals="PLAINTEXT MODE (debug/parity only): every row's gradient and hessian in the "
                 "clear; for the logistic loss g = p - y reveals every label")
@dataclass(frozen=True)
class PlainGradients:
    tree: int
    frac_bits: int
    g: np.ndarray  # int64 fixed-point
    h: np.ndarray


@declare("secureboost.level", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PLAINTEXT,
         reveals="the instance space: which aligned rows share a node at this depth, i.e. the "
                 "partition induced by all earlier splits (the active party's and other passive "
                 "parties' included), and which nodes are leaves; not features, thresholds, "
                 "gradients or labels")
@dataclass(frozen=True)
class LevelRequest:
    tree: int
    depth: int
    done: bool
    node_of_row: np.ndarray  # int32, -1 = row not in a node of this depth
    compute: np.ndarray  # int32 node ids whose histograms are summed row by row
    derive: np.ndarray  # int32 (k, 3): node, parent (previous depth), sibling (this depth)


@declare("secureboost.histograms", sender=PASSIVE, receiver=ACTIVE,
         protection=(Protection.AGGREGATE, Protection.SHUFFLED),
         reveals="after decryption with its own key: per node, for every split candidate of "
                 "this passive party (anonymous, freshly shuffled per node, empty-bin duplicates "
                 "removed) the left-side sums G_L, H_L and the row count n_L; the candidate count "
                 "bounds the party's distinct feature values; candidates with n_L or n - n_L <= 2 "
                 "expose single rows' gradients and their rank in a passive feature")
@dataclass(frozen=True)
class EncryptedHistograms:
    tree: int
    depth: int
    nodes: np.ndarray  # int32 node ids, in the order of the candidates
    counts: np.ndarray  # int32 number of candidates per node
    value_bits: int  # bits per folded candidate (2 packed slots)
    per_ciphertext: int  # candidates folded into one ciphertext
    folded: PaillierVector  # re-randomized folded ciphertexts


@declare("secureboost.plain_histograms", sender=PASSIVE, receiver=ACTIVE,
         protection=(Protection.AGGREGATE, Protection.SHUFFLED),
         reveals="PLAINTEXT MODE: the same per-candidate G_L, H_L, n_L as secureboost.histograms "
                 "reveals after decryption (anonymous, shuffled per node)")
@dataclass(frozen=True)
class PlainHistograms:
    tree: int
    depth: int
    nodes: np.ndarray
    counts: np.ndarray
    grad: np.ndarray  # int64 fixed-point G_L per candidate
    hess: np.ndarray  # int64 fixed-point H_L
    rows: np.ndarray  # int64 n_L


@declare("secureboost.split_request", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.PLAINTEXT,
         reveals="which of its anonymous candidates won which node (ties listed together): the "
                 "owner learns that its feature/threshold is the best split of that node")
@dataclass(frozen=True)
class SplitRequest:
    tree: int
    depth: int
    nodes: np.ndarray  # int32 nodes this party won
    offsets: np.ndarray  # int32 CSR offsets into ``candidates`` (len(nodes) + 1)
    candidates: np.ndarray  # int32 tied anonymous ids (positions in the node's list)


@declare("secureboost.split_response", sender=PASSIVE, receiver=ACTIVE,
         protection=Protection.PLAINTEXT,
         reveals="the left instance set of each split on this passive party's features and an "
                 "opaque record id; not the feature or the threshold")
@dataclass(frozen=True)
class SplitResponse:
    tree: int
    depth: int
    nodes: np.ndarray  # int32
    record_ids: np.ndarray  # int64
    left_bits: np.ndarray  # uint8: np.packbits of each node's left mask (node rows ascending)


@declare("secureboost.predict_query", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.PLAINTEXT,
         reveals="which prediction rows reach each of the owner's split nodes (record ids), one "
                 "message per tree level")
@dataclass(frozen=True)
class PredictQuery:
    model_id: str
    n_rows: int
    depth: int
    done: bool
    record_ids: np.ndarray  # int64
    offsets: np.ndarray  # int64 CSR offsets into ``rows``
    rows: np.ndarray  # int32 prediction row indices


@declare("secureboost.predict_answer", sender=PASSIVE, receiver=ACTIVE,
         protection=Protection.PLAINTEXT,
         reveals="the left/right bit of every queried row at the owner's nodes: the passive "
                 "partition of the prediction rows, not the feature or threshold")
@dataclass(frozen=True)
class PredictAnswer:
    depth: int
    left_bits: np.ndarray  # uint8 packbits per query segment, concatenated


# =========================================================================== models


@dataclass(frozen=True)
class ActiveModel:
    """The active party's trees. Node arrays are flat; tree ``t`` owns ``offsets[t]:offsets[t+1]``.

    ``kind``: 0 leaf, 1 split on an own feature, 2 split on a passive party's feature
    (``party`` indexes ``passive_parties``; ``record`` is that party's record id).
    ``left``/``right`` are tree-local node indices; ``value`` is the leaf weight.
    """

    model_id: str
    objective: str
    base_score: float
    learning_rate: float
    max_depth: int
    columns: tuple[str, ...]
    passive_parties: tuple[str, ...]
    offsets: np.ndarray
    kind: np.ndarray
    party: np.ndarray
    feature: np.ndarray
    bin: np.ndarray
    threshold: np.ndarray
    record: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray

    @property
    def n_trees(self) -> int:
        return len(self.offsets) - 1

    def save(self, path: str | Path) -> None:
        meta = {"format": "vflcrypto.secureboost.active/1", "model_id": self.model_id,
                "objective": self.objective, "base_score": self.base_score,
                "learning_rate": self.learning_rate, "max_depth": self.max_depth,
                "columns": list(self.columns), "passive_parties": list(self.passive_parties)}
        arrays = {k: getattr(self, k) for k in ("offsets", "kind", "party", "feature", "bin",
                                                "threshold", "record", "left", "right", "value")}
        save_model(path, meta, arrays)

    @classmethod
    def load(cls, path: str | Path) -> ActiveModel:
        meta, a = load_model(path)
        if meta.get("format") != "vflcrypto.secureboost.active/1":
            raise InputDataError(f"{path} is not a SecureBoost active-party model")
        try:
            return cls(meta["model_id"], meta["objective"], float(meta["base_score"]),
                       float(meta["learning_rate"]), int(meta["max_depth"]),
                       tuple(meta["columns"]), tuple(meta["passive_parties"]),
                       *(a[k] for k in ("offsets", "kind", "party", "feature", "bin", "threshold",
                                        "record", "left", "right", "value")))
        except KeyError as exc:
            raise InputDataError(f"{path}: model file lacks {exc}") from None


@dataclass(frozen=True)
class PassiveModel:
    """A passive party's lookup table: record id -> (feature, threshold); left iff x <= threshold."""

    model_id: str
    party: str
    columns: tuple[str, ...]
    record_ids: np.ndarray
    feature: np.ndarray
    bin: np.ndarray
    threshold: np.ndarray

    def save(self, path: str | Path) -> None:
        meta = {"format": "vflcrypto.secureboost.passive/1", "model_id": self.model_id,
                "party": self.party, "columns": list(self.columns)}
        save_model(path, meta, {"record_ids": self.record_ids, "feature": self.feature,
                                "bin": self.bin, "threshold": self.threshold})

    @classmethod
    def load(cls, path: str | Path) -> PassiveModel:
        meta, a = load_model(path)
        if meta.get("format") != "vflcrypto.secureboost.passive/1":
            raise InputDataError(f"{path} is not a SecureBoost passive-party model")
        try:
            return cls(meta["model_id"], meta["party"], tuple(meta["columns"]),
                       a["record_ids"], a["feature"], a["bin"], a["threshold"])
        except KeyError as exc:
            raise InputDataError(f"{path}: model file lacks {exc}") from None


# =========================================================================== roles


class _Timer:
    """Accumulates wall time per phase (for the benchmark's breakdown)."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}

    def add(self, phase: str, t0: float) -> float:
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - t0
        return now


@dataclass
class ActiveResult:
    """What the active party ends with: the model, training margins and phase timings."""

    model: ActiveModel
    train_margin: np.ndarray
    timings: dict[str, float]

    def train_predictions(self) -> np.ndarray:
        return _link(self.model.objective, self.train_margin)


@dataclass
class PassiveResult:
    """What a passive party ends with: its lookup table and phase timings."""

    model: PassiveModel
    timings: dict[str, float]


def _link(objective: str, margin: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-margin)) if objective == "binary" else margin


def _recv(ch: Channel, kind: type, timer: _Timer, timeout: float | None) -> Any:
    t0 = time.perf_counter()
    msg = ch.recv(kind, timeout=timeout)
    timer.add("messages_wait", t0)
    return msg


def _send(ch: Channel, msg: Any, timer: _Timer) -> None:
    t0 = time.perf_counter()
    ch.send(msg)
    timer.add("messages", t0)


def _as_matrix(X: np.ndarray, name: str) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise InputDataError(f"{name}: feature matrix must be 2-D")
    if np.isinf(X).any():
        raise InputDataError(f"{name}: features must not be infinite")
    return X


@dataclass
class _TreeBuilder:
    """The active party's growing tree (tree-local node arrays)."""

    kind: list[int] = field(default_factory=list)
    party: list[int] = field(default_factory=list)
    feature: list[int] = field(default_factory=list)
    bin: list[int] = field(default_factory=list)
    threshold: list[float] = field(default_factory=list)
    record: list[int] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    right: list[int] = field(default_factory=list)
    value: list[float] = field(default_factory=list)

    def new(self) -> int:
        for lst, v in ((self.kind, 0), (self.party, -1), (self.feature, -1), (self.bin, -1),
                       (self.threshold, 0.0), (self.record, -1), (self.left, -1),
                       (self.right, -1), (self.value, 0.0)):
            lst.append(v)
        return len(self.kind) - 1


@dataclass
class _Node:
    index: int  # tree-local
    rows: np.ndarray  # sorted row indices
    G: int
    H: int
    parent_slot: int = -1  # node id at the previous depth


def run_active(
    channels: dict[str, Channel],
    X: np.ndarray,
    y: np.ndarray,
    *,
    ids: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    params: BoostParams | None = None,
    plaintext: bool = False,
    key_bits: int = DEFAULT_KEY_BITS,
    keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
    allow_insecure: bool = False,
    timeout: float | None = None,
) -> ActiveResult:
    """The active party: drive training over its channels to the passive parties.

    ``channels`` maps passive party names (their order fixes the owner order) to
    channels. ``ids`` (the ordered aligned row IDs) are hashed into the setup message so
    misaligned passive inputs fail early.
    """
    params = BoostParams() if params is None else params
    params.validate()
    timer = _Timer()
    X = _as_matrix(X, "active party")
    y = np.asarray(y, dtype=np.float64).ravel()
    n = len(y)
    if X.shape[0] != n:
        raise InputDataError(f"active party has {X.shape[0]} feature rows and {n} labels")
    check_labels(params.objective, y)
    cols = tuple(columns) if columns is not None else tuple(f"x{i}" for i in range(X.shape[1]))
    names = list(channels)
    if not names:
        raise InputDataError("SecureBoost needs at least one passive party")
    sk: PaillierPrivateKey | None = None
    pk: PaillierPublicKey | None = None
    if not plaintext:
        t0 = time.perf_counter()
        pk, sk = keys if keys is not None else generate_keypair(key_bits, allow_insecure=allow_insecure)
        timer.add("keygen", t0)
        channels[names[0]].hold("secret_key", sk)
        for ch in channels.values():
            ch.keyring.add(pk)
    model_id = secrets.token_hex(16)
    digest = ids_digest(ids if ids is not None else [str(i) for i in range(n)], "secureboost")
    for ch in channels.values():
        _send(ch, Setup(model_id, n, params.n_trees, params.max_depth, params.max_bin, digest,
                        plaintext, pk), timer)

    t0 = time.perf_counter()
    bins, splits = bin_features(X, params.max_bin)
    width = max([len(s) + 1 for s in splits] + [1])
    timer.add("binning", t0)
    base = base_score(params.objective, y)
    margin = np.full(n, base)
    vbb = 1
    trees: list[_TreeBuilder] = []

    for t in range(params.n_trees):
        g, h = gradients(params.objective, y, margin)
        vbb = max(vbb, value_bound_bits(g, h))
        frac = choose_frac_bits(vbb, n)
        gq, hq = quantize(g, frac), quantize(h, frac)
        spec = packing_spec(n, frac, vbb)
        channels[names[0]].hold("gradients", gq)  # its own (g, h) per tree, for the audit
        channels[names[0]].hold("packing", spec)
        t0 = time.perf_counter()
        if plaintext:
            grad_msg: Any = PlainGradients(t, frac, gq, hq)
        else:
            assert sk is not None
            gh = np.column_stack([np.ldexp(gq.astype(np.float64), -frac),
                                  np.ldexp(hq.astype(np.float64), -frac)])
            grad_msg = EncryptedGradients(t, sk.encrypt_packed(gh, spec))
        timer.add("encrypt", t0)
        for ch in channels.values():
            _send(ch, grad_msg, timer)

        tree = _TreeBuilder()
        root = _Node(tree.new(), np.arange(n), int(gq.sum()), int(hq.sum()))
        level = [root]
        leaves: list[_Node] = []
        for depth in range(params.max_depth):
            if not level:
                break
            channels[names[0]].hold("node_rows", [nd.rows for nd in level])
            node_of_row = np.full(n, -1, dtype=np.int32)
            for i, nd in enumerate(level):
                node_of_row[nd.rows] = i
            compute, derive = _plan(level)
            req = LevelRequest(t, depth, False, node_of_row, compute, derive)
            for ch in channels.values():
                _send(ch, req, timer)
            # own candidates
            t0 = time.perf_counter()
            own = []
            for nd in level:
                sg, sh, sn = bin_histograms(bins, nd.rows, gq, hq, width)
                ok = valid_candidates(sn, len(nd.rows))
                cg, ch_, cn = np.cumsum(sg, 1), np.cumsum(sh, 1), np.cumsum(sn, 1)
                flat = np.flatnonzero(ok.ravel())
                own.append((cg.ravel()[flat], ch_.ravel()[flat], cn.ravel()[flat], flat))
            timer.add("split_search", t0)
            # passive candidates
            passive_blocks: list[list[tuple[np.ndarray, ...]]] = []
            for name in names:
                hist = _recv(channels[name], PlainHistograms if plaintext else EncryptedHistograms,
                             timer, timeout)
                passive_blocks.append(_read_histograms(hist, t, depth, level, sk, spec, timer, name))
            t0 = time.perf_counter()
            choices = []
            for i, nd in enumerate(level):
                blocks = [own[i]] + [pb[i] for pb in passive_blocks]
                choices.append(select_split(blocks, nd.G, nd.H, frac, params))
            timer.add("split_search", t0)
            # ask the owners
            for p, name in enumerate(names):
                won = [(i, c) for i, c in enumerate(choices) if c is not None and c.owner == p + 1]
                offs = np.cumsum([0] + [len(c.ids) for _, c in won]).astype(np.int32)
                cand = np.asarray([x for _, c in won for x in c.ids], dtype=np.int32)
                _send(channels[name], SplitRequest(t, depth, np.asarray([i for i, _ in won], np.int32),
                                                   offs, cand), timer)
            lefts: dict[int, tuple[np.ndarray, int, int]] = {}
            for p, name in enumerate(names):
                resp = _recv(channels[name], SplitResponse, timer, timeout)
                for i, mask, rec in _read_response(resp, t, depth, level, choices, p + 1, name):
                    lefts[i] = (mask, p, rec)
            nxt: list[_Node] = []
            for i, (nd, c) in enumerate(zip(level, choices, strict=True)):
                if c is None:
                    leaves.append(nd)
                    continue
                if c.owner == 0:
                    f, b = divmod(c.ids[0], width)
                    mask = bins[nd.rows, f] <= b
                    tree.kind[nd.index], tree.feature[nd.index] = 1, f
                    tree.bin[nd.index], tree.threshold[nd.index] = b, float(splits[f][b])
                else:
                    mask, p, rec = lefts[i]
                    tree.kind[nd.index], tree.party[nd.index], tree.record[nd.index] = 2, p, rec
                left_rows = nd.rows[mask]
                if int(mask.sum()) != c.nL or int(gq[left_rows].sum()) != c.GL or \
                        int(hq[left_rows].sum()) != c.HL:
                    raise ProtocolError("left instance set does not match the chosen candidate")
                for side, rows in (("left", nd.rows[mask]), ("right", nd.rows[~mask])):
                    child = _Node(tree.new(), rows, int(gq[rows].sum()), int(hq[rows].sum()), i)
                    getattr(tree, side)[nd.index] = child.index
                    nxt.append(child)
            level = nxt
        leaves.extend(level)
        done = LevelRequest(t, params.max_depth, True, np.zeros(0, np.int32), np.zeros(0, np.int32),
                            np.zeros((0, 3), np.int32))
        for ch in channels.values():
            _send(ch, done, timer)
        scale = 2.0 ** -frac
        for nd in leaves:
            w = leaf_weight(nd.G * scale, nd.H * scale, params.reg_lambda)
            tree.value[nd.index] = w
            margin[nd.rows] += params.learning_rate * w
        trees.append(tree)

    model = _assemble(trees, model_id, params, base, cols, tuple(names))
    return ActiveResult(model, margin, timer.phases)


def _plan(level: list[_Node]) -> tuple[np.ndarray, np.ndarray]:
    """Which nodes to sum row by row (root; the smaller sibling) and which to derive."""
    if len(level) == 1 and level[0].parent_slot < 0:
        return np.zeros(1, np.int32), np.zeros((0, 3), np.int32)
    compute: list[int] = []
    derive: list[tuple[int, int, int]] = []
    for i in range(0, len(level), 2):
        a, b = i, i + 1  # siblings are appended consecutively (left, right)
        small, large = (a, b) if len(level[a].rows) <= len(level[b].rows) else (b, a)
        compute.append(small)
        derive.append((large, level[large].parent_slot, small))
    return np.asarray(compute, np.int32), np.asarray(derive, np.int32).reshape(-1, 3)


def _read_histograms(hist: Any, tree: int, depth: int, level: list[_Node],
                     sk: PaillierPrivateKey | None, spec: PackingSpec, timer: _Timer,
                     name: str) -> list[tuple[np.ndarray, ...]]:
    """Check one passive party's histogram message and return per-node candidate blocks."""
    if hist.tree != tree or hist.depth != depth:
        raise ProtocolError(f"{name} sent histograms for tree {hist.tree} depth {hist.depth}, "
                            f"expected tree {tree} depth {depth}")
    nodes = np.asarray(hist.nodes)
    counts = np.asarray(hist.counts)
    if nodes.shape != (len(level),) or not np.array_equal(nodes, np.arange(len(level))):
        raise ProtocolError(f"{name} sent histograms for the wrong nodes")
    if counts.shape != (len(level),) or (counts < 0).any():
        raise ProtocolError(f"{name} sent malformed candidate counts")
    t0 = time.perf_counter()
    GL, HL, NL = decode_histograms(hist, sk, spec, name)
    timer.add("decrypt", t0)
    out = []
    start = 0
    for nd, k in zip(level, counts.tolist(), strict=True):
        gl, hl, nl = GL[start : start + k], HL[start : start + k], NL[start : start + k]
        if k and (nl.min() < 1 or nl.max() >= len(nd.rows)):
            raise ProtocolError(f"{name} sent a candidate with an impossible row count")
        out.append((gl, hl, nl, np.arange(k)))
        start += k
    return out


def decode_histograms(hist: EncryptedHistograms | PlainHistograms, sk: PaillierPrivateKey | None,
                      spec: PackingSpec, name: str = "passive party") -> tuple[np.ndarray, ...]:
    """(G_L, H_L, n_L) of every candidate in a histogram message, in its order (layout checked)."""
    total = int(np.asarray(hist.counts).sum())
    if isinstance(hist, PlainHistograms):
        GL, HL, NL = (np.asarray(a) for a in (hist.grad, hist.hess, hist.rows))
        if any(a.shape != (total,) or a.dtype.kind not in "iu" for a in (GL, HL, NL)):
            raise ProtocolError(f"{name} sent malformed plaintext histograms")
        return GL.astype(np.int64), HL.astype(np.int64), NL.astype(np.int64)
    if sk is None:
        raise ProtocolError(f"{name} sent encrypted histograms in plaintext mode")
    bits = 2 * spec.slot_bits
    per = (sk.public_key.bits - 1) // bits
    if hist.value_bits != bits or hist.per_ciphertext != per:
        raise ProtocolError(f"{name} folded its histograms with the wrong layout")
    if len(hist.folded) != -(-total // per):
        raise ProtocolError(f"{name} sent {len(hist.folded)} folded ciphertexts for {total} candidates")
    if hist.folded.public_key != sk.public_key:
        raise ProtocolError(f"{name} sent histograms under another key")
    n = int(sk.public_key.n)
    raw = [v % n for v in sk.decrypt(hist.folded)] if total else []
    return unpack_candidates(unfold_candidates(raw, total, per, bits), spec)


def _read_response(resp: SplitResponse, tree: int, depth: int, level: list[_Node],
                   choices: list[Choice | None], owner: int,
                   name: str) -> list[tuple[int, np.ndarray, int]]:
    """Check a passive party's split response; return (node, left mask, record id)."""
    won = [i for i, c in enumerate(choices) if c is not None and c.owner == owner]
    if resp.tree != tree or resp.depth != depth:
        raise ProtocolError(f"{name} answered for tree {resp.tree} depth {resp.depth}")
    if np.asarray(resp.nodes).tolist() != won or len(resp.record_ids) != len(won):
        raise ProtocolError(f"{name} answered for nodes it did not win")
    bits = np.asarray(resp.left_bits, dtype=np.uint8)
    sizes = [(len(level[i].rows) + 7) // 8 for i in won]
    if len(bits) != sum(sizes):
        raise ProtocolError(f"{name} sent left instance sets of the wrong length")
    out = []
    start = 0
    for i, size, rec in zip(won, sizes, np.asarray(resp.record_ids).tolist(), strict=True):
        mask = np.unpackbits(bits[start : start + size], count=len(level[i].rows)).astype(bool)
        out.append((i, mask, int(rec)))
        start += size
    return out


def _assemble(trees: list[_TreeBuilder], model_id: str, params: BoostParams, base: float,
              columns: tuple[str, ...], names: tuple[str, ...]) -> ActiveModel:
    offsets = np.cumsum([0] + [len(t.kind) for t in trees]).astype(np.int64)

    def cat(attr: str, dtype: Any) -> np.ndarray:
        return np.asarray([v for t in trees for v in getattr(t, attr)], dtype=dtype)

    return ActiveModel(model_id, params.objective, base, params.learning_rate, params.max_depth,
                       columns, names, offsets, cat("kind", np.int8), cat("party", np.int32),
                       cat("feature", np.int32), cat("bin", np.int32), cat("threshold", np.float64),
                       cat("record", np.int64), cat("left", np.int32), cat("right", np.int32),
                       cat("value", np.float64))


# --------------------------------------------------------------------------- passive party


def run_passive(
    channels: dict[str, Channel],
    X: np.ndarray,
    *,
    ids: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    timeout: float | None = None,
) -> PassiveResult:
    """A passive party: bin its features, answer histogram and split requests.

    ``channels`` holds the channel to the active party. Returns its lookup table and what
    it observed (instance spaces and its own left sets, for the leakage audit).
    """
    if len(channels) != 1:
        raise ProtocolError("a passive party talks to exactly one active party")
    ch = next(iter(channels.values()))
    name = ch.local.name
    timer = _Timer()
    X = _as_matrix(X, name)
    n, F = X.shape
    cols = tuple(columns) if columns is not None else tuple(f"x{i}" for i in range(F))
    setup = _recv(ch, Setup, timer, timeout)
    if setup.n_rows != n:
        raise InputDataError(f"{name} has {n} rows, the active party {setup.n_rows}: not aligned")
    if ids is not None and not secrets.compare_digest(ids_digest(ids, "secureboost"), setup.ids_digest):
        raise InputDataError(f"{name}: row IDs differ from the active party's: inputs not aligned")
    if not 2 <= setup.max_bin <= 256 or setup.n_trees < 1 or not 1 <= setup.max_depth <= 30:
        raise ProtocolError("setup parameters out of range")
    pk = setup.public_key
    if setup.plaintext != (pk is None):
        raise ProtocolError("setup mode and public key disagree")
    if pk is not None:
        ch.keyring.add(pk)
    t0 = time.perf_counter()
    bins, splits = bin_features(X, setup.max_bin)
    width = max([len(s) + 1 for s in splits] + [1])
    timer.add("binning", t0)
    rec_f: list[int] = []
    rec_b: list[int] = []

    for t in range(setup.n_trees):
        if setup.plaintext:
            grad = _recv(ch, PlainGradients, timer, timeout)
            gq, hq = np.asarray(grad.g), np.asarray(grad.h)
            if grad.tree != t or gq.shape != (n,) or hq.shape != (n,) or \
                    gq.dtype.kind != "i" or hq.dtype.kind != "i":
                raise ProtocolError("malformed plaintext gradients")
            blob = b""
        else:
            grad = _recv(ch, EncryptedGradients, timer, timeout)
            if grad.tree != t or len(grad.gh) != n:
                raise ProtocolError(f"expected {n} encrypted gradients for tree {t}")
            if grad.gh.packing is None or grad.gh.slots != 2 or grad.gh.public_key != pk:
                raise ProtocolError("gradients are not packed (g, h) pairs under the setup key")
            spec = grad.gh.packing
            blob = grad.gh.to_bytes()
        prev: dict[int, Any] = {}
        partition = np.zeros(n, dtype=np.int64)
        for depth in range(setup.max_depth + 1):
            req = _recv(ch, LevelRequest, timer, timeout)
            if req.tree != t:
                raise ProtocolError(f"level request for tree {req.tree} during tree {t}")
            if req.done:
                break
            if depth == setup.max_depth or req.depth != depth:
                raise ProtocolError("level request out of order")
            node_of_row = np.asarray(req.node_of_row)
            compute = np.asarray(req.compute).astype(np.int64).ravel()
            derive = np.asarray(req.derive).astype(np.int64).reshape(-1, 3)
            n_nodes = len(compute) + len(derive)
            if node_of_row.shape != (n,) or node_of_row.dtype.kind != "i" or \
                    int(node_of_row.max(initial=-1)) >= n_nodes or int(node_of_row.min(initial=0)) < -1:
                raise ProtocolError("malformed node assignment")
            if sorted(compute.tolist() + derive[:, 0].tolist()) != list(range(n_nodes)) or \
                    not set(derive[:, 2].tolist()) <= set(compute.tolist()) or \
                    not set(derive[:, 1].tolist()) <= set(prev):
                raise ProtocolError("inconsistent histogram plan")
            order = np.argsort(node_of_row, kind="stable")
            starts = np.searchsorted(node_of_row[order], np.arange(n_nodes + 1))
            node_rows = [order[starts[i] : starts[i + 1]] for i in range(n_nodes)]
            partition = np.where(node_of_row >= 0, node_of_row.astype(np.int64) * 2, -1)
            t0 = time.perf_counter()
            counts = [np.bincount((bins[r] + np.arange(F) * width).ravel(), minlength=F * width)
                      .reshape(F, width) for r in node_rows]
            if setup.plaintext:
                cum = _plain_level(bins, node_rows, compute, derive, prev, gq, hq, width)
            else:
                assert pk is not None
                cum = _encrypted_level(pk, blob, bins, node_rows, compute, derive, prev, width)
            # canonical candidates per node, freshly shuffled
            anon: list[np.ndarray] = []
            for i in range(n_nodes):
                flat = np.flatnonzero(valid_candidates(counts[i], len(node_rows[i])).ravel())
                anon.append(shuffle_candidates(flat))
            node_ids = np.arange(n_nodes, dtype=np.int32)
            cnts = np.asarray([len(a) for a in anon], dtype=np.int32)
            if setup.plaintext:
                sel = [np.stack([c[a] for c in cum[i]]) if len(a) else np.zeros((3, 0), np.int64)
                       for i, a in enumerate(anon)]
                stacked = np.concatenate(sel, axis=1) if sel else np.zeros((3, 0), np.int64)
                msg: Any = PlainHistograms(t, depth, node_ids, cnts, stacked[0].copy(),
                                           stacked[1].copy(), stacked[2].copy())
            else:
                assert pk is not None
                cand = [cum[i][j] for i, a in enumerate(anon) for j in a.tolist()]
                bits = 2 * spec.slot_bits
                folded, per = fold_ciphertexts(pk, cand, bits)
                vec = PaillierVector.from_ciphertexts(pk, folded).rerandomize() if folded else \
                    PaillierVector.from_ciphertexts(pk, [])
                msg = EncryptedHistograms(t, depth, node_ids, cnts, bits, per, vec)
            prev = cum
            timer.add("histogram", t0)
            _send(ch, msg, timer)
            sreq = _recv(ch, SplitRequest, timer, timeout)
            if sreq.tree != t or sreq.depth != depth:
                raise ProtocolError("split request out of order")
            won = np.asarray(sreq.nodes).astype(np.int64)
            offs = np.asarray(sreq.offsets).astype(np.int64)
            cands = np.asarray(sreq.candidates).astype(np.int64)
            if len(offs) != len(won) + 1 or (len(won) and (offs[0] != 0 or offs[-1] != len(cands)
                                                          or (np.diff(offs) < 1).any())):
                raise ProtocolError("malformed split request")
            rec_ids, bit_parts = [], []
            for k, node in enumerate(won.tolist()):
                if not 0 <= node < n_nodes:
                    raise ProtocolError("split request names an unknown node")
                ids_k = cands[offs[k] : offs[k + 1]]
                if ids_k.min() < 0 or ids_k.max() >= len(anon[node]):
                    raise ProtocolError("split request names an unknown candidate")
                f, b = divmod(int(anon[node][ids_k].min()), width)
                rows = node_rows[node]
                mask = bins[rows, f] <= b
                rec_ids.append(len(rec_f))
                rec_f.append(f)
                rec_b.append(b)
                bit_parts.append(np.packbits(mask))
                partition[rows[mask]] += 1
            left_bits = np.concatenate(bit_parts) if bit_parts else np.zeros(0, np.uint8)
            _send(ch, SplitResponse(t, depth, won.astype(np.int32), np.asarray(rec_ids, np.int64),
                                    left_bits), timer)
        else:
            raise ProtocolError("tree did not end within max_depth levels")
        ch.hold("instance_partition", partition)  # its finest view of the tree (for the audit)

    thr = np.asarray([float(splits[f][b]) for f, b in zip(rec_f, rec_b, strict=True)], np.float64)
    model = PassiveModel(setup.model_id, name, cols, np.arange(len(rec_f), dtype=np.int64),
                         np.asarray(rec_f, np.int32), np.asarray(rec_b, np.int32), thr)
    return PassiveResult(model, timer.phases)


def shuffle_candidates(flat: np.ndarray) -> np.ndarray:
    """A node's candidate ids in a fresh uniformly random order (``secrets``): the anonymous ids."""
    perm = flat.tolist()
    secrets.SystemRandom().shuffle(perm)
    return np.asarray(perm, dtype=np.int64)


def _plain_level(bins: np.ndarray, node_rows: list[np.ndarray], compute: np.ndarray,
                 derive: np.ndarray, prev: dict[int, Any], gq: np.ndarray, hq: np.ndarray,
                 width: int) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Cumulative (G, H, n) per (feature, bin) of every node; larger siblings by subtraction."""
    cum: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for i in compute.tolist():
        sg, sh, sn = bin_histograms(bins, node_rows[i], gq, hq, width)
        cum[i] = (np.cumsum(sg, 1).ravel(), np.cumsum(sh, 1).ravel(), np.cumsum(sn, 1).ravel())
    for node, parent, sib in derive.tolist():
        cum[node] = tuple(p - s for p, s in zip(prev[parent], cum[sib], strict=True))  # type: ignore[assignment]
    return cum


def _encrypted_level(pk: PaillierPublicKey, blob: bytes, bins: np.ndarray,
                     node_rows: list[np.ndarray], compute: np.ndarray, derive: np.ndarray,
                     prev: dict[int, Any], width: int) -> dict[int, list[mpz]]:
    """Encrypted cumulative bin sums per node: row-by-row for ``compute``, else parent/sibling."""
    n, F = bins.shape
    w = ciphertext_width(pk.n)
    nsq = pk.nsquare
    comp = compute.tolist()
    rows = np.concatenate([node_rows[i] for i in comp]) if comp else np.zeros(0, np.int64)
    slot = np.concatenate([np.full(len(node_rows[i]), s, np.int64) for s, i in enumerate(comp)]) \
        if comp else np.zeros(0, np.int64)
    keys = slot[:, None] * (F * width) + np.arange(F, dtype=np.int64)[None, :] * width + bins[rows]
    row_blob = np.frombuffer(blob, dtype=np.uint8).reshape(n, w)[rows].tobytes()
    sums = encrypted_bin_sums(pk, row_blob, keys, len(comp) * F * width)
    cum: dict[int, list[mpz]] = {}
    one = mpz(1)
    for s, i in enumerate(comp):
        base = s * F * width
        out: list[mpz] = []
        for f in range(F):
            acc = one
            for b in range(width):
                c = sums[base + f * width + b]
                if c != 1:
                    acc = c if acc == 1 else acc * c % nsq
                out.append(acc)
        cum[i] = out
    for node, parent, sib in derive.tolist():
        inv = batch_invert(cum[sib], nsq)
        cum[node] = [p * q % nsq for p, q in zip(prev[parent], inv, strict=True)]
    return cum


# --------------------------------------------------------------------------- prediction


def predict_active(channels: dict[str, Channel], model: ActiveModel, X: np.ndarray, *,
                   timeout: float | None = None) -> np.ndarray:
    """Walk all trees level by level; one query per passive party per level. Returns
    probabilities (binary) or values (regression)."""
    X = _as_matrix(X, "active party")
    if X.shape[1] != len(model.columns):
        raise InputDataError(f"active party has {X.shape[1]} features, the model {len(model.columns)}")
    names = list(model.passive_parties)
    if set(channels) != set(names):
        raise InputDataError(f"model was trained with passive parties {names}, got {sorted(channels)}")
    n = X.shape[0]
    margin = np.full(n, model.base_score)
    frontier = [(t, 0, np.arange(n)) for t in range(model.n_trees)]
    depth = 0
    while frontier:
        if depth > model.max_depth:
            raise InputDataError("model has a path deeper than its max_depth")
        nxt = []
        queries: dict[int, list[tuple[int, int, np.ndarray]]] = {p: [] for p in range(len(names))}
        for t, idx, rows in frontier:
            g = int(model.offsets[t]) + idx
            kind = int(model.kind[g])
            if kind == 0:
                margin[rows] += model.learning_rate * float(model.value[g])
            elif kind == 1:
                mask = X[rows, int(model.feature[g])] <= float(model.threshold[g])
                nxt += [(t, int(model.left[g]), rows[mask]), (t, int(model.right[g]), rows[~mask])]
            else:
                queries[int(model.party[g])].append((t, idx, rows))
        for p, name in enumerate(names):
            q = queries[p]
            recs = np.asarray([model.record[int(model.offsets[t]) + i] for t, i, _ in q], np.int64)
            offs = np.cumsum([0] + [len(r) for _, _, r in q]).astype(np.int64)
            rows_all = np.concatenate([r for _, _, r in q]).astype(np.int32) if q else np.zeros(0, np.int32)
            channels[name].send(PredictQuery(model.model_id, n, depth, False, recs, offs, rows_all))
        for p, name in enumerate(names):
            ans = channels[name].recv(PredictAnswer, timeout=timeout)
            q = queries[p]
            bits = np.asarray(ans.left_bits, dtype=np.uint8)
            sizes = [(len(r) + 7) // 8 for _, _, r in q]
            if ans.depth != depth or len(bits) != sum(sizes):
                raise ProtocolError(f"{name} answered a prediction query with the wrong layout")
            start = 0
            for (t, idx, rows), size in zip(q, sizes, strict=True):
                g = int(model.offsets[t]) + idx
                mask = np.unpackbits(bits[start : start + size], count=len(rows)).astype(bool)
                start += size
                nxt += [(t, int(model.left[g]), rows[mask]), (t, int(model.right[g]), rows[~mask])]
        frontier = [f for f in nxt if len(f[2])]
        depth += 1
    empty = PredictQuery(model.model_id, n, depth, True, np.zeros(0, np.int64), np.zeros(1, np.int64),
                         np.zeros(0, np.int32))
    for name in names:
        channels[name].send(empty)
    return _link(model.objective, margin)


def predict_passive(channels: dict[str, Channel], model: PassiveModel, X: np.ndarray, *,
                    timeout: float | None = None) -> int:
    """Answer left/right for the queried rows at this party's nodes; returns rows answered."""
    ch = next(iter(channels.values()))
    X = _as_matrix(X, model.party)
    if X.shape[1] != len(model.columns):
        raise InputDataError(f"{model.party} has {X.shape[1]} features, its model {len(model.columns)}")
    lookup = {int(r): k for k, r in enumerate(model.record_ids.tolist())}
    answered = 0
    while True:
        q = ch.recv(PredictQuery, timeout=timeout)
        if not secrets.compare_digest(q.model_id.encode(), model.model_id.encode()):
            raise ProtocolError(f"{model.party}: prediction query for another model (its record ids "
                                "would be meaningless): stale or mismatched passive model")
        if q.n_rows != X.shape[0]:
            raise InputDataError(f"{model.party} has {X.shape[0]} rows, the active party {q.n_rows}")
        if q.done:
            return answered
        recs = np.asarray(q.record_ids).tolist()
        offs = np.asarray(q.offsets).astype(np.int64)
        rows = np.asarray(q.rows).astype(np.int64)
        if len(offs) != len(recs) + 1 or offs[0] != 0 or offs[-1] != len(rows) or \
                (np.diff(offs) < 0).any() or (len(rows) and (rows.min() < 0 or rows.max() >= X.shape[0])):
            raise ProtocolError("malformed prediction query")
        parts = []
        for k, rec in enumerate(recs):
            j = lookup.get(int(rec))
            if j is None:
                raise ProtocolError(f"{model.party}: unknown record id {rec} (stale or mismatched "
                                    "passive model)")
            r = rows[offs[k] : offs[k + 1]]
            parts.append(np.packbits(X[r, int(model.feature[j])] <= float(model.threshold[j])))
            answered += len(r)
        ch.send(PredictAnswer(q.depth, np.concatenate(parts) if parts else np.zeros(0, np.uint8)))


# --------------------------------------------------------------------------- local runs


@dataclass
class LocalRun:
    """Every party's result of an in-process run, and the shared transcript."""

    active: ActiveResult
    passive: dict[str, PassiveResult]
    transcript: Transcript
    seconds: float

    @property
    def bytes_sent(self) -> dict[str, int]:
        return self.transcript.bytes_sent_by("sender")


def _network(names: list[str], timeout: float, allow_insecure: bool,
             transcript: Transcript | None = None) -> LocalNetwork:
    eps = [Endpoint("active", ACTIVE)] + [Endpoint(p, PASSIVE) for p in names]
    return LocalNetwork(eps, links=[("active", p) for p in names], timeout=timeout,
                        allow_insecure=allow_insecure, transcript=transcript)


def run_local(
    X_active: np.ndarray,
    y: np.ndarray,
    X_passive: Sequence[np.ndarray],
    *,
    params: BoostParams | None = None,
    plaintext: bool = False,
    key_bits: int = DEFAULT_KEY_BITS,
    keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
    allow_insecure: bool = False,
    ids: Sequence[str] | None = None,
    active_columns: Sequence[str] | None = None,
    passive_columns: Sequence[Sequence[str]] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    passive_override: dict[str, Any] | None = None,
    tap: AuditTap | None = None,
) -> LocalRun:
    """Train with every party in this process (threads over in-memory channels).

    ``passive_override`` maps a passive party name to a callable ``(channels) -> Any`` that
    replaces its role (hostile-peer tests); ``tap`` (audits) keeps what each party received
    and holds.
    """
    names = [f"passive-{i}" for i in range(len(X_passive))]
    net = _network(names, timeout, allow_insecure,
                   Transcript(tap))
    tasks: dict[str, Any] = {
        "active": lambda: run_active(net.channels("active"), X_active, y, ids=ids,
                                     columns=active_columns, params=params, plaintext=plaintext,
                                     key_bits=key_bits, keys=keys, allow_insecure=allow_insecure,
                                     timeout=timeout),
    }
    for i, name in enumerate(names):
        cols = passive_columns[i] if passive_columns is not None else None
        if passive_override and name in passive_override:
            fn = passive_override[name]
            tasks[name] = (lambda fn=fn, name=name: fn(net.channels(name)))
        else:
            tasks[name] = (lambda name=name, X=X_passive[i], cols=cols: run_passive(
                net.channels(name), X, ids=ids, columns=cols, timeout=timeout))
    t0 = time.perf_counter()
    results = run_parties(tasks, network=net)
    seconds = time.perf_counter() - t0
    return LocalRun(results["active"], {n: results[n] for n in names}, net.transcript, seconds)


def predict_local(active_model: ActiveModel, X_active: np.ndarray,
                  passive: Sequence[tuple[PassiveModel, np.ndarray]], *,
                  timeout: float = DEFAULT_TIMEOUT, transcript: Transcript | None = None) -> np.ndarray:
    """Joint prediction with every party in this process (e.g. after loading saved models).

    ``passive`` lists ``(model, X)`` per passive party, in any order (matched by party name).
    """
    names = list(active_model.passive_parties)
    by_name = {m.party: (m, X) for m, X in passive}
    if set(by_name) != set(names):
        raise InputDataError(f"model needs passive parties {names}, got {sorted(by_name)}")
    net = _network(names, timeout, True, transcript)
    tasks: dict[str, Any] = {"active": lambda: predict_active(net.channels("active"), active_model,
                                                              X_active, timeout=timeout)}
    for name in names:
        m, X = by_name[name]
        tasks[name] = (lambda m=m, X=X, name=name: predict_passive(net.channels(name), m, X,
                                                                   timeout=timeout))
    return run_parties(tasks, network=net)["active"]


# =========================================================================== demo and audit


def _synthetic(n: int = 600, seed: int = 7) -> tuple[np.ndarray, np.ndarray, tuple[str, ...],
                                                     np.ndarray, tuple[str, ...]]:
    """Deterministic vertical split whose label depends on both parties' features."""
    rng = np.random.default_rng(seed)  # not secret: example data
    Xa = rng.normal(size=(n, 3))
    Xp = rng.normal(size=(n, 4))
    z = 1.2 * Xa[:, 0] - 0.8 * Xa[:, 1] + 1.5 * Xp[:, 0] + np.where(Xp[:, 2] > 0.3, 1.0, -0.5)
    y = (z + rng.normal(scale=0.7, size=n) > 0.2).astype(np.float64)
    return Xa, y, ("a0", "a1", "a2"), Xp, ("p0", "p1", "p2", "p3")


def _join_by_id(a: PartyTable, p: PartyTable) -> tuple[PartyTable, PartyTable]:
    """In-process ID join (demo fallback when the PSI step has not run)."""
    pos = {k: i for i, k in enumerate(p.ids)}
    rows_a = [i for i, k in enumerate(a.ids) if k in pos]
    if not rows_a:
        raise InputDataError("the example files share no IDs")
    return a.take(rows_a), p.take([pos[a.ids[i]] for i in rows_a])


def _demo_data(ctx: Any) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], np.ndarray,
                                  tuple[str, ...], str]:
    from vflcrypto.dataio import read_party_csv

    aligned = getattr(ctx, "state", {}).get("aligned") if ctx is not None else None
    try:
        if aligned and "bank" in aligned and "shop" in aligned:
            a = read_party_csv(aligned["bank"], "id", label="defaulted")
            p = read_party_csv(aligned["shop"], "id")
            if a.ids != p.ids:
                a, p = _join_by_id(a, p)
            source = "PSI-aligned bank/shop files"
        else:
            import importlib.resources

            data = importlib.resources.files("vflcrypto") / "data"
            with importlib.resources.as_file(data / "bank.csv") as bank, \
                    importlib.resources.as_file(data / "shop.csv") as shop:
                a, p = _join_by_id(read_party_csv(bank, "id", label="defaulted"),
                                   read_party_csv(shop, "id"))
            source = "bundled bank/shop CSVs joined by ID in-process"
        assert a.label is not None
        check_labels("binary", a.label)
        return a.X, a.label, a.columns, p.X, p.columns, source
    except (OSError, InputDataError, FileNotFoundError):
        Xa, y, ca, Xp, cp = _synthetic()
        return Xa, y, ca, Xp, cp, "deterministic synthetic split"


def demo_step(ctx: Any) -> dict[str, Any]:
    """SecureBoost on the demo data: a few depth-3 trees, encrypted, then joint prediction."""
    from vflcrypto.metrics import roc_auc

    Xa, y, ca, Xp, cp, source = _demo_data(ctx)
    trees = 2 if ctx.quick else 3
    params = BoostParams(n_trees=trees, max_depth=3, learning_rate=0.3, max_bin=16)
    run = run_local(Xa, y, [Xp], params=params, key_bits=ctx.key_bits,
                    allow_insecure=ctx.allow_insecure, active_columns=ca, passive_columns=[cp])
    auc = roc_auc(y, run.active.train_predictions())
    n_passive = int(np.sum(run.active.model.kind == 2))
    ctx.say(f"data: {source}; {len(y)} rows, active {len(ca)} features + label, passive {len(cp)}")
    ctx.say(f"{trees} trees of depth 3 under {ctx.key_bits}-bit Paillier in {run.seconds:.1f} s; "
            f"train AUC {auc:.3f}; {n_passive} splits on passive features")
    ctx.say(f"{run.transcript.total_bytes:,} bytes on the wire")
    ctx.say(audit(run.transcript).to_text())
    return {"auc": round(auc, 4), "trees": trees, "rows": len(y),
            "passive_splits": n_passive, "bytes_sent": run.transcript.total_bytes}


def label_inference_attack(partition: np.ndarray, y: np.ndarray, known_fraction: float = 0.05,
                           seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A passive party's attack: label each cell of an instance-space partition it saw by the
    majority of a few labels it knows; returns (guesses, mask of the rows it did not know)."""
    rng = np.random.default_rng(seed)  # which labels the attacker knows: a simulation, not a secret
    n = len(y)
    known = np.zeros(n, dtype=bool)
    known[rng.choice(n, size=max(10, int(known_fraction * n)), replace=False)] = True
    guess = np.full(n, float(np.mean(y[known]) >= 0.5))
    for cell in np.unique(partition):
        members = partition == cell
        k = members & known
        if k.any():
            guess[members] = float(np.mean(y[k]) >= 0.5)
    return guess, ~known


def _gradient_label_finding(tap: AuditTap, party: str, y: np.ndarray) -> EmpiricalFinding:
    """A passive party guesses labels from the first tree's gradients (g = p - y < 0 iff y = 1)."""
    plain = tap.received(party, PlainGradients)
    if plain:
        g = np.asarray(plain[0].g, dtype=np.float64)
        kind, protection = "secureboost.plain_gradients", None
    else:
        gh = tap.received(party, EncryptedGradients)[0].gh
        assert gh.packing is not None
        decoded = unrandomized_paillier(int(gh.public_key.n), gh.ciphertexts())
        g = np.full(len(decoded), np.nan)
        ok = [i for i, v in enumerate(decoded) if v is not None]
        if ok:
            g[ok] = unpack_candidates([decoded[i] for i in ok], gh.packing)[0]
        kind, protection = "secureboost.gradients", Protection.CIPHERTEXT
    majority = float(np.mean(y) >= 0.5)
    guess = np.where(np.isnan(g), majority, (g < 0).astype(np.float64))
    return accuracy_finding(
        party, f"label recovery from {kind}", guess, y, float(max(np.mean(y), 1 - np.mean(y))),
        attacks=(kind,), protection=protection,
        description=f"guesses y = [g < 0] where it can read g in its first {kind} (plaintext, or a "
                    "ciphertext without randomness) and the majority class elsewhere")


def _histogram_findings(tap: AuditTap, party: str, kind: str) -> list[EmpiricalFinding]:
    """The active party decodes the histogram messages it received with its own key and attacks them.

    * order: are the anonymous candidates of a node still in feature and bin order? (Their
      n_L then increase along runs: a reader would regroup features and rank bins.)
    * aggregation: does a candidate single out one row (n_L or n_node - n_L = 1) whose
      gradient is unique in the node? Then the active party learns that row's extreme rank
      in an unknown passive feature within the node.
    """
    cls = PlainHistograms if kind == "secureboost.plain_histograms" else EncryptedHistograms
    hists = tap.received(ACTIVE, cls, sender=party)
    held_sk = tap.held(ACTIVE, "secret_key") if cls is EncryptedHistograms else [None]
    specs, grads = tap.held(ACTIVE, "packing"), tap.held(ACTIVE, "gradients")
    levels = tap.held(ACTIVE, "node_rows")  # per (tree, depth), in the order the histograms arrive
    blocks: list[np.ndarray] = []
    candidates = singled = 0
    for hist, rows_of in zip(hists, levels, strict=True):
        GL, _HL, NL = decode_histograms(hist, held_sk[0], specs[hist.tree], party)
        g = grads[hist.tree]
        start = 0
        for rows, k in zip(rows_of, np.asarray(hist.counts).tolist(), strict=True):
            gl, nl = GL[start : start + k], NL[start : start + k]
            start += k
            blocks.append(nl)
            candidates += k
            g_node = g[rows]
            total = int(g_node.sum())
            for a, b in zip(gl.tolist(), nl.tolist(), strict=True):
                target = a if b == 1 else (total - a if len(rows) - b == 1 else None)
                singled += target is not None and int(np.count_nonzero(g_node == target)) == 1
    return [
        adjacent_order_finding(
            ACTIVE, f"{kind}: candidate order", kind, blocks,
            f"share of neighbouring candidates (of {len(blocks)} node lists from {party}) whose n_L "
            "increases; baseline = the same for random orders of the same lists"),
        EmpiricalFinding(
            ACTIVE, f"{kind}: rows singled out by a candidate", singled / max(1, candidates), 0.0,
            f"{singled} of {candidates} decoded candidates from {party} sum one row whose gradient is "
            "unique in its node (that row's rank in an unknown passive feature is revealed); "
            "declared: tiny nodes or bins allow this",
            attacks=(kind,), protection=Protection.AGGREGATE, flagged=singled > 0, samples=candidates,
            detects="any one row singled out"),
    ]


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """Train encrypted and in plaintext mode on the synthetic split and attack what each role received.

    * passive: labels from the gradients it received (ciphertexts; plaintext by design in
      the debug mode) and from the instance space (the partition it saw in tree 1, plus 5 %
      of labels it is assumed to know: by design);
    * active: decodes the passive candidates it received with its own key and tests their
      order (shuffled?) and whether single candidates isolate single rows.
    """
    Xa, y, ca, Xp, cp = _synthetic()
    params = BoostParams(n_trees=3, max_depth=3, max_bin=16)
    tap, plain_tap = AuditTap(), AuditTap()
    run = run_local(Xa, y, [Xp], params=params, key_bits=key_bits, allow_insecure=allow_insecure,
                    active_columns=ca, passive_columns=[cp], tap=tap)
    predict_local(run.active.model, Xa, [(run.passive["passive-0"].model, Xp)], transcript=run.transcript)
    plain = run_local(Xa, y, [Xp], params=params, plaintext=True, tap=plain_tap)
    guess, unknown = label_inference_attack(tap.held("passive-0", "instance_partition")[0], y)
    findings = [
        accuracy_finding(
            "passive-0", "label inference from tree-1 instance sets", guess[unknown], y[unknown],
            float(max(np.mean(y[unknown]), 1 - np.mean(y[unknown]))),
            attacks=("secureboost.level", "secureboost.split_request"), protection=None,
            description="majority vote of 5% known labels per cell of the finest partition the passive "
                        "party saw in the first tree (instance space + its own left sets); baseline = "
                        "majority-class rate"),
        _gradient_label_finding(tap, "passive-0", y),
        _gradient_label_finding(plain_tap, "passive-0", y),
        *_histogram_findings(tap, "passive-0", "secureboost.histograms"),
        *_histogram_findings(plain_tap, "passive-0", "secureboost.plain_histograms"),
    ]
    merged = Transcript()
    merged.merge(run.transcript)
    merged.merge(plain.transcript)
    return AuditOutcome("secureboost", audit(merged), tuple(findings))


SPEC = ProtocolSpec(
    name="secureboost",
    title="SecureBoost",
    roles={},
    run_local=run_local,
    audit=audit_run,
    config=BoostParams,
    demo=demo_step,
    demo_order=40,
)
