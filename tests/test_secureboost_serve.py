"""``vflcrypto party ... serve secureboost``: the SecureBoost prediction service.

In-process (:func:`serve_local`): the answers to several batches equal the batch prediction of the same rows;
unknown IDs (at the active party, at a passive party), an empty and a malformed request get one error answer
each and the service goes on; the stop line ends it. As processes over mutual TLS: the label holder's answers
equal ``vflcrypto predict secureboost`` on the same rows, only the declared service and prediction messages
travel, ``!stop`` ends every party with its summary; a party killed while the service idles ends the other
with a one-line error (no hang), as does a passive party whose `--idle-timeout` passes without a request.
"""

from __future__ import annotations

import csv
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_party_processes import ROOT, finish, make_config, pki  # noqa: F401  (pki: the module's fixture)
from vflcrypto.protocols import secureboost as sb
from vflcrypto.protocols.secureboost.predict import predict_local
from vflcrypto.protocols.secureboost.serve import STOP, pack_ids, parse_request, serve_local, unpack_ids

from vflcrypto.cli import main
from vflcrypto.data.files import write_csv_atomic
from vflcrypto.errors import InputDataError, ProtocolError

SMALL_KEYS = ["--key-bits", "512", "--allow-insecure"]
N = 40


def test_parse_request() -> None:
    assert parse_request("a,b  c\n") == ["a", "b", "c"]
    assert parse_request('["a b", "c,d"]') == ["a b", "c,d"]
    assert parse_request(f" {STOP} ") is None
    assert parse_request("\n") == []
    with pytest.raises(InputDataError, match="JSON array"):
        parse_request("[1, 2]")


@pytest.mark.parametrize("ids", [[], ["r1"], ["a", "", "bc", "a"], ["Zürich-7", "東京", "x y,z"]])
def test_ids_travel_as_one_blob(ids: list[str]) -> None:
    assert unpack_ids(*pack_ids(ids)) == ids


def test_a_malformed_id_layout_is_a_protocol_error() -> None:
    blob, offs = pack_ids(["ab", "東京"])
    for bad in (offs[:-1], offs + 1, np.asarray([0, 3, 2, len(blob)]), np.asarray([0, 4, len(blob)])):
        with pytest.raises(ProtocolError, match="malformed prediction request"):
            unpack_ids(blob, bad)


def test_service_answers_equal_batch_prediction_in_process() -> None:
    Xa, y, _, Xp, _ = sb.example(N, seed=3)
    run = sb.run_local(Xa, y, [Xp], params=sb.BoostParams(n_trees=2, max_depth=3, max_bin=8,
                                                          first_tree_active_only=False), plaintext=True)
    ids = [f"r{i}" for i in range(N)]
    model, pm = run.active.model, run.passive["passive-0"].model
    assert (model.kind == 2).any()  # passive nodes: rows are routed by the passive party
    ref = predict_local(model, Xa, [(pm, Xp)])
    held = N - 5  # the passive party lacks the last five IDs
    order = np.random.default_rng(0).permutation(held)  # test data layout, not a secret
    batches = [[ids[i] for i in order[:1]], [ids[i] for i in order[1:20]], [ids[i] for i in order[20:]]]
    answers = serve_local((model, ids, Xa), [(pm, ids[:held][::-1], Xp[:held][::-1])],
                          [",".join(b) for b in batches[:2]] + ["nosuch r1", f"r1 r{N - 1}", "", "[1]",
                                                                  " ".join(batches[2][:10]), STOP, "r2"])
    assert [a["batch"] for a in answers] == list(range(1, 8))  # one answer per request line, up to the stop
    for a, b in zip([answers[0], answers[1]], batches[:2], strict=True):
        assert a["ids"] == b and a["probability"] == [float(ref[ids.index(i)]) for i in b]
        assert a["prediction"] == [int(ref[ids.index(i)] >= 0.5) for i in b]
    assert answers[2]["error"] == "unknown ID 'nosuch': not in the active party's --data"
    assert answers[3]["error"] == f"unknown ID 'r{N - 1}': not in passive-0's data"
    assert answers[4]["error"] == "empty request: no IDs" and "JSON array" in answers[5]["error"]
    assert answers[6]["probability"] == [float(ref[ids.index(i)]) for i in batches[2][:10]]


# --------------------------------------------------------------------------- processes


def _write(path: Path, ids: list[str], head: list[str], columns: np.ndarray) -> str:
    write_csv_atomic(path, ["id", *head], [[ids[i], *(repr(float(v)) for v in columns[i])] for i in range(len(ids))])
    return str(path)


def _serve(cfg: Path, name: str, *flags: str) -> subprocess.Popen[bytes]:
    """``vflcrypto party --config CFG --as NAME --json serve secureboost FLAGS`` with its stdin a pipe."""
    return subprocess.Popen([sys.executable, "-m", "vflcrypto", "party", "--config", str(cfg), "--as", name, "--json",
                             "serve", "secureboost", *flags], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


class _Lines:
    """The active party's stdout, line by line, with a timeout (a reader thread)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.q: queue.Queue[bytes] = queue.Queue()
        assert proc.stdout is not None
        threading.Thread(target=lambda: [self.q.put(ln) for ln in proc.stdout], daemon=True).start()  # type: ignore

    def ask(self, line: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        return dict(json.loads(self.q.get(timeout=30)))


def _service(tmp_path: Path, pki: Path, *passive_flags: str,  # noqa: F811
             ) -> tuple[dict[str, subprocess.Popen[bytes]], _Lines, list[str], Path]:
    """A model trained in-process (2 trees, 512-bit keys), then both parties' services as processes
    (``passive_flags``: more flags of the passive party's command)."""
    Xa, y, ca, Xp, cp = sb.example(N, seed=3)
    ids = [f"s{i:03d}" for i in range(N)]
    a = _write(tmp_path / "a.csv", ids, ["y", *ca], np.column_stack([y, Xa]))
    p = _write(tmp_path / "p.csv", ids, list(cp), Xp)
    model = tmp_path / "model"
    assert main(["train", "secureboost", "--active", a, "--passive", p, "--id-column", "id", "--label", "y",
                 "--aligned", "--trees", "2", "--depth", "3", "--no-first-tree-active-only", *SMALL_KEYS,
                 "--model-dir", str(model), "--json"]) == 0
    out = tmp_path / "reference.csv"
    assert main(["predict", "secureboost", "--active", a, "--passive", p, "--id-column", "id", "--aligned",
                 "--model-dir", str(model), "--out", str(out)]) == 0
    # the passive party holds all but the last two IDs
    p_short = _write(tmp_path / "p_short.csv", ids[:-2], list(cp), Xp[:-2])
    cfg = make_config(tmp_path, pki, ["active", "passive-0"])
    procs = {n: _serve(cfg, n, "--model-dir", str(model), "--data", f, "--id-column", "id",
                       "--out", str(tmp_path / f"{n}.json"), *(passive_flags if n != "active" else ()))
             for n, f in (("active", a), ("passive-0", p_short))}
    return procs, _Lines(procs["active"]), ids, out


@pytest.fixture
def served(tmp_path: Path, pki: Path) -> Iterator[tuple[dict[str, subprocess.Popen[bytes]], _Lines, list[str], Path]]:  # noqa: F811
    procs, lines, ids, ref = _service(tmp_path, pki)
    yield procs, lines, ids, ref
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()


def test_service_processes_answer_batches_like_batch_prediction(served: Any, tmp_path: Path) -> None:
    procs, lines, ids, ref = served
    with open(ref, newline="", encoding="utf-8") as fh:
        reference = {r["id"]: r for r in csv.DictReader(fh)}
    order = np.random.default_rng(1).permutation(N - 2)  # test data layout, not a secret
    for batch in ([ids[order[0]]], [ids[i] for i in order[1:15]], [ids[i] for i in order[15:]]):
        got = lines.ask(" ".join(batch))
        assert got["ids"] == batch, got
        assert got["prediction"] == [int(reference[i]["prediction"]) for i in batch]
        assert got["probability"] == [float(reference[i]["probability"]) for i in batch]
    assert lines.ask("nosuch")["error"] == "unknown ID 'nosuch': not in the active party's --data"
    assert lines.ask(f"{ids[0]},{ids[-1]}")["error"] == f"unknown ID '{ids[-1]}': not in passive-0's data"
    assert lines.ask(ids[3])["ids"] == [ids[3]]  # still serving after the errors
    assert procs["active"].stdin is not None
    procs["active"].stdin.write(f"{STOP}\n".encode())
    procs["active"].stdin.close()
    procs["active"].stdin = None  # closed: the end of the requests too
    code = procs["active"].wait(timeout=30)
    assert procs["active"].stderr is not None
    assert code == 0, procs["active"].stderr.read().decode(errors="replace")[-2000:]
    res = {"active": (0, json.loads(lines.q.get(timeout=10)), ""), **finish({"passive-0": procs["passive-0"]}, 30)}
    assert res["passive-0"][0] == 0, res["passive-0"][2][-2000:]
    assert all(rec["task"] == "serve-secureboost" and rec["status"] == "complete" for _, rec, _ in res.values())
    summary = json.loads((tmp_path / "active.json").read_text())
    assert summary["batches"] == 6 and summary["errors"] == 2 and summary["rows"] == N - 2 + 1
    passive = json.loads((tmp_path / "passive-0.json").read_text())
    assert passive["batches"] == 5 and passive["rows"] == N - 2 + 1 and passive["answered"] > 0
    sent = {e["kind"] for _, rec, _ in res.values() if rec for e in rec["transcript"]
            if e["event"] == "send" and e["kind"].startswith("secureboost.")}
    assert sent == {"secureboost.serve_request", "secureboost.serve_rows", "secureboost.predict_query",
                    "secureboost.predict_answer"}


@pytest.mark.parametrize("killed", ["passive-0", "active"])
def test_service_ends_in_one_line_when_a_peer_vanishes(killed: str, served: Any) -> None:
    """kill -9 of one party while the service idles: the other ends at once with one line (no request follows,
    so each notices alone: the active party polls its links, the passive party's wait for a request fails)."""
    procs, lines, ids, _ = served
    assert lines.ask(ids[0])["ids"] == [ids[0]]
    procs[killed].send_signal(signal.SIGKILL)
    procs[killed].wait()
    other = next(p for n, p in procs.items() if n != killed)
    try:
        code = other.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the other party did not notice that {killed} vanished")
    assert other.stderr is not None
    err = other.stderr.read().decode(errors="replace")
    errs = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0 and len(errs) == 1 and errs[0].startswith("vflcrypto: error: PeerDisconnectedError"), err
    if killed != "active":
        assert "passive-0 left the prediction service" in errs[0], err


def test_an_idle_service_ends_after_the_idle_timeout_in_one_line_per_party(tmp_path: Path, pki: Path) -> None:  # noqa: F811
    """``--idle-timeout 3`` at the passive party: with no request for 3 s it ends with one line naming the
    wait, and the active party, idling too, notices the link go down and ends with one line (no hang)."""
    procs, lines, ids, _ = _service(tmp_path, pki, "--idle-timeout", "3")
    try:
        assert lines.ask(ids[0])["ids"] == [ids[0]]  # serving; then no request follows
        codes = {n: p.wait(timeout=60) for n, p in procs.items()}
        errs = {}
        for n, p in procs.items():
            assert p.stderr is not None
            errs[n] = [ln for ln in p.stderr.read().decode(errors="replace").splitlines() if ln.strip()]
        assert codes["passive-0"] != 0 and len(errs["passive-0"]) == 1, errs
        line = errs["passive-0"][0]
        assert line.startswith("vflcrypto: error: PeerTimeoutError") and "active" in line, line
        assert codes["active"] != 0 and len(errs["active"]) == 1, errs
        assert errs["active"][0].startswith("vflcrypto: error: PeerDisconnectedError"), errs
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
