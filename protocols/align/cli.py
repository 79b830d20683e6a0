"""``vflcrypto align`` (both parties in this process) and ``vflcrypto party ... align``.

In-process: the left file is the active party, the right file the passive party. Each
party's file is read as raw strings (IDs may be non-numeric; every column is kept
verbatim) and the intersection rows are written, in the canonical order of their IDs
(the same on both sides and in every run), to ``DIR/<stem>.aligned.csv`` (atomically).
``--reveal left`` writes only the left file, ``--reveal size`` writes none and reports
only the count. Progress goes to stderr,
``--json`` output to stdout.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from vflcrypto.data.files import atomic_write_text
from vflcrypto.errors import InputDataError
from vflcrypto.runtime import progress
from vflcrypto.spec import PartyOutcome, TaskContext, number

from .choice import AUTO, available, choose, negotiate, resolve_local
from .files import IdTable, align_files, canon_table, read_id_table, write_aligned
from .messages import PROTOCOLS
from .tables import align_rows, canonical_order

__all__ = ["add_align_arguments", "add_party_arguments", "align", "needs_identity", "party_task"]


def positive_seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds (argparse prints the one-line error)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def memory_size(text: str) -> int:
    """An argparse type: a memory size such as 2GiB or 500MB, in bytes."""
    from .buckets import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_bucket_arguments(p: argparse.ArgumentParser, default_work: str) -> None:
    p.add_argument("--memory-budget", type=memory_size, metavar="SIZE",
                   help="bucketed PSI in bounded memory (e.g. 2GiB): IDs hashed under a jointly drawn key into "
                        "buckets streamed to disk and aligned one by one; same output; reveals each party's "
                        "per-bucket set sizes")
    p.add_argument("--work-dir", help=f"bucketed PSI: this party's spill and result files (default {default_work})")
    p.add_argument("--resume", action="store_true",
                   help="bucketed PSI: continue a killed run at its first unfinished bucket (same inputs)")


def _add_protocol_argument(p: argparse.ArgumentParser, size_flag: str, offer: str) -> None:
    p.add_argument("--protocol", choices=(AUTO, *PROTOCOLS), default=AUTO,
                   help=f"auto (default{offer}): rr22 from 10,000 IDs in all, else ecdh (ecdh for {size_flag} "
                        "and 3+ parties); ecdh: X25519 ECDH-PSI; kkrt: OT-extension PSI (much faster than ecdh "
                        f"for large sets; no {size_flag}); rr22: VOLE PSI, an OKVS and a silent VOLE (the "
                        f"fastest for large sets; no {size_flag}); hash: HMAC under a key agreed with pinned "
                        "identity keys (fast, weaker: each side can dictionary-attack the other's IDs)")


def add_align_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--left", required=True, help="active party's CSV (learns in every mode)")
    p.add_argument("--right", required=True, help="passive party's CSV")
    p.add_argument("--id-column", required=True, help="ID column of the left file (and right)")
    p.add_argument("--right-id-column", help="ID column of the right file if it differs")
    _add_protocol_argument(p, "--reveal size", "")
    p.add_argument("--reveal", choices=("both", "left", "size"), default="both",
                   help="who learns what: both sides the rows (default), only left, only the count")
    p.add_argument("--out-dir", required=True, help="directory for <stem>.aligned.csv files")
    p.add_argument("--keep-first", action="store_true", help="keep the first of duplicate IDs instead of failing")
    p.add_argument("--strip-ids", action="store_true",
                   help="strip surrounding whitespace from IDs (off by default: no silent changes)")
    p.add_argument("--timeout", type=positive_seconds, default=120.0, help="seconds to wait for a peer message")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    _add_bucket_arguments(p, "OUT_DIR/.align-buckets")


def align(args: argparse.Namespace) -> int:
    load = args.memory_budget is None  # a simple CSV is read into memory once (the bucketed path streams)
    left = read_id_table(args.left, args.id_column, load=load)
    right = read_id_table(args.right, args.right_id_column or args.id_column, load=load)
    n_left, n_right = left.n_rows, right.n_rows
    if args.protocol == AUTO:
        args.protocol = resolve_local((n_left, n_right), "size" if args.reveal == "size" else "both")
    # ECDH: each party blinds its own IDs and re-blinds the peer's (keyed hash: hashes them);
    # KKRT: the left side fills its table rows, the right evaluates 3 bins per ID, the left reads them;
    # the VOLE PSI: each side evaluates its own IDs once, the left reads the right's values.
    total = {"kkrt": n_left + 6 * n_right, "rr22": n_left + 2 * n_right}.get(args.protocol, 2 * (n_left + n_right))
    if args.resume and args.memory_budget is None:
        raise InputDataError("--resume continues a bucketed run: pass the run's --memory-budget too")
    summary = align_files(left, right, id_column=args.id_column, right_id_column=args.right_id_column,
                          protocol=args.protocol, reveal=args.reveal, out_dir=args.out_dir,
                          duplicates="keep_first" if args.keep_first else "error", strip=args.strip_ids,
                          progress=progress.counter(f"aligning ({args.protocol})", total, unit="id"),
                          timeout=args.timeout, memory_budget=args.memory_budget, work_dir=args.work_dir,
                          resume=args.resume)
    summary.pop("_run", None)
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"left: {summary['left_size']} IDs, right: {summary['right_size']} IDs, "
          f"intersection: {summary['intersection']}")
    for side, path in summary["outputs"].items():
        print(f"wrote {side}: {path}")
    print(f"{summary['bytes_sent']:,} bytes exchanged in {summary['seconds']:.2f} s")
    return 0


def add_party_arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument("--data", required=True, help="this party's CSV file")
    a.add_argument("--id-column", required=True)
    a.add_argument("--out", required=True, help="aligned rows of this party's file (CSV)")
    _add_protocol_argument(a, "mode size", "; both parties offer their set size")
    a.add_argument("--mode", default="both", choices=("both", "left", "size"),
                   help="who learns the intersection (two parties; 3+ parties use 'all')")
    a.add_argument("--duplicates", default="error", choices=("error", "first"),
                   help="a repeated ID: refuse the file (default), or keep its first occurrence")
    a.add_argument("--chunk-size", type=number(int, at_least=1), default=50_000,
                   help="IDs per message of the PSI (default 50000)")
    _add_bucket_arguments(a, "OUT.buckets")


def needs_identity(args: argparse.Namespace, ctx: TaskContext) -> bool:
    """Keyed-hash PSI signs its key agreement with the pinned identity keys."""
    return bool(args.protocol == "hash")


def party_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    table = read_id_table(args.data, args.id_column, load=args.memory_budget is None)
    if args.memory_budget is not None:
        if args.protocol == AUTO:
            args.protocol = _negotiated(ctx, args.mode, table.n_rows)
        return _bucketed_party(args, ctx, table)
    if args.resume:
        raise InputDataError("--resume continues a bucketed run: pass the run's --memory-budget too")
    canon = canon_table(table, "keep_first" if args.duplicates == "first" else "error", False,
                        keep_first_flag="--duplicates first")
    if args.protocol == AUTO:
        args.protocol = _negotiated(ctx, args.mode, len(canon))
    # IDs processed go to the command's progress reporter (the roles' default)
    res = align_rows(ctx, canon, protocol=args.protocol, mode=args.mode, chunk_size=args.chunk_size)
    # the rows themselves are in the output file: the run record stays small at any scale
    summary = {"protocol": args.protocol, "own_size": res.own_size, "peer_sizes": res.peer_sizes,
               "intersection": res.size, "rows_written": None if res.rows is None else len(res.rows)}

    def write(out: Path, _meta: dict[str, Any]) -> None:
        if res.rows is None:
            atomic_write_text(out, "")  # this party learns no rows in this mode
        else:
            write_aligned(table, out, canonical_order(canon, res.rows))

    return PartyOutcome(summary, write)


def _negotiated(ctx: TaskContext, mode: str, rows: int) -> str:
    """``--protocol auto`` in a party process: ECDH for 3+ parties, else the protocol both offers choose."""
    from .messages import ACTIVE, PASSIVE

    passives, actives = ctx.names(PASSIVE), ctx.names(ACTIVE)
    if len(passives) != 1 or len(actives) != 1 or ctx.role not in (ACTIVE, PASSIVE):
        return choose((rows,), mode, available(), parties=len(passives) + len(actives))
    peer = ctx.one(PASSIVE if ctx.role == ACTIVE else ACTIVE)
    return negotiate(ctx.only([peer])[peer], role=ctx.role, rows=rows, mode=mode)


def _bucketed_party(args: argparse.Namespace, ctx: TaskContext, table: IdTable) -> PartyOutcome:
    """``vflcrypto party ... align --memory-budget``: this party's side of a bucketed run (:mod:`.buckets`)."""
    from vflcrypto.psi.primitives import IdentityKey

    from .buckets import finish_output, run_bucketed
    from .messages import ACTIVE, PASSIVE

    if ctx.role not in (ACTIVE, PASSIVE) or len(ctx.names(PASSIVE)) != 1 or len(ctx.names(ACTIVE)) != 1:
        raise InputDataError("bucketed alignment (--memory-budget) is for one active and one passive party")
    peer = ctx.one(PASSIVE if ctx.role == ACTIVE else ACTIVE)
    kw: dict[str, Any] = {}
    if args.protocol == "hash":
        kw = {"identity": IdentityKey(ctx.identity()), "peer_identity": ctx.peer_identity(peer)}
    work = Path(args.work_dir) if args.work_dir else Path(f"{args.out}.buckets")
    res = run_bucketed(ctx.only([peer]), table, work, role=ctx.role, protocol=args.protocol, mode=args.mode,
                       budget=args.memory_budget, duplicates="keep_first" if args.duplicates == "first" else "error",
                       resume=args.resume, chunk_size=args.chunk_size, keep_first_flag="--duplicates first",
                       psi_kwargs=kw)
    summary = {"protocol": args.protocol, "own_size": res.own_size, "peer_sizes": {peer: res.peer_size},
               "intersection": res.intersection, "buckets": res.buckets, "resumed_from": res.resumed_from,
               "phase_seconds": {k: round(v, 3) for k, v in res.seconds.items()}, "cluster_tasks": res.cluster_tasks}

    def write(out: Path, _meta: dict[str, Any]) -> None:
        if not res.learns:
            atomic_write_text(out, "")  # this party learns no rows in this mode
        summary["rows_written"] = finish_output(res, table, out)

    return PartyOutcome(summary, write)
