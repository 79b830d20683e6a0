"""``vflcrypto audit NAME``: what each role received in a run, and what really leaks.

Each protocol contributes ``audit_run(key_bits: int) -> AuditOutcome`` (see
:class:`vflcrypto.leakage.AuditOutcome`): it runs the protocol on example data, joins the
transcript with the declarations, and adds empirical checks. ``--security-md`` rewrites
the generated leakage tables in SECURITY.md from the declarations.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

__all__ = ["AUDITS", "load_all_protocols", "register"]

AUDITS: dict[str, str] = {
    "exchange": "vflcrypto.protocols.exchange:audit_run",
    "align": "vflcrypto.protocols.align:audit_run",
    "linreg": "vflcrypto.protocols.linreg:audit_run",
    "secureboost": "vflcrypto.protocols.secureboost:audit_run",
    "logreg": "vflcrypto.protocols.logreg:audit_run",
    "net": "vflcrypto.transport_grpc:audit_run",
}


def load_all_protocols() -> list[str]:
    """Import every protocol module present, so that all declarations are registered."""
    loaded = []
    for target in AUDITS.values():
        module_name = target.split(":")[0]
        try:
            importlib.import_module(module_name)
            loaded.append(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
    return loaded


def run(args: argparse.Namespace) -> int:
    if args.security_md:
        from ..leakage import render_security_md

        load_all_protocols()
        path = Path(args.security_md)
        text = path.read_text(encoding="utf-8")
        new = render_security_md(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"updated {path}")
        else:
            print(f"{path} is up to date")
        return 0
    if not args.name:
        print("vflcrypto audit: name a protocol: " + ", ".join(AUDITS), file=sys.stderr)
        return 2
    module_name, func = AUDITS[args.name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        print(f"vflcrypto audit: protocol {args.name!r} is not available yet", file=sys.stderr)
        return 2
    outcome = getattr(module, func)(key_bits=args.key_bits)
    if args.json:
        print(json.dumps(outcome.to_dict(), indent=2))
    else:
        print(outcome.to_text())
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("audit", help="per-role leakage of a protocol run (table or JSON)")
    p.add_argument("name", nargs="?", choices=sorted(AUDITS), help="protocol to run and audit")
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--json", action="store_true")
    p.add_argument("--security-md", metavar="FILE",
                   help="regenerate the leakage tables in FILE (SECURITY.md) from the declarations")
    p.set_defaults(handler=run)
