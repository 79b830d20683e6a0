"""The checks every protocol applies to its input files, each error in the user's terms.

One place for what a party's CSV must satisfy beyond being CSV, so that every protocol
refuses (or warns about) the same things with the same words: the file, the line and
the column *name* of the first offending cell. :func:`vflcrypto.data.tables.read_party_csv`
applies the checks of the file itself (header, cells, rows); the protocols' commands
apply the rest where they know what a column means:

* the header: no column name twice (``id,id`` would otherwise use the first), and a
  hint when a missing column suggests a semicolon- or tab-separated file;
* cells: values are finite and within ±:data:`MAX_ABS` (a value of 1e300 overflows its
  column's variance and silently neutralises the column);
* rows: a file with a header only is refused in one line;
* class labels (:func:`class_labels`): integers 0..C-1 with C at most
  :data:`MAX_CLASSES`, checked on the file's labels *before* anything is allocated per
  class (one label of 9999999 must not make a model of ten million outputs), and at
  least two classes among the training rows (:func:`require_classes`);
* a feature party's file never holds the label column (:func:`refuse_label_column`);
* columns that protocols standardize exactly vary over the rows used
  (:func:`refuse_constant_columns`);
* few training rows give the same warning everywhere (:func:`warn_few_rows`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from ..errors import InputDataError

__all__ = [
    "FEW_ROWS",
    "MAX_ABS",
    "MAX_CLASSES",
    "check_header",
    "check_value",
    "class_labels",
    "format_hint",
    "missing_column",
    "refuse_constant_columns",
    "refuse_label_column",
    "refuse_missing_values",
    "require_classes",
    "require_rows",
    "warn_few_rows",
]

#: the largest magnitude a cell may hold: its square, summed over 10^9 rows, stays finite
MAX_ABS = 1e100
#: the most classes a label column may describe (a model allocates one output per class)
MAX_CLASSES = 10_000
#: fewer training rows than this train a model that means little: the commands say so on stderr
FEW_ROWS = 10


class TableLike(Protocol):
    """What the checks read of a :class:`vflcrypto.data.tables.PartyTable` (which imports this module)."""

    @property
    def columns(self) -> tuple[str, ...]: ...

    @property
    def X(self) -> np.ndarray: ...

    @property
    def label(self) -> np.ndarray | None: ...

    @property
    def label_name(self) -> str | None: ...

    @property
    def source(self) -> str | None: ...

    def __len__(self) -> int: ...

    def where(self, row: int) -> str: ...


def format_hint(cells: Sequence[str]) -> str:
    """A hint (or ``""``) when a header or row looks semicolon- or tab-separated."""
    text = ",".join(cells)
    for sep, name in ((";", "semicolon"), ("\t", "tab")):
        if sep in text and (len(cells) == 1 or text.count(sep) >= len(cells)):
            return (f" (the file looks {name}-separated: vflcrypto reads comma-separated files; "
                    f"save it as CSV with commas)")
    return ""


def missing_column(path: str | Path, what: str, name: str, header: Sequence[str]) -> InputDataError:
    """The error for a column the command needs that the header lacks (with the format hint)."""
    return InputDataError(f"{path}: no {what} column {name!r} (columns: {list(header)}){format_hint(header)}")


def check_header(path: str | Path, header: Sequence[str]) -> None:
    """Refuse a blank header line and a column name that appears twice."""
    if not header or header == ("",):
        raise InputDataError(f"{path}: line 1 is blank: the first line must be the header (the column names)")
    seen: dict[str, int] = {}
    for i, name in enumerate(header, 1):
        if name in seen:
            shown = repr(name) if name else "an empty name"
            raise InputDataError(f"{path}: line 1 names the column {shown} twice (columns {seen[name]} and {i}): "
                                 "every column name must be distinct")
        seen[name] = i


def check_value(value: float, text: str, where: str) -> float:
    """``value`` (parsed from ``text``) if finite and within ±:data:`MAX_ABS`; :class:`InputDataError` otherwise."""
    if not math.isfinite(value):
        raise InputDataError(f"{where}: {text.strip()[:20]!r} is not a finite number")
    if abs(value) > MAX_ABS:
        raise InputDataError(f"{where}: {text.strip()[:20]!r} is beyond ±{MAX_ABS:g} (its square overflows: "
                             "the column's statistics would be infinite); rescale the column")
    return value


def require_rows(path: str | Path, n_rows: int) -> None:
    """Refuse a file with a header but no data rows."""
    if n_rows == 0:
        raise InputDataError(f"{path} has no data rows (only a header)")


def _label_where(table: TableLike, row: int) -> str:
    return f"{table.where(row)}, label {table.label_name!r}" if table.label_name else table.where(row)


def class_labels(table: TableLike, *, n_classes: int | None = None,
                 max_classes: int = MAX_CLASSES) -> np.ndarray:
    """The table's label column as integer classes 0..C-1, checked before any per-class allocation.

    Every label must be a whole number, at least 0 and below ``n_classes`` (when given)
    and below ``max_classes``; the first that is not names its file and line.
    """
    if table.label is None:
        raise InputDataError(f"{table.source or 'the label table'}: no label column")
    y = np.asarray(table.label, dtype=np.float64)
    limit = min(max_classes, n_classes) if n_classes is not None else max_classes
    for test, why in (
        (np.isnan(y), "is missing"),
        (y != np.round(y), "is not a whole number: class labels are the integers 0..C-1"),
        (y < 0, "is negative: class labels are the integers 0..C-1"),
        (y >= limit, (f"is not below the class count {n_classes} (--classes)" if n_classes is not None
                      and n_classes <= max_classes else
                      f"is beyond the largest class this accepts ({max_classes - 1}): class labels are the "
                      f"integers 0..C-1 and the model allocates one output per class")),
    ):
        bad = np.flatnonzero(test)
        if len(bad):
            r = int(bad[0])
            shown = "" if np.isnan(y[r]) else f" {y[r]:.10g}"
            raise InputDataError(f"{_label_where(table, r)}{shown} {why}")
    return y.astype(np.int64)


def require_classes(y: np.ndarray, what: str = "the training rows") -> None:
    """Refuse labels of fewer than two classes: a classifier of one class learns nothing (accuracy 1.0)."""
    classes = np.unique(np.asarray(y))
    if len(classes) < 2:
        only = f" (every label is {classes[0]:.10g})" if len(classes) else ""
        raise InputDataError(f"{what} hold a single class{only}: a classifier needs at least two classes "
                             "(check the label column, the alignment and --test-fraction)")


def refuse_label_column(table: TableLike, label: str | None, who: str = "a feature party") -> None:
    """Refuse a feature party's file that holds the label column (it would become a feature)."""
    if label and label in table.columns:
        raise InputDataError(f"{table.source or who}: {who} must not hold the label column {label!r} "
                             "(only the label holder's file has it)")


def refuse_missing_values(table: TableLike) -> None:
    """Refuse a table with a missing value, naming its file, line and column."""
    missing = np.argwhere(np.isnan(table.X))
    if len(missing):
        r, c = (int(v) for v in missing[0])
        raise InputDataError(f"{table.where(r)}, column {table.columns[c]!r} is missing (this protocol needs "
                             "every value: impute it first)")


def refuse_constant_columns(table: TableLike, rows: str = "aligned rows") -> None:
    """Refuse missing values and columns constant over the table's rows (they cannot be standardized)."""
    refuse_missing_values(table)
    if len(table) == 0:
        return
    constant = np.flatnonzero(np.ptp(table.X, axis=0) == 0) if table.X.shape[1] else np.zeros(0, np.int64)
    if len(constant):
        name = table.columns[int(constant[0])]
        src = f"{table.source}: " if table.source else ""
        raise InputDataError(f"{src}column {name!r} is constant over the {len(table)} {rows} "
                             f"(every value is {table.X[0, int(constant[0])]:.10g}): it cannot be standardized; "
                             "drop it")


def warn_few_rows(n_rows: int, *, of: int | None = None, what: str = "training rows",
                  result: str = "the model") -> None:
    """The one warning on stderr when fewer than :data:`FEW_ROWS` rows train (or describe) a result."""
    if n_rows < FEW_ROWS:
        among = f" ({of} common rows)" if of is not None and of != n_rows else ""
        print(f"vflcrypto: warning: only {n_rows} {what}{among}: {result} will mean little", file=sys.stderr)
