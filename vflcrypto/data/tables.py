"""Party tables read from CSV: IDs kept as the file's exact strings, numeric features, splits.

Every party reads only its own file. IDs are kept as the exact strings of the file (the
canonical encoding used by PSI lives in :mod:`vflcrypto.psi.primitives`); features must be
numeric (an empty cell is NaN; protocols decide whether NaN is allowed), finite and within
the bound of :mod:`vflcrypto.data.validate`. Errors name the file, line and column.
"""

from __future__ import annotations

import csv
import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputDataError
from .validate import check_header, check_value, format_hint, missing_column, require_rows

__all__ = [
    "PartyTable",
    "ids_digest",
    "iter_csv_strings",
    "read_csv_strings",
    "read_party_csv",
    "require_same_ids",
    "train_test_split",
]


@dataclass(frozen=True)
class PartyTable:
    """One party's rows: IDs, numeric feature columns, and optionally a label column.

    ``source`` and ``lines`` (set by :func:`read_party_csv`) name the file and the 1-based
    line of every row, so an error about a row points into the file whatever alignment,
    sorting or splitting happened since (:meth:`where`).
    """

    ids: tuple[str, ...]
    columns: tuple[str, ...]
    X: np.ndarray
    label: np.ndarray | None = None
    label_name: str | None = None
    source: str | None = None
    lines: tuple[int, ...] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows: Sequence[int] | np.ndarray) -> PartyTable:
        """The table restricted to ``rows`` (in that order)."""
        idx = np.asarray(rows, dtype=np.int64)
        return PartyTable(
            ids=tuple(self.ids[i] for i in idx),
            columns=self.columns,
            X=self.X[idx],
            label=None if self.label is None else self.label[idx],
            label_name=self.label_name,
            source=self.source,
            lines=None if self.lines is None else tuple(self.lines[i] for i in idx),
        )

    def where(self, row: int) -> str:
        """Where row ``row`` comes from: ``"<file>: line N"``, or ``"row <row>"`` for a table built in code."""
        if self.lines is not None and self.source is not None:
            return f"{self.source}: line {self.lines[row]}"
        return f"row {row}"

    def check_unique_ids(self) -> None:
        """:class:`InputDataError` at the second occurrence of an ID (canonical form: NFC text, integers)."""
        from ..psi.primitives import canonical_id

        seen: dict[bytes, int] = {}
        for r, x in enumerate(self.ids):
            try:
                key = canonical_id(x)
            except InputDataError as exc:
                raise InputDataError(f"{self.where(r)}: {exc}") from None
            if key in seen:
                first = seen[key]
                raise InputDataError(f"{self.where(r)}: duplicate ID {x!r} (first on "
                                     f"{self.where(first).rsplit(': ', 1)[-1]}): every ID must appear once")
            seen[key] = r


def _parse_float(text: str, where: str) -> float:
    """A cell as a number: empty, ``NA``, ``NaN`` or ``null`` are missing (NaN); anything else
    must be a finite number within the bound of :func:`~vflcrypto.data.validate.check_value`."""
    text = text.strip()
    if text == "" or text.lower() in {"na", "nan", "null"}:
        return float("nan")
    try:
        value = float(text)
    except ValueError:
        raise InputDataError(f"{where}: {text[:20]!r} is not a number") from None
    return check_value(value, text, where)


def iter_csv_strings(path: str | os.PathLike[str]) -> Iterator[tuple[int, tuple[str, ...]]]:
    """Stream a CSV file as ``(line number, cells)``: first the header, then each row.

    Every cell is a verbatim string; the file is decoded line by line, so memory does not
    grow with the file. Raises :class:`InputDataError` for an unreadable or empty file,
    non-UTF-8 bytes (with the line number), a blank or repeated header name
    (:func:`~vflcrypto.data.validate.check_header`), CR-only line ends (with a hint) and rows
    whose field count differs from the header's (with a hint when they look semicolon- or
    tab-separated). A blank line is a row of empty cells, as CSV reads it (an ID-only file's
    blank line is an empty ID, refused like a quoted one), never skipped silently. Header
    names are stripped of surrounding white space, cells are not.
    """
    path = Path(path)
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InputDataError(f"cannot read {path}: {exc.strerror}") from None

    def lines() -> Iterator[str]:
        # UTF-8 never puts the byte 0x0A inside a multi-byte sequence: splitting on it is safe
        for number, raw in enumerate(fh, 1):
            try:
                yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise InputDataError(f"{path}: line {number} is not valid UTF-8") from None

    with fh:
        reader = csv.reader(lines())
        try:
            header = tuple(h.strip() for h in next(reader))
            check_header(path, header)
            yield 1, header
            blank = ("",) * len(header)
            for row in reader:
                if not row:  # a blank line: a row of empty cells (CSV has no other reading of it)
                    yield reader.line_num, blank
                    continue
                if len(row) != len(header):
                    raise InputDataError(f"{path}: line {reader.line_num} has {len(row)} fields, "
                                         f"header has {len(header)}{format_hint(row)}")
                yield reader.line_num, tuple(row)
        except StopIteration:
            raise InputDataError(f"{path} is empty (no header)") from None
        except csv.Error as exc:  # e.g. a field past the csv module's limit (131,072 characters)
            why = str(exc)
            if "new-line character" in why:  # the csv module's advice (universal-newline mode) does not apply
                why = ("a carriage return (CR) inside an unquoted field: the file looks like it has CR-only "
                       "line ends, as old Mac programs write; save it with LF or CRLF line ends")
            raise InputDataError(f"{path}: line {reader.line_num}: {why}") from None


def read_csv_strings(path: str | os.PathLike[str]) -> tuple[tuple[str, ...], list[tuple[int, tuple[str, ...]]]]:
    """A CSV file as its header and ``(line number, cells)`` rows (see :func:`iter_csv_strings`)."""
    stream = iter_csv_strings(path)
    _, header = next(stream)
    return header, list(stream)


def read_party_csv(
    path: str | os.PathLike[str],
    id_column: str | None,
    *,
    label: str | None = None,
    features: Sequence[str] | None = None,
    allow_nan: bool = True,
) -> PartyTable:
    """Read a party's CSV: the ID column, a label (if named) and numeric features.

    ``features`` defaults to every column except the ID and the label. ``id_column=None``
    reads a file without IDs (horizontal FL's clients): each row's ID is its line number.
    Raises :class:`InputDataError` naming the file, row and column of the first bad cell,
    and for a file with a header only.
    """
    path = Path(path)
    header, records = read_csv_strings(path)
    if id_column is not None and id_column not in header:
        raise missing_column(path, "ID", id_column, header)
    if label is not None and label not in header:
        raise missing_column(path, "label", label, header)
    if features is None:
        features = [h for h in header if h not in (id_column, label)]
    missing = [f for f in features if f not in header]
    if missing:
        raise InputDataError(f"{path}: missing feature columns {missing}{format_hint(header)}")
    require_rows(path, len(records))
    id_i = header.index(id_column) if id_column is not None else None
    feat_i = [header.index(f) for f in features]
    label_i = header.index(label) if label is not None else None
    ids: list[str] = []
    rows: list[list[float]] = []
    labels: list[float] = []
    lines: list[int] = []
    for line_no, row in records:
        lines.append(line_no)
        if id_i is not None and row[id_i] == "":
            blank = " (the line is blank)" if not any(row) else ""
            raise InputDataError(f"{path}: line {line_no}: empty ID{blank}: every row needs an ID")
        ids.append(row[id_i] if id_i is not None else str(line_no))
        rows.append([_parse_float(row[i], f"{path}: line {line_no}, column {header[i]!r}") for i in feat_i])
        if label_i is not None:
            labels.append(_parse_float(row[label_i], f"{path}: line {line_no}, label {label!r}"))
    X = np.asarray(rows, dtype=np.float64).reshape(len(ids), len(feat_i))
    if not allow_nan and np.isnan(X).any():
        r, c = np.argwhere(np.isnan(X))[0]
        raise InputDataError(f"{path}: line {lines[r]}, column {features[c]!r} is missing")
    y = None
    if label_i is not None:
        y = np.asarray(labels, dtype=np.float64)
        if np.isnan(y).any():
            raise InputDataError(f"{path}: line {lines[int(np.argmax(np.isnan(y)))]}, label {label!r} is missing")
    return PartyTable(tuple(ids), tuple(features), X, y, label, str(path), tuple(lines))


def require_same_ids(tables: Sequence[PartyTable], names: Sequence[str]) -> None:
    """For pre-aligned inputs: every table must list the same IDs in the same order."""
    first = tables[0]
    for name, t in zip(names[1:], tables[1:], strict=True):
        if len(t) != len(first):
            raise InputDataError(f"{name} has {len(t)} rows, {names[0]} has {len(first)}: not aligned")
        if t.ids != first.ids:
            row = next(i for i, (a, b) in enumerate(zip(first.ids, t.ids, strict=True)) if a != b)
            raise InputDataError(f"{name} ({t.where(row)}) has ID {t.ids[row]!r} where {names[0]} "
                                 f"({first.where(row)}) has {first.ids[row]!r}: not aligned")


def ids_digest(ids: Sequence[object], domain: str) -> bytes:
    """SHA-256 over the ordered row IDs, length-prefixed and domain-separated.

    Parties exchange it to check that their rows are aligned (same IDs, same order)
    before training, without sending the IDs; equal digests mean equal lists.
    """
    h = hashlib.sha256(b"vflcrypto.ids.v1\x00" + domain.encode("utf-8") + b"\x00")
    for i in ids:
        b = str(i).encode("utf-8")
        h.update(len(b).to_bytes(4, "big") + b)
    return h.digest()


def train_test_split(n: int, test_fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic row split (not secret: every party must derive the same split)."""
    if not 0.0 <= test_fraction < 1.0:
        raise InputDataError("test fraction must be in [0, 1)")
    order = np.random.default_rng(seed).permutation(n)
    n_test = round(n * test_fraction)
    return np.sort(order[n_test:]), np.sort(order[:n_test])
