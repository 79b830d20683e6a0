"""``vflcrypto demo``: the main job on bundled example data, every party in-process.

The demo is a sequence of steps; each protocol contributes one ``demo_step`` function
(``protocols.<module>:demo_step``) that takes a :class:`DemoContext` and returns a short
summary dict. Steps run in the order of :data:`STEPS`, each followed by its leakage audit.
"""

from __future__ import annotations

import argparse
import importlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from ..spec import DemoContext

__all__ = ["STEPS", "register"]

# (title, "module:function"); a step whose module is not present yet is skipped.
STEPS: tuple[tuple[str, str], ...] = (
    ("Entity alignment (ECDH PSI)", "vflcrypto.protocols.align:demo_step"),
    ("Encrypted gradient exchange (Paillier)", "vflcrypto.protocols.exchange:demo_step"),
    ("Secure federated linear regression", "vflcrypto.protocols.linreg:demo_step"),
    ("SecureBoost", "vflcrypto.protocols.secureboost:demo_step"),
    ("Vertical logistic regression (plain vs secure)", "vflcrypto.protocols.logreg:demo_step"),
)


def _load(target: str) -> Any | None:
    module_name, func = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None
        raise
    return getattr(module, func, None)


def run(args: argparse.Namespace) -> int:
    out_dir = Path(args.out_dir) if args.out_dir else Path(tempfile.mkdtemp(prefix="vflcrypto-demo-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = DemoContext(workdir=out_dir, key_bits=args.key_bits, quick=args.quick, verbose=not args.json)
    summary: dict[str, Any] = {}
    t_all = time.perf_counter()
    for title, target in STEPS:
        step = _load(target)
        if step is None:
            continue
        ctx.say(f"\n=== {title} ===")
        t0 = time.perf_counter()
        result = step(ctx)
        result["seconds"] = round(time.perf_counter() - t0, 3)
        summary[title] = result
    summary["total_seconds"] = round(time.perf_counter() - t_all, 3)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(f"\nDemo finished in {summary['total_seconds']:.1f} s; outputs in {out_dir}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="run the main job on bundled example data (no servers)")
    p.add_argument("--out-dir", help="where to write outputs (default: a new temporary directory)")
    p.add_argument("--key-bits", type=int, default=2048, help="Paillier modulus size (default 2048)")
    p.add_argument("--quick", action="store_true", help="fewer iterations/trees (for tests)")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    p.set_defaults(handler=run)
