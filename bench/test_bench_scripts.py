"""Every benchmark script produces its rows at a tiny size (smoke tests, not benchmarks: CI runs them).

Each test runs one script's ``main`` with the smallest settings its flags allow (small keys
with ``--allow-insecure``, a few rows, one repeat) and checks the rows it prints or
returns. :func:`test_every_benchmark_script_has_a_smoke_test` keeps it so: a script of
bench/ with a ``main`` must be named by a test module of bench/ (loaded there by file
name), so a benchmark that can no longer produce its row fails a test instead of going
unnoticed. Scripts that need something absent here (SecretFlow's SPU or SGB) skip with the reason.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
HELPERS = {"conftest", "party_processes"}  # modules of bench/ without a main of their own


def _load(name: str) -> ModuleType:
    """bench/NAME.py as a module (its ``main`` not run)."""
    sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses resolve their module's annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


def _json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects a script printed, one per line or one indented document."""
    text = text.strip()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_every_benchmark_script_has_a_smoke_test() -> None:
    scripts = {p.stem for p in HERE.glob("*.py") if not p.name.startswith("test_") and p.stem not in HELPERS
               and any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in ast.parse(p.read_text()).body)}
    named: set[str] = set()
    # the Ray bench's smoke test lives in tests/test_parallel.py, beside the other Ray test (one xdist worker)
    for test in [*HERE.glob("test_*.py"), HERE.parent / "tests" / "test_parallel.py"]:
        named |= {n.value for n in ast.walk(ast.parse(test.read_text()))
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert len(scripts) >= 18
    assert sorted(scripts - named) == []


def test_dot_compare_runs_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    out = _load("dot_compare").main(["--rows", "40", "--cols", "2", "--key-bits", "512", "--allow-insecure",
                                      "--repeat", "1", "--json"])
    assert len(out["results"]) == 3 and all(r["macs_per_s"] > 0 for r in out["results"].values())
    assert _json_lines(capsys.readouterr().out)[0]["rows"] == 40


def test_poisson_bench_runs_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    _load("poisson_bench").main(["--rows", "120", "--epochs", "1", "--repeat", "1", "--key-bits", "512",
                                 "--allow-insecure"])
    out = _json_lines(capsys.readouterr().out)[0]
    assert out["rows"] == 120 and out["seconds_per_epoch_median"] >= 0 and out["ratio"] > 0


def test_woe_bench_runs_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    _load("woe_bench").main(["--rows", "150", "--repeat", "1", "--key-bits", "512", "--allow-insecure"])
    out = _json_lines(capsys.readouterr().out)[0]
    assert out["rows"] == 150 and out["wall_s_median"] > 0 and out["max_iv"] >= 0


@pytest.mark.shared_data
def test_sshelr_bench_runs_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    mod = _load("sshelr_bench")
    if not (mod.FATE / "breast_hetero_guest.csv").exists():
        pytest.skip(f"FATE's breast data are not in {mod.FATE}")
    mod.main(["--only", "breast", "--epochs", "1", "--full-epochs", "1", "--key-bits", "512", "--allow-insecure"])
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| ") and "method" not in ln]
    assert any(r.startswith("| sshelr") for r in rows) and any(r.startswith("| logreg secure") for r in rows)


def test_transport_bench_runs_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    _load("transport_bench").main(["--ids", "200", "--block-mb", "1", "--chunk-kb", "256"])
    out = _json_lines(capsys.readouterr().out)[0]
    assert set(out) == {"alignment", "block"}


def test_psi_scale_runs_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _load("psi_scale").main(["--sizes", "300", "--protocols", "ecdh", "--workdir", str(tmp_path)])
    rows = _json_lines(capsys.readouterr().out)
    assert len(rows) == 1


def test_protovfl_bench_runs_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    assert _load("protovfl_bench").main(["--seeds", "1", "--rounds", "1", "--repeats", "1", "--head-epochs", "5",
                                            "--local-epochs", "1", "--json"]) == 0
    out = _json_lines(capsys.readouterr().out)[0]
    assert set(out["accuracy"]) == {"central_logreg", "aligned_only", "protovfl"} and len(out["per_seed"]) == 1


def test_repvfl_bench_runs_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    out = _load("repvfl_bench").main(["--overlaps", "20", "--seeds", "1", "--methods", "split", "oneshot",
                                      "--json"])
    assert {r["method"] for r in out["table"].values()} == {"split", "oneshot"}


def test_privacy_frontier_runs_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Marvell and grad-gauss at one budget each on 120 binary overlap rows, 2 epochs: tables, the comparison at
    equal leak, the plaintext model, a PNG and an HTML page."""
    pytest.importorskip("torch")
    png, page = tmp_path / "f.png", tmp_path / "f.html"
    out = _load("privacy_frontier").main(["--overlap", "120", "--epochs", "2", "--budgets", "marvell=4",
                                          "--budgets", "grad-gauss=64", "--png", str(png), "--html", str(page),
                                          "--json"])
    assert [f["defence"] for f in out["frontiers"]] == ["marvell", "grad-gauss"]
    assert all(len(f["points"]) == 2 and 0 < f["points"][1]["utility"]["test_auc"] <= 1 for f in out["frontiers"])
    assert out["frontiers"][0]["points"][1]["epsilon"] is None and out["frontiers"][1]["points"][1]["epsilon"] > 0
    assert out["comparisons"][0]["first"] == "marvell" and 0 < out["plaintext"]["test_auc"] <= 1
    assert png.read_bytes()[:4] == b"\x89PNG" and "<svg" in page.read_text()
    assert _json_lines(capsys.readouterr().out)[0]["setting"]["overlap"] == 120


def test_secagg_bench_runs_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not (Path(sys.prefix) / "bin" / "flwr").exists():
        pytest.skip("Flower not installed (the flower extra)")
    rows_file = tmp_path / "rows.json"
    assert _load("secagg_bench").main(["--clients", "3", "--length", "10", "--drops", "0", "--repeats", "1",
                                       "--timeout", "240", "--json", str(rows_file)]) == 0
    rows = json.loads(rows_file.read_text())
    assert len(rows) == 1


def test_spu_psi_compare_runs_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("spu", reason="SecretFlow SPU is not installed (the comparison's other side)")
    left, right = tmp_path / "left.csv", tmp_path / "right.csv"
    left.write_text("id\n" + "".join(f"id{i}\n" for i in range(100)))
    right.write_text("id\n" + "".join(f"id{i}\n" for i in range(50, 150)))
    _load("spu_psi_compare").main(["--files", str(left), str(right), "--protocols", "PROTOCOL_ECDH"])
    assert _json_lines(capsys.readouterr().out)[0]["intersection"] == 50


def test_sgb_compare_runs_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("secretflow", reason="SecretFlow is not installed (the comparison's other side)")
    # numpy RNG only for example data
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 5)), rng.integers(0, 2, 200)
    guest, host = tmp_path / "guest.csv", tmp_path / "host.csv"
    guest.write_text("id,y,a,b,c\n" + "".join(f"r{i},{y[i]},{X[i, 0]},{X[i, 1]},{X[i, 2]}\n" for i in range(200)))
    host.write_text("id,d,e\n" + "".join(f"r{i},{X[i, 3]},{X[i, 4]}\n" for i in reversed(range(200))))
    rows = _load("sgb_compare").main(["--guest", str(guest), "--host", str(host), "--trees", "1", "--depth", "2",
                                      "--max-bin", "8", "--mode", "debug"])
    assert [r["scheme"] for r in rows] == ["sgb-ou-2048"] and 0.5 <= rows[0]["auc_train"] <= 1.0


def test_hostile_review_runs_two_cases(capsys: pytest.CaptureFixture[str]) -> None:
    """The review script (outside CI: about 18 cases) judges a case as the user sees it; here two quick ones."""
    assert _load("hostile_review").main(["--only", "id,id", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["case"] for r in out] == ["duplicate header id,id"] and out[0]["ok"], out
    assert _load("hostile_review").main(["--only", "chunk-size", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["ok"]


def test_psi_unbalanced_runs_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _load("psi_unbalanced").main(["--large", "400", "--small", "40", "10", "--added", "0.05",
                                         "--workdir", str(tmp_path)]) == 0
    rows = _json_lines(capsys.readouterr().out)
    assert [r["intersection"] for r in rows] == [20, 5] and rows[0]["added"] == 20
    assert all(r["false_match_bound"] <= 2**-40 for r in rows)


def test_secureboost_serve_runs_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    """The prediction service's bench: both parties as processes, two batch sizes, answers checked."""
    assert _load("secureboost_serve").main(["--rows", "300", "--trees", "1", "--sizes", "1,100", "--repeats", "2",
                                            "--no-pin"]) == 0
    out = _json_lines(capsys.readouterr().out)[0]
    assert set(out["batches"]) == {"1", "100"} and out["rows"] == 300
    assert all(b["requests"] == 2 and b["rows_per_s"] > 0 and b["p99_ms"] >= b["p50_ms"] > 0
               for b in out["batches"].values())
    served = out["service_summary"]
    assert served["errors"] == 0 and served["rows"] == 3 * 1 + 3 * 100  # a warm-up and two timed requests per size
