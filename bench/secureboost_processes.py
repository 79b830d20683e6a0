"""SecureBoost with each party in its own process, each on its own core: with and without precomputed obfuscators.

Each party runs ``vflcrypto party ... train secureboost`` over loopback mutual TLS (a throw-away
dev PKI), as it would on its own machine. ``--pin`` (default) gives the active party core 0
and the passive party core 1 (``sched_setaffinity``, one worker each: ``VFLCRYPTO_WORKERS=1``),
so each has a CPU of its own that idles while it waits for the other: the shape of two
one-core machines, and the only way to show idle time on a two-core box where every party
would otherwise share both cores. With ``--precompute`` the active party fills a stock of the
next tree's obfuscators while it waits for the passive party's histograms (a thread beside
the role: one worker), paused while it computes itself; without, it encrypts online.

Every ``--schemes`` × ``--modes`` combination runs in the same invocation, one after the other,
on the same rows and flags, so their ratios hold even if the machine is shared. Data:
default_credit (``../shared/data/fate``) when present, else a synthetic split of its shape
(:func:`secureboost_bench.load_data`); ``--rows`` takes the first rows. Before a time is
reported, every run's trees must equal the plaintext mode's (run in this process).
Reported per run: training seconds (from the active party's setup to its last message of
the last tree), seconds per tree (median and range), the obfuscators taken from the stock and
computed online, bytes per party, and each party process's CPU seconds (``os.wait4``).

    .venv/bin/python bench/secureboost_processes.py --trees 5            # default_credit, Paillier and OU
    .venv/bin/python bench/secureboost_processes.py --rows 600 --trees 2 --key-bits 1024 --allow-insecure
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from party_processes import party_config, run_parties, write_table
from secureboost_bench import load_data
from vflcrypto.protocols import secureboost as sb

from vflcrypto.data.tables import PartyTable

NAMES = ("active", "passive-0")


def bytes_by_kind(recs: dict[str, Any], trees: int) -> dict[str, Any]:
    """Frame bytes per tree by message kind, summed over every party's sends (the frames the transport
    carries, before TLS); kinds sent once per run (setup, resume, prediction) are divided by ``trees`` too."""
    by: dict[str, int] = {}
    for n in NAMES:
        for e in recs[n]["transcript"]:
            if e["event"] == "send":
                by[e["kind"]] = by.get(e["kind"], 0) + int(e["nbytes"])
    total = sum(by.values())
    ranked = sorted(by.items(), key=lambda kv: -kv[1])
    out: dict[str, Any] = {k.removeprefix("secureboost."): round(v / trees) for k, v in ranked}
    out["total"] = round(total / trees)
    return out


def run_one(name: str, scheme: str, precompute: bool, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    run = work / name
    run.mkdir()
    cfg = party_config(run, NAMES, timeout=args.timeout)
    common = ["--trees", str(args.trees), "--depth", str(args.depth), "--max-bin", str(args.max_bin), "--lr", "0.3",
              "--aligned", "--scheme", scheme, "--key-bits", str(args.key_bits),
              *(["--allow-insecure"] if args.allow_insecure else [])]
    files = {"active": ["--data", str(work / "active.csv"), "--id-column", "id", "--label", "y",
                        "--precompute" if precompute else "--no-precompute"],
             "passive-0": ["--data", str(work / "passive-0.csv"), "--id-column", "id"]}
    commands = {n: ["train", "secureboost", *files[n], *common, "--out", str(run / f"{n}.npz")] for n in NAMES}
    recs, cpu_s, wall = run_parties(name, cfg, commands, run, env={"VFLCRYPTO_WORKERS": "1"} if args.pin else None,
                                    cores={n: i for i, n in enumerate(NAMES)} if args.pin else None)
    sent = [e for e in recs["active"]["transcript"] if e["event"] == "send"]
    t_setup = min(e["time"] for e in sent if e["kind"] == "secureboost.setup")
    starts = sorted(e["time"] for e in sent if e["kind"] == "secureboost.gradients")
    t_end = max(e["time"] for e in sent if e["kind"].startswith("secureboost.") and "predict" not in e["kind"])
    trees = [b - a for a, b in zip(starts, [*starts[1:], t_end], strict=True)]
    return {"scheme": scheme, "precompute": precompute, "training_s": round(t_end - t_setup, 2),
            "per_tree_s": {"median": round(statistics.median(trees), 2), "min": round(min(trees), 2),
                           "max": round(max(trees), 2)},
            "obfuscators": recs["active"]["summary"].get("obfuscators"), "wall_s_whole_job": round(wall, 1),
            "bytes_sent": {n: recs[n]["bytes_sent"] for n in NAMES}, "party_process_cpu_s": cpu_s,
            "bytes_per_tree": bytes_by_kind(recs, args.trees),
            "model": sb.ActiveModel.load(run / "active.npz")}


def bench(args: argparse.Namespace) -> dict[str, Any]:
    Xa, y, Xp, src = load_data(args.rows)
    assert y is not None
    ids = [f"r{i}" for i in range(len(y))]
    params = sb.BoostParams(n_trees=args.trees, max_depth=args.depth, max_bin=args.max_bin, learning_rate=0.3)
    plain = sb.run_local(Xa, y, [Xp], params=params, plaintext=True, timeout=600)
    out: dict[str, Any] = {"data": src, "rows": len(y), "features": [Xa.shape[1], Xp.shape[1]], "trees": args.trees,
                           "depth": args.depth, "max_bin": args.max_bin, "cores": os.cpu_count(),
                           "pinned": "active on core 0, passive on core 1, one worker each" if args.pin else "no"}
    with tempfile.TemporaryDirectory(prefix="secureboost-processes-") as tmp:
        work = Path(tmp)
        cols_a, cols_p = tuple(f"a{j}" for j in range(Xa.shape[1])), tuple(f"p{j}" for j in range(Xp.shape[1]))
        write_table(work / "active.csv", PartyTable(tuple(ids), cols_a, Xa, y))
        write_table(work / "passive-0.csv", PartyTable(tuple(ids), cols_p, Xp, None))
        runs = {}
        for scheme in args.schemes.split(","):
            for mode in args.modes.split(","):
                name = f"{scheme}-{mode}"
                runs[name] = run_one(name, scheme, mode == "precompute", work, args)
    for name, res in runs.items():
        model = res.pop("model")
        if any(not np.array_equal(getattr(model, k), getattr(plain.active.model, k))
               for k in ("kind", "party", "feature", "bin")):
            raise SystemExit(f"{name}: the trees differ from the plaintext mode's: no time reported")
        res["identical_trees"] = True
    out["runs"] = runs
    for scheme in args.schemes.split(","):
        a, b = runs.get(f"{scheme}-online"), runs.get(f"{scheme}-precompute")
        if a and b:
            out[f"speedup_{scheme}"] = round(a["training_s"] / b["training_s"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=None, help="the first ROWS rows (default: all)")
    p.add_argument("--trees", type=int, default=5)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--max-bin", type=int, default=32)
    p.add_argument("--key-bits", type=int, default=2048, help="Paillier bits (OU: at least 3072)")
    p.add_argument("--schemes", default="paillier,ou")
    p.add_argument("--modes", default="online,precompute", help="comma-separated, in this order: online, precompute")
    p.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                   help="each party on its own core with one worker (default on)")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--allow-insecure", action="store_true")
    args = p.parse_args(argv)
    print(json.dumps(bench(args), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
