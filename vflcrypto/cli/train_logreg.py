"""``vflcrypto train logreg``: vertical logistic regression from CSV files, parties in-process.

The coordinator file (``--coordinator``) holds the ID column and the 0/1 label: it is the
*active* party of :mod:`vflcrypto.protocols.logreg` (labels, no features). Each
``--party`` file holds the ID column and numeric features: the passive parties
``passive-0``, ``passive-1``, ... in the order given; ``passive-0`` also gets the
intercept. Unless ``--aligned`` says the files already list the same IDs in the same
order, the rows are first aligned by private set intersection
(:mod:`vflcrypto.protocols.align`, ECDH; every party learns its rows of the common IDs).

Each party then preprocesses its own columns locally: the rows are split into train and
test with the public, seeded :func:`vflcrypto.dataio.train_test_split`; missing values
are imputed with the training-row median and features standardized with training-row
mean and standard deviation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

__all__ = ["register", "run"]


def run(args: argparse.Namespace) -> int:
    from vflcrypto.dataio import train_test_split
    from vflcrypto.errors import InputDataError
    from vflcrypto.protocols import logreg as lr

    from ._tables import align_tables, read_tables

    t0 = time.perf_counter()
    tables = read_tables(args.coordinator, args.party, args.id_column, args.label, label_party_features=False)
    tables, align_bytes = align_tables(tables, [str(p) for p in [args.coordinator, *args.party]],
                                       aligned=args.aligned)
    coord, parties = tables[0], tables[1:]
    assert coord.label is not None
    y = coord.label
    if not np.all((y == 0) | (y == 1)):
        raise InputDataError(f"label {args.label!r} must be 0/1")
    train, test = train_test_split(len(y), args.test_fraction, args.split_seed)
    if len(train) == 0:
        raise InputDataError("no training rows")
    if args.preprocess == "standardize":
        blocks = [lr.local_features(t.X, train, intercept=k == 0) for k, t in enumerate(parties)]
    else:
        blocks = [t.X for t in parties]
        if not all(np.all(np.isfinite(b)) for b in blocks):
            raise InputDataError("features must be finite with --preprocess none (impute first)")
    ids = list(coord.ids)
    ids_train = [ids[i] for i in train]
    res = lr.run_local(
        [b[train] for b in blocks], y[train],
        [b[test] for b in blocks] if len(test) else None, y[test] if len(test) else None,
        secure=args.secure, steps=args.steps, learning_rate=args.lr, key_bits=args.key_bits,
        allow_insecure=args.key_bits < 2048 and args.allow_insecure_key,
        timeout=args.timeout, ids_train=[ids_train] * (len(parties) + 1))
    a = res.active
    bytes_sent = {("coordinator" if k == lr.ACTIVE else k): v for k, v in res.bytes_sent.items()}
    summary = {
        "train_loss": a.train_loss,
        "test_loss": a.test_loss,
        "test_accuracy": a.test_accuracy,
        "steps": args.steps,
        "seconds": round(time.perf_counter() - t0, 3),
        "bytes_sent": bytes_sent,
        "secure": bool(args.secure),
        "rows": {"train": len(train), "test": len(test)},
        "alignment_bytes": align_bytes,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        mode = "secure" if args.secure else "plain"
        print(f"{mode} vertical logistic regression: {len(train)} train / {len(test)} test rows, "
              f"{len(parties)} feature parties, {args.steps} steps at lr {args.lr}")
        print(f"  loss {a.loss_history[0]:.4f} -> train loss {a.train_loss:.4f}" if a.loss_history
              else f"  train loss {a.train_loss:.4f}")
        if a.test_loss is not None:
            print(f"  test loss {a.test_loss:.4f}, test accuracy {a.test_accuracy:.1%}")
        print(f"  bytes sent: {bytes_sent}; {summary['seconds']:.1f} s", file=sys.stdout)
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("logreg", help="vertical logistic regression (plain or secure)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coordinator", required=True, metavar="Y.csv",
                   help="the label holder's CSV (ID column + label)")
    p.add_argument("--party", action="append", default=[], metavar="X.csv",
                   help="a feature party's CSV (repeat; the first also gets the intercept)")
    p.add_argument("--id-column", required=True, metavar="ID")
    p.add_argument("--label", required=True, metavar="COL")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--secure", dest="secure", action="store_true", default=True,
                      help="masked logits + Paillier residuals (default)")
    mode.add_argument("--plain", dest="secure", action="store_false",
                      help="plaintext protocol (leaks every label to every party)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", "--learning-rate", dest="lr", type=float, default=0.5,
                   help="learning rate (default 0.5)")
    p.add_argument("--preprocess", choices=("standardize", "none"), default="standardize",
                   help="each feature party imputes medians and standardizes its own columns on its "
                        "training rows, party 0 adds the intercept (default); none: use features as given")
    p.add_argument("--test-fraction", type=float, default=0.2)
    p.add_argument("--split-seed", "--seed", dest="split_seed", type=int, default=0,
                   help="seed of the public train/test split")
    p.add_argument("--aligned", action="store_true",
                   help="the files already list the same IDs in the same order (skip PSI)")
    p.add_argument("--key-bits", type=int, default=2048, help="Paillier modulus size (secure)")
    p.add_argument("--allow-insecure", "--allow-insecure-key", dest="allow_insecure_key",
                   action="store_true", help="accept keys below 2048 bits (tests only)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds a party waits for a peer before failing")
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")
    p.set_defaults(handler=run)
