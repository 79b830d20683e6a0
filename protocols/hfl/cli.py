"""``vflcrypto train fedavg|fedprox|scaffold``: horizontal FL over secure aggregation, every party in-process.

Each ``--client`` file holds the same numeric columns and the integer label ``--label``
(classes 0..C-1), different rows; a public, seeded ``--test-fraction`` of every client's
rows is held out and the final model is evaluated there (each client reports its own
counts). ``--dataset digits --clients N [--skew S]`` splits the bundled digits instead.
``--secure`` (default) aggregates every round through ``secagg``; ``--plain`` sends the
same fixed-point updates in the clear. ``--drop K`` makes K clients vanish in the middle
of round 1's aggregation (a demonstration of dropout recovery). ``--json`` prints
``test_accuracy``, ``bytes_sent``, ``seconds`` and ``survivors`` (per round).

DP-FedAvg (``--dp-epsilon ε`` or ``--dp-noise σ``, with ``--dp-clip C``, ``--dp-delta`` and
``--dp-min-clients m``; :mod:`.defence`): each client clips its update and adds its share
of the noise before aggregation; ``--json`` then prints ``privacy`` (the client-level
(ε, δ) accounted with each round's survivors, the mechanism, what it covers), and
``--model-dir`` keeps it in the model file beside the final global model.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from vflcrypto.data.files import save_model, write_model_dir
from vflcrypto.data.tables import read_party_csv, train_test_split
from vflcrypto.data.validate import class_labels, require_classes, warn_few_rows
from vflcrypto.errors import InputDataError
from vflcrypto.spec import Command, add_config_arguments, config_from_args, number

from ..secagg.math import SecAggConfig, neighbours
from ..secagg.roles import client_names
from .data import digits_clients
from .math import HFLConfig
from .roles import ClientData, run_local

__all__ = ["commands", "read_client"]


def _check_survivors(sa: SecAggConfig, names: list[str], vanish: dict[str, tuple[int, str]], drop: int) -> None:
    """Refuse a ``--drop`` that leaves some client's neighbourhood with fewer survivors than the threshold, in
    the user's terms, before training (the server could not unmask that round's sum)."""
    size, t = sa.check(len(names))
    round_ = min(r for r, _ in vanish.values())
    graph = neighbours(names, sa.degree, sa.seed + round_)
    for u in names:
        alive = sum(v not in vanish for v in [u, *graph[u]])
        if alive < t:
            raise InputDataError(
                f"--drop {drop}: {u}'s neighbourhood ({u} and its {size - 1} neighbours) would keep {alive} "
                f"client{'s' if alive != 1 else ''}, and secure aggregation needs {t} of them (its threshold) to "
                f"unmask the round's sum: drop fewer clients" + (" or raise --degree" if sa.degree else ""))


def read_client(path: str, label: str) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """A client's CSV: every column but ``label`` numeric features (every value given), ``label``
    integer classes; the shared checks of :mod:`vflcrypto.data.validate` name the file, line and column."""
    table = read_party_csv(path, None, label=label, allow_nan=False)
    return table.X, class_labels(table), table.columns


def _add(p: argparse.ArgumentParser, algorithm: str) -> None:
    p.add_argument("--client", action="append", default=[], help="a client's CSV (same columns everywhere); repeat")
    p.add_argument("--label", help="the label column (integer classes)")
    p.add_argument("--dataset", choices=("digits",), help="the bundled digits split across --clients")
    p.add_argument("--clients", type=number(int, at_least=2), default=5,
                   help="--dataset digits: number of clients (default 5)")
    p.add_argument("--skew", type=number(float, at_least=0, below=1), default=0.0,
                   help="--dataset digits: share of rows from home classes")
    p.add_argument("--test-fraction", type=number(float, at_least=0, below=1), default=0.2,
                   help="held-out fraction of every client's rows")
    p.add_argument("--drop", type=number(int, at_least=0), default=0,
                   help="clients that vanish mid-round in round 1 (demonstration)")
    add_config_arguments(p, HFLConfig, skip=("algorithm",))
    add_config_arguments(p, SecAggConfig, skip=("seed",))
    p.add_argument("--json", action="store_true")
    p.add_argument("--model-dir", help="save the final global model here (server.npz, with the DP guarantee under "
                                       "DP-FedAvg, and a manifest.json of its digest)")
    p.set_defaults(algorithm=algorithm)


def _train(args: argparse.Namespace) -> int:
    cfg: HFLConfig = config_from_args(HFLConfig, args, algorithm=args.algorithm)
    sa: SecAggConfig = config_from_args(SecAggConfig, args)
    if args.dataset == "digits":
        clients, C = digits_clients(args.clients, seed=cfg.seed, skew=args.skew,
                                    test_fraction=args.test_fraction), 10
        columns: tuple[str, ...] = tuple(f"px{i}" for i in range(64))  # the bundled examples/hfl files' names
    else:
        if len(args.client) < 2 or not args.label:
            raise InputDataError("give two or more --client files and --label, or --dataset digits")
        loaded = [read_client(p, args.label) for p in args.client]
        columns = tuple(loaded[0][2])
        for path, (_, _, cols) in zip(args.client[1:], loaded[1:], strict=True):
            if cols != loaded[0][2]:
                raise InputDataError(f"{path} has the columns {list(cols)}, {args.client[0]} has "
                                     f"{list(loaded[0][2])}: every client file must have the same columns")
        C = int(max(int(y.max()) for _, y, _ in loaded)) + 1
        clients = []
        for k, (X, y, _) in enumerate(loaded):
            tr, te = train_test_split(len(y), args.test_fraction, seed=cfg.seed + k)
            if not len(tr):
                raise InputDataError(f"{args.client[k]}: no training row left after --test-fraction "
                                     f"{args.test_fraction} of its {len(y)} rows")
            clients.append(ClientData(X[tr], y[tr], X[te], y[te]))
        require_classes(np.concatenate([c.y for c in clients]), "the clients' training rows")
        warn_few_rows(sum(len(c.y) for c in clients))
    if not 0 <= args.drop < len(clients):
        raise InputDataError("--drop must leave at least one client")
    names = client_names(len(clients))
    vanish = {names[-1 - k]: (min(1, cfg.rounds - 1), "masked") for k in range(args.drop)}
    if cfg.secure and args.drop:
        _check_survivors(sa, names, vanish, args.drop)
    t0 = time.perf_counter()
    run = run_local(clients, C, config=cfg, secagg=sa, vanish=vanish, timeout=10.0 if args.drop else 120.0)
    summary: dict[str, Any] = {
        "algorithm": cfg.algorithm, "mode": "secure" if cfg.secure else "plain", "test_accuracy": run.test_accuracy,
        "bytes_sent": run.transcript.bytes_sent_by("sender_role"), "seconds": round(time.perf_counter() - t0, 3),
        "survivors": [len(s) for s in run.result.survivors], "clients": len(clients), "rounds": cfg.rounds}
    if run.result.privacy:
        summary["privacy"] = run.result.privacy  # the server's accounting with each round's survivors
    if args.model_dir:
        meta = {"protocol": "hfl", "role": "server", "algorithm": cfg.algorithm, "classes": C, "columns": list(columns),
                **({"privacy": run.result.privacy} if run.result.privacy else {})}
        write_model_dir(args.model_dir, "hfl", {"server.npz": partial(save_model, meta=meta,
                                                                      arrays={"w": np.asarray(run.result.w)})},
                        overwrite=getattr(args, "overwrite", False), what="--model-dir")
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    acc = "n/a" if run.test_accuracy is None else f"{run.test_accuracy:.4f}"
    print(f"{cfg.algorithm} ({summary['mode']}), {len(clients)} clients, {cfg.rounds} rounds: test accuracy {acc}; "
          f"survivors per round {summary['survivors']}; {sum(summary['bytes_sent'].values()):,} bytes; "
          f"{summary['seconds']:.1f} s")
    for d, g in run.result.privacy.items():
        print(f"  {d}: ({g['epsilon']:.4g}, {g['delta']:.2g})-DP at client level ({g['accountant']}, survivors "
              f"{g['survivors']}); protects {g['covers']}")
    return 0


def commands() -> tuple[Command, ...]:
    """``train fedavg``, ``train fedprox`` and ``train scaffold``."""
    helps = {"fedavg": "FedAvg (McMahan et al.) over secure aggregation",
             "fedprox": "FedProx (Li et al.): FedAvg plus the proximal term",
             "scaffold": "SCAFFOLD (Karimireddy et al.): control variates, aggregated securely"}
    def adder(algorithm: str) -> Callable[[argparse.ArgumentParser], None]:
        return lambda p: _add(p, algorithm)

    train = tuple(Command(a, h, adder(a), _train, description=__doc__) for a, h in helps.items())
    return (*train, Command("hfl", "apply a saved HFL global model (train fedavg|fedprox|scaffold --model-dir) to a "
                                   "client's rows, locally", _add_predict, _predict, group="predict",
                            description=_predict.__doc__))


def _add_predict(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", required=True, help="the model directory `vflcrypto train fedavg ... --model-dir` "
                                                      "wrote")
    p.add_argument("--data", required=True, help="the client's CSV: the model's columns (others, e.g. the label, "
                                                 "are ignored)")
    p.add_argument("--id-column", help="an ID column of --data to write beside each prediction (default: 'row', the "
                                       "row's number from 1)")
    p.add_argument("--out", required=True, help="the predictions: a CSV of the ID (or row) column, 'prediction' (the "
                                                "class) and 'probability' (its softmax probability)")
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")


def _predict(args: argparse.Namespace) -> int:
    """``vflcrypto predict hfl``: the global model of a horizontal run applied by one client to its own rows.

    Horizontal FL ends with every client holding the same global model (softmax regression), so prediction
    is local: no message leaves the client. The model directory's manifest and digest are checked first; the
    client's file is read with the model's columns (a missing one is named), every value must be given.
    """
    from vflcrypto.data.files import load_model, verify_model_dir
    from vflcrypto.errors import ModelFileError

    from .._predict import write_predictions

    verify_model_dir(args.model_dir, "hfl")
    path = f"{args.model_dir}/server.npz"
    meta, arrays = load_model(path, protocol="hfl")
    columns, w, classes = meta.get("columns"), arrays.get("w"), meta.get("classes")
    if not columns or w is None or not isinstance(classes, int) or w.size != (len(columns) + 1) * classes:
        raise ModelFileError(f"{path} holds no usable HFL model (its columns, classes and weights do not fit; "
                             "a model saved before predict existed has no columns: train it again)")
    w = w.reshape(len(columns) + 1, classes)  # the weights, then the bias row (as training flattens them)
    table = read_party_csv(args.data, args.id_column, features=list(columns), allow_nan=False)
    z = table.X @ w[:-1] + w[-1]
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    pred = p.argmax(axis=1)
    ids = list(table.ids) if args.id_column else [str(i + 1) for i in range(len(pred))]
    write_predictions(args.out, args.id_column or "row", ids,
                      {"prediction": pred.astype(np.int64), "probability": p[np.arange(len(pred)), pred]})
    summary = {"protocol": "hfl", "rows": len(pred), "out": str(args.out), "bytes_sent": 0}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"hfl: predicted {len(pred)} rows locally (no message sent); wrote {args.out}")
    return 0
