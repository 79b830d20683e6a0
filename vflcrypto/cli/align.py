"""``vflcrypto align``: private entity alignment of two CSV files, both parties in-process.

The left file is the active party, the right file the passive party. Each party's file
is read as raw strings (IDs may be non-numeric; every column is kept verbatim) and the
intersection rows are written, in the same order on both sides, to
``DIR/<stem>.aligned.csv`` (atomically). ``--reveal left`` writes only the left file,
``--reveal size`` writes none and reports only the count. Progress goes to stderr,
``--json`` output to stdout.
"""

from __future__ import annotations

import argparse
import json

from ..progress import Progress

__all__ = ["register", "run"]


def run(args: argparse.Namespace) -> int:
    from vflcrypto.protocols.align import align_files, read_id_table  # lazy: CLI sits above protocols

    n_left = len(read_id_table(args.left, args.id_column).rows)
    n_right = len(read_id_table(args.right, args.right_id_column or args.id_column).rows)
    # Each party blinds its own IDs and re-blinds the peer's (keyed-hash: hashes them).
    with Progress(f"aligning ({args.protocol})", total=2 * (n_left + n_right)) as bar:
        summary = align_files(
            args.left, args.right, id_column=args.id_column,
            right_id_column=args.right_id_column, protocol=args.protocol,
            reveal=args.reveal, out_dir=args.out_dir,
            duplicates="keep_first" if args.keep_first else "error",
            strip=args.strip_ids, progress=bar.advance, timeout=args.timeout,
        )
    summary.pop("_run", None)
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"left: {summary['left_size']} IDs, right: {summary['right_size']} IDs, "
              f"intersection: {summary['intersection']}")
        for side, path in summary["outputs"].items():
            print(f"wrote {side}: {path}")
        print(f"{summary['bytes_sent']:,} bytes exchanged in {summary['seconds']:.2f} s")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("align", help="private entity alignment (PSI) of two CSV files")
    p.add_argument("--left", required=True, help="active party's CSV (learns in every mode)")
    p.add_argument("--right", required=True, help="passive party's CSV")
    p.add_argument("--id-column", required=True, help="ID column of the left file (and right)")
    p.add_argument("--right-id-column", help="ID column of the right file if it differs")
    p.add_argument("--protocol", choices=("ecdh", "hash"), default="ecdh",
                   help="ecdh: X25519 ECDH-PSI (default); hash: HMAC under an agreed key (faster, "
                        "weaker: each side can dictionary-attack the other's IDs)")
    p.add_argument("--reveal", choices=("both", "left", "size"), default="both",
                   help="who learns what: both sides the rows (default), only left, only the count")
    p.add_argument("--out-dir", required=True, help="directory for <stem>.aligned.csv files")
    p.add_argument("--keep-first", action="store_true",
                   help="keep the first of duplicate IDs instead of failing")
    p.add_argument("--strip-ids", action="store_true",
                   help="strip surrounding whitespace from IDs (off by default: no silent changes)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a peer message")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(handler=run)
