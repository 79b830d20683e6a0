"""The declared messages of one-shot VFL (``oneshot.*``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.runtime.declarations import Protection, declare

from .._repvfl import PARTY, SERVER

__all__ = ["DP_REPRESENTATION_REVEALS", "PARTY", "SERVER", "VARIANTS", "DpGradient", "DpPartition",
           "DpRepresentation", "DpRepresentationUpdate", "DpTestRepresentation", "Gradient", "Partition",
           "Representation", "RepresentationUpdate", "Setup", "TestRepresentation"]

#: what the server's one download (D1) carries: the gradients, or only its k-means partition of them
VARIANTS = ("gradient", "partition")


@declare("oneshot.setup", sender=SERVER, receiver=PARTY, protection=Protection.PUBLIC,
         reveals="the numbers of overlap and test rows, the representation width d, the D1 variant and the "
                 "public training seed; the label defences of the run (randomized response's epsilon; the gradient "
                 "noise multiplier, clip norm and delta) and the embedding defences (the embedding noise multiplier, "
                 "clip norm and delta; the dCor weight), so that every role accounts the same guarantees")
@dataclass(frozen=True)
class Setup:
    n_overlap: int
    n_test: int
    dim: int
    variant: str
    seed: int
    #: ε of randomized response on the labels the server uses (None: off)
    label_epsilon: float | None = None
    #: the D1 noise's standard deviation over the clip norm (None: no gradient noise)
    noise_multiplier: float | None = None
    clip: float | None = None
    delta: float | None = None
    #: the embedding noise's standard deviation over its clip norm (None: representations sent without noise)
    embed_noise_multiplier: float | None = None
    embed_clip: float | None = None
    embed_delta: float | None = None
    #: NoPeek's distance-correlation weight in every party's local training (None: off)
    dcor_weight: float | None = None


@declare("oneshot.representation", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="U1: H_o^k = f_k(X_o^k) of every overlap row (the party's untrained extractor) in the clear: "
                 "the server sees a random projection of the party's raw columns (a linear probe's R^2 measured)")
@dataclass(frozen=True)
class Representation:
    H: np.ndarray


@declare("oneshot.gradient", sender=SERVER, receiver=PARTY, protection=Protection.PLAINTEXT,
         reveals="D1 undefended (no --label-dp, --grad-noise or --grad-epsilon): G^k = dL/dH_o^k on the overlap "
                 "rows and the class count C: the label partition of the overlap rows by design (k-means with K = C "
                 "on the rows of G^k recovers it: ARI measured), not the class names; no encryption can remove it "
                 "within the one-shot budget")
@dataclass(frozen=True)
class Gradient:
    G: np.ndarray
    n_classes: int


@declare("oneshot.partition", sender=SERVER, receiver=PARTY, protection=Protection.PLAINTEXT,
         reveals="D1 (partition-only variant, undefended): the server's k-means clusters of the rows of G^k, "
                 "renumbered by first appearance, and C: the label partition of the overlap rows (which rows share a "
                 "class), not the class names; strictly less than oneshot.gradient")
@dataclass(frozen=True)
class Partition:
    clusters: np.ndarray
    n_classes: int


#: what the defended D1 reveals (one-shot's and few-shot's declarations)
DP_GRADIENT_REVEALS = (
    "D1 under the run's label defences, and C: with --label-dp epsilon, computed from randomized-response labels "
    "(everything the server sends is pure epsilon-label-DP); with --grad-noise or --grad-epsilon, each row joint over "
    "the parties clipped to C and Gaussian noise of std sigma*C added: D1 to every party, even all parties together, "
    "is (epsilon, delta)-label-DP, one Gaussian release per row (RDP accountant; the setup states the parameters). "
    "It bounds what D1 reveals about each overlap row's label, not the features; the label partition and the label "
    "attacks fall toward their baselines as epsilon shrinks")
DP_PARTITION_REVEALS = (
    "D1 (partition-only variant) under the run's label defences, and C: the server's k-means clusters of the "
    "defended gradient rows (randomized-response labels and/or clipped, noised rows), post-processing of them: the "
    "same (epsilon, delta)-label-DP as the gradient variant; the party cannot test the noise from clusters (the "
    "audit tests it on the gradient variant)")


@declare("oneshot.dp_gradient", sender=SERVER, receiver=PARTY, protection=Protection.DP, reveals=DP_GRADIENT_REVEALS)
@dataclass(frozen=True)
class DpGradient:
    G: np.ndarray
    n_classes: int


@declare("oneshot.dp_partition", sender=SERVER, receiver=PARTY, protection=Protection.DP,
         reveals=DP_PARTITION_REVEALS)
@dataclass(frozen=True)
class DpPartition:
    clusters: np.ndarray
    n_classes: int


#: what a representation under the parties' embedding noise reveals (one-shot's and few-shot's declarations)
DP_REPRESENTATION_REVEALS = (
    "under the party's embedding noise (--embed-noise or --embed-epsilon): each row clipped to L2 norm C and Gaussian "
    "noise of std sigma*C added by the party; the representations of a row are (epsilon, delta)-DP in its raw columns "
    "(replace-one, sensitivity 2C) over its releases (an overlap row: U1 and U2, and few-shot's refit; any other row: "
    "once), for the extractors the run used taken as given: they are fitted on the raw columns without noise, which "
    "the guarantee does not cover (RDP accountant; the setup states the parameters). The probe and decoder attacks "
    "fall toward their baselines as epsilon shrinks")


@declare("oneshot.dp_representation", sender=PARTY, receiver=SERVER, protection=Protection.DP,
         reveals="U1: H_o^k = f_k(X_o^k) of every overlap row (untrained extractor) " + DP_REPRESENTATION_REVEALS)
@dataclass(frozen=True)
class DpRepresentation:
    H: np.ndarray


@declare("oneshot.representation_update", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="U2: H_o^k from the party's extractor after its local semi-supervised training, in the clear: "
                 "features trained to separate the classes (probe R^2 measured); under --dcor-weight alone still in "
                 "the clear, from an extractor trained to lower dCor(X, H) (NoPeek): empirical, no formal guarantee")
@dataclass(frozen=True)
class RepresentationUpdate:
    H: np.ndarray


@declare("oneshot.dp_representation_update", sender=PARTY, receiver=SERVER, protection=Protection.DP,
         reveals="U2: H_o^k after the party's local semi-supervised training " + DP_REPRESENTATION_REVEALS)
@dataclass(frozen=True)
class DpRepresentationUpdate:
    H: np.ndarray


@declare("oneshot.test_representation", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="f_k of the held-out aligned rows (prediction), in the clear")
@dataclass(frozen=True)
class TestRepresentation:
    H: np.ndarray


@declare("oneshot.dp_test_representation", sender=PARTY, receiver=SERVER, protection=Protection.DP,
         reveals="f_k of the held-out aligned rows (prediction) " + DP_REPRESENTATION_REVEALS)
@dataclass(frozen=True)
class DpTestRepresentation:
    H: np.ndarray
