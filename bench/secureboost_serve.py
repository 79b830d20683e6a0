"""The SecureBoost prediction service (``vflcrypto party ... serve secureboost``): rows per second and latency.

A model of a few trees of depth 3 is trained in this process (plaintext mode: the same trees as the
encrypted modes, and a prediction uses no encryption, so the scheme does not change what is measured) on
default_credit (``../shared/data/fate``) when present, else a synthetic split of its shape
(:func:`secureboost_bench.load_data`), and saved as a ``--model-dir``. Then each party runs
``vflcrypto party ... serve secureboost`` as its own process over loopback mutual TLS (a throw-away dev
PKI), each with its own model file and its own rows; ``--pin`` gives the active party core 0 and the
passive party core 1. This script is the client: it writes requests of ``--sizes`` IDs each (drawn at
random from the rows, ``--repeats`` per size after one warm-up request) to the active party's standard
input and times each answer line from the write of the request to the read of the answer (JSON encoding,
the pipe and every message between the parties included). Every answer is checked against the in-process
batch prediction of the same rows before a time is reported.

Reported per batch size: requests, rows per second (rows answered over the summed latencies), latency p50
and p99 in milliseconds; the load average before and after (``os.getloadavg``: a shared machine says so).

    .venv/bin/python bench/secureboost_serve.py                      # default_credit, 3 trees, batches 1/100/10000
    .venv/bin/python bench/secureboost_serve.py --rows 500 --sizes 1,100 --repeats 5 --no-pin
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from party_processes import ROOT, party_config, write_table
from secureboost_bench import load_data
from vflcrypto.protocols import secureboost as sb
from vflcrypto.protocols.secureboost.predict import predict_local
from vflcrypto.protocols.secureboost.serve import STOP

from vflcrypto.data.files import write_model_dir
from vflcrypto.data.tables import PartyTable

NAMES = ("active", "passive-0")


def _start(cfg: Path, name: str, flags: list[str], logs: Path, core: int | None) -> subprocess.Popen[bytes]:
    err = (logs / f"{name}.err").open("wb")
    out: Any = subprocess.PIPE if name == "active" else (logs / f"{name}.out").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "vflcrypto", "party", "--config", str(cfg), "--as", name, "--json", "serve",
         "secureboost", *flags], stdin=subprocess.PIPE if name == "active" else subprocess.DEVNULL, stdout=out,
        stderr=err, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "VFLCRYPTO_WORKERS": "1"},
        preexec_fn=None if core is None else (lambda: os.sched_setaffinity(0, {core})))


def bench(args: argparse.Namespace) -> dict[str, Any]:
    Xa, y, Xp, src = load_data(args.rows)
    ids = [f"r{i}" for i in range(len(y))]
    ca, cp = tuple(f"a{j}" for j in range(Xa.shape[1])), tuple(f"p{j}" for j in range(Xp.shape[1]))
    params = sb.BoostParams(n_trees=args.trees, max_depth=args.depth, max_bin=args.max_bin, learning_rate=0.3,
                            first_tree_active_only=False)
    run = sb.run_local(Xa, y, [Xp], params=params, plaintext=True, timeout=600, active_columns=ca,
                       passive_columns=[cp])
    model, pm = run.active.model, run.passive["passive-0"].model
    reference = np.asarray(predict_local(model, Xa, [(pm, Xp)]))
    sizes = [int(s) for s in args.sizes.split(",")]
    if max(sizes) > len(ids):
        raise SystemExit(f"a batch of {max(sizes)} rows needs at least as many rows (have {len(ids)})")
    rng = np.random.default_rng(0)  # which rows each request names: benchmark data, not a secret
    out: dict[str, Any] = {"data": src, "rows": len(ids), "features": [Xa.shape[1], Xp.shape[1]],
                           "trees": args.trees, "depth": args.depth, "passive_nodes": int(np.sum(model.kind == 2)),
                           "cores": os.cpu_count(), "loadavg_before": [round(v, 2) for v in os.getloadavg()],
                           "pinned": "active on core 0, passive on core 1" if args.pin else "no"}
    with tempfile.TemporaryDirectory(prefix="secureboost-serve-") as tmp:
        work = Path(tmp)
        write_model_dir(work / "model", "secureboost", {"active.npz": model.save, "passive-0.npz": pm.save})
        write_table(work / "active.csv", PartyTable(tuple(ids), ca, Xa, y))
        write_table(work / "passive-0.csv", PartyTable(tuple(ids), cp, Xp, None))
        cfg = party_config(work, NAMES, timeout=args.timeout)
        procs = {n: _start(cfg, n, ["--model-dir", str(work / "model"), "--data", str(work / f"{n}.csv"),
                                    "--id-column", "id", "--out", str(work / f"{n}.json")], work,
                           (NAMES.index(n) if args.pin else None)) for n in NAMES}
        active = procs["active"]
        assert active.stdin is not None and active.stdout is not None
        answers: queue.Queue[bytes] = queue.Queue()
        stdout = active.stdout
        threading.Thread(target=lambda: [answers.put(line) for line in stdout], daemon=True).start()

        def ask(batch: list[int]) -> float:
            assert active.stdin is not None
            line = (",".join(ids[i] for i in batch) + "\n").encode()
            t0 = time.perf_counter()
            active.stdin.write(line)
            active.stdin.flush()
            try:
                raw = answers.get(timeout=args.timeout)
            except queue.Empty:
                raise SystemExit(f"no answer within {args.timeout} s:\n"
                                 f"{(work / 'active.err').read_text()[-3000:]}") from None
            dt = time.perf_counter() - t0
            got = json.loads(raw)
            if "probability" not in got or not np.array_equal(np.asarray(got["probability"]), reference[batch]):
                raise SystemExit(f"an answer differs from the batch prediction: no time reported ({str(got)[:300]})")
            return dt

        try:
            results = {}
            for size in sizes:
                ask(list(rng.choice(len(ids), size, replace=False)))  # warm-up (connections, caches)
                lat = np.asarray([ask(list(rng.choice(len(ids), size, replace=False)))
                                  for _ in range(args.repeats if size < 10_000 else max(1, args.repeats // 5))])
                results[str(size)] = {"requests": len(lat), "rows_per_s": round(size * len(lat) / float(lat.sum()), 1),
                                      "p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 2),
                                      "p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 2)}
            active.stdin.write(f"{STOP}\n".encode())
            active.stdin.close()
            codes = {n: p.wait(timeout=args.timeout) for n, p in procs.items()}
            if any(codes.values()):
                raise SystemExit(f"a party failed: {codes}\n{(work / 'active.err').read_text()[-2000:]}"
                                 f"{(work / 'passive-0.err').read_text()[-2000:]}")
            served = json.loads((work / "active.json").read_text())
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
    out["batches"] = results
    out["service_summary"] = {k: served[k] for k in ("batches", "rows", "errors", "latency_s")}
    out["loadavg_after"] = [round(v, 2) for v in os.getloadavg()]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=None, help="the first ROWS rows (default: all)")
    p.add_argument("--trees", type=int, default=3)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--max-bin", type=int, default=32)
    p.add_argument("--sizes", default="1,100,10000", help="comma-separated batch sizes (IDs per request)")
    p.add_argument("--repeats", type=int, default=100,
                   help="timed requests per size (a fifth of them for batches of 10,000 rows or more)")
    p.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                   help="each party on its own core (default on)")
    p.add_argument("--timeout", type=float, default=120.0)
    args = p.parse_args(argv)
    print(json.dumps(bench(args), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
