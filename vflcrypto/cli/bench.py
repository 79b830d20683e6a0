"""``vflcrypto bench gradients``: encrypted-gradient throughput against phe, TenSEAL and HEU.

The table gives, per operation and backend: rows ``n``, worker processes, cores actually
used (CPU seconds / wall seconds), the median wall rate with its range over the repeats,
the per-core rate, and the per-core ratios to phe and to SecretFlow HEU's implementation of
the same scheme (ZPaillier for Paillier rows, OU for OU rows) measured in the same run. See
:mod:`vflcrypto.cli.gradbench` for what each operation does and how results are checked.

Two sizes (:data:`QUICK`, the default, and :data:`FULL`, ``--full``): the default runs every
backend on fewer rows with fewer repeats (about 100 CPU seconds: about two minutes on a
quiet 2-core machine); ``--full`` takes tens of minutes there. Packed and CKKS rows, and
``add`` everywhere, carry more per-call overhead at the default size (fewer ciphertexts),
so their rates are lower than with ``--full``. A line per backend is printed as soon as
it has finished (to stderr under ``--json``, whose stdout is the JSON only).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..spec import number
from .gradbench import OPERATIONS, BackendResult, run_gradient_bench

__all__ = ["register"]

UNITS = {"dot": "multiply-accumulates/s", "histogram": "(g, h) samples/s", "hist_again": "(g, h) samples/s"}
WHAT = {"histogram": "first call on a new vector (incl. shipping it to the workers)",
        "hist_again": "the same vector again (SecureBoost: once per feature)"}


def _si(v: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.3g}"


def _heu_anchor(name: str) -> str | None:
    """HEU's row for the same scheme as vflcrypto's row ``name`` (None for the others)."""
    if name.startswith("vflcrypto-ou"):
        return "heu-ou"
    return "heu-zpaillier" if name.startswith("vflcrypto-paillier") else None


def _ratio(t: BackendResult | None, r: BackendResult, op: str) -> str:
    if t is None or op not in t.ops or t is r:
        return f"{'-':>12}"
    return f"{r.ops[op].per_core_rate / t.ops[op].per_core_rate:>11.3g}x"


def _table(results: list[BackendResult], repeats: int, anchor: str = "phe") -> str:
    ref = next((r for r in results if r.name == anchor), None)
    by_name = {r.name: r for r in results}
    lines = [f"machine: {os.cpu_count()} cores; each figure the median of {repeats} calls; "
             f"per-core = items / CPU seconds of every process that worked", ""]
    lines.append("set-up (key generation, tables, pool start, warm-up), timed once:")
    for r in results:
        lines.append(f"  {r.name:<27} {r.setup_seconds:8.2f} s   n={r.n:,}  workers={r.workers}  "
                     f"values/ct={r.values_per_ciphertext}" + (f"   ({r.note})" if r.note else ""))
    for op in OPERATIONS:
        rows = [r for r in results if op in r.ops]
        if not rows:
            continue
        lines += ["", f"{op}: {UNITS.get(op, 'values/s')}" + (f" - {WHAT[op]}" if op in WHAT else "")]
        lines.append(f"  {'backend':<27}{'n':>8}{'workers':>9}{'cores':>7}{'wall rate':>12}"
                     f"{'range':>19}{'per core':>11}{'x phe/core':>12}{'x HEU/core':>12}")
        for r in rows:
            t = r.ops[op]
            lo, hi = t.rate_range
            heu = by_name.get(_heu_anchor(r.name) or "")
            lines.append(f"  {r.name:<27}{r.n:>8,}{r.workers:>9}{t.cores_used:>7.2f}{_si(t.wall_rate):>12}"
                         f"{_si(lo) + ' - ' + _si(hi):>19}{_si(t.per_core_rate):>11}{_ratio(ref, r, op)}"
                         f"{_ratio(heu, r, op)}")
    small = [r for r in results if r.n < max(x.n for x in results)]
    if small:
        lines += ["", "smaller n (too slow at the full size; same data, a prefix): "
                  + ", ".join(f"{r.name} n={r.n:,}" for r in small)]
    lines += ["", "checked: every call's result was decrypted and compared with numpy; max abs error: "
              + ", ".join(f"{r.name} {r.max_abs_error:.1e}" for r in results)]
    return "\n".join(lines)


def _plot(results: list[BackendResult], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("vflcrypto bench: --plot needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return
    import numpy as np

    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.8 / max(1, len(results))
    x = np.arange(len(OPERATIONS))
    for i, r in enumerate(results):
        vals = [r.ops[op].per_core_rate if op in r.ops else np.nan for op in OPERATIONS]
        ax.bar(x + i * width, vals, width, label=f"{r.name} (n={r.n:,})")
    ax.set_xticks(x + width * (len(results) - 1) / 2, OPERATIONS)
    ax.set_yscale("log")
    ax.set_ylabel("items per CPU second (log scale)")
    ax.set_title("Encrypted-gradient throughput per core, same machine, same run (median)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    from ..data.files import atomic_open

    with atomic_open(path, "wb") as fh:  # never a half-written figure
        fig.savefig(fh, format=Path(path).suffix.lstrip(".").lower() or "png", dpi=120)
    plt.close(fig)


#: ``bench gradients`` sizes: the default runs every backend in about 100 CPU seconds (about two
#: minutes on a quiet 2-core machine); ``--full`` is the larger run (per-call overheads weigh less).
#: Explicit ``--n``, ``--phe-n`` and ``--repeats`` override either.
QUICK = {"n": 1_000, "phe_n": 100, "repeats": 3}
FULL = {"n": 20_000, "phe_n": 200, "repeats": 5}


def _sizes(args: argparse.Namespace) -> dict[str, int]:
    """The run's ``n``, ``phe_n`` and ``repeats``: the mode's, unless a flag gives one."""
    mode = FULL if args.full else QUICK
    return {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in mode.items()}


def _finished_line(r: BackendResult, seconds: float) -> str:
    """One backend's headline as soon as it has finished: time taken and per-core rates."""
    rates = ", ".join(f"{op} {_si(t.per_core_rate)}" for op, t in r.ops.items())
    return f"  {r.name} finished in {seconds:.1f} s (n={r.n:,}; per core/s: {rates})"


def run(args: argparse.Namespace) -> int:
    sizes = _sizes(args)
    line_out = sys.stderr if args.json else sys.stdout  # under --json stdout holds the JSON only

    def progress(name: str) -> None:
        if not args.json:
            print(f"  running {name} ...", file=sys.stderr, flush=True)

    def finished(r: BackendResult, seconds: float) -> None:
        print(_finished_line(r, seconds), file=line_out, flush=True)

    backends = tuple(b.strip() for b in args.backends.split(",")) if args.backends else None
    results = run_gradient_bench(sizes["n"], args.key_bits, phe_n=sizes["phe_n"], heu_n=args.heu_n,
                                 repeats=sizes["repeats"], allow_insecure=args.allow_insecure, backends=backends,
                                 ops=tuple(o.strip() for o in args.ops.split(",")) if args.ops else None,
                                 progress=progress, finished=finished)
    if args.json:
        print(json.dumps({"key_bits": args.key_bits, "repeats": sizes["repeats"], "mode": "full" if args.full
                          else "default", "cpu_count": os.cpu_count(),
                          "backends": {r.name: r.to_dict() for r in results}}, indent=2))
    else:
        print()
        print(_table(results, sizes["repeats"]))
    if args.plot:
        _plot(results, args.plot)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help="benchmarks")
    kinds = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    g = kinds.add_parser("gradients", help="encrypted-gradient throughput vs phe, TenSEAL, HEU (one run)")
    g.add_argument("--full", action="store_true",
                   help=f"the full run: --n {FULL['n']:,} --phe-n {FULL['phe_n']} --repeats {FULL['repeats']} "
                        "(tens of minutes on 2 cores); default: a quick run of every backend, about two minutes")
    g.add_argument("--n", type=number(int, at_least=1), default=None,
                   help=f"rows per operation, every backend but phe (default {QUICK['n']:,}; --full {FULL['n']:,})")
    g.add_argument("--key-bits", type=number(int, at_least=512), default=2048)
    g.add_argument("--allow-insecure", action="store_true", help="accept keys below 2048 bits (smoke tests)")
    g.add_argument("--phe-n", type=number(int, at_least=1), default=None,
                   help="rows for phe (too slow at --n; a prefix of the data; "
                   f"default {QUICK['phe_n']}; --full {FULL['phe_n']})")
    g.add_argument("--heu-n", type=number(int, at_least=1), default=None, help="rows for HEU (default: --n)")
    g.add_argument("--repeats", type=number(int, at_least=1), default=None,
                   help="timed calls per operation (median and range shown; "
                   f"default {QUICK['repeats']}; --full {FULL['repeats']})")
    g.add_argument("--backends", help="comma-separated rows to run (default: all available), e.g. "
                   "vflcrypto-ou-packed,vflcrypto-ou,vflcrypto-ou-heu,heu-ou,phe")
    g.add_argument("--ops", help="comma-separated operations to time (default: all), e.g. histogram,hist_again")
    g.add_argument("--json", action="store_true",
                   help="the results as JSON on stdout (the line per finished backend goes to stderr)")
    g.add_argument("--plot", metavar="FILE.png", help="draw the per-core comparison (log scale)")
    g.set_defaults(handler=run)
