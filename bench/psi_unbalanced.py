"""Unbalanced PSI with an offline cache: the large party's offline time, the small party's online time.

For each ``--large`` size ``N`` and ``--small`` size ``n`` (half of the small IDs are in the large
set) it measures, in one process (both parties as threads over in-process channels; the OPRF
work on the process pool, ``VFLCRYPTO_WORKERS`` workers):

* ``offline_s``: canonicalise the large set, evaluate the OPRF over it, write the cache file
  (compressed, owner-only, HMAC-tagged); the cache file's size;
* ``export_s`` and ``transfer_bytes``: the one-time transfer for up to ``n`` small-set IDs
  (its truncation ``value_bytes`` and false-match bound), as a compressed file;
* ``online_s``: the online run with the transfer already held (blind, evaluate, unblind,
  look up), the bytes on the wire, and a check of the intersection size;
* ``update_s``: adding ``--added`` (a fraction of N) new IDs to the cache, and
  ``online_delta_s``: the next online run, which ships the delta first.

The machine's load (``/proc/loadavg``, as ``uptime`` prints it) is reported before and after.

Measured on this 2-core machine shared with other jobs (``VFLCRYPTO_WORKERS=2``):

=========  ==========  ========  ==============  =========================  ===============  ============
large N    offline     cache     transfer        online: 10³ / 10⁴ / 10⁵    update +10⁴ IDs  load average
=========  ==========  ========  ==============  =========================  ===============  ============
10⁶        103 s       14.1 MB   8.1 MB (10 B)   0.20 s / 2.3 s / 16.8 s    1.9 s            11-13
10⁷        553 s       136 MB    76 MB (10 B)    – / 2.9 s / 26.5 s         12.8 s           8-11
=========  ==========  ========  ==============  =========================  ===============  ============

Per ID on one core (load average 5): offline 70 µs; online 87 µs to blind (hash, X25519, Legendre symbol),
54 µs for the large party, 48 µs to unblind: 10⁸ large IDs are about 2 core-hours offline, and 10⁵ small IDs
about 19 core-seconds online, whatever the large set's size (X25519 through ``cryptography``, one call per ID).

Usage::

    .venv/bin/python bench/psi_unbalanced.py --large 1000000 --small 1000 10000 100000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _small_set(large: list[str], n_small: int) -> list[str]:
    """Half of the small set from the large set (spread over it), half outside it."""
    half = n_small // 2
    return large[:: max(1, len(large) // max(1, half))][:half] + [f"x{i:011d}" for i in range(n_small - half)]


def run_one(n_large: int, smalls: list[int], added: float, workdir: Path) -> list[dict[str, Any]]:
    """One offline build of ``n_large`` IDs, then an online run (and a delta run) for each small size."""
    from vflcrypto.protocols.upsi import store
    from vflcrypto.protocols.upsi.messages import SMALL
    from vflcrypto.protocols.upsi.roles import run_local

    from vflcrypto.psi import primitives as psi

    load_before = _load()
    large = [f"{i:012d}" for i in range(n_large)]
    key = store.new_key()
    t0 = time.perf_counter()
    canon = psi.canonicalize_ids(large)
    cache = store.build_cache(key, canon.encoded)
    store.save_cache(workdir / "large.cache", cache, key)
    offline = time.perf_counter() - t0
    cache_bytes = (workdir / "large.cache").stat().st_size
    n_add = max(1, int(n_large * added))
    t0 = time.perf_counter()
    cache2, got = store.update_cache(cache, key, psi.canonicalize_ids([f"y{i:011d}" for i in range(n_add)]).encoded)
    store.save_cache(workdir / "large.cache", cache2, key)
    update = time.perf_counter() - t0
    rows = []
    for n_small in smalls:
        small = _small_set(large, n_small)
        half = n_small // 2
        t0 = time.perf_counter()
        transfer = store.export_transfer(cache, n_small)
        store.save_transfer(workdir / "small.transfer", transfer)
        export = time.perf_counter() - t0
        sc = psi.canonicalize_ids(small)
        run = run_local([], sc, key=key, cache=cache, transfer=transfer)
        res = run.results[SMALL]
        if res.size != half or res.received_values:
            raise SystemExit(f"wrong result: {res.size} common (expected {half}), {res.received_values} values sent")
        run2 = run_local([], sc, key=key, cache=cache2, transfer=transfer)
        if run2.results[SMALL].received_values != got or run2.results[SMALL].size != half:
            raise SystemExit("the delta run is wrong")
        rows.append({
            "large": n_large, "small": n_small, "workers": os.environ.get("VFLCRYPTO_WORKERS", "default"),
            "offline_s": round(offline, 2), "cache_bytes": cache_bytes,
            "export_s": round(export, 2), "value_bytes": transfer.value_bytes,
            "false_match_bound": transfer.false_match_bound,
            "transfer_bytes": (workdir / "small.transfer").stat().st_size,
            "online_s": round(run.seconds, 3), "online_wire_bytes": run.transcript.total_bytes,
            "intersection": res.size, "added": got, "update_s": round(update, 2),
            "online_delta_s": round(run2.seconds, 3), "delta_wire_bytes": run2.transcript.total_bytes,
            "load_before": load_before, "load_after": _load(),
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--large", type=int, nargs="+", default=[1_000_000])
    p.add_argument("--small", type=int, nargs="+", default=[10_000], help="small-set sizes (one cache for all)")
    p.add_argument("--added", type=float, default=0.01, help="fraction of the large set added by the update")
    p.add_argument("--workdir", help="directory for the cache and transfer files (default: a temporary one)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        for n in args.large:
            for row in run_one(n, args.small, args.added, work):
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
