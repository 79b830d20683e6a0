"""``vflcrypto train pearson`` (every party in this process) and ``vflcrypto party ... train pearson``.

In-process: ``--active`` is the key holder's file (ID column and numeric columns); each
``--passive`` file (ID column and numeric columns) is ``passive-0``, ``passive-1``, ...
Rows are aligned by PSI first unless ``--aligned``. ``--reveal`` says who receives the
cross-party correlations (``both`` by default); the JSON summary shows what each party
received, by column name (each party names its own columns; the other party's are
named as that party lists them only where it receives the matrix).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from vflcrypto.data.tables import read_party_csv
from vflcrypto.data.validate import refuse_constant_columns
from vflcrypto.errors import InputDataError
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.spec import PartyOutcome, TaskContext, config_from_args

from .._train import (
    TrainOptions,
    add_party_data_arguments,
    add_train_options,
    align_tables,
    exact_columns,
    json_outcome,
    training_rows,
)
from .math import REVEALS
from .messages import ACTIVE, PASSIVE
from .roles import run_active, run_local, run_passive

__all__ = ["add_party_arguments", "add_train_arguments", "party_task", "train"]


def _matrix(corr: np.ndarray | None, rows: tuple[str, ...], cols: tuple[str, ...] | None) -> Any:
    if corr is None:
        return None
    names = cols or tuple(f"#{k}" for k in range(corr.shape[1]))
    return {a: {b: round(float(corr[j, k]), 8) for k, b in enumerate(names)} for j, a in enumerate(rows)}


def _add_reveal(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reveal", choices=REVEALS, default="both",
                   help="who receives the cross-party correlations (default both)")


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--active", required=True, help="key holder's CSV (ID and numeric columns)")
    p.add_argument("--passive", action="append", default=[], help="feature party CSV; repeat for several")
    p.add_argument("--id-column", required=True)
    _add_reveal(p)
    add_train_options(p)
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")


def train(args: argparse.Namespace) -> int:
    opts: TrainOptions = config_from_args(TrainOptions, args)
    if not args.passive:
        raise InputDataError("at least one --passive file is required")
    t0 = time.perf_counter()
    tables = [read_party_csv(args.active, args.id_column)] + [read_party_csv(p, args.id_column) for p in args.passive]
    names = [ACTIVE, *[f"passive-{k}" for k in range(len(args.passive))]]
    tables, align_bytes = align_tables(tables, names, aligned=opts.aligned)
    exact_columns(tables[0], "the correlations")
    for t in tables[1:]:
        refuse_constant_columns(t)
    run = run_local(tables[0].X, [t.X for t in tables[1:]], reveal=args.reveal, key_bits=opts.key_bits,
                    allow_insecure=opts.allow_insecure, timeout=opts.timeout)
    ca = tables[0].columns
    summary = {"rows": len(tables[0]), "reveal": args.reveal,
               "active": {n: _matrix(run.active.get(n), ca, t.columns) for n, t in zip(names[1:], tables[1:],
                                                                                        strict=True)},
               **{n: _matrix(None if r is None else r.T, t.columns, None)
                  for (n, r), t in zip(run.passive.items(), tables[1:], strict=True)},
               "seconds": round(time.perf_counter() - t0, 3),
               "bytes_sent": {"alignment": align_bytes, **run.transcript.bytes_sent_by()}}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for n, corr in run.active.items():
        print(f"{ACTIVE} x {n}:")
        for j, a in enumerate(ca):
            print(f"  {a:<20} " + "  ".join(f"{b} {corr[j, k]:+.4f}" for k, b in
                                          enumerate(tables[names.index(n)].columns)))
    print(f"{summary['seconds']:.1f} s; {sum(summary['bytes_sent'].values()):,} bytes sent")
    return 0


def add_party_arguments(p: argparse.ArgumentParser) -> None:
    add_party_data_arguments(p)
    _add_reveal(p)
    add_train_options(p)


def party_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    opts: TrainOptions = config_from_args(TrainOptions, args)
    passives = ctx.names(PASSIVE)
    if not passives:
        raise InputDataError("Pearson correlation needs one 'active' and at least one 'passive' party")
    if not args.data:
        raise InputDataError(f"the {ctx.role} party needs --data")
    table = exact_columns(training_rows(args, ctx, read_party_csv(args.data, args.id_column))[0], "the correlations")
    if ctx.role == ACTIVE:
        keys = generate_keypair(opts.key_bits, allow_insecure=opts.allow_insecure)
        res = run_active(ctx.only(passives), table.X, keys=keys, reveal=args.reveal, name=ctx.me)
        summary: dict[str, Any] = {"rows": len(table), "correlations": {n: _matrix(c, table.columns, None)
                                                                         for n, c in res.items()}}
    else:
        corr = run_passive(ctx.only([ctx.one(ACTIVE)]), table.X, name=ctx.me, expected_reveal=args.reveal)
        summary = {"rows": len(table), "correlations": _matrix(None if corr is None else corr.T, table.columns, None)}
    return json_outcome(summary)
