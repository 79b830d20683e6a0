"""The active party of SecureBoost as named steps.

Steps, numbered as in the package docstring: ``start`` (0 setup; then every tree:
1 gradients, 2 the level request) → ``on_histograms`` (3, once per passive party; then 4
the split choice and 5 the split requests) → ``on_split_response`` (6, once per passive
party; then the next level, or 7 the end of the tree and the next tree).

The active party is the Flower ServerApp (never a ClientApp), so its state stays in
memory: trees, nodes and keys need not be wire-encodable.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.data.tables import ids_digest
from vflcrypto.errors import ConfigurationError, InputDataError, ProtocolError
from vflcrypto.he.encoding import PackingSpec
from vflcrypto.he.obfuscators import ObfuscatorStock, StockStats
from vflcrypto.he.paillier import DEFAULT_KEY_BITS
from vflcrypto.he.schemes import PrivateKey, PublicKey, describe, generate_keypair
from vflcrypto.runtime import progress
from vflcrypto.runtime.steps import Next, Role, done, prefixed, send, then
from vflcrypto.runtime.zarray import ZArray

from .defence import clip_gradients, noise_multiplier, noised_base, noised_leaves, noised_node, privacy, sensitivity
from .histograms import decode_histograms, histogram_plan
from .messages import (
    ACTIVE,
    EncryptedHistograms,
    PlainGradients,
    PlainHistograms,
    Setup,
    SplitRequest,
    SplitResponse,
    level_kind,
)
from .model import ActiveModel, link, margin_out
from .options import EarlyStopping, column_mask, eval_metric, goss_rows, metric_name, subsample_rows, validation_mask
from .parts import GRADIENT_PART_ROWS, encrypted_parts
from .tree import (
    BoostParams,
    as_matrix,
    base_score,
    bin_features,
    bin_histograms,
    check_labels,
    choose_frac_bits,
    gradients,
    leaf_weight,
    n_outputs,
    packing_spec,
    quantize,
    select_split,
    slots_fit,
    valid_candidates,
    value_bound_bits,
)

__all__ = ["ActiveResult", "ActiveRole", "Timer", "decode_histograms"]


class Timer:
    """Accumulates wall time per phase (for the benchmark's breakdown)."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}

    def add(self, phase: str, t0: float) -> float:
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - t0
        return now


@dataclass
class ActiveResult:
    """What the active party ends with: the model, training margins ((n,), or (n, K) for
    multiclass) and phase timings."""

    model: ActiveModel
    train_margin: np.ndarray
    timings: dict[str, float]
    public_key: PublicKey | None = None  # the key the gradients were encrypted under (None in plaintext mode)
    obfuscators: StockStats | None = None  # where the gradients' obfuscators came from (with precompute)
    samples: list[np.ndarray] = field(default_factory=list)  # per tree: the rows it was grown on
    eval_history: list[float] = field(default_factory=list)  # per round: the validation metric
    privacy: dict[str, Any] = field(default_factory=dict)  # the defences' guarantees (defence.privacy)
    resumed_from: int | None = None  # with --resume: the tree training went on from (.checkpoint)
    # the secret of the GOSS draws (a resumed run's: its checkpoint's): the party's own, never written out
    goss_key: bytes = field(default=b"", repr=False, metadata={"secret": True})

    def train_predictions(self) -> np.ndarray:
        return link(self.model.objective, self.train_margin)


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
    value: list[np.ndarray] = field(default_factory=list)
    gain: list[float] = field(default_factory=list)  # XGBoost's loss change of a split (0 at a leaf)
    cover: list[float] = field(default_factory=list)  # the node's hessian sum (XGBoost's cover)
    outputs: int = 1  # the model's outputs (leaf value width)

    def new(self, cover: float) -> int:
        self.kind.append(0)
        for ints in (self.party, self.feature, self.bin, self.record, self.left, self.right):
            ints.append(-1)
        self.threshold.append(0.0)
        self.gain.append(0.0)
        self.cover.append(cover)
        self.value.append(np.zeros(self.outputs))
        return len(self.kind) - 1


@dataclass
class _Node:
    index: int  # tree-local
    rows: np.ndarray  # sorted indices of the node's rows in this tree's sample (summed into histograms)
    G: np.ndarray  # (outputs of the tree,) int64 fixed-point sums
    H: np.ndarray
    route: np.ndarray  # sorted indices of every row at the node (unsampled and validation rows too)
    parent_slot: int = -1  # node id at the previous depth


@dataclass
class _ActiveState:
    t: int = 0  # tree
    depth: int = 0
    k: int = 0  # passive party awaited next
    margin: np.ndarray = field(default_factory=lambda: np.zeros(0))
    vbb: int = 1
    frac: int = 0
    gq: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.int64))  # this tree's (n, outputs)
    hq: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.int64))
    round_g: np.ndarray = field(default_factory=lambda: np.zeros((0, 1)))  # the round's weighted (n, K) g
    round_h: np.ndarray = field(default_factory=lambda: np.zeros((0, 1)))
    sample: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # this tree's sampled rows
    best_margin: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the margins after the best round
    spec: PackingSpec | None = None
    trees: list[Any] = field(default_factory=list)
    tree: Any = None
    level: list[Any] = field(default_factory=list)
    leaves: list[Any] = field(default_factory=list)
    own: list[Any] = field(default_factory=list)
    passive_blocks: list[Any] = field(default_factory=list)
    choices: list[Any] = field(default_factory=list)
    true_blocks: list[Any] = field(default_factory=list)  # per node: the candidate blocks before any noise
    lefts: dict[int, tuple[np.ndarray, int, int]] = field(default_factory=dict)


def _assemble(trees: list[_TreeBuilder], model_id: str, params: BoostParams, base: np.ndarray,
              columns: tuple[str, ...], names: tuple[str, ...], stop: EarlyStopping | None,
              dp: dict[str, Any]) -> ActiveModel:
    offsets = np.cumsum([0] + [len(t.kind) for t in trees]).astype(np.int64)

    def cat(attr: str, dtype: Any) -> np.ndarray:
        return np.asarray([v for t in trees for v in getattr(t, attr)], dtype=dtype)

    return ActiveModel(model_id, params.objective, base, params.learning_rate, params.max_depth, columns, names,
                       offsets, cat("kind", np.int8), cat("party", np.int32), cat("feature", np.int32),
                       cat("bin", np.int32), cat("threshold", np.float64), cat("record", np.int64),
                       cat("left", np.int32), cat("right", np.int32),
                       cat("value", np.float64).reshape(-1, len(base)), cat("gain", np.float64),
                       cat("cover", np.float64), -1 if stop is None else stop.best_round,
                       math.nan if stop is None else stop.best_score,
                       "" if stop is None else metric_name(params.objective), dp)


class ActiveRole(Role[_ActiveState]):
    """The label holder: drives training over its passive parties (their order fixes the owner order).

    ``ids`` (the ordered aligned row IDs) are hashed into the setup message so misaligned
    passive inputs fail early. ``weights`` (n,) are sample weights (XGBoost's: they multiply
    every row's g and h); only whether there are any is sent.
    """

    role = ACTIVE
    State = _ActiveState

    def __init__(self, X: np.ndarray, y: np.ndarray, *, passives: Sequence[str], ids: Sequence[str] | None = None,
                 columns: Sequence[str] | None = None, params: BoostParams | None = None, plaintext: bool = False,
                 key_bits: int = DEFAULT_KEY_BITS, keys: tuple[PublicKey, PrivateKey] | None = None,
                 allow_insecure: bool = False, name: str = ACTIVE, scheme: str = "paillier",
                 precompute: bool = False, weights: np.ndarray | None = None, goss_key: bytes | None = None,
                 gradient_part_rows: int = GRADIENT_PART_ROWS) -> None:
        """``scheme``: ``paillier``, ``ou`` or ``ou-heu`` (:mod:`vflcrypto.he.schemes`), unless ``keys`` are given.

        ``precompute``: fill a stock of the next tree's obfuscators (encryptions of zero) while
        waiting for the passive parties (:mod:`vflcrypto.he.obfuscators`: on the low-priority pool, or
        in a thread without one; paused while this party computes). It pays where this party's CPU
        idles, i.e. on its own machine (the network party task turns it on); with every party in
        one process there is no idle CPU to fill and it only competes (measured: bench/).

        ``goss_key``: the 32-byte secret of GOSS's random draws (default: fresh from :mod:`secrets`); the same
        key and inputs draw the same samples (the in-process command's plaintext reference uses it).
        ``gradient_part_rows``: rows per part of a tree's encrypted gradients (:mod:`.parts`; 0: one message a tree,
        as in the Flower App, where every message is a store-and-forward round trip)."""
        super().__init__(name)
        if gradient_part_rows < 0:
            raise ConfigurationError("gradient_part_rows must be >= 0 (0: one message a tree)")
        self.gradient_part_rows = int(gradient_part_rows)
        self.params = BoostParams() if params is None else params
        self.params.validate()
        self.timer = Timer()
        self.X = as_matrix(X, "active party")
        self.y = np.asarray(y, dtype=np.float64).ravel()
        n = len(self.y)
        if self.X.shape[0] != n:
            raise InputDataError(f"active party has {self.X.shape[0]} feature rows and {n} labels")
        check_labels(self.params.objective, self.y)
        self.weighted = weights is not None
        self.w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
        if self.w.shape != (n,) or not np.all(np.isfinite(self.w)) or (self.w < 0).any() or not self.w.sum() > 0:
            raise InputDataError(f"sample weights must be {n} finite values >= 0, not all zero")
        p = self.params
        self.K = n_outputs(p.objective, self.y)  # the model's margins per row
        multi_output = p.objective == "multiclass" and p.multi_strategy == "multi_output_tree"
        self.tree_outputs = self.K if multi_output else 1  # (g, h) pairs per row in one tree
        self.per_round = self.K if p.objective == "multiclass" and not multi_output else 1  # trees per round
        self.columns = tuple(columns) if columns is not None else tuple(f"x{i}" for i in range(self.X.shape[1]))
        self.names = list(passives)
        if not self.names:
            raise InputDataError("SecureBoost needs at least one passive party")
        self.ids, self.plaintext = ids, plaintext
        self.val = validation_mask(n, p.validation_fraction, p.random_state)  # public: every party draws it
        self.fit_rows = np.flatnonzero(~self.val)
        if not self.w[self.fit_rows].sum() > 0:
            raise InputDataError("the training rows (validation rows aside) all have weight 0")
        self.stopper = EarlyStopping(p.early_stopping_rounds) if p.validation_fraction else None
        # GOSS's random part: this party's alone (see .options)
        self.goss_key = secrets.token_bytes(32) if goss_key is None else goss_key
        if len(self.goss_key) < 16:
            raise InputDataError("goss_key must hold at least 16 bytes")
        self.samples: list[np.ndarray] = []
        # label DP (.defence): the noise multiplier of every release, from the library's calibration
        self.z = noise_multiplier(p, self.per_round) if p.dp_epsilon is not None else 0.0
        self.pk: PublicKey | None = None
        self.sk: PrivateKey | None = None
        self.stock: ObfuscatorStock[Any] | None = None
        if not plaintext:
            t0 = time.perf_counter()
            self.pk, self.sk = keys if keys is not None else generate_keypair(scheme, key_bits,
                                                                              allow_insecure=allow_insecure)
            self.timer.add("keygen", t0)
            # softmax and logistic gradients have |g| <= 1, h <= 1/2, times the largest weight and GOSS factor
            top = float(self.w.max()) * ((1 - p.top_rate) / p.other_rate if p.goss else 1.0)
            vbb = value_bound_bits(np.asarray([top]), np.zeros(1))
            spec = packing_spec(n, choose_frac_bits(vbb, n), vbb)
            if not slots_fit(self.tree_outputs, spec, self.pk.plaintext_bits):
                raise InputDataError(
                    f"{self.K} classes need {2 * self.K} slots of {spec.slot_bits} bits per ciphertext, more "
                    f"than a {describe(self.pk)} key holds: use --multi-strategy one_output_per_tree or a larger key")
            if precompute:
                self.stock = ObfuscatorStock(self.sk, limit=n)

    def accepted_keys(self) -> list[PublicKey]:
        return [self.pk] if self.pk is not None else []

    def _busy(self) -> contextlib.AbstractContextManager[None]:
        """While this party computes, its obfuscator producer starts no new round (it fills idle time only)."""
        return self.stock.paused() if self.stock is not None else contextlib.nullcontext()

    @property
    def n(self) -> int:
        return len(self.y)

    def start(self) -> Next:
        """Step 0: the setup (the training plan); binning on the training rows; then the first tree."""
        return prefixed(self._setup(), self._begin_tree())

    def _setup(self) -> list[tuple[str, Any]]:
        """Step 0 without the first tree: the setup to every passive party (a resumed run (.checkpoint) keeps
        its model id), binning, the base score and the initial margins."""
        if self.sk is not None:
            self.hold("secret_key", self.sk)
        if self.stock is not None:
            self.stock.start()  # each obfuscator is used once: the stock holds at most one tree's
        p = self.params
        self.model_id = getattr(self, "model_id", "") or secrets.token_hex(16)
        digest = ids_digest(self.ids if self.ids is not None else [str(i) for i in range(self.n)], "secureboost")
        setup = Setup(self.model_id, self.n, digest, self.plaintext, self.pk, p, self.weighted, self.tree_outputs,
                      self.per_round)
        t0 = time.perf_counter()
        self.bins, self.splits = bin_features(self.X, p.max_bin, self.fit_rows if self.val.any() else None)
        self.width = max([len(s) + 1 for s in self.splits] + [1])
        self.timer.add("binning", t0)
        fit = self.fit_rows
        self.base = base_score(p.objective, self.y[fit], self.w[fit], self.K)
        if self.z:  # label DP: the base score from the noised count of positives (one release)
            rate, record = noised_base(self.y[fit], self.w[fit], self.z)
            self.base = np.asarray([math.log(rate / (1 - rate))])
            self.hold("dp_base", record)
        self.state.margin = np.tile(self.base, (self.n, 1))
        self.state.best_margin = self.state.margin.copy()
        return [send(q, setup) for q in self.names]

    def _sample(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """This tree's rows (sorted) and their g/h multipliers: all training rows, a uniform
        sample (public seed) or GOSS on ``|g|`` (private randomness, :mod:`.options`)."""
        p, t = self.params, self.state.t
        if p.goss:
            rows, mult, top = goss_rows(np.abs(g).sum(axis=1), self.fit_rows, p.top_rate, p.other_rate,
                                        self.goss_key, t)
            self.hold("goss_top", top)  # ground truth for the audit's scoring only
            return rows, mult
        rows = subsample_rows(self.fit_rows, p.subsample, p.random_state, t)
        return rows, np.ones(len(rows))

    def _begin_tree(self) -> Next:
        """Step 1: the sampled rows' (g, h) under our key (packed; all classes' for a multi-output
        tree) and which rows they are, to every passive party.

        Gradients are computed once per round (for every class at once, as XGBoost does);
        a one-tree-per-class round then grows tree ``k`` on class ``k``'s column. Sample
        weights and GOSS multipliers scale g and h before the fixed-point quantization.
        """
        st = self.state
        if st.t % self.per_round == 0:
            g, h = gradients(self.params.objective, self.y, st.margin)
            st.round_g, st.round_h = g * self.w[:, None], h * self.w[:, None]
            if self.z:  # label DP: each row's g clipped (h does not depend on the label)
                st.round_g = clip_gradients(st.round_g, self.params.dp_clip)
        k = st.t % self.per_round
        cols = slice(k, k + 1) if self.per_round > 1 else slice(None)
        rows, mult = self._sample(st.round_g[:, cols])
        self.samples.append(rows)
        g_s, h_s = st.round_g[rows, cols] * mult[:, None], st.round_h[rows, cols] * mult[:, None]
        # the packing's bound is public: under label DP from the clip norm and weights, never from the labels
        st.vbb = max(st.vbb, value_bound_bits(*((np.asarray([self.params.dp_clip]), 0.25 * self.w) if self.z
                                                 else (g_s, h_s))))
        st.frac = choose_frac_bits(st.vbb, self.n)
        st.spec = packing_spec(self.n, st.frac, st.vbb)
        st.gq = np.zeros((self.n, g_s.shape[1]), np.int64)
        st.hq = np.zeros_like(st.gq)
        st.gq[rows], st.hq[rows] = quantize(g_s, st.frac), quantize(h_s, st.frac)
        st.sample = np.zeros(self.n, bool)
        st.sample[rows] = True
        sample_bits = np.packbits(st.sample)
        self.hold("gradients", st.gq)  # its own (g, h) per tree, for the audit
        self.hold("packing", st.spec)
        self.hold("sample", st.sample)
        sends: Iterable[tuple[str, Any]] = ()
        if self._alone():
            pass  # a round on our features alone: the passive parties receive nothing of it
        elif self.plaintext:
            msg = PlainGradients(st.t, st.frac, sample_bits, st.gq[rows], st.hq[rows])
            sends = [send(q, msg) for q in self.names]
        else:
            assert self.sk is not None and st.spec is not None
            gh = np.ldexp(np.column_stack([st.gq[rows], st.hq[rows]]).astype(np.float64), -st.frac)
            sends = encrypted_parts(st.t, sample_bits, gh, st.spec, self.sk if self.stock is None else self.stock,
                                    self.gradient_part_rows, self.names, self._busy,
                                    lambda t0: self.timer.add("encrypt", t0))  # each part encrypted when sent
        st.tree = _TreeBuilder(outputs=self.K)
        H = st.hq[rows].sum(axis=0)
        st.level = [_Node(st.tree.new(self._cover(H)), rows, st.gq[rows].sum(axis=0), H, np.arange(self.n))]
        st.leaves, st.depth = [], 0
        self.colmask = column_mask(self.X.shape[1], self.params.colsample_bytree, self.params.random_state,
                                   self.name, st.t)
        return prefixed(sends, self._begin_level())

    def _alone(self) -> bool:
        """Whether this tree is grown on our features alone (``--first-tree-active-only``, ``--active-only-trees``)."""
        return self.state.t < self.params.active_only_rounds * self.per_round

    def _cover(self, H: np.ndarray) -> float:
        return float(np.ldexp(H.astype(np.float64), -self.state.frac).sum())

    def _begin_level(self) -> Next:
        """Step 2: the level request (every row's node); our own candidates (sampled rows, this tree's
        columns); then wait for the passive histograms."""
        st = self.state
        if not st.level or st.depth >= self.params.max_depth:
            return self._end_tree()
        self.hold("node_rows", [nd.rows for nd in st.level])
        node_of_row = np.full(self.n, -1, dtype=np.int32)
        for i, nd in enumerate(st.level):
            node_of_row[nd.route] = i
        compute, derive = histogram_plan(st.level)
        req = level_kind(self.params)(st.t, st.depth, False, ZArray.of(node_of_row), compute, derive)
        t0 = time.perf_counter()
        st.own = []
        for nd in st.level:
            sg, sh, sn = bin_histograms(self.bins, nd.rows, st.gq, st.hq, self.width)
            ok = valid_candidates(sn, len(nd.rows)) & self.colmask[:, None]
            K = st.gq.shape[1]
            cg, ch_, cn = np.cumsum(sg, 1).reshape(-1, K), np.cumsum(sh, 1).reshape(-1, K), np.cumsum(sn, 1)
            flat = np.flatnonzero(ok.ravel())
            st.own.append((cg[flat], ch_[flat], cn.ravel()[flat], flat))
        self.timer.add("split_search", t0)
        st.passive_blocks, st.k = [], 0
        if self._alone():
            return self._choose()
        return then([send(q, req) for q in self.names], self.names[0], self._histogram_kind(), "on_histograms")

    def _histogram_kind(self) -> type:
        return PlainHistograms if self.plaintext else EncryptedHistograms

    def on_histograms(self, hist: EncryptedHistograms | PlainHistograms) -> Next:
        """Step 3: a passive party's (decrypted) candidates; after the last, steps 4-5."""
        st = self.state
        with self._busy():
            st.passive_blocks.append(self._read_histograms(hist, self.names[st.k]))
        st.k += 1
        if st.k < len(self.names):
            return then([], self.names[st.k], self._histogram_kind(), "on_histograms")
        return self._choose()

    def _choose(self) -> Next:
        """Steps 4-5: every node's best split (from noised G sums under label DP), the split requests."""
        st = self.state
        t0 = time.perf_counter()
        st.true_blocks = [[st.own[i]] + [pb[i] for pb in st.passive_blocks] for i in range(len(st.level))]
        blocks: list[Any] = st.true_blocks
        if self.z:  # label DP: each node's release (.defence): its candidates' and its total G, noised
            sens = sensitivity(self.params, float(self.w[self.fit_rows].max()), st.frac)
            blocks = []
            for nd, b in zip(st.level, st.true_blocks, strict=True):
                noised, G, record = noised_node(b, nd.G, z=self.z, sens=sens, frac=st.frac,
                                                n_features=self.X.shape[1], own_features=int(self.colmask.sum()),
                                                width=self.width)
                blocks.append((noised, G))
                self.hold("dp_release", record)  # the true and released sums: the audit's ground truth
        else:
            blocks = [(b, nd.G) for b, nd in zip(blocks, st.level, strict=True)]
        st.choices = [select_split(b, G, nd.H, st.frac, self.params) for (b, G), nd in zip(blocks, st.level,
                                                                                          strict=True)]
        self.timer.add("split_search", t0)
        st.lefts, st.k = {}, 0
        if self._alone():
            return self._grow()
        sends = []
        for p, name in enumerate(self.names):
            won = [(i, c) for i, c in enumerate(st.choices) if c is not None and c.owner == p + 1]
            offs = np.cumsum([0] + [len(c.ids) for _, c in won]).astype(np.int32)
            cand = np.asarray([x for _, c in won for x in c.ids], dtype=np.int32)
            sends.append(send(name, SplitRequest(st.t, st.depth, np.asarray([i for i, _ in won], np.int32),
                                                 offs, cand)))
        return then(sends, self.names[0], SplitResponse, "on_split_response")

    def _read_histograms(self, hist: Any, name: str) -> list[tuple[np.ndarray, ...]]:
        """Check one passive party's histogram message and return per-node candidate blocks."""
        st = self.state
        if hist.tree != st.t or hist.depth != st.depth:
            raise ProtocolError(f"{name} sent histograms for tree {hist.tree} depth {hist.depth}, "
                                f"expected tree {st.t} depth {st.depth}")
        nodes, counts = np.asarray(hist.nodes), np.asarray(hist.counts)
        if nodes.shape != (len(st.level),) or not np.array_equal(nodes, np.arange(len(st.level))):
            raise ProtocolError(f"{name} sent histograms for the wrong nodes")
        if counts.shape != (len(st.level),) or (counts < 0).any():
            raise ProtocolError(f"{name} sent malformed candidate counts")
        assert st.spec is not None
        t0 = time.perf_counter()
        GL, HL, NL = decode_histograms(hist, self.sk, st.spec, name, self.tree_outputs)
        self.timer.add("decrypt", t0)
        out: list[tuple[np.ndarray, ...]] = []
        start = 0
        for nd, k in zip(st.level, counts.tolist(), strict=True):
            gl, hl, nl = GL[start : start + k], HL[start : start + k], NL[start : start + k]
            if k and (nl.min() < 1 or nl.max() >= len(nd.rows)):
                raise ProtocolError(f"{name} sent a candidate with an impossible row count")
            out.append((gl, hl, nl, np.arange(k)))
            start += k
        return out

    def on_split_response(self, resp: SplitResponse) -> Next:
        """Step 6: a passive party's left instance sets; after the last, the children (next level)."""
        st = self.state
        for i, mask, rec in self._read_response(resp, st.k + 1, self.names[st.k]):
            st.lefts[i] = (mask, st.k, rec)
        st.k += 1
        if st.k < len(self.names):
            return then([], self.names[st.k], SplitResponse, "on_split_response")
        return self._grow()

    def _true_left(self, i: int, c: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The true (G_L, H_L) of node ``i``'s chosen candidate (``c`` holds the noised G_L under label DP)."""
        gl, hl, _, ids = self.state.true_blocks[i][c.owner]
        j = int(np.flatnonzero(np.asarray(ids) == c.ids[0])[0])
        return tuple(gl[j].tolist()), tuple(hl[j].tolist())

    def _grow(self) -> Next:
        """The children of every split node (every row routed by its owner's left set), then the next level."""
        st = self.state
        nxt: list[_Node] = []
        tree = st.tree
        for i, (nd, c) in enumerate(zip(st.level, st.choices, strict=True)):
            if c is None:
                st.leaves.append(nd)
                continue
            if c.owner == 0:
                f, b = divmod(c.ids[0], self.width)
                mask = self.bins[nd.route, f] <= b
                tree.kind[nd.index], tree.feature[nd.index] = 1, f
                tree.bin[nd.index], tree.threshold[nd.index] = b, float(self.splits[f][b])
            else:
                mask, p, rec = st.lefts[i]
                tree.kind[nd.index], tree.party[nd.index], tree.record[nd.index] = 2, p, rec
            tree.gain[nd.index] = 2.0 * c.gain  # XGBoost's loss change (importance "gain")
            in_sample = st.sample[nd.route]
            left_rows = nd.route[mask & in_sample]
            if len(left_rows) != c.nL or (tuple(st.gq[left_rows].sum(axis=0).tolist()),
                                          tuple(st.hq[left_rows].sum(axis=0).tolist())) != self._true_left(i, c):
                raise ProtocolError("left instance set does not match the chosen candidate")
            for side, m in (("left", mask), ("right", ~mask)):
                rows = nd.route[m & in_sample]
                H = st.hq[rows].sum(axis=0)
                child = _Node(tree.new(self._cover(H)), rows, st.gq[rows].sum(axis=0), H, nd.route[m], i)
                getattr(tree, side)[nd.index] = child.index
                nxt.append(child)
        st.level, st.depth = nxt, st.depth + 1
        return self._begin_level()

    def _read_response(self, resp: SplitResponse, owner: int, name: str) -> list[tuple[int, np.ndarray, int]]:
        """Check a passive party's split response; return (node, left mask over the node's routed rows, record id)."""
        st = self.state
        won = [i for i, c in enumerate(st.choices) if c is not None and c.owner == owner]
        if resp.tree != st.t or resp.depth != st.depth:
            raise ProtocolError(f"{name} answered for tree {resp.tree} depth {resp.depth}")
        if np.asarray(resp.nodes).tolist() != won or len(resp.record_ids) != len(won):
            raise ProtocolError(f"{name} answered for nodes it did not win")
        bits = np.asarray(resp.left_bits, dtype=np.uint8)
        sizes = [(len(st.level[i].route) + 7) // 8 for i in won]
        if len(bits) != sum(sizes):
            raise ProtocolError(f"{name} sent left instance sets of the wrong length")
        out, start = [], 0
        for i, size, rec in zip(won, sizes, np.asarray(resp.record_ids).tolist(), strict=True):
            mask = np.unpackbits(bits[start : start + size], count=len(st.level[i].route)).astype(bool)
            out.append((i, mask, int(rec)))
            start += size
        return out

    def _end_tree(self) -> Next:
        """Step 7: leaf weights (never sent) for every routed row; after a round, the validation
        metric and early stopping; 'done' to every passive party (with the rounds kept after the
        last tree); the next tree, or the model."""
        st, p = self.state, self.params
        st.leaves.extend(st.level)
        scale = 2.0 ** -st.frac
        cols = slice(None) if self.per_round == 1 else [st.t % self.per_round]  # the outputs this tree sets
        G = [nd.G * scale for nd in st.leaves]
        if self.z:  # label DP: the leaves' G sums, one more release (.defence)
            G, record = noised_leaves(G, self.z, sensitivity(p, float(self.w[self.fit_rows].max()), st.frac))
            self.hold("dp_leaves", record)
        for nd, g_leaf in zip(st.leaves, G, strict=True):
            w = leaf_weight(g_leaf, nd.H * scale, p.reg_lambda)
            st.tree.value[nd.index][cols] = w
            st.margin[np.ix_(nd.route, np.arange(self.K)[cols])] += p.learning_rate * w
        st.trees.append(st.tree)
        st.t += 1
        progress.report("secureboost", st.t, p.n_trees * self.per_round, unit="tree")
        last = st.t == p.n_trees * self.per_round
        if st.t % self.per_round == 0 and self.stopper is not None:
            val = self.val
            improved = len(self.stopper.history)
            last |= self.stopper.update(eval_metric(p.objective, self.y[val], st.margin[val], self.w[val]))
            if self.stopper.best_round == improved:
                st.best_margin = st.margin.copy()
        kept = -1
        if last:
            kept = self.stopper.kept if self.stopper is not None else p.n_trees
        done_req = level_kind(p)(st.t - 1, p.max_depth, True, ZArray.of(np.zeros(0, np.int32)), np.zeros(0, np.int32),
                                 np.zeros((0, 3), np.int32), kept)
        sends = [send(q, done_req) for q in self.names]
        if not last:
            return prefixed(sends, self._begin_tree())
        margin = st.margin if kept * self.per_round == st.t else st.best_margin
        model = _assemble(st.trees[: kept * self.per_round], self.model_id, p, self.base, self.columns,
                          tuple(self.names), self.stopper, privacy(p, self.per_round))
        stats = None
        if self.stock is not None:
            stats = self.stock.stats()
            self.stock.close()
        history = [] if self.stopper is None else list(self.stopper.history)
        return done(ActiveResult(model, margin_out(margin), self.timer.phases, self.pk, stats, self.samples,
                                 history, model.privacy, goss_key=self.goss_key), sends)


