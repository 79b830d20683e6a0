"""``vflcrypto certs``: a development CA and per-party certificates (tests and first runs).

Writes ``ca.pem``/``ca.key``, ``<party>.pem``/``<party>.key`` and the Ed25519 identity
key ``<party>.identity.key`` (keys mode 0600) plus ``parties.example.toml``, a
configuration for a run on one machine (loopback addresses, consecutive ports) with every
certificate and identity public key pinned. Production users bring their own CA and
keys; see SECURITY.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..spec import number

__all__ = ["register"]


def run(args: argparse.Namespace) -> int:
    from ..data.files import atomic_set, atomic_write_text
    from ..runtime.certs import write_dev_pki
    from ..runtime.partyconfig import guess_role, render_config_toml

    out = Path(args.out)
    with atomic_set():  # every key, certificate and the configuration, or none of them
        ca, creds = write_dev_pki(out, args.party, ips=tuple(args.ip or ["127.0.0.1"]))
        parties = {n: (guess_role(n), f"127.0.0.1:{args.base_port + i}") for i, n in enumerate(args.party)}
        example = render_config_toml(parties, ca="ca.pem",
                                     certs={n: (f"{n}.pem", f"{n}.key") for n in args.party},
                                     identities={n: (c.identity, c.identity_key.name)
                                                 for n, c in creds.items()})
        atomic_write_text(out / "parties.example.toml", example)
    info = {"ca": str(ca), "config": str(out / "parties.example.toml"),
            "parties": {n: {"cert": str(c.cert), "key": str(c.key), "fingerprint": c.fingerprint,
                            "identity_key": str(c.identity_key), "identity": c.identity}
                        for n, c in creds.items()}}
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for n, c in creds.items():
            print(f"{n:<16} {c.cert}  {c.fingerprint}")
        print(f"example configuration: {out / 'parties.example.toml'}")
        print("development certificates: for tests and first runs only", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("certs", help="generate a development CA and per-party certificates")
    p.add_argument("--out", required=True, help="directory to write into")
    p.add_argument("--party", action="append", required=True, metavar="NAME",
                   help="party name (repeat), e.g. --party active --party passive-0")
    p.add_argument("--ip", action="append", default=None,
                   help="IP address SAN for every certificate (repeat; default 127.0.0.1)")
    p.add_argument("--base-port", type=number(int, at_least=1, at_most=65535), default=50051,
                   help="first port in parties.example.toml (default 50051)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)
