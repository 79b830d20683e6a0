"""``vflcrypto demo --out-dir``: the steps' outputs appear together when every step succeeded, or none does."""

from __future__ import annotations

import argparse
import errno
from pathlib import Path
from typing import Any

import pytest

from vflcrypto.cli import demo
from vflcrypto.errors import OutputError
from vflcrypto.spec import DemoContext


class _Step:
    """A stand-in protocol spec whose demo step writes one file (and reads the previous step's)."""

    def __init__(self, name: str, order: int, fail: bool = False) -> None:
        self.name = self.title = name
        self.demo_order, self.fail = order, fail

    def demo(self, ctx: DemoContext) -> dict[str, Any]:
        if self.demo_order > 0:  # a later step reads what the first wrote, under the staging directory
            assert (ctx.workdir / "first.txt").read_text() == "first"
        if self.fail:
            err = OutputError(f"cannot write {ctx.workdir / 'model.npz'}: No space left on device")
            err.errno = errno.ENOSPC
            raise err
        (ctx.workdir / f"{self.name}.txt").write_text(self.name)
        (ctx.workdir / f"{self.name}_dir").mkdir()
        ctx.say(f"wrote {ctx.where(ctx.workdir / f'{self.name}.txt')}")
        return {"ok": True}


def _demo(out: Path) -> int:
    return demo.run(argparse.Namespace(out_dir=str(out), key_bits=1024, quick=True, json=False, allow_insecure=True))


def _steps(monkeypatch: pytest.MonkeyPatch, *steps: _Step) -> None:
    import vflcrypto.protocols as protocols

    monkeypatch.setattr(protocols, "registry", lambda: {s.name: s for s in steps})


def test_a_failed_step_leaves_nothing_and_earlier_outputs_stay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "earlier.txt").write_text("kept")
    _steps(monkeypatch, _Step("first", 0), _Step("second", 1, fail=True))
    with pytest.raises(OutputError, match="No space left on device"):
        _demo(out)
    assert sorted(p.name for p in out.iterdir()) == ["earlier.txt"]  # the first step's file did not appear
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # and no staging directory stayed


def test_every_output_appears_in_the_named_directory_and_messages_name_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _steps(monkeypatch, _Step("first", 0), _Step("second", 1))
    new = tmp_path / "new"  # a new directory: the staging directory is renamed to it
    assert _demo(new) == 0
    said = capsys.readouterr().out
    assert f"wrote {new / 'first.txt'}" in said and f"outputs in {new}" in said
    assert sorted(p.name for p in new.iterdir()) == ["first.txt", "first_dir", "second.txt", "second_dir"]
    (new / "first_dir" / "stale").write_text("from a previous demo")
    assert _demo(new) == 0  # an existing directory: entries replaced
    assert not (new / "first_dir" / "stale").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]
