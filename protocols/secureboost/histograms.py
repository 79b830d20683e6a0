"""Reading a passive party's histogram message (the active party's decryption and layout checks) and the
histogram plan of a level (which nodes a passive party sums row by row, which it derives)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vflcrypto.errors import EncodingOverflowError, ProtocolError
from vflcrypto.he.encoding import PackingSpec
from vflcrypto.he.paillier import PaillierPrivateKey
from vflcrypto.he.schemes import PrivateKey

from .messages import EncryptedHistograms, PlainHistograms
from .tree import unfold_candidates, unpack_candidates

__all__ = ["decode_histograms", "histogram_plan"]


def decode_histograms(hist: EncryptedHistograms | PlainHistograms, sk: PrivateKey | None,
                      spec: PackingSpec, name: str = "passive party", outputs: int = 1) -> tuple[np.ndarray, ...]:
    """(G_L (c, K), H_L (c, K), n_L (c,)) of every candidate in a histogram message, in its
    order (layout checked; ``K = outputs``)."""
    total = int(np.asarray(hist.counts).sum())
    if isinstance(hist, PlainHistograms):
        GL, HL, NL = (np.asarray(a) for a in (hist.grad, hist.hess, hist.rows))
        if any(a.shape != (total, outputs) or a.dtype.kind not in "iu" for a in (GL, HL)) or \
                NL.shape != (total,) or NL.dtype.kind not in "iu":
            raise ProtocolError(f"{name} sent malformed plaintext histograms")
        return GL.astype(np.int64), HL.astype(np.int64), NL.astype(np.int64)
    if sk is None:
        raise ProtocolError(f"{name} sent encrypted histograms in plaintext mode")
    bits = 2 * outputs * spec.slot_bits
    per = sk.public_key.plaintext_bits // bits
    if hist.value_bits != bits or hist.per_ciphertext != per:
        raise ProtocolError(f"{name} folded its histograms with the wrong layout")
    if len(hist.folded) != -(-total // per):
        raise ProtocolError(f"{name} sent {len(hist.folded)} folded ciphertexts for {total} candidates")
    if hist.folded.public_key != sk.public_key:
        raise ProtocolError(f"{name} sent histograms under another key")
    # Paillier's signed decryptions are taken back modulo n; OU's are refused outside their bound
    n = int(sk.public_key.n) if isinstance(sk, PaillierPrivateKey) else 0
    try:
        raw = [v % n if n else v for v in sk.decrypt(hist.folded)] if total else []
    except EncodingOverflowError:
        raise ProtocolError(f"{name} sent histograms outside the plaintext range (wrong key or tampered)") from None
    return unpack_candidates(unfold_candidates(raw, total, per, bits), spec, outputs)


def histogram_plan(level: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Which nodes to sum row by row (root; the smaller sibling) and which to derive."""
    if len(level) == 1 and level[0].parent_slot < 0:
        return np.zeros(1, np.int32), np.zeros((0, 3), np.int32)
    compute: list[int] = []
    derive: list[tuple[int, int, int]] = []
    for i in range(0, len(level), 2):
        a, b = i, i + 1  # siblings are appended consecutively (left, right)
        small, large = (a, b) if len(level[a].rows) <= len(level[b].rows) else (b, a)
        compute.append(small)
        derive.append((large, level[large].parent_slot, small))
    return np.asarray(compute, np.int32), np.asarray(derive, np.int32).reshape(-1, 3)
