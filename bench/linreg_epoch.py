"""Per-epoch time of secure vertical linear regression (full batch), beside plaintext.

Default shape: 30,000 rows × (13 active + 10 passive) features — default_credit's shape,
synthetic data. Runs ``--epochs`` (default 3) full-batch epochs per scheme over in-process
Channels and reports, per scheme, each epoch's time from the transcript (from one
``linreg.control`` to the next; the first from B's plan, so key generation and CKKS
context set-up are excluded and reported separately) as the median and range over the
epochs, bytes sent, the worker count, and multiply-accumulates per second: per wall
second and per CPU second of every process that worked (this one's threads plus the
pool's workers). An epoch does rows × (features of every party + 1 for the loss)
ciphertext-by-plaintext multiply-accumulates. FATE's reference is ~15,000/core at 2048
bits. Before any speed is reported, the weights are checked against plaintext gradient
descent on the joined table under the same configuration (CKKS's on
the standardized label it trains on). An anchor (4096-bit gmpy2 mulmod rate, i.e. mod n²) is
measured in the same run. Scheme ``paillier`` runs with the default configuration (the
coordinator supplies the passive party's obfuscators); ``paillier-online`` without them
(the passive party computes its own); every party here shares one process and its pool, so
for the parties in separate processes see ``bench/linreg_processes.py``.

    .venv/bin/python bench/linreg_epoch.py                 # full size (a minute or two)
    .venv/bin/python bench/linreg_epoch.py --rows 300 --key-bits 512 --allow-insecure
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import gmpy2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vflcrypto.protocols import linreg as lr

from vflcrypto import parallel
from vflcrypto.data.tables import PartyTable


def synthetic(rows: int, p_active: int, p_passive: int, seed: int = 0
              ) -> tuple[PartyTable, PartyTable]:
    rng = np.random.default_rng(seed)
    ids = tuple(str(i) for i in range(rows))
    Xb, Xa = rng.normal(size=(rows, p_active)), rng.normal(size=(rows, p_passive))
    y = Xb @ rng.normal(size=p_active) + Xa @ rng.normal(size=p_passive) + rng.normal(size=rows)
    return (PartyTable(ids, tuple(f"b{j}" for j in range(p_active)), Xb, y, "y"),
            PartyTable(ids, tuple(f"a{j}" for j in range(p_passive)), Xa))


def mulmod_anchor(bits: int = 4096, count: int = 20000) -> float:
    """gmpy2 modular multiplications per second at ``bits`` (the n² of a 2048-bit key)."""
    rng = np.random.default_rng(1)
    mod = gmpy2.mpz(int.from_bytes(rng.bytes(bits // 8), "big") | (1 << (bits - 1)) | 1)
    a = gmpy2.mpz(int.from_bytes(rng.bytes(bits // 8), "big")) % mod
    b = a + 1
    t0 = time.perf_counter()
    for _ in range(count):
        a = a * b % mod
    return count / (time.perf_counter() - t0)


def epoch_seconds(transcript: Any) -> list[float]:
    """Each epoch's wall time: B's plan, then C's control message closing each epoch."""
    t_plan = min(e.time for e in transcript.sent() if e.kind == "linreg.plan")
    ends = sorted({round(e.time, 9) for e in transcript.received()
                   if e.kind == "linreg.control" and e.receiver == "active"})
    return [b - a for a, b in zip([t_plan, *ends], ends, strict=False)]


def bench(args: argparse.Namespace) -> dict[str, Any]:
    active, passive = synthetic(args.rows, args.active_features, args.passive_features)
    cores = os.cpu_count() or 1
    macs = args.rows * (args.active_features + args.passive_features + 1)
    out: dict[str, Any] = {"rows": args.rows, "features": [args.active_features,
                                                           args.passive_features],
                           "cores": cores, "workers": max(1, parallel.worker_count()),
                           "macs_per_epoch": macs, "anchor_mulmod_4096_per_s": round(mulmod_anchor())}
    cfg0 = lr.LinRegConfig(epochs=args.epochs, lr=0.1, tol=None)
    t0 = time.perf_counter()
    lr.plaintext_gradient_descent(active.X, active.label, [passive.X], config=cfg0)
    out["plaintext"] = {"epoch_s": (time.perf_counter() - t0) / args.epochs}
    for row in args.schemes.split(","):
        scheme = row.removesuffix("-online")
        cfg = lr.LinRegConfig(epochs=args.epochs, lr=0.1, tol=None, scheme=scheme,
                              key_bits=args.key_bits, coordinator_obfuscators=not row.endswith("-online"))
        t0 = time.perf_counter()
        setup: dict[str, Any] = {}
        if scheme == "paillier":
            from vflcrypto.he.paillier import generate_keypair

            setup["keys"] = generate_keypair(args.key_bits, allow_insecure=args.allow_insecure)
        else:
            from vflcrypto.he.ckks import CKKSContext

            setup["ckks_context"] = CKKSContext.generate()
        keygen = time.perf_counter() - t0
        cpu0 = parallel.cpu_seconds()
        run = lr.run_local(active, [passive], config=cfg, allow_insecure=args.allow_insecure,
                           timeout=3600, **setup)
        cpu = parallel.cpu_seconds() - cpu0
        # The reference under this row's own configuration: CKKS trains on the standardized label
        # (label_scaling "auto"), Paillier on the label as given; each weight is in its label's units.
        ref = lr.plaintext_gradient_descent(active.X, active.label, [passive.X], config=cfg)
        err = max(float(np.max(np.abs(run.active.model.weights - ref.active_weights))),
                  float(np.max(np.abs(run.passives[0].model.weights - ref.passive_weights[0]))))
        tol = 1e-6 if scheme == "paillier" else 1e-2
        if not err <= tol:
            raise SystemExit(f"{row}: weights differ from plaintext gradient descent by {err:.3g} "
                             f"(> {tol:g}); no speed reported")
        epochs = epoch_seconds(run.transcript)
        per_epoch = statistics.median(epochs)
        out[row] = {
            "epoch_s": round(per_epoch, 3),
            "epoch_s_range": [round(min(epochs), 3), round(max(epochs), 3)],
            "epochs_timed": len(epochs),
            "run_s_including_key_distribution": round(run.seconds, 3),
            "keygen_s": round(keygen, 3),
            "macs_per_s_wall": round(macs / per_epoch),
            "macs_per_s_per_core": round(macs * len(epochs) / cpu),
            "cores_used": round(cpu / run.seconds, 2),
            "bytes_per_epoch": run.transcript.total_bytes // args.epochs,
            "final_loss": run.losses[-1],
            "max_weight_error_vs_plaintext": err,
        }
        if scheme == "paillier":
            out[row]["key_bits"] = args.key_bits
            out[row]["coordinator_obfuscators"] = run.coordinator.obfuscators
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=30_000)
    p.add_argument("--active-features", type=int, default=13)
    p.add_argument("--passive-features", type=int, default=10)
    p.add_argument("--epochs", type=int, default=3, help="epochs timed (median and range reported)")
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--allow-insecure", action="store_true")
    p.add_argument("--schemes", default="paillier,ckks", help="comma-separated: paillier, paillier-online, ckks")
    args = p.parse_args(argv)
    result = bench(args)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
