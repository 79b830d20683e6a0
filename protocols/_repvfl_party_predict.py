"""``vflcrypto party ... predict split|oneshot|fewshot|protovfl``: a saved representation-VFL model applied to new
rows, one process per party.

The prediction of ``vflcrypto predict NAME`` (:mod:`._repvfl_predict`), its roles and its one declared message,
with each party in its own process holding only its own model file:

* each party (role ``party``) loads its extractor (``--model``: its ``party-<k>.npz`` of a ``--model-dir``,
  checked against the manifest there, or its ``--out`` of ``party ... train NAME``), reads its query rows
  with the model's columns, and sends the server f_k(X^k) of the aligned rows in the protocol's
  ``test_representation`` (``protovfl.test_embedding``) message, in the clear as in training (SECURITY.md);
* the server (role ``server``) loads its head (``server.npz`` or its ``--out`` of training), reads only the
  ID column of its file, concatenates (prototype VFL: fuses) the representations in party order and
  writes ``--out``: the ID column and ``prediction`` (the class). Only the server learns the predictions;
  each party writes a JSON summary.

The rows are aligned like training unless ``--aligned``: the all-party ECDH PSI with the server as the
active party (split, one-shot, few-shot), or prototype VFL's all-party-only PSI aggregated by the server
(no party learns a pairwise overlap); every party gets the canonical order of the IDs.

Party k of the model is the k-th ``party`` of the configuration in name order (as in training): a
party given another party's extractor, or the server given a party's, is refused before it connects.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.files import load_model
from vflcrypto.data.tables import PartyTable, read_party_csv
from vflcrypto.errors import InputDataError, ModelFileError
from vflcrypto.runtime.steps import drive
from vflcrypto.spec import PartyOutcome, PartyTask, TaskContext

from ._predict import write_predictions
from ._repvfl import PARTY, SERVER, require_torch
from ._repvfl_predict import Predictor, PredictPartyRole, PredictServerRole
from ._train import json_outcome, training_rows

__all__ = ["PartyPredictor", "add_party_predict_arguments", "concat_dim", "party_predict_task", "psi_party_rows",
           "task"]

#: the representation width the server's saved arrays take from each of ``n`` parties
HeadDim = Callable[[Sequence[np.ndarray], int], int]
#: this party's query rows, aligned over the network like training (``args.aligned``: as given)
NetRows = Callable[[argparse.Namespace, TaskContext, PartyTable], PartyTable]


def concat_dim(head: Sequence[np.ndarray], n_parties: int) -> int:
    """Split learning, one-shot and few-shot VFL: the head's first layer takes the n representations joined."""
    width = int(np.shape(head[0])[-1]) if np.ndim(head[0]) == 2 else 0
    if width == 0 or width % n_parties:
        raise ModelFileError(f"the saved head takes {width} values, not the representations of {n_parties} "
                             f"parties of one width (the configuration has {n_parties} 'party' parties)")
    return width // n_parties


def psi_party_rows(args: argparse.Namespace, ctx: TaskContext, table: PartyTable) -> PartyTable:
    """Training's alignment of split, one-shot and few-shot VFL: the all-party ECDH PSI with the server as the
    active party and every party passive; the IDs on every file, canonical order."""
    from . import align

    roles = {n: align.ACTIVE if r == SERVER else align.PASSIVE for n, r in ctx.roles.items() if r in (SERVER, PARTY)}
    rows, _ = training_rows(args, dataclasses.replace(ctx, role=roles[ctx.me], roles=roles), table)
    return rows


@dataclass(frozen=True)
class PartyPredictor:
    """How one protocol predicts over the network: the in-process :class:`Predictor` (message, head arrays,
    combination), the representation width its head takes, and training's alignment over the links."""

    how: Predictor
    head_dim: HeadDim = concat_dim
    rows: NetRows = psi_party_rows


def add_party_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="this party's CSV: the ID column and its model's columns (the "
                                                 "server: the ID column of the rows to predict; other columns, "
                                                 "e.g. the label, are ignored)")
    p.add_argument("--id-column", required=True, help="the ID column of --data")
    p.add_argument("--model", dest="model_file", metavar="FILE", required=True,
                   help="this party's own model file: its server.npz / party-<k>.npz of a model directory "
                        "(checked against the manifest there) or its --out of `party ... train NAME`")
    p.add_argument("--out", required=True, help="the server: the predictions (CSV of the ID column and "
                                                "'prediction'); a party: a JSON summary")
    p.add_argument("--aligned", action="store_true", help="the files already list the same IDs in the same "
                                                         "order (no PSI)")


def _ordered(arrays: dict[str, np.ndarray], prefix: str, path: str) -> list[np.ndarray]:
    keys = sorted((k for k in arrays if re.fullmatch(re.escape(prefix) + r"\d+", k)),
                  key=lambda k: int(k[len(prefix):]))
    if not keys:
        raise ModelFileError(f"{path} holds no {prefix.rstrip('_')} arrays")
    return [arrays[k] for k in keys]


def _own_model(path: str, protocol: str, ctx: TaskContext, parties: list[str]) -> tuple[dict[str, Any],
                                                                                          dict[str, np.ndarray]]:
    """This party's model file, refused (one line) unless it is this party's own: the server's head at the
    server, party k's extractor at the k-th party of the configuration."""
    meta, arrays = load_model(path, protocol=protocol)  # the manifest of its directory, if any, checked first
    task = meta.get("task")
    if isinstance(task, str) and task != f"train-{protocol}":
        raise ModelFileError(f"{path} is the output of `party ... {task.replace('-', ' ', 1)}`, not of "
                             f"`party ... train {protocol}`")
    role = meta.get("role")
    if role != ctx.role:
        raise ModelFileError(f"{path} is the model of a {role} party, and {ctx.me} is the {ctx.role} party")
    if ctx.role == SERVER:
        return meta, arrays
    index = parties.index(ctx.me)
    if isinstance(task, str):  # the --out of `party ... train`: named by the configuration's party name
        owner, mine = meta.get("party"), ctx.me
    else:  # a model directory's party-<k>.npz (k: the party's place in training's party order)
        owner, mine = meta.get("party", Path(path).stem), f"party-{index}"
    if owner != mine:
        me = ctx.me if mine == ctx.me else f"{ctx.me} ({mine} of the model: party {index} in name order)"
        raise ModelFileError(f"{path} is the model of {owner}, and this is {me}: give each party its own model file")
    return meta, arrays


def party_predict_task(args: argparse.Namespace, ctx: TaskContext, net: PartyPredictor) -> PartyOutcome:
    """One role of the representation-VFL prediction over the network (the server learns the predictions)."""
    require_torch()
    how = net.how
    server, parties = ctx.one(SERVER), ctx.names(PARTY)
    if not parties:
        raise InputDataError("this task needs at least one 'party'")
    meta, arrays = _own_model(args.model_file, how.name, ctx, parties)
    if ctx.role == SERVER:
        head = _ordered(arrays, how.head_prefix, args.model_file)
        dim = net.head_dim(head, len(parties))  # before any message: the head fits this many parties
        table = net.rows(args, ctx, read_party_csv(args.data, args.id_column, features=[]))
        role = PredictServerRole(head, parties=parties, n_rows=len(table), dim=dim, message=how.message,
                                 combine=how.combine, name=ctx.me)
        proba = np.asarray(drive(role, ctx.only(parties)))
        pred = proba.argmax(axis=1)

        def write(out: Path, meta: dict[str, Any]) -> None:
            write_predictions(out, args.id_column, table.ids, {"prediction": pred})

        return PartyOutcome({"rows": len(table)}, write, tuple(table.ids))
    extractor = _ordered(arrays, "extractor_", args.model_file)
    columns = meta.get("columns")
    table = read_party_csv(args.data, args.id_column, features=list(columns) if isinstance(columns, list) else None)
    table = net.rows(args, ctx, table)
    prole = PredictPartyRole(extractor, table.X, message=how.message, name=ctx.me, server=server)
    drive(prole, ctx.only([server]))
    out = json_outcome({"rows": len(table)})
    return PartyOutcome(out.summary, out.write, tuple(table.ids))


def task(net: PartyPredictor, help: str) -> PartyTask:
    """``vflcrypto party ... predict NAME`` of a representation-VFL protocol."""
    def check(args: argparse.Namespace, ctx: TaskContext) -> None:  # before connecting: no peer waits on a refusal
        _own_model(args.model_file, net.how.name, ctx, ctx.names(PARTY))

    return PartyTask(net.how.name, help, add_party_predict_arguments,
                     lambda args, ctx: party_predict_task(args, ctx, net), group="predict", check=check)
