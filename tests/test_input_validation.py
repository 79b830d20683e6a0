"""One input validation for every protocol (vflcrypto.data.validate): each class of bad input is
refused (or warned about) in one line naming the file, the line and the column by name.

Every case runs the command line (``main([...])``) and reads its one-line stderr, or calls the
library; each is refused before any training, so the file runs in seconds.
"""

from __future__ import annotations

import resource
from pathlib import Path

import numpy as np
import pytest

from vflcrypto.cli import main
from vflcrypto.data.tables import read_csv_strings, read_party_csv
from vflcrypto.errors import InputDataError

SMALL = ["--key-bits", "512", "--allow-insecure"]


def _write(d: Path, name: str, text: str | bytes) -> str:
    path = d / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one line a refused command prints (exit 2, no traceback)."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _rows(n: int, fn) -> str:  # type: ignore[no-untyped-def]
    return "".join(fn(i) for i in range(n))


@pytest.fixture()
def rep(tmp_path: Path) -> dict[str, str]:
    """A server's label file and two party files of 12 common IDs (representation VFL)."""
    f = {"server": _write(tmp_path, "server.csv", "id,y\n" + _rows(12, lambda i: f"r{i},{i % 3}\n")),
         "one_class": _write(tmp_path, "one.csv", "id,y\n" + _rows(12, lambda i: f"r{i},1\n")),
         "huge": _write(tmp_path, "huge.csv", "id,y\n" + _rows(12, lambda i: f"r{i},{9999999 if i == 7 else 0}\n")),
         "half": _write(tmp_path, "half.csv", "id,y\n" + _rows(12, lambda i: f"r{i},{i % 2 + 0.5}\n")),
         "p0": _write(tmp_path, "p0.csv", "id,a,b\n" + _rows(12, lambda i: f"r{i},{i},{i * i % 7}\n")),
         "p1": _write(tmp_path, "p1.csv", "id,c\n" + _rows(12, lambda i: f"r{i},{(5 * i) % 11}\n")),
         "nan": _write(tmp_path, "nan.csv", "id,c\n" + _rows(12, lambda i: f"r{i},{'' if i == 4 else i}\n"))}
    return f


def _rep(name: str, server: str, *parties: str, extra: tuple[str, ...] = ()) -> list[str]:
    fast = ["--epochs", "1"] if name == "split" else ["--rounds", "0", "--head-epochs", "1", "--local-epochs", "1"] \
        if name == "protovfl" else ["--ssl-epochs", "1", "--head-epochs", "1"]
    return ["train", name, "--server", server, *[a for p in parties for a in ("--party", p)], "--id-column", "id",
            "--label", "y", "--test-fraction", "0.25", *fast, *extra]


# --------------------------------------------------------------------------- labels


@pytest.mark.parametrize("name", ["oneshot", "fewshot", "split", "protovfl"])
def test_single_class_training_is_refused(name: str, rep: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    line = _error(capsys, _rep(name, rep["one_class"], rep["p0"], rep["p1"]))
    assert "hold a single class (every label is 1)" in line


@pytest.mark.parametrize("name", ["oneshot", "protovfl"])
def test_a_huge_label_is_refused_before_anything_is_sized_by_it(name: str, rep: dict[str, str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    line = _error(capsys, _rep(name, rep["huge"], rep["p0"], rep["p1"]))
    assert "huge.csv: line 9, label 'y' 9999999 is beyond the largest class" in line
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB: nothing of 10^7 classes


def test_a_fractional_label_names_its_line(rep: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    line = _error(capsys, _rep("oneshot", rep["half"], rep["p0"], rep["p1"]))
    assert "half.csv: line 2, label 'y' 0.5 is not a whole number" in line


@pytest.mark.parametrize("name", ["oneshot", "fewshot", "split", "protovfl"])
def test_the_label_file_as_a_party_is_refused(name: str, rep: dict[str, str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    line = _error(capsys, _rep(name, rep["server"], rep["p0"], rep["server"]))
    assert "server.csv: a party's file must not hold the label column 'y'" in line


def test_a_missing_value_in_a_party_file_names_the_file_and_line(rep: dict[str, str],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    line = _error(capsys, _rep("fewshot", rep["server"], rep["p0"], rep["nan"]))
    assert "nan.csv: line 6, column 'c' is missing" in line and "X_unaligned" not in line


# --------------------------------------------------------------------------- the file itself


def test_a_repeated_column_name_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path, "a.csv", "id,id,y\n" + _rows(12, lambda i: f"r{i},s{i},{i}\n"))
    b = _write(tmp_path, "b.csv", "id,x\n" + _rows(12, lambda i: f"r{i},{i % 5}\n"))
    line = _error(capsys, ["train", "linreg", "--active", a, "--passive", b, "--id-column", "id", "--label", "y",
                           *SMALL])
    assert "a.csv: line 1 names the column 'id' twice (columns 1 and 2)" in line


@pytest.mark.parametrize("value, words", [("1e300", "'1e300' is beyond ±1e+100"), ("inf", "'inf' is not a finite"),
                                          ("-Infinity", "'-Infinity' is not a finite")])
def test_non_finite_and_extreme_values_name_their_column(tmp_path: Path, value: str, words: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path, "a.csv", "id,y,x\n" + _rows(12, lambda i: f"r{i},{i},{value if i == 3 else i}\n"))
    b = _write(tmp_path, "b.csv", "id,z\n" + _rows(12, lambda i: f"r{i},{i % 5}\n"))
    line = _error(capsys, ["train", "linreg", "--active", a, "--passive", b, "--id-column", "id", "--label", "y",
                           *SMALL])
    assert f"a.csv: line 5, column 'x': {words}" in line


def test_a_blank_line_is_an_empty_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    left = _write(tmp_path, "left.csv", "id\na\n\nb\n")
    right = _write(tmp_path, "right.csv", "id\na\nb\n")
    line = _error(capsys, ["align", "--left", left, "--right", right, "--id-column", "id",
                           "--out-dir", str(tmp_path / "out")])
    assert "left.csv: line 3: empty ID" in line
    with pytest.raises(InputDataError, match=r"line 3: empty ID \(the line is blank\)"):
        read_party_csv(_write(tmp_path, "t.csv", "id,x\na,1\n\nb,2\n"), "id")
    assert read_csv_strings(tmp_path / "t.csv")[1][1] == (3, ("", ""))


@pytest.mark.parametrize("text, hint", [
    ("id;x\na;1\nb;2\n", "looks semicolon-separated"),
    ("id\tx\na\t1\nb\t2\n", "looks tab-separated"),
    ("id,x\ra,1\rb,2\r", "CR-only line ends"),
])
def test_a_file_of_another_format_gets_a_hint(tmp_path: Path, text: str, hint: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    left = _write(tmp_path, "left.csv", text)
    right = _write(tmp_path, "right.csv", "id\na\nb\n")
    line = _error(capsys, ["align", "--left", left, "--right", right, "--id-column", "id",
                           "--out-dir", str(tmp_path / "out")])
    assert "left.csv" in line and hint in line


@pytest.mark.parametrize("name", ["sshelr", "poisson", "pearson"])
def test_a_constant_column_is_named_with_its_file(name: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path, "a.csv", "id,y,x\n" + _rows(12, lambda i: f"r{i},{i % 2},{i}\n"))
    b = _write(tmp_path, "b.csv", "id,z,flat\n" + _rows(12, lambda i: f"r{i},{i % 5},7\n"))
    args = ["--active", a, "--passive", b, "--id-column", "id", *SMALL]
    line = _error(capsys, ["train", name, *args, *([] if name == "pearson" else ["--label", "y"])])
    assert "b.csv: column 'flat' is constant over the 12 aligned rows" in line


def test_poisson_on_few_rows_warns_like_every_protocol(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Four rows warn; two rows (no more than the active party's columns with the intercept) are refused: the party
    would solve its own gradient for every residual (the reverse multiplication of the scorecard)."""
    a = _write(tmp_path, "a.csv", "id,y,x\nr1,1,0.5\nr2,3,2\nr3,0,1\nr4,2,1.5\n")
    b = _write(tmp_path, "b.csv", "id,z\nr1,1\nr2,4\nr3,2\nr4,3\n")
    assert main(["train", "poisson", "--active", a, "--passive", b, "--id-column", "id", "--label", "y",
                 "--epochs", "1", "--json", *SMALL]) == 0
    assert "vflcrypto: warning: only 4 aligned rows: the model will mean little" in capsys.readouterr().err
    a2 = _write(tmp_path, "a2.csv", "id,y,x\nr1,1,0.5\nr2,3,2\n")
    b2 = _write(tmp_path, "b2.csv", "id,z\nr1,1\nr2,4\n")
    assert main(["train", "poisson", "--active", a2, "--passive", b2, "--id-column", "id", "--label", "y",
                 "--epochs", "1", "--json", *SMALL]) != 0
    assert "allow_small_batches" in capsys.readouterr().err


def test_woe_on_few_rows_warns_like_every_protocol(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path, "a.csv", "id,y,x\n" + _rows(6, lambda i: f"r{i},{i % 2},{i}\n"))
    b = _write(tmp_path, "b.csv", "id,z\n" + _rows(6, lambda i: f"r{i},{i % 3}\n"))
    assert main(["train", "woe", "--active", a, "--passive", b, "--id-column", "id", "--label", "y", "--json",
                 *SMALL]) == 0
    assert "vflcrypto: warning: only 6 aligned rows: the WOE and IV will mean little" in capsys.readouterr().err


# --------------------------------------------------------------------------- horizontal FL


@pytest.mark.parametrize("bad, expect", [
    ("x,y\n", "c1.csv has no data rows (only a header)"),
    ("x,y\n1,0\n,1\n", "c1.csv: line 3, column 'x' is missing"),
    ("x,y\n1,0\nnan,1\n", "c1.csv: line 3, column 'x' is missing"),
    ("x,y\n1,0\n2,1.5\n", "c1.csv: line 3, label 'y' 1.5 is not a whole number"),
    ("x,y\n1,0\n2,-1\n", "c1.csv: line 3, label 'y' -1 is negative"),
    ("x,y\n1,0\n2,\n", "c1.csv: line 3, label 'y' is missing"),
    ("x,y\n1,0\n2,9999999\n", "c1.csv: line 3, label 'y' 9999999 is beyond the largest class"),
])
def test_hfl_client_errors_name_the_file_and_line(tmp_path: Path, bad: str, expect: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ok = _write(tmp_path, "c0.csv", "x,y\n" + _rows(8, lambda i: f"{i},{i % 2}\n"))
    c1 = _write(tmp_path, "c1.csv", bad)
    line = _error(capsys, ["train", "fedavg", "--client", ok, "--client", c1, "--label", "y", "--rounds", "1"])
    assert expect in line


def test_hfl_single_class_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    c = [_write(tmp_path, f"c{k}.csv", "x,y\n" + _rows(8, lambda i: f"{i},0\n")) for k in range(2)]
    line = _error(capsys, ["train", "fedavg", "--client", c[0], "--client", c[1], "--label", "y", "--rounds", "1"])
    assert "the clients' training rows hold a single class" in line


def test_a_table_without_ids_numbers_its_rows_by_line(tmp_path: Path) -> None:
    t = read_party_csv(_write(tmp_path, "c.csv", "x,y\n1,0\n2,1\n"), None, label="y")
    assert t.ids == ("2", "3") and t.where(1).endswith("c.csv: line 3")
    np.testing.assert_array_equal(t.X[:, 0], [1.0, 2.0])


# --------------------------------------------------------------------------- numeric flags, at parse time


@pytest.mark.parametrize("argv, expect", [
    (["party", "--config", "nowhere.toml", "--as", "passive-0", "align", "--data", "x.csv", "--id-column", "id",
      "--out", "o.csv", "--chunk-size", "0"], "argument --chunk-size: must be at least 1, got 0"),
    (["party", "--config", "nowhere.toml", "--as", "active", "train", "oneshot", "--data", "x.csv", "--id-column",
      "id", "--out", "o.npz", "--classes", "1"], "argument --classes: must be at least 2, got 1"),
    (["train", "linreg", "--active", "a.csv", "--passive", "b.csv", "--id-column", "id", "--label", "y", "--lr",
      "nan"], "argument --lr: must be a finite number, got 'nan'"),
    (["train", "linreg", "--active", "a.csv", "--passive", "b.csv", "--id-column", "id", "--label", "y",
      "--split-seed", "-1"], "argument --split-seed/--seed: must be at least 0, got -1"),
    (["train", "fedavg", "--dataset", "digits", "--skew", "1"], "argument --skew: must be below 1, got 1"),
    # a protocol's own setting: refused before the party configuration is even read (no peer waits)
    (["party", "--config", "nowhere.toml", "--as", "active", "train", "sshelr", "--data", "x.csv", "--id-column",
      "id", "--out", "o.json", "--epochs", "0"], "epochs >= 1 and a learning rate in (0, 16] are required"),
    (["party", "--config", "nowhere.toml", "--as", "active", "train", "logreg", "--data", "x.csv", "--id-column",
      "id", "--out", "o.npz", "--steps", "-1"], "steps must be >= 0 and the learning rate positive"),
    (["train", "fedavg", "--dataset", "digits", "--degree", "3"], "--degree (SecAgg+ neighbours per client) must be "
                                                                  "even and at least 2, got 3"),
])
def test_numeric_flags_are_refused_at_parse_time(argv: list[str], expect: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert expect in _error(capsys, argv)


# --------------------------------------------------------------------------- gRPC's own logging


@pytest.mark.parametrize("flags, level", [([], "NONE"), (["--verbose"], "INFO")])
def test_grpc_logs_only_with_verbose(tmp_path: Path, flags: list[str], level: str) -> None:
    """gRPC core's lines (GOAWAY, handshake failed, add_port) surround the one-line error unless --verbose:
    ``vflcrypto party`` sets GRPC_VERBOSITY before gRPC is first imported."""
    import os
    import subprocess
    import sys

    # the missing configuration file ends the run after the network runtime (and gRPC) was imported
    code = ("import os, sys; from vflcrypto.cli import main; main(sys.argv[1:]); "
            "print(os.environ.get('GRPC_VERBOSITY'), 'grpc' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    proc = subprocess.run([sys.executable, "-c", code, "party", "--config", str(tmp_path / "none.toml"), *flags,
                           "--as", "a", "align", "--data", "x.csv", "--id-column", "id", "--out", "o.csv"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.stdout.split() == [level, "True"], proc.stdout + proc.stderr


# --------------------------------------------------------------------------- the Flower App's run config

ROOT = Path(__file__).resolve().parents[1]


def _flower_config():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("flower_config", ROOT / "flower" / "vflcrypto_flower" / "config.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_flower_schema_lists_every_key_of_the_app_with_its_type() -> None:
    import tomllib

    defaults = tomllib.loads((ROOT / "flower" / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    schema = _flower_config().SCHEMA
    assert set(schema) == set(defaults)
    assert {k: type(v) for k, v in defaults.items()} == {k: tp for k, (tp, _) in schema.items()}
    _flower_config().check_run_config(defaults)  # the defaults pass
    assert _flower_config().main(["out-dir='/a b/out' steps=3", "protocol='linreg'"]) == 0


@pytest.mark.parametrize("overrides, expect", [
    (["timeout=0"], "run config timeout=0: timeout must be above 0"),
    (["key-bits='big'"], "run config key-bits='big': key-bits must be a whole number"),
    (["key-bits=big"], "run config key-bits=big: not a value Flower reads"),
    (["rows=-5"], "run config rows=-5: rows must be at least 2"),
    (["stpes=5"], "unknown run-config key 'stpes' (did you mean 'steps'?)"),
    (["steps=5 secure=1"], "run config secure=1: secure must be true or false"),
    (["protocol='nope'"], "run config protocol='nope': protocols with a Flower App: align"),
])
def test_a_bad_flower_run_config_is_one_line(overrides: list[str], expect: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert _flower_config().main(overrides) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expect in err, err


def test_the_flower_scripts_check_their_run_config_before_starting_anything(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    if not (Path(sys.prefix) / "bin" / "flwr").exists():
        pytest.skip("Flower binaries not installed")
    for script in ("flower_simulate.sh", "flower_deploy.sh"):
        proc = subprocess.run(["bash", str(ROOT / "scripts" / script), "steps=3", "timeout=0"], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "VENV": sys.prefix,
                                                           "FLWR_WORKDIR": str(tmp_path)})
        assert proc.returncode == 2 and proc.stderr == "error: run config timeout=0: timeout must be above 0\n", \
            proc.stderr
        assert not list(tmp_path.iterdir())  # no Flower home, nothing started



def test_the_flower_apps_log_the_librarys_own_errors_in_one_line_and_bugs_with_their_traceback() -> None:
    """Flower logs an app's exception with ``exc_info``; the apps' filter makes a VflError or an OSError
    one line (the status line that follows says the rest) and leaves any other exception's traceback."""
    import importlib.util
    import io
    import logging

    from vflcrypto.errors import PeerTimeoutError

    spec = importlib.util.spec_from_file_location("flower_logs", ROOT / "flower" / "vflcrypto_flower" / "logs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    logger = logging.getLogger("flwr-test-logs")
    logger.propagate = False
    stream = io.StringIO()
    logger.addHandler(logging.StreamHandler(stream))
    logger.addFilter(module.OneLineErrors())

    def logged(exc: BaseException) -> str:
        stream.seek(0)
        stream.truncate()
        try:
            raise exc
        except BaseException as ex:
            logger.error("%s raised an exception", "ServerApp", exc_info=ex)
        return stream.getvalue()

    out = logged(PeerTimeoutError("only 3 of 4 SuperNodes joined within 1 s"))
    assert out == "ServerApp raised an exception: PeerTimeoutError: only 3 of 4 SuperNodes joined within 1 s\n"
    out = logged(FileNotFoundError(2, "No such file or directory", "bank.csv"))
    assert out.count("\n") == 1 and "FileNotFoundError" in out and "bank.csv" in out
    out = logged(KeyError("a bug"))
    assert "Traceback (most recent call last)" in out and "KeyError: 'a bug'" in out


@pytest.mark.parametrize("clients, degree, drop, works", [
    (4, 2, 1, True), (4, 2, 2, False), (6, 2, 2, False), (8, 4, 2, True), (8, 2, 3, False), (5, None, 2, True),
    (5, None, 3, False)])
def test_a_drop_that_would_leave_a_neighbourhood_below_the_threshold_is_refused_in_the_users_terms(
        clients: int, degree: int | None, drop: int, works: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """Every --drop either trains (the server unmasks every round) or is refused before training, naming the
    neighbourhood, its survivors and the threshold, never "1 shares cannot reconstruct a secret"."""
    args = ["train", "fedavg", "--dataset", "digits", "--clients", str(clients), "--drop", str(drop), "--rounds", "2"]
    args += ["--degree", str(degree)] if degree else []
    rc = main(args)
    err = capsys.readouterr().err
    if works:
        assert rc == 0, err
        return
    assert rc == 2 and err.count("\n") == 1, err
    assert f"--drop {drop}: " in err and "neighbourhood" in err and "threshold" in err and "shares" not in err, err
