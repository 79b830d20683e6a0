"""Xᵀ[[d]] at Paillier 2048: the unsigned kernel at 32 fractional bits against today's dot.

The secure linear regression's dominant product: ``rows`` encrypted residuals times a
``rows × cols`` plaintext feature block (default 30,000 × 13, standardized normal
features, default_credit's active block). Contenders, side by side in one run, each over
the process pool (``VFLCRYPTO_WORKERS``), median of ``--repeat``:

* ``unsigned, 32 bits``   the previous kernel (one unsigned bucket multi-exponentiation per
  sign and column) on features at a fixed 32 fractional bits;
* ``signed, 32 bits``      signed digits over one batch inversion shared by the columns;
* ``signed, from data``    the same at :func:`vflcrypto.he.encoding.significant_frac_bits`
  (24 significant bits at every column's largest value), as linreg now does.

Every result is decrypted and checked against numpy; the rate is multiply-accumulates
(rows × cols) per second, per wall second and per worker. A 4096-bit gmpy2 modular
multiplication rate is measured in the same run as the anchor.
Full run: ``.venv/bin/python bench/dot_compare.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import gmpy2
import numpy as np


def mulmod_rate(count: int = 20000) -> float:
    rng = np.random.default_rng(1)
    mod = gmpy2.mpz(int.from_bytes(rng.bytes(512), "big") | (1 << 4095) | 1)
    a = gmpy2.mpz(int.from_bytes(rng.bytes(512), "big")) % mod
    b = a + 1
    t0 = time.perf_counter()
    for _ in range(count):
        a = a * b % mod
    return count / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=30_000)
    ap.add_argument("--cols", type=int, default=13)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--allow-insecure", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from vflcrypto import parallel
    from vflcrypto.he.encoding import significant_frac_bits
    from vflcrypto.he.paillier import generate_keypair, kernels

    pk, sk = generate_keypair(args.key_bits, allow_insecure=args.allow_insecure)
    rng = np.random.default_rng(0)  # benchmark data, not a secret
    d = rng.normal(size=args.rows)
    X = rng.normal(size=(args.rows, args.cols))
    enc = pk.encrypt_fixed(d, 32)
    enc.dot(X[:, :1])  # ship the ciphertexts to the workers once (every contender reuses them)
    auto = significant_frac_bits(X)
    signed_pays = kernels._signed_pays
    contenders = {"unsigned, 32 bits": (False, 32), "signed, 32 bits": (True, 32),
                  f"signed, from data ({auto} bits)": (True, auto)}
    anchor = mulmod_rate()
    results: dict[str, Any] = {}
    medians: dict[str, float] = {}  # unrounded: a tiny run's rounded seconds can be 0
    try:
        for name, (signed, frac) in contenders.items():
            kernels._signed_pays = (lambda _X, signed=signed: signed)  # type: ignore[assignment]
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                out = enc.dot(X, frac)
                times.append(time.perf_counter() - t0)
            err = float(np.max(np.abs(sk.decrypt_fixed(out) - d @ X)))
            if err > 1e-4 * float(np.max(np.abs(d @ X))):
                raise SystemExit(f"{name}: result off by {err}")
            med = medians[name] = statistics.median(times)
            macs = args.rows * args.cols / med
            per_worker = macs / max(1, parallel.worker_count())
            results[name] = {"seconds": round(med, 3), "range": [round(min(times), 3), round(max(times), 3)],
                             "macs_per_s": round(macs), "macs_per_worker_s": round(per_worker),
                             "max_abs_error": err}
    finally:
        kernels._signed_pays = signed_pays  # type: ignore[assignment]
    base = medians["unsigned, 32 bits"]
    for name, r in results.items():
        r["speedup"] = round(base / medians[name], 2)
    out_d = {"rows": args.rows, "cols": args.cols, "key_bits": args.key_bits, "workers": parallel.worker_count(),
             "anchor_mulmod_4096_per_s": round(anchor), "results": results}
    if args.json:
        print(json.dumps(out_d, indent=2))
    else:
        print(f"X^T[[d]]: {args.rows:,} x {args.cols}, Paillier {args.key_bits}, {out_d['workers']} workers, "
              f"median of {args.repeat}; anchor {anchor:,.0f} mulmod/s (4096-bit, one core)")
        for name, r in results.items():
            print(f"{name:<28}{r['seconds']:>8.2f} s  {r['macs_per_s']:>9,} MAC/s  "
                  f"({r['macs_per_worker_s']:,}/worker)  {r['speedup']:.2f}x  max error {r['max_abs_error']:.1e}")
    return out_d


if __name__ == "__main__":
    main()
