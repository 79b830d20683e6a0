"""Bucketed PSI with ``--parallel ray`` against the one-process bucketed run: time, phases, bytes in the cluster.

Writes two CSVs of ``--rows`` IDs each (half in common; synthetic example data), then runs
the bucketed alignment (:mod:`vflcrypto.protocols.align.buckets`, both parties in this process
over the local network) with ``--memory-budget``: in process (the default path), then twice
with the local work as tasks on a local Ray instance of ``--cpus`` CPUs (a one-node stand-in
for each party's own cluster; here both parties share it): cold (each worker's first task
imports the package) and warm, and once more on Ray with every
task's arguments and result pickled to count the bytes that cross between the link holder
and its workers (not timed). Reports wall time, each party's phases (``setup``, ``spill``:
spill and bucket counts, ``sizes_wait``, ``buckets``: the PSIs with loading and result
sorting), Ray's start-up separately, the tasks dispatched, and whether the outputs are byte-identical.

How the cost divides across a party's machines is in :mod:`vflcrypto.protocols.align.bucket_parallel`.

Notes (this 2-core machine, shared with other work, load 2.5-3 by ``uptime``; ``--rows 100000
--budget 50MB --cpus 2``: KKRT, 8 buckets, 5·10⁴ in common): in process 3.26 s (per party:
spill and counts 0.66 s, buckets 2.37 s); on a local Ray instance of 2 CPUs shared by both
parties 5.02 s cold (the workers' first tasks import the package) and 4.13 s warm (spill
0.82-0.89 s, buckets 2.96 s), plus 4.1 s to start Ray; 56 tasks per run; 44.8 MB pickled to
the workers and 29.8 MB back for 6.1 MB of input CSV (224 and 149 bytes per row); outputs
byte-identical. With both parties and the workers on the same two cores, Ray can only add
overhead: the run shows what moves and what it costs, not a multi-node speed-up (see
``bucket_parallel``'s docstring for how the cost divides).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pickle
import time
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any


class _Counting(Executor):
    """An executor that counts the pickled bytes of every task's arguments and result."""

    def __init__(self, inner: Executor) -> None:
        self.inner, self.out, self.back, self.tasks = inner, 0, 0, 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.out += len(pickle.dumps(args))
        self.tasks += 1
        fut = self.inner.submit(fn, *args)

        def done(f: Future[Any]) -> None:
            if f.exception() is None:
                self.back += len(pickle.dumps(f.result()))

        fut.add_done_callback(done)
        return fut


def _write(path: Path, ids: list[int]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["id", "x", "y"])
        for i in ids:
            w.writerow([f"user-{i:012d}", i % 97, f"{i * 0.37:.3f}"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--protocol", default="kkrt", choices=("kkrt", "ecdh", "hash"))
    ap.add_argument("--budget", default="200MiB", help="memory budget (sets the bucket count)")
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="CPUs of the local Ray instance")
    ap.add_argument("--workdir", default="/tmp/psi_ray_bench")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    os.environ["VFLCRYPTO_WORKERS"] = str(args.cpus)

    from vflcrypto.protocols.align import align_files
    from vflcrypto.protocols.align import buckets as bk

    from vflcrypto import parallel

    d = Path(args.workdir)
    d.mkdir(parents=True, exist_ok=True)
    n = args.rows
    # example data only: left holds 0..n-1, right n/2..3n/2-1 (half in common), shuffled
    import numpy as np

    rng = np.random.default_rng(1)
    _write(d / "left.csv", rng.permutation(n).tolist())
    _write(d / "right.csv", (rng.permutation(n) + n // 2).tolist())
    budget = bk.parse_size(args.budget)
    out: dict[str, Any] = {"rows": n, "protocol": args.protocol, "budget": args.budget, "cpus": args.cpus,
                           "load_before": os.getloadavg()}

    def run(name: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        r = align_files(d / "left.csv", d / "right.csv", id_column="id", protocol=args.protocol,
                        out_dir=d / name, memory_budget=budget)
        return {"seconds": round(time.perf_counter() - t0, 2), "buckets": r["buckets"],
                "intersection": r["intersection"],
                "phases": {side: {k: round(v, 2) for k, v in ph.items()} for side, ph in r["phase_seconds"].items()}}

    names = ("one-process", "ray-cold", "ray", "ray-bytes")
    for name in names:
        for f in (d / name).glob("*.aligned.csv"):
            f.unlink()
    parallel.configure("process")
    out["one_process"] = run("one-process")
    parallel.configure("ray")
    t0 = time.perf_counter()
    parallel.get_executor()
    out["ray_start_seconds"] = round(time.perf_counter() - t0, 2)
    before = parallel.dispatch_counts()["ray"]
    out["ray_cold"] = run("ray-cold")  # the first tasks of each worker import numpy and the package
    out["ray_cold"]["tasks"] = parallel.dispatch_counts()["ray"] - before
    before = parallel.dispatch_counts()["ray"]
    out["ray"] = run("ray")
    out["ray"]["tasks"] = parallel.dispatch_counts()["ray"] - before
    real = bk.bucket_executor
    counting: list[_Counting] = []

    def wrapped(backend: str | None = None) -> Executor | None:
        ex = real(backend)
        if ex is None:
            return None
        counting.append(_Counting(ex))
        return counting[-1]

    bk.bucket_executor = wrapped  # type: ignore[assignment]
    try:
        run("ray-bytes")
    finally:
        bk.bucket_executor = real
    csv_bytes = (d / "left.csv").stat().st_size + (d / "right.csv").stat().st_size
    out["cluster_bytes"] = {"to_workers": sum(c.out for c in counting), "from_workers": sum(c.back for c in counting),
                            "input_csv_bytes_both": csv_bytes}
    files = {name: sorted((p.name, p.read_bytes()) for p in (d / name).glob("*.aligned.csv"))
             for name in names}
    out["identical"] = all(files[name] == files["one-process"] != [] for name in names)
    out["load_after"] = os.getloadavg()
    parallel.configure(None)  # back to $VFLCRYPTO_BACKEND (stops the Ray instance)
    print(json.dumps(out, indent=None if args.json else 1))
    return out


if __name__ == "__main__":
    main()
