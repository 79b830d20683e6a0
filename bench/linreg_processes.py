"""Linear regression epochs with every party in its own process, with and without coordinator obfuscators.

Each party runs ``vflcrypto party ... train linreg`` over loopback mutual TLS (a throw-away
dev PKI), as it would on its own machine; the coordinator holds the key and, with
``--coordinator-obfuscators``, fills a stock of encryptions of zero by the CRT on its
low-priority pool while it waits and sends each batch's to the passive party. Both modes
run in the same invocation, one after the other, on the same data and flags
(``--modes`` sets the order), so their ratio holds even if the machine is shared.

Data: synthetic, ``--rows`` × (``--active-features`` + ``--passive-features``) (default
30,000 × (13 + 10), default_credit's shape), full batch, ``--epochs`` epochs, Paillier
``--key-bits``. Every party runs ``--test-fraction`` (default 1 %) aside for the secure
prediction the command makes at the end, so ``--rows`` is the *training* rows (the files
hold a little more). Epoch times come from the active party's transcript: from its plan to
the first ``linreg.control``, then from one to the next (the coordinator sends the control
bit before it computes any shortfall of the next epoch's obfuscators, so each epoch holds
its own); the first epoch also builds the fixed-base tables and starts the pools, so
``epoch_s`` is the median over the later epochs (all are listed, and their mean). Before
any time is reported, both modes' weights are checked against plaintext gradient descent
on the same rows (max abs difference <= 1e-6) and against each other (equal bit for bit).
Reported per mode: epoch seconds, the coordinator's obfuscator counters (made by its
producer, handed out from its stock, computed online), bytes each party sent, and each
party process's CPU seconds (``os.wait4``: the party process itself; its pool workers are
forkserver children and are not counted).

    .venv/bin/python bench/linreg_processes.py                   # 30,000 x 23, 4 epochs, both modes
    .venv/bin/python bench/linreg_processes.py --rows 600 --key-bits 1024 --allow-insecure --epochs 2
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

from linreg_epoch import mulmod_anchor, synthetic
from party_processes import party_config, run_parties, write_table
from vflcrypto.protocols import linreg as lr

from vflcrypto.data.tables import train_test_split

NAMES = ("active", "passive-0", "coordinator")


def _epochs(transcript: list[dict[str, Any]]) -> list[float]:
    """The active party's epochs: its plan sent, then each control received."""
    t_plan = min(e["time"] for e in transcript if e["event"] == "send" and e["kind"] == "linreg.plan")
    ends = sorted(e["time"] for e in transcript if e["event"] == "recv" and e["kind"] == "linreg.control")
    return [b - a for a, b in zip([t_plan, *ends], ends, strict=False)]


def run_mode(mode: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    cfg = party_config(work / mode, NAMES, timeout=args.timeout)
    common = ["--epochs", str(args.epochs), "--tol", "0", "--key-bits", str(args.key_bits), "--test-fraction",
              str(args.test_fraction), f"--{'' if mode == 'obfuscators' else 'no-'}coordinator-obfuscators",
              *(["--allow-insecure"] if args.allow_insecure else [])]
    files = {"active": ["--data", str(work / "active.csv"), "--id-column", "id", "--label", "y", "--aligned"],
             "passive-0": ["--data", str(work / "passive-0.csv"), "--id-column", "id", "--aligned"],
             "coordinator": []}
    commands = {n: ["train", "linreg", *files[n], *common, "--out", str(work / mode / f"{n}.npz")] for n in NAMES}
    recs, cpu, wall = run_parties(mode, cfg, commands, work / mode)
    epochs = _epochs(recs["active"]["transcript"])
    later = epochs[1:] or epochs
    return {"epoch_s": round(statistics.median(later), 2), "epochs_s": [round(e, 2) for e in epochs],
            "epoch_s_mean_all": round(statistics.mean(epochs), 2),
            "wall_s_whole_job": round(wall, 1), "obfuscators": recs["coordinator"]["summary"].get("obfuscators"),
            "bytes_sent": {n: recs[n]["bytes_sent"] for n in NAMES}, "party_process_cpu_s": cpu,
            "weights": {n: lr.PartyModel.load(work / mode / f"{n}.npz").weights for n in NAMES[:2]}}


def bench(args: argparse.Namespace) -> dict[str, Any]:
    total = round(args.rows / (1 - args.test_fraction))
    while total - round(total * args.test_fraction) > args.rows:
        total -= 1
    active, passive = synthetic(total, args.active_features, args.passive_features)
    train, _ = train_test_split(total, args.test_fraction, seed=0)  # the CLI's public split (seed 0)
    cfg = lr.LinRegConfig(epochs=args.epochs, tol=None)  # the CLI's defaults: the same training
    ref = lr.plaintext_gradient_descent(active.X[train], active.label[train], [passive.X[train]], config=cfg)
    out: dict[str, Any] = {"rows": len(train), "features": [args.active_features, args.passive_features],
                           "key_bits": args.key_bits, "epochs": args.epochs, "cores": os.cpu_count(),
                           "anchor_mulmod_4096_per_s": round(mulmod_anchor())}
    with tempfile.TemporaryDirectory(prefix="linreg-processes-") as tmp:
        work = Path(tmp)
        write_table(work / "active.csv", active)
        write_table(work / "passive-0.csv", passive)
        results = {}
        for mode in args.modes.split(","):
            (work / mode).mkdir()
            results[mode] = run_mode(mode, work, args)
    weights = [res["weights"] for res in results.values()]
    if any(not np.array_equal(w[n], weights[0][n]) for w in weights for n in weights[0]):
        raise SystemExit("the modes trained different weights: no time reported")
    for mode, res in results.items():
        w = res.pop("weights")
        err = max(float(np.max(np.abs(w["active"] - ref.active_weights))),
                  float(np.max(np.abs(w["passive-0"] - ref.passive_weights[0]))))
        if not err <= 1e-6:
            raise SystemExit(f"{mode}: weights differ from plaintext gradient descent by {err:.3g}: no time reported")
        res["max_weight_error_vs_plaintext"] = err
        out[mode] = res
    if {"obfuscators", "online"} <= set(results):
        out["speedup_epoch"] = round(results["online"]["epoch_s"] / results["obfuscators"]["epoch_s"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=30_000, help="training rows")
    p.add_argument("--active-features", type=int, default=13)
    p.add_argument("--passive-features", type=int, default=10)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--test-fraction", type=float, default=0.01)
    p.add_argument("--modes", default="online,obfuscators",
                   help="comma-separated, run in this order: online (the passive party's own obfuscators), "
                        "obfuscators (the coordinator's)")
    p.add_argument("--timeout", type=float, default=600.0, help="each link's receive timeout, seconds")
    p.add_argument("--allow-insecure", action="store_true")
    args = p.parse_args(argv)
    print(json.dumps(bench(args), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
