"""A full disk at any file of any writing command leaves the complete outputs or none, with one line of error.

Every command that writes files writes them through :mod:`vflcrypto.data.atomic` inside one
:func:`~vflcrypto.data.files.atomic_set`. :class:`FullDisk` makes the k-th file a command
opens fail its first write with ``ENOSPC`` (as a full disk does); for each k the command
must exit 2 with one line naming that file, and leave no output and no temporary file. A
successful run first checks that every file the command leaves was written through the
atomic layer (so that no writer escapes the test).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vflcrypto.protocols import linreg as lr
from vflcrypto.protocols import secureboost as sb

import vflcrypto.data.atomic as atomic
import vflcrypto.data.files as files
from vflcrypto.cli import main
from vflcrypto.data.files import atomic_set, atomic_write_text, write_csv_atomic
from vflcrypto.errors import OutputError

SMALL_KEYS = ["--key-bits", "512", "--allow-insecure"]


class _FullFile:
    """A file object whose every write fails as on a full disk."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def __enter__(self) -> _FullFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._real.close()


class FullDisk:
    """Stands in for ``os`` in :mod:`vflcrypto.data.atomic` (and for its ``_create_temp``): records every
    output file opened and makes the ``fail_at``-th (1-based) fail its first write with ENOSPC;
    ``fail_replace`` makes the k-th rename that publishes a file (or a model directory) fail instead."""

    def __init__(self, fail_at: int | None = None, fail_replace: int | None = None,
                 fail_path: Path | None = None) -> None:
        self.opened: list[Path] = []
        self.fail_at, self.fail_replace, self.fail_path = fail_at, fail_replace, fail_path
        self.replaced = 0
        self._doomed: set[int] = set()
        self._create = atomic._create_temp

    def create_temp(self, path: Path, permissions: int) -> tuple[int, Path]:
        fd, tmp = self._create(path, permissions)
        self.opened.append(path)
        if len(self.opened) == self.fail_at or path == self.fail_path:
            self._doomed.add(fd)
        return fd, tmp

    def fdopen(self, fd: int, *args: Any, **kwargs: Any) -> Any:
        fh = os.fdopen(fd, *args, **kwargs)
        if fd in self._doomed:
            self._doomed.discard(fd)
            return _FullFile(fh)
        return fh

    def replace(self, src: Any, dst: Any) -> None:
        def staged(p: Any) -> bool:
            return any(part.endswith(".part") for part in Path(p).parts)

        if staged(src) and not staged(dst):  # a publishing rename (not a staging rename, not an undo)
            self.replaced += 1
            if self.replaced == self.fail_replace:
                raise OSError(errno.EIO, os.strerror(errno.EIO), str(dst))
        os.replace(src, dst)

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FullDisk:
        monkeypatch.setattr(atomic, "_create_temp", self.create_temp)
        monkeypatch.setattr(atomic, "os", self)
        monkeypatch.setattr(files, "os", self)
        return self


def _all_files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


# --------------------------------------------------------------------------- the commands


def _linreg_csvs(d: Path) -> list[str]:
    active, passives = lr.synthetic_split(n_rows=24, p_active=1, p_passive=(1,), seed=5)
    write_csv_atomic(d / "active.csv", ["ID", "target", *active.columns],
                     [[i, y, *x] for i, y, x in zip(active.ids, active.label, active.X.tolist(), strict=True)])
    write_csv_atomic(d / "passive.csv", ["ID", *passives[0].columns],
                     [[i, *x] for i, x in zip(passives[0].ids, passives[0].X.tolist(), strict=True)])
    return ["--active", str(d / "active.csv"), "--passive", str(d / "passive.csv"), "--id-column", "ID",
            "--label", "target"]


def _boost_csvs(d: Path) -> list[str]:
    Xa, y, _, Xp, _ = sb.example(40, seed=11)
    ids = [f"id{i:04d}" for i in range(40)]
    write_csv_atomic(d / "a.csv", ["id", "y", "a0", "a1"], [[ids[i], int(y[i]), *Xa[i, :2]] for i in range(40)])
    write_csv_atomic(d / "p.csv", ["id", "p0", "p1"], [[ids[i], *Xp[i, :2]] for i in range(40)])
    return ["--active", str(d / "a.csv"), "--passive", str(d / "p.csv"), "--id-column", "id", "--label", "y"]


def _align(inp: Path, out: Path) -> list[str]:
    write_csv_atomic(inp / "bank.csv", ["id", "x"], [[f"c{i}", i] for i in range(12)])
    write_csv_atomic(inp / "shop.csv", ["id", "v"], [[f"c{i}", -i] for i in range(4, 16)])
    return ["align", "--left", str(inp / "bank.csv"), "--right", str(inp / "shop.csv"), "--id-column", "id",
            "--out-dir", str(out)]


COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "align": _align,
    "examples": lambda inp, out: ["examples", str(out)],
    "certs": lambda inp, out: ["certs", "--out", str(out), "--party", "active", "--party", "passive-0"],
    "train linreg --model-dir --html": lambda inp, out: [
        "train", "linreg", *_linreg_csvs(inp), "--aligned", *SMALL_KEYS, "--epochs", "2",
        "--model-dir", str(out / "model"), "--html", str(out / "report.html")],
    "train secureboost --model-dir": lambda inp, out: [
        "train", "secureboost", *_boost_csvs(inp), "--aligned", *SMALL_KEYS, "--trees", "1", "--depth", "2",
        "--max-bin", "4", "--model-dir", str(out / "model")],
    "audit --html --plot": lambda inp, out: [
        "audit", "exchange", *SMALL_KEYS, "--html", str(out / "audit.html"), "--plot", str(out / "plots")],
}


def _predict(inp: Path, out: Path) -> list[str]:
    """``predict linreg`` with a saved model (written beside the inputs, before the disk fills)."""
    flags = _linreg_csvs(inp)
    active, passives = lr.synthetic_split(n_rows=24, p_active=1, p_passive=(1,), seed=5)
    lr.save_models([lr.PartyModel(n, n, tuple(t.columns), np.ones(1), lr.fit_preprocessing(t.X))
                    for n, t in (("active", active), ("passive-0", passives[0]))], inp / "model")
    return ["predict", "linreg", *flags[:6], "--model-dir", str(inp / "model"), "--out", str(out / "pred.csv"),
            *SMALL_KEYS]


COMMANDS["predict linreg"] = _predict


def _split(inp: Path, out: Path) -> list[str]:
    pytest.importorskip("torch")
    return ["train", "split", "--dataset", "digits", "--overlap", "12", "--epochs", "1",
            "--model-dir", str(out / "model")]


COMMANDS["train split --model-dir"] = _split


def _prepare(command: str, root: Path) -> tuple[list[str], Path]:
    """The command line of ``command`` (its input files written under ``root / "in"``) and its output root."""
    inp, out = root / "in", root / "out"
    inp.mkdir(parents=True)
    return COMMANDS[command](inp, out), out


def _run(argv: list[str], disk: FullDisk, monkeypatch: pytest.MonkeyPatch,
         capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    with monkeypatch.context() as m:
        disk.install(m)
        code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_full_disk_at_any_file_leaves_every_output_or_none(command: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "1")
    argv, out = _prepare(command, tmp_path / "ok")
    disk = FullDisk()
    code, err = _run(argv, disk, monkeypatch, capsys)
    assert code == 0, err
    written = _all_files(out)
    # every file the command leaves went through the atomic layer, and nothing else is left
    assert written == {_published(p, out) for p in disk.opened}, (written, disk.opened)
    n = len(disk.opened)
    assert n >= 1, f"{command} wrote nothing"
    for k in range(1, n + 1):
        argv, out = _prepare(command, tmp_path / f"fail{k}")
        disk = FullDisk(fail_at=k)
        code, err = _run(argv, disk, monkeypatch, capsys)
        lines = err.strip().splitlines()
        failed = out / _published(disk.opened[k - 1], out)
        assert code == 2 and len(lines) == 1, (k, err)
        assert "OutputError" in lines[0] and "No space left on device" in lines[0] and str(failed) in lines[0], \
            (k, lines[0])
        assert _all_files(out) == set(), (k, _all_files(out))  # none: no output, no temporary file


def _published(opened: Path, out: Path) -> Path:
    """Where a file opened by the atomic layer ends up (a model file is written in a staging directory
    ``.<dir>.<hex>.part`` beside the model directory)."""
    parts = [p[1:].split(".")[0] if p.startswith(".") and p.endswith(".part") else p
             for p in opened.relative_to(out).parts] if out in opened.parents else opened.parts
    return Path(*parts)


@pytest.mark.parametrize("fail_replace", [1, 2])
def test_a_failed_publication_puts_every_earlier_output_back(fail_replace: int, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The model directory and then the HTML report are published by one rename each; a failed rename
    (the model directory's, or the report's after the model directory's) undoes the earlier ones, so the
    earlier model and report stay exactly as they were, and no staged file is left."""
    argv, out = _prepare("train linreg --model-dir --html", tmp_path)
    assert main(argv) == 0
    before = {p: (out / p).read_bytes() for p in _all_files(out)}
    disk = FullDisk(fail_replace=fail_replace)
    code, text = _run([*argv, "--overwrite"], disk, monkeypatch, capsys)
    err = text.strip().splitlines()
    assert disk.replaced >= fail_replace and code == 2 and len(err) == 1 and "OutputError" in err[0], err
    failed = out / ("report.html" if fail_replace == 2 else "model")
    assert err[0].split(": cannot write ")[1].startswith(f"{failed}: "), err
    assert {p: (out / p).read_bytes() for p in _all_files(out)} == before


def test_an_output_set_is_all_new_or_all_old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = tmp_path / "a.txt", tmp_path / "sub" / "b.txt", tmp_path / "c.txt"
    atomic_write_text(a, "old a")
    atomic_write_text(c, "old c")
    with monkeypatch.context() as m:
        FullDisk(fail_replace=3).install(m)
        with pytest.raises(OutputError, match=r"c\.txt"), atomic_set():
            atomic_write_text(a, "new a")
            atomic_write_text(b, "new b")
            atomic_write_text(c, "new c")
    assert a.read_text() == "old a" and c.read_text() == "old c" and not b.exists()
    assert not (tmp_path / "sub").exists()  # the directory the set made is gone again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "c.txt"]
    with atomic_set():
        atomic_write_text(a, "first")
        atomic_write_text(a, "second")  # written twice: the last version is published
        assert not a.read_text().startswith(("first", "second"))  # nothing published before the end
    assert a.read_text() == "second"
    with pytest.raises(ZeroDivisionError), atomic_set():
        atomic_write_text(b, "x")
        _ = 1 / 0
    assert not b.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "c.txt"]


def test_a_single_file_write_error_is_one_output_error_naming_the_file(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as m:
        FullDisk(fail_at=1).install(m)
        with pytest.raises(OutputError, match=r"cannot write .*x\.csv: No space left on device") as info:
            write_csv_atomic(tmp_path / "x.csv", ["a"], [[1]] * 5)
    assert info.value.errno == errno.ENOSPC and isinstance(info.value, OSError)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- a network party


def test_a_network_party_writes_output_messages_and_run_record_all_or_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Both parties of a network alignment run here (threads, real gRPC links); the active party's disk
    fills at its output, its kept messages or its run record: it exits 2 with one line naming the file and
    leaves none of the three; the passive party, told so in ``net.done``, exits 2 naming the active party
    and keeps none of its own."""
    import socket
    import threading

    from vflcrypto.runtime.certs import write_dev_pki
    from vflcrypto.runtime.partyconfig import render_config_toml

    names = ["active", "passive-0"]
    pki = tmp_path / "pki"
    write_dev_pki(pki, names)

    def port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    for target in ("aligned.csv", "aligned.csv.messages", "aligned.csv.run.json"):
        d = tmp_path / target
        d.mkdir()
        cfg = d / "parties.toml"
        cfg.write_text(render_config_toml({n: (n.split("-")[0], f"127.0.0.1:{port()}") for n in names},
                                          ca=str(pki / "ca.pem"),
                                          certs={n: (str(pki / f"{n}.pem"), str(pki / f"{n}.key")) for n in names},
                                          network={"connect_timeout": 10.0, "timeout": 10.0, "linger": 1.0}))
        for n, lo in (("active", 0), ("passive-0", 4)):
            write_csv_atomic(d / f"{n}.csv", ["id", "v"], [[f"u{i}", i] for i in range(lo, lo + 10)])
            (d / n).mkdir()
        codes: dict[str, int] = {}

        def run(name: str, d: Path = d, cfg: Path = cfg, codes: dict[str, int] = codes) -> None:
            codes[name] = main(["party", "--config", str(cfg), "--as", name, "--json", "align", "--data",
                                str(d / f"{name}.csv"), "--id-column", "id", "--out", str(d / name / "aligned.csv"),
                                "--keep-messages"])

        capsys.readouterr()
        with monkeypatch.context() as m:
            FullDisk(fail_path=d / "active" / target).install(m)
            threads = [threading.Thread(target=run, args=(n,)) for n in names]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        err = capsys.readouterr().err.strip().splitlines()
        assert codes == {"active": 2, "passive-0": 2}, (target, codes, err)
        mine = [e for e in err if str(d / "active" / target) in e]
        assert len(mine) == 1 and "No space left on device" in mine[0], err
        theirs = [e for e in err if e not in mine]
        assert len(theirs) == 1 and "passive-0: active could not write its output (No space left on device)" \
            in theirs[0], err
        assert _all_files(d / "active") == set(), target
        assert _all_files(d / "passive-0") == set(), target  # the run's outputs appear at every party or at none
