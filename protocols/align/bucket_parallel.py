"""A party's bucketed alignment on its own Ray cluster (``vflcrypto --parallel ray align … --memory-budget``).

With the Ray backend (:mod:`vflcrypto.parallel`: ``--parallel ray``, ``--ray-address``,
``$VFLCRYPTO_BACKEND``) a bucketed run (:mod:`.buckets`) sends the party's *local* per-bucket
work to Ray tasks on its own cluster; the process that holds the party's one link to the peer
(its channel: mutual TLS in the party-process form) keeps every cross-party message, and no
Ray worker ever talks to the other party. Every task is a pure function of plain values
(:mod:`.spill`: :func:`.spill.spill_block`, :func:`.spill.count_bucket`,
:func:`.spill.parse_bucket`, :func:`.spill.result_records`), and this process writes their
results in the one-process order, so the files are the one-process run's bytes.

How the cost divides (measured: ``bench/psi_ray_bench.py``, KKRT, 10⁵ × 10⁵ IDs, 8 buckets):

* **spill** (canonical IDs, the keyed BLAKE2b bucket hash, each row's CSV formatting): Ray
  tasks, one per block of 32 768 rows, a window of ``2 × CPUs`` blocks in flight; scales with
  the number of Ray workers. The link holder still parses the CSV (one sequential pass: 0.09 s
  per 10⁵ rows here, against 0.17 s for the blocks' work) and appends the returned records to
  the spill files.
* **bucket sizes** (parsing and de-duplicating each spill file, ~3 µs per row): Ray tasks,
  one per bucket; scales with the workers up to the bucket count.
* **per-bucket loading and result sorting**: Ray tasks, pipelined with the PSI: bucket
  ``b + 1`` is parsed and bucket ``b − 1``'s aligned rows sorted by canonical ID while
  bucket ``b``'s PSI runs on the link. Hidden behind the PSI, not divided by the workers.
* **stays on the link holder**: the bucket PSI itself, message by message; ~70 % of a
  one-process run here (2.35 s of 3.26 s). Per KKRT bucket of 12 500 IDs (0.26 s): the base
  OTs, interactive public-key work of fixed size, 0.15 s; the sender's OPRF evaluation of the
  received matrix chunks 0.04 s (0.24 s of 0.84 s at 10⁵ IDs in one bucket); the receiver's
  matrix 0.03 s; the matching 0.005 s. The sender's evaluation of a chunk is non-interactive
  given that chunk and could be split into tasks, but its inputs (``q``, 64 bytes per table
  row, and the choice bits ``s``) are the OPRF key: private-key material, which the project
  never sends to a Ray cluster without TLS (:func:`vflcrypto.parallel.on_ray`). Even under Ray's
  TLS the gain is small: a full chunk (65 536 rows, ``q`` 4 MiB) carries ~1.3·10⁵ (ID, bin)
  pairs at ~0.8 µs each, ~0.1 s of work against ~6.5 MB to move (``q`` and the pairs' item
  hashes; ~50 ms at 1 Gbit/s): at best about half of that step, itself under a third of a
  bucket's PSI; not done. The receiver's matching is a set lookup over the
  values it holds in memory (5 ms per 12 500 IDs): not worth a transfer. The buckets' PSIs run
  one at a time because the link carries one PSI session at a time (parallel sessions would
  need a bucket tag on every message: a new declaration). Also on the link holder: reading
  the input, writing the spill and result files, and the final merge (one sequential pass).

Bytes moved within the cluster (the link holder ↔ its workers), measured by pickling every
task's arguments and result: 224 bytes per row out and 149 back for rows of 31 CSV bytes
(each row goes out about four times: its fields to a spill task; its spill record to a
counting task and again to a parse task; its key and line to a result task; and comes back
as a spill record, a parsed key and line, and a result record), all between the party's
own machines; the peer sees exactly the messages of a one-process run (a party's choice of
backend is its own: a Ray party aligns with an in-process party to the same bytes).

On this 2-core machine shared with other work (load 2.5-3) a local Ray instance of 2 CPUs,
shared by both parties, only adds overhead: 4.1 s warm (5.0 s cold, plus 4 s to start Ray)
against 3.3 s in process; the spill phase 0.85 s against 0.66 s. What it buys is room on a
real cluster: the spill and counting (20 % of the run here, 0.66 s) divide by the workers, the link
holder's share is then the CSV pass, the PSIs, the file writes and the merge.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from vflcrypto import parallel

__all__ = ["CountedExecutor", "bucket_executor"]

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
