"""``vflcrypto train poisson`` (every party in this process) and ``vflcrypto party ... train poisson``.

In-process: ``--active`` is the label holder's file (ID column, the count ``--label`` and
optionally its own columns), ``--passive`` the one feature party's file; the coordinator
runs in this process too. Rows are aligned by PSI first unless ``--aligned``. The summary
gives the deviance on the training rows (computed here, where every party's weights are
at hand) and the losses the coordinator saw. ``--test-fraction`` holds rows out of training
(the public, seeded split, in both commands): ``test_deviance`` is that of the active party's
predictions on them, made as ``vflcrypto predict poisson`` makes them (:mod:`.predict`).
``--model-dir`` saves one ``<party>.npz`` per data party (no pickle; its weights and its
standardization, the active party's intercept last) and a manifest of their digests,
all-or-nothing.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from vflcrypto.errors import InputDataError
from vflcrypto.ml.preprocess import fit_standardize
from vflcrypto.runtime.steps import drive
from vflcrypto.spec import PartyOutcome, TaskContext, add_config_arguments

from .._linear import LinearParty, load_parties, read_query, save_parties
from .._predict import (
    add_party_predict_options,
    add_predict_options,
    own_model,
    own_rows,
    predictions_outcome,
    report,
    write_predictions,
)
from .._train import (
    add_pair_train_arguments,
    add_party_data_arguments,
    add_train_options,
    align_tables,
    exact_columns,
    json_outcome,
    pair_split,
    pair_weights,
    read_own,
    read_pair,
    train_config,
    training_rows,
)
from .audit import fitted_mean
from .math import PoissonParams, deviance
from .messages import ACTIVE, COORD, PASSIVE
from .predict import party_models, predict_local, run_predict_active, run_predict_passive
from .roles import ActiveRole, CoordinatorRole, PassiveRole, run_local

__all__ = ["add_party_arguments", "add_party_predict_arguments", "add_predict_arguments", "add_train_arguments",
           "party_predict_task", "party_task", "predict", "train"]


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    add_pair_train_arguments(p, PoissonParams, "count")
    p.add_argument("--model-dir", help="save one model file per data party here (its weights and standardization), "
                                       "with a manifest.json of their digests")


def train(args: argparse.Namespace) -> int:
    params, opts = train_config(PoissonParams, args)
    t0 = time.perf_counter()
    tables, _, _, align_bytes = read_pair(args, opts)
    train_tables, test_tables = pair_split(tables, opts)
    a, p = train_tables
    y = a.label
    assert y is not None  # read_pair requires the label at the active party
    Xa = a.X if a.columns else None
    run = run_local(Xa, y, p.X, params=params, key_bits=opts.key_bits, allow_insecure=opts.allow_insecure,
                    timeout=opts.timeout)
    bytes_sent = {"alignment": align_bytes, **run.transcript.bytes_sent_by()}
    # each party's own standardization of its training rows (the one its role fitted), kept for new rows
    models = party_models((run.active, run.passive), (fit_standardize(a.X, "active party", intercept=True),
                                                      fit_standardize(p.X, "passive party")),
                          (a.columns, p.columns), label=args.label)
    summary: dict[str, Any] = {"train_deviance": deviance(y, fitted_mean(run, Xa, y, p.X)),
               "epochs": params.epochs, "rows": len(y), "coordinator_losses": [round(v, 8) for v in run.losses],
               **pair_weights(tables, run.active, run.passive)}
    if test_tables:
        mu, transcript = predict_local(models, test_tables, timeout=opts.timeout)
        y_test = test_tables[0].label
        assert y_test is not None
        summary.update(test_deviance=deviance(y_test, mu), test_rows=len(y_test))
        for name, b in transcript.bytes_sent_by().items():
            bytes_sent[name] = bytes_sent.get(name, 0) + b
    if args.model_dir:
        save_parties("poisson", models, args.model_dir, overwrite=getattr(args, "overwrite", False))
    summary.update(seconds=round(time.perf_counter() - t0, 3), bytes_sent=bytes_sent)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    test = f", test deviance {summary['test_deviance']:.4f} on {len(test_tables[0])} rows" if test_tables else ""
    print(f"{params.epochs} epochs on {len(y)} rows: training deviance {summary['train_deviance']:.4f}{test}; "
          f"{summary['seconds']:.1f} s; {sum(bytes_sent.values()):,} bytes sent")
    if args.model_dir:
        print(f"party models saved in {args.model_dir}")
    return 0


# --------------------------------------------------------------------------- prediction


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--active", required=True, help="the active party's CSV: the ID column and its model's columns "
                                                   "(other columns, e.g. the counts, are ignored)")
    p.add_argument("--passive", action="append", default=[], required=True,
                   help="the passive party's CSV (ID column, its model's columns)")
    add_predict_options(p)


def predict(args: argparse.Namespace) -> int:
    """``vflcrypto predict poisson``: the saved weights on new rows; the passive party sends its score per row to
    the active party, which writes ``--out``: the ID column and ``prediction``, the expected count exp(u_A + u_B)."""
    t0 = time.perf_counter()
    names = [ACTIVE, *(f"passive-{k}" for k in range(len(args.passive)))]  # the model's: active, passive-0
    models = load_parties("poisson", args.model_dir, names, "--passive")
    tables = read_query([args.active, *args.passive], args.id_column, models)
    query_rows = [len(t) for t in tables]
    tables, align_bytes = align_tables(tables, names, aligned=args.aligned)
    mu, transcript = predict_local(models, tables, timeout=args.timeout)
    write_predictions(args.out, args.id_column, tables[0].ids, {"prediction": mu})
    bytes_sent = {**({} if args.aligned else {"alignment": align_bytes}), **transcript.bytes_sent_by()}
    return report(args, "poisson", len(tables[0]), query_rows, t0, bytes_sent)


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
        (train, *_), held = pair_split([table], opts)  # the public split: every party derives the same rows
        if ctx.role == ACTIVE:
            assert train.label is not None  # read_own requires it at the active party
            role: Any = ActiveRole(train.X if train.columns else None, train.label, params=params,
                                   passive=passives[0], coordinator=coord, name=ctx.me)
            cols = [*train.columns, "(intercept)"]
        else:
            role = PassiveRole(train.X, active=active, coordinator=coord, name=ctx.me, expected=params)
            cols = list(train.columns)
        w = drive(role, ctx.only([active if ctx.role == PASSIVE else passives[0], coord]))
        summary = {"rows": len(train), "weights": dict(zip(cols, w.tolist(), strict=True))}
        if held:  # the held-out rows, predicted as `predict poisson` does (the coordinator takes no part)
            model = LinearParty("poisson", ctx.me, ctx.role, train.columns, w,
                                fit_standardize(train.X, f"{ctx.role} party", intercept=ctx.role == ACTIVE))
            summary["test_rows"] = len(held[0])
            if ctx.role == ACTIVE:
                assert held[0].label is not None
                mu = run_predict_active(ctx.only([passives[0]]), model, held[0], peer=passives[0])
                summary["test_deviance"] = deviance(held[0].label, mu)
            else:
                run_predict_passive(ctx.only([active]), model, held[0], peer=active)
    return json_outcome(summary)


def add_party_predict_arguments(p: argparse.ArgumentParser) -> None:
    add_party_predict_options(p, name="poisson", outputs="'prediction' (the expected count)",
                              without_data="coordinator")


def party_predict_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    """``vflcrypto party ... predict poisson``: one data party of the prediction on new rows (:mod:`.predict`: the
    passive party's score per row to the active party, which writes the expected counts exp(u_A + u_B)); a
    coordinator named in the configuration takes no part."""
    active, passives = ctx.one(ACTIVE), ctx.names(PASSIVE)
    if len(passives) != 1:
        raise InputDataError("Poisson regression predicts with exactly one passive party")
    if ctx.role == COORD:  # the coordinator of training holds no key at prediction: it only confirms the run
        if args.data or args.model_file:
            raise InputDataError("the coordinator holds no data and no model at prediction: leave out --data and "
                                 "--model")
        return json_outcome({"rows": 0, "takes_part": False})
    model = own_model(args, ctx, lambda f: LinearParty.load(f, "poisson"), lambda m: (m.name, m.role))
    table = own_rows(args, ctx, model.columns, refuse_missing=model.scaling.medians is None)
    if ctx.role == ACTIVE:
        mu = run_predict_active(ctx.only([passives[0]]), model, table, peer=passives[0])
        return predictions_outcome(args, table, {"prediction": mu})
    run_predict_passive(ctx.only([active]), model, table, peer=active)
    return json_outcome({"rows": len(table)})
