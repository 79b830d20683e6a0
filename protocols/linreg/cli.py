"""``vflcrypto train linreg`` (every party in this process) and ``vflcrypto party ... train linreg``.

In-process: ``--active`` is the active party's file (ID column, the numeric label
``--label`` and its features); each ``--passive`` file (ID column and features) is a
passive party ``passive-0``, ``passive-1``, ... in the order given. A coordinator
holding the keys runs in the same process. Unless ``--aligned`` says the files already
list the same IDs in the same order, rows are first aligned by private set
intersection. Rows are split into train and test with the public, seeded
:func:`vflcrypto.data.tables.train_test_split`; each party fits its local preprocessing on
its own training rows. Test metrics use the secure prediction path
(:func:`vflcrypto.protocols.linreg.predict_local`): only the active party learns the
predictions. ``--model-dir`` saves one ``<party>.npz`` per party (no pickle) and a manifest
of their digests, all-or-nothing; a directory holding an earlier model is refused unless
``--overwrite``, which removes its files (no stale party file stays).

The label is standardized by the active party (``--label-scaling standardize``, the default
under every scheme); the model, its predictions and the losses are reported in the label's
units. ``--json`` prints ``test_rmse`` and ``test_r2`` (``train_*`` without held-out rows)
beside ``plaintext_test_rmse`` / ``plaintext_test_r2``: the same rows fitted by ordinary
least squares (numpy's ``lstsq`` on every party's columns joined, with an intercept), the
optimum that gradient descent approaches; ``final_loss`` is the last epoch's mean training
loss ``(1/2m) Σ (prediction − y)²`` (+ the L2 penalty) in the label's units squared,
``converged`` whether the coordinator's stopping test ended training before ``--epochs``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.files import save_model, verify_model_dir
from vflcrypto.data.tables import PartyTable, read_party_csv
from vflcrypto.errors import InputDataError
from vflcrypto.ml.metrics import r2_score, rmse
from vflcrypto.spec import PartyOutcome, TaskContext, add_config_arguments, config_from_args

from .._predict import (
    add_predict_options,
    check_parties,
    own_model,
    own_rows,
    predictions_outcome,
    report,
    write_predictions,
)
from .._train import (
    TrainOptions,
    add_party_data_arguments,
    add_train_options,
    align_tables,
    json_outcome,
    read_own,
    read_tables,
    split_rows,
    training_rows,
    write_metrics,
)
from .config import LinRegConfig
from .local import passive_names, run_active, run_coordinator, run_local, run_passive
from .messages import ACTIVE, COORD, PASSIVE
from .model import PartyModel, save_models
from .predict import predict_local, run_predict_active, run_predict_coordinator, run_predict_passive

__all__ = ["add_party_arguments", "add_party_predict_arguments", "add_predict_arguments", "add_train_arguments",
           "config", "party_predict_task", "party_task", "predict", "train"]


def config(args: argparse.Namespace) -> tuple[LinRegConfig, TrainOptions]:
    """The configuration the flags describe (the same for both commands)."""
    opts: TrainOptions = config_from_args(TrainOptions, args)
    cfg: LinRegConfig = config_from_args(LinRegConfig, args, key_bits=opts.key_bits)
    return cfg, opts


def _prediction_bits(cfg: LinRegConfig, opts: TrainOptions) -> int:
    return opts.key_bits if cfg.scheme == "paillier" else max(opts.key_bits, 2048)


def least_squares_reference(train: list[PartyTable], evaluate: list[PartyTable],
                            intercept: bool) -> tuple[float, float]:
    """(RMSE, R²) on ``evaluate`` of ordinary least squares fitted on ``train`` (every party's columns joined).

    The plaintext reference beside the secure figures: numpy's ``lstsq``, sharing no code with
    the protocol (no preprocessing, no gradient descent); the optimum the secure run approaches.
    """

    def design(tables: list[PartyTable]) -> np.ndarray:
        X = np.hstack([np.asarray(t.X, dtype=np.float64) for t in tables])
        return np.hstack([X, np.ones((X.shape[0], 1))]) if intercept else X

    y_train = np.asarray(train[0].label, dtype=np.float64)
    w = np.linalg.lstsq(design(train), y_train, rcond=None)[0]
    y = np.asarray(evaluate[0].label, dtype=np.float64)
    pred = design(evaluate) @ w
    return rmse(y, pred), r2_score(y, pred)


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--active", required=True, help="active party CSV (ID, label, features)")
    p.add_argument("--passive", action="append", default=[],
                   help="passive party CSV (ID, features); repeat for several parties")
    p.add_argument("--id-column", required=True)
    p.add_argument("--label", required=True, help="numeric label column of the active file")
    add_config_arguments(p, LinRegConfig)
    add_train_options(p, skip=("scheme",))
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")
    p.add_argument("--model-dir", help="save one model file per party here, with a manifest.json of their digests")


def train(args: argparse.Namespace) -> int:
    cfg, opts = config(args)
    t0 = time.perf_counter()
    tables = read_tables(args.active, args.passive, args.id_column, args.label)
    names = [ACTIVE] + [f"passive-{k}" for k in range(len(args.passive))]
    tables, align_bytes = align_tables(tables, names, aligned=opts.aligned)
    bytes_sent: dict[str, int] = {} if opts.aligned else {"alignment": align_bytes}
    train_rows, test = split_rows(len(tables[0]), opts)
    train_tables = [t.take(train_rows) for t in tables]
    result = run_local(train_tables[0], train_tables[1:], config=cfg, allow_insecure=opts.allow_insecure,
                       timeout=opts.timeout)
    for name, b in result.transcript.bytes_sent_by().items():
        bytes_sent[name] = bytes_sent.get(name, 0) + b
    eval_tables = [t.take(test) for t in tables] if len(test) else train_tables
    pred, pred_transcript = predict_local(result.models, eval_tables, key_bits=_prediction_bits(cfg, opts),
                                          allow_insecure=opts.allow_insecure)
    for name, b in pred_transcript.bytes_sent_by().items():
        bytes_sent[name] = bytes_sent.get(name, 0) + b
    y = eval_tables[0].label
    assert y is not None  # read_tables requires the label at the active party
    if args.model_dir:
        save_models(result.models, args.model_dir, overwrite=getattr(args, "overwrite", False), what="--model-dir")
    on = "test" if len(test) else "train"
    ref_rmse, ref_r2 = least_squares_reference(train_tables, eval_tables, cfg.fit_intercept)
    summary = {f"{on}_rmse": rmse(y, pred), f"{on}_r2": r2_score(y, pred),
               f"plaintext_{on}_rmse": ref_rmse, f"plaintext_{on}_r2": ref_r2,
               "epochs": result.coordinator.epochs_run, "converged": result.coordinator.converged,
               "final_loss": result.epoch_losses[-1], "epoch_losses": result.epoch_losses,
               "seconds": round(time.perf_counter() - t0, 3), "bytes_sent": bytes_sent,
               "evaluated_on": on, "rows": {"train": len(train_rows), "test": len(test)}}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"trained on {len(train_rows)} rows, {summary['epochs']} epochs ({cfg.scheme}, "
          f"{'converged' if summary['converged'] else 'not converged'}, final loss {summary['final_loss']:.6g}); "
          f"{on} RMSE {summary[f'{on}_rmse']:.6g} (plaintext least squares {ref_rmse:.6g}), "
          f"R² {summary[f'{on}_r2']:.4f} (plaintext {ref_r2:.4f}); {summary['seconds']:.1f} s")
    if args.model_dir:
        print(f"party models saved in {args.model_dir}")
    return 0


# --------------------------------------------------------------------------- prediction


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--active", required=True, help="the active party's CSV: the ID column and the model's columns "
                                                   "(other columns, e.g. the label, are ignored)")
    p.add_argument("--passive", action="append", default=[],
                   help="a passive party's CSV (ID column, the model's columns); one per passive party, in the "
                        "order of training")
    add_predict_options(p, key=True)


def predict(args: argparse.Namespace) -> int:
    """``vflcrypto predict linreg``: the saved models on new rows by the secure prediction of training
    (each passive party's [[u_k]], masked at the active party, decrypted by a coordinator with a fresh key)."""
    t0 = time.perf_counter()
    names = [ACTIVE, *passive_names(len(args.passive))]
    d = Path(args.model_dir)
    check_parties(d, verify_model_dir(d, "linreg"), names, "--passive")
    models = [PartyModel.load(d / f"{n}.npz") for n in names]
    tables = [read_party_csv(path, args.id_column, features=list(m.columns))
              for path, m in zip([args.active, *args.passive], models, strict=True)]
    query_rows = [len(t) for t in tables]
    tables, align_bytes = align_tables(tables, names, aligned=args.aligned)
    pred, transcript = predict_local(models, tables, key_bits=args.key_bits, allow_insecure=args.allow_insecure,
                                     timeout=args.timeout)
    write_predictions(args.out, args.id_column, tables[0].ids, {"prediction": pred})
    bytes_sent = {**({} if args.aligned else {"alignment": align_bytes}), **transcript.bytes_sent_by()}
    return report(args, "linreg", len(tables[0]), query_rows, t0, bytes_sent)


# --------------------------------------------------------------------------- network party


def add_party_arguments(p: argparse.ArgumentParser) -> None:
    add_party_data_arguments(p, data_required=False)
    add_config_arguments(p, LinRegConfig)
    add_train_options(p, skip=("scheme",))


def _role_channels(ctx: TaskContext) -> tuple[list[str], Callable[[list[str]], dict[str, Any]]]:
    """The passive parties' names and ``only(names)``: this party's channels to ``names``, where the active
    party and the coordinator are also reachable by their role names (the roles address them so)."""
    active, coord = ctx.one(ACTIVE), ctx.one(COORD)
    passives = ctx.names(PASSIVE)
    if not passives:
        raise InputDataError("linear regression needs at least one 'passive' party")
    chans = dict(ctx.channels)
    if active in chans:
        chans[ACTIVE] = chans[active]
    if coord in chans:
        chans[COORD] = chans[coord]

    def only(names: list[str]) -> dict[str, Any]:
        missing = [n for n in names if n not in chans]
        if missing:
            return ctx.only(names)  # the clear error
        return {n: chans[n] for n in names}

    return passives, only


def party_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    cfg, opts = config(args)
    me, role = ctx.me, ctx.role
    passives, only = _role_channels(ctx)

    if role == COORD:
        if args.data:
            raise InputDataError("the coordinator holds no data: leave out --data")
        c = run_coordinator(only([ACTIVE, *passives]), scheme=cfg.scheme, key_bits=cfg.key_bits,
                            allow_insecure=opts.allow_insecure, passives=passives, expected=cfg)
        run_predict_coordinator(only([ACTIVE, *passives]), _prediction_bits(cfg, opts), opts.allow_insecure, passives)
        # C never learns the label's scale: its losses are in the units of the label B trains on
        units = "the active party's standardized label" if cfg.scales_label else "the label's units squared"
        summary: dict[str, Any] = {"losses": c.losses, "epoch_losses": c.epoch_losses, "loss_units": units,
                                   "epochs": c.epochs_run, "converged": c.converged, "obfuscators": c.obfuscators}

        def write(out: Path, meta: dict[str, Any]) -> None:
            save_model(out, {**meta, "protocol": "linreg-coordinator", "epochs": c.epochs_run,
                             "converged": c.converged},
                       {"losses": np.asarray(c.losses), "epoch_losses": np.asarray(c.epoch_losses)})

        return PartyOutcome(summary, write)
    table = read_own(args, ctx, label_role=ACTIVE)
    if not table.columns:
        raise InputDataError(f"{args.data}: no feature columns")
    table, _ = training_rows(args, ctx, table)
    train_rows, test = split_rows(len(table), opts)
    tr_table = table.take(train_rows)
    ev_table = table.take(test) if len(test) else tr_table
    if role == ACTIVE:
        res = run_active(only([COORD, *passives]), tr_table, passives=passives, config=cfg, name=me)
        pred = run_predict_active(only([COORD, *passives]), res.model, ev_table, passives)
        y = np.asarray(ev_table.label, dtype=np.float64)
        on = "test" if len(test) else "train"
        summary = {f"{on}_rmse": rmse(y, pred), f"{on}_r2": r2_score(y, pred), "evaluated_on": on,
                   "rows": {"train": len(train_rows), "test": len(test)},
                   "weights": [float(w) for w in res.model.weights],
                   "label_offset": res.model.label_offset, "label_scale": res.model.label_scale}
    else:
        res = run_passive(only([ACTIVE, COORD]), tr_table, index=passives.index(me), name=me,
                          preprocess=cfg.preprocess, expected=cfg)
        run_predict_passive(only([ACTIVE, COORD]), res.model, ev_table)
        summary = {"weights": [float(w) for w in res.model.weights], "columns": list(table.columns)}

    def write_model(out: Path, meta: dict[str, Any]) -> None:
        res.model.save(out)
        if role == ACTIVE:
            write_metrics(out, meta, {k: v for k, v in summary.items() if k not in ("weights", "label_offset",
                                                                                    "label_scale")})

    return PartyOutcome(summary, write_model)


def add_party_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", help="this party's CSV: the ID column and its model's columns (not the coordinator)")
    p.add_argument("--id-column", help="the ID column of --data")
    p.add_argument("--model", dest="model_file", metavar="FILE",
                   help="this party's own model file: its <party>.npz of a model directory (checked against the "
                        "manifest there) or its --out of `party ... train linreg` (not the coordinator)")
    p.add_argument("--out", required=True, help="the active party: the predictions (CSV of the ID column and "
                                                "'prediction'); the others: a JSON summary")
    p.add_argument("--aligned", action="store_true", help="the files already list the same IDs in the same "
                                                         "order (no PSI)")
    p.add_argument("--key-bits", type=int, default=2048,
                   help="coordinator: modulus bits of the fresh Paillier key of this prediction (default 2048)")
    p.add_argument("--allow-insecure", action="store_true", help="accept keys below 2048 bits (tests only)")


def party_predict_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    """``vflcrypto party ... predict linreg``: one party of the secure prediction on new rows (the active party
    learns the predictions; the coordinator, with a fresh key, decrypts only their masked passive sum)."""
    passives, only = _role_channels(ctx)
    if ctx.role == COORD:
        if args.data or args.model_file:
            raise InputDataError("the coordinator holds no data and no model: leave out --data and --model")
        run_predict_coordinator(only([ACTIVE, *passives]), args.key_bits, args.allow_insecure, passives)
        return json_outcome({"key_bits": args.key_bits})
    model = own_model(args, ctx, PartyModel.load, lambda m: (m.name, m.role))
    table = own_rows(args, ctx, model.columns)
    if ctx.role == ACTIVE:
        pred = run_predict_active(only([COORD, *passives]), model, table, passives)
        return predictions_outcome(args, table, {"prediction": pred})
    run_predict_passive(only([ACTIVE, COORD]), model, table)
    return json_outcome({"rows": len(table)})
