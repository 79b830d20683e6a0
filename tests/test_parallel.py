"""The process pool: results equal in-process work, and workers never outlive their owner (``kill -9``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vflcrypto import parallel

ROOT = Path(__file__).resolve().parents[1]

OWNER = """
import os, sys, time
os.environ["VFLCRYPTO_WORKERS"] = "2"
from vflcrypto import parallel

if __name__ == "__main__":
    ex = parallel.get_executor()
    pids = sorted({ex.submit(os.getpid).result() for _ in range(8)} | {ex.submit(os.getpid).result()})
    print(" ".join(map(str, pids)), flush=True)
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie that init has not reaped yet counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_workers_exit_when_their_owner_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        pids = [int(x) for x in line.split()]
        assert pids and proc.pid not in pids
        assert all(_alive(p) for p in pids)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10 * parallel.WATCH_INTERVAL + 5
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        assert not [p for p in pids if _alive(p)], "pool workers outlived their killed owner"
    finally:
        proc.kill()


def test_a_worker_knows_whether_its_owner_lives() -> None:
    assert parallel._owner_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not parallel._owner_alive(child.pid)


def test_parallel_map_equals_in_process_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "2")
    chunks = [(i, i + 5) for i in range(0, 40, 5)]
    got = parallel.parallel_map(pow, chunks, cost=10 * parallel.PARALLEL_MIN_COST)
    assert got == [pow(a, b) for a, b in chunks]
