"""A party's bucketed alignment on its own Ray cluster (``vflcrypto --parallel ray align … --memory-budget``).

With the Ray backend (:mod:`vflcrypto.parallel`: ``--parallel ray``, ``--ray-address``,
``$VFLCRYPTO_BACKEND``) a bucketed run (:mod:`.buckets`) sends the party's *local* per-bucket
work to Ray tasks on its own cluster; the process that holds the party's one link to the peer
(its channel: mutual TLS in the party-process form) keeps every cross-party message, and no
Ray worker ever talks to the other party. Every task is a pure function of plain values
(:mod:`.spill`: :func:`.spill.spill_block`, :func:`.spill.count_bucket`,
:func:`.spill.parse_bucket`, :func:`.spill.result_records`), and this process writes their
results in the one-process order, so the files are the one-process run's bytes.

How the cost divides:

* **spill** (canonical IDs, the keyed BLAKE2b bucket hash, each row's CSV formatting): Ray
  tasks, one per block of 32 768 rows, a window of ``2 × CPUs`` blocks in flight. Scales with
  the number of Ray workers. The link holder reads the CSV (one sequential pass) and appends
  the returned records to the spill files.
* **bucket sizes** (parsing and de-duplicating each spill file): Ray tasks, one per bucket.
* **per-bucket loading and result sorting**: Ray tasks, pipelined with the PSI: bucket
  ``b + 1`` is parsed and bucket ``b − 1``'s aligned rows sorted by canonical ID while
  bucket ``b``'s PSI runs on the link.
* **stays on the link holder**: the bucket PSI itself, message by message (KKRT's OT
  extension, the sender's OPRF evaluation of each received matrix chunk, the receiver's
  matching; ECDH's blinding). It is interactive per chunk and per bucket, and the OPRF key
  (KKRT's choice bits ``s``, the ECDH scalar) is private-key material, which the project never
  sends to a Ray cluster without TLS (:func:`vflcrypto.parallel.on_ray`). The sender's KKRT
  evaluation of a chunk is non-interactive given that chunk, but splitting it into tasks moves
  ``q`` (the chunk's 64 KiB·rows/… matrix rows, derived from ``s``) and costs more in transfer
  than the ~µs of AES/hash per pair it saves at these chunk sizes; the buckets' PSIs run one
  at a time because the link carries one PSI session at a time (parallel sessions would need
  a bucket tag on every message: a new declaration). Also on the link holder: reading the
  input, writing the spill and result files, and the final merge (one sequential pass).

Bytes moved within the cluster (the link holder ↔ its workers): each row about three times
out and three times back: its CSV fields to a spill task and its spill record back; each
spill file to a counting task (a count back); each spill file again to a parse task and its
keys and lines back; the bucket's keys, lines and positions to a result task and the sorted
records back. With ``r`` bytes per row that is ~6·r per row (~0.6 GB at 10⁶ rows of 100 B),
all between the party's own machines; the peer sees exactly the messages of a one-process run.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from vflcrypto import parallel

__all__ = ["CountedExecutor", "bucket_executor", "ordered_map"]

T = TypeVar("T")


def bucket_executor(backend: str | None = None) -> Executor | None:
    """The party's Ray cluster's executor when the backend is Ray, else ``None`` (the in-process path).

    ``backend`` overrides :func:`vflcrypto.parallel.backend` (``"process"``: in process; ``"ray"``
    also makes Ray this process's backend, :func:`vflcrypto.parallel.configure`).
    The tasks hold the party's own IDs and the bucket key (known to both parties, not a
    private key), as the project's other public-key Ray work holds its own plaintexts.
    """
    if (backend or parallel.backend()) != "ray":
        return None
    if backend == "ray" and parallel.backend() != "ray":
        parallel.configure("ray")
    inner = parallel.get_executor()
    return None if inner is None else CountedExecutor(inner)


class CountedExecutor(Executor):
    """An executor that counts the tasks one run submits (the run's ``cluster_tasks``)."""

    def __init__(self, inner: Executor) -> None:
        self.inner, self.tasks = inner, 0

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        self.tasks += 1
        return self.inner.submit(fn, *args, **kwargs)


def ordered_map(executor: Executor, fn: Callable[..., T], args: Iterable[tuple[Any, ...]],
                window: int | None = None) -> Iterator[T]:
    """``fn(*a)`` for each ``a`` as tasks of ``executor``, results in input order, at most
    ``window`` (default: twice the cluster's CPUs) in flight: memory stays bounded."""
    limit = window or 2 * max(1, parallel.worker_count())
    queue: collections.deque[Future[T]] = collections.deque()
    for a in args:
        queue.append(executor.submit(fn, *a))
        if len(queue) >= limit:
            yield queue.popleft().result()
    while queue:
        yield queue.popleft().result()
