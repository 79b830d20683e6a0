"""Network transport benchmark: alignment over mTLS gRPC vs in-process, and raw throughput.

    .venv/bin/python bench/transport_bench.py                      # full: 20k IDs, 100 MB block
    .venv/bin/python bench/transport_bench.py --ids 500 --block-mb 5   # smoke test

Reports, for ECDH alignment on the same IDs: wall time and bytes of the in-process run
(``vflcrypto.protocols.align.run_local``) and of the same roles over loopback gRPC with mutual
TLS (each party in its own thread here; the process tests run them as processes), and
the throughput of one large ciphertext-sized block through a :class:`GrpcTransport`
(target >= 100 MB/s on loopback).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _connect(d: Path, names: list[str], chunk_kb: int = 4096) -> dict[str, Any]:
    from vflcrypto.runtime.certs import write_dev_pki
    from vflcrypto.runtime.identity import PartyIdentity
    from vflcrypto.runtime.network import connect_party
    from vflcrypto.runtime.partyconfig import load_party_config, render_config_toml

    _, creds = write_dev_pki(d, names)
    parties = {n: (n.split("-")[0], f"127.0.0.1:{_free_port()}") for n in names}
    (d / "parties.toml").write_text(render_config_toml(
        parties, ca="ca.pem", certs={n: (c.cert.name, c.key.name) for n, c in creds.items()},
        network={"connect_timeout": 20.0, "timeout": 300.0, "chunk_kb": chunk_kb}))
    cfg = load_party_config(d / "parties.toml")
    out: dict[str, Any] = {}

    def run(n: str) -> None:
        spec = cfg.party(n)
        out[n] = connect_party(cfg, PartyIdentity.from_files(n, spec.cert_path, spec.key_path,
                                                             cfg.ca_path), "bench")

    ts = [threading.Thread(target=run, args=(n,)) for n in names]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def bench_alignment(n_ids: int) -> dict[str, Any]:
    from vflcrypto.protocols import align as al

    from vflcrypto.runtime.channel import run_parties

    a = [f"id{i}" for i in range(n_ids)]
    b = [f"id{i}" for i in range(n_ids // 2, n_ids + n_ids // 2)]
    t0 = time.perf_counter()
    local = al.run_local(a, b)
    t_local = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        parties = _connect(Path(tmp), ["active", "passive-0"])
        t0 = time.perf_counter()
        res = run_parties({
            "active": lambda: al.run_active(parties["active"].channels, a),
            "passive-0": lambda: al.run_passive(parties["passive-0"].channels, b),
        })
        t_net = time.perf_counter() - t0
        net_bytes = sum(e.nbytes for p in parties.values() for e in p.transcript.sent()
                        if not e.kind.startswith("net."))
        for p in parties.values():
            p.close()
    assert res["active"].size == local.results["active"].size
    return {"ids_per_party": n_ids, "intersection": res["active"].size,
            "local_seconds": round(t_local, 3), "network_seconds": round(t_net, 3),
            "local_bytes": local.transcript.total_bytes, "network_bytes": net_bytes}


def bench_block(mb: int, chunk_kb: int = 4096) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        parties = _connect(Path(tmp), ["active", "passive-0"], chunk_kb)
        ta = parties["active"].network.transports["passive-0"]
        tb = parties["passive-0"].network.transports["active"]
        block = os.urandom(1 << 20) * mb
        t0 = time.perf_counter()
        th = threading.Thread(target=ta.send_frame, args=(block,))
        th.start()
        got = tb.recv_frame(300)
        th.join()
        dt = time.perf_counter() - t0
        assert len(got) == len(block)
        for p in parties.values():
            p.close()
    return {"block_mb": mb, "chunk_kb": chunk_kb, "seconds": round(dt, 3),
            "mb_per_s": round(len(block) / dt / 1e6, 1), "load_average": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ids", type=int, default=20_000)
    ap.add_argument("--block-mb", type=int, default=100)
    ap.add_argument("--chunk-kb", type=int, default=4096, help="link chunk size (configuration chunk_kb)")
    ap.add_argument("--block-only", action="store_true", help="skip the alignment comparison")
    args = ap.parse_args(argv)
    out = {} if args.block_only else {"alignment": bench_alignment(args.ids)}
    out["block"] = bench_block(args.block_mb, args.chunk_kb)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
