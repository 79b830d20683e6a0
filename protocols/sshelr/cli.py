"""``vflcrypto train sshelr`` (both parties in this process) and ``vflcrypto party ... train sshelr``.

In-process: ``--active`` is the label holder's file (ID column, the 0/1 ``--label`` and
optionally its own columns), ``--passive`` the one feature party's file. Rows are aligned
by PSI first unless ``--aligned``. No coordinator: two parties only. The summary gives
``train_accuracy`` and ``train_auc``, on the training rows (every aligned row unless
``--test-fraction`` holds some out), computed here where both parties' weights are at hand, beside
``plaintext_train_accuracy`` / ``plaintext_train_auc`` of the plaintext reference
(:func:`~vflcrypto.protocols.sshelr.plaintext_fit`: the same Taylor-sigmoid gradient descent in
the clear, which the secure run matches to fixed-point precision). With ``--test-fraction``
(the public, seeded split, in both commands), ``test_accuracy`` / ``test_auc`` are those of the
active party's predictions on the held-out rows, made as ``vflcrypto predict sshelr`` makes them
(:mod:`.predict`), beside the plaintext reference's. ``--model-dir`` saves one ``<party>.npz`` per
party (no pickle; its revealed weights and its standardization, the active party's intercept
last) and a manifest of their digests, all-or-nothing.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError
from vflcrypto.ml.metrics import roc_auc
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
from .audit import logits
from .math import SSHELRParams, plaintext_fit, prepare_active, prepare_passive
from .messages import ACTIVE, PASSIVE
from .predict import party_models, predict_local, run_predict_active, run_predict_passive, scores
from .roles import ActiveRole, PassiveRole, run_local

__all__ = ["add_party_arguments", "add_party_predict_arguments", "add_predict_arguments", "add_train_arguments",
           "party_predict_task", "party_task", "predict", "train"]


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    add_pair_train_arguments(p, SSHELRParams, "0/1")
    p.add_argument("--model-dir", help="save one model file per party here (its weights and standardization), "
                                       "with a manifest.json of their digests")


def _metrics(on: str, y: np.ndarray, z: np.ndarray, z_ref: np.ndarray) -> dict[str, float]:
    """Accuracy (z > 0) and AUC of the secure logits ``z`` and of the plaintext reference's ``z_ref``."""
    return {f"{on}_accuracy": float(((z > 0) == (y == 1)).mean()), f"{on}_auc": roc_auc(y, z),
            f"plaintext_{on}_accuracy": float(((z_ref > 0) == (y == 1)).mean()),
            f"plaintext_{on}_auc": roc_auc(y, z_ref)}


def train(args: argparse.Namespace) -> int:
    params, opts = train_config(SSHELRParams, args)
    t0 = time.perf_counter()
    tables, _, _, align_bytes = read_pair(args, opts)
    train_tables, test_tables = pair_split(tables, opts)
    a, p = train_tables
    y = a.label
    assert y is not None  # read_pair requires the label at the active party
    Xa = a.X if a.columns else None
    run = run_local(Xa, y, p.X, params=params, key_bits=opts.key_bits, allow_insecure=opts.allow_insecure,
                    timeout=opts.timeout)
    z = logits(run, Xa, y, p.X)
    Za, Zp = prepare_active(Xa, y)[0], prepare_passive(p.X)
    wa, wp = plaintext_fit(Za, y, Zp, params)
    bytes_sent = {"alignment": align_bytes, **run.transcript.bytes_sent_by()}
    # each party's own standardization of its training rows (the one its role fitted), kept for new rows
    models = party_models((run.active, run.passive), (fit_standardize(a.X, "active party", intercept=True),
                                                      fit_standardize(p.X, "passive party")),
                          (a.columns, p.columns), label=args.label)
    summary: dict[str, Any] = {**_metrics("train", y, z, Za @ wa + Zp @ wp), "epochs": params.epochs,
                               "rows": len(y), **pair_weights(tables, run.active, run.passive)}
    if test_tables:
        z_test, transcript = predict_local(models, test_tables, timeout=opts.timeout)
        reference = [LinearParty("sshelr", m.name, m.role, m.columns, w, m.scaling) for m, w in zip(models, (wa, wp),
                                                                                                    strict=True)]
        z_ref = sum(scores(m, t.X) for m, t in zip(reference, test_tables, strict=True))
        y_test = test_tables[0].label
        assert y_test is not None
        summary.update(_metrics("test", y_test, z_test, np.asarray(z_ref)), test_rows=len(y_test))
        for name, b in transcript.bytes_sent_by().items():
            bytes_sent[name] = bytes_sent.get(name, 0) + b
    if args.model_dir:
        save_parties("sshelr", models, args.model_dir, overwrite=getattr(args, "overwrite", False))
    summary.update(seconds=round(time.perf_counter() - t0, 3), bytes_sent=bytes_sent)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    on = "test" if test_tables else "train"
    print(f"{params.epochs} epochs on {len(y)} rows: {on} accuracy {summary[f'{on}_accuracy']:.4f} "
          f"(plaintext {summary[f'plaintext_{on}_accuracy']:.4f}), {on} AUC {summary[f'{on}_auc']:.4f} "
          f"(plaintext {summary[f'plaintext_{on}_auc']:.4f}); {summary['seconds']:.1f} s; "
          f"{sum(bytes_sent.values()):,} bytes sent")
    if args.model_dir:
        print(f"party models saved in {args.model_dir}")
    return 0


# --------------------------------------------------------------------------- prediction


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--active", required=True, help="the active party's CSV: the ID column and its model's columns "
                                                   "(other columns, e.g. the label, are ignored)")
    p.add_argument("--passive", action="append", default=[], required=True,
                   help="the passive party's CSV (ID column, its model's columns)")
    add_predict_options(p)


def predict(args: argparse.Namespace) -> int:
    """``vflcrypto predict sshelr``: the saved (revealed) weights on new rows; the passive party sends its score per
    row to the active party, which writes ``--out``: the ID column, ``prediction`` (1 where the logit z > 0) and
    ``probability`` (the logistic σ(z); the Taylor-sigmoid fit leaves it uncalibrated)."""
    t0 = time.perf_counter()
    names = [ACTIVE, *(f"passive-{k}" for k in range(len(args.passive)))]  # the model's: active, passive-0
    models = load_parties("sshelr", args.model_dir, names, "--passive")
    tables = read_query([args.active, *args.passive], args.id_column, models)
    query_rows = [len(t) for t in tables]
    tables, align_bytes = align_tables(tables, names, aligned=args.aligned)
    z, transcript = predict_local(models, tables, timeout=args.timeout)
    write_predictions(args.out, args.id_column, tables[0].ids,
                      {"prediction": (z > 0).astype(np.int64), "probability": 0.5 * (1.0 + np.tanh(z / 2))})
    bytes_sent = {**({} if args.aligned else {"alignment": align_bytes}), **transcript.bytes_sent_by()}
    return report(args, "sshelr", len(tables[0]), query_rows, t0, bytes_sent)


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
    (train, *_), held = pair_split([table], opts)  # the public split: both parties derive the same rows
    peer = passives[0] if ctx.role == ACTIVE else active
    if ctx.role == ACTIVE:
        assert train.label is not None  # read_own requires it at the active party
        role: Any = ActiveRole(train.X if train.columns else None, train.label, params=params, key_bits=opts.key_bits,
                               allow_insecure=opts.allow_insecure, passive=passives[0], name=ctx.me)
        cols = [*train.columns, "(intercept)"]
    else:
        role = PassiveRole(train.X, key_bits=opts.key_bits, allow_insecure=opts.allow_insecure, active=active,
                           name=ctx.me, expected=params)
        cols = list(train.columns)
    w = drive(role, ctx.only([peer]))
    summary: dict[str, Any] = {"rows": len(train), "weights": dict(zip(cols, w.tolist(), strict=True))}
    if held:  # the held-out rows, predicted as `predict sshelr` does
        model = LinearParty("sshelr", ctx.me, ctx.role, train.columns, w,
                            fit_standardize(train.X, f"{ctx.role} party", intercept=ctx.role == ACTIVE))
        summary["test_rows"] = len(held[0])
        if ctx.role == ACTIVE:
            y = held[0].label
            assert y is not None
            z = run_predict_active(ctx.only([peer]), model, held[0], peer=peer)
            summary.update(test_accuracy=float(((z > 0) == (y == 1)).mean()), test_auc=roc_auc(y, z))
        else:
            run_predict_passive(ctx.only([peer]), model, held[0], peer=peer)
    return json_outcome(summary)


def add_party_predict_arguments(p: argparse.ArgumentParser) -> None:
    add_party_predict_options(p, name="sshelr", outputs="'prediction' and 'probability'")


def party_predict_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    """``vflcrypto party ... predict sshelr``: one party of the prediction on new rows (:mod:`.predict`: the
    passive party's score per row to the active party, which writes the class where the logit z > 0 and σ(z))."""
    active, passives = ctx.one(ACTIVE), ctx.names(PASSIVE)
    if len(passives) != 1 or len(ctx.roles) != 2:
        raise InputDataError("SSHE logistic regression predicts with one active and one passive party")
    model = own_model(args, ctx, lambda f: LinearParty.load(f, "sshelr"), lambda m: (m.name, m.role))
    table = own_rows(args, ctx, model.columns, refuse_missing=model.scaling.medians is None)
    if ctx.role == ACTIVE:
        z = run_predict_active(ctx.only([passives[0]]), model, table, peer=passives[0])
        return predictions_outcome(args, table, {"prediction": (z > 0).astype(np.int64),
                                                 "probability": 0.5 * (1.0 + np.tanh(z / 2))})
    run_predict_passive(ctx.only([active]), model, table, peer=active)
    return json_outcome({"rows": len(table)})
