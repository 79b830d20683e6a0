"""PSI throughput (pytest-benchmark) and a smoke test of bench/psi_compare.py.

Size via VFL_BENCH_N (default 20000 IDs per party, 50% overlap).
Smoke run: ``VFL_BENCH_N=500 pytest bench/test_bench_psi.py --benchmark-disable``.
The full comparison against openmined-psi: ``.venv/bin/python bench/psi_compare.py``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from vflcrypto.protocols.align import ACTIVE, run_local

N = int(os.environ.get("VFL_BENCH_N", "20000"))
LEFT = [f"user-{i}" for i in range(N)]
RIGHT = [f"user-{i}" for i in range(N // 2, N // 2 + N)]


@pytest.mark.parametrize("protocol", ["ecdh", "hash"])
def test_psi_both_learn(benchmark, protocol: str) -> None:
    run = benchmark.pedantic(run_local, args=(LEFT, RIGHT), kwargs={"protocol": protocol},
                             rounds=1, iterations=1)
    assert run.results[ACTIVE].size == N - N // 2
    if benchmark.stats is not None:
        benchmark.extra_info["ids_per_s"] = 2 * N / benchmark.stats.stats.mean


def test_psi_compare_script_smoke() -> None:
    spec = importlib.util.spec_from_file_location("psi_compare", Path(__file__).with_name("psi_compare.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    contenders = ["ecdh", "hash"]
    if importlib.util.find_spec("private_set_intersection") is not None:
        contenders.append("openmined")
    results = mod.main(["--sizes", "400", "--json", "--contenders", *contenders])
    assert {r["contender"] for r in results} == set(contenders)
    for r in results:
        assert r["intersection"] == 200, r
        assert r["wall_s"] > 0 and r["cpu_s"] > 0 and r["bytes"] > 0 and r["peak_rss_mib"] > 0
