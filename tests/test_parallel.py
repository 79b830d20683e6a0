"""The process pool: results equal in-process work, and workers never outlive their owner (``kill -9``).

The Ray backend: the same results, private-key work kept off a cluster without TLS, and bucketed alignment's
local work on a party's Ray cluster to the one-process run's bytes. Every Ray test is in this file, so
``--dist loadfile`` never starts two local Ray instances at once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import use_native
from test_align_buckets import MIB, _data, _outputs
from test_party_processes import finish, make_config, party, pki
from vflcrypto.protocols.align import align_files
from vflcrypto.protocols.align import buckets as bk

from vflcrypto import parallel

__all__ = ["pki"]  # the module-scoped PKI fixture of the party-process tests

ROOT = Path(__file__).resolve().parents[1]

OWNER = """
import os, sys, time
os.environ["VFLCRYPTO_WORKERS"] = "2"
from vflcrypto import parallel

if __name__ == "__main__":
    ex = parallel.get_executor()
    pids = sorted({ex.submit(os.getpid).result() for _ in range(8)} | {ex.submit(os.getpid).result()})
    print(" ".join(map(str, pids)), flush=True)
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie that init has not reaped yet counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_workers_exit_when_their_owner_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        pids = [int(x) for x in line.split()]
        assert pids and proc.pid not in pids
        assert all(_alive(p) for p in pids)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10 * parallel.WATCH_INTERVAL + 5
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        assert not [p for p in pids if _alive(p)], "pool workers outlived their killed owner"
    finally:
        proc.kill()


def test_a_worker_knows_whether_its_owner_lives() -> None:
    assert parallel._owner_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not parallel._owner_alive(child.pid)


def test_parallel_map_equals_in_process_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "2")
    chunks = [(i, i + 5) for i in range(0, 40, 5)]
    got = parallel.parallel_map(pow, chunks, cost=10 * parallel.PARALLEL_MIN_COST)
    assert got == [pow(a, b) for a, b in chunks]


def test_each_chunk_goes_to_the_same_worker_on_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """``parallel_map``'s i-th chunk runs in worker ``i mod workers`` every time (workers keep parsed chunks)."""
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "2")
    parallel.shutdown()  # a pool of this test's size
    try:
        calls = [parallel.parallel_map(os.getpid, [()] * 4, cost=10 * parallel.PARALLEL_MIN_COST) for _ in range(3)]
        assert calls[0] == calls[1] == calls[2], calls
        assert calls[0][0] == calls[0][2] != calls[0][1] == calls[0][3], calls
        ex = parallel.get_executor()
        assert ex is not None
        assert len({ex.submit(os.getpid).result() for _ in range(4)}) == 2  # submit balances over both
    finally:
        parallel.shutdown()


def test_a_vector_summed_again_is_not_shipped_again(monkeypatch: pytest.MonkeyPatch,
                                                    small_paillier_keys: tuple[Any, Any]) -> None:
    """The second histogram of one vector sends its token only: one round, no chunk missed and re-sent (the
    Python kernel's pool; the C kernel reads the bytes on this process's threads and ships nothing)."""
    use_native(monkeypatch, False)
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "2")
    monkeypatch.setattr(parallel, "PARALLEL_MIN_COST", 0)
    parallel.shutdown()
    pk, sk = small_paillier_keys
    values = np.arange(600) - 300
    groups = np.arange(600) % 7
    try:
        vec = pk.encrypt(values)
        want = [int(values[groups == g].sum()) for g in range(7)]
        sent = []
        for _ in range(4):
            before = parallel.dispatch_counts()["process"]
            got = vec.sum_by_group(groups, 7)
            sent.append(parallel.dispatch_counts()["process"] - before)
            assert [int(v) for v in sk.decrypt(got)] == want
        assert sent[1:] == [2, 2, 2], sent  # the two chunks, each found in its worker (a miss sends a third)
    finally:
        parallel.shutdown()


RAY_RUN = """
import json, os, sys
import numpy as np
from vflcrypto import parallel
from vflcrypto.protocols import secureboost as sb
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.psi.primitives import blind_stream

if __name__ == "__main__":
    assert parallel.backend() == "ray"
    parallel.get_executor()  # start the local Ray instance in the main thread
    Xa, y, _, Xp, _ = sb.example(n=2500)
    keys = generate_keypair(1024, allow_insecure=True)
    params = sb.BoostParams(n_trees=2, max_depth=3, max_bin=16)
    on_ray = sb.run_local(Xa, y, [Xp], params=params, keys=keys, allow_insecure=True)
    ray_tasks = parallel.dispatch_counts()["ray"]
    secureboost_local = parallel.dispatch_counts()["process"]
    ids = [f"id{i}".encode() for i in range(12_288)]  # three chunks
    order = np.arange(len(ids))
    secret = bytes(range(32))
    psi_ray = b"".join(blind_stream(secret, ids, order))
    psi_tasks = parallel.dispatch_counts()["ray"] - ray_tasks
    values = np.arange(4000) - 2000
    public = keys[0].encrypt(values)  # public-key work: Ray's
    public_tasks = parallel.dispatch_counts()["ray"] - ray_tasks - psi_tasks
    same_public = bool(np.array_equal(keys[1].decrypt(public), values))
    kept_local = parallel.dispatch_counts()["process"]  # private-key chunks: no Ray TLS here
    parallel.configure("process")
    local = sb.run_local(Xa, y, [Xp], params=params, keys=keys, allow_insecure=True)
    same = all(np.array_equal(getattr(on_ray.active.model, k), getattr(local.active.model, k))
               for k in ("kind", "party", "feature", "bin", "value"))
    same_psi = psi_ray == b"".join(blind_stream(secret, ids, order))
    print(json.dumps({"same": same, "same_psi": same_psi, "same_public": same_public, "ray_tasks": ray_tasks,
                      "psi_tasks": psi_tasks, "public_tasks": public_tasks, "secureboost_local": secureboost_local,
                      "process_tasks": parallel.dispatch_counts()["process"] - kept_local}))
"""


def test_ray_backend_gives_identical_results(tmp_path: Path) -> None:
    """A local 2-CPU Ray instance without Ray's TLS: public-key encryption runs as Ray tasks, while
    SecureBoost's private-key encryption and decryption and ECDH PSI's blinding (the secret scalar) stay in
    the local pool; the same trees, blinded points and plaintexts as the process pool alone."""
    pytest.importorskip("ray")
    script = tmp_path / "ray_run.py"
    script.write_text(RAY_RUN)
    env = {**os.environ, "VFLCRYPTO_BACKEND": "ray", "VFLCRYPTO_WORKERS": "2", "RAY_DEDUP_LOGS": "0"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["same"] and out["same_psi"] and out["same_public"], out
    assert out["psi_tasks"] == 0, out  # the blinding carries the PSI secret: never to a Ray cluster without TLS
    assert out["public_tasks"] > 0, out  # public-key encryption is Ray's work
    # SecureBoost's pooled chunks here are the active party's encryption and decryption (its histograms stay
    # below the pool's threshold): all private-key work, so none goes to Ray, and the same chunks as the
    # process backend run in the local pool (measured 8 and 8)
    assert out["ray_tasks"] == 0 and out["secureboost_local"] == out["process_tasks"] > 0, out


class _ReachedRay(Exception):
    pass


def test_private_key_work_never_reaches_a_ray_cluster_without_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``--parallel ray`` and no Ray TLS, decryption, key-holder encryption and PSI blinding (p, q or the
    PSI scalar in every chunk) run in this machine's pool; public-key work still goes to Ray. Ray never starts
    here: reaching it raises."""
    import numpy as np

    from vflcrypto.he.paillier import generate_keypair
    from vflcrypto.psi.primitives import blind_stream

    monkeypatch.setenv("VFLCRYPTO_WORKERS", "2")
    for name in ("RAY_USE_TLS", *parallel.RAY_TLS_FILES):
        monkeypatch.delenv(name, raising=False)
    reached: list[bool] = []

    def no_ray() -> None:
        reached.append(True)
        raise _ReachedRay

    monkeypatch.setattr(parallel, "_ray_executor", no_ray)
    pk, sk = generate_keypair(1024, allow_insecure=True)
    try:
        parallel.configure("ray")
        assert parallel.on_ray() and not parallel.on_ray(secret=True)
        before = parallel.dispatch_counts()
        values = np.arange(3000) - 1500
        enc = sk.encrypt(values)  # the key holder's CRT encryption: p and q in every chunk
        assert np.array_equal(sk.decrypt(enc), values)
        ids = [f"id{i}".encode() for i in range(4096)]
        assert len(b"".join(blind_stream(bytes(range(32)), ids, np.arange(len(ids))))) == 32 * len(ids)
        after = parallel.dispatch_counts()
        assert after["ray"] == before["ray"] and after["process"] > before["process"] and not reached
        with pytest.raises(_ReachedRay):  # public-key encryption is Ray's work
            pk.encrypt(values)
        # with Ray's TLS configured (every file named), private-key work may go to the cluster
        monkeypatch.setenv("RAY_USE_TLS", "1")
        assert not parallel.on_ray(secret=True)  # TLS without its certificate and key is not TLS
        for name in parallel.RAY_TLS_FILES:
            monkeypatch.setenv(name, f"/etc/ray/{name.lower()}.pem")
        assert parallel.ray_tls() and parallel.on_ray(secret=True)
        parallel.configure("process")
        assert not parallel.on_ray() and not parallel.on_ray(secret=True)
    finally:
        parallel.configure(None)


class _FlakyRay:
    """Stands in for the ``ray`` module: ``init`` raises each of ``failures`` in turn, then starts."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.inits: list[dict[str, object]] = []
        self.shutdowns = 0
        self.up = False

    def is_initialized(self) -> bool:
        return self.up

    def init(self, **kw: object) -> None:
        self.inits.append(kw)
        if self.failures:
            raise self.failures.pop(0)
        self.up = True

    def shutdown(self) -> None:
        self.shutdowns += 1
        self.up = False

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def remote(self, fn: object) -> object:
        return fn


GCS_TIMEOUT = RuntimeError("Timed out waiting for file /tmp/ray/session_x/gcs_server_port_y\nmore lines")


def test_a_local_ray_start_that_timed_out_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's node start-up waits a fixed 30 s for its servers (the CI failure that led here): a start that timed
    out is cleaned up and tried again, up to ``RAY_START_ATTEMPTS``; then, and at once for any other failure or
    for a named cluster, one ``ClusterError`` line with Ray's first line (what the CLI prints)."""
    from vflcrypto.errors import ClusterError

    flaky = _FlakyRay(GCS_TIMEOUT, GCS_TIMEOUT)
    monkeypatch.setitem(sys.modules, "ray", flaky)
    ex = parallel._RayExecutor(None, 2)
    assert flaky.up and len(flaky.inits) == 3 and flaky.shutdowns == 2 and ex.cpus == 2
    assert flaky.inits[-1]["num_cpus"] == 2
    never = _FlakyRay(*[GCS_TIMEOUT] * parallel.RAY_START_ATTEMPTS)
    monkeypatch.setitem(sys.modules, "ray", never)
    with pytest.raises(ClusterError) as err:
        parallel._RayExecutor(None, 2)
    assert str(err.value) == ("could not start a local Ray instance (tried 3x): Timed out waiting for file "
                              "/tmp/ray/session_x/gcs_server_port_y") and "\n" not in str(err.value)
    for failure, address, tries in ((ValueError("bad resources"), None, 1), (GCS_TIMEOUT, "10.0.0.9:6379", 1)):
        other = _FlakyRay(failure, failure)
        monkeypatch.setitem(sys.modules, "ray", other)
        with pytest.raises(ClusterError, match=r"could not (start|join)"):
            parallel._RayExecutor(address, 2)
        assert len(other.inits) == tries


def test_parallel_backend_is_chosen_by_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    from vflcrypto.cli import main

    monkeypatch.delenv("VFLCRYPTO_BACKEND", raising=False)
    try:
        assert parallel.backend() == "process"
        monkeypatch.setenv("VFLCRYPTO_BACKEND", "ray")
        assert parallel.backend() == "ray"
        monkeypatch.setenv("VFLCRYPTO_BACKEND", "spark")
        with pytest.raises(ValueError, match="VFLCRYPTO_BACKEND"):
            parallel.backend()
        monkeypatch.delenv("VFLCRYPTO_BACKEND")
        with pytest.raises(SystemExit):  # an address without the Ray backend
            main(["--ray-address", "auto", "examples", "never-written"])
        with pytest.raises(ValueError, match="backend"):
            parallel.configure("spark")
        parallel.configure("ray", address="10.0.0.1:6379")
        assert parallel.backend() == "ray"
    finally:
        parallel.configure(None)
    assert parallel.backend() == "process"


UNGUARDED = """
import json
import numpy as np
import pandas as pd
from vflcrypto import parallel
from vflcrypto.estimators import SecureLogisticRegression

rng = np.random.default_rng(0)
df = pd.DataFrame(rng.normal(size=(3000, 4)), columns=["income", "age", "basket", "visits"])
y = (df["income"] + df["basket"] > 0).astype(int)
clf = SecureLogisticRegression([["income", "age"], ["basket", "visits"]], steps=2, key_bits=1024,
                               allow_insecure=True).fit(df, y)
print(json.dumps({"accuracy": clf.score(df, y), "process_chunks": parallel.dispatch_counts()["process"]}))
"""

GUARDED = """
import json
from vflcrypto import parallel


def work():
    chunks = [(3, 10_000 + i) for i in range(4)]
    got = parallel.parallel_map(pow, chunks, cost=10 * parallel.PARALLEL_MIN_COST)
    return got == [pow(a, b) for a, b in chunks]


if __name__ == "__main__":
    same = work()
    print(json.dumps({"same": same, "process_chunks": parallel.dispatch_counts()["process"]}))
"""


def run_script(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(text)
    env = {**os.environ, "VFLCRYPTO_WORKERS": "2", "VFLCRYPTO_BACKEND": "process"}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)


def test_a_script_without_main_guard_trains_in_process_with_one_line(tmp_path: Path) -> None:
    """Workers would re-import the script and re-run its fit: the pool is not started, the work runs
    in-process, and stderr holds one line naming the statement (no multiprocessing traceback)."""
    proc = run_script(tmp_path, UNGUARDED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["accuracy"] > 0.9 and out["process_chunks"] == 0
    assert proc.stderr.splitlines() == ['vflcrypto: script.py line 11 runs outside `if __name__ == "__main__":`, '
                                        'which worker processes would re-run on import; computing in this process']


def test_a_guarded_script_uses_the_pool_silently(tmp_path: Path) -> None:
    proc = run_script(tmp_path, GUARDED)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert json.loads(proc.stdout) == {"same": True, "process_chunks": 4}


def test_unguarded_main_line_is_none_outside_a_script() -> None:
    """Under pytest the main module is pytest's own ``__main__`` (or a guarded entry script): safe."""
    assert parallel.unguarded_main_line() is None


def test_ray_backend_bench_runs_tiny() -> None:
    """bench/ray_backend_bench.py end to end (here, beside the other Ray test: pytest-xdist runs one file's tests
    in one worker, so two local Ray clusters never start at once and time out on a loaded machine)."""
    import importlib.util

    pytest.importorskip("ray")
    bench = Path(__file__).resolve().parents[1] / "bench"
    sys.path.insert(0, str(bench))
    spec = importlib.util.spec_from_file_location("ray_backend_bench", bench / "ray_backend_bench.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main(["--trees", "1", "--depth", "2", "--key-bits", "512", "--allow-insecure", "--rows", "200",
                    "--cpus", "2", "--json"])
    assert out["identical_trees"] is True


BUCKET_CASES = (("kkrt", "both"), ("ecdh", "left"))
#: the one line when a local Ray node missed its fixed 30 s start-up windows on every attempt (machine load)
RAY_STARTUP_TIMEOUT = "could not start a local Ray instance"

BUCKETS_RAY_RUN = """
import json, os, sys, time
from pathlib import Path
from vflcrypto import parallel
from vflcrypto.protocols.align import align_files, spill
from vflcrypto.protocols.align import buckets as bk

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
    real = bk.write_result_bytes

    def failing(work, b, data):
        if work.name == "left" and b == 2:
            raise RuntimeError("stopped")  # a stand-in for a kill of the active party
        real(work, b, data)

    bk.write_result_bytes = failing
    kw = {"id_column": "id", "protocol": "kkrt", "out_dir": d / "ray-resumed", "memory_budget": %d,
          "duplicates": "keep_first"}
    try:
        align_files(d / "left.csv", d / "right.csv", **kw)
    except RuntimeError:
        out["stopped"] = sorted(p.name for p in (d / "ray-resumed" / ".align-buckets" / "left" / "done").iterdir())
    bk.write_result_bytes = real
    out["resumed_from"] = align_files(d / "left.csv", d / "right.csv", resume=True, **kw)["resumed_from"]
    print(json.dumps(out))
"""


def test_ray_bucketed_run_equals_the_one_process_run(tmp_path: Path) -> None:
    """Bucketed alignment with ``--parallel ray``: a local Ray instance of 3 CPUs (its raylet and worker processes
    on loopback, started in a fresh process as ``vflcrypto --parallel ray`` would) runs both parties' spill blocks,
    bucket counts, bucket parsing and result sorting; the outputs equal the one-process run's byte for byte, for
    KKRT (both learn) and ECDH (left only), with duplicates kept first; a run stopped mid-way resumes on Ray."""
    pytest.importorskip("ray")
    left, right = _data(tmp_path)
    with left.open("a") as fh:
        fh.write("u1,again\n17,dup\n")  # duplicates, kept first as in process
    script = tmp_path / "ray_run.py"
    script.write_text(BUCKETS_RAY_RUN % (BUCKET_CASES, MIB, MIB))
    env = {**os.environ, "VFLCRYPTO_BACKEND": "ray", "VFLCRYPTO_WORKERS": "3", "RAY_DEDUP_LOGS": "0"}
    env.pop("VFLCRYPTO_RAY_ADDRESS", None)
    for _ in range(2):  # once more if Ray's own node start-up (a fixed 30 s in Ray) timed out on a loaded machine
        for d in tmp_path.glob("ray-*"):
            shutil.rmtree(d)
        proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                              timeout=300, env=env, cwd=tmp_path)
        if proc.returncode == 0 or RAY_STARTUP_TIMEOUT not in proc.stderr:
            break
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["pids"] > 1, out  # several Ray worker processes
    for protocol, reveal in BUCKET_CASES:
        align_files(left, right, id_column="id", protocol=protocol, reveal=reveal, out_dir=tmp_path / protocol,
                    memory_budget=MIB, duplicates="keep_first")
        run = out["runs"][protocol]
        # per party: 5 spill blocks, a count and a parse and a result task per bucket (4 buckets)
        assert run["buckets"] > 1 and run["tasks"] >= 2 * (5 + 3 * run["buckets"]), run
        ours = _outputs(tmp_path / f"ray-{protocol}")
        assert ours == _outputs(tmp_path / protocol) != {}, protocol
    # a run stopped while writing bucket 2's result resumes there on Ray to the same bytes
    assert out["stopped"] == ["000000.bin", "000001.bin"] and out["resumed_from"] == 2, out
    assert _outputs(tmp_path / "ray-resumed") == _outputs(tmp_path / "kkrt")


def test_ray_party_process_writes_the_one_process_bytes(tmp_path: Path, pki: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``vflcrypto party … align --memory-budget`` with ``--parallel ray`` ($VFLCRYPTO_BACKEND) at the active party:
    its process starts its own local Ray instance (2 CPUs), before it connects, and keeps its one mutually
    authenticated link; the passive party runs in process (each party's choice is its own: the messages are the
    same); same bytes.
    One Ray instance at a time on this machine (see :func:`test_ray_backend_bench_runs_tiny`)."""
    pytest.importorskip("ray")
    left, right = _data(tmp_path, n=6000)
    align_files(left, right, id_column="id", protocol="kkrt", out_dir=tmp_path / "whole", memory_budget=MIB)
    files = {"active": left, "passive-0": right}
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "2")
    monkeypatch.setenv("RAY_DEDUP_LOGS", "0")
    monkeypatch.delenv("VFLCRYPTO_RAY_ADDRESS", raising=False)
    # the active party starts Ray before it connects (up to 3 of Ray's 30 s windows under load): its peer waits
    cfg = make_config(tmp_path, pki, list(files), timeout=60.0, connect_timeout=150.0)
    for _ in range(2):  # once more if Ray's own node start-up (a fixed 30 s in Ray) timed out on a loaded machine
        for d in ("out", "work-active", "work-passive-0"):
            shutil.rmtree(tmp_path / d, ignore_errors=True)
        (tmp_path / "out").mkdir()
        procs = {}
        for n, f in files.items():
            monkeypatch.setenv("VFLCRYPTO_BACKEND", "ray" if n == "active" else "process")
            procs[n] = party(cfg, n, "align", "--data", str(f), "--id-column", "id", "--protocol", "kkrt",
                             "--memory-budget", "4MiB", "--work-dir", str(tmp_path / f"work-{n}"),
                             "--out", str(tmp_path / "out" / f"{n}.aligned.csv"))
        res = finish(procs, timeout=240)
        if RAY_STARTUP_TIMEOUT not in res["active"][2]:
            break
    for n, (rc, rec, err) in res.items():
        assert rc == 0, f"{n}: {err[-3000:]}"
        assert rec is not None and rec["summary"]["buckets"] == bk.plan_buckets(6002, MIB) > 1
    tasks = {n: rec["summary"]["cluster_tasks"] for n, (_, rec, _) in res.items() if rec is not None}
    assert tasks["passive-0"] == 0 and tasks["active"] >= 3 * bk.plan_buckets(6002, MIB), tasks  # on its own Ray
    whole = _outputs(tmp_path / "whole")
    assert (tmp_path / "out" / "active.aligned.csv").read_bytes() == whole["left.aligned.csv"]
    assert (tmp_path / "out" / "passive-0.aligned.csv").read_bytes() == whole["right.aligned.csv"]


def test_psi_ray_bench_runs_tiny(tmp_path: Path) -> None:
    """bench/psi_ray_bench.py end to end at 3,000 IDs (here, beside the other Ray tests)."""
    import importlib.util

    pytest.importorskip("ray")
    bench = ROOT / "bench"
    spec = importlib.util.spec_from_file_location("psi_ray_bench", bench / "psi_ray_bench.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main(["--rows", "3000", "--budget", "4MiB", "--cpus", "2", "--workdir", str(tmp_path), "--json"])
    assert out["identical"] is True and out["ray"]["buckets"] > 1 and out["cluster_bytes"]["to_workers"] > 0


def test_a_party_starts_its_ray_backend_before_it_connects(tmp_path: Path, pki: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``vflcrypto --parallel ray party …`` starts (or joins) its Ray cluster before it opens any link, so a slow
    start-up never stalls a live link past its peers' timeouts; a cluster that cannot start fails in one line and
    no peer was ever contacted. (Ray itself is replaced here: the order is what is tested.)"""
    from vflcrypto.cli import main
    from vflcrypto.errors import ClusterError, PeerTimeoutError
    from vflcrypto.runtime import network

    left, _ = _data(tmp_path, n=50)
    cfg = make_config(tmp_path, pki, ["active", "passive-0"])
    order: list[str] = []

    class Started:
        cpus = 2

        def __init__(self, address: str | None, cpus: int | None) -> None:
            order.append("ray")

    class Refused:
        def __init__(self, address: str | None, cpus: int | None) -> None:
            order.append("ray")
            raise ClusterError("could not start a local Ray instance (tried 3x): timed out")

    def connect(*args: Any, **kwargs: Any) -> Any:
        order.append("connect")
        raise PeerTimeoutError("stop here")

    monkeypatch.setattr(network, "connect_party", connect)
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "2")
    argv = ["--parallel", "ray", "party", "--config", str(cfg), "--as", "active", "align", "--data", str(left),
            "--id-column", "id", "--out", str(tmp_path / "a.csv")]
    try:
        for fake, expected in ((Started, ["ray", "connect"]), (Refused, ["ray"])):
            order.clear()
            monkeypatch.setattr(parallel, "_RayExecutor", fake)
            monkeypatch.setattr(parallel, "_ray", None)
            assert main(argv) == 2
            assert order == expected, fake.__name__
    finally:
        parallel.configure(None)
