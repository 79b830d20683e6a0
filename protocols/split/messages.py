"""The declared messages of split learning, the vanilla VFL baseline (``split.*``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.runtime.declarations import Protection, declare

from .._repvfl import PARTY, SERVER

__all__ = ["PARTY", "SERVER", "BatchGradient", "BatchRepresentation", "Setup", "TestRepresentation"]


@declare("split.setup", sender=SERVER, receiver=PARTY, protection=Protection.PUBLIC,
         reveals="the numbers of overlap and test rows, d, the epochs, the batch size and the public schedule seed")
@dataclass(frozen=True)
class Setup:
    n_overlap: int
    n_test: int
    dim: int
    epochs: int
    batch_size: int
    seed: int


@declare("split.representation", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="f_k(X^k) of one batch of overlap rows with the current extractor, every step, in the clear: "
                 "over training the server sees how the party's representations evolve (probe R^2 measured)")
@dataclass(frozen=True)
class BatchRepresentation:
    epoch: int
    batch: int
    H: np.ndarray


@declare("split.gradient", sender=SERVER, receiver=PARTY, protection=Protection.PLAINTEXT,
         reveals="dL/dH^k of the batch, every step: the label partition of the batch rows by design (rows of one "
                 "class point the same way: k-means ARI measured), repeated over many rounds")
@dataclass(frozen=True)
class BatchGradient:
    epoch: int
    batch: int
    G: np.ndarray


@declare("split.test_representation", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="f_k of the held-out aligned rows (prediction), in the clear")
@dataclass(frozen=True)
class TestRepresentation:
    H: np.ndarray
