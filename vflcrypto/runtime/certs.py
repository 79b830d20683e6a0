"""Development certificates for the network transport, and certificate fingerprints.

The network transport (:mod:`vflcrypto.runtime.network`) authenticates both ends of every
link with mutual TLS. Each party has an X.509 certificate whose subject alternative names
are ``DNS:<party name>`` (the name TLS checks, via a target-name override, so addresses
may change without re-issuing) and ``IP:127.0.0.1``; the party configuration pins every
party's certificate by its SHA-256 fingerprint, so a certificate the CA issued to anyone
else is refused even though it chains to the CA.

:func:`write_dev_pki` makes a throw-away CA plus one key and certificate per party with
ECDSA P-256 (supported by every gRPC/BoringSSL build). It is for tests and first runs:
the CA key sits next to the party keys on one machine. Production users bring their own
CA (one that signs only the project's parties) and keep each party's key on its machine.

Besides its TLS key, every party has an Ed25519 *identity key* (``<party>.identity.key``).
Protocols that authenticate a key agreement between two parties at the application layer
(keyed-hash alignment, the pairwise masks of secure logistic regression) sign with it;
the configuration pins each party's identity public key as ``identity = "ed25519:<hex>"``
(:func:`identity_pin`), next to the certificate fingerprint. It is a separate key because
the protocols' identity type is Ed25519 while TLS uses ECDSA P-256.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..data.files import PRIVATE, atomic_set, atomic_write_bytes
from ..errors import InputDataError

__all__ = [
    "DEV_VALIDITY_DAYS",
    "PartyCredentials",
    "cert_fingerprint",
    "identity_pin",
    "issue_party_cert",
    "load_certificate",
    "load_identity_key",
    "make_ca",
    "parse_identity_pin",
    "write_dev_pki",
]

DEV_VALIDITY_DAYS = 365


def cert_fingerprint(cert_pem_or_der: bytes | x509.Certificate) -> str:
    """``"sha256:<hex>"`` of the certificate's DER encoding (what the configuration pins)."""
    if isinstance(cert_pem_or_der, x509.Certificate):
        der = cert_pem_or_der.public_bytes(serialization.Encoding.DER)
    elif cert_pem_or_der.lstrip().startswith(b"-----BEGIN"):
        der = x509.load_pem_x509_certificate(cert_pem_or_der).public_bytes(serialization.Encoding.DER)
    else:
        der = bytes(cert_pem_or_der)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def load_certificate(path: str | os.PathLike[str]) -> x509.Certificate:
    """Read one PEM certificate; :class:`InputDataError` if it is missing or malformed."""
    try:
        return x509.load_pem_x509_certificate(Path(path).read_bytes())
    except OSError as exc:
        raise InputDataError(f"cannot read certificate {path}: {exc.strerror}") from None
    except ValueError:
        raise InputDataError(f"{path} is not a PEM certificate") from None


_PIN_PREFIX = "ed25519:"


def identity_pin(public: Ed25519PublicKey | bytes) -> str:
    """``"ed25519:<64 hex>"``: the raw identity public key as pinned in the configuration."""
    raw = public if isinstance(public, bytes) else public.public_bytes_raw()
    return _PIN_PREFIX + raw.hex()


def parse_identity_pin(pin: object, where: str) -> bytes:
    """The 32 raw public-key bytes of an ``identity = "ed25519:<hex>"`` pin."""
    if not isinstance(pin, str) or not pin.lower().startswith(_PIN_PREFIX) \
            or len(pin) != len(_PIN_PREFIX) + 64:
        raise InputDataError(f"{where}: identity must be \"ed25519:<64 hex>\"")
    try:
        raw = bytes.fromhex(pin[len(_PIN_PREFIX):])
        Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        raise InputDataError(f"{where}: identity is not a valid Ed25519 public key") from None
    return raw


def load_identity_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """Read a party's Ed25519 identity private key (PEM, PKCS#8, unencrypted)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputDataError(f"cannot read identity key {path}: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise InputDataError(f"{path} is not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InputDataError(f"{path}: the identity key must be an Ed25519 key")
    return key


def _pem_key(key: ec.EllipticCurvePrivateKey | Ed25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_ca(common_name: str = "vflcrypto development CA",
            days: int = DEV_VALIDITY_DAYS) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed P-256 CA that may only sign end-entity certificates (path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue_party_cert(
    party: str,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    *,
    ips: tuple[str, ...] = ("127.0.0.1",),
    days: int = DEV_VALIDITY_DAYS,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A P-256 key and a certificate for ``party`` (SAN ``DNS:<party>`` + ``ips``), usable
    as TLS server *and* client (each party listens on some links and dials on others)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    san = [x509.DNSName(party)] + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, party)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _write_private(path: Path, data: bytes) -> None:
    """Write a private key readable by its owner only: mode 0600 from the temporary file's
    creation on (never wider, even for a moment), then exactly 0600 whatever the umask."""
    atomic_write_bytes(path, data, permissions=PRIVATE, exact_mode=0o600)


def _write_public(path: Path, data: bytes) -> None:
    atomic_write_bytes(path, data, exact_mode=0o644)


@dataclass(frozen=True)
class PartyCredentials:
    """Paths of one party's files written by :func:`write_dev_pki`, plus the pin."""

    name: str
    cert: Path
    key: Path
    fingerprint: str
    identity_key: Path
    identity: str  # "ed25519:<hex>" pin of the identity public key


def write_dev_pki(out_dir: str | os.PathLike[str], parties: list[str] | tuple[str, ...], *,
                  ips: tuple[str, ...] = ("127.0.0.1",),
                  days: int = DEV_VALIDITY_DAYS) -> tuple[Path, dict[str, PartyCredentials]]:
    """Write ``ca.pem``, ``ca.key``, ``<party>.pem``/``<party>.key`` and the Ed25519
    ``<party>.identity.key`` into ``out_dir``.

    Keys are written with mode 0600, all files or none (:func:`~vflcrypto.data.files.atomic_set`).
    Returns the CA certificate path and each party's credentials (with the fingerprint and identity
    pin for the configuration). Development only.
    """
    if not parties:
        raise InputDataError("name at least one party")
    if len(set(parties)) != len(parties):
        raise InputDataError("party names must be unique")
    for p in parties:
        if not p or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in p) \
                or p.startswith("-") or p.endswith("-"):
            raise InputDataError(
                f"party name {p!r} must be a DNS label: lower-case letters, digits and inner '-'")
    out = Path(out_dir)
    ca_key, ca_cert = make_ca(days=days)
    creds: dict[str, PartyCredentials] = {}
    with atomic_set():
        _write_private(out / "ca.key", _pem_key(ca_key))
        _write_public(out / "ca.pem", _pem_cert(ca_cert))
        for p in parties:
            key, cert = issue_party_cert(p, ca_key, ca_cert, ips=ips, days=days)
            _write_private(out / f"{p}.key", _pem_key(key))
            _write_public(out / f"{p}.pem", _pem_cert(cert))
            ident = Ed25519PrivateKey.generate()
            _write_private(out / f"{p}.identity.key", _pem_key(ident))
            creds[p] = PartyCredentials(p, out / f"{p}.pem", out / f"{p}.key", cert_fingerprint(cert),
                                        out / f"{p}.identity.key", identity_pin(ident.public_key()))
    return out / "ca.pem", creds
