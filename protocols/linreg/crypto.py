"""What a data party does with the coordinator's public key, per scheme (Paillier or CKKS).

Encrypt (under Paillier also with obfuscators the coordinator supplied), scale for the
dot, mask the encrypted gradient, and unmask the coordinator's reply;
:func:`reveal_masked` is the coordinator's decryption of a masked vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.errors import EncodingOverflowError, ProtocolError
from vflcrypto.he.ckks import CKKSContext, CKKSVector
from vflcrypto.he.obfuscators import ObfuscatorStock
from vflcrypto.he.paillier import PaillierPublicKey, PaillierVector
from vflcrypto.runtime.wire import IntVector
from vflcrypto.sharing import masking

from .messages import (
    CKKS_GRADIENT_BOUND,
    CKKS_RETURN_FRAC_BITS,
    FRAC_BITS,
    GradientReturn,
    MaskedGradient,
    MaskedGradientCKKS,
    PublicKeyMsg,
)

__all__ = ["Crypto", "Vec", "crypto_from", "reveal_masked"]

Vec = PaillierVector | CKKSVector


class Crypto:
    """What a data party does with C's public key: encrypt, combine, dot, mask, unmask."""

    scheme: str
    key: Any  # the Paillier public key or public CKKS context (accepted on receipt)

    def encrypt(self, x: np.ndarray) -> Vec:
        raise NotImplementedError

    def grad_scale(self, m: int) -> float:
        """Factor applied to features before ``dot`` (CKKS: 1/m, so C sees a mean)."""
        raise NotImplementedError

    def loss_scale(self, m: int) -> float:
        """Factor applied to loss contributions before encryption (CKKS: 1/(2m))."""
        raise NotImplementedError

    def mask(self, v: Vec) -> tuple[Any, Any]:
        """(message to C, private mask state)."""
        raise NotImplementedError

    def unmask(self, ret: GradientReturn, state: Any) -> np.ndarray:
        """The owner's ``Σ d x · grad_scale`` from C's reply and its mask."""
        raise NotImplementedError


class PaillierCrypto(Crypto):
    scheme = "paillier"

    def __init__(self, pk: PaillierPublicKey) -> None:
        self.pk = self.key = pk

    def encrypt(self, x: np.ndarray) -> PaillierVector:
        return self.pk.encrypt_fixed(np.asarray(x, dtype=np.float64), FRAC_BITS)

    def encrypt_with(self, xs: Sequence[np.ndarray], obfuscators: PaillierVector) -> list[PaillierVector]:
        """Encrypt each of ``xs`` with the supplied obfuscators, one per value, each used once.

        They must be exactly as many as the values (the caller checks, with a clear error).
        """
        stock = ObfuscatorStock(self.pk, max(1, len(obfuscators)))
        stock.put(obfuscators)
        out = [stock.encrypt_fixed(np.asarray(x, dtype=np.float64), FRAC_BITS) for x in xs]
        stock.close()
        return out

    def grad_scale(self, m: int) -> float:
        return 1.0

    def loss_scale(self, m: int) -> float:
        return 1.0

    def mask(self, v: Vec) -> tuple[MaskedGradient, Any]:
        if not isinstance(v, PaillierVector):
            raise ProtocolError(f"a {type(v).__name__} in a Paillier run (a peer sent the other scheme)")
        masked, R = masking.mask_ciphertexts(v)
        return MaskedGradient(masked), (R, v.frac_bits)

    def unmask(self, ret: GradientReturn, state: Any) -> np.ndarray:
        R, frac = state
        return masking.unmask_residues(ret.residues, R, self.pk.n, frac)


class CKKSCrypto(Crypto):
    scheme = "ckks"

    def __init__(self, ctx: CKKSContext) -> None:
        self.ctx = self.key = ctx

    def encrypt(self, x: np.ndarray) -> CKKSVector:
        return CKKSVector.encrypt(self.ctx, np.asarray(x, dtype=np.float64))

    def grad_scale(self, m: int) -> float:
        return 1.0 / m

    def loss_scale(self, m: int) -> float:
        return 1.0 / (2 * m)

    def mask(self, v: Vec) -> tuple[MaskedGradientCKKS, Any]:
        from vflcrypto.he.ckks import uniform_real_mask  # looked up per call: a test seam patches it

        if not isinstance(v, CKKSVector):
            raise ProtocolError(f"a {type(v).__name__} in a CKKS run (a peer sent the other scheme)")
        R = uniform_real_mask(self.ctx, len(v), CKKS_GRADIENT_BOUND)
        return MaskedGradientCKKS(v + R), R

    def unmask(self, ret: GradientReturn, state: Any) -> np.ndarray:
        R = state
        if ret.approx.shape != R.shape:
            raise ProtocolError("returned gradient has the wrong length")
        g = np.asarray(ret.approx, dtype=np.float64) - R
        if np.any(np.abs(g) > CKKS_GRADIENT_BOUND):
            raise EncodingOverflowError(
                f"a mean gradient reached {float(np.abs(g).max()):.4g}, past the CKKS mask's bound "
                f"{CKKS_GRADIENT_BOUND:g}, so its declared hiding did not hold (the values were within the "
                "bound before training: the descent diverges): lower --lr or --momentum, or use Paillier")
        return g


def crypto_from(msg: PublicKeyMsg) -> Crypto:
    """The data party's side of the scheme C announced."""
    if msg.scheme == "paillier" and msg.paillier is not None:
        return PaillierCrypto(msg.paillier)
    if msg.scheme == "ckks" and msg.ckks is not None:
        return CKKSCrypto(msg.ckks)
    raise ProtocolError(f"malformed public key message for scheme {msg.scheme!r}")


def reveal_masked(secret: Any, vec: Vec) -> GradientReturn:
    """C's decryption of a masked vector, in the form it returns to the vector's owner."""
    if isinstance(vec, PaillierVector):
        n = int(secret.public_key.n)
        return GradientReturn(IntVector(v % n for v in secret.decrypt(vec)), np.zeros(0))
    approx = vec.decrypt(secret)
    q = 2.0**CKKS_RETURN_FRAC_BITS
    return GradientReturn(IntVector(), np.round(approx * q) / q)
