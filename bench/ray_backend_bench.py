"""The Ray backend against the process pool: the same SecureBoost run, side by side.

Trains SecureBoost on default_credit (30,000 × (13 + 10), ``../shared/data/fate``; a
synthetic split of that shape without it) at Paillier ``--key-bits`` twice in one process:
once with the process pool (:mod:`vflcrypto.parallel`'s default) and once with every chunk
of encryption, histogram sums, folding and decryption sent as a Ray task to a local Ray
instance of ``--cpus`` CPUs (a one-node stand-in for a party's own cluster); without Ray's
TLS (``RAY_USE_TLS``) the private-key chunks (the active party's encryption and decryption)
stay in the local pool (:func:`vflcrypto.parallel.on_ray`). Reports wall
time per contender (median over ``--repeat`` runs), the Ray start-up separately, the
overhead ratio, the tasks dispatched and whether the trees are identical (they must be).
Full run: ``.venv/bin/python bench/ray_backend_bench.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _load_data(rows: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    spec = importlib.util.spec_from_file_location("secureboost_bench", Path(__file__).with_name("secureboost_bench.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("secureboost_bench", mod)
    spec.loader.exec_module(mod)
    data: tuple[np.ndarray, np.ndarray, np.ndarray, str] = mod.load_data(rows)
    return data


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trees", type=int, default=3)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--allow-insecure", action="store_true", help="accept keys below 2048 bits (smoke tests)")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="CPUs of the pool and of the Ray instance")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    os.environ["VFLCRYPTO_WORKERS"] = str(args.cpus)

    from vflcrypto.protocols import secureboost as sb

    from vflcrypto import parallel
    from vflcrypto.he.paillier import generate_keypair

    Xa, y, Xp, src = _load_data(args.rows)
    keys = generate_keypair(args.key_bits, allow_insecure=args.allow_insecure)
    params = sb.BoostParams(n_trees=args.trees, max_depth=args.depth, max_bin=32)

    def run() -> tuple[float, Any]:
        t0 = time.perf_counter()
        r = sb.run_local(Xa, y, [Xp], params=params, keys=keys, allow_insecure=args.allow_insecure, timeout=900)
        return time.perf_counter() - t0, r.active.model

    times: dict[str, list[float]] = {"process": [], "ray": []}
    models: dict[str, Any] = {}
    counts: dict[str, int] = {}
    starts: list[float] = []
    for _ in range(args.repeat):
        for name in ("process", "ray"):
            parallel.configure(name)
            t0 = time.perf_counter()
            parallel.get_executor()  # the pool's or Ray's start-up, timed apart from the run
            if name == "ray":
                starts.append(time.perf_counter() - t0)
            before = parallel.dispatch_counts()[name]
            seconds, models[name] = run()
            times[name].append(seconds)
            counts[name] = parallel.dispatch_counts()[name] - before
    parallel.configure(None)
    ray_start = statistics.median(starts)
    same = all(np.array_equal(getattr(models["process"], k), getattr(models["ray"], k))
               for k in ("kind", "party", "feature", "bin", "value"))
    if not same:
        raise SystemExit("the Ray backend grew other trees than the process pool: no speed reported")
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"data": src, "rows": len(y), "trees": args.trees, "key_bits": args.key_bits, "cpus": args.cpus,
           "seconds": {k: round(v, 2) for k, v in med.items()}, "runs": times,
           "ray_startup_seconds": round(ray_start, 2), "ray_over_process": round(med["ray"] / med["process"], 3),
           "chunks_dispatched_per_run": counts, "identical_trees": same}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"SecureBoost on {src}: {len(y):,} rows, {args.trees} trees, Paillier {args.key_bits}, "
              f"{args.cpus} CPUs, median of {args.repeat}")
        print(f"process pool {med['process']:.2f} s; Ray {med['ray']:.2f} s ({out['ray_over_process']:.3f}x; "
              f"start-up {ray_start:.1f} s not included); chunks per run {counts}; identical trees: {same}")
    return out


if __name__ == "__main__":
    main()
