"""Model directories are checked artefacts: a manifest with every file's SHA-256, written
all-or-nothing; an earlier run's model is never overwritten or mixed in silently; a damaged,
text or foreign model file is one :class:`ModelFileError` naming the file."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from vflcrypto.protocols import linreg as lr
from vflcrypto.protocols import secureboost as sb

from vflcrypto.cli import main
from vflcrypto.data.files import (
    MANIFEST,
    load_model,
    read_manifest,
    save_model,
    verify_model_dir,
    write_csv_atomic,
    write_model_dir,
)
from vflcrypto.data.tables import read_party_csv
from vflcrypto.errors import ConfigurationError, InputDataError, ModelFileError


def _files(*names: str) -> dict[str, Callable[[Path], None]]:
    """Writers of toy model files, one per party name."""
    return {f"{n}.npz": partial(save_model, meta={"protocol": "toy", "name": n}, arrays={"w": np.arange(64.0)})
            for n in names}


def test_a_model_directory_carries_a_manifest_of_digests(tmp_path: Path) -> None:
    d = tmp_path / "models"
    manifest = write_model_dir(d, "toy", _files("active", "passive-0"), run_id="run-1", plan_digest="abc")
    assert sorted(p.name for p in d.iterdir()) == ["active.npz", MANIFEST, "passive-0.npz"]
    assert read_manifest(d) == manifest
    assert manifest["protocol"] == "toy" and manifest["run_id"] == "run-1" and manifest["plan_digest"] == "abc"
    assert set(manifest["files"]) == {"active.npz", "passive-0.npz"}
    assert all(len(e["sha256"]) == 64 for e in manifest["files"].values())
    assert verify_model_dir(d, "toy") == manifest
    meta, arrays = load_model(d / "active.npz", protocol="toy")
    assert meta["name"] == "active" and arrays["w"].shape == (64,)
    assert not list(tmp_path.glob(".*.part"))  # the temporary sibling is gone


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "bit-flipped":
        pos = data.index(np.arange(64.0).tobytes()) + 100  # inside the array data, past every header
        path.write_bytes(data[:pos] + bytes([data[pos] ^ 0x10]) + data[pos + 1:])
    else:
        path.write_text("id,x\nr1,1.0\n")


@pytest.mark.parametrize("how", ["truncated", "bit-flipped", "text"])
@pytest.mark.parametrize("with_manifest", [True, False])
def test_a_damaged_model_file_is_one_library_error_naming_it(tmp_path: Path, how: str, with_manifest: bool) -> None:
    d = tmp_path / "models"
    write_model_dir(d, "toy", _files("active", "passive-0"))
    if not with_manifest:  # a single model file (a party's --out) has no manifest: the archive itself is checked
        (d / MANIFEST).unlink()
    path = d / "passive-0.npz"
    _damage(path, how)
    with pytest.raises(ModelFileError, match=r"passive-0\.npz") as info:
        load_model(path)
    msg = str(info.value)
    assert "pickle" not in msg and "BadZipFile" not in msg
    if with_manifest:
        assert "SHA-256" in msg
        with pytest.raises(ModelFileError, match=r"passive-0\.npz"):
            verify_model_dir(d)
    elif how == "text":
        assert "is a text file" in msg
    else:
        assert "truncated or corrupted" in msg


def test_linreg_loading_refuses_a_damaged_or_foreign_model(tmp_path: Path) -> None:
    active, passives = lr.synthetic_split(n_rows=12, p_active=1, p_passive=(1,), seed=3)
    models = [lr.PartyModel(n, n, tuple(t.columns), np.ones(len(t.columns)), lr.fit_preprocessing(t.X))
              for n, t in (("active", active), ("passive-0", passives[0]))]
    d = tmp_path / "lin"
    lr.save_models(models, d)
    # a linreg file is not a SecureBoost model, whether the manifest or the file says so
    with pytest.raises(ModelFileError, match="holds a linreg model, not a secureboost model"):
        sb.ActiveModel.load(d / "active.npz")
    # a directory of another protocol is refused before any prediction message
    other = tmp_path / "boost"
    write_model_dir(other, "secureboost", _files("active", "passive-0"))
    with pytest.raises(ModelFileError, match="holds a secureboost model, not a linreg model"):
        lr.predict_local(other, [active, passives[0]], key_bits=512, allow_insecure=True)
    _damage(d / "active.npz", "truncated")
    with pytest.raises(ModelFileError, match=r"active\.npz"):
        lr.predict_local(d, [active, passives[0]], key_bits=512, allow_insecure=True)
    with pytest.raises(ModelFileError, match=r"active\.npz"):
        lr.PartyModel.load(d / "active.npz")


def test_reuse_is_refused_and_overwrite_removes_the_stale_files(tmp_path: Path) -> None:
    d = tmp_path / "models"
    write_model_dir(d, "toy", _files("active", "passive-0", "passive-1"))
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    with pytest.raises(ModelFileError, match=r"already holds a toy model .*--overwrite") as info:
        write_model_dir(d, "other", _files("active", "passive-0"))
    assert isinstance(info.value, InputDataError)  # caught by the command line's one-line error report
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    (d / MANIFEST).unlink()  # loose model files without a manifest are refused too
    with pytest.raises(ModelFileError, match="already holds model files"):
        write_model_dir(d, "other", _files("active"))
    (d / "notes.txt").write_text("mine")
    write_model_dir(d, "other", _files("active", "passive-0"), overwrite=True)
    assert sorted(p.name for p in d.iterdir()) == ["active.npz", MANIFEST, "notes.txt", "passive-0.npz"]
    assert verify_model_dir(d, "other")["protocol"] == "other"


def test_a_failed_write_leaves_the_directory_as_it_was(tmp_path: Path) -> None:
    d = tmp_path / "models"
    write_model_dir(d, "toy", _files("active"))
    before = {p.name: p.read_bytes() for p in d.iterdir()}

    def full_disk(path: Path) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_model_dir(d, "toy", {**_files("active"), "passive-0.npz": full_disk},  # type: ignore[dict-item]
                        overwrite=True)
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    assert not list(tmp_path.glob(".*.part"))
    with pytest.raises(ConfigurationError, match="plain"):  # no file outside the model directory
        write_model_dir(tmp_path / "new", "toy", {"../escape.npz": full_disk})  # type: ignore[dict-item]
    assert not (tmp_path / "new").exists()


def _linreg_csvs(tmp: Path, n_passive: int) -> list[Path]:
    active, passives = lr.synthetic_split(n_rows=24, p_active=1, p_passive=(1,) * n_passive, seed=5)
    paths = [tmp / "active.csv"]
    write_csv_atomic(paths[0], ["ID", "target", *active.columns],
                     [[i, y, *x] for i, y, x in zip(active.ids, active.label, active.X.tolist(), strict=True)])
    for k, t in enumerate(passives):
        paths.append(tmp / f"passive{k}.csv")
        write_csv_atomic(paths[-1], ["ID", *t.columns], [[i, *x] for i, x in zip(t.ids, t.X.tolist(), strict=True)])
    return paths


def _train(paths: list[Path], model_dir: Path, *extra: str) -> int:
    args = ["train", "linreg", "--active", str(paths[0]), "--id-column", "ID", "--label", "target", "--aligned",
            "--key-bits", "512", "--allow-insecure", "--epochs", "2", "--model-dir", str(model_dir), *extra]
    for p in paths[1:]:
        args += ["--passive", str(p)]
    return main(args)


def test_cli_refuses_another_runs_model_dir_and_overwrite_leaves_no_stale_party(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "models"
    assert _train(_linreg_csvs(tmp_path, 2), d) == 0
    assert sorted(p.name for p in d.iterdir()) == ["active.npz", MANIFEST, "passive-0.npz", "passive-1.npz"]
    capsys.readouterr()
    (tmp_path / "two").mkdir()
    two = _linreg_csvs(tmp_path / "two", 1)
    assert _train(two, d) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already holds a linreg model" in err and "--overwrite" in err, err
    assert "passive-1.npz" in {p.name for p in d.iterdir()}  # untouched
    assert _train(two, d, "--overwrite") == 0
    assert sorted(p.name for p in d.iterdir()) == ["active.npz", MANIFEST, "passive-0.npz"]
    manifest = json.loads((d / MANIFEST).read_text())
    assert manifest["protocol"] == "linreg" and set(manifest["files"]) == {"active.npz", "passive-0.npz"}
    tables = [read_party_csv(two[0], "ID", label="target"), read_party_csv(two[1], "ID")]
    pred, _ = lr.predict_local(d, tables, key_bits=512, allow_insecure=True)
    assert pred.shape == (24,)


def test_another_tools_manifest_json_is_neither_a_model_nor_replaced(tmp_path: Path) -> None:
    d = tmp_path / "project"
    d.mkdir()
    (d / MANIFEST).write_text('{"name": "my-web-app"}')
    save_model(d / "single.npz", {"protocol": "toy"}, {"w": np.zeros(2)})  # a party's --out file beside it
    assert load_model(d / "single.npz")[0] == {"protocol": "toy"}
    (d / "single.npz").unlink()
    for overwrite in (False, True):
        with pytest.raises(ModelFileError, match="of another tool"):
            write_model_dir(d, "toy", _files("active"), overwrite=overwrite)
    assert (d / MANIFEST).read_text() == '{"name": "my-web-app"}'
    (d / MANIFEST).unlink()
    (d / "notes.txt").write_text("mine")
    write_model_dir(d, "toy", _files("active"))
    assert verify_model_dir(d, "toy")["files"].keys() == {"active.npz"}  # published file by file, ours now
    (d / MANIFEST).write_text("{not json")
    with pytest.raises(ModelFileError, match=r"manifest\.json is truncated or corrupted"):
        load_model(d / "active.npz")
    with pytest.raises(ModelFileError, match="already holds model files"):
        write_model_dir(d, "toy", _files("active"))
