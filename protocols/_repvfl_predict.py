"""Prediction with a saved representation-VFL model (``split``, ``oneshot``, ``fewshot``): ``vflcrypto predict NAME``.

The prediction step of training, on new rows: each party k sends the server its extractor's
representations f_k(X^k) of the query rows in the protocol's own declared
``test_representation`` message (in the clear, as in training: SECURITY.md); the server
concatenates them in party order and applies its head; only the server learns the
predictions. The query rows are the IDs on the server's file and on every party's (the
all-party PSI of training, canonical order), unless ``--aligned``.

A model directory (``train NAME --model-dir``) holds ``server.npz`` (the head's arrays) and
``party-<k>.npz`` (party k's extractor, and its columns when the model records them); the
manifest and every file's digest are checked before any message.
"""

from __future__ import annotations

import argparse
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.files import load_model, verify_model_dir
from vflcrypto.data.tables import PartyTable, read_party_csv
from vflcrypto.errors import InputDataError, ModelFileError
from vflcrypto.runtime.channel import DEFAULT_TIMEOUT, AuditTap, Endpoint, LocalNetwork, Transcript, run_parties
from vflcrypto.runtime.steps import Next, Role, done, drive, send, then
from vflcrypto.spec import Command

from ._predict import add_predict_options, check_parties, report, write_predictions
from ._repvfl import PARTY, SERVER, check_matrix, party_names, require_torch
from .align.tables import align_tables

__all__ = ["Predictor", "RepModel", "command", "concat_head", "load_rep_model", "predict_local", "psi_rows"]

#: the server's class probabilities from its saved arrays and every party's representations (in party order)
Combine = Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], np.ndarray]
#: the query rows: (the server's IDs, each party's matrix of the same rows in the same order, alignment bytes)
Align = Callable[[PartyTable, Sequence[PartyTable], bool], tuple[Sequence[str], list[np.ndarray], int]]


def concat_head(head: Sequence[np.ndarray], H: Sequence[np.ndarray]) -> np.ndarray:
    """Split learning, one-shot and few-shot VFL: the linear head on the concatenated representations."""
    from vflcrypto.ml import nn as vnn

    joint = np.concatenate(list(H), axis=1)
    if np.ndim(head[0]) != 2 or np.shape(head[0])[1] != joint.shape[1]:
        raise ModelFileError(f"the saved head takes {np.shape(head[0])[-1]} values, the parties' extractors "
                             f"give {joint.shape[1]}")
    return vnn.predict_proba(vnn.head_from_arrays(head), joint)


def psi_rows(server: PartyTable, tables: Sequence[PartyTable], aligned: bool
             ) -> tuple[Sequence[str], list[np.ndarray], int]:
    """The rows of training's alignment: the IDs on the server and on every party (all-party ECDH PSI),
    canonical order; with ``aligned`` the files must list the same IDs in the same order."""
    names = [SERVER, *party_names(len(tables))]
    out, nbytes = align_tables([server, *tables], names, aligned=aligned)
    return out[0].ids, [t.X for t in out[1:]], nbytes


@dataclass(frozen=True)
class Predictor:
    """How one protocol predicts: its parties' message, its server's arrays (prefix) and how it combines and
    aligns."""

    name: str
    message: type
    head_prefix: str = "head_"
    combine: Combine = concat_head
    align: Align = psi_rows


@dataclass(frozen=True)
class RepModel:
    """A saved representation-VFL model: the server's head and each party's extractor (arrays) and columns."""

    protocol: str
    head: list[np.ndarray]
    extractors: list[list[np.ndarray]]
    columns: list[tuple[str, ...] | None]

    @property
    def dim(self) -> int:
        return int(np.shape(self.extractors[0][-1])[0])


def _ordered(arrays: dict[str, np.ndarray], prefix: str, path: Path) -> list[np.ndarray]:
    keys = sorted((k for k in arrays if k.startswith(prefix)), key=lambda k: int(k[len(prefix):]))
    if not keys:
        raise ModelFileError(f"{path} holds no {prefix.rstrip('_')} arrays")
    return [arrays[k] for k in keys]


def load_rep_model(model_dir: str | Path, protocol: str, n_parties: int, head_prefix: str = "head_") -> RepModel:
    """The model in ``model_dir`` (manifest and digests checked; :class:`ModelFileError` otherwise)."""
    d = Path(model_dir)
    check_parties(d, verify_model_dir(d, protocol), [SERVER, *party_names(n_parties)], "--party")
    _, arrays = load_model(d / f"{SERVER}.npz", protocol=protocol)
    head = _ordered(arrays, head_prefix, d / f"{SERVER}.npz")
    extractors, columns = [], []
    for p in party_names(n_parties):
        pmeta, parrays = load_model(d / f"{p}.npz", protocol=protocol)
        extractors.append(_ordered(parrays, "extractor_", d / f"{p}.npz"))
        columns.append(tuple(pmeta["columns"]) if isinstance(pmeta.get("columns"), list) else None)
    if len({np.shape(e[-1]) for e in extractors}) != 1:
        raise ModelFileError(f"the extractors in {d} give representations of different widths")
    return RepModel(protocol, head, extractors, columns)


@dataclass
class _ServerState:
    k: int = 0
    H: list[np.ndarray] = field(default_factory=list)


class PredictServerRole(Role[_ServerState]):
    """S: the head; receives every party's representations of the query rows, returns class probabilities."""

    role = SERVER
    State = _ServerState

    def __init__(self, head: Sequence[np.ndarray], *, parties: Sequence[str], n_rows: int, dim: int,
                 message: type, combine: Combine = concat_head, name: str = SERVER) -> None:
        super().__init__(name)
        self.head, self.combine = list(head), combine
        self.parties, self.n_rows, self.dim, self.message = list(parties), n_rows, dim, message

    def start(self) -> Next:
        return then([], self.parties[0], self.message, "on_representation")

    def on_representation(self, msg: Any) -> Next:
        st = self.state
        st.H.append(check_matrix(msg.H, self.n_rows, self.dim, "query representations", self.parties[st.k]))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], self.message, "on_representation")
        return done(np.asarray(self.combine(self.head, st.H)))


@dataclass
class _PartyState:
    pass


class PredictPartyRole(Role[_PartyState]):
    """Party k: its extractor's representations of its query rows, to the server."""

    role = PARTY
    State = _PartyState

    def __init__(self, extractor: Sequence[np.ndarray], X: np.ndarray, *, message: type, name: str,
                 server: str = SERVER) -> None:
        super().__init__(name)
        from vflcrypto.ml import nn as vnn

        self.f = vnn.extractor_from_arrays(extractor)
        self.X, self.message, self.server = np.asarray(X, np.float32), message, server
        if self.X.ndim != 2 or self.X.shape[1] != np.shape(extractor[0])[0]:
            raise InputDataError(f"{name}: {self.X.shape[-1]} columns, its extractor takes {np.shape(extractor[0])[0]}")
        if not np.isfinite(self.X).all():
            raise InputDataError(f"{name}: the query rows hold NaN or infinite values")

    def start(self) -> Next:
        from vflcrypto.ml import nn as vnn

        self.hold("features", self.X)
        return done(None, [send(self.server, self.message(vnn.forward(self.f, self.X)))])


def predict_local(model: RepModel, X: Sequence[np.ndarray], message: type, *, combine: Combine = concat_head,
                  timeout: float = DEFAULT_TIMEOUT, tap: AuditTap | None = None) -> tuple[np.ndarray, Transcript]:
    """The server's class probabilities of the aligned query rows ``X`` (one matrix per party), every role in
    this process over the protocol's ``message``; and the transcript."""
    require_torch()
    names = party_names(len(X))
    if len(X) != len(model.extractors) or len({len(x) for x in X}) != 1:
        raise InputDataError("need one matrix per party of the model, with the same query rows")
    net = LocalNetwork([Endpoint(SERVER, SERVER), *[Endpoint(p, PARTY) for p in names]],
                       links=[(SERVER, p) for p in names], timeout=timeout, transcript=Transcript(tap),
                       run_id=secrets.token_hex(8))
    server = PredictServerRole(model.head, parties=names, n_rows=len(X[0]), dim=model.dim, message=message,
                               combine=combine)
    tasks: dict[str, Any] = {SERVER: lambda: drive(server, net.channels(SERVER))}
    for name, ext, x in zip(names, model.extractors, X, strict=True):
        role = PredictPartyRole(ext, x, message=message, name=name)
        tasks[name] = (lambda role=role, name=name: drive(role, net.channels(name)))
    res = run_parties(tasks, network=net)
    return np.asarray(res[SERVER]), net.transcript


# --------------------------------------------------------------------------- the command


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", required=True, help="the server's CSV: the ID column of the rows to predict (other "
                                                   "columns, e.g. the label, are ignored)")
    p.add_argument("--party", action="append", default=[], required=True,
                   help="a party's CSV (ID column, its columns); one per party of the model, in the order of training")
    add_predict_options(p)


def predict(args: argparse.Namespace, how: Predictor) -> int:
    require_torch()
    t0 = time.perf_counter()
    model = load_rep_model(args.model_dir, how.name, len(args.party), how.head_prefix)
    server = read_party_csv(args.server, args.id_column, features=[])
    tables: list[PartyTable] = [read_party_csv(path, args.id_column, features=None if cols is None else list(cols))
                                for path, cols in zip(args.party, model.columns, strict=True)]
    query_rows = [len(server), *(len(t) for t in tables)]
    ids, X, align_bytes = how.align(server, tables, args.aligned)
    proba, transcript = predict_local(model, X, how.message, combine=how.combine, timeout=args.timeout)
    write_predictions(args.out, args.id_column, ids, {"prediction": proba.argmax(axis=1)})
    bytes_sent = {**({} if args.aligned else {"alignment": align_bytes}), **transcript.bytes_sent_by()}
    return report(args, how.name, len(ids), query_rows, t0, bytes_sent)


def command(how: Predictor) -> Command:
    """``vflcrypto predict NAME`` of a representation-VFL protocol."""
    return Command(how.name, f"apply a saved {how.name} model (server head, party extractors) to new rows",
                   add_predict_arguments, lambda args: predict(args, how), group="predict", description=__doc__)
