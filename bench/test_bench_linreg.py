"""Smoke test of bench/linreg_epoch.py at a tiny size (the full run is manual)."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "linreg_epoch", Path(__file__).resolve().parent / "linreg_epoch.py")
assert _spec is not None and _spec.loader is not None
linreg_epoch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(linreg_epoch)


def test_bench_runs_at_tiny_size() -> None:
    args = argparse.Namespace(rows=120, active_features=3, passive_features=2, epochs=2,
                              key_bits=512, allow_insecure=True, schemes="paillier,ckks")
    out = linreg_epoch.bench(args)
    for scheme in ("paillier", "ckks"):
        assert out[scheme]["epoch_s"] > 0
        assert out[scheme]["macs_per_s_per_core"] > 0 and out[scheme]["epochs_timed"] == 2
        assert out[scheme]["max_weight_error_vs_plaintext"] < 1e-2
    assert out["plaintext"]["epoch_s"] >= 0
    assert out["macs_per_epoch"] == 120 * 6
