"""``vflcrypto train woe`` (every party in this process) and ``vflcrypto party ... train woe``.

In-process: ``--active`` is the label holder's file (ID column, ``--label`` 0/1 and
optionally its own features); each ``--passive`` file (ID column and features) is a
feature party ``passive-0``, ``passive-1``, ... Rows are aligned by PSI first unless
``--aligned``. The JSON summary shows each party's own view: the active party's IV per
feature (its own by name, a passive party's by anonymous number), and each passive
party's selected columns (and, with ``--return-results``, its WOE and IV).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from vflcrypto.data.validate import warn_few_rows
from vflcrypto.errors import InputDataError
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.spec import PartyOutcome, TaskContext, add_config_arguments

from .._train import (
    add_party_data_arguments,
    add_train_options,
    align_tables,
    json_outcome,
    read_own,
    read_tables,
    train_config,
    training_rows,
)
from .math import WoeParams
from .messages import ACTIVE, PASSIVE
from .roles import ActiveResult, PassiveResult, run_active, run_local, run_passive

__all__ = ["add_party_arguments", "add_train_arguments", "party_task", "train"]


def _active_view(res: ActiveResult) -> list[dict[str, Any]]:
    return [{"party": f.party, "feature": f.name, "iv": round(f.iv, 6), "bins": len(f.woe), "selected": f.selected}
            for f in res.features]


def _passive_view(res: PassiveResult) -> dict[str, Any]:
    out: dict[str, Any] = {"selected": res.selected}
    if res.iv is not None and res.woe is not None:
        out["iv"] = dict(zip(res.columns, [round(v, 6) for v in res.iv], strict=True))
        out["woe"] = {c: [round(float(x), 6) for x in w] for c, w in zip(res.columns, res.woe, strict=True)}
    return out


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--active", required=True, help="label holder's CSV (ID, 0/1 label, optional features)")
    p.add_argument("--passive", action="append", default=[], help="feature party CSV; repeat for several")
    p.add_argument("--id-column", required=True)
    p.add_argument("--label", required=True, help="0/1 label column of the active file")
    add_config_arguments(p, WoeParams)
    add_train_options(p)
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")


def train(args: argparse.Namespace) -> int:
    params, opts = train_config(WoeParams, args)
    t0 = time.perf_counter()
    tables = read_tables(args.active, args.passive, args.id_column, args.label)
    names = [ACTIVE, *[f"passive-{k}" for k in range(len(args.passive))]]
    tables, align_bytes = align_tables(tables, names, aligned=opts.aligned)
    y = tables[0].label
    assert y is not None  # read_tables requires the label at the active party
    warn_few_rows(len(y), what="aligned rows", result="the WOE and IV")
    run = run_local(y, tables[0].X, [t.X for t in tables[1:]], params=params, key_bits=opts.key_bits,
                    allow_insecure=opts.allow_insecure, active_columns=tables[0].columns,
                    passive_columns=[t.columns for t in tables[1:]], timeout=opts.timeout)
    bytes_sent = {"alignment": align_bytes, **run.transcript.bytes_sent_by()}
    summary = {"rows": len(y), "active": _active_view(run.active),
               **{n: _passive_view(r) for n, r in run.passive.items()},
               "seconds": round(time.perf_counter() - t0, 3), "bytes_sent": bytes_sent}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for f in run.active.features:
        print(f"{f.party:>10} {f.name:<24} IV {f.iv:8.4f} {'selected' if f.selected else ''}")
    print(f"{len(run.active.selected())} of {len(run.active.features)} features selected; "
          f"{summary['seconds']:.1f} s; {sum(bytes_sent.values()):,} bytes sent")
    return 0


def add_party_arguments(p: argparse.ArgumentParser) -> None:
    add_party_data_arguments(p)
    add_config_arguments(p, WoeParams)
    add_train_options(p)


def party_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    params, opts = train_config(WoeParams, args)
    passives = ctx.names(PASSIVE)
    if not passives:
        raise InputDataError("WOE binning needs one 'active' and at least one 'passive' party")
    table = read_own(args, ctx, label_role=ACTIVE)
    table, _ = training_rows(args, ctx, table)
    if ctx.role == ACTIVE:
        warn_few_rows(len(table), what="aligned rows", result="the WOE and IV")
        y = table.label
        assert y is not None  # read_own requires the label at the active party
        keys = generate_keypair(opts.key_bits, allow_insecure=opts.allow_insecure)
        res = run_active(ctx.only(passives), y, table.X, keys=keys, params=params, columns=table.columns,
                         name=ctx.me)
        summary: dict[str, Any] = {"rows": len(y), "features": _active_view(res)}
    else:
        if not table.columns:
            raise InputDataError(f"{args.data}: no feature columns")
        pres = run_passive(ctx.only([ctx.one(ACTIVE)]), table.X, columns=table.columns, name=ctx.me,
                           expected=params)
        summary = {"rows": len(table), **_passive_view(pres)}
    return json_outcome(summary)
