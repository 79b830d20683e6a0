"""Packed gradient encryption with precomputed obfuscators, beside online encryption, in one run.

What ``vflcrypto bench gradients`` calls the packed ``encrypt`` row: ``n`` float gradients
packed as densely as the key allows (``PackingSpec.create(max_terms=n, frac_bits=24,
bound=4.0)``, the same spec), timed ``--repeats`` times, every result decrypted and checked.
Rows, all in this process and its pools, one after the other:

* ``online-public``: ``pk.encrypt_fixed(g, packing=spec)`` (DJN fixed-base tables, the pool);
* ``online-key-holder``: the same by the private key's CRT path (a key holder, e.g.
  SecureBoost's active party);
* ``stocked``: :meth:`ObfuscatorStock.encrypt_fixed` with every obfuscator already stocked
  (the online cost: packing, ``g**m`` and one multiplication per ciphertext);
* ``precompute-key-holder`` / ``precompute-public``: the producer's cost, stated apart: the
  time a stock of one vector's obfuscators takes to fill on the low-priority pool
  (``workers`` processes at nice 19), and its CPU seconds (the background workers plus this
  process) per obfuscator and per value. The first fill (pool start-up and the background
  workers' fixed-base tables) is reported on its own; the rate is the median of the rest.

The set-up (keys, tables, pool start-up, a warm-up of each path) is timed once as
``setup_s``. An anchor (gmpy2 4096-bit mulmod rate, i.e. mod n² of a 2048-bit key) is
measured in the same run. Nothing else should run beside it; say so if something did.

    .venv/bin/python bench/obfuscator_bench.py                     # 200,000 values, Paillier 2048
    .venv/bin/python bench/obfuscator_bench.py --n 20000 --key-bits 1024 --allow-insecure
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from linreg_epoch import mulmod_anchor

from vflcrypto import parallel
from vflcrypto.he.encoding import PackingSpec
from vflcrypto.he.obfuscators import ObfuscatorStock
from vflcrypto.he.paillier import generate_keypair


def _timed(fn: Callable[[], Any], check: Callable[[Any], float], repeats: int, values: int,
           before: Callable[[], None] | None = None) -> dict[str, Any]:
    walls, cpus, err = [], [], 0.0
    for _ in range(repeats):
        if before is not None:
            before()
        c0, t0 = parallel.cpu_seconds(), time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(parallel.cpu_seconds() - c0)
        err = max(err, check(out))
    if not err <= 1e-5:
        raise SystemExit(f"max abs error {err:.3g} > 1e-5: no speed reported")
    med = statistics.median(walls)
    return {"values_per_s": round(values / med), "values_per_s_range": [round(values / max(walls)),
                                                                        round(values / min(walls))],
            "values_per_cpu_s": round(values / statistics.median(cpus)), "wall_s": [round(w, 4) for w in walls],
            "max_abs_error": err}


def _precompute(stock: ObfuscatorStock[Any], count: int, repeats: int, values: int) -> dict[str, Any]:
    """Fill ``stock`` (``count`` obfuscators) ``repeats + 1`` times; the first fill is cold."""
    fills = []
    stock.start()
    for _ in range(repeats + 1):
        stock.take(len(stock))  # empty it (the producer refills at once)
        c0 = time.process_time() + parallel.background_cpu_seconds()
        t0 = time.perf_counter()
        if not stock.wait(count, timeout=3600):
            raise SystemExit(f"the producer stopped: {stock.error}")
        fills.append((time.perf_counter() - t0, time.process_time() + parallel.background_cpu_seconds() - c0))
    cold, warm = fills[0], fills[1:]
    wall = statistics.median(w for w, _ in warm)
    cpu = statistics.median(c for _, c in warm)
    return {"obfuscators": count, "fill_s": round(wall, 3), "fill_s_cold": round(cold[0], 3),
            "obfuscators_per_s": round(count / wall), "cpu_s": round(cpu, 3),
            "cpu_us_per_obfuscator": round(1e6 * cpu / count, 1), "cpu_ns_per_value": round(1e9 * cpu / values, 1),
            "values_per_s_equivalent": round(values / wall)}


def bench(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(7)  # synthetic benchmark data, not secret
    g = rng.uniform(-1, 1, args.n)
    t0 = time.perf_counter()
    pk, sk = generate_keypair(args.key_bits, allow_insecure=args.allow_insecure)
    spec = PackingSpec.create(max_terms=args.n, frac_bits=24, bound=4.0)
    per = spec.slots_in(pk.plaintext_bits)
    cts = -(-args.n // per)
    pk.encrypt_fixed(g, packing=spec)  # tables, pool start-up: a long-running party's state
    sk.encrypt_fixed(g, packing=spec)
    setup = time.perf_counter() - t0

    def check(v: Any) -> float:
        return float(np.max(np.abs(sk.decrypt_fixed(v)[: args.n] - g)))

    out: dict[str, Any] = {"n": args.n, "key_bits": pk.bits, "values_per_ciphertext": per, "ciphertexts": cts,
                           "workers": max(1, parallel.worker_count()), "cores": os.cpu_count(),
                           "anchor_mulmod_4096_per_s": round(mulmod_anchor()), "setup_s": round(setup, 3)}
    out["online-public"] = _timed(lambda: pk.encrypt_fixed(g, packing=spec), check, args.repeats, args.n)
    out["online-key-holder"] = _timed(lambda: sk.encrypt_fixed(g, packing=spec), check, args.repeats, args.n)
    with ObfuscatorStock(sk, cts) as stock:
        out["precompute-key-holder"] = _precompute(stock, cts, args.repeats, args.n)

        def full() -> None:
            stock.wait(cts, timeout=3600)

        before = stock.stats()
        out["stocked"] = _timed(lambda: stock.encrypt_fixed(g, packing=spec), check, args.repeats, args.n, full)
        after = stock.stats()
        out["stocked"]["obfuscators_from_stock"] = after.from_stock - before.from_stock
        out["stocked"]["obfuscators_online"] = after.online - before.online
    with ObfuscatorStock(pk, cts) as stock:
        out["precompute-public"] = _precompute(stock, cts, args.repeats, args.n)
    out["speedup_stocked_vs_online_key_holder"] = round(
        out["stocked"]["values_per_s"] / out["online-key-holder"]["values_per_s"], 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200_000, help="gradient values per encryption")
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--allow-insecure", action="store_true")
    args = p.parse_args(argv)
    print(json.dumps(bench(args), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
