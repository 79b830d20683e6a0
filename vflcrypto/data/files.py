"""Output files written all-or-nothing, output checks before long runs, and pickle-free model files.

Output files are written atomically: to a temporary file in the same directory, flushed,
then renamed, so a failure never leaves a half-written file that looks complete.
"""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..errors import InputDataError

__all__ = [
    "PRIVATE",
    "PUBLIC",
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_output_dir",
    "check_outputs",
    "load_model",
    "save_model",
    "write_csv_atomic",
]


# --------------------------------------------------------------------------- atomic output


def _create_temp(path: Path, permissions: int) -> tuple[int, Path]:
    """Create a new, empty temporary file beside ``path`` with ``permissions`` less the umask.

    :func:`tempfile.mkstemp` always creates 0600, so a file renamed from it would keep
    0600 whatever the user's umask: ``os.open(..., O_CREAT | O_EXCL, permissions)`` lets
    the kernel apply the umask (and default ACLs) as for any file the user creates, and
    ``O_EXCL | O_NOFOLLOW`` keep the safety of ``mkstemp`` (never an existing file or link).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) \
        | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.part"
        try:
            return os.open(tmp, flags, permissions), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


#: mode of atomic outputs before the umask: what ``open(path, "w")`` gives (0644 under the usual umask 022)
PUBLIC = 0o666
#: mode of secrets (private keys): readable and writable by the owner only, from the first byte on
PRIVATE = 0o600


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb", *, permissions: int = PUBLIC,
                **kwargs: Any) -> Iterator[IO[Any]]:
    """A temporary file beside ``path`` that replaces it (fsync + rename) only if the block succeeds.

    The file gets ``permissions`` less the umask, as a plain ``open()`` would give it
    (0644 under umask 022); secrets pass :data:`PRIVATE` (0600), which the temporary file
    has from its creation, so no reader can open the secret in between.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path, permissions)
    try:
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, permissions: int = PUBLIC) -> None:
    """Write ``data`` to ``path`` atomically (temporary file + fsync + rename), mode ``permissions`` less the umask."""
    with atomic_open(path, "wb", permissions=permissions) as fh:
        fh.write(data)


def check_outputs(outputs: Mapping[str, str | os.PathLike[str]],
                  inputs: Sequence[str | os.PathLike[str]] = ()) -> None:
    """Refuse, before any work, outputs that collide with each other or with an input, or
    whose directory cannot be written (``outputs`` maps what each file is to its path)."""
    seen: dict[Path, str] = {}
    ins = {Path(i).resolve(): str(i) for i in inputs}
    for what, path in outputs.items():
        r = Path(path).resolve()
        if r in ins:
            raise InputDataError(f"the {what} output {path} is the input {ins[r]}: it would be overwritten")
        if r in seen:
            raise InputDataError(f"the {what} and the {seen[r]} outputs are the same file {path}: "
                                 "one would overwrite the other")
        seen[r] = what
        if r.is_dir():
            raise InputDataError(f"the {what} output {path} is a directory")
        d = r.parent
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputDataError(f"cannot create the output directory {d}: {exc.strerror or exc}") from None
        if not os.access(d, os.W_OK | os.X_OK):
            raise InputDataError(f"the output directory {d} is not writable")


def check_output_dir(path: str | os.PathLike[str], what: str = "output directory") -> Path:
    """Check, before any work, that files can be written under ``path`` (created later, when writing).

    An existing directory must accept a test file (removed at once: read-only, full or
    another user's directories fail here); a missing one needs its nearest existing
    ancestor to be a writable directory. Nothing is created. :class:`InputDataError` otherwise.
    """
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise InputDataError(f"{what} {path} is a file, not a directory")
    if d.is_dir():
        try:
            fd, probe = tempfile.mkstemp(prefix=".vflcrypto-write-test-", dir=d)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise InputDataError(f"cannot write to {what} {path}: {exc.strerror or exc}") from None
        return d
    parent = d.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise InputDataError(f"cannot write to {what} {path}: {parent} is not a writable directory")
    return d


def atomic_write_text(path: str | os.PathLike[str], text: str, *, permissions: int = PUBLIC) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, mode ``permissions`` less the umask."""
    atomic_write_bytes(path, text.encode("utf-8"), permissions=permissions)


def write_csv_atomic(path: str | os.PathLike[str], header: Sequence[str],
                     rows: Iterable[Sequence[Any]]) -> None:
    """Write a CSV atomically, streaming ``rows`` into the temporary file (memory stays flat)."""
    with atomic_open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


# --------------------------------------------------------------------------- model files


def save_model(path: str | os.PathLike[str], meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Save a party's model as one ``.npz`` (no pickle): JSON metadata plus numeric arrays."""
    buf = io.BytesIO()
    payload = {f"a_{k}": np.asarray(v) for k, v in arrays.items()}
    for v in payload.values():
        if v.dtype == object:
            raise InputDataError("object arrays cannot be saved without pickle")
    meta_bytes = np.frombuffer(json.dumps(meta, sort_keys=True).encode("utf-8"), dtype=np.uint8)
    # typed Any for mypy, which matches ** values against savez's own allow_pickle keyword
    # (the "a_" prefix keeps the names clear of it)
    arrays_kw: dict[str, Any] = payload
    np.savez(buf, __meta__=meta_bytes, **arrays_kw)
    atomic_write_bytes(path, buf.getvalue())


def load_model(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Load a file written by :func:`save_model` (``allow_pickle=False``)."""
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            meta = json.loads(bytes(data["__meta__"]).decode("utf-8"))
            arrays = {k[2:]: data[k] for k in data.files if k.startswith("a_")}
    except (OSError, ValueError, KeyError) as exc:
        raise InputDataError(f"{path} is not a vflcrypto model file: {exc}") from None
    return meta, arrays
