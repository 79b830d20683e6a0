"""The process pool: results equal in-process work, and workers never outlive their owner (``kill -9``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vflcrypto import parallel

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
