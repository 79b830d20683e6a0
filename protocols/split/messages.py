"""The declared messages of split learning, the vanilla VFL baseline (``split.*``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.runtime.declarations import Protection, declare

from .._repvfl import PARTY, SERVER

__all__ = ["PARTY", "SERVER", "BatchGradient", "BatchRepresentation", "DpBatchGradient", "DpBatchRepresentation",
           "DpTestRepresentation", "MarvellBatchGradient", "Setup", "TestRepresentation"]


@declare("split.setup", sender=SERVER, receiver=PARTY, protection=Protection.PUBLIC,
         reveals="the numbers of overlap and test rows, d, the epochs, the batch size and the public schedule seed; "
                 "the label defences of the run (randomized response's epsilon and mechanism, rr or two-stage "
                 "LP-MST; the gradient noise multiplier, clip norm and delta; Marvell's power bound) and the "
                 "embedding defences (the embedding noise multiplier, clip norm and delta; the dCor weight), so "
                 "that every role accounts the same guarantees")
@dataclass(frozen=True)
class Setup:
    n_overlap: int
    n_test: int
    dim: int
    epochs: int
    batch_size: int
    seed: int
    #: ε of randomized response on the labels the server trains on (None: off)
    label_epsilon: float | None = None
    #: the gradient noise's standard deviation over the per-example clip norm (None: no gradient noise)
    noise_multiplier: float | None = None
    clip: float | None = None
    delta: float | None = None
    #: Marvell's power bound s (None: off)
    marvell_bound: float | None = None
    #: how the labels under ``label_epsilon`` are released: "rr" or "lpmst" (two-stage LP-MST)
    label_mechanism: str = "rr"
    #: the embedding noise's standard deviation over its clip norm (None: representations sent without noise)
    embed_noise_multiplier: float | None = None
    embed_clip: float | None = None
    embed_delta: float | None = None
    #: NoPeek's distance-correlation weight in every party's loss (None: off)
    dcor_weight: float | None = None


@declare("split.representation", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="f_k(X^k) of one batch of overlap rows with the current extractor, every step, in the clear: "
                 "over training the server sees how the party's representations evolve (probe R^2 measured); under "
                 "--dcor-weight alone still in the clear, from an extractor trained to lower dCor(X, H) (NoPeek): an "
                 "empirical defence with no formal guarantee (the decoder's R^2 on its frontier)")
@dataclass(frozen=True)
class BatchRepresentation:
    epoch: int
    batch: int
    H: np.ndarray


@declare("split.gradient", sender=SERVER, receiver=PARTY, protection=Protection.PLAINTEXT,
         reveals="dL/dH^k of the batch, every step, undefended (no --label-dp, --grad-noise, --grad-epsilon or "
                 "--marvell-bound): the label partition of the batch rows by design (rows of one class point the "
                 "same way: k-means ARI measured), repeated over many rounds")
@dataclass(frozen=True)
class BatchGradient:
    epoch: int
    batch: int
    G: np.ndarray


@declare("split.dp_gradient", sender=SERVER, receiver=PARTY, protection=Protection.DP,
         reveals="dL/dH^k of the batch under the run's label defences, every step: with --label-dp epsilon, computed "
                 "from randomized-response labels, or under --label-mechanism lpmst from labels released once each by "
                 "RRWithPrior over two stages (zero rows for labels not yet released; everything sent is pure "
                 "epsilon-label-DP); with --grad-noise or "
                 "--grad-epsilon, each example's joint gradient (head and every party's rows) clipped to C and "
                 "Gaussian noise added, the head trained on the noised sum: the transcript to every party, even "
                 "all parties together, is (epsilon, delta)-label-DP over the epochs (RDP accountant; setup states "
                 "the parameters). It bounds what the rows reveal about each overlap row's label, not the "
                 "features; the label partition and label attacks fall toward their baselines as epsilon shrinks")
@dataclass(frozen=True)
class DpBatchGradient:
    epoch: int
    batch: int
    G: np.ndarray


@declare("split.marvell_gradient", sender=SERVER, receiver=PARTY, protection=Protection.NOISED,
         reveals="dL/dH^k of the batch with Marvell's noise (--marvell-bound s, binary labels; Li et al., ICLR 2022), "
                 "every step: per batch, noise along the two labels' mean difference and across it, of the covariance "
                 "that minimises the symmetrised KL k between the labels' perturbed rows under the power s * "
                 "|mean_1 - mean_0|^2. Empirical, no (epsilon, delta): for the Gaussian model of one batch's rows, any "
                 "scoring of them by label has AUC <= 1/2 + sqrt(k)/2 - k/8 (the server reports the largest k); rows "
                 "pooled over batches, the true gradient distribution and the features are not covered")
@dataclass(frozen=True)
class MarvellBatchGradient:
    epoch: int
    batch: int
    G: np.ndarray


@declare("split.dp_representation", sender=PARTY, receiver=SERVER, protection=Protection.DP,
         reveals="f_k(X^k) of one batch of overlap rows under the party's embedding noise (--embed-noise or "
                 "--embed-epsilon), every step: each row clipped to L2 norm C and Gaussian noise of std sigma*C added "
                 "by the party; each overlap row's representations over the epochs (one release per epoch) are "
                 "(epsilon, delta)-DP in its raw columns (replace-one, sensitivity 2C; RDP accountant; the setup "
                 "states the parameters), for the extractors the run used taken as given: they are trained on the "
                 "raw columns without noise, which the guarantee does not cover. The probe and decoder attacks fall "
                 "toward their baselines as epsilon shrinks (frontier)")
@dataclass(frozen=True)
class DpBatchRepresentation:
    epoch: int
    batch: int
    H: np.ndarray


@declare("split.test_representation", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="f_k of the held-out aligned rows (prediction), in the clear")
@dataclass(frozen=True)
class TestRepresentation:
    H: np.ndarray


@declare("split.dp_test_representation", sender=PARTY, receiver=SERVER, protection=Protection.DP,
         reveals="f_k of the held-out aligned rows under the party's embedding noise: clipped and noised as "
                 "split.dp_representation, one release per test row (a smaller epsilon than the overlap rows')")
@dataclass(frozen=True)
class DpTestRepresentation:
    H: np.ndarray
