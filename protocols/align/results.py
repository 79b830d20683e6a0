"""Result files of bucketed alignment: each bucket's aligned rows, sorted by canonical ID, and their merge.

A result record is ``<I key length><I line length>``, the canonical ID, the CSV line (plain
binary, no pickle); a result file appears atomically once its bucket is finished (the mark
a resume reads). After a simple CSV's spill (:mod:`.spill`) each result file also gets an
index of its record headers (``.idx``, written first), so the output is merged in numpy
(:func:`_merge_indexed`) and the intersection counted without walking the records.
"""

from __future__ import annotations

import csv
import heapq
import io
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.atomic import PRIVATE, atomic_open
from vflcrypto.errors import InputDataError
from vflcrypto.psi import primitives as psi

from . import fastcsv
from .tables import canonical_order

__all__ = ["INDEX", "RESULT", "RESULT_DTYPE", "merge_results", "result_index", "result_path", "result_records",
           "write_result_bytes"]

RESULT = struct.Struct("<II")
RESULT_DTYPE = np.dtype([("key", "<u4"), ("line", "<u4")])  # RESULT as a numpy record
INDEX = ".idx"  # the suffix of a file's index beside it


def result_path(work: Path, b: int) -> Path:
    return work / "done" / f"{b:06d}.bin"


def result_records(keys: list[bytes], lines: list[bytes], positions: np.ndarray | None) -> bytes:
    """A bucket's result file: its aligned rows (``positions`` into the bucket; ``None``: none) sorted by
    canonical ID; plain values in and out, so it runs as a Ray task too."""
    if positions is None:
        return b""
    order = canonical_order(psi.CanonicalIds(tuple(keys), np.arange(len(keys), dtype=np.int64), len(keys)),
                            positions)
    return b"".join(RESULT.pack(len(keys[i]), len(lines[i])) + keys[i] + lines[i] for i in order.tolist())


def write_result_bytes(work: Path, b: int, data: bytes, index: bytes | None = None) -> None:
    """Bucket ``b``'s result file, atomically: the file is the mark that the bucket is finished.

    ``index`` (the records' ``<II>`` headers, from :meth:`IndexedBucket.result`) is written
    first, beside it, for the numpy merge (:func:`merge_results`).
    """
    out = result_path(work, b)
    out.parent.mkdir(mode=0o700, exist_ok=True)
    if index is not None:
        with atomic_open(out.with_suffix(INDEX), "wb", permissions=PRIVATE) as fh:
            fh.write(index)
    with atomic_open(out, "wb", permissions=PRIVATE) as fh:
        fh.write(data)


def _results(path: Path) -> Iterator[tuple[bytes, bytes]]:
    """A result file's records, read in 1 MiB pieces (the merge holds one piece per bucket)."""
    with path.open("rb") as fh:
        buf = b""
        while True:
            more = fh.read(1 << 20)
            buf += more
            off = 0
            while off + RESULT.size <= len(buf):
                klen, llen = RESULT.unpack_from(buf, off)
                stop = off + RESULT.size + klen + llen
                if stop > len(buf):
                    break
                k = buf[off + RESULT.size : off + RESULT.size + klen]
                yield k + b"\x01", buf[off + RESULT.size + klen : stop]
                off = stop
            buf = buf[off:]
            if not more:
                if buf:
                    raise InputDataError(f"{path} is truncated")
                return


def result_index(work: Path, b: int) -> np.ndarray:
    """Bucket ``b``'s result records' headers: from the index beside the file, else by walking the records."""
    path = result_path(work, b)
    side = path.with_suffix(INDEX)
    if side.exists():
        return np.fromfile(side, RESULT_DTYPE)
    heads = [(len(k) - 1, len(line)) for k, line in _results(path)]  # _results' keys carry the 0x01 end byte
    return np.asarray(heads, RESULT_DTYPE) if heads else np.zeros(0, RESULT_DTYPE)


class _Run:
    """One bucket's sorted result file, read ``chunk`` records at a time, its index read alongside (so a
    merge holds no bucket's whole index)."""

    def __init__(self, work: Path, b: int) -> None:
        path = result_path(work, b)
        side = path.with_suffix(INDEX)
        self.walked: np.ndarray | None = None
        self.heads: Any = None
        if side.exists():
            self.heads = side.open("rb")
            self.count = side.stat().st_size // RESULT_DTYPE.itemsize
        else:  # a bucket loaded the walk's way (a repeated hash): its index from its records
            self.walked = result_index(work, b)
            self.count = len(self.walked)
        self.fh = path.open("rb")
        self.next = 0  # the first record not yet read

    def read(self, chunk: int) -> tuple[bytes, np.ndarray] | None:
        """The next up-to-``chunk`` records' bytes and headers, or ``None`` at the end."""
        if self.next >= self.count:
            self.close()
            return None
        n = min(chunk, self.count - self.next)
        if self.walked is not None:
            heads = self.walked[self.next : self.next + n]
        else:
            heads = np.frombuffer(self.heads.read(n * RESULT_DTYPE.itemsize), RESULT_DTYPE)
        size = n * RESULT.size + int(heads["key"].sum(dtype=np.int64)) + int(heads["line"].sum(dtype=np.int64))
        data = self.fh.read(size)
        if len(heads) != n or len(data) != size:
            raise InputDataError(f"{self.fh.name} is truncated")
        self.next += n
        return data, heads

    def close(self) -> None:
        self.fh.close()
        if self.heads is not None:
            self.heads.close()

    @property
    def done(self) -> bool:
        return self.next >= self.count


_MERGE_POOL = 1 << 19  # records the numpy merge reads per round, over all buckets (~100 MiB of pool and sort)


def _merge_indexed(work: Path, buckets: int, fh: Any, chunk: int | None = None) -> int:
    """The merge of :func:`merge_results` in numpy, for a simple CSV's results (NUL-free ASCII IDs).

    A pool holds the records read and not yet written; each round reads the next ``chunk``
    records of every bucket whose pooled records are running out, sorts the pool by canonical
    ID (:meth:`~vflcrypto.psi.packed.PackedIds.order_of`: the byte order, which for NUL-free
    IDs is :func:`.tables.canonical_order`'s) and writes every record up to the least of the
    buckets' last-read IDs: no record still unread can come before it. Memory: about
    ``buckets × 2 chunk`` records (``chunk`` defaults to :data:`_MERGE_POOL` over the buckets, so
    the pool stays near a million records whatever the bucket count: ~200 MiB with its sort).
    """
    chunk = chunk or max(256, _MERGE_POOL // buckets)
    runs = [_Run(work, b) for b in range(buckets)]
    try:
        pool_data: list[bytes] = []
        pool_heads: list[np.ndarray] = []
        pool_run: list[np.ndarray] = []
        pooled = np.zeros(buckets, np.int64)
        count = 0
        while True:
            for b, run in enumerate(runs):
                if pooled[b] < chunk:
                    got = run.read(chunk)
                    if got is not None:
                        pool_data.append(got[0])
                        pool_heads.append(got[1])
                        pool_run.append(np.full(len(got[1]), b, np.int32))
                        pooled[b] += len(got[1])
            if not sum(map(len, pool_heads)):
                return count  # every run read and every record written
            data = np.frombuffer(b"".join(pool_data), np.uint8)
            heads = np.concatenate(pool_heads)
            owner = np.concatenate(pool_run)
            klen, llen = heads["key"].astype(np.int64), heads["line"].astype(np.int64)
            size = RESULT.size + klen + llen
            begin = np.cumsum(size) - size
            offsets = np.zeros(len(heads) + 1, np.int64)
            np.cumsum(klen, out=offsets[1:])
            keys = psi.PackedIds(fastcsv.gather(data, begin + RESULT.size, klen), offsets)
            order = keys.byte_order(np.arange(len(heads), dtype=np.int64))
            # the bound: the last pooled record of each bucket with records still unread (a bucket's records
            # come sorted, so its last pooled one is its largest); nothing unread is below the least of them
            unread = [b for b, run in enumerate(runs) if not run.done]
            cut = len(order)
            if unread:
                last_of = np.full(buckets, -1, np.int64)
                last_of[owner] = np.arange(len(owner))  # a later record of a bucket overwrites an earlier one
                rank = np.empty(len(order), np.int64)
                rank[order] = np.arange(len(order))
                cut = int(rank[last_of[unread]].min()) + 1
            emit, keep = order[:cut], np.sort(order[cut:])  # the kept records stay in pool (read) order
            fh.write(fastcsv.gather(data, begin[emit] + RESULT.size + klen[emit], llen[emit]))
            count += len(emit)
            pooled -= np.bincount(owner[emit], minlength=buckets)
            pool_data = [fastcsv.gather(data, begin[keep], size[keep])]
            pool_heads, pool_run = [heads[keep]], [owner[keep]]
    finally:
        for run in runs:
            run.close()


def merge_results(work: Path, buckets: int, out: Path, header: tuple[str, ...], *, indexed: bool = False) -> int:
    """Write the output CSV: the header, then every bucket's aligned rows merged by canonical ID.

    The sort key is the canonical ID followed by one byte 0x01, as in
    :func:`.tables.canonical_order`, so the order is the unbucketed run's; the merge
    keeps one record (and one read buffer) per bucket in memory, or, after a simple CSV's
    spill (``indexed``: NUL-free IDs, every result indexed or walked once), a few thousand per
    bucket merged in numpy (:func:`_merge_indexed`). Returns the rows written.
    """
    head = io.StringIO()
    csv.writer(head, lineterminator="\n").writerow(header)
    count = 0
    with atomic_open(out, "wb") as fh:
        fh.write(head.getvalue().encode("utf-8"))
        if indexed:
            return _merge_indexed(work, buckets, fh)
        for _, line in heapq.merge(*(_results(result_path(work, b)) for b in range(buckets))):
            fh.write(line)
            count += 1
    return count
