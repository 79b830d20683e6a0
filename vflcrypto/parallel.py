"""One process pool for big-integer work.

gmpy2 holds the GIL, so threads do not speed up Paillier arithmetic; processes do. The
pool is created lazily, once per process, sized from ``os.cpu_count()`` and overridable
with the environment variable ``VFLCRYPTO_WORKERS`` (``0`` or ``1`` disable the pool).
It uses the ``forkserver`` start method (``spawn`` where unavailable): parties run in
threads, and forking a multi-threaded process is unsafe.

Work is sent as chunks of plain ints/bytes/tuples to module-level functions; nothing but
those crosses into a worker (no keys objects, no closures). Below a cost threshold
:func:`parallel_map` runs the chunks in-process, so small test vectors never pay for
process start-up. The pool is one single-process executor per worker (:class:`~vflcrypto.pinned_pool.PinnedPool`):
:func:`parallel_map`'s i-th chunk always runs in worker ``i mod workers``, so a worker finds
the ciphertexts of a vector it has parsed before; ``submit`` goes to the least busy worker.

A ``forkserver``/``spawn`` worker imports the main module (a script, as ``__mp_main__``)
before it runs anything, so a script whose parallel work is not guarded by ``if __name__ ==
"__main__":`` would start that work again in every worker. The pool checks first
(:func:`unguarded_main_line`: the statement of the main script running now, if it lies
outside such a guard) and then works in-process instead, saying so in one logged line. If
the pool breaks anyway, :func:`parallel_map` warns, disables the pool and finishes the work
in-process. A worker exits by itself within a second when the process
that owns the pool dies, even by ``kill -9`` (:func:`_watch_owner`). Private-key
operations (decryption, key-holder encryption) send ``p`` and ``q`` to the local worker
processes over a pipe; set
``VFLCRYPTO_WORKERS=1`` if secrets must never leave the calling process.

Ray backend (one party across several machines). With ``VFLCRYPTO_BACKEND=ray`` (or
:func:`configure`) the same chunks run as Ray tasks on *that party's own* Ray cluster:
``VFLCRYPTO_RAY_ADDRESS`` names it (``auto``, ``host:port``); unset, a local instance with
:func:`worker_count` CPUs is started (again, up to :data:`RAY_START_ATTEMPTS` times in all, when
Ray's fixed start-up windows ran out on a loaded machine; a failure is one
:class:`~vflcrypto.errors.ClusterError` line). FATE spreads a party over Spark/Eggroll and
SecretFlow over Ray in the same way. The kernels are the same functions, so results are
identical; only the dispatch differs. Every node needs this package installed. Ray moves
chunks through its own (pickle-based) transport and object store, which has no
authentication and no encryption unless the cluster runs Ray's TLS (``RAY_USE_TLS=1`` with
``RAY_TLS_SERVER_CERT``, ``RAY_TLS_SERVER_KEY`` and ``RAY_TLS_CA_CERT``, on every node and
in this process: :func:`ray_tls`). **Private-key work never goes to a cluster without TLS**:
a chunk that carries a private key (Paillier/OU decryption and key-holder encryption with
``p``, ``q``; ECDH-PSI blinding with the party's secret scalar; ``secret=True`` in
:func:`parallel_map` / :func:`get_executor`) then runs in this machine's own process pool
instead (local pipes, as with the ``process`` backend), and only public-key work
(encryption under a public key, homomorphic operations, histograms) goes to Ray. Those
chunks still hold the party's own plaintext operands, so the cluster remains part of the
party's trust domain, never shared with another party, and reachable only on its private
network. Messages between parties never use it.

Background work (:func:`background`). Work that only fills idle time (precomputed
obfuscators, :mod:`vflcrypto.he.obfuscators`) runs on a second pool of the same size whose
workers lower their own priority to nice 19 when they start: the operating system then
gives them only CPU time that nothing else on the machine wants, so they never slow the
foreground work they are meant to hide behind (the party's own pool, its other threads,
or another party's processes on the same machine). A thread opts in with ``with
parallel.background():``; every :func:`parallel_map` it makes inside the block goes to
that pool. The Ray backend has no priorities: background work runs as ordinary tasks.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import functools
import logging
import multiprocessing
import os
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, TypeVar

from .errors import ClusterError
from .pinned_pool import PinnedPool

__all__ = [
    "BACKENDS",
    "PARALLEL_MIN_COST",
    "backend",
    "background",
    "background_cpu_seconds",
    "chunk_ranges",
    "configure",
    "cpu_seconds",
    "dispatch_counts",
    "get_executor",
    "on_ray",
    "ordered_map",
    "parallel_map",
    "pool_usage",
    "ray_tls",
    "shutdown",
    "unguarded_main_line",
    "worker_count",
]

T = TypeVar("T")

# Estimated cost (in 4096-bit modular multiplications, ~5 us each) below which work stays
# in-process: ~50 ms of work, comfortably more than a warm pool's dispatch overhead.
PARALLEL_MIN_COST = 10_000

BACKENDS = ("process", "ray")
#: starts of a local Ray instance before giving up (Ray's own start-up waits are a fixed 30 s)
RAY_START_ATTEMPTS = 3

_lock = threading.Lock()
_executor: PinnedPool | None = None
_executor_pid: int | None = None
_background: PinnedPool | None = None  # the low-priority pool (see background())
_background_pid: int | None = None
_thread = threading.local()  # .background: this thread's parallel work goes to the background pool
_ray: _RayExecutor | None = None
_config: dict[str, str | None] = {}  # set by configure(); overrides the environment
_dispatched: dict[str, int] = {"process": 0, "ray": 0, "background": 0}
_log = logging.getLogger(__name__)


def configure(backend: str | None = None, *, address: str | None = None) -> None:
    """Choose the backend (``"process"`` or ``"ray"``) and the Ray cluster address in code.

    ``None`` falls back to ``$VFLCRYPTO_BACKEND`` / ``$VFLCRYPTO_RAY_ADDRESS``. A change
    stops the running pool or Ray connection (they restart on next use).
    """
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"parallel backend must be one of {BACKENDS}, not {backend!r}")
    shutdown()
    _config.clear()
    _config.update({"backend": backend, "address": address})


def backend() -> str:
    """The backend in use: :func:`configure`'s choice, else ``$VFLCRYPTO_BACKEND``, else ``process``."""
    name = _config.get("backend") or os.environ.get("VFLCRYPTO_BACKEND", "").strip().lower() or "process"
    if name not in BACKENDS:
        raise ValueError(f"VFLCRYPTO_BACKEND must be one of {BACKENDS}, not {name!r}")
    return name


def dispatch_counts() -> dict[str, int]:
    """Chunks sent to each backend so far in this process (tests and benchmarks)."""
    return dict(_dispatched)


#: the environment variables that configure Ray's TLS (Ray reads the same ones, on every node)
RAY_TLS_FILES = ("RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT")


def ray_tls() -> bool:
    """Whether Ray's TLS is on for this process: ``RAY_USE_TLS`` true and every :data:`RAY_TLS_FILES` set.

    Ray then authenticates and encrypts every connection of the cluster (gRPC over mutual
    TLS); without it, anyone who can reach the cluster's ports can read the chunks or submit
    work, so private-key work stays off it (:func:`on_ray`).
    """
    on = os.environ.get("RAY_USE_TLS", "").strip().lower() in ("1", "true", "yes", "on")
    return on and all(os.environ.get(name, "").strip() for name in RAY_TLS_FILES)


def on_ray(*, secret: bool = False) -> bool:
    """Whether work goes to the Ray cluster: the Ray backend, and for ``secret`` (private-key) work Ray's TLS too."""
    if backend() != "ray":
        return False
    if secret and not ray_tls():
        _note_kept_local()
        return False
    return True


_kept_local_noted = False


def _note_kept_local() -> None:
    global _kept_local_noted
    if not _kept_local_noted:
        _kept_local_noted = True
        _log.info("vflcrypto: private-key work stays in this machine's process pool: the Ray cluster has no TLS "
                  "(RAY_USE_TLS=1 with %s sends it to Ray)", ", ".join(RAY_TLS_FILES))


def worker_count(*, secret: bool = False) -> int:
    """Workers the pool uses: ``$VFLCRYPTO_WORKERS`` if set, else the Ray cluster's CPUs
    (Ray backend, :func:`on_ray`), else ``os.cpu_count()``."""
    env = os.environ.get("VFLCRYPTO_WORKERS")
    if env is not None and env.strip() != "":
        try:
            return max(0, int(env))
        except ValueError:
            return 1
    if on_ray(secret=secret):
        return _ray_executor().cpus
    return os.cpu_count() or 1


class _RayExecutor(Executor):
    """``submit`` as a Ray task on the party's cluster (``concurrent.futures`` futures)."""

    def __init__(self, address: str | None, cpus: int | None) -> None:
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # no GPUs here: keep Ray quiet
        try:
            import ray
        except ImportError as exc:  # the "flower" extra brings Ray
            raise RuntimeError("the Ray backend needs the ray package (pip install 'vflcrypto[flower]' "
                               "or 'ray')") from exc
        self._ray: Any = ray
        self._started = not self._ray.is_initialized()
        if self._started:
            self._init(address, cpus)
        self.cpus = max(1, int(self._ray.cluster_resources().get("CPU", 1)))
        self._call = self._ray.remote(_star)

    def _init(self, address: str | None, cpus: int | None) -> None:
        """Start (or join) the cluster, once more after a start-up that timed out; else one-line ClusterError.

        A local Ray node waits a fixed 30 s for its own server processes to register; on a loaded
        machine the first start can miss that window and the next one, seconds later, does not.
        Joining a named cluster is tried once: a wrong address does not get better by waiting."""
        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        attempts = 1 if address else RAY_START_ATTEMPTS
        for attempt in range(attempts):
            try:
                if address:
                    self._ray.init(address=address, **kw)
                else:
                    self._ray.init(num_cpus=cpus, **kw)
                return
            except Exception as exc:  # Ray raises RuntimeError, ConnectionError, TimeoutError, ValueError...
                with contextlib.suppress(Exception):
                    self._ray.shutdown()  # what a half-started node left behind
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                if attempt + 1 == attempts or "timed out" not in reason.lower():
                    where = f"join the Ray cluster at {address}" if address else "start a local Ray instance"
                    raise ClusterError(f"could not {where} (tried {attempt + 1}x): {reason}") from exc
                _log.warning("a local Ray instance did not start in time (%s); starting it once more", reason)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError("Ray tasks here take positional plain values only")
        _dispatched["ray"] += 1
        return self._call.remote((fn, args)).future()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()


def start_backend() -> None:
    """Start (or join) the Ray backend's cluster now; nothing for the process backend.

    Party processes call it before they connect: a slow local Ray start-up (up to
    :data:`RAY_START_ATTEMPTS` of Ray's fixed 30 s windows on a loaded machine) then delays
    the connection instead of stalling a live link past its peers' timeouts, and a cluster
    that cannot start fails as one :class:`~vflcrypto.errors.ClusterError` before any peer
    waits on this party.
    """
    if on_ray() and worker_count() > 1:
        _ray_executor()


def _ray_executor() -> _RayExecutor:
    global _ray
    with _lock:
        if _ray is None:
            env = os.environ.get("VFLCRYPTO_WORKERS", "").strip()
            cpus = int(env) if env.isdigit() and int(env) > 0 else None
            address = _config.get("address") or os.environ.get("VFLCRYPTO_RAY_ADDRESS") or None
            _ray = _RayExecutor(address, cpus)
        return _ray


@contextlib.contextmanager
def background() -> Iterator[None]:
    """Send this thread's :func:`parallel_map` work to the low-priority background pool.

    Its workers run at nice 19, so they take only CPU time nothing else wants (see the
    module docstring). For producers that fill idle time; never for work a party waits on.
    """
    before = getattr(_thread, "background", False)
    _thread.background = True
    try:
        yield
    finally:
        _thread.background = before


def _in_background() -> bool:
    return bool(getattr(_thread, "background", False))


def _one_worker_pool(initializer: Callable[[int], None]) -> ProcessPoolExecutor:
    methods = multiprocessing.get_all_start_methods()
    method = "forkserver" if "forkserver" in methods else "spawn"
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context(method),
                               initializer=initializer, initargs=(os.getpid(),))


def _new_pool(workers: int, initializer: Callable[[int], None]) -> PinnedPool:
    return PinnedPool([_one_worker_pool(initializer) for _ in range(workers)])


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(e, ast.Name) and e.id == "__name__" for e in sides)
            and any(isinstance(e, ast.Constant) and e.value == "__main__" for e in sides))


@functools.lru_cache(maxsize=8)
def _top_level(path: str, mtime_ns: int) -> tuple[tuple[int, int, bool], ...]:
    """(first line, last line, inside a guard) of each top-level statement of a script (those of a
    top-level ``if __name__ == "__main__":`` body count as guarded)."""
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return ()
    out: list[tuple[int, int, bool]] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and _is_main_guard(stmt.test):
            out.extend((s.lineno, s.end_lineno or s.lineno, True) for s in stmt.body)
        else:
            out.append((stmt.lineno, stmt.end_lineno or stmt.lineno, False))
    return tuple(out)


def unguarded_main_line() -> tuple[str, int] | None:
    """(script, line) when a worker's import of the main script would re-run the statement running now.

    The main thread's stack is searched for the main module's top-level frame (parties run in
    threads, so the caller is often not the main thread); its current line must lie inside the
    body of a top-level ``if __name__ == "__main__":``. ``None`` (safe) when there is no such
    frame or no script: an interactive session, ``python -c``, ``python -m package`` (workers
    skip a ``__main__`` module) or a finished top level.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str):
        return None
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if isinstance(name, str) and (name == "__main__" or name.endswith(".__main__")):
        return None
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)):
        frame = frame.f_back
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        statements = _top_level(path, os.stat(path).st_mtime_ns)
    except OSError:
        return None
    for first, last, guarded in statements:
        if first <= line <= last:
            return None if guarded else (path, first)
    return path, line


_unguarded_noted = False  # the one line about an unguarded script is logged once per process


def _pool_allowed() -> bool:
    """False (after one logged line) when the main script is running unguarded top-level code."""
    global _unguarded_noted
    where = unguarded_main_line()
    if where is None:
        return True
    if not _unguarded_noted:
        _unguarded_noted = True
        _log.warning("vflcrypto: %s line %d runs outside `if __name__ == \"__main__\":`, which worker processes "
                     "would re-run on import; computing in this process", Path(where[0]).name, where[1])
    return False


def get_executor(*, secret: bool = False) -> Executor | None:
    """The shared pool (created on first use), or ``None`` when parallelism is disabled.

    With the Ray backend: an executor whose tasks run on the party's Ray cluster, except for
    ``secret`` (private-key) work while the cluster has no TLS (:func:`on_ray`), which gets
    this machine's process pool. Inside :func:`background`: the low-priority pool (process
    backend). ``None`` as well while an unguarded main script runs
    (:func:`unguarded_main_line`): its workers would re-run it.
    """
    global _executor, _executor_pid, _background, _background_pid
    workers = worker_count(secret=secret)
    if workers <= 1:
        return None
    if on_ray(secret=secret):
        return _ray_executor()
    with _lock:
        current = _background if _in_background() else _executor
        current_pid = _background_pid if _in_background() else _executor_pid
        if (current is None or current_pid != os.getpid()) and not _pool_allowed():
            return None
        if _in_background():
            if _background is None or _background_pid != os.getpid():
                _background, _background_pid = _new_pool(workers, _watch_owner_low_priority), os.getpid()
            return _background
        if _executor is None or _executor_pid != os.getpid():
            _executor, _executor_pid = _new_pool(workers, _watch_owner), os.getpid()
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


LOW_PRIORITY = 19  # the background pool's niceness: the lowest priority Linux gives


def _watch_owner_low_priority(pid: int) -> None:
    """Background-pool initializer: :func:`_watch_owner`, at the lowest CPU priority."""
    with contextlib.suppress(OSError, AttributeError):  # no os.nice (Windows): ordinary priority
        os.nice(LOW_PRIORITY)
    _watch_owner(pid)


def shutdown() -> None:
    """Stop both pools, and a Ray instance this module started (all restart on next use)."""
    global _executor, _background, _ray
    with _lock:
        ex, _executor = _executor, None
        bg, _background = _background, None
        rx, _ray = _ray, None
    for pool in (ex, bg):
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    if rx is not None:
        rx.shutdown()


atexit.register(shutdown)


def _worker_pids(*pools: PinnedPool | None) -> list[int]:
    with _lock:
        return [pid for pool in pools for pid in (getattr(pool, "_processes", None) or {})]


def pool_usage() -> tuple[float, int]:
    """CPU seconds used so far and the largest peak RSS (KiB) of the live workers of both pools.

    The workers are forkserver children, not this process's, so their usage is read from
    ``/proc`` (Linux; elsewhere ``(0.0, 0)``). For benchmarks: per-core rates need the CPU
    time of every process that did the work (background work included).
    """
    return _usage(_worker_pids(_executor, _background))


def background_cpu_seconds() -> float:
    """CPU seconds used so far by the live workers of the background pool (:func:`background`)."""
    return _usage(_worker_pids(_background))[0]


def _usage(pids: list[int]) -> tuple[float, int]:
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
    """CPU seconds of this process (all its threads) plus both pools' workers, so far."""
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


def ordered_map(executor: Executor, fn: Callable[..., T], args: Iterable[tuple[Any, ...]],
                window: int | None = None) -> Iterator[T]:
    """``fn(*a)`` for each ``a`` as tasks of ``executor``, results in input order, at most
    ``window`` (default: twice the cluster's CPUs) in flight: ``args`` is consumed lazily, so
    memory stays bounded whatever its length."""
    limit = window or 2 * max(1, worker_count())
    pending: deque[Future[T]] = deque()
    for a in args:
        pending.append(executor.submit(fn, *a))
        if len(pending) >= limit:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def parallel_map(fn: Callable[..., T], chunks: Sequence[tuple[Any, ...]], *,
                 cost: int | None = None, secret: bool = False) -> list[T]:
    """``[fn(*chunk) for chunk in chunks]``, over the pool when worthwhile.

    ``fn`` must be a module-level function and every chunk a tuple of plain values
    (ints, bytes, tuples). ``cost`` estimates the total work in 4096-bit modular
    multiplications; below :data:`PARALLEL_MIN_COST` (or with one chunk, or with the pool
    disabled) the chunks run in the calling process. ``secret``: the chunks carry a private
    key, which never goes to a Ray cluster without TLS (:func:`on_ray`).
    """
    if len(chunks) <= 1 or (cost is not None and cost < PARALLEL_MIN_COST):
        return [fn(*c) for c in chunks]
    ex = get_executor(secret=secret)
    if ex is None:
        return [fn(*c) for c in chunks]
    if isinstance(ex, _RayExecutor):
        return [f.result() for f in [ex.submit(fn, *c) for c in chunks]]
    _dispatched["background" if ex is _background else "process"] += len(chunks)
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
