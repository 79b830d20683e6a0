"""Party identities for the network runtime: a party's certificate and key, and TLS diagnosis.

A :class:`PartyIdentity` is what a party process proves itself with on every link
(:mod:`vflcrypto.runtime.grpc_link`); :func:`diagnose_tls` turns a failed handshake into one
line that names the cause (wrong CA, wrong name, expired certificate).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ..errors import (
    InputDataError,
)
from .certs import cert_fingerprint

__all__ = ["PartyIdentity", "diagnose_tls"]


# --------------------------------------------------------------------------- identity


@dataclass(frozen=True)
class PartyIdentity:
    """This party's TLS credentials (PEM) and the CA certificate it trusts."""

    name: str
    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes

    @classmethod
    def from_files(cls, name: str, cert: Any, key: Any, ca: Any) -> PartyIdentity:
        out = []
        for label, p in (("certificate", cert), ("key", key), ("CA certificate", ca)):
            if p is None:
                raise InputDataError(f"{name}: no {label} path configured")
            try:
                out.append(Path(p).read_bytes())
            except OSError as exc:
                raise InputDataError(f"cannot read {label} {p}: {exc.strerror}") from None
        ident = cls(name, out[0], out[1], out[2])
        ident.check_key_matches(f"the key {key}", f"the certificate {cert}")
        return ident

    def check_key_matches(self, key_what: str = "its key", cert_what: str = "its certificate") -> None:
        """This party's own misconfiguration, named before any peer is contacted: a key of another certificate."""
        try:
            key = serialization.load_pem_private_key(self.key_pem, password=None)
            cert = x509.load_pem_x509_certificate(self.cert_pem)
        except (ValueError, TypeError) as exc:
            raise InputDataError(f"{self.name}: cannot parse {key_what} or {cert_what}: {exc}") from None
        spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
            raise InputDataError(f"{self.name}: {key_what} does not belong to {cert_what}: this party's own "
                                 "configuration pairs a certificate with another party's key")

    @property
    def fingerprint(self) -> str:
        return cert_fingerprint(self.cert_pem)

    def sign(self, data: bytes) -> bytes:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise InputDataError(f"{self.name}: the party key must be an ECDSA key")
        return key.sign(data, ec.ECDSA(hashes.SHA256()))

    @property
    def cert_der(self) -> bytes:
        return x509.load_pem_x509_certificate(self.cert_pem).public_bytes(serialization.Encoding.DER)


def diagnose_tls(identity: PartyIdentity, peer: str, address: str, timeout: float = 3.0) -> str | None:
    """Which side's certificate a failed TLS handshake with ``peer`` is about (gRPC only says "Socket closed").

    A plain TLS 1.3 handshake with this party's credentials, checking the peer like gRPC
    does: if this side cannot verify the peer's certificate, it says so; if the peer
    answers with a certificate alert, the peer rejected this party's certificate. ``None``
    when the probe cannot tell (the peer is down, or the handshake works).
    """
    import socket
    import ssl
    import tempfile

    host, _, port = address.rpartition(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["h2"])
    try:
        ctx.load_verify_locations(cadata=identity.ca_pem.decode("ascii"))
        with tempfile.TemporaryDirectory() as d:  # the ssl module loads a client key from files only
            cert, key = Path(d) / "c.pem", Path(d) / "k.pem"
            cert.write_bytes(identity.cert_pem)
            key.touch(mode=0o600)
            key.write_bytes(identity.key_pem)
            ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, ValueError, OSError):
        return None
    rejected = (f"{peer} closed the link right after the handshake: it rejected {identity.name}'s certificate "
                f"(not signed by the CA {peer} trusts, or not the one it pins for {identity.name!r})")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw, \
                ctx.wrap_socket(raw, server_hostname=peer) as tls:
            tls.settimeout(timeout)
            tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")  # the HTTP/2 preface: the server now checks us
            if tls.recv(1) == b"":  # a healthy gRPC server answers with its SETTINGS frame
                return rejected
    except ssl.SSLCertVerificationError as exc:
        return (f"{identity.name} does not trust {peer}'s certificate ({exc.verify_message}): it is not signed by "
                f"the CA in {identity.name}'s configuration, or not issued to {peer!r}")
    except ssl.SSLError as exc:
        reason = (exc.reason or str(exc)).lower()
        if "alert" in reason and any(w in reason for w in ("unknown_ca", "certificate", "bad_certificate",
                                                            "access_denied", "decrypt")):
            return f"{rejected} (TLS alert {exc.reason})"
        if "eof" in reason:
            return rejected
        return None
    except (OSError, ValueError):
        return None
    return None
