"""PSI benchmark: our KKRT, ECDH-PSI and keyed-hash PSI against openmined-psi, same IDs, one run.

Each contender runs in its own subprocess (so peak memory is its own): the parent reads
the child's ``ru_maxrss`` from ``os.wait4``; the child reports its wall time, CPU time
(itself plus its reaped pool workers), bytes on the wire and the intersection size.

* ``kkrt``/``ecdh``/``hash``: :func:`vflcrypto.protocols.align.run_local`, mode ``both`` (both parties
  learn the rows), both parties in one process sharing the process pool (so memory is
  for BOTH parties together; a single party needs about half). Pool start-up is measured
  separately (``pool_start_s``) and excluded from ``wall_s``.
* ``openmined``: openmined-psi 2.x (P-256, C++), client/server with
  ``reveal_intersection=True``, GCS setup at fpr 1e-9: only the CLIENT learns the
  intersection (one direction; both-learn would need a second run).

Usage::

    .venv/bin/python bench/psi_compare.py                    # 100k x 100k, 50% overlap
    .venv/bin/python bench/psi_compare.py --sizes 100000 1000000
    .venv/bin/python bench/psi_compare.py --sizes 2000 --json  # smoke test
    .venv/bin/python bench/psi_compare.py --repeat 5           # median of 5 runs per contender
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = ("rr22", "kkrt", "ecdh", "hash", "openmined")


def make_ids(n: int, overlap: float) -> tuple[list[str], list[str]]:
    """Deterministic IDs: left ``user-0..n-1``; right shares ``overlap·n`` of them."""
    shift = n - round(overlap * n)
    return [f"user-{i}" for i in range(n)], [f"user-{i}" for i in range(shift, shift + n)]


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def run_worker(contender: str, n: int, overlap: float) -> dict[str, Any]:
    """One contender in this process; returns its measurements."""
    left, right = make_ids(n, overlap)
    out: dict[str, Any] = {"contender": contender, "n": n}
    if contender in ("rr22", "kkrt", "ecdh", "hash"):
        sys.path.insert(0, str(ROOT))
        from vflcrypto.protocols.align import ACTIVE, PASSIVE, run_local

        from vflcrypto import parallel

        t = time.perf_counter()
        ex = parallel.get_executor()
        if ex is not None:
            list(ex.map(abs, range(parallel.worker_count() * 4)))
        out["pool_start_s"] = round(time.perf_counter() - t, 3)
        cpu0, t0 = _cpu(), time.perf_counter()
        run = run_local(left, right, protocol=contender, mode="both")
        out["wall_s"] = time.perf_counter() - t0
        ra, rp = run.results[ACTIVE], run.results[PASSIVE]
        assert [left[i] for i in ra.rows] == [right[i] for i in rp.rows]
        out["intersection"] = ra.size
        out["bytes"] = run.transcript.total_bytes
        # Pool workers are forkserver children (not ours): read their CPU and peak RSS from /proc.
        wcpu, wrss = parallel.pool_usage()
        out["cpu_s"] = _cpu() - cpu0 + wcpu
        out["worker_rss_kib"] = wrss
        out["learns"] = "both"
        out["workers"] = parallel.worker_count()
    elif contender == "openmined":
        import private_set_intersection.python as om

        cpu0, t0 = _cpu(), time.perf_counter()
        server = om.server.CreateWithNewKey(True)
        client = om.client.CreateWithNewKey(True)
        setup = server.CreateSetupMessage(1e-9, len(left), right, om.DataStructure.GCS)
        request = client.CreateRequest(left)
        response = server.ProcessRequest(request)
        inter = client.GetIntersection(setup, response)
        out["wall_s"] = time.perf_counter() - t0
        out["cpu_s"] = _cpu() - cpu0
        out["intersection"] = len(inter)
        out["bytes"] = sum(len(m.SerializeToString()) for m in (setup, request, response))
        out["learns"] = "client only"
    else:
        raise SystemExit(f"unknown contender {contender}")
    out.setdefault("worker_rss_kib", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return out


def run_contender(contender: str, n: int, overlap: float) -> dict[str, Any]:
    """Run one contender in a subprocess and add its peak RSS (``os.wait4``)."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker", contender, "--n", str(n), "--overlap", str(overlap)],
        stdout=subprocess.PIPE, cwd=ROOT,
    )
    assert proc.stdout is not None
    data = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        return {"contender": contender, "n": n, "error": f"exit code {proc.returncode}"}
    result = json.loads(data)
    result["peak_rss_mib"] = round(usage.ru_maxrss / 1024, 1)
    result["worker_peak_rss_mib"] = round(result.pop("worker_rss_kib") / 1024, 1)
    return result


def _runs(r: dict[str, Any]) -> str:
    runs = r.get("wall_s_runs", [])
    return f"  runs {runs}" if len(runs) > 1 else ""


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000], help="IDs per party")
    p.add_argument("--overlap", type=float, default=0.5)
    p.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    p.add_argument("--repeat", type=int, default=1, help="runs per contender and size; the median wall time is kept")
    p.add_argument("--json", action="store_true")
    p.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args.worker, args.n, args.overlap)))
        return []
    results = []
    for n in args.sizes:
        for c in args.contenders:
            runs = [run_contender(c, n, args.overlap) for _ in range(max(1, args.repeat))]
            ok = sorted((x for x in runs if "wall_s" in x), key=lambda x: x["wall_s"])
            r = ok[len(ok) // 2] if ok else runs[0]  # the median run (upper median for even counts)
            if ok:
                r["wall_s_runs"] = [round(x["wall_s"], 3) for x in runs if "wall_s" in x]
            results.append(r)
            if not args.json:
                if "error" in r:
                    print(f"{n:>9,} {c:<10} {r['error']}", flush=True)
                    continue
                print(f"{n:>9,} x {n:<9,} {c:<10} wall {r['wall_s']:7.2f} s  cpu {r['cpu_s']:7.2f} s  "
                      f"{r['bytes'] / 2**20:8.1f} MiB  peak RSS {r['peak_rss_mib']:7.1f} MiB "
                      f"(workers {r['worker_peak_rss_mib']:.0f})  |I|={r['intersection']:,}  "
                      f"learns: {r['learns']}{_runs(r)}", flush=True)
        by = {r["contender"]: r for r in results if r.get("n") == n and "wall_s" in r}
        if not args.json:
            for a, b in (("kkrt", "rr22"), ("openmined", "kkrt"), ("ecdh", "kkrt"), ("openmined", "ecdh"),
                         ("ecdh", "hash"), ("kkrt", "hash")):
                if a in by and b in by:
                    print(f"  {a} / {b} wall: {by[a]['wall_s'] / by[b]['wall_s']:.2f}x")
    if args.json:
        print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
