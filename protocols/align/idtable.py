"""A party's CSV as an ID table: checked once, then streamed (IDs in, aligned rows out)."""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vflcrypto.data.files import write_csv_atomic
from vflcrypto.data.tables import iter_csv_strings
from vflcrypto.data.validate import missing_column
from vflcrypto.errors import InputDataError
from vflcrypto.psi import primitives as psi

from . import fastcsv

__all__ = ["IdTable", "canon_table", "read_id_table", "write_aligned"]


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
    #: the whole file in memory when it is a simple CSV and the caller asked to load it (:mod:`.fastcsv`)
    loaded: fastcsv.Loaded | None = field(default=None, compare=False, repr=False)
    #: a simple CSV (:mod:`.fastcsv`) checked by streaming, not loaded: the bucketed path spills it in numpy
    simple: bool = field(default=False, compare=False)

    def _rows(self) -> Iterator[tuple[str, ...]]:
        stream = iter_csv_strings(self.path)
        _, header = next(stream)
        if header != self.header:
            raise InputDataError(f"{self.path} changed while it was being aligned (its header differs)")
        yield from map(operator.itemgetter(1), stream)

    def iter_ids(self) -> Iterator[str]:
        if self.loaded is not None:
            yield from (x.decode("ascii") for x in self.loaded.ids)
            return
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


def read_id_table(path: str | os.PathLike[str], id_column: str, *, load: bool = False) -> IdTable:
    """Check a party's CSV in one streaming pass (every cell kept as its exact string when read).

    Non-UTF-8 bytes raise :class:`InputDataError` naming the line; so do a missing ID
    column and rows whose field count differs from the header's. With ``load`` a simple CSV
    is read into memory once instead (:mod:`.fastcsv`: the same IDs, errors and output bytes);
    without it a simple CSV is checked by a streamed numpy pass (:func:`.fastcsv.count_rows`).
    """
    path = Path(path)
    if load:
        loaded = fastcsv.load(path, id_column)
        if loaded is not None:
            return IdTable(path, loaded.header, id_column, len(loaded.starts), loaded)
    else:
        counted = fastcsv.count_rows(path, id_column)
        if counted is not None:
            return IdTable(path, counted[0], id_column, counted[1], simple=True)
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
    if table.loaded is not None:
        fastcsv.write_rows(table.loaded, out, rows)
        return
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
    if t.loaded is not None and not strip:
        fast = fastcsv.canonical(t.loaded)
        if fast is not None:
            return fast
    try:
        return psi.canonicalize_ids(t.iter_ids(), duplicates=duplicates, strip=strip,
                                    row_label="line", first_row=2)
    except InputDataError as exc:
        hint = f" (or pass {keep_first_flag} to keep the first occurrence)" if "duplicate ID" in str(exc) else ""
        raise InputDataError(f"{t.path}: {exc}{hint}") from None
