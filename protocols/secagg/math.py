"""The parameters and the pure pieces of secure aggregation.

Fixed point on the ring Z_{2^64}; the neighbour graph (complete, or SecAgg+'s sparse
Harary graph); the signed key advertisement; the share encryption (AES-256-GCM under an
X25519 key, bound to sender, receiver, run and round); the masks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from vflcrypto.errors import EncodingOverflowError, InputDataError, InsecureParameterError, ProtocolError
from vflcrypto.he.encoding import exceeds_bits
from vflcrypto.sharing.masking import agree_seed, ring_dtype, ring_mask, seed_context
from vflcrypto.sharing.shamir import SHARE_BYTES
from vflcrypto.spec import option

__all__ = ["RING_BITS", "SecAggConfig", "advert_payload", "check_contexts", "context_digest", "decode_ring",
           "decrypt_shares", "encode_ring", "encrypt_shares", "expand_pair", "neighbours", "pair_context", "pair_mask",
           "reveals", "self_mask", "sign_advert", "verify_advert"]

RING_BITS = 64
_AD_DOMAIN = b"vflcrypto.secagg.advertise.v2|"
_CONTEXT_DOMAIN = b"vflcrypto.secagg.context.v1|"
_SHARE_INFO = b"vflcrypto.secagg.share_key.v1|"


@dataclass(frozen=True)
class SecAggConfig:
    """Public parameters of one aggregation (every client checks them against its own)."""

    threshold: int | None = option(None, "shares needed to unmask (default: a strict majority of a neighbourhood)")
    ring_bits: int = option(64, "bits of the aggregation ring Z_2^b (32 halves the bytes of a masked input)",
                            choices=(32, 64))
    frac_bits: int = option(24, "fractional bits of the fixed-point encoding")
    value_bits: int = option(40, "bound: every |value| * 2^frac_bits < 2^value_bits (checked by each client)")
    degree: int | None = option(None, "SecAgg+: neighbours per client (even; default: every other client)")
    allow_low_threshold: bool = option(False, "accept a threshold <= half a neighbourhood (weaker: a minority of "
                                              "colluding clients can unmask one input)")
    seed: int = option(0, "public seed of the sparse neighbour graph")

    def validate(self) -> None:
        """What :meth:`check` refuses whatever the number of clients (run as soon as the flags are parsed)."""
        if not 0 <= self.frac_bits < self.value_bits or self.ring_bits not in (32, 64):
            raise InputDataError("need 0 <= frac_bits < value_bits and a ring of 32 or 64 bits")
        if self.degree is not None and (self.degree % 2 or self.degree < 2):
            raise InputDataError(f"--degree (SecAgg+ neighbours per client) must be even and at least 2, "
                                 f"got {self.degree}")
        if self.threshold is not None and self.threshold < 1:
            raise InputDataError(f"--threshold must be at least 1, got {self.threshold}")

    def check(self, n_clients: int) -> tuple[int, int]:
        """(neighbourhood size including the client, threshold): refuse parameters that are insecure or unusable."""
        if n_clients < 2:
            raise InputDataError("secure aggregation needs at least 2 clients")
        if not 0 <= self.frac_bits < self.value_bits or self.ring_bits not in (32, 64):
            raise InputDataError("need 0 <= frac_bits < value_bits and a ring of 32 or 64 bits")
        # the sum of n values of value_bits (signed) must not wrap the signed ring
        if self.value_bits + math.ceil(math.log2(n_clients)) + 1 > self.ring_bits:
            raise InsecureParameterError(f"Z_2^{self.ring_bits} is too small for {n_clients} values of "
                                         f"{self.value_bits} bits: the sum would wrap (lower value_bits)")
        k = n_clients - 1 if self.degree is None else self.degree
        if self.degree is not None and (k % 2 or not 2 <= k <= n_clients - 1):
            raise InputDataError(f"--degree (SecAgg+ neighbours per client) must be even and between 2 and "
                                 f"{n_clients - 1} with {n_clients} clients, got {k}" if n_clients > 2 else
                                 f"--degree needs at least 3 clients (SecAgg+'s sparse graph); with {n_clients} "
                                 "clients every client is the other's neighbour: leave --degree out")
        size = k + 1
        t = self.threshold if self.threshold is not None else size // 2 + 1
        if not 1 <= t <= size:
            raise InputDataError(f"threshold {t} must lie in 1..{size} (a neighbourhood)")
        if 2 * t <= size and not self.allow_low_threshold:
            raise InsecureParameterError(f"threshold {t} <= half a neighbourhood of {size}: set allow_low_threshold "
                                         "to accept that so few colluding clients can unmask an input")
        return size, t


def encode_ring(x: np.ndarray, frac_bits: int, value_bits: int, ring_bits: int = RING_BITS) -> np.ndarray:
    """Fixed point mod 2^ring_bits (two's complement); :class:`EncodingOverflowError` past ``value_bits``."""
    x = np.asarray(x, np.float64)
    if not np.isfinite(x).all():
        raise EncodingOverflowError("values to aggregate must be finite")
    q = np.rint(np.ldexp(x, frac_bits))
    if exceeds_bits(q, value_bits):
        raise EncodingOverflowError(f"a value exceeds the bound 2^{value_bits - frac_bits} of the aggregation")
    return q.astype(np.int64).view(np.uint64).astype(ring_dtype(ring_bits))  # mod 2^32 truncates


def decode_ring(v: np.ndarray, frac_bits: int) -> np.ndarray:
    """Inverse of :func:`encode_ring` (for a sum: the signed residue scaled back); the ring from the dtype."""
    v = np.asarray(v)
    signed = v.view(np.int64) if v.dtype == np.uint64 else v.astype(np.uint32).view(np.int32)
    return np.ldexp(signed.astype(np.float64), -frac_bits)


def neighbours(names: list[str], degree: int | None, seed: int) -> dict[str, list[str]]:
    """Each client's neighbours: all others, or SecAgg+'s Harary graph (degree/2 each side on a public ring)."""
    n = len(names)
    if degree is None or degree >= n - 1:
        return {u: [v for v in names if v != u] for u in names}
    order = [names[i] for i in np.random.default_rng(seed).permutation(n)]  # public graph, not secret
    pos = {u: i for i, u in enumerate(order)}
    half = degree // 2
    return {u: sorted(order[(pos[u] + d) % n] for d in range(-half, half + 1) if d) for u in names}


def advert_payload(run_id: str, round_: int, name: str, c_pk: bytes, s_pk: bytes, context: bytes) -> bytes:
    parts = (run_id.encode(), str(round_).encode(), name.encode(), c_pk, s_pk, context)
    return _AD_DOMAIN + b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def sign_advert(identity: Ed25519PrivateKey, run_id: str, round_: int, name: str, c_pk: bytes,
                s_pk: bytes, context: bytes) -> bytes:
    return identity.sign(advert_payload(run_id, round_, name, c_pk, s_pk, context))


def verify_advert(identity: bytes, signature: bytes, run_id: str, round_: int, name: str, c_pk: bytes,
                  s_pk: bytes, context: bytes) -> None:
    """The advertisement of ``name`` must carry its pinned identity's signature (else :class:`ProtocolError`)."""
    try:
        Ed25519PublicKey.from_public_bytes(identity).verify(
            signature, advert_payload(run_id, round_, name, c_pk, s_pk, context))
    except (InvalidSignature, ValueError):
        raise ProtocolError(f"the keys advertised for {name} are not signed by its pinned identity") from None


def context_digest(setup: Any, extra: bytes = b"") -> bytes:
    """SHA-256 of what a client aggregates in: the round's setup (a dataclass) and ``extra``.

    ``extra`` is what the embedding protocol sent the client before this round (``hfl``:
    the SHA-256 of the global model it trains from). Each client signs its digest into its
    advertisement and compares its neighbours' with its own (:func:`check_contexts`): a
    server that sends different models or setups to different clients, so that the sum
    isolates one client's update (Pasquini, Francati and Ateniese, CCS 2022), is detected
    before any masked input exists.
    """
    fields = dataclasses.asdict(setup)
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(_CONTEXT_DOMAIN + len(canonical).to_bytes(4, "big") + canonical + extra).digest()


def check_contexts(me: str, mine: bytes, names: Sequence[str], contexts: Sequence[bytes]) -> None:
    """Every neighbour's signed context digest must equal this client's own (else :class:`ProtocolError`)."""
    other = [n for n, c in zip(names, contexts, strict=True) if c != mine]
    if other:
        raise ProtocolError(f"{me}: {', '.join(other)} signed a different global model or setup for this round than "
                            f"{me} received (context digest {mine.hex()[:12]}...): the server sent inconsistent "
                            "models; the round is aborted")


def _share_key(c_sk: X25519PrivateKey, peer_pk: bytes, a: str, b: str, run_id: str, round_: int) -> bytes:
    shared = c_sk.exchange(X25519PublicKey.from_public_bytes(peer_pk))
    lo, hi = sorted((a, b))
    info = _SHARE_INFO + f"{lo}|{hi}|{run_id}|{round_}".encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)


def _aad(sender: str, receiver: str, run_id: str, round_: int) -> bytes:
    return f"vflcrypto.secagg.share|{sender}|{receiver}|{run_id}|{round_}".encode()


def encrypt_shares(c_sk: X25519PrivateKey, peer_pk: bytes, sender: str, receiver: str, run_id: str, round_: int,
                   s_share: int, b_share: int) -> bytes:
    """The sender's two shares for ``receiver``, AES-256-GCM (key from X25519; the AAD names both, run and round)."""
    key = _share_key(c_sk, peer_pk, sender, receiver, run_id, round_)
    nonce = os.urandom(12)
    pt = s_share.to_bytes(SHARE_BYTES, "big") + b_share.to_bytes(SHARE_BYTES, "big")
    return nonce + AESGCM(key).encrypt(nonce, pt, _aad(sender, receiver, run_id, round_))


def decrypt_shares(c_sk: X25519PrivateKey, peer_pk: bytes, sender: str, receiver: str, run_id: str, round_: int,
                   ct: bytes) -> tuple[int, int]:
    """The two shares ``sender`` encrypted for ``receiver``; :class:`ProtocolError` if tampered or misaddressed."""
    key = _share_key(c_sk, peer_pk, sender, receiver, run_id, round_)
    try:
        pt = AESGCM(key).decrypt(ct[:12], ct[12:], _aad(sender, receiver, run_id, round_))
    except (InvalidTag, ValueError):
        raise ProtocolError(f"the shares from {sender} do not decrypt for {receiver} (tampered, replayed or "
                            "misaddressed)") from None
    if len(pt) != 2 * SHARE_BYTES:
        raise ProtocolError(f"the shares from {sender} have the wrong length")
    return int.from_bytes(pt[:SHARE_BYTES], "big"), int.from_bytes(pt[SHARE_BYTES:], "big")


def pair_mask(s_sk: X25519PrivateKey, peer_s_pk: bytes, me: str, peer: str, run_id: str, round_: int,
              length: int, ring_bits: int = RING_BITS) -> np.ndarray:
    """The pairwise mask as ``me`` applies it: + for the smaller name, − for the other (they cancel in the sum)."""
    seed = agree_seed(s_sk, X25519PublicKey.from_public_bytes(peer_s_pk), pair_context(me, peer, run_id, round_))
    return expand_pair(seed, me, peer, length, ring_bits)


def pair_context(me: str, peer: str, run_id: str, round_: int) -> bytes:
    """What a pair seed is bound to: both names (unordered), the run and the round."""
    return seed_context(me, peer, f"{run_id}|{round_}", "secagg.pair")


def expand_pair(seed: bytes, me: str, peer: str, length: int, ring_bits: int = RING_BITS) -> np.ndarray:
    """PRG(s_uv) with ``me``'s sign (+ for the smaller name): the pairwise mask from its seed."""
    m = ring_mask(seed, length, b"pair", ring_bits)
    return m if me < peer else (m.dtype.type(0) - m)


def reveals(owner: str, survivors: Collection[str]) -> tuple[bool, bool]:
    """Which of ``owner``'s secrets a client reveals when unmasking: (its mask key s, its self-mask seed b).

    The mask key of a client that dropped (so the server can remove its pairwise masks),
    the self-mask seed of a survivor, never both (Bonawitz et al., round 4): with both,
    the server could unmask that client's input, had it arrived late. Clients follow
    this rule and the server checks their shares against it.
    """
    alive = owner in survivors
    return not alive, alive


def self_mask(b: bytes, length: int, ring_bits: int = RING_BITS) -> np.ndarray:
    """PRG(b_u): the self mask that hides a client's input even after its pairwise masks are removed."""
    return ring_mask(b, length, b"self", ring_bits)
