"""``vflcrypto bench gradients``: every backend runs, results are checked, output states how it ran."""

from __future__ import annotations

import json

import pytest

from vflcrypto.cli import gradbench, main
from vflcrypto.cli.gradbench import OPERATIONS, BenchmarkError, run_gradient_bench


def test_backends_measure_every_operation_correctly() -> None:
    results = {r.name: r for r in run_gradient_bench(300, 1024, phe_n=30, repeats=2, allow_insecure=True)}
    assert {"vflcrypto-paillier", "vflcrypto-paillier-packed", "vflcrypto-ckks", "phe", "vflcrypto-ou",
            "vflcrypto-ou-packed", "vflcrypto-ou-heu"} <= set(results)
    for name in ("vflcrypto-paillier", "vflcrypto-ckks", "phe", "vflcrypto-ou", "vflcrypto-ou-heu"):
        assert set(results[name].ops) == set(OPERATIONS), name
        for op, t in results[name].ops.items():
            assert len(t.wall) == len(t.cpu) == 2 and t.wall_rate > 0 and t.per_core_rate > 0, (name, op)
    assert results["phe"].n == 30 and results["phe"].workers == 1
    assert results["vflcrypto-paillier"].ops["dot"].count == 300 * gradbench.DOT_COLUMNS
    packed = results["vflcrypto-paillier-packed"]
    assert packed.values_per_ciphertext > 1 and "mul_plain" not in packed.ops
    # each backend checked its own results against numpy, on every call
    assert results["vflcrypto-paillier"].max_abs_error < 1e-6
    assert packed.max_abs_error < 1e-5
    assert results["vflcrypto-ckks"].max_abs_error < 1e-2
    assert results["vflcrypto-ou"].max_abs_error < 1e-6 and results["vflcrypto-ou-packed"].max_abs_error < 1e-5
    assert "3072" not in results["vflcrypto-ou"].note  # a small test key (allow_insecure)
    assert "2048-bit OU, 112-bit randomness (HEU parameters)" in results["vflcrypto-ou-heu"].note
    if gradbench._heu_available():  # HEU's own rows, checked the same way
        for name in ("heu-zpaillier", "heu-ou"):
            assert set(results[name].ops) == set(OPERATIONS) and results[name].max_abs_error < 1e-5


def test_a_wrong_result_reports_no_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gradbench, "_err", lambda got, want: 1.0)
    with pytest.raises(BenchmarkError, match="max abs error"):
        run_gradient_bench(50, 1024, phe_n=10, repeats=1, backends=("phe",))


def test_cli_states_workers_per_core_rates_and_spread(capsys) -> None:
    rows = "phe,vflcrypto-paillier,vflcrypto-ou"  # every backend's own figures: test_backends_measure_...
    assert main(["bench", "gradients", "--n", "100", "--key-bits", "1024", "--allow-insecure", "--phe-n", "10",
                 "--repeats", "2", "--backends", rows, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    phe = out["backends"]["phe"]
    assert phe["n"] == 10 and phe["workers"] == 1
    enc = phe["ops"]["encrypt"]
    assert enc["wall_rate"] > 0 and enc["per_core_rate"] > 0 and len(enc["wall_seconds"]) == 2
    assert out["backends"]["vflcrypto-paillier"]["workers"] >= 1
    assert main(["bench", "gradients", "--n", "60", "--key-bits", "1024", "--allow-insecure", "--phe-n", "10",
                 "--repeats", "1", "--backends", rows]) == 0
    text = capsys.readouterr().out
    assert "per core" in text and "x phe/core" in text and "smaller n" in text and "set-up" in text
    assert "x HEU/core" in text and "vflcrypto-ou " in text and "vflcrypto-ckks" not in text


def test_default_is_the_quick_run_and_full_the_large_one(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from vflcrypto.cli import bench

    assert bench.QUICK["n"] < bench.FULL["n"] and bench.QUICK["repeats"] < bench.FULL["repeats"]
    assert bench.QUICK["phe_n"] <= bench.FULL["phe_n"]
    # the same wiring at tiny sizes: the mode picks n, phe's n and the repeats; a flag overrides the mode
    monkeypatch.setattr(bench, "QUICK", {"n": 30, "phe_n": 6, "repeats": 1})
    monkeypatch.setattr(bench, "FULL", {"n": 40, "phe_n": 8, "repeats": 2})
    common = ["bench", "gradients", "--key-bits", "1024", "--allow-insecure", "--backends", "phe,vflcrypto-paillier",
              "--json"]
    runs = {}
    for mode, extra in {"default": [], "full": ["--full"], "override": ["--full", "--repeats", "1"]}.items():
        assert main([*common, *extra]) == 0
        out, err = capsys.readouterr()
        runs[mode] = json.loads(out)  # stdout holds the JSON only
        # a line per backend as soon as it finished, on stderr under --json
        assert [ln.split()[0] for ln in err.splitlines() if "finished in" in ln] == ["vflcrypto-paillier", "phe"]
    assert runs["default"]["mode"] == "default" and runs["full"]["mode"] == "full"
    for mode, (n, phe_n, repeats) in {"default": (30, 6, 1), "full": (40, 8, 2), "override": (40, 8, 1)}.items():
        got = runs[mode]["backends"]
        assert (got["vflcrypto-paillier"]["n"], got["phe"]["n"], runs[mode]["repeats"]) == (n, phe_n, repeats), mode
        assert len(got["phe"]["ops"]["encrypt"]["wall_seconds"]) == repeats


def test_text_mode_prints_each_backend_before_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "gradients", "--n", "30", "--key-bits", "1024", "--allow-insecure", "--phe-n", "6",
                 "--repeats", "1", "--backends", "phe,vflcrypto-paillier"]) == 0
    out = capsys.readouterr().out
    finished = [out.index(f"  {name} finished in") for name in ("vflcrypto-paillier", "phe")]
    assert finished == sorted(finished) and max(finished) < out.index("set-up (key generation")


def test_ops_times_only_the_operations_asked_for() -> None:
    """``--ops histogram,hist_again``: the histogram rows at the full size without the slow dot rows."""
    from vflcrypto.errors import ConfigurationError

    (res,) = run_gradient_bench(40, 1024, phe_n=10, repeats=1, allow_insecure=True, backends=("vflcrypto-paillier",),
                                ops=("histogram", "hist_again"))
    assert set(res.ops) == {"histogram", "hist_again"} and res.max_abs_error < 1e-6
    with pytest.raises(ConfigurationError, match="unknown operation"):
        run_gradient_bench(40, 1024, repeats=1, allow_insecure=True, ops=("histgram",))
