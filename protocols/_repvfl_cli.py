"""The commands of the representation-VFL protocols: ``vflcrypto train split|oneshot|fewshot`` and their party tasks.

In-process: ``--server`` is the label holder's CSV (the ID column and the label, of its
rows only), each ``--party`` file holds a party's ID column and its own columns. The IDs
on the server and on every party (found by the all-party ECDH PSI) are the aligned
rows; a public, seeded ``--test-fraction`` of them is held out (their labels only
evaluate); every party's other rows are its unaligned rows. ``--dataset digits
--overlap N`` runs the bundled digits halves instead (360 test rows). ``--json`` prints
``test_accuracy``, ``bytes_sent`` and ``messages`` per role, and ``seconds``; under a label
defence (``--label-dp``, ``--grad-noise``/``--grad-epsilon``: :mod:`._repvfl_defence`) or an
embedding defence (``--embed-noise``/``--embed-epsilon``, ``--dcor-weight``: :mod:`._repvfl_embed`)
also ``privacy``: each role's accounted (ε, δ) per defence (the server's, and each feature party's
own; ``dcor`` has none: an empirical defence), which the model files' metadata keep too.

Network (``vflcrypto party ... train NAME``): the configuration names one ``server``
party and ``party`` parties; each reads only its own CSV, the PSI aligns them, and each
writes its model (``--out``; the server also ``<out>.metrics.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.files import save_model, write_model_dir
from vflcrypto.data.tables import PartyTable, read_party_csv, train_test_split
from vflcrypto.data.validate import MAX_CLASSES, class_labels, refuse_label_column, refuse_missing_values, warn_few_rows
from vflcrypto.errors import InputDataError
from vflcrypto.runtime.steps import Role, drive
from vflcrypto.spec import Command, PartyOutcome, PartyTask, TaskContext, add_config_arguments, config_from_args, number

from ._repvfl import PARTY, SERVER, PartyData, ServerData, aligned_inputs, check_labels, require_torch, sorted_rows
from ._train import add_party_data_arguments, write_metrics

__all__ = ["add_party_arguments", "add_train_arguments", "command", "party_task", "save_rep_model", "task", "train"]

RunLocal = Callable[..., Any]


def add_train_arguments(p: argparse.ArgumentParser, config_cls: type) -> None:
    p.add_argument("--server", help="the server's CSV: the ID column and the label (of its rows only)")
    p.add_argument("--party", action="append", default=[], help="a party's CSV (ID column, its columns); repeat")
    p.add_argument("--id-column", help="the ID column of every file")
    p.add_argument("--label", help="the label column of the server's file (integer classes 0..C-1)")
    p.add_argument("--dataset", choices=("digits",), help="the bundled digits halves instead of CSV files")
    p.add_argument("--overlap", type=number(int, at_least=1), default=100,
                   help="--dataset digits: aligned training rows (default 100)")
    p.add_argument("--test-fraction", type=number(float, at_least=0, below=1), default=0.2,
                   help="held-out fraction of the aligned rows")
    p.add_argument("--split-seed", type=number(int, at_least=0), default=0, help="public seed of the train/test split")
    add_config_arguments(p, config_cls)
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")
    p.add_argument("--model-dir", help="save the server's head and every party's extractor here "
                                       "(.npz, with a manifest.json of their digests)")


def _digits_tables(overlap: int, seed: int) -> tuple[PartyTable, list[PartyTable], list[str]]:
    from vflcrypto.data.digits import few_overlap_split

    sp = few_overlap_split(overlap, seed=seed)
    ids = [*sp.overlap_ids, *sp.test_ids]
    y = np.asarray([sp.labels[i] for i in sp.overlap_ids] + sp.y_test.tolist(), np.float64)
    server = PartyTable(tuple(ids), (), np.zeros((len(ids), 0)), y, "digit")
    parties = [PartyTable(tuple(v.ids), tuple(f"px{j}" for j in range(v.X.shape[1])), v.X.astype(np.float64))
               for v in sp.parties]
    return server, parties, sp.test_ids


def train(args: argparse.Namespace, config_cls: type, run_local: RunLocal, name: str) -> int:
    require_torch()
    cfg = config_from_args(config_cls, args)
    t0 = time.perf_counter()
    if args.dataset == "digits":
        labels, tables, test_ids = _digits_tables(args.overlap, args.split_seed)
        inputs = aligned_inputs(labels, tables, n_classes=10, test_ids=test_ids)
    else:
        if not args.server or not args.party or not args.id_column or not args.label:
            raise InputDataError("give --server, --party (one or more), --id-column and --label, or --dataset digits")
        labels = read_party_csv(args.server, args.id_column, label=args.label, features=[])
        tables = [read_party_csv(p, args.id_column) for p in args.party]
        inputs = aligned_inputs(labels, tables, test_fraction=args.test_fraction, split_seed=args.split_seed)
        warn_few_rows(len(inputs.server.y_overlap), of=inputs.n_aligned)
    run = run_local(inputs.server, inputs.parties, config=cfg)
    roles = {e.sender: e.sender_role for e in run.transcript.sent()}
    summary: dict[str, Any] = {
        "protocol": name, "test_accuracy": run.test_accuracy,
        "bytes_sent": run.transcript.bytes_sent_by("sender_role"),
        "bytes_sent_by_party": run.transcript.bytes_sent_by(),
        "messages": dict(Counter(e.sender_role for e in run.transcript.sent())),
        "alignment_bytes": sum(inputs.psi_bytes.values()),
        "rows": {"aligned": inputs.n_aligned, "overlap": len(inputs.server.y_overlap),
                 "test": len(inputs.parties[0].X_test),
                 "unaligned": [len(p.X_unaligned) for p in inputs.parties]},
        "seconds": round(time.perf_counter() - t0, 3), "config": dataclasses.asdict(cfg), "roles": roles}
    privacy = {SERVER: run.server.privacy,
               **{f"party-{k}": getattr(res, "privacy", {}) for k, res in enumerate(run.parties)}}
    if any(privacy.values()):
        summary["privacy"] = privacy  # each role's own accounting of the announced defences
    if args.model_dir:
        save_rep_model(args.model_dir, name, run.server.head, [res.extractor for res in run.parties],
                       [t.columns for t in tables], overwrite=getattr(args, "overwrite", False), privacy=privacy)
    if args.json:
        print(json.dumps(summary, indent=2, default=float))
        return 0
    acc = "n/a" if run.test_accuracy is None else f"{run.test_accuracy:.4f}"
    print(f"{name}: {summary['rows']['overlap']} overlap rows, {len(inputs.parties)} parties; test accuracy {acc} "
          f"on {summary['rows']['test']} rows; {sum(summary['bytes_sent'].values()):,} bytes; "
          f"{summary['seconds']:.1f} s")
    for d, g in run.server.privacy.items():
        if g["epsilon"] is None:  # an empirical defence (Marvell, NoPeek): what it bounds, no (epsilon, delta)
            bound = g["params"].get("leak_auc_bound")
            print(f"  {d}: no (epsilon, delta) ({g['accountant']}); "
                  f"{'' if bound is None else f'leak AUC bound {bound:.3f}; '}protects {g['covers']}")
            continue
        print(f"  {d}: ({g['epsilon']:.4g}, {g['delta']:.2g})-DP ({g['accountant']}); protects {g['covers']}")
    return 0


def save_rep_model(model_dir: str, name: str, head: list[np.ndarray], extractors: list[list[np.ndarray]],
                   columns: list[tuple[str, ...]], *, overwrite: bool = False, head_prefix: str = "head_",
                   privacy: Mapping[str, Any] | None = None) -> None:
    """The model directory of a representation-VFL run: ``server.npz`` (the head, arrays ``<head_prefix><i>``)
    and ``party-<k>.npz`` (party k's extractor and its columns), with a manifest (what ``vflcrypto predict
    NAME`` loads); ``privacy`` (role name -> its accounting of the announced defences) goes in each role's file."""
    def dp(role: str) -> dict[str, Any]:
        return {"privacy": privacy[role]} if privacy and privacy.get(role) else {}

    files = {"server.npz": partial(save_model, meta={"protocol": name, "role": SERVER, **dp(SERVER)},
                                   arrays={f"{head_prefix}{i}": a for i, a in enumerate(head)})}
    for k, (ext, cols) in enumerate(zip(extractors, columns, strict=True)):
        files[f"party-{k}.npz"] = partial(save_model, meta={"protocol": name, "role": PARTY, "party": f"party-{k}",
                                                            "columns": list(cols), **dp(f"party-{k}")},
                                          arrays={f"extractor_{i}": a for i, a in enumerate(ext)})
    write_model_dir(model_dir, name, files, overwrite=overwrite, what="--model-dir")


# --------------------------------------------------------------------------- network party


def add_party_arguments(p: argparse.ArgumentParser, config_cls: type) -> None:
    add_party_data_arguments(p)
    p.add_argument("--classes", type=number(int, at_least=2, at_most=MAX_CLASSES),
                   help="server: the class count C (default: the largest label + 1)")
    p.add_argument("--test-fraction", type=number(float, at_least=0, below=1), default=0.2,
                   help="held-out fraction of the aligned rows")
    p.add_argument("--split-seed", type=number(int, at_least=0), default=0, help="public seed of the train/test split")
    add_config_arguments(p, config_cls)


def party_task(args: argparse.Namespace, ctx: TaskContext, config_cls: type, server_cls: Callable[..., Role[Any]],
               party_cls: Callable[..., Role[Any]], name: str) -> PartyOutcome:
    """One role over the network: align by PSI (server = active, parties = passive), split, train."""
    require_torch()
    from . import align
    from .align.tables import align_rows

    cfg = config_from_args(config_cls, args)
    server, parties = ctx.one(SERVER), ctx.names(PARTY)
    if not parties:
        raise InputDataError("this task needs at least one 'party'")
    is_server = ctx.role == SERVER
    table = read_party_csv(args.data, args.id_column, label=args.label if is_server else None,
                           features=[] if is_server else None)
    if is_server and table.label is None:
        raise InputDataError("the server needs --label")
    if is_server:
        class_labels(table, n_classes=args.classes)  # integers 0..C-1, before anything is sized by C
    else:
        refuse_label_column(table, args.label, "a party's file")
        refuse_missing_values(table)
    table.check_unique_ids()
    psi_roles = {n: align.ACTIVE if r == SERVER else align.PASSIVE
                 for n, r in ctx.roles.items() if r in (SERVER, PARTY)}
    psi_ctx = dataclasses.replace(ctx, role=psi_roles[ctx.me], roles=psi_roles)
    res = align_rows(psi_ctx, list(table.ids))
    if res.rows is None or len(res.rows) < 3:
        raise InputDataError(f"{ctx.me}: fewer than 3 IDs are on the server and on every party")
    rows = sorted_rows(table.ids, res.rows)
    tr, te = train_test_split(len(rows), args.test_fraction, seed=args.split_seed)
    if is_server:
        warn_few_rows(len(tr), of=len(rows))
    overlap_ids = tuple(str(table.ids[i]) for i in rows[tr])  # the rows every message indexes, in order
    if is_server:
        assert table.label is not None  # checked above
        y = np.asarray(table.label)[rows]
        C = args.classes if args.classes is not None else int(np.max(y)) + 1
        data = ServerData(check_labels(y[tr], C), C, y[te])
        role = server_cls(data, parties=parties, config=cfg, n_test=len(te), name=ctx.me)
        result = drive(role, ctx.only(parties))
        metrics = {"test_accuracy": result.test_accuracy, "rows": {"overlap": len(tr), "test": len(te)}}
        if result.privacy:
            metrics["privacy"] = result.privacy

        def write_server(out: Path, meta: dict[str, Any]) -> None:
            dp = {"privacy": result.privacy} if result.privacy else {}
            save_model(out, {**meta, "protocol": name, **dp}, {f"head_{i}": a for i, a in enumerate(result.head)})
            write_metrics(out, meta, metrics)

        return PartyOutcome(metrics, write_server, overlap_ids)
    others = np.setdiff1d(np.arange(len(table)), rows)
    pdata = PartyData(table.X[rows[tr]], table.X[rows[te]], table.X[others])
    prole = party_cls(pdata, index=parties.index(ctx.me), name=ctx.me, server=server, config=cfg)
    presult = drive(prole, ctx.only([server]))
    privacy = getattr(presult, "privacy", {})
    dp = {"privacy": privacy} if privacy else {}

    def write_party(out: Path, meta: dict[str, Any]) -> None:
        save_model(out, {**meta, "protocol": name, "columns": list(table.columns), **dp},
                   {f"extractor_{i}": a for i, a in enumerate(presult.extractor)})

    return PartyOutcome({"rows": {"overlap": len(tr), "test": len(te), "unaligned": len(others)}, **dp}, write_party,
                        overlap_ids)


# --------------------------------------------------------------------------- the specs' entries


def command(name: str, help: str, config_cls: type, run_local: RunLocal) -> Command:
    """``vflcrypto train NAME`` of a representation-VFL protocol."""
    return Command(name, help, lambda p: add_train_arguments(p, config_cls),
                   lambda args: train(args, config_cls, run_local, name), description=__doc__)


def task(name: str, help: str, config_cls: type, server_cls: Callable[..., Role[Any]],
         party_cls: Callable[..., Role[Any]]) -> PartyTask:
    """``vflcrypto party ... train NAME`` of a representation-VFL protocol."""
    return PartyTask(name, help, lambda p: add_party_arguments(p, config_cls),
                     lambda args, ctx: party_task(args, ctx, config_cls, server_cls, party_cls, name))
