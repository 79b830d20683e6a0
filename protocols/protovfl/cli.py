"""``vflcrypto train protovfl``: prototype VFL with the server and every party in this process.

``--server`` is the label holder's CSV (the ID column and the integer label of its
rows), each ``--party`` file (two or more) a party's ID column and its own columns.
The all-party-only PSI finds A, the IDs on every party; the server labels those it has
labels for; a public, seeded ``--test-fraction`` of them is held out (their labels only
evaluate). Each party's rows outside A are its unaligned rows. ``--dataset digits``
runs the bundled three-party digits split (``--aligned N`` training rows, 360 test
rows). ``--secure`` (default) sums the unaligned statistics by secure aggregation,
``--plain`` sends them in the clear (the same fixed point: the same model). ``--json``
prints ``test_accuracy``, ``bytes_sent`` (per role), ``seconds`` and the row counts.

Network (``vflcrypto party ... train protovfl``): the configuration names one ``server``
and two or more ``party`` parties; each reads only its own CSV; the all-party-only PSI
runs over the links, then training; the secure mode needs every party's identity key
pinned in the configuration (its secure-aggregation keys are signed with it). The
server writes its fusion model and ``<out>.metrics.json``, each party its extractor.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.files import save_model
from vflcrypto.data.tables import PartyTable, read_party_csv, train_test_split
from vflcrypto.data.validate import MAX_CLASSES, class_labels, refuse_label_column, refuse_missing_values, warn_few_rows
from vflcrypto.errors import InputDataError, ModelFileError, ProtocolError
from vflcrypto.runtime.steps import drive
from vflcrypto.spec import Command, PartyOutcome, PartyTask, TaskContext, add_config_arguments, config_from_args, number

from .. import _repvfl_party_predict, _repvfl_predict
from .._repvfl import PARTY, SERVER, PartyData, ServerData, check_labels, require_torch
from .._repvfl_cli import save_rep_model
from .._repvfl_predict import psi_rows
from .._train import add_party_data_arguments, write_metrics
from . import math as pm
from .align import PsiPartyRole, PsiServerRole, aligned_inputs, run_align_local, unaligned_rows
from .data import digits_tables
from .math import ProtoConfig
from .messages import TestEmbedding
from .roles import PartyRole, ServerRole, run_local

__all__ = ["command", "party_task", "predict_command", "predict_party_task"]


def _add(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", help="the server's CSV: the ID column and the label (of its rows only)")
    p.add_argument("--party", action="append", default=[], help="a party's CSV (ID column, its columns); repeat")
    p.add_argument("--id-column", help="the ID column of every file")
    p.add_argument("--label", help="the label column of the server's file (integer classes 0..C-1)")
    p.add_argument("--dataset", choices=("digits",), help="the bundled three-party digits instead of CSV files")
    p.add_argument("--aligned", type=number(int, at_least=1), default=20,
                   help="--dataset digits: aligned training rows (default 20)")
    p.add_argument("--test-fraction", type=number(float, above=0, below=1), default=0.2,
                   help="held-out fraction of the aligned rows")
    p.add_argument("--split-seed", type=number(int, at_least=0), default=0, help="public seed of the train/test split")
    add_config_arguments(p, ProtoConfig)
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")
    p.add_argument("--model-dir", help="save the server's fusion model and every party's extractor here "
                                       "(.npz, with a manifest.json of their digests)")


def _train(args: argparse.Namespace) -> int:
    require_torch()
    cfg: ProtoConfig = config_from_args(ProtoConfig, args)
    if not 0 < args.test_fraction < 1:
        raise InputDataError("--test-fraction must lie strictly between 0 and 1")
    t0 = time.perf_counter()
    if args.dataset == "digits":
        labels, tables, test_ids = digits_tables(args.aligned, seed=args.split_seed)
        inputs = aligned_inputs(labels, tables, n_classes=10, test_ids=test_ids)
    else:
        if not args.server or len(args.party) < 2 or not args.id_column or not args.label:
            raise InputDataError("give --server, two or more --party files, --id-column and --label, "
                                 "or --dataset digits")
        labels = read_party_csv(args.server, args.id_column, label=args.label, features=[])
        tables = [read_party_csv(p, args.id_column) for p in args.party]
        inputs = aligned_inputs(labels, tables, test_fraction=args.test_fraction, split_seed=args.split_seed)
        warn_few_rows(len(inputs.server.y_overlap), of=inputs.n_labelled)
    run = run_local(inputs.server, inputs.parties, config=cfg)
    summary: dict[str, Any] = {
        "protocol": "protovfl", "mode": "secure" if cfg.secure else "plain", "test_accuracy": run.test_accuracy,
        "bytes_sent": run.transcript.bytes_sent_by("sender_role"),
        "bytes_sent_by_party": run.transcript.bytes_sent_by(),
        "alignment_bytes": inputs.psi_bytes,
        "rows": {"aligned": inputs.n_aligned, "labelled": inputs.n_labelled,
                 "training": len(inputs.server.y_overlap), "test": len(inputs.parties[0].X_test),
                 "unaligned": [len(p.X_unaligned) for p in inputs.parties]},
        "gate_means": [float(w) for w in run.server.gate_means],
        "seconds": round(time.perf_counter() - t0, 3), "config": dataclasses.asdict(cfg)}
    if args.model_dir:
        save_rep_model(args.model_dir, "protovfl", run.server.head, [res.extractor for res in run.parties],
                       [t.columns for t in tables], overwrite=getattr(args, "overwrite", False), head_prefix="fusion_")
    if args.json:
        print(json.dumps(summary, indent=2, default=float))
        return 0
    acc = "n/a" if run.test_accuracy is None else f"{run.test_accuracy:.4f}"
    rows = summary["rows"]
    print(f"protovfl ({summary['mode']}): {rows['training']} aligned training rows, {len(inputs.parties)} parties, "
          f"unaligned {rows['unaligned']}; test accuracy {acc} on {rows['test']} rows; "
          f"{sum(summary['bytes_sent'].values()):,} bytes (alignment {inputs.psi_bytes:,}); {summary['seconds']:.1f} s")
    return 0


def command() -> Command:
    return Command("protovfl", "prototype VFL with unaligned data: 3+ parties and a server (PyTorch extractors)",
                   _add, _train, description=__doc__)


# --------------------------------------------------------------------------- prediction


def _fuse(fusion: Sequence[np.ndarray], H: Sequence[np.ndarray]) -> np.ndarray:
    """The server's gated fusion (adapters, gate, classifier) on every party's embeddings: class probabilities."""
    state = pm.FusionState.from_flat(fusion, len(H))
    width, dim = np.shape(state.adapters[0][0])
    n_classes = np.shape(state.classifier[0])[0]
    return pm.fuse_rows(H, state, int(n_classes), pm.ProtoConfig(dim=int(dim), width=int(width)))[0]


def _proto_rows(server: PartyTable, tables: Sequence[PartyTable], aligned: bool
                ) -> tuple[Sequence[str], list[np.ndarray], int]:
    """The rows of training's all-party-only alignment: the server's IDs in A, the intersection of every
    party's IDs (no party learns a pairwise overlap), canonical order."""
    if aligned:
        return psi_rows(server, tables, True)
    if len(tables) < 2:
        raise InputDataError("prototype VFL needs at least two party files")
    for t in (server, *tables):
        t.check_unique_ids()
    run = run_align_local(list(server.ids), [list(t.ids) for t in tables])
    ids = [i for i, keep in zip(run.server.ids, run.server.labelled, strict=True) if keep]
    if not ids:
        raise InputDataError("no ID of the server's file is on every party")
    X = [t.X[np.asarray(got.rows, np.int64)] for t, got in zip(tables, run.parties, strict=True)]
    if any(len(x) != len(ids) for x in X):
        raise ProtocolError("the parties disagree on the aligned rows")
    return ids, X, run.transcript.total_bytes


#: the prediction of ``vflcrypto predict protovfl`` and ``vflcrypto party ... predict protovfl``
_PREDICT = _repvfl_predict.Predictor("protovfl", TestEmbedding, head_prefix="fusion_", combine=_fuse,
                                     align=_proto_rows)


def predict_command() -> Command:
    """``vflcrypto predict protovfl``: every party's embeddings of the query rows (``protovfl.test_embedding``)
    to the server, which fuses them."""
    return _repvfl_predict.command(_PREDICT)


def _fusion_dim(fusion: Sequence[np.ndarray], n_parties: int) -> int:
    """The embedding width the server's fusion model takes from each of ``n_parties`` parties (its adapters')."""
    state = pm.FusionState.from_flat(fusion, n_parties)  # the wrong number of parties' adapters: refused here
    dims = {int(np.shape(w)[-1]) for w, _ in state.adapters}
    if len(dims) != 1:
        raise ModelFileError(f"the saved fusion model's adapters take embeddings of different widths {sorted(dims)}")
    return dims.pop()


def _net_proto_rows(args: argparse.Namespace, ctx: TaskContext, table: PartyTable) -> PartyTable:
    """Training's all-party-only alignment over the links: the server aggregates, no party learns a pairwise
    overlap; the server keeps its IDs in A, each party the same rows of its own, in the same order."""
    table.check_unique_ids()
    if args.aligned:
        return table
    server, parties = ctx.one(SERVER), ctx.names(PARTY)
    if len(parties) < 2:
        raise InputDataError("prototype VFL needs at least two 'party' parties")
    if ctx.role == SERVER:
        aln = drive(PsiServerRole(table.ids, parties=parties, name=ctx.me), ctx.only(parties))
        ids = [i for i, keep in zip(aln.ids, aln.labelled, strict=True) if keep]
        if not ids:
            raise InputDataError(f"{ctx.me}: no ID of the server's file is on every party")
        where = {x: r for r, x in enumerate(table.ids)}
        return table.take(np.asarray([where[i] for i in ids], np.int64))
    got = drive(PsiPartyRole(table.ids, index=parties.index(ctx.me), name=ctx.me, server=server), ctx.only([server]))
    return table.take(np.asarray(got.rows, np.int64))


def predict_party_task() -> PartyTask:
    """``vflcrypto party ... predict protovfl``."""
    return _repvfl_party_predict.task(
        _repvfl_party_predict.PartyPredictor(_PREDICT, head_dim=_fusion_dim, rows=_net_proto_rows),
        "apply a saved prototype-VFL model to new rows (the server learns the predictions)")


# --------------------------------------------------------------------------- network party


def _add_party(p: argparse.ArgumentParser) -> None:
    add_party_data_arguments(p)
    p.add_argument("--classes", type=number(int, at_least=2, at_most=MAX_CLASSES),
                   help="server: the class count C (default: the largest label + 1)")
    p.add_argument("--test-fraction", type=number(float, above=0, below=1), default=0.2,
                   help="held-out fraction of the aligned rows")
    p.add_argument("--split-seed", type=number(int, at_least=0), default=0, help="public seed of the train/test split")
    add_config_arguments(p, ProtoConfig)


def _run_party(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    """One role over the network: the all-party-only PSI (the server aggregates), the split, the training."""
    require_torch()
    cfg: ProtoConfig = config_from_args(ProtoConfig, args)
    server, parties = ctx.one(SERVER), ctx.names(PARTY)
    if len(parties) < 2:
        raise InputDataError("prototype VFL needs at least two 'party' parties")
    if not 0 < args.test_fraction < 1:
        raise InputDataError("--test-fraction must lie strictly between 0 and 1")
    is_server = ctx.role == SERVER
    table = read_party_csv(args.data, args.id_column, label=args.label if is_server else None,
                           features=[] if is_server else None)
    if is_server and table.label is not None:
        class_labels(table, n_classes=args.classes)  # integers 0..C-1, before anything is sized by C
    elif not is_server:
        refuse_label_column(table, args.label, "a party's file")
        refuse_missing_values(table)
    table.check_unique_ids()
    pins = {p: ctx.peer_identity(p) for p in parties} if cfg.secure else None
    if is_server:
        if table.label is None:
            raise InputDataError("the server needs --label")
        aln = drive(PsiServerRole(table.ids, parties=parties, name=ctx.me), ctx.only(parties))
        ids = [i for i, keep in zip(aln.ids, aln.labelled, strict=True) if keep]
        if len(ids) < 3:
            raise InputDataError(f"{ctx.me}: fewer than 3 labelled IDs are on every party")
        where = {x: r for r, x in enumerate(table.ids)}
        y = np.asarray(table.label)[[where[i] for i in ids]]
        tr, te = train_test_split(len(ids), args.test_fraction, seed=args.split_seed)
        warn_few_rows(len(tr), of=len(ids))
        C = args.classes if args.classes is not None else int(np.max(y)) + 1
        data = ServerData(check_labels(y[tr], C, "labels of the aligned rows"), C, y[te])
        role = ServerRole(data, parties=parties, config=cfg, n_test=len(te), pins=pins, run_id=aln.session,
                          name=ctx.me)
        result = drive(role, ctx.only(parties))
        metrics = {"test_accuracy": result.test_accuracy, "rows": {"aligned": len(aln.ids), "training": len(tr),
                                                                     "test": len(te)},
                   "gate_means": [float(w) for w in result.gate_means]}

        def write_server(out: Path, meta: dict[str, Any]) -> None:
            save_model(out, {**meta, "protocol": "protovfl"}, {f"fusion_{i}": a for i, a in enumerate(result.head)})
            write_metrics(out, meta, metrics)

        return PartyOutcome(metrics, write_server)
    got = drive(PsiPartyRole(table.ids, index=parties.index(ctx.me), name=ctx.me, server=server), ctx.only([server]))
    tr, te = train_test_split(len(got.rows), args.test_fraction, seed=args.split_seed)
    others = unaligned_rows(table, got.aligned)
    pdata = PartyData(table.X[got.rows[tr]], table.X[got.rows[te]], table.X[others])
    prole = PartyRole(pdata, index=parties.index(ctx.me), name=ctx.me, server=server, config=cfg,
                      identity=ctx.identity() if cfg.secure else None, pins=pins, run_id=got.session)
    presult = drive(prole, ctx.only([server]))

    def write_party(out: Path, meta: dict[str, Any]) -> None:
        save_model(out, {**meta, "protocol": "protovfl", "columns": list(table.columns)},
                   {f"extractor_{i}": a for i, a in enumerate(presult.extractor)})

    return PartyOutcome({"rows": {"aligned": len(got.aligned), "training": len(tr), "test": len(te),
                                  "unaligned": len(others)}}, write_party)


def party_task() -> PartyTask:
    """``vflcrypto party ... train protovfl``."""
    return PartyTask("protovfl", "prototype VFL (server with labels, 2+ parties with columns)", _add_party, _run_party,
                     needs_identity=lambda args, ctx: bool(getattr(args, "secure", True)) and ctx.role == PARTY)
