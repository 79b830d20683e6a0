"""The simple-CSV fast path of alignment: a party's file read once into memory and handled in numpy.

Python's ``csv`` module costs about 0.5 µs a row for each of the three passes an unbucketed
alignment makes (check, IDs, output); at 10⁷ rows that is most of a run. A file that needs
none of CSV's quoting rules is a byte array in which commas and newlines are the whole
structure, so one pass finds every line and field: in C (:mod:`vflcrypto.data._csvscan`, one
loop over the bytes, 0.3 s for 10⁷ rows where the numpy passes took 3.5 s), or vectorised in
numpy where the extension is not built:

* **When it applies** (:func:`load`): the file is ASCII without NUL, CR or double quote,
  ends with a newline, has no blank line and no line longer than the ``csv`` module's field
  limit, and every data line has exactly as many commas as the header. For such a file the
  ``csv`` path reads each cell as the bytes between commas, canonical IDs are those bytes
  (NFC is the identity on ASCII), and the ``csv`` writer writes each row back as the same
  bytes; so the fast path gives the same IDs, the same errors and the same output bytes
  (``tests/test_align_fastcsv.py`` compares them). Any other file, and any file with an
  empty or repeated ID, goes the ``csv`` way, which words the exact error.
* **Order**: the output's canonical order sorts the IDs' bytes as folded integer keys
  (:meth:`~vflcrypto.psi.packed.PackedIds.byte_order`); an OT PSI's party sorts all its
  IDs while its peer computes (KKRT's sender; both sides of the VOLE PSI), so its output order is then
  one pass.
* **IDs** are packed into one buffer (:class:`~vflcrypto.psi.packed.PackedIds`); hygiene
  hashes them once (the PSI reuses those hashes) and finds repeats by sorting 64 bits of
  each hash (a repeat of those bits sends the file the exact way, which decides).
* **Output** (:func:`write_rows`): the header as the ``csv`` writer formats it, then the
  selected lines' bytes, written atomically.

Only the unbucketed path loads the file (the bucketed path bounds memory and streams).
"""

from __future__ import annotations

import csv
import importlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.atomic import atomic_open
from vflcrypto.data.validate import check_header, missing_column
from vflcrypto.psi import kkrt
from vflcrypto.psi import primitives as psi

__all__ = ["MAX_BYTES", "Block", "Loaded", "NotSimple", "blocks", "canonical", "count_rows", "gather", "load",
           "write_rows"]

MAX_BYTES = 8 << 30  # files above this stream through the csv path
_CHUNK = 1 << 16  # ranges gathered per numpy block (a block's index stays in cache-friendly MiBs)


@dataclass(frozen=True)
class Loaded:
    """A simple CSV in memory: its bytes, each data line's ``[start, end)`` (end at its newline), the IDs."""

    data: bytes
    header: tuple[str, ...]
    header_line: bytes
    starts: np.ndarray
    ends: np.ndarray
    ids: psi.PackedIds


def _native() -> Any:
    """The compiled scan (:mod:`vflcrypto.data._csvscan`), or ``None`` (not built, or ``VFLCRYPTO_NATIVE=0``)."""
    if kkrt.native_off():
        return None
    try:
        return importlib.import_module("vflcrypto.data._csvscan")
    except ImportError:
        return None


def gather(arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray, chunk: int = _CHUNK) -> bytes:
    """The byte ranges ``[starts[i], starts[i] + lengths[i])`` of ``arr``, concatenated (in C when built, else
    ``chunk`` ranges at a time in numpy: the index of one chunk's bytes is the transient memory)."""
    native = _native()
    if native is not None:
        return native.gather(arr, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(lengths, np.int64))
    parts = []
    kind: type[np.signedinteger[Any]] = np.int32 if len(arr) < 1 << 31 else np.int64  # half the traffic
    for a in range(0, len(starts), chunk):
        s, n = starts[a : a + chunk], lengths[a : a + chunk]
        first = np.cumsum(n) - n  # where each range begins in this block's output
        index = np.arange(int(n.sum()), dtype=kind)
        index += np.repeat((s - first).astype(kind), n)
        parts.append(arr[index].tobytes())
    return b"".join(parts)


def _in_order(arr: np.ndarray, first: np.ndarray, last: np.ndarray) -> bytes:
    """The disjoint ranges ``[first[i], last[i])``, in increasing order, concatenated: one mask, one compress."""
    edge = np.zeros(len(arr) + 1, np.int8)
    edge[first] = 1
    edge[last] = -1  # ranges never touch (a comma or newline separates them)
    return arr[np.cumsum(edge[:-1], dtype=np.int8).view(bool)].tobytes()


def _header(path: Path, line: bytes, id_column: str) -> tuple[str, ...]:
    header = tuple(h.strip() for h in next(csv.reader([line.decode("ascii")])))
    check_header(path, header)
    if id_column not in header:
        raise missing_column(path, "ID", id_column, header)
    return header


def _plain(data: bytes | memoryview) -> bool:
    """ASCII without NUL, CR or double quote (the bytes in which commas and newlines are the whole structure)."""
    raw = bytes(data)
    return raw.isascii() and not any(c in raw for c in (b"\0", b"\r", b'"'))


def _lines(arr: np.ndarray, newlines: np.ndarray, per: int, k: int, last_column: bool
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The data lines between consecutive ``newlines`` of ``arr``: each line's ``[start, end)`` and its ID's
    ``[first, last)``; ``None`` unless every line is non-blank, within the csv field limit, has exactly ``per``
    commas and a non-empty ID (field ``k``)."""
    starts, ends = newlines[:-1] + 1, newlines[1:]
    if not len(starts) or np.any(ends == starts):
        return None  # no rows, or a blank line: the csv path's rules
    if int((ends - starts).max()) > csv.field_size_limit():
        return None  # a line that could hold a field past the csv module's limit: its error, from the csv path
    lo = int(newlines[0]) + 1  # after the header's newline, or the block's start
    commas = np.flatnonzero(arr[lo : int(newlines[-1])] == ord(",")) + lo
    # every line has exactly `per` commas iff there are per·rows in all and each group of `per`, in order,
    # lies inside its own line (a line with one too many pushes its last comma into the next group)
    if len(commas) != per * len(starts):
        return None  # a row with another field count: the csv path names its line
    fields = commas.reshape(len(starts), per)
    if per and (np.any(fields[:, 0] < starts) or np.any(fields[:, -1] >= ends)):
        return None
    first = starts if k == 0 else fields[:, k - 1] + 1
    last = ends if last_column else fields[:, k]
    if np.any(last == first):
        return None  # an empty ID: the csv path names its line
    return starts, ends, first, last


def load(path: str | os.PathLike[str], id_column: str) -> Loaded | None:
    """The file's lines and IDs, or ``None`` when it is not a simple CSV (the ``csv`` path then reads it).

    Raises the ``csv`` path's errors for a bad header or a missing ID column, which the
    fast path reads the same way.
    """
    path = Path(path)
    try:
        if not 0 < path.stat().st_size <= MAX_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None  # the csv path reports it
    if not data.endswith(b"\n"):
        return None
    header_line = data[: data.find(b"\n")]
    if len(header_line) > csv.field_size_limit() or not _plain(header_line):
        return None
    header = _header(path, header_line, id_column)
    k = header.index(id_column)
    native = _native()
    if native is not None:  # one pass in C over the data lines: _plain's and _lines's rules, the same results
        scanned = native.scan(data, len(header_line) + 1, len(header) - 1, k, csv.field_size_limit())
        if scanned is None:
            return None
        starts, ends, ids_data, offsets = scanned
        return Loaded(data, header, header_line, np.frombuffer(starts, np.int64), np.frombuffer(ends, np.int64),
                      psi.PackedIds(ids_data, np.frombuffer(offsets, np.int64)))
    if not _plain(data):
        return None
    arr = np.frombuffer(data, np.uint8)
    newlines = np.flatnonzero(arr == ord("\n"))
    found = _lines(arr, newlines, len(header) - 1, k, k == len(header) - 1)
    if found is None:
        return None
    starts, ends, first, last = found
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(last - first, out=offsets[1:])
    ids = psi.PackedIds(_in_order(arr, first, last), offsets)
    return Loaded(data, header, header_line, starts, ends, ids)


@dataclass(frozen=True)
class Block:
    """A run of whole data lines of a streamed simple CSV: each line's ``[start, end)`` in ``arr`` (end at its
    newline), its ID's ``[first, last)``, and ``row0``, the index of its first data row in the file."""

    header: tuple[str, ...]
    arr: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    first: np.ndarray
    last: np.ndarray
    row0: int


class NotSimple(Exception):
    """The streamed file is not a simple CSV (:func:`blocks`): the caller reads it the ``csv`` way."""


def blocks(path: str | os.PathLike[str], id_column: str, block_bytes: int = 8 << 20) -> Iterator[Block]:
    """A simple CSV streamed in blocks of about ``block_bytes`` (bounded memory: the bucketed path).

    The same rules as :func:`load`, checked block by block; :class:`NotSimple` is raised at
    the first block that breaks one (the caller then starts over the ``csv`` way, which
    words the exact error). A bad header or missing ID column raises the ``csv`` path's error.
    """
    path = Path(path)
    limit = csv.field_size_limit()
    with path.open("rb") as fh:
        carry = b""
        header: tuple[str, ...] = ()
        row0 = per = k = 0
        last_column = False
        while True:
            more = fh.read(block_bytes)
            data = carry + more
            cut = data.rfind(b"\n") + 1
            if not more:
                if data or not row0:
                    raise NotSimple  # no newline at the end, no data row: the csv path's words
                return
            if cut == 0:
                if len(data) > limit:
                    raise NotSimple
                carry = data
                continue
            whole, carry = data[:cut], data[cut:]
            if not _plain(whole):
                raise NotSimple
            arr = np.frombuffer(whole, np.uint8)
            newlines = np.flatnonzero(arr == ord("\n"))
            if not header:
                if int(newlines[0]) > limit:
                    raise NotSimple
                header = _header(path, whole[: int(newlines[0])], id_column)
                k = header.index(id_column)
                per, last_column = len(header) - 1, k == len(header) - 1
                if len(newlines) == 1:
                    continue  # only the header in this block
            else:
                newlines = np.concatenate([[-1], newlines])  # the block starts at a line's start
            found = _lines(arr, newlines, per, k, last_column)
            if found is None:
                raise NotSimple
            yield Block(header, arr, *found, row0)
            row0 += len(found[0])


def count_rows(path: str | os.PathLike[str], id_column: str) -> tuple[tuple[str, ...], int] | None:
    """A simple CSV's header and data-row count in one streamed pass, or ``None`` when it is not simple."""
    rows = 0
    header: tuple[str, ...] = ()
    try:
        for block in blocks(path, id_column):
            rows, header = rows + len(block.starts), block.header
    except (NotSimple, OSError):
        return None  # the csv path reads it (and words any error)
    return header, rows


def canonical(loaded: Loaded) -> psi.CanonicalIds | None:
    """The IDs as canonical IDs when all are distinct, else ``None`` (the csv path finds the repeat and words it)."""
    ids = loaded.ids
    h0 = kkrt.item_hashes(ids)
    top = np.sort(np.ascontiguousarray(h0[:, :8]).view("<u8").ravel())
    if np.any(top[1:] == top[:-1]):
        return None
    return psi.CanonicalIds(ids, np.arange(len(ids), dtype=np.int64), len(ids))


def write_rows(loaded: Loaded, out: str | os.PathLike[str], rows: np.ndarray) -> None:
    """Write the header (as the csv writer formats it) and the lines ``rows``, in that order, atomically."""
    text = _header_text(loaded.header)
    arr = np.frombuffer(loaded.data, np.uint8)
    rows = np.asarray(rows, np.int64)
    body = gather(arr, loaded.starts[rows], loaded.ends[rows] + 1 - loaded.starts[rows])  # each with its newline
    with atomic_open(out, "wb") as fh:
        fh.write(text)
        fh.write(body)


def _header_text(header: tuple[str, ...]) -> bytes:
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(header)
    return buf.getvalue().encode("utf-8")
