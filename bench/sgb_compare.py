"""SecretFlow's SGB (``secretflow.ml.boost.sgb_v``) on default_credit: an outside anchor for SecureBoost.

Optional and outside the test suite: SecretFlow is not a dependency of vflcrypto. Install it
in a separate Python 3.10 environment (``python3.10 -m venv /tmp/sf310 &&
/tmp/sf310/bin/pip install secretflow-lite``) and run this script with that interpreter.

SecretFlow runs in its simulation mode (``sf.init(parties=[...], address="local")``: a local
Ray cluster started by the script, each party's PYU and HEU actors in their own Ray worker
processes on this machine; no other service needed). The active party ``alice`` holds the
label and the guest file's 13 features, ``bob`` the host file's 10, aligned on ``id`` as
``bench/secureboost_bench.py`` aligns them (all 30,000 rows train). The parameters match
vflcrypto's SecureBoost bench: ``--trees`` trees (30), ``max_depth`` 3, ``sketch_eps`` =
1/``--max-bin`` (32 bins), learning rate 0.3, ``reg_lambda`` 1, logistic objective,
level-wise growth, no sampling. HEU's schemes: ``ou`` (the one SecretFlow's SGB documentation
recommends) and ``zpaillier``, at ``--key-bits`` (2048). The wall time covers ``Sgb.train``
(the HEU key generation and the actors' start-up are outside it, as vflcrypto's key
generation is outside its run time); the AUC is on the training rows (``--test-frac`` > 0
also trains on a random split and reports the held-out AUC). One JSON line per scheme.

Usage::

    /tmp/sf310/bin/python bench/sgb_compare.py --schemes ou,zpaillier

``--mode debug`` runs SecretFlow's single-process debug mode instead (the smoke test's mode).
SecretFlow-lite (1.13.0b0 here) has neither the simulation nor the Ray production mode
(``secretflow_fl`` is needed for both); its production mode without Ray needs no other service.

Measured here (2026-12-03; 2 cores, nothing else running, load average 1.2-2.5; default_credit, 30,000
rows, 30 trees, depth 3, 32 bins, learning rate 0.3, lambda 1; SecretFlow-lite 1.13.0b0 in its production
mode, one process per party; vflcrypto in one process with 2 workers through
``bench/secureboost_bench.py --schemes default,ou-heu``, whose trees equalled its plaintext mode's; CPU
seconds: SGB's two party processes, vflcrypto's every process that worked; ratio: SGB-OU's time over
vflcrypto's; each pair ran back to back)::

    pair: order                     SGB OU-2048        vflcrypto default ou-2048   vflcrypto ou-heu (HEU's)
    A: SGB first                    66.36 s            38.75 s  1.71x              26.12 s  2.54x
    B: SGB last                     58.18 s            33.92 s  1.72x              25.52 s  2.28x
    CPU s (A / B)                   119.1 / 105.0      66.2 / 58.4  1.80x / 1.80x  43.1 / 42.5  2.76x / 2.47x
    train AUC                       0.7954             0.7955                      0.7955

With the histogram products in C (``vflcrypto.he.native``, on two threads of the passive party's
process), two more pairs on 2026-12-04 (another CPU: SGB itself ran faster; load average 1.6-2.6)::

    pair: order                     SGB OU-2048        vflcrypto default ou-2048   vflcrypto ou-heu (HEU's)
    C: SGB first                    50.09 s            28.09 s  1.78x              21.07 s  2.38x
    D: SGB last                     48.84 s            28.80 s  1.70x              22.14 s  2.21x
    CPU s (C / D)                   91.3 / 89.1        47.9 / 49.9  1.91x / 1.79x  34.6 / 36.8  2.64x / 2.42x
    train AUC                       0.7954             0.7955                      0.7955

The passive party's histogram phase alone, 10 trees, the C kernel against the Python one in the same
session: 2.33 s against 5.24 s (default), 2.26 s against 3.80 s (ou-heu); the active party's encryption
(7.45 and 4.94 s) is now most of the run.

With the largest-bin skip of the histogram kernel but gradients still in parts of 4,096 rows in one
process, two earlier pairs gave: SGB 71.34 / 59.98 s, the default 46.26 / 43.09 s (1.54x / 1.39x),
ou-heu 32.12 / 30.97 s (2.22x / 1.94x). Before both changes (an earlier session, a busier machine) the
default was 0.88-1.39x and ou-heu 1.06-1.75x in wall time, 1.37x and 1.85x in CPU.

SGB under ZPaillier-2048, alone (an earlier session, load average 5.5 -> 9.6): 650.6 s, 712.9 CPU s
(alice 655.2, bob 57.7), train AUC 0.7954; not paired with a vflcrypto Paillier run.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import queue
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

FATE = Path(__file__).resolve().parents[2] / "shared" / "data" / "fate"


def _read(path: Path, label: str | None) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    with path.open() as f:
        rows = list(csv.reader(f))
    head, body = rows[0], rows[1:]
    i_id = head.index("id")
    i_y = head.index(label) if label else -1
    cols = [j for j in range(len(head)) if j not in (i_id, i_y)]
    X = np.array([[float(r[j]) for j in cols] for r in body])
    y = np.array([float(r[i_y]) for r in body]) if label else None
    return [r[i_id] for r in body], X, y


def load_data(rows: int | None, guest: Path, host: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Guest features + label, host features aligned on the guest's id order (as secureboost_bench)."""
    gid, Xa, y = _read(guest, "y")
    hid, Xp, _ = _read(host, None)
    pos = {k: i for i, k in enumerate(hid)}
    Xp = Xp[[pos[k] for k in gid]]
    assert y is not None
    if rows is not None:
        Xa, y, Xp = Xa[:rows], y[:rows], Xp[:rows]
    return Xa, y, Xp


def auc(y: np.ndarray, s: np.ndarray) -> float:
    """ROC AUC by the rank statistic (ties averaged)."""
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    ss = s[order]
    i = 0
    while i < len(ss):
        j = i
        while j + 1 < len(ss) and ss[j + 1] == ss[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    pos = y == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def _fed(sf: Any, alice: Any, bob: Any, Xa: np.ndarray, Xp: np.ndarray) -> Any:
    from secretflow.data import FedNdarray, PartitionWay

    return FedNdarray(partitions={alice: alice(lambda: Xa)(), bob: bob(lambda: Xp)()},
                      partition_way=PartitionWay.VERTICAL)


def run_scheme(sf: Any, alice: Any, bob: Any, scheme: str, args: argparse.Namespace, Xa: np.ndarray,
               y: np.ndarray, Xp: np.ndarray, test: np.ndarray | None) -> dict[str, Any]:
    import spu
    from secretflow.data import FedNdarray, PartitionWay
    from secretflow.device import HEU
    from secretflow.ml.boost.sgb_v import Sgb

    heu_config = {
        "sk_keeper": {"party": "alice"}, "evaluators": [{"party": "bob"}], "mode": "PHEU",
        "he_parameters": {"schema": scheme, "key_pair": {"generate": {"bit_size": args.key_bits}}},
        "encoding": {"cleartext_type": "DT_I32", "encoder": "IntegerEncoder", "encoder_args": {"scale": 1}},
    }
    t0 = time.perf_counter()
    heu = HEU(heu_config, spu.FieldType.FM64)
    keygen = time.perf_counter() - t0
    train = np.ones(len(y), bool) if test is None else ~test
    x = _fed(sf, alice, bob, Xa[train], Xp[train])
    label = FedNdarray(partitions={alice: alice(lambda: y[train].reshape(-1, 1))()},
                       partition_way=PartitionWay.VERTICAL)
    params = {
        "num_boost_round": args.trees, "max_depth": args.depth, "sketch_eps": 1.0 / args.max_bin,
        "learning_rate": 0.3, "reg_lambda": 1.0, "gamma": 0.0, "objective": "logistic",
        "rowsample_by_tree": 1.0, "colsample_by_tree": 1.0, "base_score": 0.0,
        "tree_growing_method": "level", "enable_monitor": False, "enable_early_stop": False,
    }
    sf.wait(x.partitions[alice])
    t0, cpu0 = time.perf_counter(), time.process_time()
    model = Sgb(heu).train(params, x, label)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    out: dict[str, Any] = {
        "scheme": f"sgb-{scheme}-{args.key_bits}",
        "trees": args.trees, "depth": args.depth, "max_bin": args.max_bin, "rows_train": int(train.sum()),
        "wall_s": round(wall, 2), "keygen_s": round(keygen, 2), "cpu_s": round(cpu, 1),
    }
    pred = np.asarray(sf.reveal(model.predict(x))).reshape(-1)
    out["auc_train"] = round(auc(y[train], pred), 4)
    if test is not None:
        xt = _fed(sf, alice, bob, Xa[test], Xp[test])
        out["auc_test"] = round(auc(y[test], np.asarray(sf.reveal(model.predict(xt))).reshape(-1)), 4)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session(args: argparse.Namespace, self_party: str | None, ports: list[int], q: Any) -> None:
    """One SecretFlow session: production mode for ``self_party`` (or debug mode when None)."""
    import secretflow as sf

    Xa, y, Xp = load_data(args.rows, args.guest, args.host)
    test = None
    if args.test_frac > 0:
        # numpy RNG only to choose the held-out rows of public benchmark data
        test = np.random.default_rng(0).random(len(y)) < args.test_frac
    if self_party is None:
        sf.init(parties=["alice", "bob"], debug_mode=True)
    else:
        cluster = {"parties": {name: {"address": f"127.0.0.1:{port}", "listen_addr": f"127.0.0.1:{port}"}
                               for name, port in zip(("alice", "bob"), ports, strict=True)},
                   "self_party": self_party}
        sf.init(cluster_config=cluster, ray_mode=False, logging_level="warning",
                cross_silo_comm_options={"timeout_in_ms": 3_600_000, "messages_max_size_in_bytes": 2**31 - 1,
                                         "exit_on_sending_failure": True},
                job_name=f"sgb{ports[0]}")
    try:
        alice, bob = sf.PYU("alice"), sf.PYU("bob")
        for scheme in (s.strip() for s in args.schemes.split(",") if s.strip()):
            r = run_scheme(sf, alice, bob, scheme, args, Xa, y, Xp, test)
            r["mode"] = "debug (one process)" if self_party is None else "production (one process per party)"
            q.put((self_party or "all", r))
    finally:
        sf.shutdown()
        q.put(None)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schemes", default="ou", help="comma-separated HEU schemes: ou, zpaillier, paillier")
    p.add_argument("--trees", type=int, default=30)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--max-bin", type=int, default=32)
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--rows", type=int, default=None, help="use only the first ROWS rows (smoke tests)")
    p.add_argument("--test-frac", type=float, default=0.0, help="hold out this fraction (seed 0) for a test AUC")
    p.add_argument("--guest", type=Path, default=FATE / "default_credit_hetero_guest.csv")
    p.add_argument("--host", type=Path, default=FATE / "default_credit_hetero_host.csv")
    p.add_argument("--mode", choices=("production", "debug"), default="production")
    args = p.parse_args(argv)
    ctx = mp.get_context("spawn")
    q: Any = ctx.Queue()
    ports = [_free_port(), _free_port()]
    parties: tuple[str | None, ...] = ("alice", "bob") if args.mode == "production" else (None,)
    procs = [ctx.Process(target=_session, args=(args, party, ports, q)) for party in parties]
    for pr in procs:
        pr.start()
    got: dict[str, dict[str, Any]] = {}
    ended = 0
    while ended < len(procs):
        try:
            r = q.get(timeout=5)
        except queue.Empty:
            if any(pr.is_alive() for pr in procs):
                continue
            raise SystemExit("a SecretFlow party exited early (its traceback is above)") from None
        if r is None:
            ended += 1
            continue
        party, row = r
        # the active party's row (its wall time, its view of the model); CPU seconds of every party process
        cpu = {**got.get(row["scheme"], {}).get("cpu_s_by_party", {}), party: row.pop("cpu_s")}
        if party in ("alice", "all"):
            got[row["scheme"]] = {**row, "cpu_s_by_party": cpu}
        else:
            got.setdefault(row["scheme"], {})["cpu_s_by_party"] = cpu
    results = list(got.values())
    for row in results:
        print(json.dumps(row), flush=True)
    for pr in procs:
        pr.join()
    return results


if __name__ == "__main__":
    main()
