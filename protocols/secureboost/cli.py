"""``vflcrypto train secureboost`` (every party in this process) and ``vflcrypto party ... train secureboost``.

In-process: ``--active`` is the active party's file (ID column, the label ``--label`` and
its features); each ``--passive`` file (ID column and features) is a passive party
``passive-0``, ``passive-1``, ... in the order given. Unless ``--aligned`` says the files
already list the same IDs in the same order, rows are first aligned by private set
intersection (:mod:`vflcrypto.protocols.align`, ECDH; every party learns its rows of the
common IDs).

Rows are split into train and test with the public, seeded
:func:`vflcrypto.data.tables.train_test_split` (``--test-fraction 0`` evaluates on the
training rows). Test metrics use the joint prediction protocol: passive parties answer
only left/right at their own nodes. ``--plaintext`` runs the same protocol without
encryption (debug/parity only: passive parties then see every gradient, i.e. the labels).
``--scheme`` picks the additively homomorphic scheme of the active party's key: by default
``ou-2048`` (Okamoto-Uchiyama, 2048-bit modulus, 224-bit randomness and decryption factor:
112-bit strength, Paillier-2048's level; the argument is in SECURITY.md), or ``paillier``
(``--key-bits``, default 2048), ``ou`` (OU at its conservative parameters: at least 3072 bits,
256-bit randomness) or ``ou-heu`` (SecretFlow HEU's 2048-bit parameters, 112-bit randomness,
by explicit choice). ``--model-dir`` saves one
``<party>.npz`` per party (no pickle) and a manifest of their digests, all-or-nothing; a
directory holding an earlier model is refused unless ``--overwrite``.

Training options keep XGBoost's names (``--subsample``, ``--colsample-bytree``, ``--gamma``,
``--min-child-weight``, ``--early-stopping-rounds``; GOSS with LightGBM's ``--top-rate`` and
``--other-rate``); ``--weight-column`` names a column of the active party's file holding
sample weights (it is not a feature). Every option is part of the training plan the active
party sends, and a network party whose own flags differ refuses it. The JSON summary and the
model files carry each party's feature importance (its own features only; the active party
sees passive splits as party and opaque record id) and, with a validation set, the best round.

A network party with ``--checkpoint DIR`` writes its own state after every completed tree (:mod:`.checkpoint`);
``--resume`` at every party goes on from the least tree any of them completed, to the uninterrupted run's model.
In-process, ``--checkpoint DIR`` holds every party's state (``<party>.tree-<count>.npz``) and ``--resume`` goes on
from it; the rows are aligned and split again as before (a checkpoint of other rows or flags is refused).

Label defences (:mod:`.defence`, off by default; part of the plan every party checks):
``--first-tree-active-only`` / ``--active-only-trees K`` grow the first round(s) on the active party's features
alone (the passive parties receive none of their instance spaces); ``--dp-epsilon EPS`` (``--dp-delta``,
``--dp-clip``) noises the G sums of every node before the split choice: (EPS, delta)-label-DP of everything the
passive parties receive and of the model, accounted by dp-accounting. The JSON summary and the model files then
carry each party's accounting under ``privacy``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import secrets
import time
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.files import load_model, verify_model_dir, write_model_dir
from vflcrypto.data.tables import PartyTable, read_party_csv
from vflcrypto.errors import InputDataError
from vflcrypto.he.schemes import describe
from vflcrypto.ml.metrics import multiclass_accuracy, rmse, roc_auc
from vflcrypto.runtime.channel import Transcript
from vflcrypto.runtime.transcript import uncaptured
from vflcrypto.spec import PartyOutcome, TaskContext, add_config_arguments

from .._predict import (
    add_party_predict_options,
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
    train_config,
    training_rows,
    write_metrics,
)
from .checkpoint import CheckpointDir, data_digest, plan_of
from .checkpoint import run_active as resumable_active
from .checkpoint import run_passive as resumable_passive
from .local import passive_names, run_active, run_local, run_passive
from .messages import ACTIVE, PASSIVE
from .model import ActiveModel, PassiveModel
from .options import DEFAULT_SCHEME
from .parts import GRADIENT_PART_ROWS
from .predict import predict_active, predict_local, predict_passive
from .tree import BoostParams

__all__ = ["add_party_arguments", "add_party_predict_arguments", "add_predict_arguments", "add_train_arguments",
           "config", "party_check", "party_predict_task", "party_task", "predict", "train"]


def config(args: argparse.Namespace) -> tuple[BoostParams, TrainOptions]:
    """The configuration the flags describe (the same for both commands)."""
    return train_config(BoostParams, args)


def _add_mode(p: argparse.ArgumentParser) -> None:
    p.set_defaults(scheme=DEFAULT_SCHEME)
    p.add_argument("--plaintext", action="store_true",
                   help="no encryption (debug/parity only: passive parties see the gradients)")
    p.add_argument("--weight-column", default="",
                   help="column of the active party's file holding sample weights (not a feature; XGBoost's "
                        "sample_weight); give it to every party: it is part of the training plan")


def _pop_weights(table: PartyTable, column: str) -> tuple[PartyTable, np.ndarray | None]:
    """The active party's table without its weight column, and the weights (``None`` without a column)."""
    if not column:
        return table, None
    if column not in table.columns:
        raise InputDataError(f"--weight-column {column!r} is not a column of the active party's file")
    j = table.columns.index(column)
    w = table.X[:, j].copy()
    if not np.all(np.isfinite(w)) or (w < 0).any():
        raise InputDataError(f"weight column {column!r}: weights must be finite and >= 0")
    keep = [i for i in range(len(table.columns)) if i != j]
    return dataclasses.replace(table, columns=tuple(table.columns[i] for i in keep), X=table.X[:, keep]), w


def _stopping(model: ActiveModel, history: list[float]) -> dict[str, Any]:
    """The early-stopping summary (empty without a validation set)."""
    if not history:
        return {}
    return {"eval_metric": model.eval_metric, "validation_history": [round(v, 6) for v in history],
            "best_iteration": model.best_iteration, "best_score": model.best_score,
            "rounds_trained": len(history), "rounds_kept": model.best_iteration + 1}


def _metrics(objective: str, y: np.ndarray, pred: np.ndarray, on: str) -> dict[str, float]:
    """The objective's metrics, each key prefixed by the rows it was evaluated on (``test_`` or ``train_``)."""
    if objective == "multiclass":
        out = {"accuracy": multiclass_accuracy(y, np.argmax(pred, axis=1)), "log_loss": _log_loss(y, pred)}
    else:
        out = {"auc": roc_auc(y, pred)} if objective == "binary" else {"rmse": rmse(y, pred)}
    return {f"{on}_{k}": v for k, v in out.items()}


def _log_loss(y: np.ndarray, prob: np.ndarray) -> float:
    """Mean negative log probability of the true class (classes beyond the model's count as 1e-15)."""
    idx = np.asarray(y, np.int64)
    p = np.where(idx < prob.shape[1], prob[np.arange(len(idx)), np.minimum(idx, prob.shape[1] - 1)], 0.0)
    return float(-np.mean(np.log(np.clip(p, 1e-15, 1.0))))


def _mode(args: argparse.Namespace, opts: TrainOptions, pk: Any = None) -> str:
    if args.plaintext:
        return "plaintext"
    return describe(pk) if pk is not None else f"{opts.scheme}-{opts.key_bits}"


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--active", required=True, help="active party CSV (ID, label, features)")
    p.add_argument("--passive", action="append", default=[],
                   help="passive party CSV (ID, features); repeat for several parties")
    p.add_argument("--id-column", required=True)
    p.add_argument("--label", required=True, help="label column of the active file")
    add_config_arguments(p, BoostParams)
    add_train_options(p)
    _add_mode(p)
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")
    p.add_argument("--model-dir", help="save one <party>.npz per party here, with a manifest.json of their digests")
    _add_checkpoint_arguments(p, "every party's state to DIR (<party>.tree-<count>.npz",
                              "of an interrupted run with the same flags and files")


def _add_checkpoint_arguments(p: argparse.ArgumentParser, written: str, resumed: str) -> None:
    """``--checkpoint DIR`` and ``--resume``, with what is ``written`` and which checkpoints are ``resumed``."""
    p.add_argument("--checkpoint", metavar="DIR",
                   help=f"after every completed tree, write {written}; atomically, owner-readable only) so that "
                        "--resume can go on from it")
    p.add_argument("--resume", action="store_true",
                   help=f"with --checkpoint: go on from the checkpoints {resumed}; the model equals an "
                        "uninterrupted run's")


def train(args: argparse.Namespace) -> int:
    params, opts = config(args)
    t0 = time.perf_counter()
    tables = read_tables(args.active, args.passive, args.id_column, args.label)
    names = [ACTIVE, *passive_names(len(args.passive))]
    tables, align_bytes = align_tables(tables, names, aligned=opts.aligned)
    tables[0], weights = _pop_weights(tables[0], args.weight_column)
    bytes_sent: dict[str, int] = {} if opts.aligned else {"alignment": align_bytes}
    train_rows, test = split_rows(len(tables[0]), opts)
    tr = [t.take(train_rows) for t in tables]
    w = None if weights is None else weights[train_rows]
    y = tr[0].label
    assert y is not None  # read_tables requires the label at the active party
    run = run_local(tr[0].X, y, [t.X for t in tr[1:]], params=params, plaintext=args.plaintext,
                    key_bits=opts.key_bits, allow_insecure=opts.allow_insecure, scheme=opts.scheme, ids=list(tr[0].ids),
                    active_columns=tr[0].columns, passive_columns=[t.columns for t in tr[1:]],
                    timeout=opts.timeout, weights=w, goss_key=secrets.token_bytes(32),
                    checkpoint=args.checkpoint, resume=args.resume)
    goss_key = run.active.goss_key  # the run's GOSS secret (a resumed run's: its checkpoint's), for the reference
    passive_models = [run.passive[n].model for n in names[1:]]
    models: list[ActiveModel | PassiveModel] = [run.active.model, *passive_models]
    if len(test):
        ev = [t.take(test) for t in tables]
        transcript = Transcript()
        pred = predict_local(run.active.model, ev[0].X,
                             [(m, t.X) for m, t in zip(passive_models, ev[1:], strict=True)], transcript=transcript)
        y_eval = ev[0].label
        for name, b in transcript.bytes_sent_by().items():
            bytes_sent[name] = bytes_sent.get(name, 0) + b
    else:
        pred, y_eval = run.active.train_predictions(), y
    assert y_eval is not None
    on = "test" if len(test) else "train"
    metrics = _metrics(params.objective, y_eval, pred, on)
    reference = {} if args.plaintext else {f"plaintext_{k}": v for k, v in _metrics(
        params.objective, y_eval, _plaintext_reference(params, tr, [t.take(test) for t in tables] if len(test)
                                                       else None, opts, w, goss_key), on).items()}
    for name, b in run.bytes_sent.items():
        bytes_sent[name] = bytes_sent.get(name, 0) + b
    if args.model_dir:
        write_model_dir(args.model_dir, "secureboost", {f"{n}.npz": m.save for n, m in zip(names, models, strict=True)},
                        overwrite=getattr(args, "overwrite", False), what="--model-dir")
    summary: dict[str, Any] = {
        **metrics, **reference, "trees": params.n_trees,
        "seconds": round(time.perf_counter() - t0, 3), "bytes_sent": bytes_sent,
        "evaluated_on": on, "rows": {"train": len(train_rows), "test": len(test)},
        "mode": _mode(args, opts, run.active.public_key), **_stopping(run.active.model, run.active.eval_history),
        "importance": {n: m.importance() for n, m in zip(names, models, strict=True)},
        **({} if run.active.resumed_from is None else {"resumed_from": run.active.resumed_from})}
    if run.active.model.privacy:  # each party's own accounting of the plan's defences (.defence)
        summary["privacy"] = {n: m.privacy for n, m in zip(names, models, strict=True)}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    metric = next(m for m in ("auc", "accuracy", "rmse") if f"{on}_{m}" in summary)
    value = summary[f"{on}_{metric}"]
    ref = f" (plaintext {summary[f'plaintext_{on}_{metric}']:.4f})" if reference else ""
    print(f"trained {params.n_trees} rounds (depth {params.max_depth}, {summary['mode']}) on {len(train_rows)} rows; "
          f"{on} {metric.upper() if metric != 'accuracy' else metric} {value:.4f}{ref}; "
          f"{summary['seconds']:.1f} s; {sum(bytes_sent.values()):,} bytes sent")
    for d, g in run.active.model.privacy.items():
        print(f"  {d}: ({g['epsilon']:.4g}, {g['delta']:.2g})-label-DP ({g['accountant']}); protects {g['covers']}"
              if "epsilon" in g else f"  {d}: the first {g['rounds']} round(s); {g['covers']}")
    if args.model_dir:
        print(f"party models saved in {args.model_dir}")
    return 0


def _plaintext_reference(params: BoostParams, train: list[PartyTable], evaluate: list[PartyTable] | None,
                         opts: TrainOptions, weights: np.ndarray | None, goss_key: bytes) -> np.ndarray:
    """Predictions of the plaintext reference: the same trees trained unencrypted (``--plaintext``, the
    documented parity reference), on ``evaluate`` (or the training rows). Under ``--dp-epsilon`` the reference
    draws its own noise: a run of the same plan, not the same trees."""
    y = train[0].label
    assert y is not None  # read_tables requires the label at the active party
    with uncaptured():  # a check beside the run, not part of it: kept out of --html's report
        run = run_local(train[0].X, y, [t.X for t in train[1:]], params=params, plaintext=True,
                        ids=list(train[0].ids), active_columns=train[0].columns,
                        passive_columns=[t.columns for t in train[1:]], timeout=opts.timeout, weights=weights,
                        goss_key=goss_key)
        if evaluate is None:
            return np.asarray(run.active.train_predictions())
        models = [run.passive[n].model for n in passive_names(len(train) - 1)]
        return np.asarray(predict_local(run.active.model, evaluate[0].X,
                                        [(m, t.X) for m, t in zip(models, evaluate[1:], strict=True)],
                                        transcript=Transcript()))


# --------------------------------------------------------------------------- prediction


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--active", required=True, help="the active party's CSV: the ID column and the model's columns "
                                                   "(other columns, e.g. the label, are ignored)")
    p.add_argument("--passive", action="append", default=[],
                   help="a passive party's CSV (ID column, the model's columns); one per passive party, in the "
                        "order of training")
    add_predict_options(p)


def predict(args: argparse.Namespace) -> int:
    """``vflcrypto predict secureboost``: the saved trees on new rows by the joint prediction of training (the
    active party walks the trees; each passive party answers only left/right at its own nodes)."""
    t0 = time.perf_counter()
    names = [ACTIVE, *passive_names(len(args.passive))]
    d = Path(args.model_dir)
    check_parties(d, verify_model_dir(d, "secureboost"), names, "--passive")
    active = ActiveModel.load(d / f"{ACTIVE}.npz")
    passives = [PassiveModel.load(d / f"{n}.npz") for n in names[1:]]
    if list(active.passive_parties) != names[1:] or [m.party for m in passives] != names[1:]:
        raise InputDataError(f"the model in {d} names passive parties {list(active.passive_parties)}, its files "
                             f"{[m.party for m in passives]}: not a model of `vflcrypto train secureboost`")
    columns = [active.columns, *(m.columns for m in passives)]
    tables = [read_party_csv(path, args.id_column, features=list(c))
              for path, c in zip([args.active, *args.passive], columns, strict=True)]
    query_rows = [len(t) for t in tables]
    tables, align_bytes = align_tables(tables, names, aligned=args.aligned)
    transcript = Transcript()
    out = predict_local(active, tables[0].X, [(m, t.X) for m, t in zip(passives, tables[1:], strict=True)],
                        timeout=args.timeout, transcript=transcript)
    write_predictions(args.out, args.id_column, tables[0].ids, prediction_columns(active.objective, out))
    bytes_sent = {**({} if args.aligned else {"alignment": align_bytes}), **transcript.bytes_sent_by()}
    return report(args, "secureboost", len(tables[0]), query_rows, t0, bytes_sent,
                  {"objective": active.objective, "trees": active.n_trees})


def prediction_columns(objective: str, out: np.ndarray) -> dict[str, np.ndarray]:
    """The columns of the predictions file: the class and its probability (binary), the class (multiclass:
    the most probable) or the value (regression)."""
    if objective == "binary":
        return {"prediction": (out >= 0.5).astype(np.int64), "probability": out}
    if objective == "multiclass":
        return {"prediction": np.argmax(out, axis=1)}
    return {"prediction": out}


# --------------------------------------------------------------------------- network party


def add_party_arguments(p: argparse.ArgumentParser) -> None:
    add_party_data_arguments(p)
    add_config_arguments(p, BoostParams)
    add_train_options(p)
    _add_mode(p)
    p.add_argument("--precompute", action=argparse.BooleanOptionalAction, default=True,
                   help="active party: compute the next tree's obfuscators while it waits for the passive parties "
                        "(its own CPU's idle time; default on)")
    p.add_argument("--gradient-part-rows", type=int, default=GRADIENT_PART_ROWS, metavar="ROWS",
                   help="active party: send each tree's encrypted gradients in parts of ROWS rows, each encrypted "
                        f"while the one before is on the link (default {GRADIENT_PART_ROWS}; 0: one message a tree)")
    _add_checkpoint_arguments(p, "this party's state to DIR (its own directory",
                              "(every party with --resume; they resume from the least tree any of them completed)")


def _checkpoint(args: argparse.Namespace, ctx: TaskContext, rows: str) -> CheckpointDir | None:
    """This party's checkpoint directory (``--checkpoint``), or ``None``."""
    if args.resume and not args.checkpoint:
        raise InputDataError("--resume needs --checkpoint DIR (the directory this party's checkpoints are in)")
    if not args.checkpoint:
        return None
    params, _ = config(args)
    return CheckpointDir(args.checkpoint, ctx.me, plan_of(params, args.plaintext, bool(args.weight_column)), rows)


def party_check(args: argparse.Namespace, ctx: TaskContext) -> None:
    """Before connecting: ``--resume`` refuses a checkpoint of another training plan (one line)."""
    ckpt = _checkpoint(args, ctx, "")
    if ckpt is not None and args.resume:
        ckpt.check()


def party_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    params, opts = config(args)
    active, passives = ctx.one(ACTIVE), ctx.names(PASSIVE)
    if not passives:
        raise InputDataError("SecureBoost needs one 'active' and at least one 'passive' party")
    table = read_own(args, ctx, label_role=ACTIVE)
    if not table.columns:
        raise InputDataError(f"{args.data}: no feature columns")
    table, _ = training_rows(args, ctx, table)
    weights = None
    if ctx.role == ACTIVE:
        table, weights = _pop_weights(table, args.weight_column)
    train_rows, test = split_rows(len(table), opts)
    tr = table.take(train_rows)
    ev = table.take(test) if len(test) else None
    w_train = None if weights is None else weights[train_rows]
    ckpt = _checkpoint(args, ctx, data_digest(tr.ids, tr.columns, tr.X, tr.label, w_train))
    resumable: dict[str, Any] = {} if ckpt is None else {"checkpoint": ckpt, "resume": args.resume}
    if ckpt is not None and args.resume:
        ckpt.check()
    if ctx.role == ACTIVE:
        chans = ctx.only(passives)
        y = tr.label
        assert y is not None  # read_own requires the label at the active party
        res = (resumable_active if ckpt is not None else run_active)(
            chans, tr.X, y, ids=list(tr.ids), columns=tr.columns, params=params, plaintext=args.plaintext,
            key_bits=opts.key_bits, allow_insecure=opts.allow_insecure, name=ctx.me, scheme=opts.scheme,
            precompute=args.precompute, weights=w_train, gradient_part_rows=args.gradient_part_rows, **resumable)
        if ev is not None:
            pred, y_eval = predict_active(chans, res.model, ev.X), ev.label
        else:
            pred, y_eval = res.train_predictions(), y
        assert y_eval is not None
        on = "test" if len(test) else "train"
        metrics: dict[str, Any] = {**_metrics(params.objective, y_eval, pred, on), "trees": params.n_trees,
                                   "evaluated_on": on,
                                   "rows": {"train": len(train_rows), "test": len(test)},
                                   "mode": _mode(args, opts, res.public_key),
                                   **_stopping(res.model, res.eval_history), "importance": res.model.importance(),
                                   **({"privacy": res.model.privacy} if res.model.privacy else {}),
                                   **({} if res.resumed_from is None else {"resumed_from": res.resumed_from})}

        def write(out: Path, meta: dict[str, Any]) -> None:
            res.model.save(out)
            write_metrics(out, meta, metrics)

        stock = res.obfuscators
        used = {} if stock is None else {"obfuscators": {"from_stock": stock.from_stock, "online": stock.online}}
        return PartyOutcome({**metrics, "model_id": res.model.model_id, **used}, write)
    chans = ctx.only([active])
    pres = (resumable_passive if ckpt is not None else run_passive)(
        chans, tr.X, ids=list(tr.ids), columns=tr.columns,
        expected=(params, bool(args.plaintext), bool(args.weight_column)),
        scheme=None if args.plaintext else opts.scheme, **resumable)
    if ev is not None:
        predict_passive(chans, pres.model, ev.X)

    def write_passive(out: Path, meta: dict[str, Any]) -> None:
        pres.model.save(out)

    return PartyOutcome({"model_id": pres.model.model_id, "records": len(pres.model.record_ids),
                         "importance": pres.model.importance(),
                         **({"privacy": pres.model.privacy} if pres.model.privacy else {}),
                         **({} if pres.resumed_from is None else {"resumed_from": pres.resumed_from})},
                        write_passive)


def add_party_predict_arguments(p: argparse.ArgumentParser) -> None:
    add_party_predict_options(p, name="secureboost", outputs="'prediction' (and 'probability' of a binary model)")


def _load_party_model(path: str) -> ActiveModel | PassiveModel:
    """An active or a passive party's SecureBoost file, by the format it declares (checked against its manifest)."""
    meta, _ = load_model(path, protocol="secureboost")
    if str(meta.get("format", "")).startswith("vflcrypto.secureboost.active/"):
        return ActiveModel.load(path)
    return PassiveModel.load(path)


def party_predict_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    """``vflcrypto party ... predict secureboost``: one party of the joint prediction on new rows (:mod:`.predict`:
    the active party walks the trees, each passive party answers only left/right at its own nodes)."""
    active, passives = ctx.one(ACTIVE), ctx.names(PASSIVE)
    model = own_model(args, ctx, _load_party_model,
                      lambda m: (None, ACTIVE) if isinstance(m, ActiveModel) else (m.party, PASSIVE))
    table = own_rows(args, ctx, model.columns)
    if isinstance(model, ActiveModel):
        names = list(model.passive_parties)
        if sorted(names) != sorted(passives):
            raise InputDataError(f"{args.model_file} was trained with the passive parties {names}; the "
                                 f"configuration names {passives}")
        out = predict_active(ctx.only(names), model, table.X)
        return predictions_outcome(args, table, prediction_columns(model.objective, out))
    answered = predict_passive(ctx.only([active]), model, table.X)
    return json_outcome({"rows": len(table), "answered": answered})
