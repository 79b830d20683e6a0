"""The declared messages of one-shot VFL (``oneshot.*``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.runtime.declarations import Protection, declare

from .._repvfl import PARTY, SERVER

__all__ = ["PARTY", "SERVER", "VARIANTS", "Gradient", "Partition", "Representation", "RepresentationUpdate", "Setup",
           "TestRepresentation"]

#: what the server's one download (D1) carries: the gradients, or only its k-means partition of them
VARIANTS = ("gradient", "partition")


@declare("oneshot.setup", sender=SERVER, receiver=PARTY, protection=Protection.PUBLIC,
         reveals="the numbers of overlap and test rows, the representation width d, the D1 variant and the "
                 "public training seed")
@dataclass(frozen=True)
class Setup:
    n_overlap: int
    n_test: int
    dim: int
    variant: str
    seed: int


@declare("oneshot.representation", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="U1: H_o^k = f_k(X_o^k) of every overlap row (the party's untrained extractor) in the clear: "
                 "the server sees a random projection of the party's raw columns (a linear probe's R^2 measured)")
@dataclass(frozen=True)
class Representation:
    H: np.ndarray


@declare("oneshot.gradient", sender=SERVER, receiver=PARTY, protection=Protection.PLAINTEXT,
         reveals="D1: G^k = dL/dH_o^k on the overlap rows and the class count C: the label partition of the "
                 "overlap rows by design (k-means with K = C on the rows of G^k recovers it: ARI measured), not "
                 "the class names; no encryption can remove it within the one-shot budget")
@dataclass(frozen=True)
class Gradient:
    G: np.ndarray
    n_classes: int


@declare("oneshot.partition", sender=SERVER, receiver=PARTY, protection=Protection.PLAINTEXT,
         reveals="D1 (partition-only variant): the server's k-means clusters of the rows of G^k, renumbered by "
                 "first appearance, and C: the label partition of the overlap rows (which rows share a class), "
                 "not the class names; strictly less than oneshot.gradient")
@dataclass(frozen=True)
class Partition:
    clusters: np.ndarray
    n_classes: int


@declare("oneshot.representation_update", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="U2: H_o^k from the party's extractor after its local semi-supervised training, in the clear: "
                 "features trained to separate the classes (probe R^2 measured)")
@dataclass(frozen=True)
class RepresentationUpdate:
    H: np.ndarray


@declare("oneshot.test_representation", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="f_k of the held-out aligned rows (prediction), in the clear")
@dataclass(frozen=True)
class TestRepresentation:
    H: np.ndarray
