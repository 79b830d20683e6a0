"""``vflcrypto train secureboost``: SecureBoost trees from CSV files, every party in-process.

``--active`` is the active party's file (ID column, the label ``--label`` and its
features); each ``--passive`` file (ID column and features) is a passive party
``passive-0``, ``passive-1``, ... in the order given (:mod:`vflcrypto.protocols.secureboost`).
Unless ``--aligned`` says the files already list the same IDs in the same order, rows
are first aligned by private set intersection (:mod:`vflcrypto.protocols.align`, ECDH; every
party learns its rows of the common IDs).

Rows are split into train and test with the public, seeded
:func:`vflcrypto.dataio.train_test_split` (``--test-fraction 0`` evaluates on the
training rows). Test metrics use the joint prediction protocol: passive parties answer
only left/right at their own nodes. ``--plaintext`` runs the same protocol without
encryption (debug/parity only: passive parties then see every gradient, i.e. the labels).
``--model-dir`` saves one ``<party>.npz`` per party (no pickle).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

__all__ = ["register", "run"]


def run(args: argparse.Namespace) -> int:
    from vflcrypto.dataio import train_test_split
    from vflcrypto.errors import InputDataError
    from vflcrypto.metrics import rmse, roc_auc
    from vflcrypto.protocols import secureboost as sb
    from vflcrypto.runtime import Transcript

    from ._tables import align_tables, read_tables

    t0 = time.perf_counter()
    tables = read_tables(args.active, args.passive, args.id_column, args.label)
    passives = tables[1:]
    names = ["active"] + [f"passive-{k}" for k in range(len(passives))]
    tables, align_bytes = align_tables(tables, names, aligned=args.aligned)
    bytes_sent: dict[str, int] = {} if args.aligned else {"alignment": align_bytes}
    params = sb.BoostParams(objective=args.objective, n_trees=args.trees, max_depth=args.depth,
                            learning_rate=args.lr, max_bin=args.max_bin)
    params.validate()
    n = len(tables[0])
    train, test = train_test_split(n, args.test_fraction, seed=args.split_seed)
    if len(train) < 2:
        raise InputDataError("fewer than 2 training rows left after the split")
    tr = [t.take(train) for t in tables]
    y = tr[0].label
    assert y is not None
    run_ = sb.run_local(tr[0].X, y, [t.X for t in tr[1:]], params=params,
                        plaintext=args.plaintext, key_bits=args.key_bits,
                        allow_insecure=args.allow_insecure, ids=list(tr[0].ids),
                        active_columns=tr[0].columns, passive_columns=[t.columns for t in tr[1:]])
    models = [run_.active.model] + [run_.passive[f"passive-{k}"].model for k in range(len(passives))]
    if len(test):
        ev = [t.take(test) for t in tables]
        transcript = Transcript()
        pred = sb.predict_local(models[0], ev[0].X, [(m, t.X) for m, t in zip(models[1:], ev[1:],
                                                                              strict=True)],
                                transcript=transcript)
        y_eval = ev[0].label
        for name, b in transcript.bytes_sent_by().items():
            bytes_sent[name] = bytes_sent.get(name, 0) + b
    else:
        pred, y_eval = run_.active.train_predictions(), y
    assert y_eval is not None
    for name, b in run_.bytes_sent.items():
        bytes_sent[name] = bytes_sent.get(name, 0) + b
    if args.model_dir:
        out = Path(args.model_dir)
        for name, m in zip(names, models, strict=True):
            m.save(out / f"{name}.npz")
    summary: dict[str, Any] = {}
    if args.objective == "binary":
        summary["auc"] = roc_auc(y_eval, pred)
    else:
        summary["rmse"] = rmse(y_eval, pred)
    summary.update({
        "trees": params.n_trees,
        "seconds": round(time.perf_counter() - t0, 3),
        "bytes_sent": bytes_sent,
        "evaluated_on": "test" if len(test) else "train",
        "rows": {"train": len(train), "test": len(test)},
        "mode": "plaintext" if args.plaintext else f"paillier-{args.key_bits}",
    })
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        metric = "AUC" if "auc" in summary else "RMSE"
        value = summary.get("auc", summary.get("rmse"))
        print(f"trained {params.n_trees} trees (depth {params.max_depth}, {summary['mode']}) on "
              f"{len(train)} rows; {summary['evaluated_on']} {metric} {value:.4f}; "
              f"{summary['seconds']:.1f} s; {sum(bytes_sent.values()):,} bytes sent")
        if args.model_dir:
            print(f"party models saved in {args.model_dir}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("secureboost", help="SecureBoost gradient-boosted trees (Paillier)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--active", required=True, help="active party CSV (ID, label, features)")
    p.add_argument("--passive", action="append", default=[],
                   help="passive party CSV (ID, features); repeat for several parties")
    p.add_argument("--id-column", required=True)
    p.add_argument("--label", required=True, help="label column of the active file")
    p.add_argument("--objective", choices=("binary", "regression"), default="binary")
    p.add_argument("--trees", type=int, default=10)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.3, help="learning rate η (default 0.3)")
    p.add_argument("--max-bin", type=int, default=32, help="quantile bins per feature (default 32)")
    p.add_argument("--test-fraction", type=float, default=0.0)
    p.add_argument("--split-seed", type=int, default=0, help="public seed of the split")
    p.add_argument("--aligned", action="store_true",
                   help="files already list the same IDs in the same order (skip PSI)")
    p.add_argument("--plaintext", action="store_true",
                   help="no encryption (debug/parity only: passive parties see the gradients)")
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")
    p.add_argument("--key-bits", type=int, default=2048, help="Paillier modulus bits")
    p.add_argument("--allow-insecure", action="store_true",
                   help="accept keys below 2048 bits (tests only)")
    p.add_argument("--model-dir", help="save one <party>.npz per party here")
    p.set_defaults(handler=run)
