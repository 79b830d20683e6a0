"""Helpers of the Flower App tests (tests/test_flower*.py): the scripts, their outputs, the expected lines.

The tests run the Flower App through the same scripts the README documents; a test file
imports what it needs from here (the files are split so that pytest-xdist runs them side
by side: each simulation spends most of its time starting Flower, not computing).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from vflcrypto.protocols import logreg as lr

from vflcrypto.ml.metrics import accuracy

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
VENV_BIN = Path(sys.prefix) / "bin"

#: every Flower test: slow, and skipped without the Flower binaries
FLOWER_MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all((VENV_BIN / tool).exists() for tool in ("flwr", "flower-superlink", "flower-supernode")),
        reason="Flower binaries not installed (pip install -e '.[flower]')",
    ),
]


def expected_lines(steps: int, mode: str, learning_rate: float = 0.5) -> list[str]:
    """The ServerApp's printed lines, from the protocol's plaintext math (no Flower)."""
    data = lr.titanic_parties(seed=0)
    w = [np.zeros(x.shape[1]) for x in data.X_train]
    lines = []
    for t in range(steps):
        z = np.sum([lr.partial_logits(x, wk) for x, wk in zip(data.X_train, w, strict=True)], axis=0)
        _, r, loss = lr.residuals(z, data.y_train)
        w = [lr.sgd_update(wk, lr.local_gradient(x, r), learning_rate) for x, wk in zip(data.X_train, w, strict=True)]
        lines.append(f"[vflcrypto] step {t:2d} loss {loss:.4f}")
    p = lr.sigmoid(np.sum([lr.partial_logits(x, wk) for x, wk in zip(data.X_train, w, strict=True)], axis=0))
    pt = lr.sigmoid(np.sum([lr.partial_logits(x, wk) for x, wk in zip(data.X_test, w, strict=True)], axis=0))
    lines.append(f"[vflcrypto] {mode}: train loss {lr.bce_loss(data.y_train, p):.4f}, "
                 f"test loss {lr.bce_loss(data.y_test, pt):.4f}, test accuracy {accuracy(data.y_test, pt):.4f}")
    return lines


def start_script(name: str, *overrides: str, tmp: Path, timeout: float = 240, nodes: int = 3) -> subprocess.Popen:
    """Start scripts/<name> with run-config overrides (stdout and stderr in one pipe, text), in its own session.

    ``tmp`` holds the script's private FLWR_HOME (kept on failure). Not via TMPDIR: Ray
    creates AF_UNIX sockets (max 107 bytes) under TMPDIR and pytest's paths are long.
    """
    env = dict(os.environ, VENV=sys.prefix, FLWR_WORKDIR=str(tmp), FLWR_TIMEOUT=str(int(timeout - 60)),
               NODES=str(nodes))
    return subprocess.Popen(["bash", str(SCRIPTS / name), *overrides], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def run_script(name: str, *overrides: str, tmp: Path, timeout: float = 240, nodes: int = 3) -> tuple[int, str]:
    """Run scripts/<name> with run-config overrides (:func:`start_script`); return (exit code, stdout+stderr)."""
    proc = start_script(name, *overrides, tmp=tmp, timeout=timeout, nodes=nodes)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the script's trap kills what it started
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"{name} did not finish within {timeout:g} s:\n{out[-3000:]}")
    return proc.returncode, out


def outputs(tmp: Path) -> dict[str, object]:
    return {p.stem: json.loads(p.read_text()) for p in (tmp / "out").glob("*.json")}
