"""The declared messages of few-shot VFL (``fewshot.*``).

The first six mirror one-shot VFL's (``oneshot.*``: setup, U1, D1, U2, test); few-shot
adds the parties' unaligned representations and, in client-return mode, the
pseudo-labels the server returns and the party's refitted representations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.runtime.declarations import Protection, declare

from .._repvfl import PARTY, SERVER
from ..oneshot import messages as oneshot

__all__ = ["MODES", "PARTY", "SERVER", "DpGradient", "DpPartition", "DpRefit", "DpRepresentation",
           "DpRepresentationUpdate", "DpTestRepresentation", "DpUnalignedRepresentation", "Gradient", "Partition",
           "PseudoLabels", "Refit", "Representation", "RepresentationUpdate", "Setup", "TestRepresentation",
           "UnalignedRepresentation"]

#: server: the server expands its training set itself (no label-bearing download after D1);
#: client: the server returns pseudo-labels to each party, which retrains its extractor
MODES = ("server", "client")


@declare("fewshot.setup", sender=SERVER, receiver=PARTY, protection=Protection.PUBLIC,
         reveals="the numbers of overlap and test rows, d, the D1 variant, the public training seed, the label "
                 "defences of the run (randomized response's epsilon; the gradient noise multiplier, clip norm and "
                 "delta), the embedding defences (the embedding noise multiplier, clip norm and delta; the dCor "
                 "weight) and the mode (server-side expansion or client return)")
@dataclass(frozen=True)
class Setup(oneshot.Setup):
    """One-shot VFL's setup (with its label and embedding defences) plus the mode."""

    mode: str = "server"


@declare("fewshot.representation", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="U1: H_o^k = f_k(X_o^k) of every overlap row (untrained extractor) in the clear (probe R^2 "
                 "measured)")
@dataclass(frozen=True)
class Representation:
    H: np.ndarray


@declare("fewshot.dp_representation", sender=PARTY, receiver=SERVER, protection=Protection.DP,
         reveals="U1: H_o^k = f_k(X_o^k) of every overlap row (untrained extractor) "
                 + oneshot.DP_REPRESENTATION_REVEALS)
@dataclass(frozen=True)
class DpRepresentation:
    H: np.ndarray


@declare("fewshot.gradient", sender=SERVER, receiver=PARTY, protection=Protection.PLAINTEXT,
         reveals="D1 undefended (no --label-dp, --grad-noise or --grad-epsilon): G^k = dL/dH_o^k and C: the label "
                 "partition of the overlap rows by design (k-means ARI measured), not the class names; no encryption "
                 "can remove it within the one-shot budget")
@dataclass(frozen=True)
class Gradient:
    G: np.ndarray
    n_classes: int


@declare("fewshot.partition", sender=SERVER, receiver=PARTY, protection=Protection.PLAINTEXT,
         reveals="D1 (partition-only, undefended): the server's k-means clusters of the rows of G^k renumbered by "
                 "first appearance, and C: the label partition of the overlap rows, not the class names")
@dataclass(frozen=True)
class Partition:
    clusters: np.ndarray
    n_classes: int


@declare("fewshot.dp_gradient", sender=SERVER, receiver=PARTY, protection=Protection.DP,
         reveals=oneshot.DP_GRADIENT_REVEALS)
@dataclass(frozen=True)
class DpGradient:
    G: np.ndarray
    n_classes: int


@declare("fewshot.dp_partition", sender=SERVER, receiver=PARTY, protection=Protection.DP,
         reveals=oneshot.DP_PARTITION_REVEALS)
@dataclass(frozen=True)
class DpPartition:
    clusters: np.ndarray
    n_classes: int


@declare("fewshot.representation_update", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="U2: H_o^k after the party's local semi-supervised training, in the clear (probe R^2 measured)")
@dataclass(frozen=True)
class RepresentationUpdate:
    H: np.ndarray


@declare("fewshot.dp_representation_update", sender=PARTY, receiver=SERVER, protection=Protection.DP,
         reveals="U2: H_o^k after the party's local semi-supervised training " + oneshot.DP_REPRESENTATION_REVEALS)
@dataclass(frozen=True)
class DpRepresentationUpdate:
    H: np.ndarray


@declare("fewshot.unaligned_representation", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="H_u^k of every unaligned row of the party: how many rows it holds that the others lack, and "
                 "their representations in the clear (the server's estimate of the missing views, and the "
                 "probe R^2, measured)")
@dataclass(frozen=True)
class UnalignedRepresentation:
    H: np.ndarray


@declare("fewshot.dp_unaligned_representation", sender=PARTY, receiver=SERVER, protection=Protection.DP,
         reveals="H_u^k of every unaligned row of the party: how many rows it holds that the others lack (the row "
                 "count is not protected), and their representations " + oneshot.DP_REPRESENTATION_REVEALS)
@dataclass(frozen=True)
class DpUnalignedRepresentation:
    H: np.ndarray


@declare("fewshot.pseudo_labels", sender=SERVER, receiver=PARTY, protection=Protection.PLAINTEXT,
         reveals="client-return mode: class pseudo-labels (and confidences) for the party's unaligned rows that "
                 "passed the dual-classifier gate: class names, which let the party name its k-means clusters "
                 "of the overlap rows, i.e. learn the overlap labels (naming accuracy measured); under --label-dp "
                 "computed from randomized-response labels only (pure epsilon-label-DP, post-processing; gradient "
                 "noise alone does not cover them and is refused in client return)")
@dataclass(frozen=True)
class PseudoLabels:
    rows: np.ndarray
    labels: np.ndarray
    confidence: np.ndarray


@declare("fewshot.refit", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="client-return mode: H_o^k from the extractor retrained on the pseudo-labels, in the clear")
@dataclass(frozen=True)
class Refit:
    H: np.ndarray


@declare("fewshot.dp_refit", sender=PARTY, receiver=SERVER, protection=Protection.DP,
         reveals="client-return mode: H_o^k from the extractor retrained on the pseudo-labels, the third release of "
                 "an overlap row " + oneshot.DP_REPRESENTATION_REVEALS)
@dataclass(frozen=True)
class DpRefit:
    H: np.ndarray


@declare("fewshot.test_representation", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="f_k of the held-out aligned rows (prediction), in the clear")
@dataclass(frozen=True)
class TestRepresentation:
    H: np.ndarray


@declare("fewshot.dp_test_representation", sender=PARTY, receiver=SERVER, protection=Protection.DP,
         reveals="f_k of the held-out aligned rows (prediction) " + oneshot.DP_REPRESENTATION_REVEALS)
@dataclass(frozen=True)
class DpTestRepresentation:
    H: np.ndarray
