"""Prototype VFL (seed 002) on the digits: accuracy against the aligned-rows-only baseline, bytes, secagg's cost.

The setting mirrors the seed: three parties with bands of pixel rows (24 / 24 / 16
columns), ``--aligned`` rows on all three with labels at the server (20, like the
seed's N_A), unaligned pools of 130 / 1,300 / 2 rows (the seed's 500 / 5,000 / 2 scaled
to the digits' spare rows), 360 held-out aligned rows. Per split seed:

* **aligned only**: the same protocol with ``rounds = 0`` (the server fits adapters, gate
  and classifier on the aligned rows; the unaligned rows are never used);
* **protovfl secure / plain**: the default rounds, the unaligned statistics through
  secure aggregation or in the clear (the same fixed point: their predictions must be
  identical, which is checked);
* a centralised reference: multinomial logistic regression on the joined raw columns of
  the aligned rows (what one party holding every column of A alone would get).

Reported: test accuracy (mean and per seed), bytes per training round (protocol
messages only; alignment separately), wall time (median of ``--repeats``), and the extra
time and bytes of secure aggregation over the plaintext statistics. Times are wall
seconds of one in-process run (all parties share the machine's cores).

    .venv/bin/python bench/protovfl_bench.py                 # 5 split seeds, 3 repeats
    .venv/bin/python bench/protovfl_bench.py --seeds 2 --repeats 1 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import numpy as np


def _run(server: Any, parties: Any, cfg: Any, repeats: int) -> tuple[Any, float]:
    from vflcrypto.protocols import protovfl

    times, run = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        run = protovfl.run_local(server, parties, config=cfg)
        times.append(time.perf_counter() - t0)
    assert run is not None
    return run, statistics.median(times)


def _round_bytes(run: Any, rounds: int) -> float:
    training = sum(e.nbytes for e in run.transcript.sent() if e.kind != "protovfl.test_embedding")
    return training / (rounds + 1)


def main(argv: list[str] | None = None) -> int:
    from sklearn.linear_model import LogisticRegression
    from vflcrypto.protocols import protovfl

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5, help="split seeds 0..S-1")
    ap.add_argument("--aligned", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=protovfl.ProtoConfig().rounds)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per configuration (median)")
    ap.add_argument("--head-epochs", type=int, default=protovfl.ProtoConfig().head_epochs,
                    help="server fusion epochs per round (fewer: smoke tests)")
    ap.add_argument("--local-epochs", type=int, default=protovfl.ProtoConfig().local_epochs,
                    help="most local prototype epochs per round (fewer: smoke tests)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    rows: list[dict[str, Any]] = []
    for seed in range(args.seeds):
        server, parties = protovfl.digits_example(args.aligned, seed=seed)
        Xa = np.concatenate([p.X_overlap for p in parties], 1)
        Xt = np.concatenate([p.X_test for p in parties], 1)
        central = LogisticRegression(max_iter=5000).fit(Xa, server.y_overlap).score(Xt, server.y_test)
        sizes = {"head_epochs": args.head_epochs, "local_epochs": args.local_epochs}
        base, t_base = _run(server, parties, protovfl.ProtoConfig(rounds=0, **sizes), args.repeats)
        sec, t_sec = _run(server, parties, protovfl.ProtoConfig(rounds=args.rounds, **sizes), args.repeats)
        pla, t_pla = _run(server, parties, protovfl.ProtoConfig(rounds=args.rounds, secure=False, **sizes),
                          args.repeats)
        if not np.array_equal(sec.server.test_proba, pla.server.test_proba):
            raise SystemExit(f"seed {seed}: secure and plaintext predictions differ")
        labels, tables, test_ids = protovfl.digits_tables(args.aligned, seed=seed)
        t0 = time.perf_counter()
        aligned = protovfl.aligned_inputs(labels, tables, n_classes=10, test_ids=test_ids)
        t_psi = time.perf_counter() - t0
        rows.append({
            "seed": seed, "central_logreg": central, "aligned_only": base.test_accuracy,
            "protovfl": sec.test_accuracy, "seconds": {"aligned_only": t_base, "secure": t_sec, "plain": t_pla,
                                                       "alignment": t_psi},
            "bytes_per_round": {"aligned_only": _round_bytes(base, 0), "secure": _round_bytes(sec, args.rounds),
                                "plain": _round_bytes(pla, args.rounds)},
            "bytes_total": {"secure": sec.transcript.total_bytes, "plain": pla.transcript.total_bytes,
                            "alignment": aligned.psi_bytes},
            "gate_means": [float(w) for w in sec.server.gate_means]})

    def mean(key: str) -> float:
        return float(np.mean([r[key] for r in rows]))

    summary = {
        "machine": {"cpus": os.cpu_count(), "note": "in-process: every party in one process, threads"},
        "aligned": args.aligned, "rounds": args.rounds, "seeds": args.seeds, "repeats": args.repeats,
        "accuracy": {k: mean(k) for k in ("central_logreg", "aligned_only", "protovfl")},
        "gain_points": 100 * (mean("protovfl") - mean("aligned_only")),
        "seconds": {k: float(np.median([r["seconds"][k] for r in rows]))
                    for k in ("aligned_only", "secure", "plain", "alignment")},
        "bytes_per_round": {k: float(np.median([r["bytes_per_round"][k] for r in rows]))
                            for k in ("aligned_only", "secure", "plain")},
        "alignment_bytes": float(np.median([r["bytes_total"]["alignment"] for r in rows])),
        "per_seed": rows}
    s = summary["seconds"]
    b = summary["bytes_per_round"]
    summary["secagg_extra"] = {"seconds": s["secure"] - s["plain"], "time_ratio": s["secure"] / s["plain"],
                               "bytes_per_round": b["secure"] - b["plain"], "bytes_ratio": b["secure"] / b["plain"]}
    if args.json:
        print(json.dumps(summary, indent=2, default=float))
        return 0
    acc = summary["accuracy"]
    print(f"prototype VFL on the digits: {args.aligned} aligned rows, pools 130/1300/2, {args.rounds} rounds, "
          f"{args.seeds} split seeds, median of {args.repeats} timings, {os.cpu_count()} cores")
    print(f"{'seed':>4} {'central LR':>10} {'aligned only':>12} {'protovfl':>9}")
    for r in rows:
        print(f"{r['seed']:>4} {r['central_logreg']:>10.3f} {r['aligned_only']:>12.3f} {r['protovfl']:>9.3f}")
    print(f"mean {acc['central_logreg']:>10.3f} {acc['aligned_only']:>12.3f} {acc['protovfl']:>9.3f}   "
          f"(protovfl - aligned only: {summary['gain_points']:+.1f} points)")
    print(f"bytes per round: aligned only {b['aligned_only']:,.0f}, plain {b['plain']:,.0f}, secure {b['secure']:,.0f} "
          f"(x{summary['secagg_extra']['bytes_ratio']:.2f}); alignment {summary['alignment_bytes']:,.0f} B once")
    print(f"seconds: aligned only {s['aligned_only']:.2f}, plain {s['plain']:.2f}, secure {s['secure']:.2f} "
          f"(x{summary['secagg_extra']['time_ratio']:.2f}); alignment {s['alignment']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
