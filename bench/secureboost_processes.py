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
computed online, bytes per party, frame bytes per tree by message kind (every party's sends, from
its transcript; before TLS), and each party process's CPU seconds (``os.wait4``).

``--links`` runs the same training over other links too (:mod:`netns_link`, root only): each party in
its own network namespace, joined by a veth pair that ``tc tbf`` limits to a rate (``100``, ``10``:
Mbit/s, each direction), optionally with a one-way delay added by a user-space relay (``10+50``: the
kernel here has no netem); ``slow_link_table`` gives each run's training seconds, the link's measured
TCP rate and the slowdown against the loopback run of the same scheme, mode and GOSS setting (as
SecretFlow reports SGB's LAN and WAN times). ``--goss both`` runs each with and without GOSS
(``--top-rate``, ``--other-rate``; its trees are not compared: the active party samples with private
randomness). ``--part-rows 0,4096`` runs each with the active party's encrypted gradients in one message a tree
and in parts of 4,096 rows (``--gradient-part-rows``; the party command's default is 4,096), side by side.

    .venv/bin/python bench/secureboost_processes.py --trees 5            # default_credit, Paillier and OU
    .venv/bin/python bench/secureboost_processes.py --rows 600 --trees 2 --key-bits 1024 --allow-insecure
    sudo .venv/bin/python bench/secureboost_processes.py --schemes ou-heu --modes online --links loopback,100,10,10+50

Measured here (default_credit 30,000 rows, 5 trees, depth 3, 32 bins, ou-heu, online, pinned; 2 cores shared,
load average about 5): 7.74 MB per tree, 99.3 % of it the gradient ciphertexts (256 bytes a row), level
requests 11.3 kB (360 kB as int32 before they were deflated), histograms 34 kB; training 13.2 s on loopback,
18.8 s at 100 Mbit/s + 50 ms (1.42x), 43.8 s at 10 Mbit/s (3.31x), 52.2 s at 10 Mbit/s + 50 ms (3.95x;
SecretFlow reports 4.4x for SGB at 10 Mb/50 ms). GOSS (0.2, 0.1): 2.36 MB per tree, 8.1 s on loopback and 17.4 s at
10 Mbit/s + 50 ms (2.16x), 1.6x and 3.0x faster than without.

Gradients in parts (``--schemes ou-2048 --modes online --links loopback,10 --part-rows 0,4096``, the same data
and flags, one run, load average below 2; the busier direction's bytes take 31.4 s at the measured 9.8 Mbit/s):
one message a tree 11.53 s on loopback and 43.12 s at 10 Mbit/s (8.52 s a tree); in parts, the passive party
summing each part into the root's histograms as it arrives, 8.58 s and 34.53 s (6.90 s a tree): 1.34x and 1.25x
faster. (Parts alone, before the passive party's root sums: 9.77 s and 36.36 s against 10.65 s and 43.03 s; with
precomputed obfuscators 8.15 s / 36.06 s against 8.38 s / 39.28 s.) Every run grew the plaintext mode's trees.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import netns_link
from netns_link import Link
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


def run_one(name: str, scheme: str, precompute: bool, work: Path, args: argparse.Namespace,
            link: Link | None = None, goss: bool = False, part_rows: int | None = None) -> dict[str, Any]:
    """One training run on loopback (``link`` None) or with each party in its own namespace over ``link``."""
    run = work / name
    run.mkdir()
    common = ["--trees", str(args.trees), "--depth", str(args.depth), "--max-bin", str(args.max_bin), "--lr", "0.3",
              "--aligned", "--scheme", scheme, "--key-bits", str(args.key_bits),
              *(["--top-rate", str(args.top_rate), "--other-rate", str(args.other_rate)] if goss else []),
              *(["--allow-insecure"] if args.allow_insecure else [])]
    files = {"active": ["--data", str(work / "active.csv"), "--id-column", "id", "--label", "y",
                        "--precompute" if precompute else "--no-precompute",
                        *([] if part_rows is None else ["--gradient-part-rows", str(part_rows)])],
             "passive-0": ["--data", str(work / "passive-0.csv"), "--id-column", "id"]}
    commands = {n: ["train", "secureboost", *files[n], *common, "--out", str(run / f"{n}.npz")] for n in NAMES}
    env = {"VFLCRYPTO_WORKERS": "1"} if args.pin else None
    cores = {n: i for i, n in enumerate(NAMES)} if args.pin else None
    measured = None
    with contextlib.ExitStack() as stack:
        if link is None:
            cfg = party_config(run, NAMES, timeout=args.timeout)
            prefix = None
        else:  # NAMES[0] listens (the smaller name): at a host name each namespace resolves
            spaces = stack.enter_context(netns_link.namespaces(NAMES, link))
            cfg = party_config(run, NAMES, timeout=args.timeout,
                               addresses={NAMES[0]: f"{netns_link.HOST}:{netns_link.PORT}",
                                          NAMES[1]: f"{spaces.ip[NAMES[1]]}:{netns_link.PORT}"})
            prefix = {n: spaces.prefix(n) for n in NAMES}
            if link.rate_mbit is not None:  # the rate one TCP stream gets across the shaped veth (no relay)
                measured = round(netns_link.measure_mbit(spaces, NAMES, int(link.rate_mbit * 1e6 / 8 * 2)), 1)
        recs, cpu_s, wall = run_parties(name, cfg, commands, run, env=env, cores=cores, prefix=prefix)
    sent = [e for e in recs["active"]["transcript"] if e["event"] == "send"]
    t_setup = min(e["time"] for e in sent if e["kind"] == "secureboost.setup")
    # a tree opens with its first secureboost.gradients (its ciphertexts may come in several parts)
    starts = sorted(e["time"] for e, before in zip(sent, [None, *sent[:-1]], strict=True)
                    if e["kind"] == "secureboost.gradients" and (before is None or before["kind"] != e["kind"]))
    t_end = max(e["time"] for e in sent if e["kind"].startswith("secureboost.") and "predict" not in e["kind"])
    trees = [b - a for a, b in zip(starts, [*starts[1:], t_end], strict=True)]
    return {"scheme": scheme, "precompute": precompute, "goss": goss, "gradient_part_rows": part_rows,
            "link": "loopback" if link is None else link.label, "link_mbit_measured": measured,
            "training_s": round(t_end - t_setup, 2),
            "per_tree_s": {"median": round(statistics.median(trees), 2), "min": round(min(trees), 2),
                           "max": round(max(trees), 2), "trees": len(trees)},
            "obfuscators": recs["active"]["summary"].get("obfuscators"), "wall_s_whole_job": round(wall, 1),
            "bytes_sent": {n: recs[n]["bytes_sent"] for n in NAMES}, "party_process_cpu_s": cpu_s,
            "bytes_per_tree": bytes_by_kind(recs, args.trees),
            "model": sb.ActiveModel.load(run / "active.npz")}


def parse_link(spec: str) -> Link | None:
    """``loopback``; ``veth`` (namespaces, no limit); ``RATE`` Mbit/s; ``RATE+DELAY`` (one-way ms, the relay)."""
    if spec == "loopback":
        return None
    if spec == "veth":
        return Link(None)
    rate, _, delay = spec.partition("+")
    return Link(float(rate), float(delay or 0))


def slow_link_table(runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run: its training seconds and the slowdown against the loopback run of the same scheme, mode, GOSS and
    gradient parts."""
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["scheme"], r["precompute"], r["goss"], r.get("gradient_part_rows")

    base = {key(r): r["training_s"] for r in runs.values() if r["link"] == "loopback"}
    rows = []
    for name, r in runs.items():
        ref = base.get(key(r))
        mbit = r["link_mbit_measured"]  # the least time the busier direction's bytes take at the measured rate
        bound = None if not mbit else round(max(r["bytes_sent"].values()) * 8 / (mbit * 1e6), 1)
        rows.append({"run": name, "link": r["link"], "measured_mbit": mbit, "transfer_s_at_rate": bound,
                     "training_s": r["training_s"], "wall_s": r["wall_s_whole_job"],
                     "mb_per_tree": round(r["bytes_per_tree"]["total"] / 1e6, 2),
                     "slowdown": None if ref is None else round(r["training_s"] / ref, 2)})
    return rows


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
        parts: list[int | None] = [int(v) for v in args.part_rows.split(",")] if args.part_rows else [None]
        for scheme in args.schemes.split(","):
            for mode in args.modes.split(","):
                for goss in (False, True) if args.goss == "both" else (args.goss == "on",):
                    for spec, part in itertools.product(args.links.split(","), parts):
                        link = parse_link(spec)
                        name = (f"{scheme}-{mode}{'-goss' if goss else ''}{'' if link is None else '-' + spec}"
                                f"{'' if len(parts) == 1 else f'-parts{part}'}")
                        runs[name] = run_one(name, scheme, mode == "precompute", work, args, link, goss, part)
                        print(json.dumps({"run": name, "link": runs[name]["link"],  # progress, kept on a failure
                                          "training_s": runs[name]["training_s"],
                                          "bytes_per_tree": runs[name]["bytes_per_tree"]["total"]}),
                              file=sys.stderr, flush=True)
    for name, res in runs.items():
        model = res.pop("model")
        if res["goss"]:  # GOSS draws with the active party's private randomness: no in-process twin to compare
            res["identical_trees"] = "not checked (GOSS)"
            continue
        if any(not np.array_equal(getattr(model, k), getattr(plain.active.model, k))
               for k in ("kind", "party", "feature", "bin")):
            raise SystemExit(f"{name}: the trees differ from the plaintext mode's: no time reported")
        res["identical_trees"] = True
    out["runs"] = runs
    out["slow_link_table"] = slow_link_table(runs)
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
    p.add_argument("--links", default="loopback",
                   help="comma-separated: loopback, veth (each party in its own network namespace, no limit), "
                        "RATE (Mbit/s, tc tbf on the veth pair), RATE+DELAY (and DELAY ms one-way through a user-space "
                        "relay: this kernel may lack netem); namespace runs need root; e.g. loopback,100,10,10+50")
    p.add_argument("--goss", choices=("off", "on", "both"), default="off",
                   help="GOSS (LightGBM's top_rate/other_rate) in each run, or each run with and without")
    p.add_argument("--top-rate", type=float, default=0.2)
    p.add_argument("--other-rate", type=float, default=0.1)
    p.add_argument("--part-rows", default="",
                   help="comma-separated --gradient-part-rows values, each run with every link (e.g. 0,4096: one "
                        "message a tree beside parts of 4,096 rows); default: the party command's own")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_signal)  # so the namespaces' cleanup (a finally) runs
    print(json.dumps(bench(args), indent=2))
    return 0


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(f"stopped by signal {signum}")


if __name__ == "__main__":
    raise SystemExit(main())
