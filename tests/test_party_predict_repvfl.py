"""``vflcrypto party ... predict split|oneshot|fewshot|protovfl``: every party in its own process applies only its own
file of a model trained in-process with ``--model-dir`` to shuffled query files (aligned by PSI over the links); the
server's predictions equal ``vflcrypto predict NAME`` on the same files, the parties send only the declared
prediction message, and a party given another party's model file is refused with one line."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_party_processes import check_ok, finish, make_config, party, protocol_entries

from vflcrypto.cli import main
from vflcrypto.data.files import write_csv_atomic
from vflcrypto.runtime.certs import write_dev_pki

#: fast training flags per protocol (the model only has to exist; its accuracy is not tested here)
TRAIN = {"split": ["--dataset", "digits", "--overlap", "40", "--epochs", "1"],
         "oneshot": ["--dataset", "digits", "--overlap", "40", "--ssl-epochs", "2", "--head-epochs", "5"],
         "fewshot": ["--dataset", "digits", "--overlap", "40", "--ssl-epochs", "2", "--head-epochs", "5"],
         "protovfl": ["--dataset", "digits", "--aligned", "12", "--rounds", "0", "--local-epochs", "1",
                      "--hidden", "16", "--head-epochs", "5", "--plain"]}
#: the one message each party sends the server at prediction
MESSAGE = {"split": "split.test_representation", "oneshot": "oneshot.test_representation",
           "fewshot": "fewshot.test_representation", "protovfl": "protovfl.test_embedding"}


def _query_files(tmp_path: Path, name: str) -> tuple[Path, list[Path], list[str]]:
    """Query files from the digits rows the model held out: the server's IDs (plus IDs no party has), each party's
    columns of those rows plus rows of its own, every file in its own order; the IDs on every file."""
    if name == "protovfl":
        from vflcrypto.protocols.protovfl.data import digits_tables

        _, tables, test_ids = digits_tables(12, seed=0)
    else:
        from vflcrypto.protocols._repvfl_cli import _digits_tables

        _, tables, test_ids = _digits_tables(40, 0)
    rng = np.random.default_rng(4)  # test data layout, not a secret
    query = sorted(str(i) for i in rng.choice(test_ids, 30, replace=False))
    server = tmp_path / "q-server.csv"
    write_csv_atomic(server, ["id"], [[i] for i in rng.permutation([*query, "nobody-1", "nobody-2"])])
    files = []
    for k, t in enumerate(tables):
        where = {i: r for r, i in enumerate(t.ids)}
        own = [i for i in t.ids if i not in set(test_ids)][:4 + k]  # rows only this party's file has here
        rows = [where[i] for i in rng.permutation([*query, *own])]
        path = tmp_path / f"q-party{k}.csv"
        write_csv_atomic(path, ["id", *t.columns], [[t.ids[r], *t.X[r].tolist()] for r in rows])
        files.append(path)
    return server, files, query


def _read(path: Path) -> dict[str, str]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["id", "prediction"]
    return {r[0]: r[1] for r in rows[1:]}


def _sent(rec: dict[str, Any], name: str) -> list[tuple[str, str, str, int]]:
    """The protocol's messages a party sent (not the alignment's: prototype VFL's PSI kinds are protovfl.psi_*)."""
    return [e for e in protocol_entries(rec["transcript"], "send")
            if e[2].startswith(f"{name}.") and not e[2].startswith("protovfl.psi")]


def _processes(tmp_path: Path, cfg: Path, model: Path, name: str, server: Path, files: list[Path],
               models: dict[str, str], out: str) -> dict[str, tuple[int, Any, str]]:
    procs = {n: party(cfg, n, "predict", name, "--data", str(server if n == "server" else files[int(n[6:])]),
                      "--id-column", "id", "--model", str(model / models[n]), "--out", str(tmp_path / f"{out}-{n}"))
             for n in models}
    return finish(procs, timeout=60)


@pytest.mark.parametrize("name", ["split", "oneshot", "fewshot", "protovfl"])
def test_party_processes_predict_like_the_in_process_command(name: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    model = tmp_path / "model"
    assert main(["train", name, *TRAIN[name], "--model-dir", str(model), "--json"]) == 0
    server, files, query = _query_files(tmp_path, name)
    ref = tmp_path / "ref.csv"
    assert main(["predict", name, "--server", str(server), *(a for f in files for a in ("--party", str(f))),
                 "--id-column", "id", "--model-dir", str(model), "--out", str(ref)]) == 0, capsys.readouterr().err
    expected = _read(ref)
    assert sorted(expected) == query

    names = ["server", *(f"party-{k}" for k in range(len(files)))]
    write_dev_pki(tmp_path / "pki", names)
    cfg = make_config(tmp_path, tmp_path / "pki", names, timeout=30.0)
    own = {n: f"{n}.npz" for n in names}
    recs = check_ok(_processes(tmp_path, cfg, model, name, server, files, own, "out"))
    assert _read(tmp_path / "out-server") == expected  # the same IDs, the same classes
    for n in names[1:]:
        assert recs[n]["summary"]["rows"] == len(query)
        sent = _sent(recs[n], name)
        assert [(e[1], e[2]) for e in sent] == [("server", MESSAGE[name])]  # one declared message, to the server
    assert not _sent(recs["server"], name)  # the server sends nothing of the prediction: it only learns

    # a party given another party's file (the server a party's) is refused before it connects, in one line
    for n, given, why in (("party-0", "party-1.npz", "is the model of party-1, and this is party-0"),
                          ("server", "party-0.npz", "is the model of a party party, and server is the server party")):
        capsys.readouterr()
        out = tmp_path / f"bad-{n}"
        assert main(["party", "--config", str(cfg), "--as", n, "predict", name, "--data", str(files[0]),
                     "--id-column", "id", "--model", str(model / given), "--out", str(out)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and why in lines[0], lines
    assert not list(tmp_path.glob("bad-*"))  # no output, no run record


def test_the_outputs_of_party_train_are_checked_by_their_party_name(tmp_path: Path) -> None:
    """A party's ``--out`` of ``party ... train NAME`` names its party and task: it is this party's own, or refused."""
    from vflcrypto.protocols._repvfl_party_predict import _own_model

    from vflcrypto.data.files import save_model
    from vflcrypto.errors import ModelFileError
    from vflcrypto.spec import TaskContext

    roles = {"server": "server", "bank": "party", "shop": "party"}
    ctx = TaskContext("shop", "party", roles, {}, None)
    meta = {"party": "shop", "role": "party", "task": "train-oneshot", "protocol": "oneshot", "columns": ["a"]}
    save_model(tmp_path / "shop.npz", meta, {"extractor_0": np.zeros((1, 2))})
    save_model(tmp_path / "bank.npz", {**meta, "party": "bank"}, {"extractor_0": np.zeros((1, 2))})
    save_model(tmp_path / "split.npz", {**meta, "task": "train-split", "protocol": "split"}, {})
    assert _own_model(str(tmp_path / "shop.npz"), "oneshot", ctx, ["bank", "shop"])[0]["columns"] == ["a"]
    with pytest.raises(ModelFileError, match="is the model of bank, and this is shop"):
        _own_model(str(tmp_path / "bank.npz"), "oneshot", ctx, ["bank", "shop"])
    with pytest.raises(ModelFileError, match="holds a split model, not a oneshot model"):
        _own_model(str(tmp_path / "split.npz"), "oneshot", ctx, ["bank", "shop"])
