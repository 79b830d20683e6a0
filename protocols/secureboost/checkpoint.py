"""Checkpoint and resume of SecureBoost training (``--checkpoint DIR``, ``--resume``).

Every party writes its own state to its own directory after every completed tree, atomically
(temporary file, fsync, rename; owner-readable only, :data:`~vflcrypto.data.files.PRIVATE`; an
``.npz`` of JSON metadata and numeric arrays, no pickle):

* the active party: its trees so far, the margins of every row (and those after early stopping's
  best round), the current round's gradients (a one-tree-per-class round computes them once), the
  packing's bound, the validation history, its GOSS key and the model id;
* a passive party: its split lookup table so far (feature and bin of every record id, and the
  tree of each).

Both add the number of completed trees, the training plan (and its digest) and a digest of the
party's own training rows. A resumed run (``--resume``) first exchanges ``secureboost.resume``:
each passive party sends the trees its checkpoint holds, the active party answers with the least
of every party's count, and a party ahead discards its extra trees. Training then goes on from
that tree under fresh keys; the splits and leaf weights come from exact fixed-point sums and the
row and column samples from the public seed and the tree index (:mod:`.options`), so the model is
the one an uninterrupted run grows, bit for bit. A checkpoint of another plan or of other rows is
refused in one line.

The active party writes the state of ``t`` completed trees before its 'done' of tree ``t - 1``
leaves, and a passive party writes after it received it, so no passive party is ever ahead of the
active party; the active party keeps its last two checkpoints (and those of the rounds grown on
its features alone, which a passive party follows without an answer) so it can step back to any
count a passive party may hold.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.files import PRIVATE, atomic_write_bytes, immediate_outputs, load_model
from vflcrypto.errors import ConfigurationError, InputDataError, ModelFileError, ProtocolError
from vflcrypto.runtime.channel import Channel
from vflcrypto.runtime.steps import Next, drive, prefixed, send, then

from .active import ActiveResult, ActiveRole, _assemble, _TreeBuilder
from .messages import Resume, Setup
from .passive import PassiveResult, PassiveRole, _PassiveState
from .tree import BoostParams

__all__ = ["CheckpointDir", "ResumableActive", "ResumablePassive", "data_digest", "plan_of", "run_active",
           "run_passive"]

FORMAT = "vflcrypto.secureboost.checkpoint/1"
_TREE_ARRAYS = ("offsets", "kind", "party", "feature", "bin", "threshold", "record", "left", "right", "value",
                "gain", "cover")


def plan_of(params: BoostParams, plaintext: bool, weighted: bool) -> dict[str, Any]:
    """The training plan a checkpoint belongs to: every option of the setup (JSON values)."""
    return {**{f.name: getattr(params, f.name) for f in dataclasses.fields(BoostParams)},
            "plaintext": bool(plaintext), "weighted": bool(weighted)}


def _plan_digest(plan: Mapping[str, Any]) -> bytes:
    return hashlib.sha256(b"vflcrypto.secureboost.plan.v1\x00" + json.dumps(plan, sort_keys=True).encode()).digest()


def data_digest(ids: Sequence[str], columns: Sequence[str], X: np.ndarray, *extra: np.ndarray | None) -> str:
    """SHA-256 of a party's training rows: IDs, columns, feature values (and label, weights), length-prefixed."""
    h = hashlib.sha256(b"vflcrypto.secureboost.rows.v1\x00")
    for part in (json.dumps([list(map(str, ids)), list(columns)]).encode(),
                 *(np.ascontiguousarray(a, dtype=np.float64).tobytes() for a in (X, *extra) if a is not None)):
        h.update(len(part).to_bytes(8, "big") + part)
    return h.hexdigest()


class CheckpointDir:
    """One party's checkpoints in ``directory``: ``<party>.tree-<count>.npz``, one per count of completed trees."""

    def __init__(self, directory: str | Path, party: str, plan: dict[str, Any], rows: str, *,
                 keep_below: int = 0) -> None:
        """``rows``: :func:`data_digest` of the party's training rows; ``keep_below``: counts up to which every
        checkpoint is kept (the rounds on the active party's features alone), beyond the last two."""
        self.dir, self.party, self.plan, self.rows = Path(directory), party, plan, rows
        self.digest = _plan_digest(plan)
        self.keep_below = keep_below
        self._name = re.compile(re.escape(party) + r"\.tree-(\d+)\.npz")

    def path(self, trees: int) -> Path:
        return self.dir / f"{self.party}.tree-{trees:05d}.npz"

    def counts(self) -> list[int]:
        if not self.dir.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.dir.iterdir() if (m := self._name.fullmatch(p.name)))

    def latest(self) -> int:
        """Trees in the newest checkpoint (0 without one)."""
        return max(self.counts(), default=0)

    def save(self, trees: int, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Write the state of ``trees`` completed trees (atomically, owner-only), then drop old checkpoints."""
        full = {**meta, "format": FORMAT, "party": self.party, "trees": trees, "plan": self.plan,
                "plan_digest": self.digest.hex(), "rows": self.rows}
        buf = io.BytesIO()
        payload: dict[str, Any] = {f"a_{k}": np.asarray(v) for k, v in arrays.items()}
        np.savez(buf, __meta__=np.frombuffer(json.dumps(full, sort_keys=True).encode(), dtype=np.uint8), **payload)
        with immediate_outputs():  # at once, even inside a command's all-or-nothing outputs: it outlives a kill
            atomic_write_bytes(self.path(trees), buf.getvalue(), permissions=PRIVATE)
        for c in self.counts():
            if c < trees - 1 and c > self.keep_below:
                self.path(c).unlink(missing_ok=True)

    def load(self, trees: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The checkpoint of ``trees`` completed trees, checked against this run's plan and rows."""
        path = self.path(trees)
        if not path.exists():
            raise InputDataError(f"{self.dir} holds no checkpoint of {trees} trees for {self.party}: cannot resume "
                                 "(start afresh without --resume)")
        meta, arrays = load_model(path)
        if meta.get("format") != FORMAT or meta.get("party") != self.party or meta.get("trees") != trees:
            raise ModelFileError(f"{path} is not a SecureBoost checkpoint of {self.party}")
        self.check(meta)
        return meta, arrays

    def check(self, meta: dict[str, Any] | None = None) -> None:
        """Refuse (one line) a newest checkpoint of another plan or of other rows (``rows`` empty: plan only)."""
        if meta is None:
            if not self.latest():
                return
            meta, _ = load_model(self.path(self.latest()))
        if meta.get("plan_digest") != self.digest.hex():
            theirs = meta.get("plan", {})
            differ = [f"{k} {self.plan[k]} (checkpoint {theirs.get(k)})" for k in self.plan if theirs.get(k) !=
                      self.plan[k]]
            raise ConfigurationError(f"{self.dir}: the checkpoint was written for another training plan "
                                     f"({', '.join(differ) or 'digest differs'}); resume with the flags of the run "
                                     "that wrote it, or start afresh without --resume")
        if self.rows and meta.get("rows") != self.rows:
            raise InputDataError(f"{self.dir}: the checkpoint was written for other training rows than {self.party}'s "
                                 "data now; resume on the same rows, or start afresh without --resume")


class ResumableActive(ActiveRole):
    """:class:`ActiveRole` that checkpoints after every tree and, with ``resume``, goes on from a checkpoint."""

    def __init__(self, *args: Any, checkpoint: CheckpointDir, resume: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.params.dp_epsilon is not None:
            raise InputDataError("--checkpoint cannot be used with --dp-epsilon: a tree grown again after a resume "
                                 "would release its noised sums twice, beyond the accounted budget")
        self.ckpt, self.resume = checkpoint, resume
        self.ckpt.keep_below = self.params.active_only_rounds * self.per_round + 1
        self._saved = 0
        self.resumed_from: int | None = None
        self._offers: list[Resume] = []

    def start(self) -> Next:
        if not self.resume:
            return super().start()
        return then([], self.names[0], Resume, "on_resume")

    def on_resume(self, msg: Resume) -> Next:
        """Every passive party's count; then the tree to resume from (the least count), the setup, that tree."""
        self._offers.append(msg)
        if len(self._offers) < len(self.names):
            return then([], self.names[len(self._offers)], Resume, "on_resume")
        for name, m in zip(self.names, self._offers, strict=True):
            if bytes(m.plan_digest) != self.ckpt.digest:
                raise ConfigurationError(f"{name}'s checkpoint or flags are of another training plan; resume every "
                                         "party with the flags of the run that wrote the checkpoints")
        agreed = min([self.ckpt.latest(), *(int(m.trees) for m in self._offers)])
        meta: dict[str, Any] = {}
        arrays: dict[str, np.ndarray] = {}
        if agreed > 0:
            meta, arrays = self.ckpt.load(agreed)
            others = sorted({m.model_id for m in self._offers} - {meta["model_id"]})
            if others:
                raise ProtocolError(f"the parties' checkpoints are of different runs (model {meta['model_id']}, "
                                    f"{', '.join(others)}): resume needs every party's checkpoint of the same run")
            self.model_id = str(meta["model_id"])
        sends = [send(q, Resume(agreed, self.ckpt.digest, self.model_id if agreed else "")) for q in self.names]
        sends += self._setup()
        if agreed > 0:
            self._restore(meta, arrays)
        self._saved = self.resumed_from = agreed
        return prefixed(sends, self._begin_tree())

    def _restore(self, meta: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        st, trees = self.state, int(meta["trees"])
        st.t, st.vbb = trees, int(meta["vbb"])
        st.margin, st.best_margin = a["margin"].copy(), a["best_margin"].copy()
        st.round_g, st.round_h = a["round_g"].copy(), a["round_h"].copy()
        self.goss_key = a["goss_key"].tobytes()
        if self.stopper is not None:
            for score in a["history"].tolist():
                self.stopper.update(score)
        off = a["offsets"].tolist()
        st.trees = []
        for t in range(trees):
            s = slice(off[t], off[t + 1])
            tb = _TreeBuilder(outputs=self.K)
            for attr in ("kind", "party", "feature", "bin", "threshold", "record", "left", "right", "gain", "cover"):
                setattr(tb, attr, a[attr][s].tolist())
            tb.value = [row.copy() for row in a["value"][s]]
            st.trees.append(tb)

    def step(self, wait: Any, msg: Any) -> Next:
        return _resumed(super().step(wait, msg), self.resumed_from)

    def _begin_tree(self) -> Next:
        """Before tree ``t`` (every tree before it completed): the checkpoint of ``t`` trees."""
        st = self.state
        if st.t > self._saved:
            model = _assemble(st.trees, self.model_id, self.params, self.base, self.columns, tuple(self.names),
                              None, {})
            arrays = {k: getattr(model, k) for k in _TREE_ARRAYS}
            history = [] if self.stopper is None else self.stopper.history
            self.ckpt.save(st.t, {"role": "active", "model_id": self.model_id, "vbb": st.vbb},
                           {**arrays, "margin": st.margin, "best_margin": st.best_margin, "round_g": st.round_g,
                            "round_h": st.round_h, "history": np.asarray(history, np.float64),
                            "goss_key": np.frombuffer(self.goss_key, np.uint8)})
            self._saved = st.t
        return super()._begin_tree()


@dataclasses.dataclass
class _ResumablePassiveState(_PassiveState):
    """A passive party's state plus what its resume agreed (kept with the state: a Flower ClientApp may handle
    every message in a fresh process)."""

    resumed_model: str = ""  # the model id of the run this party resumed ("" when it starts afresh)
    resumed_from: int = -1  # the tree it resumed from (-1: not resumed)


class ResumablePassive(PassiveRole):
    """:class:`PassiveRole` that checkpoints after every tree and, with ``resume``, goes on from a checkpoint."""

    State = _ResumablePassiveState
    state: _ResumablePassiveState

    def __init__(self, *args: Any, checkpoint: CheckpointDir, resume: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ckpt, self.resume = checkpoint, resume

    @property
    def resumed_from(self) -> int | None:
        return None if self.state.resumed_from < 0 else self.state.resumed_from

    def _held(self) -> tuple[int, dict[str, Any], dict[str, np.ndarray]]:
        """This party's newest checkpoint: (trees, metadata, arrays); (0, {}, {}) without one."""
        own = self.ckpt.latest()
        return (own, *self.ckpt.load(own)) if own else (0, {}, {})

    def start(self) -> Next:
        if not self.resume:
            return super().start()
        own, meta, _ = self._held()
        return then([send(self.active, Resume(own, self.ckpt.digest, str(meta.get("model_id", ""))))], self.active,
                    Resume, "on_resume")

    def on_resume(self, msg: Resume) -> Next:
        """The tree every party resumes from: our checkpoint up to it (a party ahead drops its extra trees)."""
        if bytes(msg.plan_digest) != self.ckpt.digest:
            raise ConfigurationError(f"{self.name}: the active party's checkpoint or flags are of another training "
                                     "plan; resume every party with the flags of the run that wrote the checkpoints")
        trees = int(msg.trees)
        held, meta, a = self._held()  # read again: the step that sent our count may have run in another process
        if not 0 <= trees <= held:
            raise ProtocolError(f"the active party resumes from tree {trees}; {self.name}'s checkpoint holds {held}")
        st = self.state
        if trees:
            if msg.model_id != meta["model_id"]:
                raise ProtocolError(f"the parties' checkpoints are of different runs (model {msg.model_id}, "
                                    f"here {meta['model_id']})")
            keep = a["rec_t"] < trees
            st.rec_f, st.rec_b, st.rec_t = (a[k][keep].tolist() for k in ("rec_f", "rec_b", "rec_t"))
            st.t, st.resumed_model = trees, str(msg.model_id)
        st.resumed_from = trees
        return then([], self.active, Setup, "on_setup")

    def on_setup(self, setup: Setup) -> Next:
        if self.state.resumed_model and setup.model_id != self.state.resumed_model:
            raise ProtocolError(f"{self.name}: the setup names model {setup.model_id}, the resumed run "
                                f"{self.state.resumed_model}")
        return super().on_setup(setup)

    def _end_tree(self, kept: int) -> Next:
        """After every tree but the last: the checkpoint of the trees completed so far."""
        nxt = super()._end_tree(kept)
        if kept < 0:
            st = self.state
            self.ckpt.save(st.t, {"role": "passive", "model_id": self.setup.model_id},
                           {k: np.asarray(getattr(st, k), np.int64) for k in ("rec_f", "rec_b", "rec_t")})
        return nxt

    def step(self, wait: Any, msg: Any) -> Next:
        return _resumed(super().step(wait, msg), self.resumed_from)


def _resumed(nxt: Next, resumed_from: int | None) -> Next:
    """``nxt``, with the tree a resumed run went on from put on the party's final result."""
    if nxt.wait is None and isinstance(nxt.result, ActiveResult | PassiveResult):
        nxt.result.resumed_from = resumed_from
    return nxt


def run_active(channels: Mapping[str, Channel], X: np.ndarray, y: np.ndarray, *, checkpoint: CheckpointDir,
               resume: bool = False, timeout: float | None = None, **kwargs: Any) -> ActiveResult:
    """The active party (as :func:`.local.run_active`), checkpointed and, with ``resume``, resumed."""
    role = ResumableActive(X, y, passives=list(channels), checkpoint=checkpoint, resume=resume, **kwargs)
    result: ActiveResult = drive(role, channels, timeout=timeout)
    return result


def run_passive(channels: Mapping[str, Channel], X: np.ndarray, *, checkpoint: CheckpointDir, resume: bool = False,
                timeout: float | None = None, **kwargs: Any) -> PassiveResult:
    """A passive party (as :func:`.local.run_passive`), checkpointed and, with ``resume``, resumed."""
    if len(channels) != 1:
        raise ProtocolError("a passive party talks to exactly one active party")
    (active, ch), = channels.items()
    role = ResumablePassive(X, name=ch.local.name, active=active, checkpoint=checkpoint, resume=resume, **kwargs)
    result: PassiveResult = drive(role, channels, timeout=timeout)
    return result
