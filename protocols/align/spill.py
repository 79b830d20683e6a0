"""Spill files of bucketed alignment: a party's rows, hashed into buckets, on disk.

Bucketed PSI (:mod:`.buckets`) never holds a whole set: each party streams its CSV once,
hashes each canonical ID with the run's bucket key into one of ``B`` buckets and appends
the row to that bucket's spill file; each bucket is then loaded alone, aligned by the
two-party PSI, and its aligned rows written (sorted by canonical ID) to a result file;
the output is one external merge of the result files. The formats are plain binary
records (no pickle):

* spill record: ``<q row><I key length><I line length>``, the canonical ID, the row as
  the output's CSV writer formats it (so the merged output is byte for byte the one
  :func:`.files.write_aligned` writes);
* result record: ``<I key length><I line length>``, the canonical ID, the CSV line.

Every file is written under the party's work directory, owner-only; a result file
appears atomically (it is the mark that its bucket is finished).
"""

from __future__ import annotations

import csv
import hashlib
import heapq
import io
import os
import struct
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from vflcrypto.data.atomic import PRIVATE, atomic_open
from vflcrypto.errors import InputDataError
from vflcrypto.psi import primitives as psi

from .idtable import IdTable
from .tables import canonical_order

__all__ = ["BucketRows", "bucket_index", "input_digest", "load_bucket", "merge_results", "result_path",
           "spill_rows", "write_result"]

_SPILL = struct.Struct("<qII")
_RESULT = struct.Struct("<II")
_FLUSH_BYTES = 8 << 20  # spill buffers written out past 8 MiB in all (~2x that resident: one object per row)
_BLOCK = 1 << 15  # rows hashed per block


def input_digest(path: Path) -> str:
    """SHA-256 of the input file (a resume is refused when its input changed)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def bucket_index(key: bytes, ids: list[bytes], buckets: int) -> np.ndarray:
    """Each canonical ID's bucket: keyed BLAKE2b (64 bits) of the ID modulo ``buckets``.

    The key is agreed by both parties (:mod:`.buckets`), so a common ID falls in the same
    bucket at both; the bias of a 64-bit value modulo ``buckets`` (< 2⁻⁴⁰) is negligible.
    """
    blake = hashlib.blake2b
    raw = b"".join([blake(i, key=key, digest_size=8).digest() for i in ids])
    return (np.frombuffer(raw, "<u8") % np.uint64(buckets)).astype(np.int64)


def _spill_dir(work: Path) -> Path:
    return work / "spill"


def _spill_path(work: Path, b: int) -> Path:
    return _spill_dir(work) / f"{b:06d}.bin"


def result_path(work: Path, b: int) -> Path:
    return work / "done" / f"{b:06d}.bin"


def _canon(value: str, strip: bool, row: int) -> bytes:
    try:
        if value and not strip:
            return unicodedata.normalize("NFC", value).encode("utf-8")
        return psi.canonical_id(value, strip=strip)
    except UnicodeEncodeError:
        raise InputDataError(f"line {row + 2}: ID is not valid Unicode text (lone surrogate)") from None
    except InputDataError as exc:
        raise InputDataError(f"line {row + 2}: {exc}") from None


def spill_rows(table: IdTable, work: Path, key: bytes, buckets: int, *, strip: bool) -> None:
    """Stream ``table`` into one spill file per bucket (memory: the write buffers, ~16 MiB)."""
    spill = _spill_dir(work)
    spill.mkdir(mode=0o700, parents=True, exist_ok=True)
    for old in spill.glob("*.bin"):  # a run killed while spilling starts its spill again
        old.unlink()
    buffers: list[list[bytes]] = [[] for _ in range(buckets)]
    pending = 0
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    col = table.header.index(table.id_column)

    def flush() -> None:
        for b, parts in enumerate(buffers):
            if parts:
                fd = os.open(_spill_path(work, b), os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE)
                with os.fdopen(fd, "ab") as fh:
                    fh.write(b"".join(parts))
                parts.clear()

    def block_out(rows: list[tuple[str, ...]], start: int) -> int:
        keys = [_canon(r[col], strip, start + j) for j, r in enumerate(rows)]
        for j, (r, k, b) in enumerate(zip(rows, keys, bucket_index(key, keys, buckets).tolist(), strict=True)):
            out.seek(0)
            out.truncate()
            writer.writerow(r)
            line = out.getvalue().encode("utf-8")
            buffers[b].append(_SPILL.pack(start + j, len(k), len(line)) + k + line)
        return sum(len(k) + 64 for k in keys)

    block: list[tuple[str, ...]] = []
    start = 0
    for row in table._rows():
        block.append(row)
        if len(block) == _BLOCK:
            pending += block_out(block, start)
            start += len(block)
            block = []
            if pending >= _FLUSH_BYTES:
                flush()
                pending = 0
    block_out(block, start)
    start += len(block)
    flush()
    if start != table.n_rows:
        raise InputDataError(f"{table.path} changed while it was being aligned ({start} rows, was {table.n_rows})")


class BucketRows:
    """One bucket's distinct IDs (input order, the first of duplicates kept) and their CSV lines."""

    def __init__(self, keys: list[bytes], lines: list[bytes], rows: list[int]) -> None:
        self.keys, self.lines, self.rows = keys, lines, rows

    def canon(self) -> psi.CanonicalIds:
        return psi.CanonicalIds(tuple(self.keys), np.arange(len(self.keys), dtype=np.int64), len(self.keys))


def load_bucket(work: Path, b: int, *, duplicates: str, path: Path, keep_first_flag: str) -> BucketRows:
    """Bucket ``b``'s rows; a duplicate ID is refused (naming both lines) unless ``duplicates == 'keep_first'``.

    A repeated ID always falls in the bucket of its first occurrence, and rows are
    appended in input order, so the first row of each ID is kept, as without buckets.
    """
    f = _spill_path(work, b)
    data = f.read_bytes() if f.exists() else b""
    keys: list[bytes] = []
    lines: list[bytes] = []
    rows: list[int] = []
    seen: dict[bytes, int] = {}
    off, end = 0, len(data)
    while off < end:
        row, klen, llen = _SPILL.unpack_from(data, off)
        off += _SPILL.size
        k = data[off : off + klen]
        line = data[off + klen : off + klen + llen]
        off += klen + llen
        first = seen.get(k)
        if first is not None:
            if duplicates != "keep_first":
                raise InputDataError(f"{path}: line {row + 2}: duplicate ID (first seen at line {first + 2}): every "
                                     f"ID must appear once (or pass {keep_first_flag} to keep the first occurrence)")
            continue
        seen[k] = row
        keys.append(k)
        lines.append(line)
        rows.append(row)
    return BucketRows(keys, lines, rows)


def write_result(work: Path, b: int, bucket: BucketRows, positions: np.ndarray | None) -> None:
    """Bucket ``b``'s aligned rows (``positions`` into the bucket; ``None``: this party learns none),
    sorted by canonical ID, atomically: the file is the mark that the bucket is finished."""
    out = result_path(work, b)
    out.parent.mkdir(mode=0o700, exist_ok=True)
    canon = bucket.canon()
    order = canonical_order(canon, positions) if positions is not None else np.zeros(0, np.int64)
    with atomic_open(out, "wb", permissions=PRIVATE) as fh:
        fh.write(b"".join(_RESULT.pack(len(bucket.keys[i]), len(bucket.lines[i])) + bucket.keys[i] + bucket.lines[i]
                          for i in order.tolist()))


def _results(path: Path) -> Iterator[tuple[bytes, bytes]]:
    """A result file's records, read in 1 MiB pieces (the merge holds one piece per bucket)."""
    with path.open("rb") as fh:
        buf = b""
        while True:
            more = fh.read(1 << 20)
            buf += more
            off = 0
            while off + _RESULT.size <= len(buf):
                klen, llen = _RESULT.unpack_from(buf, off)
                stop = off + _RESULT.size + klen + llen
                if stop > len(buf):
                    break
                k = buf[off + _RESULT.size : off + _RESULT.size + klen]
                yield k + b"\x01", buf[off + _RESULT.size + klen : stop]
                off = stop
            buf = buf[off:]
            if not more:
                if buf:
                    raise InputDataError(f"{path} is truncated")
                return


def merge_results(work: Path, buckets: int, out: Path, header: tuple[str, ...]) -> int:
    """Write the output CSV: the header, then every bucket's aligned rows merged by canonical ID.

    The sort key is the canonical ID followed by one byte 0x01, as in
    :func:`.tables.canonical_order`, so the order is the unbucketed run's; the merge
    keeps one record (and one read buffer) per bucket in memory. Returns the rows written.
    """
    head = io.StringIO()
    csv.writer(head, lineterminator="\n").writerow(header)
    count = 0
    with atomic_open(out, "wb") as fh:
        fh.write(head.getvalue().encode("utf-8"))
        for _, line in heapq.merge(*(_results(result_path(work, b)) for b in range(buckets))):
            fh.write(line)
            count += 1
    return count
