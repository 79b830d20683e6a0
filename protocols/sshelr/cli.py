"""``vflcrypto train sshelr`` (both parties in this process) and ``vflcrypto party ... train sshelr``.

In-process: ``--active`` is the label holder's file (ID column, the 0/1 ``--label`` and
optionally its own columns), ``--passive`` the one feature party's file. Rows are aligned
by PSI first unless ``--aligned``. No coordinator: two parties only. The summary gives
``train_accuracy`` and ``train_auc``, on the training rows (every aligned row: there is no
held-out split), computed here where both parties' weights are at hand, beside
``plaintext_train_accuracy`` / ``plaintext_train_auc`` of the plaintext reference
(:func:`~vflcrypto.protocols.sshelr.plaintext_fit`: the same Taylor-sigmoid gradient descent in
the clear, which the secure run matches to fixed-point precision).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from vflcrypto.errors import InputDataError
from vflcrypto.ml.metrics import roc_auc
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
from .audit import logits
from .math import SSHELRParams, plaintext_fit, prepare_active, prepare_passive
from .messages import ACTIVE, PASSIVE
from .roles import ActiveRole, PassiveRole, run_local

__all__ = ["add_party_arguments", "add_train_arguments", "party_task", "train"]


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    add_pair_train_arguments(p, SSHELRParams, "0/1")


def train(args: argparse.Namespace) -> int:
    params, opts = train_config(SSHELRParams, args)
    t0 = time.perf_counter()
    tables, y, Xa, align_bytes = read_pair(args, opts)
    run = run_local(Xa, y, tables[1].X, params=params, key_bits=opts.key_bits, allow_insecure=opts.allow_insecure,
                    timeout=opts.timeout)
    z = logits(run, Xa, y, tables[1].X)
    Za, Zp = prepare_active(Xa, y)[0], prepare_passive(tables[1].X)
    wa, wp = plaintext_fit(Za, y, Zp, params)
    z_ref = Za @ wa + Zp @ wp
    bytes_sent = {"alignment": align_bytes, **run.transcript.bytes_sent_by()}
    summary: dict[str, Any] = {
        "train_accuracy": float(((z > 0) == (y == 1)).mean()), "train_auc": roc_auc(y, z),
        "plaintext_train_accuracy": float(((z_ref > 0) == (y == 1)).mean()), "plaintext_train_auc": roc_auc(y, z_ref),
        "epochs": params.epochs, "rows": len(y),
        **pair_weights(tables, run.active, run.passive),
        "seconds": round(time.perf_counter() - t0, 3), "bytes_sent": bytes_sent}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{params.epochs} epochs on {len(y)} rows: training accuracy {summary['train_accuracy']:.4f} "
          f"(plaintext {summary['plaintext_train_accuracy']:.4f}), training AUC {summary['train_auc']:.4f} "
          f"(plaintext {summary['plaintext_train_auc']:.4f}); {summary['seconds']:.1f} s; "
          f"{sum(bytes_sent.values()):,} bytes sent")
    return 0


def add_party_arguments(p: argparse.ArgumentParser) -> None:
    add_party_data_arguments(p)
    add_config_arguments(p, SSHELRParams)
    add_train_options(p)


def party_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    params, opts = train_config(SSHELRParams, args)
    active, passives = ctx.one(ACTIVE), ctx.names(PASSIVE)
    if len(passives) != 1 or len(ctx.roles) != 2:
        raise InputDataError("SSHE logistic regression runs with exactly two parties: one active, one passive")
    table = exact_columns(training_rows(args, ctx, read_own(args, ctx, label_role=ACTIVE))[0])
    if ctx.role == ACTIVE:
        assert table.label is not None  # read_own requires it at the active party
        role: Any = ActiveRole(table.X if table.columns else None, table.label, params=params, key_bits=opts.key_bits,
                               allow_insecure=opts.allow_insecure, passive=passives[0], name=ctx.me)
        cols = [*table.columns, "(intercept)"]
    else:
        role = PassiveRole(table.X, key_bits=opts.key_bits, allow_insecure=opts.allow_insecure, active=active,
                           name=ctx.me, expected=params)
        cols = list(table.columns)
    w = drive(role, ctx.only([passives[0] if ctx.role == ACTIVE else active]))
    return json_outcome({"rows": len(table), "weights": dict(zip(cols, w.tolist(), strict=True))})
