"""Smoke tests of the obfuscator benchmarks at tiny sizes (full runs are manual): obfuscator_bench.py,
linreg_processes.py and linreg_epoch.py's paillier-online row."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(HERE))  # the scripts import linreg_epoch's helpers
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_obfuscator_bench_runs_at_tiny_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "1")
    out = _load("obfuscator_bench").bench(argparse.Namespace(n=3000, key_bits=512, repeats=1, allow_insecure=True))
    assert out["stocked"]["obfuscators_online"] == 0
    assert out["stocked"]["obfuscators_from_stock"] == out["ciphertexts"]
    for row in ("online-public", "online-key-holder", "stocked"):
        assert out[row]["values_per_s"] > 0 and out[row]["max_abs_error"] < 1e-5
    for row in ("precompute-key-holder", "precompute-public"):
        assert out[row]["obfuscators"] == out["ciphertexts"] and out[row]["cpu_us_per_obfuscator"] > 0


def test_linreg_processes_bench_runs_at_tiny_size() -> None:
    args = argparse.Namespace(rows=60, active_features=2, passive_features=2, epochs=2, key_bits=512,
                              test_fraction=0.1, modes="online,obfuscators", timeout=30.0, allow_insecure=True)
    out = _load("linreg_processes").bench(args)
    assert out["rows"] == 60
    assert out["online"]["obfuscators"] == {} and out["online"]["bytes_sent"]["coordinator"] < \
        out["obfuscators"]["bytes_sent"]["coordinator"]
    counts = out["obfuscators"]["obfuscators"]
    assert counts["from_stock"] + counts["online"] == 2 * 61
    for mode in ("online", "obfuscators"):
        assert len(out[mode]["epochs_s"]) == 2 and out[mode]["max_weight_error_vs_plaintext"] <= 1e-6


def test_linreg_epoch_bench_runs_paillier_with_and_without_obfuscators() -> None:
    args = argparse.Namespace(rows=120, active_features=3, passive_features=2, epochs=2, key_bits=512,
                              allow_insecure=True, schemes="paillier,paillier-online")
    out = _load("linreg_epoch").bench(args)
    counts = out["paillier"]["coordinator_obfuscators"]
    assert counts["from_stock"] + counts["online"] == 2 * 121
    assert out["paillier-online"]["coordinator_obfuscators"] == {}
    for row in ("paillier", "paillier-online"):
        assert out[row]["epochs_timed"] == 2 and out[row]["max_weight_error_vs_plaintext"] < 1e-6
