"""``vflcrypto align-cache`` (the large party's offline cache), ``vflcrypto align-unbalanced`` (both parties of the
online run in this process) and ``vflcrypto party ... align-unbalanced`` (one party over the network).

Offline, the large party::

    vflcrypto align-cache build  --data big.csv --id-column id --oprf-key big.key --cache big.cache
    vflcrypto align-cache update --data new-ids.csv --id-column id --oprf-key big.key --cache big.cache
    vflcrypto align-cache verify --data all-ids.csv --id-column id --oprf-key big.key --cache big.cache
    vflcrypto align-cache export --oprf-key big.key --cache big.cache --max-small 100000 --out partner.transfer
    vflcrypto align-cache export ... --since 0 --value-bytes 11 --out partner.delta   (values added after gen. 0)

and the small party merges a delta into its transfer (``align-cache merge --transfer T --delta D``). The key file
(``--oprf-key``, created by ``build`` if missing) holds the OPRF key and never leaves the large party. Online, the
small party's transfer file is read if it exists and rewritten when the run brought new values (a first run, or a
delta after the large party's update): the same run works with or without a transfer shipped beforehand.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vflcrypto.data.files import atomic_write_text, check_outputs
from vflcrypto.errors import InputDataError
from vflcrypto.psi import primitives as psi
from vflcrypto.spec import PartyOutcome, TaskContext, number

from . import store
from .messages import LARGE, SMALL, UnbalancedResult
from .roles import DEFAULT_CHUNK, DEFAULT_MAX_SMALL, run_large, run_local, run_small

__all__ = ["add_cache_arguments", "add_online_arguments", "add_party_arguments", "cache_command",
           "online_command", "party_task"]


def _read_ids(path: str, column: str, keep_first: bool) -> tuple[Any, psi.CanonicalIds]:
    # the CSV reader and hygiene of the align commands (same canonical IDs, same error lines)
    from ..align.files import canon_table, read_id_table

    table = read_id_table(path, column)
    return table, canon_table(table, "keep_first" if keep_first else "error", False)


def _id_chunks(path: str, column: str, size: int = 1 << 20) -> Iterator[list[bytes]]:
    """The file's IDs, canonical, in chunks of ``size`` (the CSV streamed: never the whole set as Python objects)."""
    from ..align.files import read_id_table

    chunk: list[bytes] = []
    for line, value in enumerate(read_id_table(path, column).iter_ids(), start=2):
        try:
            chunk.append(psi.canonical_id(value))
        except InputDataError as exc:
            raise InputDataError(f"{path}: line {line}: {exc}") from None
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def add_cache_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("build", "update", "verify", "export", "merge"),
                   help="build: evaluate the OPRF over --data (offline); update: add --data's IDs to the cache; "
                        "verify: check that the cache holds exactly --data's IDs (its set digest and size); "
                        "export: write the transfer (or, with --since, a delta) for a partner; merge: the small "
                        "party merges --delta into its --transfer")
    p.add_argument("--data", help="CSV of the large set (build) or of the IDs to add (update)")
    p.add_argument("--id-column", default="id", help="ID column of --data (default id)")
    p.add_argument("--oprf-key", help="the large party's OPRF key file (build creates it if missing; owner-only)")
    p.add_argument("--cache", help="the cache file (owner-only)")
    p.add_argument("--out", help="export: the transfer or delta file to write")
    p.add_argument("--max-small", type=number(int, at_least=1), default=DEFAULT_MAX_SMALL,
                   help="export: the largest small set the transfer serves (sets the truncation so that a false "
                        f"match has probability <= 2^-40; default {DEFAULT_MAX_SMALL})")
    p.add_argument("--since", type=number(int, at_least=0), help="export: a delta of the IDs added after this "
                   "generation (the partner's transfer's)")
    p.add_argument("--value-bytes", type=number(int, at_least=1), help="export --since: the partner's truncation")
    p.add_argument("--transfer", help="merge: the small party's transfer file (rewritten)")
    p.add_argument("--delta", help="merge: the delta file")
    p.add_argument("--keep-first", action="store_true", help="keep the first of duplicate IDs instead of failing")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")


def _need(args: argparse.Namespace, *names: str) -> None:
    missing = [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) is None]
    if missing:
        raise InputDataError(f"align-cache {args.action} needs {' and '.join(missing)}")


def cache_command(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    summary: dict[str, Any] = {"action": args.action}
    if args.action == "merge":
        _need(args, "transfer", "delta")
        base, since0 = store.load_transfer(args.transfer)
        delta, since = store.load_transfer(args.delta)
        if since0 != -1 or since < 0:
            raise InputDataError("merge takes a full transfer (--transfer) and a delta (--delta)")
        merged = store.merge_transfer(base, delta, since)
        store.save_transfer(args.transfer, merged)
        summary.update(generation=merged.generation, n_large=merged.n_large, added=len(delta.values))
    elif args.action == "build":
        _need(args, "data", "oprf_key", "cache")
        key = store.load_key(args.oprf_key) if Path(args.oprf_key).exists() else None
        if key is None:
            key = store.new_key()
            store.save_key(args.oprf_key, key)
        if args.keep_first:
            cache = store.build_cache(key, _read_ids(args.data, args.id_column, True)[1].encoded)
        else:  # streamed: the large set never sits in memory as Python objects
            cache = store.build_cache_stream(key, _id_chunks(args.data, args.id_column))
        store.save_cache(args.cache, cache, key)
        summary.update(key_id=key.key_id, count=cache.count, generation=0)
    elif args.action == "update":
        _need(args, "data", "oprf_key", "cache")
        key = store.load_key(args.oprf_key)
        cache = store.load_cache(args.cache, key)
        _, canon = _read_ids(args.data, args.id_column, args.keep_first)
        cache, added = store.update_cache(cache, key, canon.encoded)
        store.save_cache(args.cache, cache, key)
        summary.update(key_id=key.key_id, count=cache.count, generation=cache.generation, added=added)
    elif args.action == "verify":
        _need(args, "data", "oprf_key", "cache")
        cache = store.load_cache(args.cache, store.load_key(args.oprf_key))
        _, canon = _read_ids(args.data, args.id_column, args.keep_first)
        if len(canon) != cache.count or store.digest_of(canon.encoded) != cache.set_digest:
            raise InputDataError(f"{args.cache} does not hold the IDs of {args.data} ({cache.count} cached, "
                                 f"{len(canon)} in the file, set digests differ)")
        summary.update(matches=True, count=cache.count, generation=cache.generation)
    else:
        _need(args, "oprf_key", "cache", "out")
        key = store.load_key(args.oprf_key)
        cache = store.load_cache(args.cache, key)
        if args.since is not None and args.value_bytes is None:
            raise InputDataError("a delta (--since) needs the partner's --value-bytes")
        t = store.export_transfer(cache, args.max_small, since=-1 if args.since is None else args.since,
                                  value_bytes=args.value_bytes if args.since is not None else None)
        store.save_transfer(args.out, t, since=-1 if args.since is None else args.since)
        summary.update(key_id=key.key_id, count=len(t.values), n_large=t.n_large, generation=t.generation,
                       value_bytes=t.value_bytes, false_match_bound=t.false_match_bound,
                       bytes=Path(args.out).stat().st_size)
    summary["seconds"] = round(time.perf_counter() - t0, 3)
    print(json.dumps(summary) if args.json else ", ".join(f"{k}: {v}" for k, v in summary.items()))
    return 0


def add_online_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--oprf-key", required=True, help="large party: its OPRF key file")
    p.add_argument("--cache", required=True, help="large party: its cache file")
    p.add_argument("--small", required=True, help="small party's CSV (it learns the intersection)")
    p.add_argument("--id-column", required=True, help="ID column of the small party's file")
    p.add_argument("--transfer", required=True,
                   help="small party's transfer file: read if present, written when the run refreshes it")
    p.add_argument("--out-dir", required=True, help="directory for <stem>.aligned.csv (the small party's rows)")
    p.add_argument("--max-small", type=number(int, at_least=1), default=DEFAULT_MAX_SMALL,
                   help="the largest small set a fresh transfer serves (its truncation)")
    p.add_argument("--keep-first", action="store_true", help="keep the first of duplicate IDs instead of failing")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")


def _write_small(res: UnbalancedResult, table: Any, out: Path, transfer_path: Path) -> None:
    from ..align.files import write_aligned

    assert res.rows is not None
    write_aligned(table, out, res.rows)
    if res.received_values and isinstance(res.transfer, store.Transfer):
        store.save_transfer(transfer_path, res.transfer)


def online_command(args: argparse.Namespace) -> int:
    key = store.load_key(args.oprf_key)
    cache = store.load_cache(args.cache, key)
    table, canon = _read_ids(args.small, args.id_column, args.keep_first)
    tpath = Path(args.transfer)
    transfer = store.load_transfer(tpath)[0] if tpath.exists() else None
    out = Path(args.out_dir) / f"{Path(args.small).stem}.aligned.csv"
    check_outputs({"small": out}, [Path(args.small)])
    run = run_local([], canon, key=key, cache=cache, transfer=transfer, max_small=args.max_small)
    res = run.results[SMALL]
    _write_small(res, table, out, tpath)
    summary = {"large_size": cache.count, "small_size": len(canon), "intersection": res.size,
               "values_received": res.received_values, "bytes_sent": run.transcript.total_bytes,
               "seconds": round(run.seconds, 3), "output": str(out)}
    print(json.dumps(summary) if args.json else ", ".join(f"{k}: {v}" for k, v in summary.items()))
    return 0


def add_party_arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument("--oprf-key", help="large party: its OPRF key file")
    a.add_argument("--cache", help="large party: its cache file")
    a.add_argument("--max-small", type=number(int, at_least=1), default=DEFAULT_MAX_SMALL,
                   help="large party: the largest small set a fresh transfer serves")
    a.add_argument("--data", help="small party: its CSV file")
    a.add_argument("--id-column", default="id", help="small party: its ID column")
    a.add_argument("--transfer", help="small party: its transfer file (read if present, refreshed by the run)")
    a.add_argument("--out", required=True, help="small party: its aligned rows (CSV); large party: an empty file")
    a.add_argument("--chunk-size", type=number(int, at_least=1), default=DEFAULT_CHUNK,
                   help=f"IDs per message (default {DEFAULT_CHUNK})")


def party_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    """The party's role in the configuration (``large`` or ``small``) picks its side; its one peer has the other."""
    if ctx.role not in (LARGE, SMALL):
        raise InputDataError(f"{ctx.me}: unbalanced PSI needs the roles 'large' and 'small' in the configuration, "
                             f"not {ctx.role!r}")
    chans = ctx.only([ctx.one(SMALL if ctx.role == LARGE else LARGE)])
    if ctx.role == LARGE:
        if args.oprf_key is None or args.cache is None:
            raise InputDataError("the large party needs --oprf-key and --cache")
        key = store.load_key(args.oprf_key)
        res = run_large(chans, store.load_cache(args.cache, key), key, chunk_size=args.chunk_size,
                        max_small=args.max_small)
        return PartyOutcome({"side": LARGE, "own_size": res.own_size, "peer_size": res.peer_size},
                            lambda out, _meta: atomic_write_text(out, ""))
    if args.data is None or args.transfer is None:
        raise InputDataError("the small party needs --data and --transfer")
    table, canon = _read_ids(args.data, args.id_column, False)
    tpath = Path(args.transfer)
    transfer = store.load_transfer(tpath)[0] if tpath.exists() else None
    res = run_small(chans, canon, transfer, chunk_size=args.chunk_size)
    summary = {"side": SMALL, "own_size": res.own_size, "peer_size": res.peer_size, "intersection": res.size,
               "values_received": res.received_values}
    return PartyOutcome(summary, lambda out, _meta: _write_small(res, table, out, tpath))
