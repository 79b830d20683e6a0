"""``vflcrypto train poisson`` (every party in this process) and ``vflcrypto party ... train poisson``.

In-process: ``--active`` is the label holder's file (ID column, the count ``--label`` and
optionally its own columns), ``--passive`` the one feature party's file; the coordinator
runs in this process too. Rows are aligned by PSI first unless ``--aligned``. The summary
gives the deviance on the training rows (computed here, where every party's weights are
at hand) and the losses the coordinator saw.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from vflcrypto.errors import InputDataError
from vflcrypto.runtime.steps import drive
from vflcrypto.spec import PartyOutcome, TaskContext, add_config_arguments

from .._train import (
    add_pair_train_arguments,
    add_party_data_arguments,
    add_train_options,
    exact_columns,
    json_outcome,
    pair_weights,
    read_own,
    read_pair,
    train_config,
    training_rows,
)
from .audit import fitted_mean
from .math import PoissonParams, deviance
from .messages import ACTIVE, COORD, PASSIVE
from .roles import ActiveRole, CoordinatorRole, PassiveRole, run_local

__all__ = ["add_party_arguments", "add_train_arguments", "party_task", "train"]


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    add_pair_train_arguments(p, PoissonParams, "count")


def train(args: argparse.Namespace) -> int:
    params, opts = train_config(PoissonParams, args)
    t0 = time.perf_counter()
    tables, y, Xa, align_bytes = read_pair(args, opts)
    run = run_local(Xa, y, tables[1].X, params=params, key_bits=opts.key_bits, allow_insecure=opts.allow_insecure,
                    timeout=opts.timeout)
    bytes_sent = {"alignment": align_bytes, **run.transcript.bytes_sent_by()}
    summary: dict[str, Any] = {"train_deviance": deviance(y, fitted_mean(run, Xa, y, tables[1].X)),
               "epochs": params.epochs, "rows": len(y), "coordinator_losses": [round(v, 8) for v in run.losses],
               **pair_weights(tables, run.active, run.passive),
               "seconds": round(time.perf_counter() - t0, 3),
               "bytes_sent": bytes_sent}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{params.epochs} epochs on {len(y)} rows: training deviance {summary['train_deviance']:.4f}; "
          f"{summary['seconds']:.1f} s; {sum(bytes_sent.values()):,} bytes sent")
    return 0


def add_party_arguments(p: argparse.ArgumentParser) -> None:
    add_party_data_arguments(p, data_required=False)
    add_config_arguments(p, PoissonParams)
    add_train_options(p)


def party_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    params, opts = train_config(PoissonParams, args)
    active, passives, coord = ctx.one(ACTIVE), ctx.names(PASSIVE), ctx.one(COORD)
    if len(passives) != 1:
        raise InputDataError("Poisson regression runs with exactly one passive party (and a coordinator)")
    if ctx.role == COORD:
        losses = drive(CoordinatorRole(epochs=params.epochs, key_bits=opts.key_bits,
                                       allow_insecure=opts.allow_insecure, active=active, passive=passives[0],
                                       name=ctx.me), ctx.only([active, passives[0]]))
        summary: dict[str, Any] = {"losses": losses}
    else:
        table = exact_columns(training_rows(args, ctx, read_own(args, ctx, label_role=ACTIVE))[0])
        if ctx.role == ACTIVE:
            assert table.label is not None  # read_own requires it at the active party
            role: Any = ActiveRole(table.X if table.columns else None, table.label, params=params,
                                   passive=passives[0], coordinator=coord, name=ctx.me)
            cols = [*table.columns, "(intercept)"]
        else:
            role = PassiveRole(table.X, active=active, coordinator=coord, name=ctx.me, expected=params)
            cols = list(table.columns)
        w = drive(role, ctx.only([active if ctx.role == PASSIVE else passives[0], coord]))
        summary = {"rows": len(table), "weights": dict(zip(cols, w.tolist(), strict=True))}
    return json_outcome(summary)
