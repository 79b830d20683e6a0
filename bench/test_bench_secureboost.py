"""Smoke test of the SecureBoost benchmark script at a tiny size (not a benchmark)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest


def _load():
    path = Path(__file__).with_name("secureboost_bench.py")
    spec = importlib.util.spec_from_file_location("secureboost_bench", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_runs_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    out = _load().main(["--trees", "1", "--depth", "2", "--rows", "150", "--max-bin", "8",
                        "--key-bits", "768", "--allow-insecure", "--schemes", "paillier,ou", "--json"])
    assert set(out["encrypted"]) == {"paillier", "ou"}
    for run in out["encrypted"].values():
        assert run["identical_trees"] is True
        assert set(run["phases"]) >= {"encrypt", "histogram", "decrypt", "split_search", "binning", "total"}
    assert out["encrypted"]["ou"]["key"] == "ou-768"
    assert '"trees_30_seconds"' in capsys.readouterr().out


def test_multiclass_bench_runs_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).with_name("secureboost_multiclass_bench.py")
    spec = importlib.util.spec_from_file_location("secureboost_multiclass_bench", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main(["--data", "synthetic", "--trees", "1", "--depth", "2", "--rows", "150", "--max-bin", "8",
                    "--key-bits", "512", "--allow-insecure", "--json"])
    assert set(out["results"]) == {"binary", "multi_output_tree", "one_output_per_tree"}
    assert all(r["identical_trees"] for r in out["results"].values())
    assert out["results"]["one_output_per_tree"]["trees"] == 4 * out["results"]["multi_output_tree"]["trees"]
    assert '"seconds_per_round"' in capsys.readouterr().out


def test_processes_bench_runs_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).with_name("secureboost_processes.py")
    spec = importlib.util.spec_from_file_location("secureboost_processes", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--rows", "300", "--trees", "2", "--depth", "2", "--max-bin", "8", "--key-bits", "768",
                     "--allow-insecure", "--part-rows", "100"]) == 0
    out = capsys.readouterr().out
    assert '"speedup_ou"' in out and '"identical_trees": true' in out and '"from_stock"' in out
    runs = json.loads(out)["runs"]  # each tree's gradients in three parts through the party command
    assert {r["gradient_part_rows"] for r in runs.values()} == {100}
    assert [r["per_tree_s"]["trees"] for r in runs.values()] == [2] * len(runs)
