"""Bucketed alignment with ``--parallel ray``: the party's local bucket work as Ray tasks, the same bytes.

A local Ray instance of 3 CPUs (its raylet and worker processes on loopback, started in a fresh
process as ``vflcrypto --parallel ray`` would) runs both parties' spill blocks, bucket counts,
bucket parsing and result sorting; the outputs equal the one-process run's byte for byte, for
KKRT (both learn) and ECDH (left only), with duplicates kept first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_align_buckets import MIB, _data, _outputs
from test_party_processes import finish, make_config, party, pki
from vflcrypto.protocols.align import align_files
from vflcrypto.protocols.align import buckets as bk

__all__ = ["pki"]  # the module-scoped PKI fixture of the party-process tests

CASES = (("kkrt", "both"), ("ecdh", "left"))

RAY_RUN = """
import json, os, sys, time
from pathlib import Path
from vflcrypto import parallel
from vflcrypto.protocols.align import align_files, spill

def probe(_i):
    time.sleep(0.5)
    return os.getpid()

if __name__ == "__main__":
    d = Path(sys.argv[1])
    ex = parallel.get_executor()  # the local Ray instance, started in the main thread
    pids = sorted({f.result() for f in [ex.submit(probe, i) for i in range(6)]})
    spill._BLOCK = 1000  # several spill blocks (tasks) for these 4002-row files; the files do not depend on it
    out = {"pids": len(pids), "runs": {}}
    for protocol, reveal in %r:
        before = parallel.dispatch_counts()["ray"]
        r = align_files(d / "left.csv", d / "right.csv", id_column="id", protocol=protocol, reveal=reveal,
                        out_dir=d / f"ray-{protocol}", memory_budget=%d, duplicates="keep_first")
        out["runs"][protocol] = {"tasks": parallel.dispatch_counts()["ray"] - before, "buckets": r["buckets"],
                                 "phase_seconds": r["phase_seconds"]}
    print(json.dumps(out))
"""


def test_ray_bucketed_run_equals_the_one_process_run(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    left, right = _data(tmp_path)
    with left.open("a") as fh:
        fh.write("u1,again\n17,dup\n")  # duplicates, kept first as in process
    script = tmp_path / "ray_run.py"
    script.write_text(RAY_RUN % (CASES, MIB))
    env = {**os.environ, "VFLCRYPTO_BACKEND": "ray", "VFLCRYPTO_WORKERS": "3", "RAY_DEDUP_LOGS": "0"}
    env.pop("VFLCRYPTO_RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["pids"] > 1, out  # several Ray worker processes
    for protocol, reveal in CASES:
        align_files(left, right, id_column="id", protocol=protocol, reveal=reveal, out_dir=tmp_path / protocol,
                    memory_budget=MIB, duplicates="keep_first")
        run = out["runs"][protocol]
        # per party: 5 spill blocks, a count and a parse and a result task per bucket (4 buckets)
        assert run["buckets"] > 1 and run["tasks"] >= 2 * (5 + 3 * run["buckets"]), run
        ours = _outputs(tmp_path / f"ray-{protocol}")
        assert ours == _outputs(tmp_path / protocol) != {}, protocol


def test_ray_party_processes_write_the_one_process_bytes(tmp_path: Path, pki: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``vflcrypto party … align --memory-budget`` with ``--parallel ray`` ($VFLCRYPTO_BACKEND): each party process
    starts its own local Ray instance (2 CPUs) and keeps its one mutually authenticated link; same bytes."""
    pytest.importorskip("ray")
    left, right = _data(tmp_path, n=6000)
    align_files(left, right, id_column="id", protocol="kkrt", out_dir=tmp_path / "whole", memory_budget=MIB)
    files = {"active": left, "passive-0": right}
    monkeypatch.setenv("VFLCRYPTO_BACKEND", "ray")
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "2")
    monkeypatch.setenv("RAY_DEDUP_LOGS", "0")
    monkeypatch.delenv("VFLCRYPTO_RAY_ADDRESS", raising=False)
    cfg = make_config(tmp_path, pki, list(files), timeout=60.0, connect_timeout=60.0)
    (tmp_path / "out").mkdir()
    procs = {n: party(cfg, n, "align", "--data", str(f), "--id-column", "id", "--protocol", "kkrt",
                      "--memory-budget", "4MiB", "--work-dir", str(tmp_path / f"work-{n}"),
                      "--out", str(tmp_path / "out" / f"{n}.aligned.csv")) for n, f in files.items()}
    res = finish(procs, timeout=240)
    for n, (rc, rec, err) in res.items():
        assert rc == 0, f"{n}: {err[-3000:]}"
        assert rec is not None and rec["summary"]["buckets"] == bk.plan_buckets(6002, MIB) > 1
        assert rec["summary"]["cluster_tasks"] >= 3 * rec["summary"]["buckets"], rec["summary"]  # on its own Ray
    whole = _outputs(tmp_path / "whole")
    assert (tmp_path / "out" / "active.aligned.csv").read_bytes() == whole["left.aligned.csv"]
    assert (tmp_path / "out" / "passive-0.aligned.csv").read_bytes() == whole["right.aligned.csv"]
