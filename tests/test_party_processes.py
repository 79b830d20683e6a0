"""Every role in its own process (``python -m vflcrypto party ...``) over mutual-TLS gRPC.

Results and transcripts (kinds and sizes) must match the in-process ``run_local`` of the
same protocol; frame sizes differ only by the run id's length, by the same constant for
every frame. Failures (a killed party, a wrong certificate) end every other party with a
clear error within the configured timeout and leave no output that looks complete.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import spawn_connected_then_hanging
from vflcrypto.protocols.align import choice

from vflcrypto.runtime.certs import identity_pin, load_identity_key, write_dev_pki
from vflcrypto.runtime.channel import Transcript
from vflcrypto.runtime.partyconfig import render_config_toml

ROOT = Path(__file__).resolve().parents[1]
NAMES = ["active", "passive-0", "passive-1"]
ALL = [*NAMES, "passive-2", "coordinator"]
SMALL_KEYS = ("--key-bits", "512", "--allow-insecure")
# Decrypted residues mod n (``IntVector``: one block, every value as wide as the widest one's two's complement)
# are one byte narrower per value whenever every value of the frame is below 2^(bits-1), which the run's key and
# masks decide (under 2^(bits-9), two bytes narrower: probability <= 2^-8 per value). A residue takes at least 64
# bytes at SMALL_KEYS' 512 bits, so a frame of them differs from the local run's by at most 1/64 of its size.
RESIDUE_REL = 1 / 64


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    write_dev_pki(d, ALL)
    write_dev_pki(d / "rogue", NAMES)
    return d


def identity_pins(pki: Path, names: list[str]) -> dict[str, tuple[str, str]]:
    """name -> (identity pin, identity key path) of the dev PKI's Ed25519 identity keys."""
    out = {}
    for n in names:
        key = load_identity_key(pki / f"{n}.identity.key")
        out[n] = (identity_pin(key.public_key()), str(pki / f"{n}.identity.key"))
    return out


def make_config(d: Path, pki: Path, names: list[str], *, identities: bool = False,
                **network: float) -> Path:
    parties = {n: (n.split("-")[0], f"127.0.0.1:{free_port()}") for n in names}
    net = {"connect_timeout": 10.0, "timeout": 10.0, "linger": 2.0, **network}
    text = render_config_toml(parties, ca=str(pki / "ca.pem"),
                              certs={n: (str(pki / f"{n}.pem"), str(pki / f"{n}.key")) for n in names},
                              network=net, identities=identity_pins(pki, names) if identities else None)
    path = d / "parties.toml"
    path.write_text(text)
    return path


def party(cfg: Path, name: str, *task: str, key: Path | None = None) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "vflcrypto", "party", "--config", str(cfg), "--as", name, "--json"]
    if key is not None:
        cmd += ["--key", str(key)]
    return subprocess.Popen([*cmd, *task], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def finish(procs: dict[str, subprocess.Popen[bytes]], timeout: float = 25) -> dict[str, tuple[int, dict | None, str]]:
    out = {}
    for name, p in procs.items():
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        out[name] = (p.returncode, json.loads(so) if p.returncode == 0 and so.strip() else None,
                     se.decode(errors="replace"))
    return out


def protocol_entries(transcript: list[dict], event: str) -> list[tuple[str, str, str, int]]:
    return [(e["sender"], e["receiver"], e["kind"], e["nbytes"]) for e in transcript
            if e["event"] == event and not e["kind"].startswith("net.")]


def assert_same_transcript(local, records: dict[str, dict], prefix: str = "",
                           rel: float = 0.0, process_only: tuple[str, ...] = ()) -> None:
    """Same kinds in the same order per link and direction, sizes up to one constant.

    ``prefix`` restricts the comparison to one protocol's kinds (e.g. ``"linreg."`` when
    the process run aligned rows first). ``rel``: a frame whose encoding's length depends on its values
    may also differ from the local run's by up to ``rel`` of its size (Paillier ciphertexts are fixed
    width; decrypted residues are not: :data:`RESIDUE_REL`). ``process_only``: kinds only the process
    run sends (``align.offer``: the processes chose their protocol, the local run was told it)."""
    local_sent = [(e.sender, e.receiver, e.kind, e.nbytes) for e in local.sent()
                  if e.kind.startswith(prefix)]
    pairs: list[tuple[tuple, tuple]] = []

    def kept(entries: list) -> list:
        return [e for e in entries if e[2].startswith(prefix) and e[2] not in process_only]

    for name, rec in records.items():
        net_sent = kept(protocol_entries(rec["transcript"], "send"))
        mine = [e for e in local_sent if e[0] == name]
        assert [e[:3] for e in net_sent] == [e[:3] for e in mine], name
        pairs.extend(zip(net_sent, mine, strict=True))
        assert {e[2] for e in kept(protocol_entries(rec["transcript"], "recv"))} == \
            {e[2] for e in local_sent if e[1] == name}
    deltas = [n[3] - m[3] for n, m in pairs]
    if rel == 0:
        assert len(set(deltas)) == 1, f"frame sizes differ by more than the run id: {set(deltas)}"
        return
    base = max(set(deltas), key=deltas.count)  # the run id's share: most frames carry no ciphertext
    off = [(n[2], n[3], d) for (n, _), d in zip(pairs, deltas, strict=True)
           if abs(d - base) > rel * n[3]]
    assert not off, f"frame sizes differ by more than the run id (+{base}) and ciphertext length: {off[:5]}"


def write_ids(path: Path, ids: list[str]) -> None:
    path.write_text("id,v\n" + "".join(f"{i},{k}\n" for k, i in enumerate(ids)))


def test_residue_frames_vary_within_residue_rel() -> None:
    """RESIDUE_REL's premise: a frame of k residues mod a 512-bit n is k bytes shorter when every residue
    is below 2^511, and k bytes are at most RESIDUE_REL of it (a linreg return of 2 features and the intercept:
    3 bytes in a frame of under 300)."""
    from vflcrypto.protocols import linreg

    from vflcrypto.runtime.wire import IntVector, encode_frame

    for k in (1, 2, 3, 60):
        wide, narrow = (len(encode_frame(linreg.GradientReturn(IntVector([v] * k)), seq=1000, run_id="r" * 16))
                        for v in (2**511, 2**511 - 1))
        assert wide - narrow == k <= RESIDUE_REL * narrow


def test_two_party_alignment_in_separate_processes(tmp_path: Path, pki: Path) -> None:
    from vflcrypto.protocols import align as al

    rng = np.random.default_rng(3)
    a_ids = [f"user{i}" for i in rng.choice(3000, 800, replace=False)]
    b_ids = [f"user{i}" for i in rng.choice(3000, 900, replace=False)]
    write_ids(tmp_path / "a.csv", a_ids)
    write_ids(tmp_path / "b.csv", b_ids)
    cfg = make_config(tmp_path, pki, ["active", "passive-0"])
    procs = {n: party(cfg, n, "align", "--data", str(tmp_path / f), "--id-column", "id",
                      "--out", str(tmp_path / f"{n}.aligned.csv"))
             for n, f in (("active", "a.csv"), ("passive-0", "b.csv"))}
    res = finish(procs)
    for n, (rc, _, err) in res.items():
        assert rc == 0, f"{n}: {err}"
    recs = {n: r[1] for n, r in res.items()}
    assert recs["active"]["run_id"] == recs["passive-0"]["run_id"]
    side = json.loads((tmp_path / "active.aligned.csv.run.json").read_text())
    assert side["run_id"] == recs["active"]["run_id"] and side["status"] == "complete"

    # the default, --protocol auto: an align.offer each way, then ECDH for 800 + 900 IDs
    for rec in recs.values():
        assert rec["summary"]["protocol"] == "ecdh"
        assert [e[2] for e in protocol_entries(rec["transcript"], "send")][:2] == ["align.offer", "align.hello"]
    local = al.run_local(a_ids, b_ids)
    expected = {"active": local.results["active"], "passive-0": local.results["passive"]}
    for n in recs:
        assert recs[n]["summary"]["intersection"] == expected[n].size
    # the canonical order is keyed by fresh secrets, so compare the aligned IDs row by row
    a_rows = (tmp_path / "active.aligned.csv").read_text().splitlines()[1:]
    b_rows = (tmp_path / "passive-0.aligned.csv").read_text().splitlines()[1:]
    assert [r.split(",")[0] for r in a_rows] == [r.split(",")[0] for r in b_rows]
    assert sorted(r.split(",")[0] for r in a_rows) == sorted(set(a_ids) & set(b_ids))
    # the local run names its passive party "passive"; map it to the process run's name
    local_t = local.transcript
    renamed = type(local_t)()
    for e in local_t.entries():
        renamed._entries.append(type(e)(*[("passive-0" if v == "passive" and k in ("sender", "receiver")
                                           else v) for k, v in e.__dict__.items()]))
    assert_same_transcript(renamed, recs, process_only=("align.offer",))


def test_the_duplicates_choices_the_help_offers_work(tmp_path: Path, pki: Path) -> None:
    """--duplicates error names both lines and the flag; --duplicates first keeps the first occurrence."""
    write_ids(tmp_path / "a.csv", ["u1", "u2", "u1", "u3"])
    write_ids(tmp_path / "b.csv", ["u1", "u3", "u4"])
    for mode in ("error", "first"):
        cfg = make_config(tmp_path, pki, ["active", "passive-0"])
        procs = {n: party(cfg, n, "align", "--data", str(tmp_path / f), "--id-column", "id", "--duplicates", mode,
                          "--out", str(tmp_path / f"{n}.{mode}.csv"))
                 for n, f in (("active", "a.csv"), ("passive-0", "b.csv"))}
        res = finish(procs)
        if mode == "error":
            rc, _, err = res["active"]
            assert rc != 0 and "line 4: duplicate ID (first seen at line 2)" in err and "--duplicates first" in err
            continue
        assert all(rc == 0 for rc, _, _ in res.values()), res
        assert res["active"][1]["summary"]["intersection"] == 2


def test_three_party_alignment_in_separate_processes(tmp_path: Path, pki: Path) -> None:
    from vflcrypto.protocols import align as al

    rng = np.random.default_rng(5)
    sets = [[f"u{i}" for i in rng.choice(600, 300, replace=False)] for _ in NAMES]
    for n, ids in zip(NAMES, sets, strict=True):
        write_ids(tmp_path / f"{n}.csv", ids)
    cfg = make_config(tmp_path, pki, NAMES)
    procs = {n: party(cfg, n, "align", "--data", str(tmp_path / f"{n}.csv"), "--id-column", "id",
                      "--out", str(tmp_path / f"{n}.out.csv")) for n in NAMES}
    res = finish(procs)
    for n, (rc, _, err) in res.items():
        assert rc == 0, f"{n}: {err}"
    local = al.run_multiparty_local(sets)
    common = set(sets[0]) & set(sets[1]) & set(sets[2])
    cols = [[r.split(",")[0] for r in (tmp_path / f"{n}.out.csv").read_text().splitlines()[1:]]
            for n in NAMES]
    assert cols[0] == cols[1] == cols[2] and set(cols[0]) == common
    assert local.results["active"].size == len(common)
    assert_same_transcript(local.transcript, {n: r[1] for n, r in res.items()})


def _logreg_files(tmp_path: Path) -> tuple[list[np.ndarray], np.ndarray, list[str]]:
    from vflcrypto.protocols import logreg as lr

    split = lr.titanic_parties()
    ids = list(split.ids_train)
    (tmp_path / "active.csv").write_text(
        "id,y\n" + "".join(f"{i},{int(v)}\n" for i, v in zip(ids, split.y_train, strict=True)))
    for k, X in enumerate(split.X_train[:2]):
        cols = ",".join(f"c{j}" for j in range(X.shape[1]))
        (tmp_path / f"passive-{k}.csv").write_text(
            f"id,{cols}\n" + "".join(i + "," + ",".join(repr(float(v)) for v in row) + "\n"
                                     for i, row in zip(ids, X, strict=True)))
    return list(split.X_train[:2]), split.y_train, ids


@pytest.mark.slow
def test_logistic_regression_in_separate_processes(tmp_path: Path, pki: Path) -> None:
    from vflcrypto.protocols import logreg as lr

    X, y, ids = _logreg_files(tmp_path)
    cfg = make_config(tmp_path, pki, NAMES)
    procs = {}
    for n in NAMES:
        extra = ["--label", "y"] if n == "active" else []
        procs[n] = party(cfg, n, "train", "logreg", "--plain", "--preprocess", "none",
                         "--data", str(tmp_path / f"{n}.csv"), "--test-fraction", "0",
                         "--id-column", "id", "--steps", "5", "--aligned", *extra,
                         "--out", str(tmp_path / f"{n}.npz"))
    res = finish(procs)
    for n, (rc, _, err) in res.items():
        assert rc == 0, f"{n}: {err}"
    local = lr.run_local(X, y, steps=5, ids_train=[ids, ids, ids])
    recs = {n: r[1] for n, r in res.items()}
    np.testing.assert_allclose(recs["active"]["summary"]["loss_history"], local.active.loss_history,
                               rtol=1e-12)
    for k in range(2):
        np.testing.assert_allclose(recs[f"passive-{k}"]["summary"]["weights"],
                                   local.passives[f"passive-{k}"].weights, rtol=1e-9, atol=1e-12)
    assert_same_transcript(local.transcript, recs)


def test_party_processes_draw_progress_on_stderr_when_asked_and_never_in_the_json(tmp_path: Path,
                                                                                  pki: Path) -> None:
    _logreg_files(tmp_path)
    cfg = make_config(tmp_path, pki, NAMES)
    procs = {}
    for n in NAMES:
        extra = ["--label", "y"] if n == "active" else []
        flag = ["--progress"] if n != "passive-1" else []  # passive-1: --json, no flag: silent
        procs[n] = party(cfg, n, "train", "logreg", "--plain", "--data", str(tmp_path / f"{n}.csv"),
                         "--test-fraction", "0", "--id-column", "id", "--steps", "5", "--aligned", *extra,
                         "--out", str(tmp_path / f"{n}.npz"), *flag)
    res = finish(procs)
    for n, (rc, record, err) in res.items():
        assert rc == 0 and record is not None and record["status"] == "complete", f"{n}: {err}"  # stdout: JSON
        assert ("logreg" in err and "5/5" in err) == (n != "passive-1"), f"{n}: {err}"


def test_killed_party_stops_the_others(tmp_path: Path, pki: Path) -> None:
    _logreg_files(tmp_path)
    cfg = make_config(tmp_path, pki, NAMES, timeout=8.0)
    # passive-1 is a real party process that connects and then hangs (mid-protocol)
    victim = spawn_connected_then_hanging(cfg, "passive-1", "train-logreg", 120)
    procs = {n: party(cfg, n, "train", "logreg", "--plain", "--preprocess", "none",
                      "--data", str(tmp_path / f"{n}.csv"),
                      "--id-column", "id", "--aligned", *(["--label", "y"] if n == "active" else []),
                      "--out", str(tmp_path / f"{n}.npz")) for n in NAMES[:2]}
    try:
        assert victim.stdout is not None and victim.stdout.readline().strip() == b"connected"
        time.sleep(0.5)
        os.kill(victim.pid, signal.SIGKILL)
        t0 = time.monotonic()
        res = finish(procs, timeout=20)
        assert time.monotonic() - t0 < 12
    finally:
        victim.kill()
        victim.wait()
    rc, _, err = res["active"]
    assert rc == 2 and "PeerDisconnectedError" in err and "passive-1" in err, err
    rc, _, err = res["passive-0"]
    assert rc == 2 and "PeerDisconnectedError" in err and "active" in err, err
    for n in NAMES:
        assert not (tmp_path / f"{n}.npz").exists()
        assert not (tmp_path / f"{n}.npz.run.json").exists()


def test_wrong_certificate_is_refused(tmp_path: Path, pki: Path) -> None:
    cfg = make_config(tmp_path, pki, ["active", "passive-0"], connect_timeout=4.0)
    write_ids(tmp_path / "a.csv", ["x", "y"])
    rogue_cfg = tmp_path / "rogue.toml"
    rogue_cfg.write_text(cfg.read_text().replace(str(pki / "passive-0."), str(pki / "rogue" / "passive-0.")))
    procs = {
        "active": party(cfg, "active", "align", "--data", str(tmp_path / "a.csv"), "--id-column", "id",
                        "--out", str(tmp_path / "a.out.csv")),
        "passive-0": party(rogue_cfg, "passive-0", "align", "--data", str(tmp_path / "a.csv"),
                           "--id-column", "id", "--out", str(tmp_path / "b.out.csv")),
    }
    res = finish(procs)
    rc, _, err = res["active"]
    assert rc == 2 and "PeerTimeoutError" in err and "passive-0" in err and "did not connect" in err, err
    rc, _, err = res["passive-0"]
    assert rc == 2 and "active closed the link right after the handshake: it rejected passive-0's certificate" in err, \
        err  # told why, not "connection refused"
    assert not (tmp_path / "a.out.csv").exists()


def write_table(path: Path, ids: list[str], cols: list[str], X: np.ndarray,
                label: np.ndarray | None = None) -> None:
    head = ["id", *cols] + (["y"] if label is not None else [])
    lines = [",".join(head)]
    for k, i in enumerate(ids):
        row = [i, *(repr(float(v)) for v in X[k])]
        if label is not None:
            row.append(repr(float(label[k])))
        lines.append(",".join(row))
    path.write_text("\n".join(lines) + "\n")


def check_ok(res: dict[str, tuple[int, dict | None, str]]) -> dict[str, dict]:
    for n, (rc, _, err) in res.items():
        assert rc == 0, f"{n}: {err}"
    recs = {n: r[1] for n, r in res.items()}
    assert len({r["run_id"] for r in recs.values()}) == 1
    return recs


def test_linear_regression_three_processes_with_alignment(tmp_path: Path, pki: Path) -> None:
    """active, passive-0 and the coordinator each in a process; rows aligned by PSI first
    (each party's file lists its own IDs, shuffled, with rows the others lack)."""
    from vflcrypto.protocols import linreg as linreg

    from vflcrypto.data.tables import PartyTable

    active, (passive,) = linreg.synthetic_split(n_rows=60, p_active=2, p_passive=(2,))
    rng = np.random.default_rng(1)
    ids = list(active.ids)
    a_rows = rng.permutation(60)
    p_rows = rng.permutation(60)
    extra = [f"x{i}" for i in range(5)]
    write_table(tmp_path / "active.csv", [ids[i] for i in a_rows] + extra, ["b0", "b1"],
                np.vstack([active.X[a_rows], np.zeros((5, 2))]),
                np.concatenate([active.label[a_rows], np.zeros(5)]))
    write_table(tmp_path / "passive-0.csv", [ids[i] for i in p_rows], ["a0", "a1"], passive.X[p_rows])
    names = ["active", "passive-0", "coordinator"]
    cfg = make_config(tmp_path, pki, names, timeout=20.0)
    common = ["--epochs", "4", "--tol", "0", *SMALL_KEYS]
    procs = {}
    for n in names:
        data = [] if n == "coordinator" else ["--data", str(tmp_path / f"{n}.csv"), "--id-column", "id"]
        lab = ["--label", "y"] if n == "active" else []
        procs[n] = party(cfg, n, "train", "linreg", *data, *lab, *common,
                         "--out", str(tmp_path / f"{n}.npz"))
    recs = check_ok(finish(procs, timeout=60))
    local = linreg.run_local(
        PartyTable(active.ids, ("b0", "b1"), active.X, active.label, "y"),
        [PartyTable(passive.ids, ("a0", "a1"), passive.X)],
        config=linreg.LinRegConfig(epochs=4, tol=None, key_bits=512, momentum=0.9,
                                   preprocess="standardize", fit_intercept=True),
        allow_insecure=True)
    got_a = linreg.PartyModel.load(tmp_path / "active.npz")
    got_p = linreg.PartyModel.load(tmp_path / "passive-0.npz")
    np.testing.assert_allclose(got_a.weights, local.active.model.weights, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(got_p.weights, local.passives[0].model.weights, rtol=1e-7, atol=1e-9)
    # C's losses are those of the label B trains on (standardized: C never learns the scale)
    np.testing.assert_allclose(recs["coordinator"]["summary"]["losses"], local.coordinator.losses, rtol=1e-7)
    metrics = json.loads((tmp_path / "active.npz.metrics.json").read_text())
    assert metrics["run_id"] == recs["active"]["run_id"] and metrics["rows"]["train"] == 60
    pred, pred_transcript = linreg.predict_local(
        local.models, [PartyTable(active.ids, ("b0", "b1"), active.X, active.label, "y"),
                       PartyTable(passive.ids, ("a0", "a1"), passive.X)],
        key_bits=512, allow_insecure=True)
    assert metrics["train_rmse"] == pytest.approx(float(np.sqrt(np.mean((pred - active.label) ** 2))),
                                            rel=1e-6)
    for n in names:
        assert json.loads((tmp_path / f"{n}.npz.run.json").read_text())["status"] == "complete"
    # training, then the secure prediction of the metrics, exactly as run_local + predict_local
    both = Transcript()
    both.merge(local.transcript)
    both.merge(pred_transcript)
    assert_same_transcript(both, recs, prefix="linreg.", rel=RESIDUE_REL)
    assert not [e for e in protocol_entries(recs["coordinator"]["transcript"], "recv")
                if e[2].startswith("align.")]


def test_ckks_linear_regression_on_the_bundled_example_in_three_processes(
        tmp_path: Path, pki: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's bank/shop run with --scheme ckks as three network parties: the label
    (credit scores ~700) is scaled inside the protocol, and the RMSE equals the in-process run's within 0.1
    points. The coordinator's returns are flooded afresh in each run and the noise carries through the ten
    epochs: six in-process runs gave RMSEs of 28.555-28.572, and one CI run's network and in-process RMSEs
    differed by 0.029 (1.03e-3 relative, beyond the 1e-3 this test used to ask). Ten epochs: CKKS at
    N = 16384 costs ~1.3 s an epoch in each of the two runs."""
    from vflcrypto.cli import main

    assert main(["examples", str(tmp_path)]) == 0
    names = ["active", "passive-0", "coordinator"]
    cfg = make_config(tmp_path, pki, names, timeout=60.0)
    common = ["--scheme", "ckks", "--epochs", "10", "--test-fraction", "0.2"]
    files = {"active": ["--data", str(tmp_path / "bank.csv"), "--id-column", "id", "--label", "credit_score"],
             "passive-0": ["--data", str(tmp_path / "shop.csv"), "--id-column", "id"], "coordinator": []}
    procs = {n: party(cfg, n, "train", "linreg", *files[n], *common, "--out", str(tmp_path / f"{n}.npz"))
             for n in names}
    check_ok(finish(procs, timeout=180))
    net = json.loads((tmp_path / "active.npz.metrics.json").read_text())
    capsys.readouterr()
    assert main(["train", "linreg", "--active", str(tmp_path / "bank.csv"), "--passive", str(tmp_path / "shop.csv"),
                 "--id-column", "id", "--label", "credit_score", *common, "--json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert net["rows"] == local["rows"] and 15 < net["test_rmse"] < 40
    assert net["test_rmse"] == pytest.approx(local["test_rmse"], abs=0.1)


def test_a_party_with_different_training_flags_refuses_the_plan(tmp_path: Path, pki: Path) -> None:
    """passive-0 runs with --epochs 5 while the active party plans 4: passive-0 refuses the plan,
    naming the difference, and every party stops with a non-zero exit."""
    from vflcrypto.protocols import linreg as linreg

    active, (passive,) = linreg.synthetic_split(n_rows=30, p_active=2, p_passive=(2,))
    write_table(tmp_path / "active.csv", list(active.ids), ["b0", "b1"], active.X, active.label)
    write_table(tmp_path / "passive-0.csv", list(passive.ids), ["a0", "a1"], passive.X)
    names = ["active", "passive-0", "coordinator"]
    cfg = make_config(tmp_path, pki, names, timeout=20.0)
    procs = {}
    for n in names:
        data = [] if n == "coordinator" else ["--data", str(tmp_path / f"{n}.csv"), "--id-column", "id", "--aligned"]
        lab = ["--label", "y"] if n == "active" else []
        epochs = "5" if n == "passive-0" else "4"
        procs[n] = party(cfg, n, "train", "linreg", *data, *lab, "--epochs", epochs, *SMALL_KEYS,
                         "--out", str(tmp_path / f"{n}.npz"))
    res = finish(procs, timeout=60)
    assert all(rc != 0 for rc, _, _ in res.values())
    err = res["passive-0"][2]
    assert "training plan differs" in err and "epochs 4 (here 5)" in err and "Traceback" not in err
    assert not (tmp_path / "passive-0.npz").exists()


@pytest.mark.parametrize(("task", "flag", "active_value", "passive_value", "named"), [
    ("secureboost", "--trees", "2", "3", "trees 2 (here 3)"),
    ("secureboost", "--subsample", "0.5", "1.0", "subsample 0.5 (here 1.0)"),
    ("secureboost", "--dp-epsilon", "1", "2", "dp-epsilon 1.0 (here 2.0)"),
    ("logreg", "--steps", "2", "3", "steps 2 (here 3)"),
    ("logreg", "--label-dp", "1", "2", "label-DP epsilon 1.0 (here 2.0)"),
])
def test_secureboost_and_logreg_parties_refuse_a_different_plan(tmp_path: Path, pki: Path, task: str, flag: str,
                                                               active_value: str, passive_value: str,
                                                               named: str) -> None:
    ids = [f"r{i}" for i in range(40)]
    rng = np.random.default_rng(0)
    write_table(tmp_path / "active.csv", ids, ["b0"], rng.normal(size=(40, 1)), (np.arange(40) % 2).astype(float))
    write_table(tmp_path / "passive-0.csv", ids, ["a0", "a1"], rng.normal(size=(40, 2)))
    cfg = make_config(tmp_path, pki, ["active", "passive-0"], timeout=20.0)
    extra = [*SMALL_KEYS, "--depth", "2", "--max-bin", "8"] if task == "secureboost" else ["--plain"]
    procs = {n: party(cfg, n, "train", task, "--data", str(tmp_path / f"{n}.csv"), "--id-column", "id", "--aligned",
                      *(["--label", "y"] if n == "active" else []), flag,
                      active_value if n == "active" else passive_value, *extra, "--out", str(tmp_path / f"{n}.npz"))
             for n in ("active", "passive-0")}
    res = finish(procs, timeout=60)
    assert all(rc != 0 for rc, _, _ in res.values())
    err = res["passive-0"][2]
    assert "training plan differs" in err and named in err and "Traceback" not in err
    assert not (tmp_path / "passive-0.npz").exists()


def test_a_different_test_fraction_is_refused_as_such_before_any_work(tmp_path: Path, pki: Path) -> None:
    """The data parties' --test-fraction is in the hello's shared settings: each data party names the
    difference (not "not aligned" mid-training); the coordinator, which holds no data, names its peers'."""
    ids = [f"r{i}" for i in range(30)]
    rng = np.random.default_rng(0)
    write_table(tmp_path / "active.csv", ids, ["b0"], rng.normal(size=(30, 1)), rng.normal(size=30))
    write_table(tmp_path / "passive-0.csv", ids, ["a0"], rng.normal(size=(30, 1)))
    names = ["active", "passive-0", "coordinator"]
    cfg = make_config(tmp_path, pki, names, timeout=20.0)
    fraction = {"active": ["--test-fraction", "0.2"], "passive-0": ["--test-fraction", "0.5"], "coordinator": []}
    procs = {n: party(cfg, n, "train", "linreg", *([] if n == "coordinator" else
                                                   ["--data", str(tmp_path / f"{n}.csv"), "--id-column", "id"]),
                      *(["--label", "y"] if n == "active" else []), *fraction[n], *SMALL_KEYS,
                      "--out", str(tmp_path / f"{n}.npz")) for n in names}
    res = finish(procs, timeout=60)
    assert all(rc != 0 for rc, _, _ in res.values())
    for me, here, there in (("active", "0.2", "0.5"), ("passive-0", "0.5", "0.2")):
        err = res[me][2]
        assert f"--test-fraction {there} (here {here})" in err and "not aligned" not in err, res
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err  # no gRPC log lines either
    assert "--test-fraction 0.2 at active, 0.5 at passive-0" in res["coordinator"][2]


def test_woe_two_processes_with_psi_and_returned_results(tmp_path: Path, pki: Path) -> None:
    """`vflcrypto party ... train woe`: PSI over the link, then the same IVs as in-process."""
    from vflcrypto.protocols import woe

    y, Xa, ca, Xp, cp = woe.example(300)
    ids = [f"r{i}" for i in range(300)]
    write_table(tmp_path / "active.csv", ids, list(ca), Xa, y)
    order = np.random.default_rng(5).permutation(300)[:250]  # the shop knows 250 of the bank's customers
    write_table(tmp_path / "passive-0.csv", [ids[i] for i in order], list(cp), Xp[order])
    cfg = make_config(tmp_path, pki, ["active", "passive-0"], timeout=20.0)
    procs = {n: party(cfg, n, "train", "woe", "--data", str(tmp_path / f"{n}.csv"), "--id-column", "id",
                      *(["--label", "y"] if n == "active" else []), "--return-results", *SMALL_KEYS,
                      "--out", str(tmp_path / f"{n}.json")) for n in ("active", "passive-0")}
    recs = check_ok(finish(procs, timeout=60))
    common = sorted(order.tolist(), key=lambda i: ids[i])  # both sides sort the common rows by ID
    local = woe.run_local(y[common], Xa[common], [Xp[common]], key_bits=512, allow_insecure=True,
                          params=woe.WoeParams(return_results=True), active_columns=ca, passive_columns=[cp])
    shop = json.loads((tmp_path / "passive-0.json").read_text())
    want = local.passive["passive-0"].iv
    assert want is not None
    for c, iv in zip(cp, want, strict=True):
        assert shop["iv"][c] == pytest.approx(iv, abs=1e-6)  # the run record rounds to 6 decimals
    assert recs["active"]["summary"]["rows"] == 250
    assert "woe.counts" in {e[2] for e in protocol_entries(recs["active"]["transcript"], "recv")}


def test_pearson_two_processes_reveal_active(tmp_path: Path, pki: Path) -> None:
    """`vflcrypto party ... train pearson --reveal active`: the bank gets numpy's matrix, the shop nothing."""
    from vflcrypto.protocols import pearson

    Xa, ca, Xp, cp = pearson.example(150)
    ids = [f"r{i}" for i in range(150)]
    write_table(tmp_path / "active.csv", ids, list(ca), Xa)
    write_table(tmp_path / "passive-0.csv", ids, list(cp), Xp)
    cfg = make_config(tmp_path, pki, ["active", "passive-0"], timeout=20.0)
    procs = {n: party(cfg, n, "train", "pearson", "--data", str(tmp_path / f"{n}.csv"), "--id-column", "id",
                      "--aligned", "--reveal", "active", *SMALL_KEYS, "--out", str(tmp_path / f"{n}.json"))
             for n in ("active", "passive-0")}
    recs = check_ok(finish(procs, timeout=60))
    ref = np.corrcoef(Xa.T, Xp.T)[:3, 3:]
    got = recs["active"]["summary"]["correlations"]["passive-0"]
    for j, a in enumerate(ca):
        assert [got[a][f"#{k}"] for k in range(3)] == pytest.approx(ref[j].tolist(), abs=1e-6)
    assert recs["passive-0"]["summary"]["correlations"] is None


@pytest.mark.parametrize("test_fraction", ["0", "0.25"])
def test_poisson_three_processes_equal_the_in_process_run(tmp_path: Path, pki: Path, test_fraction: str) -> None:
    """The weights and losses of the in-process run on the training rows of the public split; with held-out rows
    the active party's test deviance is scikit-learn's of the same weights on them."""
    from sklearn.metrics import mean_poisson_deviance
    from vflcrypto.protocols import poisson

    from vflcrypto.data.tables import train_test_split

    Xa, y, ca, Xp, cp = poisson.example(120)
    ids = [f"r{i}" for i in range(120)]
    write_table(tmp_path / "active.csv", ids, list(ca), Xa, y)
    write_table(tmp_path / "passive-0.csv", ids, list(cp), Xp)
    names = ["active", "passive-0", "coordinator"]
    cfg = make_config(tmp_path, pki, names, timeout=20.0)
    procs = {n: party(cfg, n, "train", "poisson", *([] if n == "coordinator" else
                                                   ["--data", str(tmp_path / f"{n}.csv"), "--id-column", "id"]),
                      *(["--label", "y"] if n == "active" else []), "--aligned", "--epochs", "4", *SMALL_KEYS,
                      "--test-fraction", test_fraction, "--out", str(tmp_path / f"{n}.json")) for n in names}
    recs = check_ok(finish(procs, timeout=60))
    tr, te = train_test_split(120, float(test_fraction), seed=0)
    local = poisson.run_local(Xa[tr], y[tr], Xp[tr], params=poisson.PoissonParams(epochs=4), key_bits=512,
                              allow_insecure=True)
    got = recs["passive-0"]["summary"]["weights"]
    assert [got[c] for c in cp] == pytest.approx(local.passive.tolist(), abs=1e-9)
    assert recs["coordinator"]["summary"]["losses"] == pytest.approx(local.losses, abs=1e-7)
    summary = recs["active"]["summary"]
    assert summary["rows"] == len(tr) and summary.get("test_rows", 0) == len(te)
    if len(te):
        eta = ((Xa[te] - Xa[tr].mean(axis=0)) / Xa[tr].std(axis=0)) @ local.active[:-1] + local.active[-1] + \
            ((Xp[te] - Xp[tr].mean(axis=0)) / Xp[tr].std(axis=0)) @ local.passive
        assert summary["test_deviance"] == pytest.approx(mean_poisson_deviance(y[te], np.exp(eta)), rel=1e-7)


def test_sshelr_two_processes_equal_the_plaintext_descent(tmp_path: Path, pki: Path) -> None:
    """Two processes, no coordinator: each learns only its own weights, those of the Taylor descent on the
    training rows of the public split; the active party's test metrics are those of the same weights on the
    held-out rows (scikit-learn's, on the plaintext logits)."""
    from sklearn.metrics import roc_auc_score
    from vflcrypto.protocols import sshelr

    from vflcrypto.data.tables import train_test_split

    Xa, y, ca, Xp, cp = sshelr.example(100)
    ids = [f"r{i}" for i in range(100)]
    write_table(tmp_path / "active.csv", ids, list(ca), Xa, y)
    write_table(tmp_path / "passive-0.csv", ids, list(cp), Xp)
    cfg = make_config(tmp_path, pki, ["active", "passive-0"], timeout=20.0)
    procs = {n: party(cfg, n, "train", "sshelr", "--data", str(tmp_path / f"{n}.csv"), "--id-column", "id",
                      *(["--label", "y"] if n == "active" else []), "--aligned", "--epochs", "3", *SMALL_KEYS,
                      "--test-fraction", "0.25", "--out", str(tmp_path / f"{n}.json")) for n in ("active", "passive-0")}
    recs = check_ok(finish(procs, timeout=60))
    tr, te = train_test_split(100, 0.25, seed=0)
    Za, yy = sshelr.prepare_active(Xa[tr], y[tr])
    wa, wp = sshelr.plaintext_fit(Za, yy, sshelr.prepare_passive(Xp[tr]), sshelr.SSHELRParams(epochs=3))
    got_a, got_p = recs["active"]["summary"]["weights"], recs["passive-0"]["summary"]["weights"]
    assert [got_a[c] for c in [*ca, "(intercept)"]] == pytest.approx(wa.tolist(), abs=1e-8)
    assert [got_p[c] for c in cp] == pytest.approx(wp.tolist(), abs=1e-8)
    z = ((Xa[te] - Xa[tr].mean(axis=0)) / Xa[tr].std(axis=0)) @ wa[:-1] + wa[-1] + \
        ((Xp[te] - Xp[tr].mean(axis=0)) / Xp[tr].std(axis=0)) @ wp
    summary = recs["active"]["summary"]
    assert summary["rows"] == 75 and summary["test_rows"] == 25 == recs["passive-0"]["summary"]["test_rows"]
    assert summary["test_auc"] == pytest.approx(roc_auc_score(y[te], z), abs=1e-9)
    assert summary["test_accuracy"] == pytest.approx(float(np.mean((z > 0) == (y[te] == 1))))


@pytest.mark.parametrize("scheme", ["paillier", "ou", None])
def test_secureboost_two_processes(tmp_path: Path, pki: Path, scheme: str | None) -> None:
    """Each party in its own process over TLS, under Paillier, under OU and with no --scheme at either party
    (SecureBoost's default, ou-2048: the key and the vectors cross the wire through their codecs); the model
    equals run_local's."""
    from vflcrypto.protocols import secureboost as sb

    Xa, y, ca, Xp, cp = sb.example(n=120)
    ids = [f"r{i}" for i in range(120)]
    write_table(tmp_path / "active.csv", ids, list(ca), Xa, y)
    write_table(tmp_path / "passive-0.csv", ids, list(cp), Xp)
    cfg = make_config(tmp_path, pki, ["active", "passive-0"], timeout=20.0)
    args = ["--trees", "2", "--depth", "2", "--max-bin", "8", "--aligned", *(["--scheme", scheme] if scheme else []),
            *SMALL_KEYS]
    procs = {n: party(cfg, n, "train", "secureboost", "--data", str(tmp_path / f"{n}.csv"),
                      "--id-column", "id", *(["--label", "y"] if n == "active" else []), *args,
                      "--out", str(tmp_path / f"{n}.npz")) for n in ("active", "passive-0")}
    recs = check_ok(finish(procs, timeout=60))
    params = sb.BoostParams(n_trees=2, max_depth=2, max_bin=8)
    local = sb.run_local(Xa, y, [Xp], params=params, key_bits=int(SMALL_KEYS[1]), allow_insecure=True, ids=ids,
                         active_columns=ca, passive_columns=[cp], scheme=scheme or sb.DEFAULT_SCHEME)
    am = sb.ActiveModel.load(tmp_path / "active.npz")
    pm = sb.PassiveModel.load(tmp_path / "passive-0.npz")
    lm = local.active.model
    assert am.model_id == pm.model_id == recs["passive-0"]["summary"]["model_id"]
    for k in ("offsets", "kind", "feature", "bin", "left", "right"):
        np.testing.assert_array_equal(getattr(am, k), getattr(lm, k), err_msg=k)
    np.testing.assert_allclose(am.value, lm.value, rtol=1e-9, atol=1e-12)
    pred = sb.predict_local(am, Xa, [(pm, Xp)])
    np.testing.assert_allclose(pred, local.active.train_predictions(), rtol=1e-9)
    metrics = json.loads((tmp_path / "active.npz.metrics.json").read_text())
    from vflcrypto.ml.metrics import roc_auc
    assert metrics["train_auc"] == pytest.approx(roc_auc(y, local.active.train_predictions()))
    assert metrics["mode"] == f"{scheme or 'ou'}-{SMALL_KEYS[1]}"
    assert_same_transcript(local.transcript, recs, rel=0.01)


def test_secureboost_options_over_the_network(tmp_path: Path, pki: Path) -> None:
    """The training options as party processes: sample weights from the active file's column, subsampling,
    column sampling and early stopping on the validation split every party routes; the model equals run_local's
    and each party reports the importance of its own features."""
    from vflcrypto.protocols import secureboost as sb

    Xa, y, ca, Xp, cp = sb.example(n=160)
    w = np.random.default_rng(4).uniform(0.5, 2.0, size=160)  # example weights, not a secret
    ids = [f"r{i}" for i in range(160)]
    write_table(tmp_path / "active.csv", ids, [*ca, "w"], np.column_stack([Xa, w]), y)
    write_table(tmp_path / "passive-0.csv", ids, list(cp), Xp)
    cfg = make_config(tmp_path, pki, ["active", "passive-0"], timeout=20.0)
    args = ["--trees", "8", "--depth", "2", "--max-bin", "8", "--lr", "0.8", "--aligned", "--subsample", "0.8",
            "--colsample-bytree", "0.7", "--validation-fraction", "0.3", "--early-stopping-rounds", "2",
            "--weight-column", "w", *SMALL_KEYS]
    procs = {n: party(cfg, n, "train", "secureboost", "--data", str(tmp_path / f"{n}.csv"),
                      "--id-column", "id", *(["--label", "y"] if n == "active" else []), *args,
                      "--out", str(tmp_path / f"{n}.npz")) for n in ("active", "passive-0")}
    recs = check_ok(finish(procs, timeout=60))
    params = sb.BoostParams(n_trees=8, max_depth=2, max_bin=8, learning_rate=0.8, subsample=0.8,
                            colsample_bytree=0.7, validation_fraction=0.3, early_stopping_rounds=2)
    local = sb.run_local(Xa, y, [Xp], params=params, plaintext=True, ids=ids, active_columns=ca,
                         passive_columns=[cp], weights=w)
    am = sb.ActiveModel.load(tmp_path / "active.npz")
    lm = local.active.model
    for k in ("offsets", "kind", "feature", "bin", "left", "right"):
        np.testing.assert_array_equal(getattr(am, k), getattr(lm, k), err_msg=k)
    np.testing.assert_allclose(am.value, lm.value, rtol=1e-9, atol=1e-12)
    assert am.best_iteration == lm.best_iteration and am.columns == ca  # the weight column is no feature
    metrics = json.loads((tmp_path / "active.npz.metrics.json").read_text())
    assert metrics["rounds_trained"] == len(local.active.eval_history)
    assert metrics["importance"] == json.loads(json.dumps(lm.importance()))
    assert recs["passive-0"]["summary"]["importance"] == local.passive["passive-0"].model.importance()


def test_secureboost_label_defences_over_the_network(tmp_path: Path, pki: Path) -> None:
    """--dp-epsilon and --active-only-trees as party processes: both parties account the same plan, report it in
    their summaries and model files, and the passive party takes no instance space of the first round."""
    from vflcrypto.protocols import secureboost as sb

    Xa, y, ca, Xp, cp = sb.example(n=120)
    ids = [f"r{i}" for i in range(120)]
    write_table(tmp_path / "active.csv", ids, list(ca), Xa, y)
    write_table(tmp_path / "passive-0.csv", ids, list(cp), Xp)
    cfg = make_config(tmp_path, pki, ["active", "passive-0"], timeout=20.0)
    args = ["--trees", "3", "--depth", "2", "--max-bin", "8", "--aligned", "--dp-epsilon", "4", "--active-only-trees",
            "1", *SMALL_KEYS]
    procs = {n: party(cfg, n, "train", "secureboost", "--data", str(tmp_path / f"{n}.csv"),
                      "--id-column", "id", *(["--label", "y"] if n == "active" else []), *args,
                      "--out", str(tmp_path / f"{n}.npz")) for n in ("active", "passive-0")}
    recs = check_ok(finish(procs, timeout=60))
    privacy = recs["passive-0"]["summary"]["privacy"]
    assert privacy == recs["active"]["summary"]["privacy"]
    assert 4 - 1e-3 < privacy["hist-gauss"]["epsilon"] <= 4 and privacy["active-only"]["rounds"] == 1
    am, pm = sb.ActiveModel.load(tmp_path / "active.npz"), sb.PassiveModel.load(tmp_path / "passive-0.npz")
    assert am.privacy == pm.privacy == json.loads(json.dumps(privacy))
    assert not (am.kind[am.offsets[0]:am.offsets[1]] == 2).any()  # the first round: the active party's features


def test_secure_logistic_regression_four_processes(tmp_path: Path, pki: Path) -> None:
    """--secure: three feature parties agree on pairwise masks with pinned identity keys."""
    from vflcrypto.protocols import logreg as lr

    split = lr.titanic_parties()
    ids = list(split.ids_train)[:120]
    (tmp_path / "active.csv").write_text(
        "id,y\n" + "".join(f"{i},{int(v)}\n" for i, v in zip(ids, split.y_train, strict=False)))
    X = [np.asarray(b)[:120] for b in split.X_train[:3]]
    for k, Xk in enumerate(X):
        write_table(tmp_path / f"passive-{k}.csv", ids, [f"c{j}" for j in range(Xk.shape[1])], Xk)
    names = ["active", "passive-0", "passive-1", "passive-2"]
    cfg = make_config(tmp_path, pki, names, identities=True, timeout=20.0)
    procs = {n: party(cfg, n, "train", "logreg", "--preprocess", "none", "--data", str(tmp_path / f"{n}.csv"),
                      "--id-column", "id", "--steps", "2", "--secure", "--aligned", "--test-fraction", "0",
                      *SMALL_KEYS,
                      *(["--label", "y"] if n == "active" else []),
                      "--out", str(tmp_path / f"{n}.npz")) for n in names}
    recs = check_ok(finish(procs, timeout=60))
    y = split.y_train[:120]
    local = lr.run_local(X, y, secure=True, steps=2, key_bits=512, allow_insecure=True,
                         ids_train=[ids] * 4)
    np.testing.assert_allclose(recs["active"]["summary"]["loss_history"], local.active.loss_history,
                               rtol=1e-6)
    for k in range(3):
        np.testing.assert_allclose(recs[f"passive-{k}"]["summary"]["weights"],
                                   local.passives[f"passive-{k}"].weights, rtol=1e-6, atol=1e-9)
    assert_same_transcript(local.transcript, recs, rel=RESIDUE_REL)  # logreg.gradient_reply carries residues
    assert "logreg.key_share" in {e[2] for e in protocol_entries(recs["passive-1"]["transcript"], "recv")}


def test_secure_logistic_regression_refuses_a_wrong_identity(tmp_path: Path, pki: Path) -> None:
    names = ["active", "passive-0", "passive-1"]
    cfg = make_config(tmp_path, pki, names, identities=True)
    (tmp_path / "d.csv").write_text("id,c0\na,1\n")
    p = party(cfg, "passive-0", "--identity-key", str(pki / "passive-1.identity.key"), "train",
              "logreg", "--data", str(tmp_path / "d.csv"), "--id-column", "id", "--secure",
              "--aligned", "--out", str(tmp_path / "o.npz"))
    t0 = time.monotonic()
    rc, _, err = finish({"p": p}, timeout=20)["p"]
    assert time.monotonic() - t0 < 8  # refused before waiting for any peer
    assert rc == 2 and "does not match the identity pinned" in err, err


def test_hash_alignment_in_separate_processes(tmp_path: Path, pki: Path) -> None:
    """--protocol hash: the keyed-hash PSI key agreement is signed with pinned identities."""
    rng = np.random.default_rng(9)
    a_ids = [f"user{i}" for i in rng.choice(500, 200, replace=False)]
    b_ids = [f"user{i}" for i in rng.choice(500, 250, replace=False)]
    write_ids(tmp_path / "a.csv", a_ids)
    write_ids(tmp_path / "b.csv", b_ids)
    cfg = make_config(tmp_path, pki, ["active", "passive-0"], identities=True)
    procs = {n: party(cfg, n, "align", "--protocol", "hash", "--data", str(tmp_path / f),
                      "--id-column", "id", "--out", str(tmp_path / f"{n}.aligned.csv"))
             for n, f in (("active", "a.csv"), ("passive-0", "b.csv"))}
    recs = check_ok(finish(procs))
    common = set(a_ids) & set(b_ids)
    a_rows = [r.split(",")[0] for r in (tmp_path / "active.aligned.csv").read_text().splitlines()[1:]]
    b_rows = [r.split(",")[0] for r in (tmp_path / "passive-0.aligned.csv").read_text().splitlines()[1:]]
    assert a_rows == b_rows and set(a_rows) == common
    assert recs["active"]["summary"]["protocol"] == "hash"
    # without identity pins the hash protocol is refused before any PSI message
    cfg2 = make_config(tmp_path, pki, ["active", "passive-0"])
    procs = {n: party(cfg2, n, "align", "--protocol", "hash", "--data", str(tmp_path / "a.csv"),
                      "--id-column", "id", "--out", str(tmp_path / f"{n}.x.csv"))
             for n in ("active", "passive-0")}
    res = finish(procs)
    assert [r[0] for r in res.values()] == [2, 2]
    assert "identity" in res["active"][2]
    assert not (tmp_path / "active.x.csv").exists()


@pytest.mark.parametrize(("protocol", "mode"), [("kkrt", "both"), ("kkrt", "all"), ("rr22", "both"),
                                               ("auto", "both")])
def test_ot_alignment_in_separate_processes(tmp_path: Path, pki: Path, protocol: str, mode: str) -> None:
    """--protocol kkrt or rr22 over mutual TLS: two parties (both learn), or three (the all-party rows);
    auto (the default) on 2 × 6,000 IDs: both offer their sizes and run the VOLE PSI."""
    rng = np.random.default_rng(13)
    names = ["active", "passive-0"] if mode == "both" else ["active", "passive-0", "passive-1"]
    size = 6000 if protocol == "auto" else 1500
    sets = {name: [f"user{i}" for i in rng.choice(2 * size, size, replace=False)] for name in names}
    for n in names:
        write_ids(tmp_path / f"{n}.csv", sets[n])
    cfg = make_config(tmp_path, pki, names)
    procs = {n: party(cfg, n, "align", "--protocol", protocol, "--chunk-size", "300", "--data",
                      str(tmp_path / f"{n}.csv"), "--id-column", "id",
                      "--out", str(tmp_path / f"{n}.aligned.csv")) for n in names}
    recs = check_ok(finish(procs))
    common = set.intersection(*(set(v) for v in sets.values()))
    rows = [[r.split(",")[0] for r in (tmp_path / f"{n}.aligned.csv").read_text().splitlines()[1:]] for n in names]
    assert all(r == rows[0] for r in rows) and set(rows[0]) == common
    received = {e[2] for e in protocol_entries(recs["active"]["transcript"], "recv")}
    assert ("align.offer" in received) == (protocol == "auto")
    if protocol == "auto":
        protocol = choice.resolve_local((size, size), mode)  # rr22 where its C extensions are built
    assert recs["active"]["summary"]["protocol"] == protocol == recs["passive-0"]["summary"]["protocol"]
    assert "align.oprf_values" in received and ("align.vole_trees" in received) == (protocol == "rr22")


@pytest.mark.slow
def test_logreg_on_raw_titanic_files_matches_the_in_process_command(tmp_path: Path, pki: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Raw per-party files (missing ages included): each feature party imputes and
    standardizes its own columns, as `vflcrypto train logreg` does in-process; each party's
    output file holds the same model (weights and preprocessing) as its file of the
    in-process command's --model-dir."""
    from vflcrypto.protocols import logreg as lr
    from vflcrypto.protocols._linear import LinearParty

    from vflcrypto.cli import main

    files = dict(zip(["active", "passive-0", "passive-1", "passive-2"],
                     lr.export_titanic_parties(tmp_path / "t"), strict=True))
    assert main(["train", "logreg", "--coordinator", str(files["active"]),
                 *[a for k in range(3) for a in ("--party", str(files[f"passive-{k}"]))],
                 "--id-column", "PassengerId", "--label", "Survived", "--plain", "--aligned",
                 "--steps", "5", "--json", "--model-dir", str(tmp_path / "model")]) == 0
    local = json.loads(capsys.readouterr().out)
    names = list(files)
    cfg = make_config(tmp_path, pki, names, timeout=20.0)
    procs = {n: party(cfg, n, "train", "logreg", "--plain", "--data", str(files[n]), "--id-column", "PassengerId",
                      *(["--label", "Survived"] if n == "active" else []), "--aligned", "--steps", "5",
                      "--test-fraction", "0.2", "--out", str(tmp_path / f"{n}.npz")) for n in names}
    recs = check_ok(finish(procs, timeout=60))
    summary = recs["active"]["summary"]
    assert summary["train_loss"] == pytest.approx(local["train_loss"], rel=1e-12)
    assert summary["test_accuracy"] == pytest.approx(local["test_accuracy"])
    for n in names:
        net = LinearParty.load(tmp_path / f"{n}.npz", "logreg")
        saved = LinearParty.load(tmp_path / "model" / f"{n}.npz", "logreg")
        assert (net.name, net.role, net.columns, dict(net.settings)) == (saved.name, saved.role, saved.columns,
                                                                          dict(saved.settings))
        np.testing.assert_allclose(net.weights, saved.weights, rtol=1e-9, atol=1e-12)
        for a, b in ((net.scaling.mean, saved.scaling.mean), (net.scaling.scale, saved.scaling.scale),
                     (net.scaling.medians, saved.scaling.medians)):
            np.testing.assert_array_equal(a if a is not None else [], b if b is not None else [])


def representation_processes(tmp_path: Path, model: str, args: list[str], *, keep: str,
                             timeout: float) -> tuple[Path, list[Path], dict[str, dict]]:
    """A representation-VFL protocol as three processes (server, party-0, party-1) on the digits views, each file
    aligned by PSI (test fraction 0.5), ``keep`` keeping its messages; the label file, the parties' files and the
    run records."""
    from test_cli_repvfl import write_views

    names = ["server", "party-0", "party-1"]
    pki = tmp_path / "pki"
    write_dev_pki(pki, names)
    labels, parties = write_views(tmp_path)
    files = {"server": labels, "party-0": parties[0], "party-1": parties[1]}
    cfg = make_config(tmp_path, pki, names, timeout=30.0)
    procs = {n: party(cfg, n, "train", model, "--data", str(files[n]), "--id-column", "id", "--test-fraction", "0.5",
                      *args, *(["--label", "digit"] if n == "server" else []),
                      *(["--keep-messages"] if n == keep else []), "--out", str(tmp_path / f"{n}.npz"))
             for n in names}
    return labels, parties, check_ok(finish(procs, timeout=timeout))


def test_one_shot_vfl_three_processes_with_alignment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The server and two parties each in a process; PSI aligns them; the same model as in-process; a party that
    kept its messages is attacked from its view alone."""
    pytest.importorskip("torch")
    from vflcrypto.protocols import oneshot
    from vflcrypto.protocols._repvfl import aligned_inputs

    from vflcrypto.cli import main
    from vflcrypto.data.tables import read_party_csv

    labels, parties, recs = representation_processes(tmp_path, "oneshot", ["--ssl-epochs", "3", "--head-epochs", "10"],
                                                     keep="party-1", timeout=90)
    inputs = aligned_inputs(read_party_csv(labels, "id", label="digit", features=[]),
                            [read_party_csv(p, "id") for p in parties], test_fraction=0.5)
    local = oneshot.run_local(inputs.server, inputs.parties,
                              config=oneshot.OneShotConfig(ssl_epochs=3, head_epochs=10))
    metrics = json.loads((tmp_path / "server.npz.metrics.json").read_text())
    assert metrics["test_accuracy"] == pytest.approx(local.test_accuracy, abs=1e-12)
    assert recs["party-1"]["summary"]["rows"] == {"overlap": 210, "test": 210,
                                                  "unaligned": len(inputs.parties[1].X_unaligned)}
    assert_same_transcript(local.transcript, recs, prefix="oneshot.")
    # party-1 kept its messages: the published label attacks run on its view alone (D1 it received, U2 it sent)
    assert main(["audit", "--transcript", str(tmp_path / "party-1.npz.run.json"), "--truth", str(labels),
                 "--truth-id-column", "id", "--truth-label", "digit", "--json"]) == 0
    card = {r["attack"]: r for r in json.loads(capsys.readouterr().out)["scorecard"]}
    assert {r["observer"] for r in card.values()} == {"party-1"} and len(card) == 3, card
    assert card["oneshot.gradient: direction scoring label inference"]["score"] > 0.9


def test_prototype_vfl_four_processes_with_all_party_only_alignment(tmp_path: Path) -> None:
    """The server and three parties each in a process: the all-party-only PSI over the links, then training with
    secure aggregation signed by the pinned identities; the same model as in-process."""
    pytest.importorskip("torch")
    from vflcrypto.protocols import protovfl

    from vflcrypto.cli import main
    from vflcrypto.data.tables import read_party_csv

    names = ["server", "party-0", "party-1", "party-2"]
    pki = tmp_path / "pki"
    write_dev_pki(pki, names)
    assert main(["examples", str(tmp_path / "ex")]) == 0
    d = tmp_path / "ex" / "protovfl"
    files = {"server": d / "server.csv", **{f"party-{k}": d / f"party{k}.csv" for k in range(3)}}
    cfg = make_config(tmp_path, pki, names, identities=True, timeout=60.0)
    args = ["--id-column", "id", "--test-fraction", "0.5", "--rounds", "1", "--local-epochs", "2",
            "--head-epochs", "20"]
    procs = {n: party(cfg, n, "train", "protovfl", "--data", str(files[n]), *args,
                      *(["--label", "digit"] if n == "server" else []), "--out", str(tmp_path / f"{n}.npz"))
             for n in names}
    recs = check_ok(finish(procs, timeout=120))
    inputs = protovfl.aligned_inputs(read_party_csv(files["server"], "id", label="digit", features=[]),
                                     [read_party_csv(files[f"party-{k}"], "id") for k in range(3)],
                                     test_fraction=0.5)
    local = protovfl.run_local(inputs.server, inputs.parties,
                               config=protovfl.ProtoConfig(rounds=1, local_epochs=2, head_epochs=20))
    metrics = json.loads((tmp_path / "server.npz.metrics.json").read_text())
    assert metrics["test_accuracy"] == pytest.approx(local.test_accuracy, abs=1e-12)
    assert recs["party-1"]["summary"]["rows"] == {"aligned": 380, "training": 190, "test": 190,
                                                  "unaligned": len(inputs.parties[1].X_unaligned)}
    sent = {e[2] for rec in recs.values() for e in protocol_entries(rec["transcript"], "send")}
    assert {"protovfl.psi_table", "protovfl.psi_wrapped_key", "protovfl.global_model", "secagg.masked_input"} <= sent
    assert "protovfl.stats" not in sent
