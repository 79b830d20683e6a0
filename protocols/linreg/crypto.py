"""What a data party does with the coordinator's public key, per scheme (Paillier or CKKS).

Encrypt (under Paillier also with obfuscators the coordinator supplied), scale for the
dot, mask the encrypted gradient, and unmask the coordinator's reply;
:func:`reveal_masked` is the coordinator's decryption of a masked vector, under CKKS flooded
as :func:`gradient_flooding` and :func:`loss_flooding` say (public inputs only: C applies them,
the audit recomputes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import numpy as np

from vflcrypto.errors import EncodingOverflowError, ProtocolError
from vflcrypto.he.ckks import CKKSContext, CKKSVector
from vflcrypto.he.flooding import ErrorModel, Flooding
from vflcrypto.he.obfuscators import ObfuscatorStock
from vflcrypto.he.paillier import PaillierPublicKey, PaillierVector
from vflcrypto.runtime.wire import IntVector
from vflcrypto.sharing import masking

from .math import epoch_batches
from .messages import (
    CKKS_GRADIENT_BOUND,
    CKKS_RESIDUAL_RMS,
    FRAC_BITS,
    GradientReturn,
    GradientReturnCKKS,
    MaskedGradient,
    MaskedGradientCKKS,
    PublicKeyMsg,
    TrainingPlan,
)

__all__ = ["Crypto", "Vec", "crypto_from", "gradient_flooding", "loss_flooding", "reveal_masked"]

Vec = PaillierVector | CKKSVector


class Crypto:
    """What a data party does with C's public key: encrypt, combine, dot, mask, unmask."""

    scheme: str
    key: Any  # the Paillier public key or public CKKS context (accepted on receipt)
    return_kind: type  # the message C answers a masked gradient with

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

    def unmask(self, ret: Any, state: Any) -> np.ndarray:
        """The owner's ``Σ d x · grad_scale`` from C's reply and its mask."""
        raise NotImplementedError


class PaillierCrypto(Crypto):
    scheme = "paillier"
    return_kind = GradientReturn

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
    return_kind = GradientReturnCKKS

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
        R = uniform_real_mask(self.ctx, len(v), CKKS_GRADIENT_BOUND, v.levels_left)
        return MaskedGradientCKKS(v + R), R

    def unmask(self, ret: GradientReturnCKKS, state: Any) -> np.ndarray:
        R = state
        if not isinstance(ret, GradientReturnCKKS) or ret.values.shape != R.shape:
            raise ProtocolError("returned gradient has the wrong kind or length")
        g = np.asarray(ret.values, dtype=np.float64) - R
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


def _dot_variance(model: ErrorModel, depth: int, inputs: int, m: int) -> float:
    """One output of a dot of a sum of ``inputs`` fresh encryptions over ``m`` rows (linreg's bounds)."""
    # plaintext column x_j / m: sum (x_ij/m)^2 = rms_b(x_j)^2 / m, rms checked <= BOUND / RESIDUAL_RMS before training;
    # the encrypted values (residuals, u_k): rms bounded generously by CKKS_GRADIENT_BOUND
    factor_sq = (CKKS_GRADIENT_BOUND / CKKS_RESIDUAL_RMS) ** 2 / m
    return model.dot(inputs * model.fresh(), depth + 1, factor_sq, m * CKKS_GRADIENT_BOUND**2)


def _schedule(plan: TrainingPlan) -> tuple[int, int]:
    """(iterations of the run, rows of its smallest batch): the batches have the same sizes every epoch."""
    sizes = [len(b) for b in epoch_batches(plan.n_rows, plan.batch_size, plan.seed, 0)]
    return plan.epochs * len(sizes), min(sizes)


def gradient_flooding(ctx: CKKSContext, plan: TrainingPlan, features: int) -> Flooding:
    """How C floods the CKKS masked gradients it returns to a party with ``features`` values.

    The ciphertext is [[d]] = Σ_k [[u_k]] + (u_B − y), re-randomized (n_passive + 1 fresh
    encryptions), dotted with X_b/m, plus the mask (a plaintext): :class:`ErrorModel`'s ``dot``
    with the plan's smallest batch. V = iterations × features: every value C returns to
    that party over the run (an early stop only returns fewer).
    """
    model = ctx.error_model()
    iterations, m = _schedule(plan)
    var = _dot_variance(model, ctx.max_depth, plan.n_passive + 1, m)
    return Flooding(model.std(var), iterations * features)


def loss_flooding(ctx: CKKSContext, plan: TrainingPlan) -> Flooding:
    """How C floods the batch losses it decrypts: it keeps them, but its stopping bit (``linreg.control``)
    is computed from them and sent to every party, so they are flooded like a release, V = iterations.

    [[S]] = [[U]]·(r/m) + Σ_k [[P_k]] + Σ_j cross terms: a dot of n_passive fresh encryptions, n_passive
    fresh partial losses and n_passive − 1 cross terms (dots of at most n_passive fresh encryptions).
    """
    model = ctx.error_model()
    iterations, m = _schedule(plan)
    k = plan.n_passive
    var = k * _dot_variance(model, ctx.max_depth, k, m) + k * model.fresh()
    return Flooding(model.std(var), iterations)


@overload
def reveal_masked(secret: Any, vec: PaillierVector, flood: bool | Flooding = True) -> GradientReturn: ...


@overload
def reveal_masked(secret: Any, vec: CKKSVector, flood: bool | Flooding = True) -> GradientReturnCKKS: ...


def reveal_masked(secret: Any, vec: Vec, flood: bool | Flooding = True) -> GradientReturn | GradientReturnCKKS:
    """C's decryption of a masked vector, in the form it returns to the vector's owner (CKKS: flooded by
    ``flood``; ``False`` only in tests and benchmarks)."""
    if isinstance(vec, PaillierVector):
        n = int(secret.public_key.n)
        return GradientReturn(IntVector(v % n for v in secret.decrypt(vec)))
    return GradientReturnCKKS(vec.decrypt(secret, flood=flood))
