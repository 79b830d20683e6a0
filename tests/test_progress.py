"""Progress on long runs: protocols report counts, the command line draws them on stderr only."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from vflcrypto.protocols import linreg as lr
from vflcrypto.protocols import secureboost as sb

from vflcrypto.cli import main
from vflcrypto.data.files import write_csv_atomic
from vflcrypto.runtime import progress
from vflcrypto.runtime.channel import run_parties


class FakeTerminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _files(tmp: Path, n: int = 30) -> list[str]:
    rng = np.random.default_rng(3)
    ids = [f"id{i:03d}" for i in range(n)]
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] - X[:, 1] > 0).astype(int)
    specs = {"y.csv": [("label", y)], "a.csv": [("f0", X[:, 0])], "b.csv": [("f1", X[:, 1])]}
    for name, cols in specs.items():
        write_csv_atomic(tmp / name, ["id", *(c for c, _ in cols)], ([ids[i], *(v[i] for _, v in cols)]
                                                                     for i in range(n)))
    return [str(tmp / name) for name in specs]


def _logreg(paths: list[str], *extra: str) -> list[str]:
    return ["train", "logreg", "--coordinator", paths[0], "--party", paths[1], "--party", paths[2],
            "--id-column", "id", "--label", "label", "--plain", "--aligned", "--steps", "4", *extra]


# --------------------------------------------------------------------------- the reporter


def test_parties_reporting_one_counter_draw_its_furthest_count_and_a_section_ends_it() -> None:
    with progress.reporting(progress.Reporter()) as rep:
        progress.report("x", 1, 3, unit="epoch")  # no section: stays open until the reporter closes
        with progress.section():
            progress.report("linreg", 2, 5, unit="epoch")  # the active party
            progress.report("linreg", 1, 5, unit="epoch")  # a passive party, a step behind: ignored
            progress.report("linreg", 3, 5, unit="epoch")
        with progress.section():  # the next run starts anew
            progress.add("aligning", 4, unit="id")
            progress.add("aligning", 6, unit="id")
    got = [(c.what, c.unit, c.done, c.total) for c in rep.finished]
    assert got == [("linreg", "epoch", 3, 5), ("aligning", "id", 10, None), ("x", "epoch", 1, 3)]


def test_reports_without_a_reporter_do_nothing() -> None:
    progress.report("linreg", 1, 2)  # no reporter installed: no error, no output
    progress.add("aligning", 3)


def test_in_process_parties_report_to_the_callers_reporter() -> None:
    def party(k: int) -> int:
        progress.report("run", k + 1, 2, unit="party")
        return k

    with progress.reporting(progress.Reporter()) as rep:
        assert run_parties({"a": lambda: party(0), "b": lambda: party(1)}) == {"a": 0, "b": 1}
        assert [(c.done, c.total) for c in rep.finished] == [(2, 2)]  # the run's section finished it


def test_secureboost_reports_one_tree_per_configured_tree() -> None:
    rng = np.random.default_rng(0)
    Xa, Xp = rng.normal(size=(60, 2)), rng.normal(size=(60, 2))
    y = (Xa[:, 0] + Xp[:, 0] > 0).astype(float)
    params = sb.BoostParams(n_trees=3, max_depth=2, max_bin=8)
    with progress.reporting(progress.Reporter()) as rep:
        sb.run_local(Xa, y, [Xp], params=params, plaintext=True, timeout=20.0)
    trees = [c for c in rep.finished if c.what == "secureboost"]
    assert [(c.unit, c.done, c.total) for c in trees] == [("tree", 3, 3)]


@pytest.mark.parametrize("tol", [None, 0.5])
def test_linreg_reports_the_epochs_it_ran_of_the_configured_epochs(tol: float | None, small_paillier_keys) -> None:
    active, passives = lr.synthetic_split(n_rows=40, p_active=2, p_passive=(2,), seed=3)
    cfg = lr.LinRegConfig(epochs=4, lr=0.1, tol=tol, key_bits=512)
    with progress.reporting(progress.Reporter()) as rep:
        run = lr.run_local(active, passives, config=cfg, allow_insecure=True, keys=small_paillier_keys)
    epochs = [(c.unit, c.done, c.total) for c in rep.finished if c.what == "linreg"]
    assert epochs == [("epoch", run.coordinator.epochs_run, 4)]
    assert run.coordinator.epochs_run == (4 if tol is None else 2)  # tol 0.5: stops after the second epoch


def test_bars_show_count_elapsed_and_time_left() -> None:
    out = FakeTerminal()
    with progress.reporting(progress.Bars(out)):
        for k in range(1, 5):
            progress.report("linreg", k, 4, unit="epoch")
    text = out.getvalue()
    assert "linreg" in text and "4/4" in text and "epoch" in text
    assert "00:00<00:00" in text  # tqdm's elapsed<remaining


def test_a_terminal_sees_the_clock_run_during_a_long_step_and_a_log_file_does_not() -> None:
    terminal, log = FakeTerminal(), io.StringIO()
    with progress.reporting(progress.Bars(terminal, tick=0.05)) as bars:
        progress.report("fewshot", 1, 6)
        time.sleep(0.4)  # no report meanwhile: only the ticker redraws
        assert terminal.getvalue().count("1/6") >= 3
    with progress.reporting(progress.Bars(log, tick=0.05)) as bars:
        progress.report("fewshot", 1, 6)
        time.sleep(0.2)
        assert log.getvalue().count("1/6") == 1 and bars._ticker is None


# --------------------------------------------------------------------------- the command line


def test_progress_flag_draws_on_stderr_and_never_in_the_json(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    paths = _files(tmp_path)
    assert main(_logreg(paths, "--json", "--progress")) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["steps"] == 4  # stdout is the JSON and nothing else
    assert "logreg" in err and "4/4" in err and "step" in err


def test_json_without_the_flag_is_silent_on_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _files(tmp_path)
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(_logreg(paths, "--json")) == 0
    assert "4/4" not in terminal.getvalue()
    assert json.loads(capsys.readouterr().out)["steps"] == 4
    assert main(_logreg(paths)) == 0  # text output on a terminal: progress by default
    assert "4/4" in terminal.getvalue()
    drawn = terminal.getvalue()
    assert main(["--no-progress", *_logreg(paths)]) == 0  # the global flag, before the command
    assert terminal.getvalue() == drawn
    assert "4/4" not in capsys.readouterr().out


def test_without_a_terminal_there_is_no_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _files(tmp_path)
    assert main(_logreg(paths)) == 0
    out, err = capsys.readouterr()
    assert "4/4" not in err and "4/4" not in out
