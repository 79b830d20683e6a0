"""Secure Poisson regression on FATE's dvisits (5,190 rows; 3 + 9 columns): time per epoch at
Paillier 2048 and the deviance against scikit-learn's PoissonRegressor on the joined table.

The secure run's iterations equal the plaintext ones (tests/test_poisson.py), so the
deviance after the default 50 epochs is read from the plaintext reference beside the
timed secure epochs. Synthetic counts of the same shape when ``../shared`` is absent.

Usage::

    .venv/bin/python bench/poisson_bench.py --epochs 5 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FATE = ROOT.parent / "shared" / "data" / "fate"


def data() -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    g, h = FATE / "dvisits_hetero_guest.csv", FATE / "dvisits_hetero_host.csv"
    if g.exists() and h.exists():
        import pandas as pd

        guest, host = pd.read_csv(g), pd.read_csv(h)
        j = guest.merge(host, on="id")
        return (j[["hscore", "chcond1", "chcond2"]].to_numpy(float), j["doctorco"].to_numpy(float),
                j[[c for c in host.columns if c != "id"]].to_numpy(float), "dvisits")
    from vflcrypto.protocols import poisson

    Xa, y, _, Xp, _ = poisson.example(5190)
    return Xa, y, Xp, "synthetic 5,190 rows"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=5, help="secure epochs to time")
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--repeat", type=int, default=3, help="secure runs; the median time per epoch is kept")
    p.add_argument("--rows", type=int, default=None, help="only the first ROWS rows (smoke tests)")
    p.add_argument("--allow-insecure", action="store_true", help="accept keys below 2048 bits (smoke tests)")
    args = p.parse_args(argv)
    from sklearn.linear_model import PoissonRegressor
    from vflcrypto.protocols import poisson

    from vflcrypto import parallel
    from vflcrypto.he.paillier import generate_keypair

    Xa, y, Xp, name = data()
    if args.rows is not None:
        Xa, y, Xp, name = Xa[:args.rows], y[:args.rows], Xp[:args.rows], f"{name}, first {args.rows} rows"
    keys = generate_keypair(args.key_bits, allow_insecure=args.allow_insecure)
    ex = parallel.get_executor()
    if ex is not None:
        list(ex.map(abs, range(parallel.worker_count() * 4)))
    runs = [poisson.run_local(Xa, y, Xp, params=poisson.PoissonParams(epochs=args.epochs), keys=keys,
                              allow_insecure=args.allow_insecure)
            for _ in range(args.repeat)]
    per_epoch = sorted(r.seconds / args.epochs for r in runs)
    run = runs[0]
    Za, yy = poisson.prepare_active(Xa, y)
    params = poisson.PoissonParams()
    wa, wp, _ = poisson.plaintext_fit(Za, yy, poisson.prepare_passive(Xp), params)
    ours = poisson.deviance(y, np.exp(Za @ wa + poisson.prepare_passive(Xp) @ wp))
    X = np.hstack([Xa, Xp])
    ref = poisson.deviance(y, PoissonRegressor(alpha=0, max_iter=2000, tol=1e-10).fit(X, y).predict(X))
    print(json.dumps({"data": name, "rows": len(y), "key_bits": args.key_bits, "workers": parallel.worker_count(),
                      "epochs_timed": args.epochs, "runs": args.repeat,
                      "seconds_per_epoch_median": round(statistics.median(per_epoch), 2),
                      "seconds_per_epoch_runs": [round(v, 2) for v in per_epoch],
                      "bytes_per_epoch": run.transcript.total_bytes // args.epochs,
                      "deviance_50_epochs": round(ours, 6), "sklearn_deviance": round(ref, 6),
                      "ratio": round(ours / ref, 5)}, indent=1))


if __name__ == "__main__":
    main()
