"""The roles of secure WOE/IV binning as named steps, and ``run_local``.

Steps (numbered as in the package docstring):

* active: :meth:`ActiveRole.start` (1 ``woe.setup``, 2 ``woe.labels`` to every passive
  party), :meth:`ActiveRole.on_counts` (4: decrypt, WOE/IV; after the last party,
  selection and 5 ``woe.results``);
* passive: :meth:`PassiveRole.on_setup`, :meth:`PassiveRole.on_labels` (3: bin, sum the
  encrypted labels per bin, shuffle, rerandomize, ``woe.counts``),
  :meth:`PassiveRole.on_results` (6: map the results back to its own columns).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError, KeyMismatchError, ProtocolError
from vflcrypto.he.ou import refuse_decryption_oracle
from vflcrypto.he.paillier import PaillierPrivateKey, PaillierPublicKey, PaillierVector, generate_keypair
from vflcrypto.psi import primitives as psi
from vflcrypto.runtime import progress
from vflcrypto.runtime.channel import DEFAULT_TIMEOUT, AuditTap, Channel, Transcript
from vflcrypto.runtime.steps import Next, Role, done, drive, send, then

from .._train import run_star
from ..secureboost.kernels import encrypted_bin_sums
from .math import COUNT_BITS, WoeParams, bin_matrix, plain_counts, select_features, woe_iv
from .messages import ACTIVE, OU_REFUSAL, PASSIVE, EncryptedCounts, EncryptedLabels, Results, Setup

__all__ = ["ActiveResult", "ActiveRole", "FeatureWoe", "PassiveResult", "PassiveRole", "WoeRun", "bin_order",
           "feature_order", "run_active", "run_local", "run_passive", "shuffle_order"]

_LOW = (1 << COUNT_BITS) - 1


def shuffle_order(n: int) -> np.ndarray:
    """A uniformly random order of ``n`` items (``os.urandom``): of the features, or of one feature's bins."""
    return psi.random_permutation(n)


def feature_order(n: int) -> np.ndarray:
    """The order in which the passive party sends its ``n`` features: anonymous number j -> its column."""
    return shuffle_order(n)


def bin_order(n: int) -> np.ndarray:
    """The order in which it sends the ``n`` bins of one feature (drawn per feature): sent position -> bin."""
    return shuffle_order(n)


@dataclass(frozen=True)
class FeatureWoe:
    """One feature's result at the active party: who owns it, its name there, WOE per bin, IV."""

    party: str
    name: str  # the column name for the active party's own features; "#j" (anonymous) for a passive's
    woe: np.ndarray
    iv: float
    events: np.ndarray
    nonevents: np.ndarray
    selected: bool = False


@dataclass
class ActiveResult:
    features: list[FeatureWoe]

    def selected(self) -> list[FeatureWoe]:
        return [f for f in self.features if f.selected]


@dataclass
class PassiveResult:
    columns: tuple[str, ...]
    selected: list[str]
    woe: list[np.ndarray] | None  # per own feature, WOE per bin in bin order (return_results only)
    iv: list[float] | None


# --------------------------------------------------------------------------- active


@dataclass
class _ActiveState:
    j: int = 0  # the passive party whose counts come next
    counts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)


class ActiveRole(Role[_ActiveState]):
    """The label holder: encrypts its labels, decrypts per-bin counts, computes WOE/IV and selects."""

    role = ACTIVE
    State = _ActiveState

    def __init__(self, y: np.ndarray, X: np.ndarray | None = None, *, passives: Sequence[str],
                 keys: tuple[PaillierPublicKey, PaillierPrivateKey], params: WoeParams | None = None,
                 columns: Sequence[str] | None = None, name: str = ACTIVE) -> None:
        refuse_decryption_oracle(keys[0], "woe", OU_REFUSAL)
        super().__init__(name)
        y = np.asarray(y)
        if y.ndim != 1 or not np.isin(y, (0, 1)).all():
            raise InputDataError("WOE needs binary labels (0/1)")
        if y.min(initial=0) == y.max(initial=0):
            raise InputDataError("WOE needs both events (1) and non-events (0) among the labels")
        self.y = y.astype(np.int64)
        self.X = np.zeros((len(y), 0)) if X is None else np.asarray(X, dtype=np.float64)
        if len(self.X) != len(y):
            raise InputDataError(f"{len(self.X)} feature rows for {len(y)} labels")
        self.columns = tuple(columns) if columns is not None else tuple(f"x{j}" for j in range(self.X.shape[1]))
        self.passives = sorted(passives)
        if not self.passives:
            raise InputDataError("WOE binning needs at least one passive party")
        self.pk, self.sk = keys
        self.params = params or WoeParams()
        self.params.validate()

    def accepted_keys(self) -> list[PaillierPublicKey]:
        return [self.pk]  # the counts come back under our own key

    def start(self) -> Next:
        """Steps 1-2: the setup and the packed encrypted labels, to every passive party."""
        self.hold("secret_key", self.sk)
        p = self.params
        setup = Setup(self.pk, len(self.y), p.max_bin, p.method, p.min_bin_size, p.iv_threshold, p.top_k,
                      p.return_results)
        labels = self.pk.encrypt([(int(v) << COUNT_BITS) | (1 - int(v)) for v in self.y.tolist()])
        self.hold("label_ciphertexts", labels)  # its own ciphertexts, which it would recognise in the bin sums
        sends = [s for peer in self.passives for s in (send(peer, setup), send(peer, EncryptedLabels(labels)))]
        return then(sends, self.passives[0], EncryptedCounts, "on_counts")

    def on_counts(self, msg: EncryptedCounts) -> Next:
        """Step 4: decrypt one party's per-bin counts and check them against the label totals."""
        st = self.state
        peer = self.passives[st.j]
        st.counts[peer] = self._decode(peer, msg)
        st.j += 1
        progress.report("woe", st.j, len(self.passives), unit="party")
        if st.j < len(self.passives):
            return then([], self.passives[st.j], EncryptedCounts, "on_counts")
        return self._finish()

    def _decode(self, peer: str, msg: EncryptedCounts) -> list[tuple[np.ndarray, np.ndarray]]:
        if msg.counts.public_key != self.pk:
            raise KeyMismatchError(f"{peer}'s bin counts are under a foreign key")
        widths = np.asarray(msg.widths, dtype=np.int64)
        if widths.ndim != 1 or (widths < 1).any() or (widths > self.params.max_bin).any() \
                or int(widths.sum()) != len(msg.counts):
            raise ProtocolError(f"{peer} sent bin counts whose layout does not match its bins per feature")
        raw = self.sk.decrypt(msg.counts)
        events_total, nonevents_total = int(self.y.sum()), int(len(self.y) - self.y.sum())
        out, at = [], 0
        for w in widths.tolist():
            vals = raw[at : at + w]
            at += w
            if any(v < 0 or v >> (2 * COUNT_BITS) for v in vals):
                raise ProtocolError(f"{peer} sent a bin count outside its range (wrong key or tampered)")
            ev = np.asarray([v >> COUNT_BITS for v in vals], np.int64)
            ne = np.asarray([v & _LOW for v in vals], np.int64)
            if int(ev.sum()) != events_total or int(ne.sum()) != nonevents_total:
                raise ProtocolError(f"{peer}'s bins of one feature do not add up to the labels' totals "
                                    "(every row must fall in exactly one bin)")
            out.append((ev, ne))
        return out

    def _finish(self) -> Next:
        st = self.state
        feats: list[FeatureWoe] = []
        own = bin_matrix(self.X, self.params) if self.X.shape[1] else None
        if own is not None:
            for name, (ev, ne) in zip(self.columns, plain_counts(own[0], own[1], self.y), strict=True):
                w, iv = woe_iv(ev, ne)
                feats.append(FeatureWoe(self.name, name, w, iv, ev, ne))
        for peer in self.passives:
            for j, (ev, ne) in enumerate(st.counts[peer]):
                w, iv = woe_iv(ev, ne)
                feats.append(FeatureWoe(peer, f"#{j}", w, iv, ev, ne))
        parties = dict.fromkeys(f.party for f in feats)
        chosen = select_features({p: [f.iv for f in feats if f.party == p] for p in parties},
                                 self.params.iv_threshold, self.params.top_k)
        flags = {p: iter(v) for p, v in chosen.items()}
        final = [dataclasses.replace(f, selected=next(flags[f.party])) for f in feats]
        sends = []
        for peer in self.passives:
            mine = [f for f in final if f.party == peer]
            woes = np.concatenate([f.woe for f in mine]) if self.params.return_results and mine else np.zeros(0)
            ivs = np.asarray([f.iv for f in mine]) if self.params.return_results else np.zeros(0)
            sends.append(send(peer, Results(np.asarray([f.selected for f in mine], bool), woes, ivs)))
        return done(ActiveResult(final), sends)


# --------------------------------------------------------------------------- passive


@dataclass
class _PassiveState:
    setup: Setup | None = None
    feature_order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # anonymous j -> column
    bin_orders: list[np.ndarray] = field(default_factory=list)  # per column: sent position -> bin
    widths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class PassiveRole(Role[_PassiveState]):
    """A feature party: bins its columns and returns encrypted per-bin label counts, anonymously."""

    role = PASSIVE
    State = _PassiveState

    def __init__(self, X: np.ndarray, *, columns: Sequence[str] | None = None, name: str = PASSIVE,
                 peer: str = ACTIVE, expected: WoeParams | None = None) -> None:
        super().__init__(name)
        self.X = np.asarray(X, dtype=np.float64)
        if self.X.ndim != 2 or self.X.shape[1] == 0:
            raise InputDataError(f"{name}: needs a 2-D feature matrix with at least one column")
        self.columns = tuple(columns) if columns is not None else tuple(f"x{j}" for j in range(self.X.shape[1]))
        self.peer, self.expected = peer, expected

    def accepted_keys(self) -> list[PaillierPublicKey]:
        st = self.state.setup
        return [st.public_key] if st is not None else []

    def start(self) -> Next:
        return then([], self.peer, Setup, "on_setup")

    @staticmethod
    def _params(s: Setup) -> WoeParams:
        return WoeParams(s.max_bin, s.method, s.min_bin_size, s.iv_threshold, s.top_k, s.return_results)

    def on_setup(self, msg: Setup) -> Next:
        """Step 1 received: the key and the parameters (checked against this party's plan)."""
        p = self._params(msg)
        try:
            p.validate()
        except InputDataError as exc:
            raise ProtocolError(f"{self.peer} sent an invalid WOE setup: {exc}") from None
        if self.expected is not None:
            diffs = [f"{f.name} {getattr(p, f.name)!r} (this party expects {getattr(self.expected, f.name)!r})"
                     for f in dataclasses.fields(WoeParams) if getattr(p, f.name) != getattr(self.expected, f.name)]
            if diffs:
                raise ProtocolError(f"{self.peer}'s WOE setup differs from this party's plan: " + "; ".join(diffs))
        if msg.rows != len(self.X):
            raise InputDataError(f"{self.peer} has {msg.rows} rows, this party {len(self.X)}: parties are not aligned")
        self.state.setup = msg
        return then([], self.peer, EncryptedLabels, "on_labels")

    def on_labels(self, msg: EncryptedLabels) -> Next:
        """Step 3: per-bin sums of the encrypted labels, features and bins shuffled, rerandomized."""
        setup = self.state.setup
        assert setup is not None  # set by on_setup, the only way here
        pk = setup.public_key
        if msg.labels.public_key != pk:
            raise KeyMismatchError(f"{self.peer}'s labels are not under the key it announced")
        if len(msg.labels) != len(self.X):
            raise InputDataError(f"{len(msg.labels)} encrypted labels for {len(self.X)} rows: parties are not aligned")
        bins, widths = bin_matrix(self.X, self._params(setup))
        self.hold("bins", bins)
        offsets = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
        keys = bins.astype(np.int64) + offsets[None, :]
        sums = encrypted_bin_sums(pk, msg.labels.to_bytes(), keys, int(widths.sum()))
        st = self.state
        st.feature_order = feature_order(len(widths))
        st.bin_orders = [bin_order(int(wf)) for wf in widths.tolist()]
        st.widths = widths
        order = [int(offsets[f]) + int(b) for f in st.feature_order.tolist() for b in st.bin_orders[f].tolist()]
        counts = PaillierVector.from_ciphertexts(pk, [sums[i] for i in order]).rerandomize()
        sent_widths = widths[st.feature_order]
        return then([send(self.peer, EncryptedCounts(sent_widths, counts))], self.peer, Results, "on_results")

    def on_results(self, msg: Results) -> Next:
        """Step 6: which of its columns were selected (and, if returned, their WOE and IV), in its own order."""
        st = self.state
        setup = st.setup
        assert setup is not None
        F = len(st.widths)
        if msg.selected.shape != (F,):
            raise ProtocolError(f"{self.peer} sent a selection of {msg.selected.shape} for {F} features")
        chosen = {f for j, f in enumerate(st.feature_order.tolist()) if msg.selected[j]}
        selected = [c for f, c in enumerate(self.columns) if f in chosen]
        if not setup.return_results:
            return done(PassiveResult(self.columns, selected, None, None))
        if msg.iv.shape != (F,) or msg.woe.shape != (int(st.widths.sum()),):
            raise ProtocolError(f"{self.peer} sent WOE results that do not match this party's bins")
        woe: list[np.ndarray] = [np.zeros(0)] * F
        iv: list[float] = [0.0] * F
        at = 0
        for j, f in enumerate(st.feature_order.tolist()):
            wf = int(st.widths[f])
            per_bin = np.empty(wf)
            per_bin[st.bin_orders[f]] = msg.woe[at : at + wf]
            woe[f], iv[f] = per_bin, float(msg.iv[j])
            at += wf
        return done(PassiveResult(self.columns, selected, woe, iv))


# --------------------------------------------------------------------------- runs


def run_active(channels: Mapping[str, Channel], y: np.ndarray, X: np.ndarray | None = None, *,
               keys: tuple[PaillierPublicKey, PaillierPrivateKey], timeout: float | None = None,
               **kwargs: Any) -> ActiveResult:
    res: ActiveResult = drive(ActiveRole(y, X, passives=list(channels), keys=keys, **kwargs), channels,
                              timeout=timeout)
    return res


def run_passive(channels: Mapping[str, Channel], X: np.ndarray, *, timeout: float | None = None,
                **kwargs: Any) -> PassiveResult:
    ((peer, _),) = channels.items()
    res: PassiveResult = drive(PassiveRole(X, peer=peer, **kwargs), channels, timeout=timeout)
    return res


@dataclass
class WoeRun:
    active: ActiveResult
    passive: dict[str, PassiveResult]
    transcript: Transcript
    seconds: float


def run_local(y: np.ndarray, X_active: np.ndarray | None, X_passives: Sequence[np.ndarray], *,
              params: WoeParams | None = None, keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
              key_bits: int = 2048, allow_insecure: bool = False, active_columns: Sequence[str] | None = None,
              passive_columns: Sequence[Sequence[str]] | None = None, timeout: float = DEFAULT_TIMEOUT,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None) -> WoeRun:
    """The active party and ``len(X_passives)`` passive parties (``passive-0`` …) in-process."""
    keys = keys or generate_keypair(key_bits, allow_insecure=allow_insecure)
    cols = list(passive_columns) if passive_columns is not None else [None] * len(X_passives)

    def passive(k: int) -> Callable[[Mapping[str, Channel]], PassiveResult]:
        return lambda ch: run_passive(ch, X_passives[k], columns=cols[k], name=f"passive-{k}")

    out, transcript, seconds = run_star(
        lambda ch: run_active(ch, y, X_active, keys=keys, params=params, columns=active_columns),
        [passive(k) for k in range(len(X_passives))],
        timeout=timeout, allow_insecure=allow_insecure, tap=tap, overrides=overrides)
    names = [f"passive-{k}" for k in range(len(X_passives))]
    return WoeRun(out[ACTIVE], {n: out[n] for n in names}, transcript, seconds)
