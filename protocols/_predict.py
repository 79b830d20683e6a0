"""What every ``vflcrypto predict NAME`` command shares: the model checked first, the query rows aligned
like training, the predictions written atomically.

A prediction command applies a model directory written by ``vflcrypto train NAME --model-dir``
to new rows, every party in this process, through the protocol's own prediction messages
(the same privacy as the prediction inside training). In order:

1. the model directory's manifest is checked (:func:`~vflcrypto.data.files.verify_model_dir`:
   protocol, every file present with its SHA-256) and each party's file is loaded through it;
2. each party's query file is read with the model's own columns (other columns, e.g. a
   label, are ignored; a missing one is an error naming it);
3. the rows are aligned by private set intersection as in training (ECDH; the IDs on every
   party, in the canonical order of the IDs) unless ``--aligned``;
4. the protocol's prediction runs; the label holder writes ``--out``: a CSV of the ID
   column and ``prediction`` (and, for a binary classifier, ``probability``), atomically.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.files import write_csv_atomic
from vflcrypto.errors import ModelFileError

__all__ = ["add_predict_options", "check_parties", "report", "write_predictions"]


def add_predict_options(p: argparse.ArgumentParser, *, key: bool = False) -> None:
    """The flags every prediction command has (``key``: also the fresh key of an encrypted prediction)."""
    p.add_argument("--model-dir", required=True, help="the model directory `vflcrypto train ... --model-dir` wrote")
    p.add_argument("--id-column", required=True, help="the ID column of every file")
    p.add_argument("--out", required=True, help="the predictions: a CSV of the ID column and 'prediction'")
    p.add_argument("--aligned", action="store_true",
                   help="the files already list the same IDs in the same order (no PSI)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a party waits for a peer message")
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")
    if key:
        p.add_argument("--key-bits", type=int, default=2048,
                       help="modulus bits of the fresh Paillier key of this prediction (default 2048)")
        p.add_argument("--allow-insecure", action="store_true", help="accept keys below 2048 bits (tests only)")


def check_parties(model_dir: str | Path, manifest: Mapping[str, Any], names: Sequence[str], flag: str) -> None:
    """The model's party files must be exactly ``<name>.npz`` for ``names`` (one query file per party)."""
    have = sorted(manifest["files"])
    want = sorted(f"{n}.npz" for n in names)
    if have != want:
        raise ModelFileError(f"the model in {model_dir} has {len(have)} parties ({', '.join(have)}); the command "
                             f"gave files for {len(want)} ({', '.join(want)}): give one {flag} per party of the model")


def write_predictions(path: str | Path, id_column: str, ids: Sequence[str], columns: Mapping[str, np.ndarray]) -> None:
    """``path``: the ID column and one column per entry of ``columns`` (floats in full precision), atomically."""
    arrays = [np.asarray(v) for v in columns.values()]

    def cell(v: Any) -> Any:
        return repr(float(v)) if isinstance(v, float | np.floating) else int(v)

    rows = ([i, *(cell(a[r]) for a in arrays)] for r, i in enumerate(ids))
    write_csv_atomic(path, [id_column, *columns], rows)


def report(args: argparse.Namespace, name: str, n_rows: int, query_rows: Sequence[int], t0: float,
           bytes_sent: Mapping[str, int], extra: Mapping[str, Any] | None = None) -> int:
    """Print the command's summary (``--json``: as JSON on stdout) after the predictions are written."""
    summary = {"protocol": name, "rows": n_rows, "query_rows": list(query_rows), "out": str(args.out),
               "bytes_sent": dict(bytes_sent), "seconds": round(time.perf_counter() - t0, 3), **(extra or {})}
    if args.json:
        print(json.dumps(summary, indent=2, default=float))
        return 0
    unmatched = "" if all(q == n_rows for q in query_rows) else \
        f" (the files held {', '.join(map(str, query_rows))} rows; only IDs on every party are predicted)"
    print(f"{name}: predicted {n_rows} rows{unmatched}; {sum(bytes_sent.values()):,} bytes; "
          f"{summary['seconds']:.1f} s; wrote {args.out}")
    return 0
