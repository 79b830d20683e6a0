"""Output files written all-or-nothing, output checks before long runs, pickle-free model files, and
model directories with a manifest of digests.

Output files are written atomically: to a temporary file in the same directory, flushed,
then renamed, so a failure never leaves a half-written file that looks complete. A command
that writes several files does so inside :func:`atomic_set`: they are published together
once every one is complete, or none is (a full disk at the k-th file leaves nothing), and a
write error is one :class:`~vflcrypto.errors.OutputError` naming the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigurationError, InputDataError, ModelFileError, OutputError
from .atomic import (
    _ACTIVE,
    PRIVATE,
    PUBLIC,
    OutputSet,
    atomic_open,
    atomic_set,
    atomic_write_bytes,
    atomic_write_text,
    immediate_outputs,
    write_csv_atomic,
    write_error,
)

__all__ = [
    "MANIFEST",
    "PRIVATE",
    "PUBLIC",
    "OutputSet",
    "atomic_open",
    "atomic_set",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_model_dir",
    "check_output_dir",
    "check_outputs",
    "immediate_outputs",
    "load_model",
    "read_manifest",
    "save_model",
    "verify_model_dir",
    "write_csv_atomic",
    "write_error",
    "write_model_dir",
]


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


def _not_a_model(path: Path, data: bytes) -> str:
    """Why ``data`` (which is no zip archive) is not a model file, in the user's terms."""
    if not data:
        return f"{path} is empty, not a vflcrypto model file"
    if data.startswith(b"\x93NUMPY"):
        return f"{path} is a single numpy array (.npy), not a vflcrypto model file (.npz)"
    head = data[:512]
    try:
        head.decode("utf-8")
        text = b"\x00" not in head
    except UnicodeDecodeError:
        text = False
    return f"{path} is {'a text file' if text else 'not a zip archive'}, not a vflcrypto model file (.npz)"


def _parse_model(path: Path, data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Parse the bytes of a model file; any failure is one :class:`ModelFileError` naming ``path``.

    Model files are untrusted input: a truncated or bit-flipped archive makes numpy and
    zipfile raise ``BadZipFile``, ``EOFError``, ``ValueError`` (or advice to unpickle);
    all of them mean "this file is damaged", which is what the user is told.
    """
    if not data.startswith(b"PK\x03\x04"):
        raise ModelFileError(_not_a_model(path, data))
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            if "__meta__" not in npz.files:
                raise ModelFileError(f"{path} is an .npz archive but not a vflcrypto model file (no metadata)")
            meta = json.loads(bytes(npz["__meta__"]).decode("utf-8"))
            # reading every member in full checks each member's CRC-32 (a flipped bit fails here)
            arrays = {k[2:]: npz[k] for k in npz.files if k.startswith("a_")}
    except ModelFileError:
        raise
    except Exception as exc:  # untrusted bytes: every parser failure means a damaged file
        if "pickle" in str(exc):
            raise ModelFileError(f"{path} holds pickled objects, which vflcrypto never writes "
                                 "and does not load") from None
        raise ModelFileError(f"{path} is truncated or corrupted: it cannot be read as a vflcrypto "
                             "model file") from None
    if not isinstance(meta, dict):
        raise ModelFileError(f"{path} is truncated or corrupted: its metadata is not a JSON object")
    return meta, arrays


def load_model(path: str | os.PathLike[str], *,
               protocol: str | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Load a file written by :func:`save_model` (no pickle), checked before it is parsed.

    If the file's directory has a model manifest (:func:`write_model_dir`), the file must
    be listed there with the same SHA-256 and, when ``protocol`` is given, the manifest
    must name that protocol; a file's own ``protocol`` metadata is checked too.
    :class:`ModelFileError` naming the file otherwise (truncated, bit-flipped, text,
    foreign or stale files).
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ModelFileError(f"model file {p} does not exist") from None
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {p}: {exc.strerror or exc}") from None
    manifest_path = p.parent / MANIFEST
    manifest = _own_manifest(p.parent)
    if manifest is not None:
        _check_protocol(manifest_path, manifest.get("protocol"), protocol)
        entry = manifest["files"].get(p.name)
        if entry is None:
            raise ModelFileError(f"{p} is not one of the files of the model in {p.parent} "
                                 f"(its {MANIFEST} lists {', '.join(sorted(manifest['files']))})")
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise ModelFileError(f"{p} does not match its SHA-256 digest in {manifest_path}: "
                                 "the file is truncated, corrupted or was replaced")
    meta, arrays = _parse_model(p, data)
    if protocol is not None and isinstance(meta.get("protocol"), str):
        _check_protocol(p, meta["protocol"].split("-", 1)[0], protocol)
    return meta, arrays


def _check_protocol(where: Path, found: Any, expected: str | None) -> None:
    if expected is not None and found != expected:
        raise ModelFileError(f"{where} holds a {found} model, not a {expected} model")


# --------------------------------------------------------------------------- model directories

#: the manifest of a model directory: protocol, run id, plan digest and every file's SHA-256
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "vflcrypto.model-dir/1"


def read_manifest(model_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of ``model_dir`` (:class:`ModelFileError` if it is missing or malformed)."""
    manifest = _own_manifest(Path(model_dir))
    if manifest is None:
        raise ModelFileError(f"{model_dir} has no vflcrypto {MANIFEST}: it is not a complete model directory "
                             "(retrain, or the write was interrupted)")
    return manifest


def _own_manifest(d: Path) -> dict[str, Any] | None:
    """The vflcrypto manifest of ``d``; None if there is none, or the ``manifest.json`` is
    another tool's (a JSON object without a vflcrypto format); :class:`ModelFileError` if damaged."""
    path = d / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError):
        raise ModelFileError(f"{path} is truncated or corrupted (not a JSON model manifest)") from None
    fmt = manifest.get("format") if isinstance(manifest, dict) else None
    if isinstance(manifest, dict) and not str(fmt).startswith("vflcrypto.model-dir"):
        return None
    if not (isinstance(manifest, dict) and fmt == MANIFEST_FORMAT and isinstance(manifest.get("files"), dict)
            and all(isinstance(e, dict) for e in manifest["files"].values())):
        raise ModelFileError(f"{path} is not a readable vflcrypto model manifest ({MANIFEST_FORMAT})")
    return manifest


def verify_model_dir(model_dir: str | os.PathLike[str], protocol: str | None = None) -> dict[str, Any]:
    """Check a model directory before loading from it: its manifest, its protocol, and that
    every listed file is present with its digest. Returns the manifest; :class:`ModelFileError` otherwise."""
    d = Path(model_dir)
    if not d.is_dir():
        raise ModelFileError(f"model directory {d} does not exist" if not d.exists()
                             else f"model directory {d} is a file, not a directory")
    manifest = read_manifest(d)
    _check_protocol(d, manifest.get("protocol"), protocol)
    for name, entry in sorted(manifest["files"].items()):
        try:
            data = (d / name).read_bytes()
        except OSError:
            raise ModelFileError(f"{d / name}, listed in {d / MANIFEST}, is missing or unreadable") from None
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise ModelFileError(f"{d / name} does not match its SHA-256 digest in {d / MANIFEST}: "
                                 "the file is truncated, corrupted or was replaced")
    return manifest


def _model_files(d: Path) -> list[Path]:
    """The files of an earlier model in ``d``: its manifest, the files it lists, and every ``.npz``."""
    found = {p for p in d.glob("*.npz") if p.is_file()}
    try:
        manifest = _own_manifest(d)
    except ModelFileError:  # a damaged manifest still marks the directory as holding a model
        return sorted(found | {d / MANIFEST})
    if manifest is not None:
        found.add(d / MANIFEST)
        found |= {d / n for n in manifest["files"] if _plain_name(n) and (d / n).is_file()}
    return sorted(found)


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..", MANIFEST) and Path(name).name == name and "\\" not in name


def check_model_dir(model_dir: str | os.PathLike[str], *, overwrite: bool = False,
                    what: str = "model directory") -> Path:
    """Check, before any work, that a model can be written to ``model_dir``.

    Beyond :func:`check_output_dir`: a directory that already holds a model (a manifest
    or any ``.npz``) is refused unless ``overwrite``, so one run never silently replaces
    or mixes with another's files. :class:`ModelFileError` otherwise.
    """
    d = check_output_dir(model_dir, what)
    try:
        foreign = (d / MANIFEST).is_file() and _own_manifest(d) is None
    except ModelFileError:
        foreign = False  # a damaged manifest of ours: an earlier model (below)
    if foreign:  # never replaced, not even with --overwrite: it is not ours
        raise ModelFileError(f"{what} {model_dir} has a {MANIFEST} of another tool: choose another directory")
    if d.is_dir() and not overwrite:
        old = _model_files(d)
        if old:
            try:
                protocol = f"a {json.loads((d / MANIFEST).read_text(encoding='utf-8'))['protocol']} model"
            except Exception:  # no or a damaged manifest: the .npz files alone say a model is there
                protocol = "model files"
            names = ", ".join(p.name for p in old if p.name != MANIFEST)
            raise ModelFileError(f"{what} {model_dir} already holds {protocol} ({names}): pass --overwrite "
                                 "to replace it, or choose another directory")
    return d


def _temp_dir_beside(target: Path) -> Path:
    """A new, empty directory beside ``target`` (same file system: renames publish it), mode 0777 less the umask."""
    parent = target.absolute().parent
    staging = _ACTIVE.get()
    try:
        if staging is not None:
            staging.make_dirs(parent)
        else:
            parent.mkdir(parents=True, exist_ok=True)
        for _ in range(100):
            tmp = parent / f".{target.name}.{secrets.token_hex(6)}.part"
            try:
                tmp.mkdir(0o777)
                return tmp
            except FileExistsError:
                continue
    except OSError as exc:
        raise write_error(target, exc) from None
    raise FileExistsError(f"no free temporary name beside {target}")


def write_model_dir(model_dir: str | os.PathLike[str], protocol: str,
                    files: Mapping[str, Callable[[Path], None]], *, overwrite: bool = False,
                    run_id: str | None = None, plan_digest: str | None = None,
                    what: str = "model directory") -> dict[str, Any]:
    """Write a model directory all-or-nothing: every file, and a manifest with their digests.

    ``files`` maps each file name (``<party>.npz``) to a function that writes it at the
    given path. Everything is written into a temporary sibling directory first (a full
    disk or a failing writer leaves ``model_dir`` untouched and removes the sibling); a
    missing or empty ``model_dir`` is then replaced by the sibling in one rename, one holding
    only an earlier model (with ``overwrite``) by two. Into a directory with other files too
    the files are moved in one by one and the manifest last, so a directory never has a
    manifest for an incomplete set. A
    directory holding an earlier model is refused unless ``overwrite``, which first removes
    that model's files (no stale ``passive-1.npz`` beside a 2-party model). Inside
    :func:`atomic_set` the directory is published with the command's other outputs. Returns the manifest.
    """
    target = Path(model_dir)
    check_model_dir(target, overwrite=overwrite, what=what)
    for name in files:
        if not (_plain_name(name) and name.endswith(".npz")):
            raise ConfigurationError(f"model file name {name!r} must be a plain <name>.npz")
    with atomic_set() as staged:
        tmp = _temp_dir_beside(target)
        try:
            with immediate_outputs():  # the sibling itself is the staging area
                entries: dict[str, dict[str, Any]] = {}
                for name, write in files.items():
                    try:
                        write(tmp / name)
                    except OSError as exc:  # name the file as the user knows it, not the staging path
                        raise write_error(target / name, exc) from None
                    data = (tmp / name).read_bytes()
                    entries[name] = {"party": name[:-len(".npz")], "sha256": hashlib.sha256(data).hexdigest(),
                                     "bytes": len(data)}
                manifest = {"format": MANIFEST_FORMAT, "protocol": protocol,
                            "run_id": run_id or secrets.token_hex(8), "plan_digest": plan_digest,
                            "created": datetime.now(UTC).isoformat(timespec="seconds"), "files": entries}
                atomic_write_text(tmp / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, OutputError) and exc.path == str(tmp / MANIFEST):
                raise write_error(target / MANIFEST, exc) from None
            raise
        staged.stage(lambda: _publish(tmp, target, list(entries), overwrite=overwrite, what=what),
                     lambda: shutil.rmtree(tmp, ignore_errors=True))
    return manifest


Undo = Callable[[], None]


def _publish(tmp: Path, target: Path, names: list[str], *, overwrite: bool, what: str) -> tuple[Undo, Undo]:
    """Move the finished set from ``tmp`` into ``target`` (see :func:`write_model_dir`).

    Returns (undo, finish): ``undo`` puts the earlier state back (a later output of the same
    command failed to publish), ``finish`` removes the earlier model kept aside until then.
    """
    if not target.is_symlink() and (not target.exists() or not any(target.iterdir())):
        existed = target.exists()
        try:
            os.replace(tmp, target)  # rename(2) replaces a missing or empty directory atomically

            def undo_new() -> None:
                os.replace(target, tmp)
                if existed:
                    target.mkdir()

            return undo_new, lambda: None
        except OSError:
            pass  # something appeared in target meanwhile: publish file by file below
    old = _model_files(target)
    if old and not overwrite:
        check_model_dir(target, what=what)  # raises: another run wrote here meanwhile
    trash = _temp_dir_beside(target)
    if old and not target.is_symlink() and set(target.iterdir()) == set(old):
        # the directory holds only the earlier model: swap the directories (two renames, no mixed set)
        os.replace(target, trash)
        try:
            os.replace(tmp, target)
        except BaseException:
            os.replace(trash, target)
            raise

        def undo_swap() -> None:
            os.replace(target, tmp)
            os.replace(trash, target)

        return undo_swap, lambda: shutil.rmtree(trash, ignore_errors=True)
    moved_old: list[str] = []
    moved_new: list[str] = []

    def undo_files() -> None:
        for n in reversed(moved_new):
            os.replace(target / n, tmp / n)
        for n in moved_old:
            os.replace(trash / n, target / n)
        trash.rmdir()

    try:
        for p in sorted(old, key=lambda p: p.name != MANIFEST):  # the old manifest first: the old set is void
            os.replace(p, trash / p.name)
            moved_old.append(p.name)
        for name in [*names, MANIFEST]:  # the manifest last: it commits the new set
            os.replace(tmp / name, target / name)
            moved_new.append(name)
    except BaseException:
        with suppress(OSError):
            undo_files()
        raise

    def finish() -> None:
        shutil.rmtree(trash, ignore_errors=True)
        tmp.rmdir()

    return undo_files, finish
