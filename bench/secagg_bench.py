"""vflcrypto's ``secagg`` against Flower's SecAgg+, both as Flower Apps in one simulation harness.

Both sides run through ``scripts/flower_simulate.sh`` (Flower's simulation engine, one
SuperNode per client, the same Ray resources), sum the same public example vectors
(``example_vector(k, length)`` for client k) and meter the same thing:

* **bytes per client**: every message content crossing the Grid, measured as the
  protobuf Flower sends (:class:`vflcrypto.runtime.flower_meter.MeteredGrid`), down + up,
  averaged over all n client nodes;
* **time per round**: Flower's SecAgg+ workflow call (replies pulled every ``--poll``
  seconds, 0.05 like vflcrypto's ServerApp; Flower's own ``send_and_receive`` sleeps
  3 s between pulls, ``--poll 0``) (its four stages), and for
  vflcrypto the whole ServerApp run after the nodes joined (one round; this includes
  the one ``query.hello`` exchange, so it slightly over-counts vflcrypto's time).

Parameters are matched: every weight is 1 (``max_weight`` 1: no precision lost to
Flower's weight scaling), Flower quantizes to 2^22 levels over [-8, 8] mod 2^32;
vflcrypto uses the 32-bit ring with 20 fractional bits (|x| < 16). A neighbourhood of
``shares`` clients (Flower's ``num_shares``; vflcrypto's ``degree`` = shares - 1, its
sparse Harary graph) and the same threshold. Drops: the last K clients fail after the
key sharing, before sending their masked input, in both. Results must agree: Flower's
mean over the survivors times their number, vflcrypto's sum, and numpy's sum are
compared (max abs error).

    .venv/bin/python bench/secagg_bench.py                    # 10/50/100 clients x 100k, 0 % / 20 % drops
    .venv/bin/python bench/secagg_bench.py --clients 10 --length 10000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from vflcrypto.protocols.secagg.flower import example_vector

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "flower_simulate.sh"
REFERENCE = ROOT / "bench" / "flower_secaggplus"
ENCODING = ("ring-bits=32", "frac-bits=20", "value-bits=24")


def neighbourhood(n: int) -> tuple[int, int]:
    """(shares = neighbourhood size incl. the client, threshold): every client up to 10, then 11; a strict majority."""
    shares = n if n <= 10 else 11
    return shares, shares // 2 + 1


def _simulate(overrides: list[str], nodes: int, workdir: Path, app: Path | None, timeout: float) -> float:
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, NODES=str(nodes), FLWR_WORKDIR=str(workdir), FLWR_TIMEOUT=str(int(timeout)),
               VENV=sys.prefix)
    if app is not None:
        env["FLWR_APP"] = str(app)
    t0 = time.perf_counter()
    proc = subprocess.run(["bash", str(SCRIPT), *overrides], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout + 120)
    if proc.returncode:
        raise RuntimeError(f"simulation failed ({' '.join(overrides)}):\n{proc.stdout[-4000:]}")
    return time.perf_counter() - t0


def _per_client(traffic: dict[str, Any], clients: set[str]) -> float:
    down, up = traffic["down"], traffic["up"]
    return sum(down.get(c, 0) + up.get(c, 0) for c in clients) / len(clients)


def run_vflcrypto(n: int, length: int, drop: int, pki: Path, work: Path, timeout: float) -> dict[str, Any]:
    shares, t = neighbourhood(n)
    out = work / "out"
    overrides = ["protocol='secagg'", f"clients={n}", f"length={length}", f"drop={drop}", f"threshold={t}",
                 f"degree={0 if shares == n else shares - 1}", *ENCODING, "meter=true", f"timeout={timeout}",
                 f"party-config='{pki / 'parties.example.toml'}'", f"out-dir='{out}'"]
    wall = _simulate(overrides, n, work, None, timeout)
    server = json.loads((out / "server.json").read_text())
    meter, res = server["meter"], server["result"][-1]
    clients = {str(v) for k, v in meter["nodes"].items()}
    return {"seconds": meter["seconds"], "wall": wall, "bytes": _per_client(meter, clients),
            "survivors": len(res["survivors"]), "sum": np.asarray(res["total"])}


def run_flower(n: int, length: int, drop: int, work: Path, timeout: float, poll: float) -> dict[str, Any]:
    shares, t = neighbourhood(n)
    out = work / "out"
    overrides = [f"clients={n}", f"length={length}", f"drop={drop}", f"num-shares={shares}", f"threshold={t}",
                 f"timeout={timeout}", f"poll={poll}", f"out-dir='{out}'"]
    wall = _simulate(overrides, n, work, REFERENCE, timeout)
    got = json.loads((out / "secaggplus.json").read_text())
    clients = set(got["down"])
    survivors = int(got["results"])
    if got["mean"] is None:  # SecAgg+ halted: some neighbourhood kept fewer than t shares
        return {"seconds": got["seconds"][-1], "wall": wall, "bytes": _per_client(got, clients), "aborted": True}
    return {"seconds": got["seconds"][-1], "wall": wall, "bytes": _per_client(got, clients),
            "survivors": survivors, "sum": np.asarray(got["mean"]) * survivors}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 50, 100])
    ap.add_argument("--length", type=int, default=100_000)
    ap.add_argument("--drops", type=float, nargs="+", default=[0.0, 0.2], help="share of clients that drop")
    ap.add_argument("--repeats", type=int, default=3, help="runs per configuration and side (median reported)")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--poll", type=float, default=0.05,
                    help="Flower side: seconds between pulls (vflcrypto's ServerApp: 0.05); 0 = Flower's 3 s")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    from vflcrypto.cli import main as cli

    rows = []
    print(f"{os.cpu_count()} CPUs; Flower simulation (Ray), one SuperNode per client; {args.length} values per "
          f"client; median of {args.repeats} run(s) per side; Flower polls every {args.poll or 3} s; "
          "bytes = Grid message contents per client, down + up")
    print(f"{'clients':>7} {'drop':>4} {'shares/t':>8} | {'flower s':>9} {'vflcrypto s':>11} {'ratio':>6} | "
          f"{'flower MB':>9} {'vflcrypto MB':>12} {'ratio':>6} | {'max |err|':>18}")
    with tempfile.TemporaryDirectory(prefix="sab", dir="/tmp") as tmp:
        for n in args.clients:
            pki = Path(tmp) / f"pki{n}"
            names = ["server", *[f"client-{i}" for i in range(n)]]
            with open(os.devnull, "w") as null:
                stdout, sys.stdout = sys.stdout, null
                try:
                    cli(["certs", "--out", str(pki), *[a for p in names for a in ("--party", p)]])
                finally:
                    sys.stdout = stdout
            for share in args.drops:
                drop = round(share * n)
                fl, vf = [], []
                for r in range(args.repeats):  # alternate the sides: drift hits both alike
                    fl.append(run_flower(n, args.length, drop, Path(tmp) / f"f{n}-{drop}-{r}", args.timeout, args.poll))
                    vf.append(run_vflcrypto(n, args.length, drop, pki, Path(tmp) / f"v{n}-{drop}-{r}", args.timeout))
                want = np.sum([example_vector(i, args.length) for i in range(n - drop)], 0)
                aborted = sum(bool(x.get("aborted")) for x in fl)
                fl = [x for x in fl if not x.get("aborted")] or fl[:0]
                if not fl:
                    print(f"{n:>7} {drop:>4}: Flower's SecAgg+ aborted in every run", flush=True)
                    continue
                assert all(x["survivors"] == n - drop for x in fl + vf), "survivor counts differ"
                err_f = max(float(np.abs(x["sum"] - want).max()) for x in fl)
                err_v = max(float(np.abs(x["sum"] - want).max()) for x in vf)
                tf = statistics.median(x["seconds"] for x in fl)
                tv = statistics.median(x["seconds"] for x in vf)
                bf, bv = fl[0]["bytes"], vf[0]["bytes"]
                shares, t = neighbourhood(n)
                row = {"clients": n, "drop": drop, "shares": shares, "threshold": t, "length": args.length,
                       "flower_seconds": [x["seconds"] for x in fl], "vflcrypto_seconds": [x["seconds"] for x in vf],
                       "flower_wall": [x["wall"] for x in fl], "vflcrypto_wall": [x["wall"] for x in vf],
                       "flower_bytes_per_client": bf, "vflcrypto_bytes_per_client": bv,
                       "flower_max_error": err_f, "vflcrypto_max_error": err_v, "flower_aborted": aborted}
                rows.append(row)
                print(f"{n:>7} {drop:>4} {shares:>4}/{t:<3} | {tf:>9.2f} {tv:>11.2f} {tv / tf:>6.2f} | "
                      f"{bf / 1e6:>9.3f} {bv / 1e6:>12.3f} {bv / bf:>6.2f} | {err_f:.1e} / {err_v:.1e}"
                      + (f"  (Flower aborted {aborted} of {args.repeats} runs: a neighbourhood lost t shares)"
                         if aborted else ""), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
