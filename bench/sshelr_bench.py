"""Two-party SSHE-LR against the coordinator protocol and plaintext, on FATE's breast and default_credit.

One run, side by side, on a public 80/20 split (seed 0) of each joined table:

* ``sshelr``: the secure two-party protocol (Paillier 2048 for each party, Taylor sigmoid);
* ``logreg secure``: the coordinator-style vertical logistic regression (the label holder
  owns the Paillier key, pairwise-masked logits, exact sigmoid; the guest's and the host's
  columns are two feature parties, the label holder a third party without features);
* ``Taylor GD (plain)``: the same iterations as sshelr in the clear (:func:`plaintext_fit`;
  the secure weights equal them to 1e-8, tests/test_sshelr.py), at the secure run's
  epochs and at ``--full-epochs``;
* ``sklearn``: scikit-learn's LogisticRegression (lbfgs, C = 1) on the joined columns.

Accuracy and AUC are on the held-out rows; seconds per epoch are the median over
``--repeat`` secure runs (key generation excluded; logreg's time includes its final
prediction round). default_credit (24,000 training rows) is slow at 2048 bits: it runs
``--credit-epochs`` epochs (no subsampling). Data: ``../shared/data/fate``; the script
stops with a message when it is absent.

Usage::

    .venv/bin/python bench/sshelr_bench.py --epochs 10 --credit-epochs 2 --repeat 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FATE = ROOT.parent / "shared" / "data" / "fate"


def load(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(X_guest, y, X_host)`` of FATE's ``name`` split, joined on the ID."""
    import pandas as pd

    guest = pd.read_csv(FATE / f"{name}_hetero_guest.csv")
    host = pd.read_csv(FATE / f"{name}_hetero_host.csv").add_prefix("h_").rename(columns={"h_id": "id"})
    j = guest.merge(host, on="id")
    return (j[[c for c in guest.columns if c not in ("id", "y")]].to_numpy(float), j["y"].to_numpy(float),
            j[[c for c in host.columns if c != "id"]].to_numpy(float))


def scores(y: np.ndarray, z: np.ndarray) -> tuple[float, float]:
    from sklearn.metrics import roc_auc_score

    return float(np.mean((z > 0) == (y == 1))), float(roc_auc_score(y, z))


def standardize(X: np.ndarray, train: np.ndarray) -> np.ndarray:
    mu, sd = X[train].mean(axis=0), X[train].std(axis=0)
    return (X - mu) / np.where(sd > 0, sd, 1.0)


def bench(name: str, epochs: int, full_epochs: int, repeat: int, key_bits: int, lr: float,
          allow_insecure: bool = False) -> list[tuple]:
    from sklearn.linear_model import LogisticRegression
    from vflcrypto.protocols import logreg, sshelr

    from vflcrypto.he.paillier import generate_keypair

    Xg, y, Xh = load(name)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(y))
    test, train = perm[: len(y) // 5], perm[len(y) // 5:]
    Zg, Zh = standardize(Xg, train), standardize(Xh, train)
    Za, _ = sshelr.prepare_active(Zg[train], y[train])
    Zp = sshelr.prepare_passive(Zh[train])
    Za_test = np.hstack([Zg[test], np.ones((len(test), 1))])
    rows = []

    t0 = time.perf_counter()
    sk = LogisticRegression(max_iter=5000).fit(np.hstack([Za[:, :-1], Zp]), y[train])
    z_sk = sk.decision_function(np.hstack([Zg[test], Zh[test]]))
    rows.append(("sklearn LogisticRegression", "-", *scores(y[test], z_sk), time.perf_counter() - t0, "total s"))
    for e in sorted({epochs, full_epochs}):
        t0 = time.perf_counter()
        wa, wp = sshelr.plaintext_fit(Za, y[train], Zp, sshelr.SSHELRParams(e, lr))
        rows.append(("Taylor GD (plain)", e, *scores(y[test], Za_test @ wa + Zh[test] @ wp),
                     (time.perf_counter() - t0) / e, "s/epoch"))

    keys = (generate_keypair(key_bits, allow_insecure=allow_insecure),
            generate_keypair(key_bits, allow_insecure=allow_insecure))
    times, run = [], None
    for _ in range(repeat):
        run = sshelr.run_local(Zg[train], y[train], Zh[train], params=sshelr.SSHELRParams(epochs, lr), keys=keys,
                               allow_insecure=allow_insecure)
        times.append(run.seconds / epochs)
    assert run is not None
    mb = run.transcript.total_bytes / epochs / 1e6
    rows.append((f"sshelr ({key_bits}-bit, 2 parties)", epochs,
                 *scores(y[test], Za_test @ run.active + Zh[test] @ run.passive), statistics.median(times),
                 f"s/epoch, {mb:.1f} MB/epoch"))

    lkeys = generate_keypair(key_bits, allow_insecure=allow_insecure)
    blocks = [np.hstack([Zg[train], np.ones((len(train), 1))]), Zh[train]]
    tblocks = [np.hstack([Zg[test], np.ones((len(test), 1))]), Zh[test]]
    times, lrun = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        lrun = logreg.run_local(blocks, y[train], tblocks, y[test], secure=True, steps=epochs, learning_rate=0.5,
                                keys=lkeys, allow_insecure=allow_insecure)
        times.append((time.perf_counter() - t0) / epochs)
    assert lrun is not None
    p = lrun.active.test_probabilities
    assert p is not None
    z = np.log(np.clip(p, 1e-15, 1)) - np.log(np.clip(1 - p, 1e-15, 1))
    mb = lrun.transcript.total_bytes / epochs / 1e6
    rows.append((f"logreg secure ({key_bits}-bit, coordinator = label holder)", epochs, *scores(y[test], z),
                 statistics.median(times), f"s/epoch, {mb:.1f} MB/epoch"))
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=10, help="secure epochs on breast")
    p.add_argument("--credit-epochs", type=int, default=2, help="secure epochs on default_credit")
    p.add_argument("--full-epochs", type=int, default=20, help="plaintext Taylor GD also at this many epochs")
    p.add_argument("--repeat", type=int, default=1, help="secure runs per protocol; the median is kept")
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--lr", type=float, default=0.3, help="sshelr learning rate (logreg: its own 0.5)")
    p.add_argument("--only", choices=("breast", "default_credit"), help="one data set")
    p.add_argument("--allow-insecure", action="store_true", help="accept keys below 2048 bits (smoke tests)")
    args = p.parse_args(argv)
    if not (FATE / "breast_hetero_guest.csv").exists():
        sys.exit(f"FATE's data are not in {FATE}")
    from vflcrypto import parallel

    ex = parallel.get_executor()
    if ex is not None:
        list(ex.map(abs, range(parallel.worker_count() * 4)))
    print(f"workers: {parallel.worker_count()}; Paillier {args.key_bits} bits; medians of {args.repeat} run(s)")
    for name, epochs in (("breast", args.epochs), ("default_credit", args.credit_epochs)):
        if args.only and name != args.only:
            continue
        print(f"\n{name}: test rows = 20 % (seed 0)")
        print(f"| {'method':<52} | epochs | accuracy | AUC    | seconds |")
        print(f"|{'-' * 54}|--------|----------|--------|---------|")
        for label, e, acc, auc, sec, unit in bench(name, epochs, args.full_epochs, args.repeat, args.key_bits,
                                                   args.lr, args.allow_insecure):
            print(f"| {label:<52} | {e!s:>6} | {acc:.4f}   | {auc:.4f} | {sec:7.3f} {unit}", flush=True)


if __name__ == "__main__":
    main()
