"""The math of vertical logistic regression: plain functions, no channel, no role.

Logistic loss and gradients, the masked logits in Z_{2^64} (pairwise masks that cancel in
the sum), the signed X25519 key shares of the pairwise seeds, and the Paillier residual
and masked-gradient helpers; every role step of :mod:`.roles` calls these.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from vflcrypto.data.tables import ids_digest
from vflcrypto.errors import EncodingOverflowError, ProtocolError
from vflcrypto.he.paillier import PaillierPrivateKey, PaillierVector
from vflcrypto.ml.metrics import log_loss
from vflcrypto.runtime.wire import IntVector
from vflcrypto.sharing.masking import agree_seed, mask_ciphertexts, pairwise_masks, seed_context, unmask_residues

from .messages import KeyShare

__all__ = ["GRAD_FRAC_BITS", "RING_BITS", "RING_FRAC_BITS", "accept_key_share", "bce_loss", "centralized_gd",
           "decode_ring", "decrypt_masked", "encode_ring", "encrypt_residual", "local_gradient", "make_key_share",
           "mask_logits", "masked_encrypted_gradient", "pair_step_seed", "partial_logits", "residuals",
           "rows_digest", "sgd_update", "sigmoid", "unmask_gradient", "unmask_sum"]

RING_BITS = 64  # logits are masked in Z_{2^64}: uint64 arithmetic wraps exactly there
RING_FRAC_BITS = 32  # fixed-point resolution of masked logits: 2^-32 per party
GRAD_FRAC_BITS = 40  # fixed-point resolution of r and X inside Paillier (each 2^-40)
RING_MOD = 1 << RING_BITS
_LOGIT_LIMIT = 2.0 ** (RING_BITS - RING_FRAC_BITS - 8)  # |z| bound leaving room for the sum
_KEYSHARE_DOMAIN = b"vflcrypto.logreg.key_share.v1|"


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function."""
    z = np.asarray(z, dtype=np.float64)
    out = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def bce_loss(y: np.ndarray, p: np.ndarray) -> float:
    """Mean binary cross-entropy (clipped at 1e-15 like scikit-learn)."""
    return log_loss(y, p)


def partial_logits(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    """z_k = X_k w_k: what a passive party contributes to the logits."""
    return np.asarray(X, dtype=np.float64) @ np.asarray(w, dtype=np.float64)


def residuals(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The active party's step: ``(p, r, loss)`` with r = (p - y) / n, the BCE gradient in z."""
    p = sigmoid(z)
    return p, (p - y) / len(y), bce_loss(y, p)


def local_gradient(X: np.ndarray, r: np.ndarray) -> np.ndarray:
    """g_k = X_k^T r, the gradient of the mean BCE in w_k."""
    return np.asarray(X, dtype=np.float64).T @ r


def sgd_update(w: np.ndarray, grad: np.ndarray, learning_rate: float) -> np.ndarray:
    """w_k <- w_k - lr g_k."""
    return w - learning_rate * grad


def centralized_gd(X: np.ndarray, y: np.ndarray, steps: int, learning_rate: float
                   ) -> tuple[np.ndarray, list[float]]:
    """Reference: full-batch gradient descent on the joined table (weights, loss per step)."""
    w = np.zeros(X.shape[1])
    losses = []
    for _ in range(steps):
        p = sigmoid(X @ w)
        losses.append(bce_loss(y, p))
        w = w - learning_rate * X.T @ ((p - y) / len(y))
    return w, losses


# --- masked logits in Z_{2^64}


def pair_step_seed(seed: bytes, label: str) -> bytes:
    """A fresh 32-byte seed per step/purpose from the pair seed (HMAC-SHA256 as a PRF)."""
    return hmac.new(seed, b"vflcrypto.logreg|" + label.encode(), hashlib.sha256).digest()


def encode_ring(z: np.ndarray, frac_bits: int = RING_FRAC_BITS) -> np.ndarray:
    """round(z * 2^frac) as uint64 (two's complement mod 2^64); overflow raises."""
    z = np.asarray(z, dtype=np.float64)
    if not np.all(np.isfinite(z)):
        raise EncodingOverflowError("logits are not finite")
    if z.size and float(np.max(np.abs(z))) >= _LOGIT_LIMIT:
        raise EncodingOverflowError("a logit exceeds the fixed-point range of the masked sum")
    return np.rint(z * float(1 << frac_bits)).astype(np.int64).view(np.uint64)


def decode_ring(total: np.ndarray, frac_bits: int = RING_FRAC_BITS) -> np.ndarray:
    """Inverse of :func:`encode_ring` for a sum mod 2^64."""
    return np.asarray(total, dtype=np.uint64).view(np.int64).astype(np.float64) / float(1 << frac_bits)


def mask_logits(z: np.ndarray, me: str, seeds: Mapping[str, bytes], label: str,
                frac_bits: int = RING_FRAC_BITS) -> np.ndarray:
    """Encode z_k in Z_{2^64} and add the signed pairwise masks for ``label`` (a step or phase).

    The smaller party name adds PRG(seed, label), the larger subtracts it, so the masks of
    all passive parties cancel in the sum mod 2^64.
    """
    out = encode_ring(z, frac_bits)
    with np.errstate(over="ignore"):
        for peer, seed in seeds.items():
            if peer == me:
                raise ProtocolError("a party has no pairwise mask with itself")
            m = np.array(pairwise_masks(pair_step_seed(seed, label), len(out), RING_MOD),
                         dtype=np.uint64)
            out = out + m if me < peer else out - m
    return out


def unmask_sum(masked: Sequence[np.ndarray], frac_bits: int = RING_FRAC_BITS) -> np.ndarray:
    """The active party's aggregation: sum mod 2^64 of every party's masked logits -> z."""
    total = np.zeros(len(masked[0]), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for m in masked:
            if m.shape != total.shape or m.dtype != np.uint64:
                raise ProtocolError("masked logits have the wrong length or type")
            total = total + m
    return decode_ring(total, frac_bits)


# --- pairwise key agreement


def _keyshare_payload(me: str, peer: str, run_id: str, public: bytes) -> bytes:
    return _KEYSHARE_DOMAIN + seed_context(me, peer, run_id, "logreg") + me.encode() + b"|" + public


def make_key_share(identity: Ed25519PrivateKey, me: str, peer: str, run_id: str
                   ) -> tuple[X25519PrivateKey, KeyShare]:
    """A fresh X25519 key pair for the pair (me, peer) and its signed public half."""
    eph = X25519PrivateKey.generate()
    pub = eph.public_key().public_bytes_raw()
    sig = identity.sign(_keyshare_payload(me, peer, run_id, pub))
    return eph, KeyShare(sender=me, public_key=pub, signature=sig)


def accept_key_share(eph: X25519PrivateKey, share: KeyShare, me: str, peer: str, run_id: str,
                     peer_identity: Ed25519PublicKey) -> bytes:
    """Verify the peer's signed share against its pinned identity key; return the pair seed."""
    if share.sender != peer:
        raise ProtocolError(f"{me}: key share from {peer} claims to come from {share.sender}")
    try:
        peer_identity.verify(share.signature, _keyshare_payload(peer, me, run_id, share.public_key))
        peer_pub = X25519PublicKey.from_public_bytes(share.public_key)
    except (InvalidSignature, ValueError):
        raise ProtocolError(f"{me}: key share from {peer} fails authentication") from None
    return agree_seed(eph, peer_pub, seed_context(me, peer, run_id, "logreg"))


# --- Paillier gradient with a uniform mask mod n


def encrypt_residual(sk: PaillierPrivateKey, r: np.ndarray,
                     frac_bits: int = GRAD_FRAC_BITS) -> PaillierVector:
    """[[r]] in fixed point, by the key owner (fast CRT path)."""
    return sk.encrypt_fixed(np.asarray(r, dtype=np.float64), frac_bits)


def masked_encrypted_gradient(enc_r: PaillierVector, X: np.ndarray,
                              frac_bits: int = GRAD_FRAC_BITS) -> tuple[PaillierVector, list[int]]:
    """[[X^T r + R]] with R uniform mod n, re-randomized; R is returned so the party can remove it."""
    return mask_ciphertexts(enc_r.dot(np.asarray(X, dtype=np.float64), frac_bits))


def decrypt_masked(sk: PaillierPrivateKey, vec: PaillierVector) -> IntVector:
    """The key owner decrypts g + R mod n (uniform to it) as residues in [0, n)."""
    n = int(sk.public_key.n)
    return IntVector(int(v) % n for v in sk.decrypt(vec))


def unmask_gradient(values: Sequence[int], masks: Sequence[int], n: int, frac_bits: int) -> np.ndarray:
    """Remove R mod n and decode the fixed-point gradient (overflow detected)."""
    return unmask_residues(values, masks, n, frac_bits)


def rows_digest(ids: Sequence[str] | None, n: int) -> bytes:
    """Digest of the ordered row IDs (:func:`vflcrypto.data.tables.ids_digest`), or of the row
    count alone when IDs are not given (pre-aligned arrays)."""
    return ids_digest(ids if ids is not None else [f"#rows={n}"], "logreg")
