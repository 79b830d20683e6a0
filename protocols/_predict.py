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

``vflcrypto party ... predict NAME`` runs the same steps with one party per process
(:func:`add_party_predict_options`, :func:`own_model`, :func:`own_rows`,
:func:`predictions_outcome`): each party loads only its own model file (checked against the
manifest of its model directory, and refused if it is another party's), reads only its own
rows, aligns them with its peers by PSI unless ``--aligned``, and runs its own prediction
role over its network channels; the label holder writes ``--out``, every other party a JSON
summary.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from vflcrypto.data.files import write_csv_atomic
from vflcrypto.data.tables import PartyTable, read_party_csv
from vflcrypto.data.validate import refuse_missing_values
from vflcrypto.errors import InputDataError, ModelFileError
from vflcrypto.spec import PartyOutcome, TaskContext

from ._train import training_rows

__all__ = ["add_party_predict_options", "add_predict_options", "check_parties", "own_model", "own_rows",
           "predictions_outcome", "report", "write_predictions"]

M = TypeVar("M")


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


# --------------------------------------------------------------------------- one party per process


def add_party_predict_options(p: argparse.ArgumentParser, *, name: str, outputs: str,
                              without_data: str | None = None) -> None:
    """The flags of ``vflcrypto party ... predict NAME`` (``outputs``: the label holder's columns;
    ``without_data``: the role that takes part without data or model, e.g. a coordinator)."""
    but = f" (not the {without_data})" if without_data else ""
    p.add_argument("--data", help=f"this party's CSV: the ID column and its model's columns{but}")
    p.add_argument("--id-column", help="the ID column of --data")
    p.add_argument("--model", dest="model_file", metavar="FILE",
                   help=f"this party's own model file: its <party>.npz of a `vflcrypto train {name} --model-dir` "
                        f"directory (checked against the manifest there){but}")
    p.add_argument("--out", required=True, help=f"the label holder: the predictions (CSV of the ID column and "
                                                f"{outputs}); the others: a JSON summary")
    p.add_argument("--aligned", action="store_true", help="the files already list the same IDs in the same "
                                                         "order (no PSI)")


def own_model(args: argparse.Namespace, ctx: TaskContext, load: Callable[[str], M],
              owner: Callable[[M], tuple[str | None, str]]) -> M:
    """This party's model file (``load``: read and checked against its manifest), refused in one line if
    ``owner(model)`` (its party's name, or None where the file keeps none, and role) is another party's."""
    if not (args.data and args.id_column and args.model_file):
        raise InputDataError(f"the {ctx.role} party needs --data, --id-column and --model")
    model = load(args.model_file)
    name, role = owner(model)
    if role != ctx.role or name not in (None, ctx.me):
        raise ModelFileError(f"{args.model_file} is the model of {name or 'the ' + role + ' party'} "
                             f"({role}), not of {ctx.me} ({ctx.role}): give each party its own model file")
    return model


def own_rows(args: argparse.Namespace, ctx: TaskContext, columns: Sequence[str], *,
             refuse_missing: bool = False) -> PartyTable:
    """This party's query rows with its model's ``columns`` (others ignored, a missing one named), aligned with
    its peers' as in training (PSI unless ``--aligned``; canonical ID order). ``refuse_missing``: the model has
    no imputation, so a missing value is refused naming its file, line and column."""
    table = read_party_csv(args.data, args.id_column, features=list(columns))
    if refuse_missing:
        refuse_missing_values(table)
    return training_rows(args, ctx, table)[0]


def predictions_outcome(args: argparse.Namespace, table: PartyTable,
                        columns: Mapping[str, np.ndarray]) -> PartyOutcome:
    """The label holder's outcome: ``--out`` holds the ID column and ``columns`` of its aligned query rows."""
    def write(out: Path, meta: dict[str, Any]) -> None:
        write_predictions(out, args.id_column, table.ids, columns)

    return PartyOutcome({"rows": len(table), "columns": list(columns)}, write, tuple(table.ids))
