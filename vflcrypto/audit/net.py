"""``vflcrypto audit net``: the network runtime's own hello, run by two parties on loopback and audited."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ..runtime.channel import Transcript
from ..runtime.identity import PartyIdentity
from ..runtime.network import ConnectedParty, connect_party
from .ledger import AuditOutcome, audit

__all__ = ["audit_run"]


def audit_run(key_bits: int = 2048) -> Any:
    """``vflcrypto audit net``: two parties on loopback run the hello; audit what each saw.

    ``key_bits`` is unused (the handshake has no Paillier keys); kept for the common
    signature of audit functions.
    """
    import socket
    import tempfile

    from ..runtime.certs import write_dev_pki
    from ..runtime.partyconfig import load_party_config, render_config_toml

    del key_bits
    with tempfile.TemporaryDirectory(prefix="vflcrypto-net-audit-") as tmp:
        d = Path(tmp)
        _, creds = write_dev_pki(d, ["active", "passive-0"])
        ports = []
        for _ in creds:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
        parties = {n: (n.split("-")[0], f"127.0.0.1:{p}") for n, p in zip(creds, ports, strict=True)}
        (d / "parties.toml").write_text(render_config_toml(
            parties, ca="ca.pem", certs={n: (c.cert.name, c.key.name) for n, c in creds.items()},
            network={"connect_timeout": 10.0}))
        cfg = load_party_config(d / "parties.toml")
        transcript = Transcript()
        done: dict[str, ConnectedParty] = {}

        def run(name: str) -> None:
            spec = cfg.party(name)
            done[name] = connect_party(cfg, PartyIdentity.from_files(
                name, spec.cert_path, spec.key_path, cfg.ca_path), "audit", transcript=transcript)

        threads = [threading.Thread(target=run, args=(n,)) for n in parties]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for p in done.values():
            p.close()
    return AuditOutcome("net", audit(transcript))
