"""SecureBoost benchmark: default_credit (30,000 × 23), Paillier 2048 and OU, per-phase breakdown.

Runs the plaintext mode (same protocol, no encryption) and the encrypted mode under each
scheme of ``--schemes`` (default ``default,paillier``: the default of ``vflcrypto train
secureboost``, OU-2048 with 224-bit randomness, then Paillier at ``--key-bits``; ``ou`` for OU
at its conservative 3072-bit parameters, ``ou-heu`` for HEU's) on the same data, one after
the other in one run, and prints wall time per phase and bytes per party:

* ``encrypt``      active: packing + encrypting (g, h) per row, once per tree
* ``histogram``    passive: per-row ciphertext sums per (node, feature, bin), cumulative
                   sums, histogram subtraction, folding and re-randomization
* ``decrypt``      active: decrypting the folded candidates and unpacking them
* ``split_search`` active: own histograms, gains, choice of the best split

Encoding, sending and waiting are the rest of ``total`` (the parties run concurrently,
so the phases of different parties overlap in wall time and do not add up to it).

Uses ``../shared/data/fate/default_credit_hetero_{guest,host}.csv`` when present, else a
synthetic split of the same shape. With ``--trees`` below 30 the 30-tree time is
extrapolated linearly (every tree costs the same: one encryption of all rows and three
levels of histograms). Per-tree times (from the transcript: the first of a tree's
``secureboost.gradients`` parts opens it) are reported as median and range, with the worker count and the
CPU seconds of every process that worked. The encrypted trees must equal the plaintext
mode's, or no speed is reported. Full run: ``.venv/bin/python bench/secureboost_bench.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

FATE = Path(__file__).resolve().parents[2] / "shared" / "data" / "fate"


def load_data(rows: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Active features + label, passive features; real default_credit if available."""
    guest, host = FATE / "default_credit_hetero_guest.csv", FATE / "default_credit_hetero_host.csv"
    if guest.exists() and host.exists():
        from vflcrypto.data.tables import read_party_csv

        a = read_party_csv(guest, "id", label="y")
        p = read_party_csv(host, "id")
        pos = {k: i for i, k in enumerate(p.ids)}
        Xa, y, Xp, src = a.X, a.label, p.X[[pos[k] for k in a.ids]], "default_credit (FATE)"
    else:
        rng = np.random.default_rng(0)
        Xa, Xp = rng.normal(size=(30_000, 13)), rng.normal(size=(30_000, 10))
        y = (Xa[:, 0] + Xp[:, 0] + rng.normal(size=30_000) > 1.0).astype(float)
        src = "synthetic 30,000 x (13 + 10)"
    assert y is not None
    if rows is not None:
        Xa, y, Xp = Xa[:rows], y[:rows], Xp[:rows]
    return Xa, y, Xp, src


def phases(run: Any) -> dict[str, float]:
    a = run.active.timings
    histogram = sum(r.timings.get("histogram", 0.0) for r in run.passive.values())
    return {
        "encrypt": a.get("encrypt", 0.0),
        "histogram": histogram,
        "decrypt": a.get("decrypt", 0.0),
        "split_search": a.get("split_search", 0.0),
        "binning": a.get("binning", 0.0),
        "total": run.seconds,
    }


def tree_seconds(run: Any) -> list[float]:
    """Wall time of each tree: from its first gradients message to the next tree's (the last to the end).

    A tree's gradients may go in several parts (consecutive gradients sends): a tree starts at a gradients
    send that follows another kind of message."""
    kinds = ("secureboost.gradients", "secureboost.plain_gradients")
    sent = sorted(run.transcript.sent(), key=lambda e: e.time)
    starts = [e.time for i, e in enumerate(sent) if e.kind in kinds and (i == 0 or sent[i - 1].kind not in kinds)]
    end = max(e.time for e in run.transcript.entries())
    return [b - a for a, b in zip(starts, [*starts[1:], end], strict=True)]


def _run_scheme(sb: Any, scheme: str, Xa: np.ndarray, y: np.ndarray, Xp: np.ndarray, params: Any,
                args: argparse.Namespace, plain: Any, precompute: bool = True) -> dict[str, Any]:
    from vflcrypto import parallel
    from vflcrypto.he.schemes import describe, generate_keypair
    from vflcrypto.ml.metrics import roc_auc

    t0 = time.perf_counter()
    keys = generate_keypair(scheme, args.key_bits, allow_insecure=args.allow_insecure)
    keygen = time.perf_counter() - t0
    cpu0 = parallel.cpu_seconds()
    enc = sb.run_local(Xa, y, [Xp], params=params, keys=keys, allow_insecure=args.allow_insecure, timeout=600,
                       precompute=precompute)
    cpu = parallel.cpu_seconds() - cpu0
    same = all(np.array_equal(getattr(plain.active.model, k), getattr(enc.active.model, k))
               for k in ("kind", "party", "feature", "bin"))
    if not same:
        raise SystemExit(f"{scheme}: encrypted trees differ from the plaintext mode's: no speed reported")
    per_tree = tree_seconds(enc)
    ph = phases(enc)
    stock = enc.active.obfuscators
    return {
        # ou-heu and ou-2048 keys are both OU-2048: name HEU's parameters
        "key": (f"ou-heu-{keys[0].bits}" if scheme == "ou-heu" else describe(keys[0])) + (" pre" if precompute else ""),
        "keygen_seconds": round(keygen, 3),
        "obfuscators": None if stock is None else {"from_stock": stock.from_stock, "online": stock.online},
        "phases": {k: round(v, 3) for k, v in ph.items()},
        "trees_30_seconds": round(ph["total"] * 30 / args.trees, 1),
        "seconds_per_tree": {"median": round(statistics.median(per_tree), 3),
                             "min": round(min(per_tree), 3), "max": round(max(per_tree), 3)},
        "cpu_seconds": round(cpu, 2), "cores_used": round(cpu / enc.seconds, 2),
        "auc_train": roc_auc(y, enc.active.train_predictions()), "identical_trees": same,
        "bytes_sent": enc.bytes_sent,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trees", type=int, default=30)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--max-bin", type=int, default=32)
    ap.add_argument("--key-bits", type=int, default=2048, help="Paillier modulus bits (OU: at least 3072)")
    ap.add_argument("--schemes", default="default,paillier",
                    help="comma-separated: default (what `vflcrypto train secureboost` uses without --scheme: "
                         "ou-2048), paillier, ou, ou-heu, ou-2048")
    ap.add_argument("--precompute", choices=("on", "off", "both"), default="off",
                    help="the active party's obfuscators for the next tree in idle time (low-priority pool); "
                         "both: each scheme with and without, side by side")
    ap.add_argument("--allow-insecure", action="store_true", help="accept keys below 2048 bits (smoke tests)")
    ap.add_argument("--rows", type=int, default=None, help="use only the first ROWS rows (smoke tests)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from vflcrypto.protocols import secureboost as sb

    from vflcrypto import parallel
    from vflcrypto.ml.metrics import roc_auc

    Xa, y, Xp, src = load_data(args.rows)
    params = sb.BoostParams(n_trees=args.trees, max_depth=args.depth, max_bin=args.max_bin,
                            learning_rate=0.3)
    plain = sb.run_local(Xa, y, [Xp], params=params, plaintext=True, timeout=600)
    schemes = [sb.DEFAULT_SCHEME if x.strip() == "default" else x.strip() for x in args.schemes.split(",") if x.strip()]
    modes = {"on": (True,), "off": (False,), "both": (False, True)}[args.precompute]
    runs = {f"{scheme}{'-precompute' if pre else ''}": _run_scheme(sb, scheme, Xa, y, Xp, params, args, plain, pre)
            for scheme in schemes for pre in modes}
    ph_p = phases(plain)
    out = {
        "data": src, "rows": len(y), "features": [Xa.shape[1], Xp.shape[1]],
        "trees": args.trees, "depth": args.depth, "max_bin": args.max_bin,
        "workers": parallel.worker_count(), "cpus": os.cpu_count(),
        "plaintext": {"phases": {k: round(v, 3) for k, v in ph_p.items()},
                      "auc_train": roc_auc(y, plain.active.train_predictions()), "bytes_sent": plain.bytes_sent},
        "encrypted": runs,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return out
    print(f"SecureBoost on {src}: {len(y):,} rows, {Xa.shape[1]} + {Xp.shape[1]} features, "
          f"{args.trees} trees, depth {args.depth}, {args.max_bin} bins, {out['workers']} workers, one run")
    print(f"{'phase (s)':<14}" + "".join(f"{r['key']:>14}" for r in runs.values()) + f"{'plaintext':>14}")
    for k in ph_p:
        print(f"{k:<14}" + "".join(f"{r['phases'][k]:>14.2f}" for r in runs.values()) + f"{ph_p[k]:>14.2f}")
    for r in runs.values():
        t = r["seconds_per_tree"]
        print(f"{r['key']}: per tree median {t['median']:.2f} s (range {t['min']:.2f} - {t['max']:.2f}); "
              f"{r['cpu_seconds']:.1f} CPU s ({r['cores_used']} cores used); 30 trees ≈ {r['trees_30_seconds']:.0f} s"
              + ("" if args.trees == 30 else " (extrapolated)") + f"; keygen {r['keygen_seconds']:.2f} s; "
              f"bytes {sum(r['bytes_sent'].values()):,}; train AUC {r['auc_train']:.4f}; trees identical to "
              f"plaintext: {r['identical_trees']}"
              + ("" if r["obfuscators"] is None else f"; obfuscators from the stock {r['obfuscators']['from_stock']:,}"
                 f", online {r['obfuscators']['online']:,}"))
    print(f"plaintext: {ph_p['total'] / args.trees:.3f} s per tree; train AUC {out['plaintext']['auc_train']:.4f}")
    return out


if __name__ == "__main__":
    main()
