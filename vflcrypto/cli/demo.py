"""``vflcrypto demo``: the main job on bundled example data, every party in-process.

Every protocol of the registry with a demo step (``SPEC.demo``, ordered by
``SPEC.demo_order``) runs it with a :class:`~vflcrypto.spec.DemoContext` and returns a
short summary dict; each step prints its own leakage audit.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from ..spec import DemoContext, number

__all__ = ["register"]


def run(args: argparse.Namespace) -> int:
    from ..protocols import registry

    out_dir = Path(args.out_dir) if args.out_dir else Path(tempfile.mkdtemp(prefix="vflcrypto-demo-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = DemoContext(workdir=out_dir, key_bits=args.key_bits, quick=args.quick, verbose=not args.json,
                      allow_insecure=args.allow_insecure)
    summary: dict[str, Any] = {}
    t_all = time.perf_counter()
    for spec in sorted((s for s in registry().values() if s.demo is not None), key=lambda s: s.demo_order):
        assert spec.demo is not None
        ctx.say(f"\n=== {spec.title} ===")
        t0 = time.perf_counter()
        result = spec.demo(ctx)
        result["seconds"] = round(time.perf_counter() - t0, 3)
        summary[spec.title] = result
    summary["total_seconds"] = round(time.perf_counter() - t_all, 3)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(f"\nDemo finished in {summary['total_seconds']:.1f} s; outputs in {out_dir}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="run the main job on bundled example data (no servers)")
    p.add_argument("--out-dir", help="where to write outputs (default: a new temporary directory)")
    p.add_argument("--key-bits", type=number(int, at_least=512), default=2048,
                   help="Paillier modulus size (default 2048)")
    p.add_argument("--allow-insecure", action="store_true", help="accept keys below 2048 bits (tests only)")
    p.add_argument("--quick", action="store_true", help="fewer iterations/trees (for tests)")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    p.set_defaults(handler=run)
