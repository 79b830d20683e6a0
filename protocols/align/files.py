"""Alignment of CSV files: read IDs verbatim, align by PSI, write the common rows."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from vflcrypto.data.files import atomic_set, check_outputs
from vflcrypto.errors import InputDataError
from vflcrypto.runtime.channel import DEFAULT_TIMEOUT

from .buckets import align_files_bucketed
from .idtable import IdTable, canon_table, read_id_table, write_aligned
from .messages import ACTIVE, PASSIVE
from .roles import ProgressFn, run_local
from .tables import canonical_order

__all__ = ["IdTable", "align_files", "canon_table", "read_id_table", "write_aligned"]


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
    load = memory_budget is None  # a simple CSV is read into memory once (the bucketed path streams)
    lt = left if isinstance(left, IdTable) else read_id_table(left, id_column, load=load)
    rt = right if isinstance(right, IdTable) else read_id_table(right, right_id_column or id_column, load=load)
    if memory_budget is not None:
        work = Path(work_dir) if work_dir is not None else out / ".align-buckets"
        part = align_files_bucketed(lt, rt, protocol=protocol, reveal=reveal, paths=paths, work_dir=work,
                                    budget=memory_budget, duplicates=duplicates, strip=strip, resume=resume,
                                    timeout=timeout)
        part.pop("_transcript")
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
