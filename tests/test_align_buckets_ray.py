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
from vflcrypto.protocols.align import align_files

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
