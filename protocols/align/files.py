"""Alignment of CSV files: read IDs verbatim, align by PSI, write the common rows."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.files import atomic_set, check_outputs, write_csv_atomic
from vflcrypto.data.tables import iter_csv_strings
from vflcrypto.data.validate import missing_column
from vflcrypto.errors import InputDataError
from vflcrypto.psi import primitives as psi
from vflcrypto.runtime.channel import DEFAULT_TIMEOUT

from .messages import ACTIVE, PASSIVE
from .roles import ProgressFn, run_local
from .tables import canonical_order

__all__ = ["IdTable", "align_files", "canon_table", "read_id_table", "write_aligned"]


@dataclass(frozen=True)
class IdTable:
    """A party's CSV, checked once and then streamed: header, ID column and row count.

    No cells are kept in memory: :meth:`iter_ids` streams the ID column (into
    :func:`canon_table`) and :func:`write_aligned` streams the file again to write the
    selected rows, so aligning 10⁷ rows holds only the IDs' canonical bytes and the
    output rows.
    """

    path: Path
    header: tuple[str, ...]
    id_column: str
    n_rows: int

    def _rows(self) -> Iterator[tuple[str, ...]]:
        stream = iter_csv_strings(self.path)
        _, header = next(stream)
        if header != self.header:
            raise InputDataError(f"{self.path} changed while it was being aligned (its header differs)")
        for _, row in stream:
            yield row

    def iter_ids(self) -> Iterator[str]:
        i = self.header.index(self.id_column)
        count = 0
        for row in self._rows():
            count += 1
            yield row[i]
        if count != self.n_rows:
            raise InputDataError(f"{self.path} changed while it was being aligned ({count} rows, was {self.n_rows})")

    @property
    def ids(self) -> list[str]:
        return list(self.iter_ids())


def read_id_table(path: str | os.PathLike[str], id_column: str) -> IdTable:
    """Check a party's CSV in one streaming pass (every cell kept as its exact string when read).

    Non-UTF-8 bytes raise :class:`InputDataError` naming the line; so do a missing ID
    column and rows whose field count differs from the header's.
    """
    path = Path(path)
    stream = iter_csv_strings(path)
    _, header = next(stream)
    if id_column not in header:
        raise missing_column(path, "ID", id_column, header)
    n = sum(1 for _ in stream)
    return IdTable(path, header, id_column, n)


def write_aligned(table: IdTable, out: str | os.PathLike[str], rows: np.ndarray) -> None:
    """Write ``table``'s rows ``rows`` (input row indices, in output order), all columns verbatim.

    One streaming pass over the input keeps just the selected rows (the output itself),
    then they are written atomically in the common order.
    """
    rank = np.full(table.n_rows, -1, np.int64)
    rank[np.asarray(rows, np.int64)] = np.arange(len(rows))
    selected: list[tuple[str, ...]] = [()] * len(rows)
    count = 0
    for i, row in enumerate(table._rows()):
        count += 1
        if i < len(rank) and rank[i] >= 0:
            selected[rank[i]] = row
    if count != table.n_rows:
        raise InputDataError(f"{table.path} changed while it was being aligned ({count} rows, was {table.n_rows})")
    write_csv_atomic(out, table.header, selected)


def canon_table(t: IdTable, duplicates: str, strip: bool, *, keep_first_flag: str = "--keep-first"
                ) -> psi.CanonicalIds:
    """The file's IDs in canonical form; a duplicate names its lines and the command's flag that keeps the first."""
    try:
        return psi.canonicalize_ids(t.iter_ids(), duplicates=duplicates, strip=strip,
                                    row_label="line", first_row=2)
    except InputDataError as exc:
        hint = f" (or pass {keep_first_flag} to keep the first occurrence)" if "duplicate ID" in str(exc) else ""
        raise InputDataError(f"{t.path}: {exc}{hint}") from None


def align_files(
    left: str | os.PathLike[str] | IdTable,
    right: str | os.PathLike[str] | IdTable,
    *,
    id_column: str,
    right_id_column: str | None = None,
    protocol: str = "ecdh",
    reveal: str = "both",
    out_dir: str | os.PathLike[str],
    duplicates: str = "error",
    strip: bool = False,
    progress: ProgressFn | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    memory_budget: int | None = None,
    work_dir: str | os.PathLike[str] | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Align two CSV files (left = active, right = passive) and write the aligned rows.

    Writes ``<stem>.aligned.csv`` (all columns verbatim, intersection rows in the canonical
    order of their IDs: the same for both parties and every run) for each party that learns
    the intersection, all-or-nothing (both outputs or neither). Returns a summary.
    ``left`` and ``right`` are paths or tables :func:`read_id_table` already checked.
    With ``memory_budget`` (bytes) the run is bucketed (:mod:`.buckets`): the same outputs, at
    most about the budget in memory per party, resumable (``resume``) from ``work_dir``
    (default ``<out_dir>/.align-buckets``).
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    left_path = left.path if isinstance(left, IdTable) else Path(left)
    right_path = right.path if isinstance(right, IdTable) else Path(right)
    paths = {"left": out / f"{left_path.stem}.aligned.csv", "right": out / f"{right_path.stem}.aligned.csv"}
    # before any cryptographic work: distinct outputs, no input overwritten, a writable directory,
    # and no output of an earlier run beside this run's (a side that learns nothing writes none)
    check_outputs(paths, [left_path, right_path])
    learns = {"both": ("left", "right"), "left": ("left",), "size": ()}.get(reveal, ())
    for key, path in paths.items():
        if key not in learns and path.exists():
            raise InputDataError(f"{path} is an output of an earlier run; this run (--reveal {reveal}) writes no "
                                 f"{key} output, so the two would mix: remove it or choose another --out-dir")
    lt = left if isinstance(left, IdTable) else read_id_table(left, id_column)
    rt = right if isinstance(right, IdTable) else read_id_table(right, right_id_column or id_column)
    if memory_budget is not None:
        from .buckets import align_files_bucketed

        work = Path(work_dir) if work_dir is not None else out / ".align-buckets"
        part = align_files_bucketed(lt, rt, protocol=protocol, reveal=reveal, paths=paths, work_dir=work,
                                    budget=memory_budget, duplicates=duplicates, strip=strip, resume=resume,
                                    timeout=timeout)
        return {"protocol": protocol, "reveal": reveal, **part, "seconds": round(time.perf_counter() - t0, 3)}
    lc, rc = canon_table(lt, duplicates, strip), canon_table(rt, duplicates, strip)
    run = run_local(lc, rc, protocol=protocol, mode=reveal, progress=progress, timeout=timeout)
    res_l, res_r = run.results[ACTIVE], run.results[PASSIVE]
    outputs: dict[str, str] = {}
    with atomic_set():  # both outputs or neither (a full disk at the second removes the first)
        for key, table, canon, res in (("left", lt, lc, res_l), ("right", rt, rc, res_r)):
            if res.rows is None:
                continue
            write_aligned(table, paths[key], canonical_order(canon, res.rows))
            outputs[key] = str(paths[key])
    size = res_l.size if res_l.size is not None else res_r.size
    return {
        "protocol": protocol,
        "reveal": reveal,
        "left_size": len(lc),
        "right_size": len(rc),
        "intersection": size,
        "bytes_sent": run.transcript.total_bytes,
        "seconds": round(time.perf_counter() - t0, 3),
        "outputs": outputs,
        "_run": run,
    }
