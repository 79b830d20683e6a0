"""``vflcrypto train logreg`` (every party in this process) and ``vflcrypto party ... train logreg``.

In-process: the label file (``--coordinator``) holds the ID column and the 0/1 label: it is
the *active* party (labels, no features). Each ``--party`` file holds the ID column and
numeric features: the passive parties ``passive-0``, ``passive-1``, ... in the order
given; ``passive-0`` also gets the intercept. Unless ``--aligned`` says the files already
list the same IDs in the same order, the rows are first aligned by private set
intersection. Each party then preprocesses its own columns locally: the rows are split
into train and test with the public, seeded :func:`vflcrypto.data.tables.train_test_split`;
missing values are imputed with the training-row median and features standardized with
training-row mean and standard deviation (:func:`vflcrypto.ml.preprocess.fit_local_features`).
``--label-dp EPS`` trains on randomized-response labels (:mod:`.defence`, both modes); ``--json``
then prints each party's accounted guarantee under ``privacy``, and the network parties' model
files keep it. ``--model-dir`` saves one ``<party>.npz`` per party (no pickle) and a manifest of
their digests, all-or-nothing: each feature party's weights with its own preprocessing (training
medians, mean and standard deviation, the intercept), the label holder's mode, label and
parties; ``vflcrypto predict logreg`` applies them to new rows (:mod:`.predict`).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.tables import PartyTable
from vflcrypto.errors import InputDataError
from vflcrypto.ml.preprocess import LocalScaling, fit_local_features
from vflcrypto.runtime.steps import drive
from vflcrypto.spec import PartyOutcome, TaskContext, add_config_arguments, option

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
from .math import sigmoid
from .messages import ACTIVE, PASSIVE
from .predict import PredictActiveRole, PredictPassiveRole, party_models, predict_local
from .roles import passive_names, run_active, run_local, run_passive

__all__ = ["LogRegConfig", "add_party_arguments", "add_party_predict_arguments", "add_predict_arguments",
           "add_train_arguments", "party_predict_task", "party_task", "predict", "predict_needs_identity", "train"]

TEST_FRACTION = 0.2  # the Titanic example's split: the default of both commands


@dataclass(frozen=True)
class LogRegConfig:
    """Training parameters (the single source of the flags and defaults of both commands)."""

    secure: bool = option(True, "masked logits + Paillier residuals", negative="--plain")
    steps: int = option(20, "full-batch gradient steps")
    learning_rate: float = option(0.5, "learning rate", flag="--lr", aliases=("--learning-rate",))
    preprocess: str = option("standardize", "each feature party imputes medians and standardizes its own "
                             "columns on its training rows, passive-0 adds the intercept; none: as given",
                             choices=("standardize", "none"))
    allow_small_batches: bool = option(
        False, "train even when a passive party has at least as many features (intercept included) as training "
        "rows: that party then solves its own gradient X^T r for every residual r, at the first step the labels "
        "(Weng et al. 2020's reverse multiplication; the active party refuses it by default)")
    label_dp: float | None = option(
        None, "label DP by randomized response: the active party trains on labels kept with probability "
              "e^eps/(e^eps+1), eps = this (pure eps-label-DP of everything it sends); every party must give the same")

    def validate(self) -> None:
        """What the roles refuse, refused as soon as the flags are parsed (before any peer is contacted)."""
        if self.steps < 0 or not self.learning_rate > 0:
            raise InputDataError("steps must be >= 0 and the learning rate positive")


def _scaling(table: PartyTable, train: np.ndarray, preprocess: str, *, intercept: bool) -> LocalScaling:
    """A feature party's own preprocessing, fitted on its training rows (``none``: its columns as given)."""
    if preprocess == "standardize":
        return fit_local_features(table.X, train, intercept=intercept)
    if not np.all(np.isfinite(table.X)):
        raise InputDataError("features must be finite with --preprocess none (impute first)")
    return LocalScaling.identity(table.X.shape[1])


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--coordinator", required=True, metavar="Y.csv", help="the label holder's CSV (ID column + label)")
    p.add_argument("--party", action="append", default=[], metavar="X.csv",
                   help="a feature party's CSV (repeat; the first also gets the intercept)")
    p.add_argument("--id-column", required=True, metavar="ID")
    p.add_argument("--label", required=True, metavar="COL")
    add_config_arguments(p, LogRegConfig)
    add_train_options(p, test_fraction=TEST_FRACTION)
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")
    p.add_argument("--model-dir", help="save one model file per party here (each feature party's weights and "
                                       "preprocessing), with a manifest.json of their digests")


def train(args: argparse.Namespace) -> int:
    from vflcrypto.spec import config_from_args

    cfg: LogRegConfig = config_from_args(LogRegConfig, args)
    opts: TrainOptions = config_from_args(TrainOptions, args)
    t0 = time.perf_counter()
    tables = read_tables(args.coordinator, args.party, args.id_column, args.label, label_party_features=False)
    tables, align_bytes = align_tables(tables, [str(p) for p in [args.coordinator, *args.party]],
                                       aligned=opts.aligned)
    coord, parties = tables[0], tables[1:]
    y = coord.label
    if y is None or not np.all((y == 0) | (y == 1)):
        raise InputDataError(f"label {args.label!r} must be 0/1")
    tr, te = split_rows(len(y), opts)
    scalings = [_scaling(t, tr, cfg.preprocess, intercept=k == 0) for k, t in enumerate(parties)]
    blocks = [s.apply(t.X, name) for s, t, name in zip(scalings, parties, passive_names(len(parties)), strict=True)]
    ids_train = [list(coord.ids)[i] for i in tr]
    res = run_local([b[tr] for b in blocks], y[tr], [b[te] for b in blocks] if len(te) else None,
                    y[te] if len(te) else None, secure=cfg.secure, steps=cfg.steps,
                    learning_rate=cfg.learning_rate, key_bits=opts.key_bits,
                    allow_insecure=opts.allow_insecure, timeout=opts.timeout,
                    ids_train=[ids_train] * (len(parties) + 1), allow_small_batches=cfg.allow_small_batches,
                    label_dp=cfg.label_dp)
    a = res.active
    if args.model_dir:
        save_parties("logreg", party_models(res, scalings, [t.columns for t in parties], secure=cfg.secure,
                                            preprocess=cfg.preprocess, label=args.label),
                     args.model_dir, overwrite=getattr(args, "overwrite", False))
    bytes_sent = {("coordinator" if k == ACTIVE else k): v for k, v in res.bytes_sent.items()}
    summary: dict[str, Any] = {
        "train_loss": a.train_loss, "test_loss": a.test_loss, "test_accuracy": a.test_accuracy, "steps": cfg.steps,
        "seconds": round(time.perf_counter() - t0, 3), "bytes_sent": bytes_sent, "secure": cfg.secure,
        "rows": {"train": len(tr), "test": len(te)}, "alignment_bytes": align_bytes}
    if a.privacy:  # each party's own accounting of the announced label defence
        summary["privacy"] = {"coordinator": a.privacy, **{k: r.privacy for k, r in sorted(res.passives.items())}}
    if args.json:
        print(json.dumps(summary))
        return 0
    mode = "secure" if cfg.secure else "plain"
    print(f"{mode} vertical logistic regression: {len(tr)} train / {len(te)} test rows, "
          f"{len(parties)} feature parties, {cfg.steps} steps at lr {cfg.learning_rate}")
    print(f"  loss {a.loss_history[0]:.4f} -> train loss {a.train_loss:.4f}" if a.loss_history
          else f"  train loss {a.train_loss:.4f}")
    if a.test_loss is not None:
        print(f"  test loss {a.test_loss:.4f}, test accuracy {a.test_accuracy:.1%}")
    print(f"  bytes sent: {bytes_sent}; {summary['seconds']:.1f} s")
    for d, g in a.privacy.items():
        print(f"  {d}: ({g['epsilon']:.4g}, {g['delta']:.2g})-label-DP ({g['accountant']}); protects {g['covers']}")
    if args.model_dir:
        print(f"  party models saved in {args.model_dir}")
    return 0


# --------------------------------------------------------------------------- prediction


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--coordinator", required=True, metavar="IDS.csv",
                   help="the label holder's CSV: the ID column of the rows to predict (other columns are ignored)")
    p.add_argument("--party", action="append", default=[], metavar="X.csv",
                   help="a feature party's CSV (ID column, its model's columns); one per feature party, in the "
                        "order of training")
    add_predict_options(p)


def predict(args: argparse.Namespace) -> int:
    """``vflcrypto predict logreg``: the saved weights on new rows by training's own prediction messages (the
    model's mode: pairwise-masked logits in secure mode, so the label holder learns only their sum z per row;
    plain logits otherwise). ``--out``: the ID column, ``prediction`` (1 where σ(z) >= 0.5) and ``probability``."""
    t0 = time.perf_counter()
    names = [ACTIVE, *passive_names(len(args.party))]
    models = load_parties("logreg", args.model_dir, names, "--party")
    tables = read_query([args.coordinator, *args.party], args.id_column, models)
    query_rows = [len(t) for t in tables]
    tables, align_bytes = align_tables(tables, names, aligned=args.aligned)
    p, transcript = predict_local(models, tables, timeout=args.timeout)
    write_predictions(args.out, args.id_column, tables[0].ids,
                      {"prediction": (p >= 0.5).astype(np.int64), "probability": p})
    bytes_sent = {**({} if args.aligned else {"alignment": align_bytes}),
                  **{("coordinator" if k == ACTIVE else k): v for k, v in transcript.bytes_sent_by().items()}}
    return report(args, "logreg", len(tables[0]), query_rows, t0, bytes_sent,
                  {"mode": "secure" if models[0].settings.get("secure", True) else "plain"})


# --------------------------------------------------------------------------- network party


def add_party_arguments(p: argparse.ArgumentParser) -> None:
    add_party_data_arguments(p)
    add_config_arguments(p, LogRegConfig)
    add_train_options(p, test_fraction=TEST_FRACTION)


def needs_identity(args: argparse.Namespace, ctx: TaskContext) -> bool:
    """Secure feature parties sign their key shares with their pinned identity keys."""
    return bool(args.secure) and ctx.role == PASSIVE


def party_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from vflcrypto.spec import config_from_args

    cfg: LogRegConfig = config_from_args(LogRegConfig, args)
    opts: TrainOptions = config_from_args(TrainOptions, args)
    me, role = ctx.me, ctx.role
    passives = ctx.names(PASSIVE)
    table = read_own(args, ctx, label_role=ACTIVE)
    table, _ = training_rows(args, ctx, table)
    tr, te = split_rows(len(table), opts)
    ids_tr = [table.ids[i] for i in tr]
    if role == ACTIVE:
        assert table.label is not None  # read_own requires it at the active party
        res = run_active(ctx.only(passives), table.label[tr], table.label[te] if len(te) else None,
                         parties=passives, secure=cfg.secure, steps=cfg.steps, learning_rate=cfg.learning_rate,
                         key_bits=opts.key_bits, allow_insecure=opts.allow_insecure, ids_train=ids_tr,
                         allow_small_batches=cfg.allow_small_batches, label_dp=cfg.label_dp)
        summary: dict[str, Any] = {"loss_history": res.loss_history, "train_loss": res.train_loss,
                                   "test_loss": res.test_loss, "test_accuracy": res.test_accuracy,
                                   "secure": cfg.secure, **({"privacy": res.privacy} if res.privacy else {})}

        model = LinearParty("logreg", me, ACTIVE, (), np.zeros(0), LocalScaling.identity(0),
                            {"secure": cfg.secure, "preprocess": cfg.preprocess, "label": args.label,
                             "parties": passives})

        def write(out: Path, meta: dict[str, Any]) -> None:  # the label holder's model, as in a --model-dir
            model.save(out, {**meta, **summary}, {"train_probabilities": res.train_probabilities})
            write_metrics(out, meta, summary)

        return PartyOutcome(summary, write)
    scaling = _scaling(table, tr, cfg.preprocess, intercept=me == passives[0])
    X = scaling.apply(table.X, me)
    kw: dict[str, Any] = {}
    peers = [ACTIVE]
    if cfg.secure:
        others = [p for p in passives if p != me]
        kw["identity"] = ctx.identity()
        kw["peer_identities"] = {p: Ed25519PublicKey.from_public_bytes(ctx.peer_identity(p)) for p in others}
        peers += others
    pres = run_passive(ctx.only(peers), me, X[tr], X[te] if len(te) else None, ids_train=ids_tr,
                       expected=(cfg.secure, cfg.steps, float(cfg.learning_rate), cfg.label_dp), **kw)
    dp = {"privacy": pres.privacy} if pres.privacy else {}
    summary = {"weights": [float(w) for w in pres.weights], "columns": list(table.columns), **dp}
    model = LinearParty("logreg", me, PASSIVE, tuple(table.columns), pres.weights, scaling,
                        {"secure": cfg.secure, "preprocess": cfg.preprocess})

    def write_weights(out: Path, meta: dict[str, Any]) -> None:
        model.save(out, {**meta, **dp})  # the weights with this party's preprocessing, as in a --model-dir

    return PartyOutcome(summary, write_weights)


def add_party_predict_arguments(p: argparse.ArgumentParser) -> None:
    add_party_predict_options(p, name="logreg", outputs="'prediction' and 'probability'")


def _own_model(args: argparse.Namespace, ctx: TaskContext) -> LinearParty:
    return own_model(args, ctx, lambda f: LinearParty.load(f, "logreg"), lambda m: (m.name, m.role))


def predict_needs_identity(args: argparse.Namespace, ctx: TaskContext) -> bool:
    """A feature party of a secure model signs its key shares with its pinned identity key (as in training)."""
    if ctx.role != PASSIVE or not args.model_file:
        return False
    try:
        return bool(LinearParty.load(args.model_file, "logreg").settings.get("secure", True))
    except (InputDataError, OSError):  # the task itself refuses the file, after connecting (peers learn it)
        return False


def party_predict_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    """``vflcrypto party ... predict logreg``: one party of training's prediction phase on new rows, in its
    model's mode (:mod:`.predict`: the label holder learns the summed logit z per row; in secure mode the
    feature parties' logits reach it under pairwise masks agreed with their pinned identity keys)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    active, passives = ctx.one(ACTIVE), ctx.names(PASSIVE)
    model = _own_model(args, ctx)
    secure = bool(model.settings.get("secure", True))
    mode = "secure" if secure else "plain"
    table = own_rows(args, ctx, model.columns, refuse_missing=model.scaling.medians is None)
    if ctx.role == ACTIVE:
        parties = [str(n) for n in model.settings.get("parties", [])]
        if sorted(parties) != sorted(passives):
            raise InputDataError(f"{args.model_file} was trained with the feature parties {parties}; the "
                                 f"configuration names {passives}")
        z = drive(PredictActiveRole(table.ids, parties=parties, secure=secure, name=ctx.me), ctx.only(parties))
        prob = sigmoid(z)
        return predictions_outcome(args, table, {"prediction": (prob >= 0.5).astype(np.int64),
                                                 "probability": prob})
    kw: dict[str, Any] = {}
    peers = [active]
    if secure:
        others = [p for p in passives if p != ctx.me]
        kw["identity"] = ctx.identity()
        kw["peer_identities"] = {p: Ed25519PublicKey.from_public_bytes(ctx.peer_identity(p)) for p in others}
        peers += others
    chans = ctx.only(peers)
    drive(PredictPassiveRole(model, table.X, table.ids, active=active, run_id=chans[active].run_id, **kw), chans)
    return json_outcome({"rows": len(table), "mode": mode})
