"""One process pool for big-integer work.

gmpy2 holds the GIL, so threads do not speed up Paillier arithmetic; processes do. The
pool is created lazily, once per process, sized from ``os.cpu_count()`` and overridable
with the environment variable ``VFLCRYPTO_WORKERS`` (``0`` or ``1`` disable the pool).
It uses the ``forkserver`` start method (``spawn`` where unavailable): parties run in
threads, and forking a multi-threaded process is unsafe.

Work is sent as chunks of plain ints/bytes/tuples to module-level functions; nothing but
those crosses into a worker (no keys objects, no closures). Below a cost threshold
:func:`parallel_map` runs the chunks in-process, so small test vectors never pay for
process start-up.

As with any ``forkserver``/``spawn`` pool, a *script* that triggers parallel work must
guard its entry point with ``if __name__ == "__main__":`` (the workers import the main
module). If the pool breaks anyway, :func:`parallel_map` warns, disables the pool and
finishes the work in-process. A worker exits by itself within a second when the process
that owns the pool dies, even by ``kill -9`` (:func:`_watch_owner`). Private-key
operations (decryption, key-holder encryption) send ``p`` and ``q`` to the local worker
processes over a pipe; set
``VFLCRYPTO_WORKERS=1`` if secrets must never leave the calling process.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "PARALLEL_MIN_COST",
    "chunk_ranges",
    "cpu_seconds",
    "get_executor",
    "parallel_map",
    "pool_usage",
    "shutdown",
    "worker_count",
]

T = TypeVar("T")

# Estimated cost (in 4096-bit modular multiplications, ~5 us each) below which work stays
# in-process: ~50 ms of work, comfortably more than a warm pool's dispatch overhead.
PARALLEL_MIN_COST = 10_000

_lock = threading.Lock()
_executor: ProcessPoolExecutor | None = None
_executor_pid: int | None = None


def worker_count() -> int:
    """Workers the pool uses: ``$VFLCRYPTO_WORKERS`` if set, else ``os.cpu_count()``."""
    env = os.environ.get("VFLCRYPTO_WORKERS")
    if env is not None and env.strip() != "":
        try:
            return max(0, int(env))
        except ValueError:
            return 1
    return os.cpu_count() or 1


def get_executor() -> Executor | None:
    """The shared pool (created on first use), or ``None`` when parallelism is disabled."""
    global _executor, _executor_pid
    workers = worker_count()
    if workers <= 1:
        return None
    with _lock:
        if _executor is None or _executor_pid != os.getpid():
            methods = multiprocessing.get_all_start_methods()
            method = "forkserver" if "forkserver" in methods else "spawn"
            _executor = ProcessPoolExecutor(
                max_workers=workers, mp_context=multiprocessing.get_context(method),
                initializer=_watch_owner, initargs=(os.getpid(),),
            )
            _executor_pid = os.getpid()
        return _executor


WATCH_INTERVAL = 0.5  # seconds between a worker's checks that its owner still lives


def _owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user took the pid: the owner is gone
        return False
    return True


def _watch_owner(pid: int) -> None:
    """Worker initializer: exit at once when the process that owns the pool dies.

    A ``forkserver`` worker is not a child of its owner, so a killed owner (``kill -9``:
    no ``atexit``, no shutdown) would leave it idle, re-parented to init. A daemon thread
    checks every :data:`WATCH_INTERVAL` seconds and ends the worker with ``os._exit``
    (nothing of a dead owner's work is worth finishing).
    """

    def watch() -> None:
        while _owner_alive(pid):
            time.sleep(WATCH_INTERVAL)
        os._exit(0)

    threading.Thread(target=watch, name="vflcrypto-owner-watch", daemon=True).start()


def shutdown() -> None:
    """Stop the pool (it is recreated on next use)."""
    global _executor
    with _lock:
        ex, _executor = _executor, None
    if ex is not None:
        ex.shutdown(wait=True, cancel_futures=True)


atexit.register(shutdown)


def pool_usage() -> tuple[float, int]:
    """CPU seconds used so far and the largest peak RSS (KiB) of the pool's live workers.

    The workers are forkserver children, not this process's, so their usage is read from
    ``/proc`` (Linux; elsewhere ``(0.0, 0)``). For benchmarks: per-core rates need the CPU
    time of every process that did the work.
    """
    with _lock:
        pids = list(getattr(_executor, "_processes", None) or {})
    cpu, rss = 0.0, 0
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(stat[11]) + int(stat[12])) / tick
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    rss = max(rss, int(line.split()[1]))
        except (OSError, IndexError, ValueError):
            continue
    return cpu, rss


def cpu_seconds() -> float:
    """CPU seconds of this process (all its threads) plus the pool's workers, so far."""
    return time.process_time() + pool_usage()[0]


def chunk_ranges(total: int, parts: int, *, min_size: int = 1) -> list[tuple[int, int]]:
    """Split ``range(total)`` into at most ``parts`` contiguous (start, stop) ranges."""
    if total <= 0:
        return []
    parts = max(1, min(parts, total // max(1, min_size) or 1))
    step, extra = divmod(total, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + step + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def _star(args: tuple[Callable[..., Any], tuple[Any, ...]]) -> Any:
    fn, chunk = args
    return fn(*chunk)


def parallel_map(fn: Callable[..., T], chunks: Sequence[tuple[Any, ...]], *,
                 cost: int | None = None) -> list[T]:
    """``[fn(*chunk) for chunk in chunks]``, over the pool when worthwhile.

    ``fn`` must be a module-level function and every chunk a tuple of plain values
    (ints, bytes, tuples). ``cost`` estimates the total work in 4096-bit modular
    multiplications; below :data:`PARALLEL_MIN_COST` (or with one chunk, or with the pool
    disabled) the chunks run in the calling process.
    """
    if len(chunks) <= 1 or (cost is not None and cost < PARALLEL_MIN_COST):
        return [fn(*c) for c in chunks]
    ex = get_executor()
    if ex is None:
        return [fn(*c) for c in chunks]
    try:
        return list(ex.map(_star, [(fn, c) for c in chunks]))
    except BrokenProcessPool:
        # Typically a script without the ``if __name__ == "__main__":`` guard that
        # forkserver/spawn need. Stay correct: disable the pool and work in-process.
        warnings.warn("vflcrypto process pool failed; continuing in-process "
                      "(guard your script with `if __name__ == '__main__':`)",
                      RuntimeWarning, stacklevel=2)
        shutdown()
        os.environ["VFLCRYPTO_WORKERS"] = "1"
        return [fn(*c) for c in chunks]
