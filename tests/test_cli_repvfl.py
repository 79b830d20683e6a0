"""``vflcrypto train split|oneshot|fewshot`` on the bundled digits and on per-party CSV files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from vflcrypto.protocols import oneshot
from vflcrypto.protocols._repvfl import aligned_inputs
from vflcrypto.protocols._repvfl_cli import _digits_tables

from vflcrypto.cli import main
from vflcrypto.data.digits import few_overlap_split

FAST = ["--ssl-epochs", "3", "--head-epochs", "10"]


def write_views(d: Path, overlap: int = 60) -> tuple[Path, list[Path]]:
    """The digits split as files: the server's labels (overlap and test rows), one CSV per party."""
    sp = few_overlap_split(overlap, seed=2)
    server = d / "labels.csv"
    rows = [f"{i},{sp.labels[i]}" for i in sp.overlap_ids] + [f"{i},{y}" for i, y in zip(sp.test_ids, sp.y_test,
                                                                                        strict=True)]
    server.write_text("id,digit\n" + "\n".join(rows) + "\n")
    paths = []
    for k, v in enumerate(sp.parties):
        p = d / f"party{k}.csv"
        head = "id," + ",".join(f"c{j}" for j in range(v.X.shape[1]))
        order = np.random.default_rng(k).permutation(len(v.ids))  # each file in its own order
        p.write_text(head + "\n" + "\n".join(v.ids[i] + "," + ",".join(str(int(x)) for x in v.X[i]) for i in order)
                     + "\n")
        paths.append(p)
    return server, paths


def test_digits_json_reports_accuracy_bytes_and_messages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "oneshot", "--dataset", "digits", "--overlap", "60", *FAST, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"test_accuracy", "bytes_sent", "seconds", "messages"}
    assert out["rows"]["overlap"] == 60 and out["rows"]["test"] == 360
    assert out["messages"] == {"server": 4, "party": 6}  # 2 setups + 2 D1; per party U1, U2, test
    assert 0.3 < out["test_accuracy"] <= 1


def test_csv_files_are_aligned_by_psi_and_split(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server, parties = write_views(tmp_path)
    args = ["--server", str(server), *[a for p in parties for a in ("--party", str(p))], "--id-column", "id",
            "--label", "digit", "--test-fraction", "0.5", "--json"]
    for name in ("oneshot", "fewshot"):
        assert main(["train", name, *args, *FAST, "--model-dir", str(tmp_path / name)]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["rows"]["aligned"] == 420 and out["rows"]["test"] == 210 and out["rows"]["overlap"] == 210
        assert (tmp_path / name / "party-1.npz").exists()
    assert main(["train", "split", *args, "--epochs", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["messages"]["party"] == 2 * (4 + 1)  # 4 batches of 64 + test
    # only split's own settings (its label defences among them): none of one-/few-shot's semi-supervised ones
    assert set(out["config"]) == {"dim", "hidden", "lr", "head_lr", "batch_size", "seed", "epochs", "label_dp",
                                  "grad_noise", "grad_epsilon", "grad_clip", "dp_delta", "marvell_bound",
                                  "label_mechanism", "embed_noise", "embed_epsilon", "embed_clip", "embed_delta",
                                  "dcor_weight"}
    assert "privacy" not in out  # undefended by default


def test_split_refuses_the_semi_supervised_flags_it_would_ignore(capsys: pytest.CaptureFixture[str]) -> None:
    """--help offers only what the command uses: split has no --ssl-epochs, oneshot has."""
    with pytest.raises(SystemExit) as exc:
        main(["train", "split", "--dataset", "digits", "--ssl-epochs", "3"])
    assert exc.value.code == 2 and "--ssl-epochs" in capsys.readouterr().err


def test_the_same_inputs_give_the_same_model_in_process(tmp_path: Path) -> None:
    """The aligned rows are sorted by canonical ID after the PSI: every run sees the same order."""
    labels, tables, test_ids = _digits_tables(60, 0)
    a = aligned_inputs(labels, tables, n_classes=10, test_ids=test_ids)
    b = aligned_inputs(labels, tables, n_classes=10, test_ids=test_ids)
    np.testing.assert_array_equal(a.parties[1].X_overlap, b.parties[1].X_overlap)
    cfg = oneshot.OneShotConfig(ssl_epochs=3, head_epochs=10)
    assert oneshot.run_local(a.server, a.parties, config=cfg).test_accuracy == \
        oneshot.run_local(b.server, b.parties, config=cfg).test_accuracy


def test_missing_files_are_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "oneshot", "--party", "x.csv"]) != 0
    assert "InputDataError: give --server" in capsys.readouterr().err
