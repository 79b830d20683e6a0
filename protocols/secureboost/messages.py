"""The declared messages of SecureBoost (``secureboost.*``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.he.ou import OUPublicKey, OUVector
from vflcrypto.he.paillier import PaillierPublicKey, PaillierVector
from vflcrypto.runtime.declarations import Protection, declare
from vflcrypto.runtime.zarray import ZArray

from .tree import BoostParams

__all__ = ["ACTIVE", "PASSIVE", "DpLevelRequest", "EncryptedGradients", "EncryptedHistograms", "LevelRequest",
           "PlainGradients", "PlainHistograms", "PredictAnswer", "PredictQuery", "Resume", "ServeRequest", "ServeRows",
           "Setup", "SplitRequest", "SplitResponse", "level_kind"]

ACTIVE = "active"
PASSIVE = "passive"


@declare("secureboost.setup", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
         reveals="the model id, the training plan (every BoostParams option: rounds, depth, bins, "
                 "learning rate, lambda, gamma, min_child_weight, subsample, colsample_bytree, the GOSS "
                 "rates, the public seed, the validation fraction and early-stopping rounds, the rounds grown on "
                 "the active party's features alone, and the label-DP budget, delta and clip norm), whether rows "
                 "are weighted (not the weights), the number of aligned rows, a digest "
                 "of the ordered row IDs (equality check only), the active party's public key "
                 "(Paillier or Okamoto-Uchiyama, so the scheme; none in plaintext mode) and, for a "
                 "multiclass model, the number of classes (outputs per tree, or trees per round)")
@dataclass(frozen=True)
class Setup:
    model_id: str
    n_rows: int
    ids_digest: bytes
    plaintext: bool
    public_key: PaillierPublicKey | OUPublicKey | None
    params: BoostParams  # the training plan: every party checks it against its own flags
    weighted: bool = False  # sample weights from a column of the active party's file
    n_outputs: int = 1  # (g, h) pairs per row and leaf weights per leaf: K for a multi-output tree
    trees_per_round: int = 1  # K for one tree per class


@declare("secureboost.resume", sender=(PASSIVE, ACTIVE), receiver=(ACTIVE, PASSIVE), protection=Protection.PUBLIC,
         reveals="with --resume, before the setup: the number of trees the sender has completed (its checkpoint; "
                 "from the active party, the tree every party resumes from: the least of them), its plan digest "
                 "(a hash of the training plan the setup states anyway) and the model id of its checkpoint")
@dataclass(frozen=True)
class Resume:
    trees: int  # passive → active: trees in its checkpoint; active → passive: the tree training resumes from
    plan_digest: bytes
    model_id: str  # the checkpoint's run ("" without one)


@declare("secureboost.gradients", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.CIPHERTEXT, key_owner=ACTIVE,
         reveals="nothing about g and h beyond the row count (IND-CPA: Paillier under DCR and the "
                 "DJN short-exponent assumption, OU under the p-subgroup and short-exponent "
                 "assumptions); the public packing layout reveals a power-of-two bound on |g| (sample "
                 "weights and GOSS amplification included) and the fixed-point precision. In the clear: "
                 "which training rows are in this tree's sample (all of them without subsample or GOSS). "
                 "With GOSS every row of the top |g| share is in the sample, so membership tells which rows "
                 "have large gradients (for the logistic loss, mostly the positives of a rare class: the "
                 "audit measures it); not which sampled rows are top rows (the rest is drawn with the "
                 "active party's private randomness), nor multipliers or weights (inside the ciphertexts). "
                 "None is sent for a round grown on the active party's features alone; under --dp-epsilon each "
                 "weighted g is clipped to the announced C first. A tree's ciphertexts may come in parts of "
                 "consecutive sampled rows (part, parts), each encrypted just before it is sent: the split is a "
                 "public function of the sample's size, so it reveals nothing more")
@dataclass(frozen=True)
class EncryptedGradients:
    tree: int
    sample: np.ndarray  # uint8: np.packbits of the (n_rows,) mask of this tree's sampled rows (empty in later parts)
    gh: PaillierVector | OUVector  # one ciphertext per sampled row, in row order: slots g_0..g_{K-1}, h_0..h_{K-1}
    part: int = 0  # this message's place among the tree's parts (consecutive sampled rows)
    parts: int = 1



@declare("secureboost.plain_gradients", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.PLAINTEXT,
         reveals="PLAINTEXT MODE (debug/parity only): every row's gradient and hessian in the "
                 "clear; for the logistic loss g = p - y reveals every label; the sample as in "
                 "secureboost.gradients")
@dataclass(frozen=True)
class PlainGradients:
    tree: int
    frac_bits: int
    sample: np.ndarray  # uint8 packbits of the sample mask, as in EncryptedGradients
    g: np.ndarray  # int64 fixed-point, (sampled rows, outputs)
    h: np.ndarray


@declare("secureboost.level", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PLAINTEXT,
         reveals="the instance space: which aligned rows share a node at this depth, i.e. the "
                 "partition induced by all earlier splits (the active party's and other passive "
                 "parties' included), for every row (those outside this tree's sample and the "
                 "validation rows too: they are routed, not summed), and which nodes are leaves; with "
                 "the last tree, the number of rounds the model keeps (early stopping's best round); "
                 "not features, thresholds, gradients or labels. Of a round grown on the active party's "
                 "features alone (--first-tree-active-only, --active-only-trees) only its end (done): no "
                 "instance space")
@dataclass(frozen=True)
class LevelRequest:
    tree: int
    depth: int
    done: bool
    node_of_row: ZArray  # int32, -1 = row not in a node of this depth (sent narrowed and deflated)
    compute: np.ndarray  # int32 node ids whose histograms are summed row by row
    derive: np.ndarray  # int32 (k, 3): node, parent (previous depth), sibling (this depth)
    kept: int = -1  # with ``done`` on the last tree: the rounds the model keeps; else -1

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_of_row", ZArray.of(self.node_of_row))


@declare("secureboost.dp_level", sender=ACTIVE, receiver=PASSIVE, protection=Protection.DP,
         reveals="under --dp-epsilon, the level request in place of secureboost.level (the same fields): the "
                 "instance space of every node, grown by split choices the active party made from G sums it "
                 "noised first (Gaussian noise of std z*D*sqrt(k) per node: D how far one row's label moves its "
                 "clipped g, k the sums a row can move; every leaf's G noised too; z calibrated by dp-accounting's "
                 "RDP accountant over 1 + trees x (depth + 1) releases), so everything the passive parties "
                 "receive, even together, is "
                 "(epsilon, delta)-label-DP as the setup states; not the features; no amplification by "
                 "subsampling is claimed. Label attacks on the instance spaces fall toward their baselines as "
                 "epsilon shrinks")
@dataclass(frozen=True)
class DpLevelRequest:
    tree: int
    depth: int
    done: bool
    node_of_row: ZArray  # as in LevelRequest
    compute: np.ndarray
    derive: np.ndarray
    kept: int = -1

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_of_row", ZArray.of(self.node_of_row))


def level_kind(params: BoostParams) -> type[LevelRequest] | type[DpLevelRequest]:
    """The kind the level requests of a plan travel as: ``secureboost.dp_level`` under label DP."""
    return DpLevelRequest if params.dp_epsilon is not None else LevelRequest


@declare("secureboost.histograms", sender=PASSIVE, receiver=ACTIVE,
         protection=(Protection.AGGREGATE, Protection.SHUFFLED),
         reveals="after decryption with its own key: per node, for every split candidate of "
                 "this passive party (anonymous, freshly shuffled per node, empty-bin duplicates "
                 "removed) the left-side sums G_L, H_L (one per class in a multi-output tree) and "
                 "the row count n_L; the candidate count "
                 "bounds the party's distinct feature values; candidates with n_L or n - n_L <= 2 "
                 "expose single rows' gradients and their rank in a passive feature")
@dataclass(frozen=True)
class EncryptedHistograms:
    tree: int
    depth: int
    nodes: np.ndarray  # int32 node ids, in the order of the candidates
    counts: np.ndarray  # int32 number of candidates per node
    value_bits: int  # bits per folded candidate (2 packed slots)
    per_ciphertext: int  # candidates folded into one ciphertext
    folded: PaillierVector | OUVector  # re-randomized folded ciphertexts


@declare("secureboost.plain_histograms", sender=PASSIVE, receiver=ACTIVE,
         protection=(Protection.AGGREGATE, Protection.SHUFFLED),
         reveals="PLAINTEXT MODE: the same per-candidate G_L, H_L, n_L as secureboost.histograms "
                 "reveals after decryption (anonymous, shuffled per node)")
@dataclass(frozen=True)
class PlainHistograms:
    tree: int
    depth: int
    nodes: np.ndarray
    counts: np.ndarray
    grad: np.ndarray  # int64 fixed-point G_L per candidate, (candidates, outputs)
    hess: np.ndarray  # int64 fixed-point H_L, (candidates, outputs)
    rows: np.ndarray  # int64 n_L


@declare("secureboost.split_request", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.PLAINTEXT,
         reveals="which of its anonymous candidates won which node (ties listed together): the "
                 "owner learns that its feature/threshold is the best split of that node (under --dp-epsilon, "
                 "chosen from noised G sums: covered by the label-DP guarantee of secureboost.dp_level)")
@dataclass(frozen=True)
class SplitRequest:
    tree: int
    depth: int
    nodes: np.ndarray  # int32 nodes this party won
    offsets: np.ndarray  # int32 CSR offsets into ``candidates`` (len(nodes) + 1)
    candidates: np.ndarray  # int32 tied anonymous ids (positions in the node's list)


@declare("secureboost.split_response", sender=PASSIVE, receiver=ACTIVE,
         protection=Protection.PLAINTEXT,
         reveals="the left instance set of each split on this passive party's features (over every "
                 "row at the node: sampled, unsampled and validation rows) and an "
                 "opaque record id; not the feature or the threshold")
@dataclass(frozen=True)
class SplitResponse:
    tree: int
    depth: int
    nodes: np.ndarray  # int32
    record_ids: np.ndarray  # int64
    left_bits: np.ndarray  # uint8: np.packbits of each node's left mask (all node rows ascending)


@declare("secureboost.predict_query", sender=ACTIVE, receiver=PASSIVE,
         protection=Protection.PLAINTEXT,
         reveals="which prediction rows reach each of the owner's split nodes (record ids), one "
                 "message per tree level")
@dataclass(frozen=True)
class PredictQuery:
    model_id: str
    n_rows: int
    depth: int
    done: bool
    record_ids: np.ndarray  # int64
    offsets: np.ndarray  # int64 CSR offsets into ``rows``
    rows: np.ndarray  # int32 prediction row indices


@declare("secureboost.predict_answer", sender=PASSIVE, receiver=ACTIVE,
         protection=Protection.PLAINTEXT,
         reveals="the left/right bit of every queried row at the owner's nodes: the passive "
                 "partition of the prediction rows, not the feature or threshold")
@dataclass(frozen=True)
class PredictAnswer:
    depth: int
    left_bits: np.ndarray  # uint8 packbits per query segment, concatenated


@declare("secureboost.serve_request", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PLAINTEXT,
         reveals="prediction service (`party ... serve secureboost`): the model id, a batch number and the IDs of "
                 "every row the label holder asks to score in that batch, in the clear (so which of its "
                 "customers are scored, when, how often and together with which others; IDs the active party "
                 "does not hold are answered locally and never sent); with stop, the end of the service. The "
                 "rows are then routed by secureboost.predict_query / predict_answer exactly as a batch "
                 "prediction routes them")
@dataclass(frozen=True)
class ServeRequest:
    model_id: str
    batch: int
    ids: bytes  # the batch's row IDs in the order of the request (repeats kept), UTF-8, concatenated
    offsets: np.ndarray  # int64 (number of IDs + 1): where each ID starts in ``ids``, then its length
    stop: bool = False  # the service ends: no ids


@declare("secureboost.serve_rows", sender=PASSIVE, receiver=ACTIVE, protection=Protection.PLAINTEXT,
         reveals="prediction service: which requested IDs the passive party does not hold (positions in the "
                 "request; what a PSI on the batch would tell the active party); then nothing of the batch is "
                 "routed and the request is answered with an error")
@dataclass(frozen=True)
class ServeRows:
    batch: int
    missing: np.ndarray  # int32 positions in the request's ids of IDs this passive party does not hold
