"""The party configuration file: who takes part, where they listen, which certificates.

Every party of a run holds the *same* configuration file (a TOML document, read with
:mod:`tomllib`); only the private-key path differs per machine (it may be left out and
given on the command line). Relative paths are relative to the file. Example::

    [network]
    ca = "certs/ca.pem"            # the CA that signs the project's parties (and no one else)
    connect_timeout = 30.0         # s to wait for peers to come up (retried with backoff)
    timeout = 120.0                # s a receive waits before the peer counts as stalled
    deadline = 86400.0             # s a whole run may last (gRPC stream deadline)
    keepalive = 20.0               # s between HTTP/2 keepalive pings
    max_frame_mb = 1024            # largest frame accepted (reassembled from chunks)
    chunk_kb = 4096                # frames are split into chunks of at most this size
    run_id = "agreed"              # "agreed": hash of all parties' fresh nonces, or a fixed id

    [parties.active]
    role = "active"
    address = "10.0.0.1:50051"
    cert = "certs/active.pem"
    fingerprint = "sha256:9f2c…"   # optional when cert is given; checked against it if both
    key = "certs/active.key"       # only read by the party itself
    identity = "ed25519:3b6a…"     # optional: pinned Ed25519 identity public key (raw, hex)
    identity_key = "certs/active.identity.key"   # its private key; only read by the party

    [parties.passive-0]
    role = "passive"
    address = "10.0.0.2:50051"
    cert = "certs/passive-0.pem"

    [[links]]                      # optional: default every pair, the smaller name listens
    parties = ["active", "passive-0"]
    server = "active"

Identity keys (Ed25519) authenticate application-layer key agreements between two
parties (keyed-hash alignment, the pairwise masks of secure logistic regression); tasks
that need them refuse to start when a party involved has no ``identity`` pin.

The configuration digest (:attr:`PartyConfig.digest`) covers everything that must agree
between parties (names, roles, addresses, pins, links, limits); parties compare it in the
network hello so a party started with a different file is refused at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputDataError
from .certs import cert_fingerprint, load_certificate, parse_identity_pin

__all__ = [
    "Link",
    "NetworkSettings",
    "PartyConfig",
    "PartySpec",
    "guess_role",
    "load_party_config",
    "parse_party_config",
    "render_config_toml",
]


@dataclass(frozen=True)
class PartySpec:
    """One party: name, protocol role, listening address, pinned certificate."""

    name: str
    role: str
    address: str
    fingerprint: str
    cert_path: Path | None = None
    key_path: Path | None = None
    identity: bytes | None = None  # pinned Ed25519 identity public key (32 raw bytes)
    identity_key_path: Path | None = None

    @property
    def host(self) -> str:
        return self.address.rsplit(":", 1)[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])


@dataclass(frozen=True)
class Link:
    """A connection between two parties; ``server`` listens, the other dials."""

    server: str
    client: str


@dataclass(frozen=True)
class NetworkSettings:
    """Timeouts and limits shared by every link of a run."""

    connect_timeout: float = 30.0
    timeout: float = 120.0
    deadline: float = 86400.0
    keepalive: float = 20.0
    max_frame_bytes: int = 1 << 30
    chunk_bytes: int = 4 << 20
    run_id: str = "agreed"
    linger: float = 10.0


@dataclass(frozen=True)
class PartyConfig:
    """A parsed and checked party configuration."""

    parties: dict[str, PartySpec]
    links: tuple[Link, ...]
    ca_path: Path
    settings: NetworkSettings = field(default_factory=NetworkSettings)
    source: Path | None = None

    def party(self, name: str) -> PartySpec:
        try:
            return self.parties[name]
        except KeyError:
            raise InputDataError(
                f"party {name!r} is not in the configuration (parties: {sorted(self.parties)})"
            ) from None

    def links_of(self, name: str) -> list[Link]:
        """The links ``name`` takes part in."""
        return [lk for lk in self.links if name in (lk.server, lk.client)]

    def peers_of(self, name: str) -> list[str]:
        return sorted(lk.client if lk.server == name else lk.server for lk in self.links_of(name))

    def name_for_fingerprint(self, fingerprint: str) -> str | None:
        """The party whose pinned certificate has ``fingerprint`` (None if no party has it)."""
        for spec in self.parties.values():
            if spec.fingerprint == fingerprint:
                return spec.name
        return None

    @property
    def digest(self) -> str:
        """SHA-256 over everything the parties must agree on (not local key paths)."""
        s = self.settings
        doc = {
            "parties": {n: [p.role, p.address, p.fingerprint]
                        + ([p.identity.hex()] if p.identity is not None else [])
                        for n, p in sorted(self.parties.items())},
            "links": sorted([lk.server, lk.client] for lk in self.links),
            "settings": [s.timeout, s.deadline, s.max_frame_bytes, s.chunk_bytes, s.run_id],
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _num(table: dict[str, Any], key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InputDataError(f"{where}: {key} must be a positive number")
    return float(value)


def _path(base: Path, value: Any, where: str) -> Path:
    if not isinstance(value, str) or not value:
        raise InputDataError(f"{where} must be a path string")
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


def load_party_config(path: str | os.PathLike[str]) -> PartyConfig:
    """Read and check a party configuration (TOML); :class:`InputDataError` on any problem."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputDataError(f"cannot read party configuration {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputDataError(f"{path} is not valid TOML: {exc}") from None
    return parse_party_config(doc, base=path.parent, source=path)


def parse_party_config(doc: dict[str, Any], *, base: Path, source: Path | None = None) -> PartyConfig:
    """Check a configuration already parsed into a dict (see :func:`load_party_config`)."""
    where = str(source or "configuration")
    net = doc.get("network", {})
    if not isinstance(net, dict):
        raise InputDataError(f"{where}: [network] must be a table")
    unknown = set(net) - {"ca", "connect_timeout", "timeout", "deadline", "keepalive",
                          "max_frame_mb", "chunk_kb", "run_id", "linger"}
    if unknown:
        raise InputDataError(f"{where}: unknown [network] keys {sorted(unknown)}")
    if "ca" not in net:
        raise InputDataError(f"{where}: [network] needs ca = <CA certificate path>")
    run_id = net.get("run_id", "agreed")
    if not isinstance(run_id, str) or not run_id or len(run_id) > 64:
        raise InputDataError(f"{where}: run_id must be 'agreed' or a fixed id of at most 64 chars")
    settings = NetworkSettings(
        connect_timeout=_num(net, "connect_timeout", 30.0, where),
        timeout=_num(net, "timeout", 120.0, where),
        deadline=_num(net, "deadline", 86400.0, where),
        keepalive=_num(net, "keepalive", 20.0, where),
        max_frame_bytes=int(_num(net, "max_frame_mb", 1024, where) * (1 << 20)),
        chunk_bytes=int(_num(net, "chunk_kb", 4096, where) * 1024),
        run_id=run_id,
        linger=_num(net, "linger", 10.0, where),
    )
    if not 16 * 1024 <= settings.chunk_bytes <= 64 << 20:
        raise InputDataError(f"{where}: chunk_kb must be between 16 and 65536")
    raw_parties = doc.get("parties")
    if not isinstance(raw_parties, dict) or len(raw_parties) < 2:
        raise InputDataError(f"{where}: [parties.<name>] tables for at least two parties are needed")
    parties: dict[str, PartySpec] = {}
    for name, t in raw_parties.items():
        pw = f"{where}: [parties.{name}]"
        if not isinstance(t, dict):
            raise InputDataError(f"{pw} must be a table")
        unknown = set(t) - {"role", "address", "cert", "fingerprint", "key", "identity",
                            "identity_key"}
        if unknown:
            raise InputDataError(f"{pw}: unknown keys {sorted(unknown)}")
        for key in ("role", "address"):
            if not isinstance(t.get(key), str) or not t[key]:
                raise InputDataError(f"{pw} needs {key} = \"...\"")
        addr = t["address"]
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InputDataError(f"{pw}: address {addr!r} must be host:port")
        cert_path = _path(base, t["cert"], f"{pw} cert") if "cert" in t else None
        fp = t.get("fingerprint")
        if cert_path is not None:
            actual = cert_fingerprint(load_certificate(cert_path))
            if fp is not None and fp.lower() != actual:
                raise InputDataError(f"{pw}: certificate {cert_path} does not match the pinned fingerprint")
            fp = actual
        if not isinstance(fp, str) or not fp.lower().startswith("sha256:") or len(fp) != 71:
            raise InputDataError(f"{pw} needs cert = <path> or fingerprint = \"sha256:<64 hex>\"")
        key_path = _path(base, t["key"], f"{pw} key") if "key" in t else None
        ident = parse_identity_pin(t["identity"], pw) if "identity" in t else None
        ident_key = _path(base, t["identity_key"], f"{pw} identity_key") if "identity_key" in t else None
        parties[name] = PartySpec(name, t["role"], addr, fp.lower(), cert_path, key_path, ident,
                                  ident_key)
    fps = [p.fingerprint for p in parties.values()]
    if len(set(fps)) != len(fps):
        raise InputDataError(f"{where}: two parties pin the same certificate")
    idents = [p.identity for p in parties.values() if p.identity is not None]
    if len(set(idents)) != len(idents):
        raise InputDataError(f"{where}: two parties pin the same identity key")
    links = _parse_links(doc.get("links"), parties, where)
    return PartyConfig(parties, links, _path(base, net["ca"], f"{where}: [network] ca"),
                       settings, source)


def _parse_links(raw: Any, parties: dict[str, PartySpec], where: str) -> tuple[Link, ...]:
    names = sorted(parties)
    if raw is None:
        return tuple(Link(a, b) for i, a in enumerate(names) for b in names[i + 1:])
    if not isinstance(raw, list):
        raise InputDataError(f"{where}: [[links]] must be an array of tables")
    links: list[Link] = []
    seen: set[frozenset[str]] = set()
    for i, t in enumerate(raw):
        lw = f"{where}: links[{i}]"
        pair = t.get("parties") if isinstance(t, dict) else None
        if not (isinstance(pair, list) and len(pair) == 2 and all(p in parties for p in pair)
                and pair[0] != pair[1]):
            raise InputDataError(f"{lw}: parties must name two different configured parties")
        server = t.get("server", min(pair))
        if server not in pair:
            raise InputDataError(f"{lw}: server must be one of {pair}")
        key = frozenset(pair)
        if key in seen:
            raise InputDataError(f"{lw}: duplicate link {sorted(pair)}")
        seen.add(key)
        links.append(Link(server, pair[1] if server == pair[0] else pair[0]))
    return tuple(links)


def guess_role(party: str) -> str:
    """The role a party name suggests ("passive-1" -> "passive"); used for example files."""
    return party.rsplit("-", 1)[0] if party.rsplit("-", 1)[-1].isdigit() else party


def render_config_toml(parties: dict[str, tuple[str, str]], *, ca: str,
                       certs: dict[str, tuple[str, str | None]],
                       network: dict[str, float | int | str] | None = None,
                       identities: dict[str, tuple[str, str | None]] | None = None) -> str:
    """A configuration file as TOML text.

    ``parties`` maps name -> (role, "host:port"); ``certs`` maps name -> (certificate
    path, key path or None); ``network`` adds [network] settings; ``identities`` maps
    name -> ("ed25519:<hex>" pin, identity key path or None).
    """
    def q(s: str) -> str:
        return json.dumps(s)  # a JSON string is a valid TOML basic string

    lines = ["[network]", f"ca = {q(ca)}"]
    for k, v in (network or {}).items():
        lines.append(f"{k} = {q(v) if isinstance(v, str) else v!r}")
    for name, (role, address) in parties.items():
        cert, key = certs[name]
        lines += ["", f"[parties.{q(name)}]", f"role = {q(role)}", f"address = {q(address)}",
                  f"cert = {q(cert)}"]
        if key is not None:
            lines.append(f"key = {q(key)}")
        if identities and name in identities:
            pin, ikey = identities[name]
            lines.append(f"identity = {q(pin)}")
            if ikey is not None:
                lines.append(f"identity_key = {q(ikey)}")
    return "\n".join(lines) + "\n"
