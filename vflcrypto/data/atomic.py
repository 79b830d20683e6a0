"""Atomic outputs: every file written to a temporary name beside it and renamed when complete, and
:func:`atomic_set`, which publishes all the files a command writes together or none of them.

A full disk at the k-th of a command's files leaves none of them (and no temporary file),
and is one :class:`~vflcrypto.errors.OutputError` naming the file. Re-exported by
:mod:`vflcrypto.data.files`, the module commands import.
"""

from __future__ import annotations

import csv
import os
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path
from typing import IO, Any

from ..errors import OutputError, VflError

__all__ = ["PRIVATE", "PUBLIC", "OutputSet", "atomic_open", "atomic_set", "atomic_write_bytes", "atomic_write_text",
           "immediate_outputs", "write_csv_atomic", "write_error"]


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


def write_error(path: str | os.PathLike[str], exc: OSError) -> OutputError:
    """The one-line error of a failed write of ``path`` (full disk, read-only or vanished directory, ...)."""
    if isinstance(exc, OutputError) and exc.path == str(path):
        return exc
    reason = getattr(exc, "reason", None) or exc.strerror or str(exc) or type(exc).__name__
    err = OutputError(f"cannot write {path}: {reason}; nothing of this command's output was kept")
    err.errno, err.path, err.reason = exc.errno, str(path), reason  # str(err) stays the message above
    return err


#: a step of publication: no arguments, nothing returned (undo a publication, finish it, discard staged work)
Undo = Callable[[], None]
#: publish one staged file or directory; returns (undo, finish)
Publish = Callable[[], tuple[Undo, Undo]]


class OutputSet:
    """The outputs of one command, staged beside their targets and published together (:func:`atomic_set`).

    Files are written in full (and fsynced) to temporary names in their final directories
    while the command works; only when every one of them is complete are they renamed into
    place, in order. A failure while writing removes every staged file (and the
    directories the set created); a failure while publishing puts back what the earlier
    renames replaced, so the outputs are either all new or all as they were.
    """

    def __init__(self) -> None:
        self._steps: list[tuple[Publish, Undo]] = []  # (publish, discard) per file or directory
        self._files: dict[Path, Path] = {}  # target -> its staged temporary file
        self._made: list[Path] = []  # directories this set created (removed again on failure, if empty)

    @property
    def targets(self) -> list[Path]:
        """The files staged so far (their final paths)."""
        return list(self._files)

    def make_dirs(self, d: Path) -> None:
        """Create ``d`` and its missing ancestors, remembering them for :meth:`discard`."""
        missing = []
        p = d.absolute()
        while not p.exists() and p != p.parent:
            missing.append(p)
            p = p.parent
        for m in reversed(missing):
            try:
                m.mkdir()
            except FileExistsError:
                continue
            self._made.append(m)

    def stage_file(self, tmp: Path, target: Path) -> None:
        """``tmp`` (complete) becomes ``target`` at publication; a file staged for ``target`` before is dropped."""
        earlier = self._files.get(target)
        self._files[target] = tmp
        if earlier is not None:
            earlier.unlink(missing_ok=True)
            return
        self._steps.append((lambda: _replace_file(self._files[target], target),
                            lambda: self._files[target].unlink(missing_ok=True)))

    def stage(self, publish: Publish, discard: Undo) -> None:
        """A publication step: ``publish()`` returns (undo, finish); ``discard()`` drops the staged work."""
        self._steps.append((publish, discard))

    def publish(self) -> None:
        done: list[tuple[Undo, Undo]] = []
        try:
            for publish, _ in self._steps:
                done.append(publish())
        except BaseException as exc:
            for undo, _ in reversed(done):  # each undo puts the new file back where it was staged ...
                with suppress(OSError):
                    undo()
            self.discard()  # ... and every staged file goes

            if isinstance(exc, OSError):
                raise write_error(exc.filename or "the outputs", exc) from None
            raise
        for _, finish in done:
            with suppress(OSError):
                finish()

    def discard(self) -> None:
        for _, discard in self._steps:
            with suppress(OSError):
                discard()
        self._remove_made()

    def _remove_made(self) -> None:
        for d in reversed(self._made):
            with suppress(OSError):
                d.rmdir()  # only if empty: a directory someone else wrote into meanwhile stays


def _replace_file(tmp: Path, target: Path) -> tuple[Undo, Undo]:
    """Rename ``tmp`` over ``target``, keeping a hard link to the file it replaces until the set is published."""
    backup: Path | None = None
    if target.is_file() and not target.is_symlink():
        backup = target.parent / f".{target.name}.{secrets.token_hex(6)}.old"
        try:
            os.link(target, backup)
        except OSError:
            backup = None  # no hard links here: a failed publication cannot restore this one file
    try:
        os.replace(tmp, target)
    except OSError as exc:
        if backup is not None:
            backup.unlink(missing_ok=True)
        exc.filename = str(target)
        raise

    def undo() -> None:
        if backup is not None:
            os.replace(backup, target)
        else:
            target.unlink(missing_ok=True)

    def finish() -> None:
        if backup is not None:
            backup.unlink(missing_ok=True)

    return undo, finish


_ACTIVE: ContextVar[OutputSet | None] = ContextVar("vflcrypto_output_set", default=None)


@contextmanager
def atomic_set() -> Iterator[OutputSet]:
    """Every atomic output written inside the block is published together when it ends, or none is.

    Files written with :func:`atomic_open` (and everything built on it: :func:`atomic_write_bytes`,
    :func:`write_csv_atomic`, :func:`save_model`, :func:`write_model_dir`) inside the block
    are staged instead of renamed at once; when the block succeeds they are all renamed
    into place (:class:`OutputSet`), when it fails (a full disk at the third file, an
    error after the first) none appears and the directories the block created are gone.
    Write errors become one :class:`~vflcrypto.errors.OutputError` naming the file. A nested
    block joins the outer one.
    """
    outer = _ACTIVE.get()
    if outer is not None:
        yield outer
        return
    staged = OutputSet()
    token = _ACTIVE.set(staged)
    try:
        yield staged
    except BaseException:
        _ACTIVE.reset(token)
        staged.discard()
        raise
    _ACTIVE.reset(token)
    staged.publish()


@contextmanager
def immediate_outputs() -> Iterator[None]:
    """Inside the block, atomic outputs are renamed into place at once, even within :func:`atomic_set`.

    For the staging area of a set step itself, and for state a command keeps whatever its
    outcome (a checkpoint after every tree): the set's all-or-nothing is for the command's
    results, and a checkpoint held back until the command succeeds would be lost with the
    killed run it exists for."""
    token = _ACTIVE.set(None)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb", *, permissions: int = PUBLIC,
                exact_mode: int | None = None, **kwargs: Any) -> Iterator[IO[Any]]:
    """A temporary file beside ``path`` that replaces it (fsync + rename) only if the block succeeds.

    The file gets ``permissions`` less the umask, as a plain ``open()`` would give it
    (0644 under umask 022); secrets pass :data:`PRIVATE` (0600), which the temporary file
    has from its creation, so no reader can open the secret in between. ``exact_mode`` sets
    the mode whatever the umask. Inside :func:`atomic_set` the rename waits for the whole
    set. A failed write (full disk, ...) is an :class:`~vflcrypto.errors.OutputError` naming ``path``.
    """
    path = Path(path)
    staging = _ACTIVE.get()
    try:
        if staging is not None:
            staging.make_dirs(path.parent)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _create_temp(path, permissions)
    except OSError as exc:
        raise write_error(path, exc) from None
    try:
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            if exact_mode is not None:
                os.fchmod(fh.fileno(), exact_mode)
            os.fsync(fh.fileno())
        if staging is not None:
            staging.stage_file(tmp, path)
        else:
            os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and not isinstance(exc, VflError):
            raise write_error(path, exc) from None
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, permissions: int = PUBLIC,
                       exact_mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically (temporary file + fsync + rename), mode ``permissions`` less the umask."""
    with atomic_open(path, "wb", permissions=permissions, exact_mode=exact_mode) as fh:
        fh.write(data)


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
