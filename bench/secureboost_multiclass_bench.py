"""Multiclass SecureBoost benchmark: time per tree and per round, both strategies, beside binary.

On FATE's 4-class ``vehicle_scale`` (846 × (9 + 9), from ``../shared/data/fate`` when
present) or, with ``--data synthetic``, a 4-class split of default_credit's shape
(30,000 × (13 + 10)), it trains in one run, encrypted (Paillier ``--key-bits``) and in
plaintext mode:

* ``multi_output_tree``   one tree per round, all K classes' (g, h) packed in one
  ciphertext per row (2K slots), leaf vectors (FATE's SBT-MO);
* ``one_output_per_tree`` K trees per round, one class's (g, h) each (XGBoost's default);
* ``binary`` (the anchor)  the same rows with the label "class 0 or not": one tree per round.

Per contender: seconds per tree (median and range over the trees, from the transcript:
one ``secureboost.gradients`` message opens each tree), seconds per round, the phases
(encrypt, histogram, decrypt, split search), bytes sent and the training accuracy (AUC for
the anchor). The encrypted trees must equal the plaintext mode's, or no speed is reported.
Full run: ``.venv/bin/python bench/secureboost_multiclass_bench.py [--data synthetic]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

FATE = Path(__file__).resolve().parents[2] / "shared" / "data" / "fate"
STRATEGIES = ("multi_output_tree", "one_output_per_tree")


def _bench_module() -> Any:
    spec = importlib.util.spec_from_file_location("secureboost_bench", Path(__file__).with_name("secureboost_bench.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("secureboost_bench", mod)
    spec.loader.exec_module(mod)
    return mod


def load_data(name: str, rows: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Active features + class labels 0..3, passive features."""
    guest, host = FATE / "vehicle_scale_hetero_guest.csv", FATE / "vehicle_scale_hetero_host.csv"
    if name == "vehicle_scale" and guest.exists() and host.exists():
        from vflcrypto.data.tables import read_party_csv

        a = read_party_csv(guest, "id", label="y")
        p = read_party_csv(host, "id")
        pos = {k: i for i, k in enumerate(p.ids)}
        assert a.label is not None
        Xa, y, Xp, src = a.X, a.label, p.X[[pos[k] for k in a.ids]], "vehicle_scale (FATE), 4 classes"
    else:
        rng = np.random.default_rng(0)  # example data, not a secret
        n = 30_000
        Xa, Xp = rng.normal(size=(n, 13)), rng.normal(size=(n, 10))
        z = np.column_stack([Xa[:, 0], Xp[:, 0], Xa[:, 1] + Xp[:, 1], np.zeros(n)])
        y = np.argmax(z + rng.normal(size=z.shape), axis=1).astype(np.float64)
        src = f"synthetic {n:,} x (13 + 10), 4 classes"
    if rows is not None:
        Xa, y, Xp = Xa[:rows], y[:rows], Xp[:rows]
    return Xa, y, Xp, src


def _contender(name: str, Xa: np.ndarray, y: np.ndarray, Xp: np.ndarray, params: Any, keys: Any,
               allow_insecure: bool, base: Any) -> dict[str, Any]:
    from vflcrypto.protocols import secureboost as sb

    from vflcrypto import parallel
    from vflcrypto.ml.metrics import roc_auc

    plain = sb.run_local(Xa, y, [Xp], params=params, plaintext=True, timeout=600)
    cpu0 = parallel.cpu_seconds()
    enc = sb.run_local(Xa, y, [Xp], params=params, keys=keys, allow_insecure=allow_insecure, timeout=600)
    cpu = parallel.cpu_seconds() - cpu0
    same = all(np.array_equal(getattr(plain.active.model, k), getattr(enc.active.model, k))
               for k in ("kind", "party", "feature", "bin", "value"))
    if not same:
        raise SystemExit(f"{name}: encrypted trees differ from the plaintext mode's: no speed reported")
    per_tree = base.tree_seconds(enc)
    rounds = params.n_trees
    pred = enc.active.train_predictions()
    quality = ({"train_auc": round(roc_auc(y, pred), 4)} if pred.ndim == 1
               else {"train_accuracy": round(float(np.mean(np.argmax(pred, axis=1) == y)), 4)})
    return {"trees": enc.active.model.n_trees, "rounds": rounds,
            "seconds_per_tree": {"median": round(statistics.median(per_tree), 3), "min": round(min(per_tree), 3),
                                 "max": round(max(per_tree), 3)},
            "seconds_per_round": round(enc.seconds / rounds, 3),
            "plaintext_seconds_per_round": round(plain.seconds / rounds, 4),
            "phases": {k: round(v, 3) for k, v in base.phases(enc).items()},
            "cpu_seconds": round(cpu, 2), "bytes_sent": sum(enc.bytes_sent.values()),
            "identical_trees": same, **quality}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", choices=("vehicle_scale", "synthetic"), default="vehicle_scale")
    ap.add_argument("--trees", type=int, default=5, help="boosting rounds per contender")
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--max-bin", type=int, default=32)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--allow-insecure", action="store_true", help="accept keys below 2048 bits (smoke tests)")
    ap.add_argument("--rows", type=int, default=None, help="use only the first ROWS rows (smoke tests)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from vflcrypto.protocols import secureboost as sb

    from vflcrypto import parallel
    from vflcrypto.he.paillier import generate_keypair

    base = _bench_module()
    Xa, y, Xp, src = load_data(args.data, args.rows)
    keys = generate_keypair(args.key_bits, allow_insecure=args.allow_insecure)
    common = {"n_trees": args.trees, "max_depth": args.depth, "max_bin": args.max_bin, "learning_rate": 0.3}
    results: dict[str, Any] = {"binary": _contender("binary", Xa, (y == 0).astype(np.float64), Xp,
                                                    sb.BoostParams(**common), keys, args.allow_insecure, base)}
    for strategy in STRATEGIES:
        params = sb.BoostParams(objective="multiclass", multi_strategy=strategy, **common)
        results[strategy] = _contender(strategy, Xa, y, Xp, params, keys, args.allow_insecure, base)
    out = {"data": src, "rows": len(y), "features": [Xa.shape[1], Xp.shape[1]], "classes": int(y.max()) + 1,
           "key_bits": args.key_bits, "workers": parallel.worker_count(), "cpus": os.cpu_count(),
           "rounds": args.trees, "depth": args.depth, "max_bin": args.max_bin, "results": results}
    if args.json:
        print(json.dumps(out, indent=2))
        return out
    print(f"multiclass SecureBoost on {src}: {len(y):,} rows, {args.trees} rounds, depth {args.depth}, "
          f"{args.max_bin} bins, Paillier {args.key_bits}, {out['workers']} workers")
    head = f"{'contender':<22}{'trees':>6}{'s/tree':>9}{'s/round':>9}{'encrypt':>9}{'hist':>8}{'decrypt':>9}" \
           f"{'MB sent':>9}  quality"
    print(head)
    for name, r in results.items():
        ph = r["phases"]
        q = f"AUC {r['train_auc']:.4f}" if "train_auc" in r else f"accuracy {r['train_accuracy']:.4f}"
        print(f"{name:<22}{r['trees']:>6}{r['seconds_per_tree']['median']:>9.2f}{r['seconds_per_round']:>9.2f}"
              f"{ph['encrypt']:>9.2f}{ph['histogram']:>8.2f}{ph['decrypt']:>9.2f}{r['bytes_sent'] / 2**20:>9.1f}"
              f"  {q} (trees identical to plaintext: {r['identical_trees']})")
    return out


if __name__ == "__main__":
    main()
