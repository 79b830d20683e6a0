"""``vflcrypto bench gradients``: encrypted-gradient throughput against phe, TenSEAL and HEU."""

from __future__ import annotations

import argparse
import json
import sys

from ..gradbench import OPERATIONS, BackendResult, run_gradient_bench

__all__ = ["register"]


def _table(results: list[BackendResult], anchor: str = "phe") -> str:
    ref = next((r for r in results if r.name == anchor), None)
    head = f"{'backend':<27}" + "".join(f"{op:>14}" for op in OPERATIONS)
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(f"{r.name:<27}" + "".join(
            f"{r.rates[op]:>14,.0f}" if op in r.rates else f"{'-':>14}" for op in OPERATIONS))
    if ref is not None:
        lines += ["", f"ratio to {anchor} (same run)"]
        for r in results:
            if r is ref:
                continue
            lines.append(f"{r.name:<27}" + "".join(
                f"{r.rates[op] / ref.rates[op]:>13,.0f}x" if op in r.rates and op in ref.rates else f"{'-':>14}"
                for op in OPERATIONS))
    lines += ["", "units: values/s (dot: multiply-accumulates/s, histogram: samples/s)"]
    for r in results:
        lines.append(f"  {r.name}: n={r.n}, max abs error {r.max_abs_error:.2e}" + (f"; {r.note}" if r.note else ""))
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

    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / max(1, len(results))
    x = np.arange(len(OPERATIONS))
    for i, r in enumerate(results):
        vals = [r.rates.get(op, np.nan) for op in OPERATIONS]
        ax.bar(x + i * width, vals, width, label=r.name)
    ax.set_xticks(x + width * (len(results) - 1) / 2, OPERATIONS)
    ax.set_yscale("log")
    ax.set_ylabel("values per second (log scale)")
    ax.set_title("Encrypted-gradient throughput, same machine, same run")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run(args: argparse.Namespace) -> int:
    def progress(name: str) -> None:
        if not args.json:
            print(f"  running {name} ...", file=sys.stderr, flush=True)

    results = run_gradient_bench(args.n, args.key_bits, phe_n=args.phe_n, heu_n=args.heu_n, progress=progress)
    if args.json:
        print(json.dumps({
            "key_bits": args.key_bits,
            "backends": {r.name: {op: round(v, 1) for op, v in r.rates.items()} for r in results},
            "n": {r.name: r.n for r in results},
            "max_abs_error": {r.name: r.max_abs_error for r in results},
        }, indent=2))
    else:
        print(_table(results))
    if args.plot:
        _plot(results, args.plot)
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("bench", help="benchmarks")
    kinds = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    g = kinds.add_parser("gradients", help="encrypted-gradient throughput vs phe, TenSEAL, HEU (one run)")
    g.add_argument("--n", type=int, default=20_000, help="values per operation for the fast backends")
    g.add_argument("--key-bits", type=int, default=2048)
    g.add_argument("--phe-n", type=int, default=200, help="values per operation for phe (slow)")
    g.add_argument("--heu-n", type=int, default=5_000, help="values per operation for HEU")
    g.add_argument("--json", action="store_true")
    g.add_argument("--plot", metavar="FILE.png", help="draw the comparison (log scale)")
    g.set_defaults(handler=run)
