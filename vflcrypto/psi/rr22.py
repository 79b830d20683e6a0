"""VOLE PSI building blocks: the OKVS-and-VOLE oblivious PRF (semi-honest).

After S. Raghuraman, P. Rindal, "Blazing Fast PSI from Improved OKVS and Subfield VOLE",
ACM CCS 2022 (RR22), and its predecessor P. Rindal, P. Schoppmann, "VOLE-PSI: Fast OPRF
and Circuit-PSI from Vector-OLE", EUROCRYPT 2021, with the random-band OKVS of
:mod:`.okvs` and the silent VOLE of :mod:`.vole`.

The **receiver** R (it learns the intersection) holds ``Y``, the **sender** S holds ``X``:

1. R encodes ``P = Encode({(y, H(y)) : y ∈ Y})``, an OKVS of ``m = okvs.columns(|Y|)``
   elements of GF(2¹²⁸), so that ``Decode(P, y) = H(y)`` (``Decode`` is linear);
2. a silent VOLE of length ``m`` gives R ``(A, C)`` and S ``(B, Δ)`` with ``C = B ⊕ Δ·A``;
   R sends ``P ⊕ A`` (pseudorandom: ``A`` is);
3. S sets ``K = B ⊕ Δ·(P ⊕ A) = C ⊕ Δ·P`` and evaluates, for each ``x ∈ X``,
   ``F(x) = H'(Decode(K, x) ⊕ Δ·H(x))``; R evaluates ``F(y) = H'(Decode(C, y))``. For
   ``y ∈ Y`` both are ``H'(Decode(C, y))``; for ``x ∉ Y`` the argument differs from what R
   can compute by ``Δ·(Decode(P, x) ⊕ H(x))``, a nonzero multiple of the secret Δ.

``H`` and the band positions come from AES under a per-run public key (:func:`okvs.rows`);
``H'(z) = AES_k(z) ⊕ z`` (fixed-key AES in Matyas–Meyer–Oseas form, the correlation-robust
hash libOTe's and volePSI's OPRFs use), truncated to :data:`OUTPUT_BYTES` = 12 bytes:
false matches have probability at most ``|X|·|Y| / 2⁹⁶`` (≈ 10⁻¹⁴ at 10⁷ × 10⁷).
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..errors import ProtocolError
from . import okvs, vole
from .kkrt import aes_prf

__all__ = ["OUTPUT_BYTES", "mask", "output_hash", "public_keys", "receiver_encode", "receiver_rows", "receiver_values",
           "sender_values", "why_not"]

OUTPUT_BYTES = 12
_KEY_DOMAIN = b"vflcrypto/rr22/public-keys/v1"


def why_not() -> str | None:
    """Why the VOLE PSI cannot run here (``None`` when it can): both C extensions are needed."""
    return vole.why_not() or okvs.why_not()


def public_keys(receiver_nonce: bytes, sender_nonce: bytes) -> tuple[bytes, bytes]:
    """The OKVS key and the output-hash key, from both hellos' nonces (public, fresh per run)."""
    def derive(i: int) -> bytes:
        return hashlib.sha256(_KEY_DOMAIN + bytes([i]) + receiver_nonce + sender_nonce).digest()[:16]
    return derive(0), derive(1)


def output_hash(key: bytes, z: np.ndarray) -> np.ndarray:
    """``AES_key(z) ⊕ z`` per 16-byte row, truncated to :data:`OUTPUT_BYTES`."""
    z = np.ascontiguousarray(z, np.uint8).reshape(-1, 16)
    out = aes_prf(key, z)
    out ^= z
    assert OUTPUT_BYTES % 4 == 0  # the truncation copies whole 32-bit words (several times faster than bytes)
    return np.ascontiguousarray(out.view("<u4")[:, : OUTPUT_BYTES // 4]).view(np.uint8).reshape(-1, OUTPUT_BYTES)


def receiver_rows(h0: np.ndarray, okvs_key: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """R's items' OKVS rows ``(starts, bands, H(y))`` at ``m = okvs.columns(|Y|)``."""
    return okvs.rows(h0, okvs_key, okvs.columns(len(h0)))


def receiver_encode(h0: np.ndarray, okvs_key: bytes,
                    rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 1: R's OKVS ``P`` of its items' ``H(y)`` (``m × 16``), with its items' band rows (``rows``: those
    of :func:`receiver_rows` when made already)."""
    starts, bands, values = rows if rows is not None else receiver_rows(h0, okvs_key)
    return okvs.encode(starts, bands, values, okvs.columns(len(h0))), starts, bands


def mask(p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Step 2: what R sends, ``P ⊕ A`` (``A`` from the VOLE makes it pseudorandom)."""
    return p ^ a


def receiver_values(c: np.ndarray, starts: np.ndarray, bands: np.ndarray, hash_key: bytes) -> np.ndarray:
    """R's outputs ``H'(Decode(C, y))`` for its own items (``n × OUTPUT_BYTES``)."""
    return output_hash(hash_key, okvs.decode(c, starts, bands))


def sender_values(b: np.ndarray, delta: np.ndarray, masked: np.ndarray,
                  rows: tuple[np.ndarray, np.ndarray, np.ndarray], hash_key: bytes) -> np.ndarray:
    """Step 3: S's outputs ``H'(Decode(B ⊕ Δ·(P ⊕ A), x) ⊕ Δ·H(x))`` (``n × OUTPUT_BYTES``).

    ``rows`` are S's items' :func:`okvs.rows` under the OKVS key at ``m = len(b)`` (S computes
    them while R encodes).
    """
    if masked.shape != b.shape:
        raise ProtocolError(f"the masked OKVS has {len(masked)} elements; the VOLE has {len(b)}")
    starts, bands, values = rows
    k = b ^ vole.gf_mul(masked, delta)
    return output_hash(hash_key, okvs.decode(k, starts, bands) ^ vole.gf_mul(values, delta))
