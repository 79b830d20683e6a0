"""Run parties as ``vflcrypto party`` processes over loopback mutual TLS, for the benchmarks.

Shared by ``linreg_processes.py`` and ``secureboost_processes.py``: the CSV files a party
reads, a throw-away dev PKI and party configuration, and :func:`run_parties`, which starts
one process per party (optionally pinned to a core), waits for all, and returns each
party's JSON run record and CPU seconds (``os.wait4``: the party process itself; pool
workers are forkserver children and are not counted).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vflcrypto.data.tables import PartyTable
from vflcrypto.runtime.certs import write_dev_pki
from vflcrypto.runtime.partyconfig import render_config_toml

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_table(path: Path, table: PartyTable) -> None:
    """``table`` as the CSV a party reads (``id``, the label ``y`` if any, the columns)."""
    cols = ["id", *(["y"] if table.label is not None else []), *table.columns]
    with path.open("w", encoding="utf-8") as fh:
        fh.write(",".join(cols) + "\n")
        for i, rid in enumerate(table.ids):
            row = [rid, *([repr(float(table.label[i]))] if table.label is not None else []),
                   *(repr(float(v)) for v in table.X[i])]
            fh.write(",".join(row) + "\n")


def party_config(work: Path, names: Sequence[str], timeout: float, addresses: dict[str, str] | None = None) -> Path:
    """A dev PKI and a ``parties.toml`` in ``work`` (role = name before any ``-``), each party on a free loopback
    port or at ``addresses[name]`` ("host:port")."""
    pki = work / "pki"
    write_dev_pki(pki, list(names))
    parties = {n: (n.split("-")[0], (addresses or {}).get(n) or f"127.0.0.1:{free_port()}") for n in names}
    text = render_config_toml(parties, ca=str(pki / "ca.pem"),
                              certs={n: (str(pki / f"{n}.pem"), str(pki / f"{n}.key")) for n in names},
                              network={"connect_timeout": 60.0, "timeout": timeout, "linger": 2.0})
    path = work / "parties.toml"
    path.write_text(text)
    return path


def run_parties(label: str, cfg: Path, commands: dict[str, list[str]], logs: Path, *,
                env: dict[str, str] | None = None, cores: dict[str, int] | None = None,
                prefix: dict[str, list[str]] | None = None) -> tuple[dict[str, Any], dict[str, float], float]:
    """``vflcrypto party --config CFG --as NAME --json <commands[NAME]>`` per party, all at once.

    ``cores`` pins a party to one core (``sched_setaffinity``); ``prefix`` runs a party's command through
    another (``ip netns exec NS``, which execs it: the CPU seconds stay the party's). Returns each party's run record,
    its process's CPU seconds and the wall seconds of the whole job; a failed party kills the
    others and ends the benchmark with its stderr.
    """
    procs, files = {}, {}
    t0 = time.perf_counter()
    for n, cmd in commands.items():
        files[n] = (logs / f"{n}.out", logs / f"{n}.err")
        core = (cores or {}).get(n)
        with files[n][0].open("wb") as out, files[n][1].open("wb") as err:
            procs[n] = subprocess.Popen(
                [*(prefix or {}).get(n, []), sys.executable, "-m", "vflcrypto", "party", "--config", str(cfg),
                 "--as", n, "--json", *cmd],
                stdout=out, stderr=err, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                preexec_fn=None if core is None else (lambda core=core: os.sched_setaffinity(0, {core})))
    by_pid = {p.pid: n for n, p in procs.items()}
    recs: dict[str, Any] = {}
    cpu: dict[str, float] = {}
    try:
        while by_pid:
            pid, status, usage = os.wait4(-1, 0)
            n = by_pid.pop(pid)
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"{label}: {n} failed:\n{files[n][1].read_text()[-3000:]}")
            recs[n] = json.loads(files[n][0].read_text().splitlines()[-1])
            cpu[n] = round(usage.ru_utime + usage.ru_stime, 2)
    finally:  # a failed party, an exception or a signal here: end every party still running
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return recs, cpu, time.perf_counter() - t0
