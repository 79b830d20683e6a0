"""SecretFlow's SPU PSI (C++) on the same CSV files as ``bench/psi_scale.py``: an outside anchor.

Optional and outside the test suite: SPU is not a dependency of vflcrypto. Install it in a
separate environment (``python -m venv /tmp/spuenv && /tmp/spuenv/bin/pip install spu``)
and run this script with that interpreter. Both parties run in their own process over a
loopback brpc link (no TLS); ``broadcast_result=True`` so both learn the intersection, as
vflcrypto's mode ``both``. The wall time covers reading the CSVs, the PSI and writing the
joined output, like ``psi_scale.py``'s job time.

Usage::

    /tmp/spuenv/bin/python bench/spu_psi_compare.py --files /tmp/scale/left-100000.csv /tmp/scale/right-100000.csv
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import time
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _party(rank: int, ports: list[int], protocol: str, inp: str, out: str, q: Any) -> None:
    import spu.libspu.link as link
    import spu.psi as psi

    desc = link.Desc()
    for i, port in enumerate(ports):
        desc.add_party(f"party{i}", f"127.0.0.1:{port}")
    desc.recv_timeout_ms = 600_000
    t0 = time.perf_counter()
    lctx = link.create_brpc(desc, rank)
    conf = psi.PsiExecuteConfig(
        protocol_conf=psi.PsiProtocolConfig(protocol=psi.parse_protocol(protocol), receiver_rank=0,
                                            broadcast_result=True,
                                            ecdh_params=psi.EcdhParams(curve=psi.EllipticCurveType.CURVE_25519)),
        input_params=psi.InputParams(path=inp, selected_keys=["id"], keys_unique=True),
        output_params=psi.OutputParams(path=out, disable_alignment=False))
    report = psi.psi_execute(conf, lctx)
    lctx.stop_link()
    q.put((rank, time.perf_counter() - t0, report.intersection_count))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", nargs=2, required=True, help="left and right CSV (an 'id' column)")
    p.add_argument("--protocols", nargs="+", default=["PROTOCOL_KKRT", "PROTOCOL_RR22", "PROTOCOL_ECDH"])
    args = p.parse_args(argv)
    for protocol in args.protocols:
        ports = [_free_port(), _free_port()]
        q: Any = mp.Queue()
        procs = [mp.Process(target=_party, args=(r, ports, protocol, args.files[r],
                                                 str(Path(args.files[r]).with_suffix(f".spu-{protocol}.csv")), q))
                 for r in (0, 1)]
        t0 = time.perf_counter()
        for pr in procs:
            pr.start()
        res = [q.get() for _ in procs]
        for pr in procs:
            pr.join()
        print(json.dumps({"protocol": protocol, "wall_s": round(time.perf_counter() - t0, 2),
                          "party_s": {f"party{r}": round(s, 2) for r, s, _ in sorted(res)},
                          "intersection": res[0][2]}), flush=True)


if __name__ == "__main__":
    main()
