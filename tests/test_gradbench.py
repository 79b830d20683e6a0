"""``vflcrypto bench gradients``: every backend runs, results are correct, JSON is clean."""

from __future__ import annotations

import json

from vflcrypto.cli import main
from vflcrypto.gradbench import OPERATIONS, run_gradient_bench


def test_backends_measure_every_operation_correctly() -> None:
    results = {r.name: r for r in run_gradient_bench(300, 1024, phe_n=30, heu_n=60)}
    assert {"vflcrypto-paillier", "vflcrypto-paillier-packed", "vflcrypto-ckks", "phe"} <= set(results)
    for name in ("vflcrypto-paillier", "vflcrypto-ckks", "phe"):
        assert set(results[name].rates) == set(OPERATIONS), name
        assert all(v > 0 for v in results[name].rates.values())
    # each backend checked its own results against numpy
    assert results["vflcrypto-paillier"].max_abs_error < 1e-6
    assert results["vflcrypto-paillier-packed"].max_abs_error < 1e-5
    assert results["vflcrypto-ckks"].max_abs_error < 1e-2


def test_cli_json_is_machine_readable(capsys) -> None:
    assert main(["bench", "gradients", "--n", "100", "--key-bits", "1024", "--phe-n", "10",
                 "--heu-n", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backends"]["phe"]["encrypt"] > 0
    assert "vflcrypto-paillier" in out["backends"]
