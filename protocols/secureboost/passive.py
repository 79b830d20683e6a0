"""A passive party of SecureBoost as named steps.

Steps, numbered as in the package docstring: ``start`` → ``on_setup`` (0: check the
parameters and the row IDs; bin the features) → ``on_gradients`` (1, once per tree) →
``on_level`` (2: the node of every row; 3: the histograms of every candidate, shuffled)
→ ``on_split_request`` (5, 6: the left instance sets of the nodes it won) → the next
``on_level``, until a level request says the tree is done (7), then the next tree.

The passive party is a Flower ClientApp, so everything that survives between messages
is in :class:`_PassiveState` and wire-encodable: the encrypted cumulative bin sums of
the previous level (for histogram subtraction) are kept as fixed-width ciphertext bytes.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gmpy2 import mpz

from vflcrypto.data.tables import ids_digest
from vflcrypto.errors import ConfigurationError, InputDataError, ProtocolError
from vflcrypto.he.encoding import PackingSpec
from vflcrypto.he.paillier import batch_invert, ciphertexts_from_bytes, fold_ciphertexts
from vflcrypto.he.schemes import PublicKey, family, scheme_of
from vflcrypto.runtime import progress
from vflcrypto.runtime.steps import Next, Role, done, send, then

from .active import Timer
from .defence import privacy
from .kernels import encrypted_bin_sums
from .messages import (
    ACTIVE,
    PASSIVE,
    DpLevelRequest,
    EncryptedGradients,
    EncryptedHistograms,
    LevelRequest,
    PlainGradients,
    PlainHistograms,
    Setup,
    SplitRequest,
    SplitResponse,
    level_kind,
)
from .model import PassiveModel
from .options import column_mask, validation_mask
from .parts import add_root_part
from .tree import (
    MAX_CLASSES,
    BoostParams,
    as_matrix,
    bin_features,
    bin_histograms,
    valid_candidates,
)

__all__ = ["PassiveResult", "PassiveRole", "shuffle_candidates"]


@dataclass
class PassiveResult:
    """What a passive party ends with: its lookup table and phase timings."""

    model: PassiveModel
    timings: dict[str, float]
    resumed_from: int | None = None  # with --resume: the tree training went on from (.checkpoint)


@dataclass
class _PassiveState:
    setup: Setup | None = None
    t: int = 0  # tree
    depth: int = 0
    gq: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.int64))  # plaintext mode: (n, outputs)
    hq: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.int64))
    blob: bytes = b""  # encrypted mode: the sampled rows' packed (g, h) ciphertexts, fixed width
    parts_due: int = 0  # encrypted mode: parts of this tree's gradients still to come
    root: bytes = b""  # encrypted mode: the root's bin sums over the parts received so far (.parts)
    sample: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # this tree's sampled rows
    spec: PackingSpec | None = None
    prev_plain: list[np.ndarray] = field(default_factory=list)  # per node: cumulative (G.., H.., n), (2K+1, F*width)
    prev_enc: list[bytes] = field(default_factory=list)  # per node: cumulative [[G, H]], fixed width
    node_of_row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    anon: list[np.ndarray] = field(default_factory=list)  # per node: candidate ids in shuffled order
    partition: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rec_f: list[int] = field(default_factory=list)
    rec_b: list[int] = field(default_factory=list)
    rec_t: list[int] = field(default_factory=list)  # the tree of each record


def shuffle_candidates(flat: np.ndarray) -> np.ndarray:
    """A node's candidate ids in a fresh uniformly random order (``secrets``): the anonymous ids."""
    perm = flat.tolist()
    secrets.SystemRandom().shuffle(perm)
    return np.asarray(perm, dtype=np.int64)


class PassiveRole(Role[_PassiveState]):
    """A feature holder: bins its features, answers histogram and split requests.

    ``ids`` (its ordered aligned row IDs) are checked against the digest in the setup.
    """

    role = PASSIVE
    State = _PassiveState

    def __init__(self, X: np.ndarray, *, name: str = "passive-0", ids: Sequence[str] | None = None,
                 columns: Sequence[str] | None = None, active: str = ACTIVE,
                 expected: tuple[BoostParams, bool, bool] | None = None, scheme: str | None = None) -> None:
        """``expected`` (a network party's own flags): (parameters, plaintext, weighted) the setup's training
        plan must match; ``scheme`` (its ``--scheme``): the scheme of the setup's key must be that one."""
        super().__init__(name)
        self.X = as_matrix(X, name)
        self.ids, self.active, self.expected, self.scheme = ids, active, expected, scheme
        self.columns = tuple(columns) if columns is not None else tuple(f"x{i}" for i in range(self.X.shape[1]))
        self.timer = Timer()
        self._binned: tuple[np.ndarray, list[np.ndarray], int] | None = None

    @property
    def setup(self) -> Setup:
        if self.state.setup is None:
            raise ProtocolError(f"{self.name}: no setup received yet")
        return self.state.setup

    def accepted_keys(self) -> list[PublicKey]:
        st = self.state.setup
        return [st.public_key] if st is not None and st.public_key is not None else []

    def _bins(self) -> tuple[np.ndarray, list[np.ndarray], int]:
        """(bin of every value, split points per feature, bins per feature + 1); split points from the
        training rows (not the validation rows of the plan's public split)."""
        if self._binned is None:
            t0 = time.perf_counter()
            p = self.setup.params
            val = validation_mask(self.X.shape[0], p.validation_fraction, p.random_state)
            bins, splits = bin_features(self.X, p.max_bin, np.flatnonzero(~val) if val.any() else None)
            self._binned = (bins, splits, max([len(s) + 1 for s in splits] + [1]))
            self.timer.add("binning", t0)
        return self._binned

    def start(self) -> Next:
        return then([], self.active, Setup, "on_setup")

    def on_setup(self, setup: Setup) -> Next:
        """Step 0: the parameters must be in range and the row IDs those of the active party."""
        n = self.X.shape[0]
        if setup.n_rows != n:
            raise InputDataError(f"{self.name} has {n} rows, the active party {setup.n_rows}: not aligned")
        if self.ids is not None and not secrets.compare_digest(ids_digest(self.ids, "secureboost"),
                                                               setup.ids_digest):
            raise InputDataError(f"{self.name}: row IDs differ from the active party's: inputs not aligned")
        try:
            setup.params.validate()
        except InputDataError as exc:
            raise ProtocolError(f"setup parameters out of range: {exc}") from None
        if not 1 <= setup.params.max_depth <= 30 or \
                not 1 <= setup.n_outputs <= MAX_CLASSES or not 1 <= setup.trees_per_round <= MAX_CLASSES or \
                min(setup.n_outputs, setup.trees_per_round) != 1:
            raise ProtocolError("setup parameters out of range")
        if setup.plaintext != (setup.public_key is None):
            raise ProtocolError("setup mode and public key disagree")
        if self.scheme is not None and setup.public_key is not None and \
                scheme_of(setup.public_key) != family(self.scheme):
            raise ConfigurationError(f"{self.name}: the active party's key is {scheme_of(setup.public_key)}, this "
                                     f"party's --scheme says {self.scheme}; run every party with the same scheme")
        if self.expected is not None:
            differ = _plan_differences(self.expected, setup)
            if differ:
                raise ConfigurationError(f"{self.name}: the active party's training plan differs from this party's "
                                         f"flags: {', '.join(differ)}; run every party with the same training flags")
        self.state.setup = setup
        self._bins()
        return self._await_gradients()

    @property
    def n_trees(self) -> int:
        """Trees in the whole run at most (early stopping may end it sooner): rounds times trees per round."""
        return self.setup.params.n_trees * self.setup.trees_per_round

    def _alone(self) -> bool:
        """Whether the plan grows this tree on the active party's features alone (then nothing but its end comes)."""
        return self.state.t < self.setup.params.active_only_rounds * self.setup.trees_per_round

    def _await_gradients(self) -> Next:
        if self._alone():
            self.state.partition = np.zeros(self.X.shape[0], np.int64)  # we see no instance space of this tree
            return then([], self.active, level_kind(self.setup.params), "on_level")
        kind = PlainGradients if self.setup.plaintext else EncryptedGradients
        return then([], self.active, kind, "on_gradients")

    def on_gradients(self, grad: EncryptedGradients | PlainGradients) -> Next:
        """Step 1: which rows are in this tree's sample and their (g, h) (encrypted, or in the clear in
        plaintext mode); encrypted ones in one or more parts of consecutive sampled rows."""
        st = self.state
        if isinstance(grad, EncryptedGradients) and grad.part > 0:
            self._later_part(grad)
        else:
            self._first_part(grad)
        if st.parts_due:
            return then([], self.active, EncryptedGradients, "on_gradients")
        if isinstance(grad, EncryptedGradients) and self._rows_got() != int(st.sample.sum()):
            raise ProtocolError(f"expected {int(st.sample.sum())} encrypted gradients (the sampled rows) for "
                                f"tree {st.t}, got {self._rows_got()} in {grad.parts} parts")
        st.depth, st.prev_plain, st.prev_enc = 0, [], []
        st.partition = np.zeros(self.X.shape[0], dtype=np.int64)
        return then([], self.active, level_kind(self.setup.params), "on_level")

    def _later_part(self, grad: EncryptedGradients) -> None:
        st = self.state
        if grad.tree != st.t or grad.part != grad.parts - st.parts_due or np.asarray(grad.sample).size:
            raise ProtocolError(f"expected part {grad.parts - st.parts_due} of tree {st.t}'s gradients (without a "
                                f"sample), got part {grad.part} of tree {grad.tree}")
        if grad.gh.packing != st.spec or grad.gh.slots != 2 * self.setup.n_outputs \
                or grad.gh.public_key != self.setup.public_key:
            raise ProtocolError("a later part of the gradients is packed otherwise or under another key")
        before, part = self._rows_got(), grad.gh.to_bytes()
        st.blob += part
        st.parts_due -= 1
        if self._rows_got() > int(st.sample.sum()):
            raise ProtocolError(f"more encrypted gradients than sampled rows ({int(st.sample.sum())}) for tree {st.t}")
        self._sum_root(before, part)

    def _sum_root(self, before: int, part: bytes) -> None:
        """Add the part's rows (the sampled rows from ``before`` on) to the root's bin sums now, while the next
        part is on its way."""
        st, t0, pk = self.state, time.perf_counter(), self.setup.public_key
        assert pk is not None  # an encrypted run's setup carries the key
        bins, _, width = self._bins()
        rows = np.flatnonzero(st.sample)[before : self._rows_got()]
        st.root = add_root_part(pk, st.root, part, bins[rows], width)
        self.timer.add("histogram", t0)

    def _rows_got(self) -> int:
        pk = self.setup.public_key
        return 0 if pk is None else len(self.state.blob) // pk.ciphertext_bytes

    def _first_part(self, grad: EncryptedGradients | PlainGradients) -> None:
        st, n, K = self.state, self.X.shape[0], self.setup.n_outputs
        if st.parts_due:
            raise ProtocolError(f"expected one more part of tree {st.t}'s gradients ({st.parts_due} due), got a "
                                "first part")
        bits = np.asarray(grad.sample)
        if grad.tree != st.t or bits.dtype != np.uint8 or bits.shape != ((n + 7) // 8,):
            raise ProtocolError(f"expected the sample of tree {st.t} as {(n + 7) // 8} packed bytes")
        sample = np.unpackbits(bits, count=n).astype(bool)
        m = int(sample.sum())
        if m == 0 or int(np.unpackbits(bits)[n:].sum()):
            raise ProtocolError("malformed sample")
        if isinstance(grad, PlainGradients):
            gq, hq = np.asarray(grad.g), np.asarray(grad.h)
            if gq.shape != (m, K) or hq.shape != (m, K) or gq.dtype.kind != "i" or hq.dtype.kind != "i":
                raise ProtocolError("malformed plaintext gradients")
            st.gq, st.hq = np.zeros((n, K), np.int64), np.zeros((n, K), np.int64)
            st.gq[sample], st.hq[sample] = gq, hq
        else:
            if not 1 <= grad.parts <= m or len(grad.gh) > m:  # the total is checked after the last part
                raise ProtocolError(f"expected {m} encrypted gradients (the sampled rows) for tree {st.t}, in "
                                    f"1 to {m} parts; got {len(grad.gh)} in part 0 of {grad.parts}")
            if grad.gh.packing is None or grad.gh.slots != 2 * K or grad.gh.public_key != self.setup.public_key:
                raise ProtocolError(f"gradients are not packed {K} (g, h) pairs per row under the setup key")
            st.spec, st.blob, st.parts_due, st.root = grad.gh.packing, grad.gh.to_bytes(), grad.parts - 1, b""
        st.sample = sample
        if isinstance(grad, EncryptedGradients):
            self._sum_root(0, st.blob)

    def _node_rows(self) -> list[np.ndarray]:
        node_of_row = self.state.node_of_row
        n_nodes = len(self.state.anon)
        order = np.argsort(node_of_row, kind="stable")
        starts = np.searchsorted(node_of_row[order], np.arange(n_nodes + 1))
        return [order[starts[i] : starts[i + 1]] for i in range(n_nodes)]

    def on_level(self, req: LevelRequest | DpLevelRequest) -> Next:
        """Steps 2-3 (or 7): the nodes of this level → every node's shuffled candidate histograms."""
        st, setup = self.state, self.setup
        if req.tree != st.t:
            raise ProtocolError(f"level request for tree {req.tree} during tree {st.t}")
        if req.done:
            return self._end_tree(int(req.kept))
        if self._alone():
            raise ProtocolError(f"the plan grows tree {st.t} on the active party's features alone: this party takes "
                                "no instance space of it")
        if st.depth == setup.params.max_depth or req.depth != st.depth:
            raise ProtocolError("level request out of order")
        n = self.X.shape[0]
        bins, _, width = self._bins()
        F = bins.shape[1]
        node_of_row = np.asarray(req.node_of_row)
        compute = np.asarray(req.compute).astype(np.int64).ravel()
        derive = np.asarray(req.derive).astype(np.int64).reshape(-1, 3)
        n_nodes = len(compute) + len(derive)
        n_prev = len(st.prev_enc) if not setup.plaintext else len(st.prev_plain)
        if node_of_row.shape != (n,) or node_of_row.dtype.kind != "i" or \
                int(node_of_row.max(initial=-1)) >= n_nodes or int(node_of_row.min(initial=0)) < -1:
            raise ProtocolError("malformed node assignment")
        if sorted(compute.tolist() + derive[:, 0].tolist()) != list(range(n_nodes)) or \
                not set(derive[:, 2].tolist()) <= set(compute.tolist()) or \
                not set(derive[:, 1].tolist()) <= set(range(n_prev)):
            raise ProtocolError("inconsistent histogram plan")
        if st.depth == 0 and not (node_of_row[st.sample] == 0).all():
            raise ProtocolError("a sampled row is not at the root")
        st.node_of_row = node_of_row.astype(np.int32)
        st.anon = [np.zeros(0, np.int64)] * n_nodes
        node_rows = [r[st.sample[r]] for r in self._node_rows()]  # the sampled rows: summed into histograms
        st.partition = np.where(node_of_row >= 0, node_of_row.astype(np.int64) * 2, -1)
        t0 = time.perf_counter()
        counts = [np.bincount((bins[r] + np.arange(F) * width).ravel(), minlength=F * width).reshape(F, width)
                  for r in node_rows]
        cols = column_mask(F, setup.params.colsample_bytree, setup.params.random_state, self.name, st.t)[:, None]
        # canonical candidates per node (this tree's columns), freshly shuffled: the position is the anonymous id
        st.anon = [shuffle_candidates(np.flatnonzero((valid_candidates(counts[i], len(node_rows[i])) & cols).ravel()))
                   for i in range(n_nodes)]
        node_ids = np.arange(n_nodes, dtype=np.int32)
        cnts = np.asarray([len(a) for a in st.anon], dtype=np.int32)
        msg: EncryptedHistograms | PlainHistograms
        if setup.plaintext:
            K = setup.n_outputs
            cum = _plain_level(bins, node_rows, compute, derive, st.prev_plain, st.gq, st.hq, width)
            sel = [c[:, a] for c, a in zip(cum, st.anon, strict=True)]
            stacked = np.concatenate(sel, axis=1) if sel else np.zeros((2 * K + 1, 0), np.int64)
            msg = PlainHistograms(st.t, st.depth, node_ids, cnts, stacked[:K].T.copy(), stacked[K : 2 * K].T.copy(),
                                  stacked[2 * K].copy())
            st.prev_plain = cum
        else:
            pk = setup.public_key
            assert pk is not None and st.spec is not None  # on_setup / on_gradients checked both
            w = pk.ciphertext_bytes
            prev = [_from_bytes(b, w) for b in st.prev_enc]
            enc = _encrypted_level(pk, st.blob, np.cumsum(st.sample) - 1, bins, node_rows, compute, derive, prev,
                                   width, st.root if st.depth == 0 else b"")
            cand = [enc[i][j] for i, a in enumerate(st.anon) for j in a.tolist()]
            bits = 2 * setup.n_outputs * st.spec.slot_bits
            folded, per = fold_ciphertexts(pk, cand, bits)
            vec = pk._vector_type().from_ciphertexts(pk, folded)
            msg = EncryptedHistograms(st.t, st.depth, node_ids, cnts, bits, per,
                                      vec.rerandomize() if folded else vec)
            st.prev_enc = [_to_bytes(c, w) for c in enc]
        self.timer.add("histogram", t0)
        return then([send(self.active, msg)], self.active, SplitRequest, "on_split_request")

    def on_split_request(self, sreq: SplitRequest) -> Next:
        """Steps 5-6: per node won, a fresh record id and the left instance set (feature and bin stay here)."""
        st = self.state
        if sreq.tree != st.t or sreq.depth != st.depth:
            raise ProtocolError("split request out of order")
        bins, _, width = self._bins()
        won = np.asarray(sreq.nodes).astype(np.int64)
        offs = np.asarray(sreq.offsets).astype(np.int64)
        cands = np.asarray(sreq.candidates).astype(np.int64)
        if len(offs) != len(won) + 1 or (len(won) and (offs[0] != 0 or offs[-1] != len(cands)
                                                      or (np.diff(offs) < 1).any())):
            raise ProtocolError("malformed split request")
        node_rows = self._node_rows()
        rec_ids, bit_parts = [], []
        for k, node in enumerate(won.tolist()):
            if not 0 <= node < len(st.anon):
                raise ProtocolError("split request names an unknown node")
            ids_k = cands[offs[k] : offs[k + 1]]
            if ids_k.min() < 0 or ids_k.max() >= len(st.anon[node]):
                raise ProtocolError("split request names an unknown candidate")
            f, b = divmod(int(st.anon[node][ids_k].min()), width)
            rows = node_rows[node]
            mask = bins[rows, f] <= b
            rec_ids.append(len(st.rec_f))
            st.rec_f.append(f)
            st.rec_b.append(b)
            st.rec_t.append(st.t)
            bit_parts.append(np.packbits(mask))
            st.partition[rows[mask]] += 1
        left_bits = np.concatenate(bit_parts) if bit_parts else np.zeros(0, np.uint8)
        resp = SplitResponse(st.t, st.depth, won.astype(np.int32), np.asarray(rec_ids, np.int64), left_bits)
        st.depth += 1
        return then([send(self.active, resp)], self.active, level_kind(self.setup.params), "on_level")

    def _end_tree(self, kept: int) -> Next:
        """Step 7: the tree is done; the next tree's gradients, or (``kept`` >= 0: the last tree) the
        lookup table of the splits in the rounds the model keeps."""
        st = self.state
        self.hold("instance_partition", st.partition)  # its finest view of the tree (for the audit)
        st.t += 1
        progress.report("secureboost", st.t, self.n_trees, unit="tree")
        if kept < 0:
            if st.t == self.n_trees:
                raise ProtocolError("the last tree ended without the number of rounds the model keeps")
            return self._await_gradients()
        if not 1 <= kept * self.setup.trees_per_round <= st.t:
            raise ProtocolError(f"the model cannot keep {kept} rounds after {st.t} trees")
        _, splits, _ = self._bins()
        keep = [i for i, t in enumerate(st.rec_t) if t < kept * self.setup.trees_per_round]
        f = np.asarray([st.rec_f[i] for i in keep], np.int32)
        b = np.asarray([st.rec_b[i] for i in keep], np.int32)
        thr = np.asarray([float(splits[i][j]) for i, j in zip(f.tolist(), b.tolist(), strict=True)], np.float64)
        model = PassiveModel(self.setup.model_id, self.name, self.columns, np.asarray(keep, np.int64), f, b, thr,
                             privacy(self.setup.params, self.setup.trees_per_round))
        return done(PassiveResult(model, self.timer.phases))


def _plan_differences(expected: tuple[BoostParams, bool, bool], setup: Setup) -> list[str]:
    """The flags in which the setup's training plan differs from this party's own: ``--flag theirs (here ours)``."""
    params, plaintext, weighted = expected
    out = []
    for f in dataclasses.fields(BoostParams):
        ours, theirs = getattr(params, f.name), getattr(setup.params, f.name)
        if ours != theirs:
            flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
            out.append(f"{flag.removeprefix('--')} {theirs} (here {ours})")
    if plaintext != setup.plaintext:
        out.append(f"plaintext {setup.plaintext} (here {plaintext})")
    if weighted != setup.weighted:
        out.append(f"weight-column {'set' if setup.weighted else 'unset'} (here {'set' if weighted else 'unset'})")
    return out


# --------------------------------------------------------------------------- level kernels


def _to_bytes(cs: list[mpz], width: int) -> bytes:
    return b"".join(int(c).to_bytes(width, "big") for c in cs)


def _from_bytes(data: bytes, width: int) -> list[mpz]:
    if len(data) % width:
        raise ProtocolError("stored ciphertexts have the wrong width")
    return [mpz(int.from_bytes(data[i : i + width], "big")) for i in range(0, len(data), width)]


def _plain_level(bins: np.ndarray, node_rows: list[np.ndarray], compute: np.ndarray, derive: np.ndarray,
                 prev: list[np.ndarray], gq: np.ndarray, hq: np.ndarray, width: int) -> list[np.ndarray]:
    """Cumulative (G_0..G_{K-1}, H_0..H_{K-1}, n) per (feature, bin) of every node, shape
    (2K + 1, F*width); larger siblings by subtraction."""
    cum: list[Any] = [None] * (len(compute) + len(derive))
    K = gq.shape[1]
    for i in compute.tolist():
        sg, sh, sn = bin_histograms(bins, node_rows[i], gq, hq, width)
        cg, ch = np.cumsum(sg, 1).reshape(-1, K).T, np.cumsum(sh, 1).reshape(-1, K).T
        cum[i] = np.concatenate([cg, ch, np.cumsum(sn, 1).reshape(1, -1)])
    for node, parent, sib in derive.tolist():
        cum[node] = prev[parent] - cum[sib]
    return cum


def _encrypted_level(pk: PublicKey, blob: bytes, position: np.ndarray, bins: np.ndarray, node_rows: list[np.ndarray],
                     compute: np.ndarray, derive: np.ndarray, prev: list[list[mpz]],
                     width: int, root: bytes = b"") -> list[list[mpz]]:
    """Encrypted cumulative bin sums per node: row-by-row for ``compute``, else parent/sibling.

    ``blob`` holds the sampled rows' ciphertexts; ``position[r]`` is row ``r``'s index in it. ``root``: the
    root's sums, added up part by part as the gradients came (:func:`.parts.add_root_part`), for the first level."""
    F = bins.shape[1]
    w = pk.ciphertext_bytes
    nsq = pk.cmod
    comp = compute.tolist()
    if root and comp == [0] and not len(derive):
        sums = ciphertexts_from_bytes(root, w)
    else:
        rows = np.concatenate([node_rows[i] for i in comp]) if comp else np.zeros(0, np.int64)
        slot = np.concatenate([np.full(len(node_rows[i]), s, np.int64) for s, i in enumerate(comp)]) \
            if comp else np.zeros(0, np.int64)
        keys = slot[:, None] * (F * width) + np.arange(F, dtype=np.int64)[None, :] * width + bins[rows]
        row_blob = np.frombuffer(blob, dtype=np.uint8).reshape(-1, w)[position[rows]].tobytes()
        sums = encrypted_bin_sums(pk, row_blob, keys, len(comp) * F * width, slot)
    cum: list[list[mpz]] = [[] for _ in range(len(compute) + len(derive))]
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
