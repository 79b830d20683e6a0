"""What the representation-VFL protocols (``split``, ``oneshot``, ``fewshot``) share.

Roles: the **server** S holds the labels of the overlap rows and the classifier head;
each **party** ``party-k`` holds its own columns of the overlap rows (aligned, in the
common order), of the held-out test rows (aligned) and of its unaligned rows (on this
party only). Inputs are :class:`ServerData` and :class:`PartyData`; received
representation and gradient arrays are checked by :func:`check_matrix` (float32, the
announced shape, finite, bounded). :func:`digits_example` builds the bundled digits
setting of seed 000; :func:`aligned_inputs` builds the inputs from per-party CSV files
through the all-party PSI of :mod:`vflcrypto.protocols.align`.

Torch is needed only where a role trains (imported inside the functions that do), so
these protocols register and declare their messages without the ``deep`` extra.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.data.tables import PartyTable, train_test_split
from vflcrypto.data.validate import class_labels, refuse_label_column, refuse_missing_values, require_classes
from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.runtime.channel import (
    DEFAULT_TIMEOUT,
    AuditTap,
    Channel,
    Endpoint,
    LocalNetwork,
    Transcript,
    run_parties,
)
from vflcrypto.runtime.steps import Role, drive
from vflcrypto.spec import FlowerSpec, option

from .align.tables import sorted_rows

__all__ = [
    "MAX_DIM",
    "MAX_ROWS",
    "PARTY",
    "SERVER",
    "AlignedInputs",
    "PartyData",
    "RepConfig",
    "RepRun",
    "ServerData",
    "ServerResult",
    "aligned_inputs",
    "check_labels",
    "check_matrix",
    "digits_example",
    "flower_spec",
    "party_names",
    "require_torch",
    "run_roles",
    "sorted_rows",
]

SERVER, PARTY = "server", "party"
MAX_ROWS = 10_000_000  # rows of one representation message (larger ones are refused before use)
MAX_DIM = 4096  # representation width


def party_names(k: int) -> list[str]:
    return [f"party-{i}" for i in range(k)]


def require_torch() -> None:
    """A clear error when the ``deep`` extra (torch) is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputDataError("this protocol trains PyTorch extractors: pip install 'vflcrypto[deep]' "
                             "(make installs it)") from None


@dataclass(frozen=True)
class PartyData:
    """One party's rows: overlap (aligned, common order), held-out test (aligned) and unaligned."""

    X_overlap: np.ndarray
    X_test: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    X_unaligned: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))

    def __post_init__(self) -> None:
        X = np.asarray(self.X_overlap, np.float32)
        if X.ndim != 2 or X.shape[0] < 2 or X.shape[1] < 1:
            raise InputDataError("a party needs at least 2 overlap rows and 1 column")
        if not np.isfinite(X).all():
            raise InputDataError("a party's features must be finite")
        object.__setattr__(self, "X_overlap", X)
        for name in ("X_test", "X_unaligned"):
            A = np.asarray(getattr(self, name), np.float32)
            A = A.reshape(0, X.shape[1]) if A.size == 0 else A
            if A.ndim != 2 or A.shape[1] != X.shape[1] or not np.isfinite(A).all():
                raise InputDataError(f"{name}: expected finite rows of {X.shape[1]} columns, got shape {A.shape}")
            object.__setattr__(self, name, A)


@dataclass(frozen=True)
class ServerData:
    """The server's labels of the overlap rows (and, for evaluation only, of the test rows)."""

    y_overlap: np.ndarray
    n_classes: int
    y_test: np.ndarray | None = None

    def __post_init__(self) -> None:
        y = check_labels(self.y_overlap, self.n_classes, "overlap labels")
        require_classes(y, "the labels of the overlap (training) rows")  # one class: accuracy 1.0, nothing learned
        object.__setattr__(self, "y_overlap", y)
        if self.y_test is not None:
            object.__setattr__(self, "y_test", check_labels(self.y_test, self.n_classes, "test labels",
                                                            allow_empty=True))


def check_labels(y: Any, n_classes: int, what: str = "labels", *, allow_empty: bool = False) -> np.ndarray:
    """Integer class labels in 0..C-1 (C >= 2); :class:`InputDataError` otherwise."""
    arr = np.asarray(y)
    if arr.ndim != 1 or (arr.size == 0 and not allow_empty):
        raise InputDataError(f"{what}: expected a non-empty 1-D array")
    if arr.size and (arr.dtype.kind not in "iu" and not np.array_equal(arr, np.round(arr))):
        raise InputDataError(f"{what}: class labels must be integers")
    out = arr.astype(np.int64)
    if n_classes < 2:
        raise InputDataError(f"need at least 2 classes, got C = {n_classes}")
    if out.size and (out.min() < 0 or out.max() >= n_classes):
        raise InputDataError(f"{what}: labels must lie in 0..{n_classes - 1} for C = {n_classes}, "
                             f"got {out.min()}..{out.max()}")
    return out


def check_matrix(arr: Any, rows: int, dim: int, what: str, sender: str) -> np.ndarray:
    """A received float32 matrix of exactly ``rows`` × ``dim`` finite values, else :class:`ProtocolError`."""
    a = np.asarray(arr)
    if a.dtype != np.float32:
        raise ProtocolError(f"{sender} sent {what} as {a.dtype}, expected float32")
    if a.ndim != 2 or a.shape != (rows, dim):
        raise ProtocolError(f"{sender} sent {what} of shape {a.shape}, expected ({rows}, {dim})")
    if a.shape[0] > MAX_ROWS or a.shape[1] > MAX_DIM:
        raise ProtocolError(f"{sender} sent {what} larger than {MAX_ROWS} x {MAX_DIM}")
    if not np.isfinite(a).all():
        raise ProtocolError(f"{sender} sent {what} with NaN or infinite values")
    return a


@dataclass(frozen=True)
class RepConfig:
    """Training parameters shared by every representation-VFL protocol (one source of their flags).

    Only what every one of them uses: a protocol's own settings live in its subclass
    (split's ``epochs``; one-/few-shot's semi-supervised ones), so its ``--help`` and its
    JSON ``config`` hold only the settings that apply to it.
    """

    dim: int = option(16, "representation width d of every extractor")
    hidden: int = option(64, "hidden units of the default MLP extractors")
    lr: float = option(3e-3, "learning rate of the extractors (Adam)")
    head_lr: float = option(1e-2, "learning rate of the server's head (Adam)")
    batch_size: int = option(64, "rows per mini-batch")
    seed: int = option(0, "public training seed (initialisation, batch order, augmentation)")

    def __post_init__(self) -> None:
        if not 1 <= self.dim <= MAX_DIM or self.hidden < 1:
            raise InputDataError(f"need 1 <= dim <= {MAX_DIM} and hidden >= 1")
        if not self.lr > 0 or not self.head_lr > 0 or self.batch_size < 1:
            raise InputDataError("need lr > 0, head_lr > 0 and batch_size >= 1")


@dataclass
class ServerResult:
    """The server's head (arrays), the test predictions and, if test labels were given, the accuracy; and the
    guarantees of the run's defences (defence name -> (ε, δ) and what it covers; empty when undefended)."""

    head: list[np.ndarray]
    test_proba: np.ndarray
    test_accuracy: float | None
    seconds: dict[str, float]
    privacy: dict[str, Any] = field(default_factory=dict, kw_only=True)  # keyword-only: subclasses add fields

    @property
    def test_predictions(self) -> np.ndarray:
        return np.asarray(self.test_proba).argmax(1)


@dataclass
class RepRun:
    """Every role's result of a protocol's ``run_local`` and the shared transcript."""

    server: ServerResult
    parties: list[Any]
    transcript: Transcript
    seconds: float

    @property
    def test_accuracy(self) -> float | None:
        return self.server.test_accuracy


def run_roles(server_cls: Callable[..., Role[Any]], party_cls: Callable[..., Role[Any]], server: ServerData,
              parties: Sequence[PartyData], config: RepConfig, *, extractors: Sequence[Any] | None = None,
              timeout: float = DEFAULT_TIMEOUT,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None) -> RepRun:
    """S and every party in this process (threads over in-memory channels), as the protocols' ``run_local``.

    ``extractors`` optionally gives each party's own ``torch.nn.Module``; ``overrides``
    replaces a party's task (tests); ``tap`` (audits) keeps what each party received and holds.
    """
    import secrets
    import time

    if not parties:
        raise InputDataError("need at least one party")
    n_test = len(parties[0].X_test)
    if any(len(p.X_test) != n_test or len(p.X_overlap) != len(server.y_overlap) for p in parties):
        raise InputDataError("every party must hold the same overlap and test rows as the server's labels")
    names = party_names(len(parties))
    net = LocalNetwork([Endpoint(SERVER, SERVER), *[Endpoint(p, PARTY) for p in names]],
                       links=[(SERVER, p) for p in names], timeout=timeout, transcript=Transcript(tap),
                       run_id=secrets.token_hex(8))
    tasks: dict[str, Callable[..., Any]] = {
        SERVER: lambda: drive(server_cls(server, parties=names, config=config, n_test=n_test), net.channels(SERVER)),
    }
    for i, (name, data) in enumerate(zip(names, parties, strict=True)):
        ext = extractors[i] if extractors is not None else None
        tasks[name] = (lambda i=i, name=name, data=data, ext=ext: drive(
            party_cls(data, index=i, name=name, config=config, extractor=ext), net.channels(name)))
    for name, fn in (overrides or {}).items():
        tasks[name] = (lambda fn=fn, name=name: fn(net.channels(name)))
    t0 = time.perf_counter()
    res = run_parties(tasks, network=net)
    return RepRun(res[SERVER], [res[n] for n in names], net.transcript, time.perf_counter() - t0)


def flower_spec(make_config: Callable[[Mapping[str, Any]], RepConfig], server_cls: Callable[..., Role[Any]],
                party_cls: Callable[..., Role[Any]], name: str) -> FlowerSpec:
    """The Flower App of a representation-VFL protocol: the server as the ServerApp, ``party-0`` and
    ``party-1`` as SuperNodes, on the bundled digits (run config ``overlap``, ``seed``)."""
    names = party_names(2)

    def parties(run_config: Mapping[str, Any]) -> dict[str, str]:
        return {SERVER: SERVER, **{p: PARTY for p in names}}

    def make_role(party: str, run_config: Mapping[str, Any]) -> Role[Any]:
        server, data = digits_example(int(run_config.get("overlap", 100)), seed=int(run_config.get("seed", 0)))
        cfg = make_config(run_config)
        if party == SERVER:
            return server_cls(server, parties=names, config=cfg, n_test=len(data[0].X_test))
        k = names.index(party)
        return party_cls(data[k], index=k, name=party, config=cfg)

    def summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
        acc = results[SERVER].test_accuracy
        return {"lines": [f"[vflcrypto] {name}: test accuracy {acc:.4f}"], "test_accuracy": acc}

    return FlowerSpec(SERVER, parties, make_role, summary)


# --------------------------------------------------------------------------- inputs


def digits_example(overlap: int = 100, *, seed: int = 0) -> tuple[ServerData, list[PartyData]]:
    """The bundled digits: party A the left half, party B the right, ``overlap`` aligned training rows."""
    from vflcrypto.data.digits import few_overlap_split

    sp = few_overlap_split(overlap, seed=seed)
    n_o, n_t = len(sp.overlap_ids), len(sp.test_ids)
    parties = [PartyData(v.X[:n_o], v.X[n_o : n_o + n_t], v.X[n_o + n_t :]) for v in sp.parties]
    y_o = np.asarray([sp.labels[i] for i in sp.overlap_ids], np.int64)
    return ServerData(y_o, sp.n_classes, sp.y_test), parties


@dataclass(frozen=True)
class AlignedInputs:
    """Inputs after the all-party PSI: the server's and every party's data, and the PSI's bytes."""

    server: ServerData
    parties: list[PartyData]
    psi_bytes: dict[str, int]
    n_aligned: int


def aligned_inputs(labels: PartyTable, tables: Sequence[PartyTable], *, n_classes: int | None = None,
                   test_fraction: float = 0.2, split_seed: int = 0,
                   test_ids: Sequence[str] | None = None) -> AlignedInputs:
    """Align the server's labelled IDs with every party's IDs by the all-party ECDH PSI, then split.

    The aligned rows (IDs on the server and on every party) are the overlap; a public,
    seeded fraction of them (or exactly ``test_ids``) is held out for evaluation; each
    party's other rows are its unaligned rows. Every party learns only which of its own
    rows are aligned (the PSI's declared output).
    """
    from vflcrypto.protocols import align

    if labels.label is None:
        raise InputDataError("the server's file needs the label column")
    if not tables:
        raise InputDataError("need at least one party file")
    class_labels(labels, n_classes=n_classes)  # integers 0..C-1, before anything is sized by C
    for t in tables:
        refuse_label_column(t, labels.label_name, "a party's file")
        refuse_missing_values(t)
    for t in (labels, *tables):
        t.check_unique_ids()
    if len(tables) == 1:
        run = align.run_local(list(labels.ids), list(tables[0].ids), mode="both")
        names = [align.ACTIVE, align.PASSIVE]
    else:
        run = align.run_multiparty_local([list(labels.ids), *[list(t.ids) for t in tables]])
        names = [align.ACTIVE, *[f"passive-{j}" for j in range(len(tables))]]
    found = run.results[names[0]].rows
    if found is None or len(found) < 3:
        raise InputDataError("fewer than 3 IDs are on the server and on every party")
    server_rows = sorted_rows(labels.ids, found)
    ids = [labels.ids[i] for i in server_rows]
    if test_ids is not None:
        wanted = set(test_ids)
        test = np.asarray([i for i, x in enumerate(ids) if x in wanted], np.int64)
        train = np.asarray([i for i, x in enumerate(ids) if x not in wanted], np.int64)
    else:
        train, test = train_test_split(len(ids), test_fraction, seed=split_seed)
    y = np.asarray(labels.label)[server_rows]
    C = int(n_classes) if n_classes is not None else int(np.max(y)) + 1
    parties = []
    for name, table in zip(names[1:], tables, strict=True):
        rows = run.results[name].rows
        if rows is None:
            raise ProtocolError(f"{name} learned no aligned rows")
        rows = sorted_rows(table.ids, rows)
        others = np.setdiff1d(np.arange(len(table)), rows)
        parties.append(PartyData(table.X[rows[train]], table.X[rows[test]], table.X[others]))
    server = ServerData(y[train], C, y[test])
    return AlignedInputs(server, parties, run.transcript.bytes_sent_by(), len(ids))
