"""CKKS throughput (pytest-benchmark). Size via VFL_BENCH_N (default 30000).

Smoke run: ``VFL_BENCH_N=100 pytest bench/test_bench_ckks.py --benchmark-disable``.
Values/s = N / mean time; dot reports multiply-accumulates (N * M).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from vflcrypto.he.ckks import CKKSContext, CKKSVector

N = int(os.environ.get("VFL_BENCH_N", "30000"))
M = int(os.environ.get("VFL_BENCH_M", "8"))


@pytest.fixture(scope="module")
def setup():
    ctx = CKKSContext.generate()
    rng = np.random.default_rng(0)
    x = rng.normal(size=N)
    v = CKKSVector.encrypt(ctx.public(), x)
    return ctx, x, v, rng.normal(size=(N, M))


ROUNDS = 3


def _report(benchmark, count: int, unit: str) -> None:
    benchmark.extra_info["workers"] = 1  # TenSEAL runs in this process (its own threads)
    if benchmark.stats is not None:
        benchmark.extra_info[f"{unit}_per_s_median"] = count / benchmark.stats.stats.median


def test_encrypt(benchmark, setup) -> None:
    ctx, x, _, _ = setup
    out = benchmark.pedantic(CKKSVector.encrypt, args=(ctx.public(), x), rounds=ROUNDS, iterations=1)
    np.testing.assert_allclose(out.decrypt(ctx, flood=False), x, atol=1e-3)
    _report(benchmark, N, "values")


def test_add(benchmark, setup) -> None:
    ctx, x, v, _ = setup
    out = benchmark.pedantic(lambda: v + v, rounds=ROUNDS, iterations=1)
    np.testing.assert_allclose(out.decrypt(ctx, flood=False), 2 * x, atol=1e-3)
    _report(benchmark, N, "values")


def test_mul_plain(benchmark, setup) -> None:
    ctx, x, v, _ = setup
    out = benchmark.pedantic(lambda: v * x, rounds=ROUNDS, iterations=1)
    np.testing.assert_allclose(out.decrypt(ctx, flood=False), x * x, atol=1e-3)
    _report(benchmark, N, "values")


def test_dot(benchmark, setup) -> None:
    ctx, x, v, X = setup
    out = benchmark.pedantic(v.dot, args=(X,), rounds=ROUNDS, iterations=1)
    np.testing.assert_allclose(out.decrypt(ctx, flood=False), X.T @ x, atol=1e-2)
    _report(benchmark, N * M, "mac")


def test_decrypt(benchmark, setup) -> None:
    ctx, x, v, _ = setup
    out = benchmark.pedantic(v.decrypt, args=(ctx,), rounds=ROUNDS, iterations=1)  # flooded: a release's cost
    np.testing.assert_allclose(out, x, atol=1e-3)
    _report(benchmark, N, "values")
    _report(benchmark, N, "values")
