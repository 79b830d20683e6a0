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
* result record (:mod:`.results`): ``<I key length><I line length>``, the canonical ID, the CSV line.

A simple CSV (:mod:`.fastcsv`: no quoting, ASCII) is spilled in numpy, block by block, to
the same spill files, plus an index beside each (``.idx``: each record's header and its ID's
64-bit bucket hash) and an ``indexed`` mark once all are written; its buckets are then
counted and loaded from the indexes (:class:`IndexedBucket`), its result files get an index
of their headers too, and the output is merged in numpy (:mod:`.results`). The csv
path, the Ray tasks and a bucket with a repeated hash keep walking the records.

Every file is written under the party's work directory, owner-only; a result file
appears atomically (it is the mark that its bucket is finished).
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import os
import struct
import unicodedata
from collections.abc import Iterator
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.atomic import PRIVATE
from vflcrypto.errors import InputDataError
from vflcrypto.parallel import ordered_map
from vflcrypto.psi import kkrt
from vflcrypto.psi import primitives as psi

from . import fastcsv, results
from .idtable import IdTable
from .results import INDEX, RESULT, RESULT_DTYPE, result_index, result_path, result_records, write_result_bytes
from .tables import canonical_order

__all__ = ["BucketRows", "IndexedBucket", "bucket_index", "count_bucket", "count_spilled", "csv_line", "csv_lines",
           "input_digest", "load_bucket", "merge_results", "parse_bucket", "result_index", "result_path",
           "result_records", "spill_block", "spill_bytes", "spill_rows", "write_result", "write_result_bytes"]

_SPILL = struct.Struct("<qII")
_SPILL_DTYPE = np.dtype([("row", "<i8"), ("key", "<u4"), ("line", "<u4")])  # _SPILL as a numpy record
#: a spill file's index, written beside it by the simple-CSV spill: each record's header and its ID's
#: 64-bit keyed bucket hash (so a bucket is counted and loaded in numpy, without walking its records)
_INDEX_DTYPE = np.dtype([("row", "<i8"), ("key", "<u4"), ("line", "<u4"), ("hash", "<u8")])
_INDEXED = "indexed"  # the mark that the simple-CSV spill finished, with every bucket's index
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
    batched = kkrt._batched_blake2b()  # one C call for the batch where built; the same digests as hashlib's
    if batched is not None and ids:
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, ids), np.int64, len(ids)), out=offsets[1:])
        raw = batched.blake2b_many(b"".join(ids), offsets, 8, b"", key)
    else:
        keyed = hashlib.blake2b(key=key, digest_size=8).copy  # the key's block compressed once, not per ID
        digests = []
        for i in ids:
            h = keyed()
            h.update(i)
            digests.append(h.digest())
        raw = b"".join(digests)
    return (np.frombuffer(raw, "<u8") % np.uint64(buckets)).astype(np.int64)


def _spill_dir(work: Path) -> Path:
    return work / "spill"


def _spill_path(work: Path, b: int) -> Path:
    return _spill_dir(work) / f"{b:06d}.bin"


def _canon(value: str, strip: bool, row: int) -> bytes:
    try:
        if value and not strip:
            return unicodedata.normalize("NFC", value).encode("utf-8")
        return psi.canonical_id(value, strip=strip)
    except UnicodeEncodeError:
        raise InputDataError(f"line {row + 2}: ID is not valid Unicode text (lone surrogate)") from None
    except InputDataError as exc:
        raise InputDataError(f"line {row + 2}: {exc}") from None


def spill_block(rows: list[tuple[str, ...]], start: int, col: int, strip: bool, key: bytes,
                buckets: int) -> list[bytes]:
    """One block of rows (input rows ``start``…) as spill records, joined per bucket in input order.

    A pure function of plain values, so it runs in this process or as a Ray task
    (:mod:`.bucket_parallel`) to the same bytes.
    """
    keys = [_canon(r[col], strip, start + j) for j, r in enumerate(rows)]
    parts: list[list[bytes]] = [[] for _ in range(buckets)]
    pack = _SPILL.pack
    for j, (line, k, b) in enumerate(zip(csv_lines(rows), keys, bucket_index(key, keys, buckets).tolist(),
                                         strict=True)):
        parts[b].append(pack(start + j, len(k), len(line)) + k + line)
    return [b"".join(p) for p in parts]


_QUOTED = ('"', "\n", "\r")


def csv_line(row: tuple[str, ...]) -> bytes:
    """``row`` as ``csv.writer`` (minimal quoting, ``\\n``) writes it, UTF-8: joined directly when no field
    needs quotes (no delimiter inside a field, no quote or line break, not one empty field), else by the writer."""
    joined = ",".join(row)
    if joined.count(",") == len(row) - 1 and joined and not any(c in joined for c in _QUOTED):
        return (joined + "\n").encode("utf-8")
    out = io.StringIO()  # rare: a writer of its own (the parties of one process spill in threads)
    csv.writer(out, lineterminator="\n").writerow(row)
    return out.getvalue().encode("utf-8")


def csv_lines(rows: list[tuple[str, ...]]) -> list[bytes]:
    """:func:`csv_line` of every row of a block of equally wide rows: the whole block joined, checked and encoded
    at once when no field needs quotes (the common case: one pass in C instead of one check per row), else
    row by row. The checks are :func:`csv_line`'s, counted over the block: one delimiter fewer than fields and
    one line break per row, no quote or carriage return, and no empty row when a row is one field."""
    if not rows:
        return []
    width = len(rows[0])
    text = "\n".join([",".join(r) for r in rows]) + "\n"
    plain = (text.count(",") == len(rows) * (width - 1) and text.count("\n") == len(rows)
             and '"' not in text and "\r" not in text
             and (width > 1 or not (text.startswith("\n") or "\n\n" in text)))
    if not plain:
        return [csv_line(r) for r in rows]
    data = text.encode("utf-8")
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1
    starts = np.concatenate([[0], ends[:-1]])
    return [data[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


def _blocks(table: IdTable) -> Iterator[tuple[list[tuple[str, ...]], int]]:
    """Blocks of :data:`_BLOCK` rows and the index of each block's first row (the last block short, maybe empty)."""
    rows = table._rows()
    start = 0
    while True:
        block = list(itertools.islice(rows, _BLOCK))
        yield block, start
        if len(block) < _BLOCK:
            return
        start += len(block)


def _spill_simple(table: IdTable, work: Path, key: bytes, buckets: int, block_bytes: int) -> int:
    """:func:`spill_rows` for a simple CSV (:mod:`.fastcsv`), block by block in numpy: the same spill files.

    For such a file the canonical ID is the ID's bytes (NFC is the identity on ASCII) and the
    ``csv`` writer writes each row back as its line's bytes, so each record is the header, the
    ID's bytes and the line's bytes with its newline. Returns the rows spilled; raises
    :class:`.fastcsv.NotSimple` at a block that breaks the rules (the caller starts over).
    """
    batched = kkrt._batched_blake2b()
    pending, rows = 0, 0
    buffers: list[list[bytes]] = [[] for _ in range(buckets)]
    indexes: list[list[bytes]] = [[] for _ in range(buckets)]
    for block in fastcsv.blocks(table.path, table.id_column, block_bytes):
        if block.header != table.header:
            raise InputDataError(f"{table.path} changed while it was being aligned (its header differs)")
        n = len(block.starts)
        klen = block.last - block.first
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(klen, out=offsets[1:])
        joined = fastcsv.gather(block.arr, block.first, klen)
        hashed = np.frombuffer(batched.blake2b_many(joined, offsets, 8, b"", key), "<u8")
        bucket = (hashed % np.uint64(buckets)).astype(np.int64)
        order = np.argsort(bucket, kind="stable")  # each bucket's records in input order
        llen = block.ends + 1 - block.starts  # with the newline
        klen, llen = klen[order], llen[order]  # from here on, in bucket order
        head = np.empty(n, _SPILL_DTYPE)
        head["row"], head["key"], head["line"] = block.row0 + order, klen, llen
        side = np.empty(n, _INDEX_DTYPE)
        side["row"], side["key"], side["line"], side["hash"] = head["row"], klen, llen, hashed[order]
        src = np.concatenate([head.view(np.uint8), block.arr])
        base = 16 * n  # the block's bytes follow the n headers in src
        starts = np.stack([np.arange(0, base, 16), base + block.first[order], base + block.starts[order]], 1)
        lengths = np.stack([np.full(n, 16), klen, llen], 1)
        body = fastcsv.gather(src, starts.ravel(), lengths.ravel(), chunk=3 << 14)
        ends = np.concatenate([[0], np.cumsum(lengths.sum(1))])  # where each record ends, after a leading 0
        counts = np.concatenate([[0], np.cumsum(np.bincount(bucket, minlength=buckets))])
        cuts, side_bytes = ends[counts], side.tobytes()
        for b in np.flatnonzero(np.diff(cuts)).tolist():
            buffers[b].append(body[int(cuts[b]) : int(cuts[b + 1])])
            indexes[b].append(side_bytes[int(counts[b]) * _INDEX_DTYPE.itemsize : int(counts[b + 1]) *
                                         _INDEX_DTYPE.itemsize])
        pending, rows = pending + len(body), rows + n
        if pending >= _FLUSH_BYTES:
            _flush(work, buffers)
            _flush(work, indexes, INDEX)
            pending = 0
    _flush(work, buffers)
    _flush(work, indexes, INDEX)
    return rows


def _flush(work: Path, buffers: list[list[bytes]], suffix: str = ".bin") -> None:
    """Append each bucket's buffered records to its spill file (or index, ``suffix``; owner-only) and empty
    the buffers."""
    for b, parts in enumerate(buffers):
        if parts:
            fd = os.open(_spill_path(work, b).with_suffix(suffix), os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE)
            with os.fdopen(fd, "ab") as fh:
                fh.write(b"".join(parts))
            parts.clear()


def spill_rows(table: IdTable, work: Path, key: bytes, buckets: int, *, strip: bool,
               executor: Executor | None = None, block_bytes: int = 2 << 20) -> None:
    """Stream ``table`` into one spill file per bucket (memory: the write buffers, ~16 MiB).

    With an ``executor`` (a Ray cluster's, :mod:`.bucket_parallel`) the blocks are
    canonicalised, hashed and formatted as its tasks, a bounded window of blocks at a time;
    this process reads the CSV and appends each block's records in input order (the same files).
    """
    spill = _spill_dir(work)
    spill.mkdir(mode=0o700, parents=True, exist_ok=True)

    def clear() -> None:
        for old in (*spill.glob("*.bin"), *spill.glob(f"*{INDEX}"), *spill.glob(_INDEXED)):
            old.unlink()  # a run killed while spilling starts its spill again

    clear()
    if table.simple and not strip and executor is None and kkrt._batched_blake2b() is not None:
        try:
            rows = _spill_simple(table, work, key, buckets, block_bytes)
        except fastcsv.NotSimple:
            clear()  # the file changed since it was checked: the csv way words what is wrong
        else:
            if rows != table.n_rows:
                raise InputDataError(f"{table.path} changed while it was being aligned ({rows} rows, was "
                                     f"{table.n_rows})")
            (spill / _INDEXED).touch(mode=PRIVATE)  # every bucket's index is complete
            return
    buffers: list[list[bytes]] = [[] for _ in range(buckets)]
    col = table.header.index(table.id_column)

    def flush() -> None:
        _flush(work, buffers)

    read = [0]

    def blocks() -> Iterator[tuple[Any, ...]]:
        for rows, start in _blocks(table):
            read[0] = start + len(rows)
            yield rows, start, col, strip, key, buckets

    args = blocks()
    done = map(lambda a: spill_block(*a), args) if executor is None else ordered_map(executor, spill_block, args)
    pending = 0
    for part in done:
        for b, data in enumerate(part):
            if data:
                buffers[b].append(data)
                pending += len(data)
        if pending >= _FLUSH_BYTES:
            flush()
            pending = 0
    flush()
    if read[0] != table.n_rows:
        raise InputDataError(f"{table.path} changed while it was being aligned ({read[0]} rows, was {table.n_rows})")


class BucketRows:
    """One bucket's distinct IDs (input order, the first of duplicates kept) and their CSV lines."""

    def __init__(self, keys: list[bytes], lines: list[bytes], rows: list[int]) -> None:
        self.keys, self.lines, self.rows = keys, lines, rows

    def canon(self) -> psi.CanonicalIds:
        return psi.CanonicalIds(tuple(self.keys), np.arange(len(self.keys), dtype=np.int64), len(self.keys))


def spill_bytes(work: Path, b: int) -> bytes:
    """Bucket ``b``'s spill file (empty when no row fell in it)."""
    f = _spill_path(work, b)
    return f.read_bytes() if f.exists() else b""


def parse_bucket(data: bytes, duplicates: str, path: str,
                 keep_first_flag: str) -> tuple[list[bytes], list[bytes], list[int]]:
    """A spill file's distinct IDs, CSV lines and input rows (see :func:`load_bucket`); plain values in and out,
    so it runs as a Ray task too (:mod:`.bucket_parallel`)."""
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
    return keys, lines, rows


def count_bucket(data: bytes, duplicates: str, path: str, keep_first_flag: str) -> int:
    """The number of distinct IDs in a spill file (duplicates refused as in :func:`parse_bucket`).

    Reads only the keys (a set, no lines or rows kept); a duplicate that is refused is reported by
    :func:`parse_bucket`, which names both lines."""
    seen: set[bytes] = set()
    unpack, head = _SPILL.unpack_from, _SPILL.size
    off, end = 0, len(data)
    while off < end:
        _, klen, llen = unpack(data, off)
        k = data[off + head : off + head + klen]
        if k in seen and duplicates != "keep_first":
            parse_bucket(data, duplicates, path, keep_first_flag)  # raises, naming both lines
        seen.add(k)
        off += head + klen + llen
    return len(seen)


class IndexedBucket:
    """One bucket's rows from its spill file and index (the simple-CSV spill): IDs packed, lines in place.

    Used only when the index shows no repeated bucket hash, so every ID is distinct (a
    repeat goes :class:`BucketRows`' way, which keeps the first or names both lines).
    """

    def __init__(self, data: bytes, index: np.ndarray, path: Path) -> None:
        self.arr = np.frombuffer(data, np.uint8)
        self.klen, self.llen = index["key"].astype(np.int64), index["line"].astype(np.int64)
        size = _SPILL.size + self.klen + self.llen
        if int(size.sum()) != len(data):
            raise InputDataError(f"{path}: its spill file and index disagree (a damaged work directory): run "
                                 "again without --resume")
        self.key_at = np.cumsum(size) - size + _SPILL.size  # the ID, then its line, after each record's header
        offsets = np.zeros(len(index) + 1, np.int64)
        np.cumsum(self.klen, out=offsets[1:])
        self.keys = psi.PackedIds(fastcsv.gather(self.arr, self.key_at, self.klen), offsets)
        self.rows = index["row"]

    def canon(self) -> psi.CanonicalIds:
        return psi.CanonicalIds(self.keys, np.arange(len(self.keys), dtype=np.int64), len(self.keys))

    def result(self, positions: np.ndarray | None) -> bytes:
        """:func:`result_records` of these rows: the same bytes, built in numpy."""
        return self.result_and_index(positions)[0]

    def result_and_index(self, positions: np.ndarray | None) -> tuple[bytes, bytes | None]:
        """:meth:`result` and the records' headers (the result file's index; ``None`` when this party learns no
        rows)."""
        if positions is None:
            return b"", None
        order = canonical_order(self.canon(), positions)
        head = np.empty(len(order), RESULT_DTYPE)
        head["key"], head["line"] = self.klen[order], self.llen[order]
        base = RESULT.size * len(order)
        src = np.concatenate([head.view(np.uint8), self.arr])
        starts = np.stack([np.arange(0, base, RESULT.size), base + self.key_at[order]], 1)
        lengths = np.stack([np.full(len(order), RESULT.size), self.klen[order] + self.llen[order]], 1)
        return fastcsv.gather(src, starts.ravel(), lengths.ravel(), chunk=1 << 15), head.tobytes()


def _indexed(work: Path) -> bool:
    return (_spill_dir(work) / _INDEXED).exists()


def _index(work: Path, b: int) -> np.ndarray:
    f = _spill_path(work, b).with_suffix(INDEX)
    return np.fromfile(f, _INDEX_DTYPE) if f.exists() else np.zeros(0, _INDEX_DTYPE)


def _distinct(index: np.ndarray) -> bool:
    """No two records of the index share their 64-bit bucket hash (so no ID repeats; a shared hash goes
    the exact way, whether it is a repeat or a collision)."""
    h = np.sort(index["hash"])
    return not np.any(h[1:] == h[:-1])


def count_spilled(work: Path, b: int, duplicates: str, path: str, keep_first_flag: str) -> int:
    """:func:`count_bucket` of bucket ``b``: from its index when the simple-CSV spill wrote one."""
    if _indexed(work):
        index = _index(work, b)
        if _distinct(index):
            return len(index)
    return count_bucket(spill_bytes(work, b), duplicates, path, keep_first_flag)


def load_bucket(work: Path, b: int, *, duplicates: str, path: Path, keep_first_flag: str,
                size: int | None = None) -> BucketRows | IndexedBucket:
    """Bucket ``b``'s rows; a duplicate ID is refused (naming both lines) unless ``duplicates == 'keep_first'``.

    A repeated ID always falls in the bucket of its first occurrence, and rows are
    appended in input order, so the first row of each ID is kept, as without buckets.
    With the simple-CSV spill's index and no repeat, the rows load in numpy (:class:`IndexedBucket`).
    ``size``, the bucket's distinct IDs as :func:`count_spilled` found them, saves checking the index again:
    the bucket has no repeat exactly when it equals the index's length.
    """
    data = spill_bytes(work, b)
    if _indexed(work):
        index = _index(work, b)
        if (_distinct(index) if size is None else size == len(index)):
            return IndexedBucket(data, index, path)
    return BucketRows(*parse_bucket(data, duplicates, str(path), keep_first_flag))


def write_result(work: Path, b: int, bucket: BucketRows | IndexedBucket, positions: np.ndarray | None) -> None:
    """Bucket ``b``'s aligned rows (``positions`` into the bucket; ``None``: this party learns none),
    sorted by canonical ID, atomically: the file is the mark that the bucket is finished."""
    if isinstance(bucket, IndexedBucket):
        write_result_bytes(work, b, *bucket.result_and_index(positions))
    else:
        write_result_bytes(work, b, result_records(bucket.keys, bucket.lines, positions))


def merge_results(work: Path, buckets: int, out: Path, header: tuple[str, ...]) -> int:
    """The output CSV from the result files (:func:`.results.merge_results`), in numpy after a simple CSV's spill."""
    return results.merge_results(work, buckets, out, header, indexed=_indexed(work))
