"""Secure WOE/IV on default_credit (30,000 × 23): time per phase and per-core throughput.

Every one of the 23 columns sits at the feature party (so every column takes the
encrypted path); the label holder keeps only the labels. Paillier 2048, the process pool
on this machine's cores. FATE publishes 1 min 8 s for its hetero feature binning of
100,000 rows × 330 features on 16 cores; per core that is rows × features per second,
set beside ours below (a published figure from other hardware, not a side-by-side run).
Falls back to synthetic data of the same shape when ``../shared/data/fate`` is absent.

Usage::

    .venv/bin/python bench/woe_bench.py            # median of 3 runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FATE = ROOT.parent / "shared" / "data" / "fate"
FATE_CELLS_PER_CORE_S = 100_000 * 330 / (68 * 16)


def data() -> tuple[np.ndarray, np.ndarray, str]:
    g, h = FATE / "default_credit_hetero_guest.csv", FATE / "default_credit_hetero_host.csv"
    if g.exists() and h.exists():
        import pandas as pd

        guest, host = pd.read_csv(g), pd.read_csv(h)
        host = host.rename(columns={c: f"h_{c}" for c in host.columns if c != "id"})
        joined = guest.merge(host, on="id")
        X = joined.drop(columns=["id", "y"]).to_numpy(float)
        return joined["y"].to_numpy().astype(np.int64), X, "default_credit"
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30_000, 23))
    return (rng.uniform(size=30_000) < 1 / (1 + np.exp(-X[:, 0]))).astype(np.int64), X, "synthetic 30,000 x 23"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--rows", type=int, default=None, help="only the first ROWS rows (smoke tests)")
    p.add_argument("--allow-insecure", action="store_true", help="accept keys below 2048 bits (smoke tests)")
    args = p.parse_args(argv)
    from vflcrypto.protocols import woe

    from vflcrypto import parallel
    from vflcrypto.he.paillier import generate_keypair

    y, X, name = data()
    if args.rows is not None:
        y, X, name = y[:args.rows], X[:args.rows], f"{name}, first {args.rows} rows"
    keys = generate_keypair(args.key_bits, allow_insecure=args.allow_insecure)
    ex = parallel.get_executor()
    if ex is not None:
        list(ex.map(abs, range(parallel.worker_count() * 4)))  # pool start-up outside the timings
    # warm the key's encryption tables
    woe.run_local(y[:500], None, [X[:500]], keys=keys, allow_insecure=args.allow_insecure)
    walls, cpus = [], []
    for _ in range(args.repeat):
        c0, t0 = parallel.cpu_seconds(), time.perf_counter()
        run = woe.run_local(y, None, [X], keys=keys, params=woe.WoeParams(max_bin=10),
                            allow_insecure=args.allow_insecure)
        walls.append(time.perf_counter() - t0)
        cpus.append(parallel.cpu_seconds() - c0)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    workers = max(1, parallel.worker_count())
    cells = len(y) * X.shape[1]
    out = {"data": name, "rows": len(y), "features": X.shape[1], "key_bits": args.key_bits, "workers": workers,
           "wall_s_median": round(wall, 2), "wall_s_runs": [round(w, 2) for w in walls], "cpu_s_median": round(cpu, 2),
           "cells_per_core_s": round(cells / (wall * workers)), "fate_cells_per_core_s": round(FATE_CELLS_PER_CORE_S),
           "bytes": run.transcript.total_bytes, "max_iv": round(max(f.iv for f in run.active.features), 4)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
