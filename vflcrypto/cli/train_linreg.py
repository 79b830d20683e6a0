"""``vflcrypto train linreg``: secure vertical linear regression from CSV files, in-process.

``--active`` is the active party's file (ID column, the numeric label ``--label`` and its
features); each ``--passive`` file (ID column and features) is a passive party
``passive-0``, ``passive-1``, ... in the order given. A coordinator holding the keys runs
in the same process (:mod:`vflcrypto.protocols.linreg`). Unless ``--aligned`` says the
files already list the same IDs in the same order, rows are first aligned by private set
intersection (:mod:`vflcrypto.protocols.align`, ECDH; every party learns its rows of the
common IDs).

Rows are split into train and test with the public, seeded
:func:`vflcrypto.dataio.train_test_split`; each party fits its local preprocessing on its
own training rows. Test metrics use the secure prediction path
(:func:`vflcrypto.protocols.linreg.predict_local`): only the active party learns the
predictions. ``--model-dir`` saves one ``<party>.npz`` per party (no pickle).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

__all__ = ["config_from_args", "register", "run"]


def config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`vflcrypto.protocols.linreg.LinRegConfig` the training flags describe
    (shared with ``vflcrypto party ... train linreg``)."""
    from vflcrypto.protocols import linreg as linreg

    return linreg.LinRegConfig(
        epochs=args.epochs, lr=args.lr, momentum=args.momentum, l2=args.l2,
        batch_size=args.batch_size, tol=args.tol if args.tol > 0 else None,
        scheme=args.scheme, key_bits=args.key_bits, preprocess=args.preprocess,
        fit_intercept=not args.no_intercept)


def run(args: argparse.Namespace) -> int:
    from vflcrypto.dataio import train_test_split
    from vflcrypto.errors import InputDataError
    from vflcrypto.metrics import r2_score, rmse
    from vflcrypto.protocols import linreg as linreg

    from ._tables import align_tables, read_tables

    t0 = time.perf_counter()
    tables = read_tables(args.active, args.passive, args.id_column, args.label)
    names = ["active"] + [f"passive-{k}" for k in range(len(args.passive))]
    tables, align_bytes = align_tables(tables, names, aligned=args.aligned)
    bytes_sent: dict[str, int] = {} if args.aligned else {"alignment": align_bytes}
    n = len(tables[0])
    train, test = train_test_split(n, args.test_fraction, seed=args.split_seed)
    if len(train) == 0:
        raise InputDataError("no training rows left after the split")
    cfg = config_from_args(args)
    train_tables = [t.take(train) for t in tables]
    result = linreg.run_local(train_tables[0], train_tables[1:], config=cfg,
                              allow_insecure=args.allow_insecure)
    for name, b in result.transcript.bytes_sent_by().items():
        bytes_sent[name] = bytes_sent.get(name, 0) + b
    eval_tables = [t.take(test) for t in tables] if len(test) else train_tables
    pred, pred_transcript = linreg.predict_local(
        result.models, eval_tables, key_bits=args.key_bits if args.scheme == "paillier"
        else max(args.key_bits, 2048), allow_insecure=args.allow_insecure)
    for name, b in pred_transcript.bytes_sent_by().items():
        bytes_sent[name] = bytes_sent.get(name, 0) + b
    y = eval_tables[0].label
    assert y is not None
    if args.model_dir:
        linreg.save_models(result.models, args.model_dir)
    summary = {
        "rmse": rmse(y, pred),
        "r2": r2_score(y, pred),
        "epochs": result.coordinator.epochs_run,
        "seconds": round(time.perf_counter() - t0, 3),
        "bytes_sent": bytes_sent,
        "evaluated_on": "test" if len(test) else "train",
        "rows": {"train": len(train), "test": len(test)},
        "converged": result.coordinator.converged,
        "final_loss": result.losses[-1],
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"trained on {len(train)} rows, {summary['epochs']} epochs ({args.scheme}); "
              f"{summary['evaluated_on']} RMSE {summary['rmse']:.6g}, R² {summary['r2']:.4f}; "
              f"{summary['seconds']:.1f} s", file=sys.stdout)
        if args.model_dir:
            print(f"party models saved in {args.model_dir}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("linreg", help="secure vertical linear regression (Paillier or CKKS)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--active", required=True, help="active party CSV (ID, label, features)")
    p.add_argument("--passive", action="append", default=[],
                   help="passive party CSV (ID, features); repeat for several parties")
    p.add_argument("--id-column", required=True)
    p.add_argument("--label", required=True, help="numeric label column of the active file")
    p.add_argument("--scheme", choices=("paillier", "ckks"), default="paillier")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.1, help="learning rate η (default 0.1)")
    p.add_argument("--momentum", type=float, default=0.9,
                   help="heavy-ball momentum, applied locally (default 0.9; 0 = plain GD)")
    p.add_argument("--l2", type=float, default=0.0, help="L2 penalty λ (default 0)")
    p.add_argument("--batch-size", type=int, default=None, help="default: full batch")
    p.add_argument("--tol", type=float, default=1e-6,
                   help="C stops when the epoch loss changes by <= tol (relative); 0 disables")
    p.add_argument("--preprocess", choices=("none", "standardize", "whiten"),
                   default="standardize", help="local per-party preprocessing")
    p.add_argument("--no-intercept", action="store_true", help="no intercept column at B")
    p.add_argument("--test-fraction", type=float, default=0.0)
    p.add_argument("--split-seed", type=int, default=0, help="public seed of the split")
    p.add_argument("--aligned", action="store_true",
                   help="files already list the same IDs in the same order (skip PSI)")
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")
    p.add_argument("--key-bits", type=int, default=2048, help="Paillier modulus bits")
    p.add_argument("--allow-insecure", action="store_true",
                   help="accept keys below 2048 bits (tests only)")
    p.add_argument("--model-dir", help="save one model file per party here")
    p.set_defaults(handler=run)
