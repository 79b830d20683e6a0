"""SecureBoost: vertically federated gradient-boosted decision trees.

Parties and data
    * **active party** (role ``"active"``, party ``"active"``): holds the labels ``y`` and
      its own feature block ``X_a`` of the aligned rows, the Paillier key pair, and at
      the end the trees (structure, leaf weights, its own thresholds, and for every
      split on a passive feature only ``[party, record id]``).
    * **passive parties** (role ``"passive"``, parties ``"passive-0"``, ``"passive-1"``,
      ...; k >= 1): each holds a feature block ``X_k`` of the same aligned rows, and at
      the end a lookup table ``record id -> (feature, threshold)`` for the splits it owns.
    Rows are aligned beforehand (:mod:`vflcrypto.protocols.align`); a digest of the ordered row
    IDs in ``secureboost.setup`` makes misaligned inputs fail before training.

Threat model
    Semi-honest parties. The passive parties must not collude with the active party (it
    holds the decryption key of every gradient they see) nor with each other (pooling
    instance spaces and split ownership sharpens label inference). What each role
    learns is declared per message below and summarised in SECURITY.md; notably every
    passive party learns the *instance space* (which rows share a tree node) and the
    active party learns, per node, the left-side sums ``(G_L, H_L, n_L)`` of every
    passive split candidate (anonymous, shuffled), which are the protocol's outputs by
    design in Cheng et al. Plaintext mode (``plaintext=True``) runs the same messages
    without encryption (separately declared kinds ``secureboost.plain_*``) for debugging
    and as the parity reference: there the passive parties see every gradient, and for
    the logistic loss ``g = p - y`` reveals every label.

Citations
    K. Cheng, T. Fan, Y. Jin, Y. Liu, T. Chen, D. Papadopoulos, Q. Yang, "SecureBoost: A
    Lossless Federated Learning Framework", IEEE Intelligent Systems 36(6), 2021
    (arXiv:1901.08755, 2019); FATE's hetero secure boosting (gradient/hessian packing,
    cipher compression, histogram subtraction); SecretFlow SGB; T. Chen, C. Guestrin,
    "XGBoost: A Scalable Tree Boosting System", KDD 2016 (the gain and leaf weight).

Message flow (one tree; every level's nodes are handled in one exchange)
    0. active -> passive ``secureboost.setup``: model id, the training plan (every
       :class:`BoostParams` option; a network party refuses a plan that differs from its own
       flags), whether rows are weighted, row count, ID digest and the active party's
       Paillier public key (once per training run).
    1. active -> passive ``secureboost.gradients``: which rows are in this tree's sample
       and one ciphertext per sampled row packing ``(g_i, h_i)`` (all K classes' for a
       multi-output tree; ``secureboost.plain_gradients`` in plaintext mode), in parts of
       consecutive rows, each encrypted while the one before is on the link (:mod:`.parts`).
    For each depth ``d < max_depth`` while some node can still split:
    2. active -> passive ``secureboost.level``: the node of every row at depth ``d`` (rows
       outside the sample and validation rows are routed too, never summed) and,
       per node, whether to *compute* its histogram (the smaller child of a split) or
       *derive* it as parent minus sibling (histogram subtraction).
    3. passive -> active ``secureboost.histograms``: per node, the encrypted cumulative
       bin sums ``[[G_L]], [[H_L]]`` of every split candidate ``(feature, bin)`` of that
       party, empty-bin duplicates removed, in a fresh ``secrets`` shuffle per node
       (the position is the anonymous candidate id), folded many per ciphertext
       (compression) and re-randomized (``secureboost.plain_histograms`` in plaintext).
    4. active: decrypts, scores every candidate (own and passive) with
       ``gain = 1/2 [G_L^2/(H_L+lambda) + G_R^2/(H_R+lambda) - G^2/(H+lambda)] - gamma``
       and picks the best per node (deterministic tie-break, see :func:`select_split`).
    5. active -> passive ``secureboost.split_request``: the anonymous ids of the nodes a
       passive party won (to every passive party, possibly empty, to keep lockstep).
    6. passive -> active ``secureboost.split_response``: per won node a fresh record id
       and the left instance set. Only the owner learns the real feature and threshold.
    7. after the last level: active -> passive ``secureboost.level`` with ``done=True``;
       the active party sets leaf weights ``w = -G/(H+lambda)`` (never sent). After the
       last tree ``kept`` tells the passive parties how many rounds the model keeps.

Training options (XGBoost's names and meanings; :mod:`.options`)
    ``subsample`` (uniform rows per tree, public seed), ``colsample_bytree`` (each party
    draws its own columns per tree, public seed), GOSS (``top_rate``, ``other_rate``: the top
    rows by ``|g|`` and a draw of the rest amplified by ``(1 - a) / b``, Ke et al. 2017; the
    draw uses the active party's private randomness), ``min_child_weight``, ``gamma`` (the
    loss change of a split must reach it, as in XGBoost's hist method), sample weights
    (multiplying g and h), and early stopping (``validation_fraction`` of the training rows,
    a public split every party routes; the active party evaluates XGBoost's default metric
    after each round and the model keeps the best round). Sampling cuts the ciphertexts per
    tree and the rows summed into histograms; the passive parties learn the sampled set.

Label defences (:mod:`.defence`; off by default, part of the plan every party checks)
    ``--first-tree-active-only`` / ``--active-only-trees K``: the first K rounds on the active
    party's features alone; the passive parties receive only each such tree's end (no gradients,
    no instance space) and refuse anything else of it (SecretFlow SGB's
    ``first_tree_with_label_holder_feature``, FATE's ``complete_secure``). ``--dp-epsilon EPS``:
    each row's g clipped, Gaussian noise on every node's G sums (own bins, passive candidates,
    the node total) before the split choice and on every leaf's G; the level requests then travel
    as ``secureboost.dp_level``: (EPS, delta)-label-DP of everything the passive parties receive
    and of the model, accounted over ``1 + trees x (depth + 1)`` releases by dp-accounting.
    ``vflcrypto audit secureboost --defence active-only|hist-gauss --budgets ...`` draws their
    frontier (:mod:`.frontier`). Returning to a passive party only the splits it owns is not an
    option: its histograms need every node's rows (SECURITY.md says why and what it would cost).

Feature importance (:meth:`ActiveModel.importance`, :meth:`PassiveModel.importance`)
    Computed from what each party already holds, no message: the active party has XGBoost's
    weight, gain and cover for its own features and, for passive splits, per party and opaque
    record id; each passive party has the split count of its own features (the gains and
    covers of its splits stay with the active party: they are label statistics of the nodes).

Prediction (``predict_local``): the active party walks all trees level by level; for
nodes owned by a passive party it sends one ``secureboost.predict_query`` per party per
level at which rows reach that party's nodes (record ids and the rows at each node) and the
owner answers left/right bits in ``secureboost.predict_answer``. ``party ... serve
secureboost`` (:mod:`.serve`) keeps the parties up and routes batches of IDs the same way.

Optimisations (and why)
    * g and h are packed into one ciphertext per row (:class:`PackingSpec`, slot offset
      ``2**value_bits`` makes g non-negative; headroom for ``n`` additions).
    * Histogram subtraction happens on the passive side on ciphertexts (``[[parent]] *
      [[smaller child]]^-1``), after the cumulative sums, so the active party still
      receives only anonymous, freshly shuffled candidates per node. Active-side plaintext
      subtraction would be cheaper by one batch inversion per node but needs candidate ids
      that are stable between parent and child, which lets the active party link
      candidates across nodes and reconstruct feature groups and bin order.
      The packed offsets stay correct because nothing is padded: every ciphertext sums
      exactly its ``n_L`` rows, and subtracting sums of real rows keeps real counts.
      ``value_bits`` covers a whole column sum, so the decryptor reads ``n_L`` exactly from
      the offsets in the hessian slot: the per-candidate row count is revealed to the
      active party (declared; FATE reveals it too).
    * Cumulative bin sums are formed on ciphertexts by the passive party (a few hundred
      multiplications per node): the active party sees only left-side sums of anonymous
      candidates, not per-bin statistics in feature order. It can still difference
      candidates with nested left sets, which is why the table in SECURITY.md declares
      the small-bin leak.
    * Many candidates are folded into one ciphertext before decryption (Horner,
      ``acc**(2**b) * c``) in the process pool, then the few folded ciphertexts are
      re-randomized. (:func:`vflcrypto.he.paillier.compress` does the same fold, but
      sequentially and without re-randomization, which would let the active party test
      subset products of its own row ciphertexts.)
    * The per-row histogram accumulation (the passive party's dominant cost) runs over
      chunks of rows in :mod:`vflcrypto.parallel`'s process pool, all features of all nodes
      of a level in one pass. (``PaillierVector.sum_by_group`` pads every group to the same
      number of packed terms; cumulative sums would then multiply the terms past the
      packing's headroom, and packed vectors cannot be negated for the subtraction, so the
      kernel here sums raw ciphertexts and keeps real row counts instead.) Each node's
      features but one leave out the rows of their largest bin and recover its sum from the
      node's total (:mod:`.kernels`): the same ciphertexts with fewer multiplications where a
      feature has a dominant value. Overall, encrypting every row's (g, h) once per tree
      dominates: see bench/secureboost_bench.py.

Modules: :mod:`.messages` (declarations), :mod:`.tree` (parameters, binning, gain math,
quantization, split selection, unfolding), :mod:`.kernels` (the encrypted bin sums), :mod:`.model` (the party models),
:mod:`.active` and :mod:`.passive` (training as named steps), :mod:`.histograms` (reading a
histogram message, the level's histogram plan), :mod:`.defence` (the label defences),
:mod:`.local` (over Channels and in one process), :mod:`.predict` (joint prediction),
:mod:`.audit`, :mod:`.frontier`, :mod:`.cli`.

Multiclass (``objective="multiclass"``, softmax; labels 0..K-1)
    Gradients ``g_k = p_k - [y = k]`` and XGBoost's diagonal hessian ``h_k = 2 p_k (1 - p_k)``
    for every class, computed once per round; initial margins are the centred log class
    priors. Two strategies (XGBoost's names):

    * ``multi_output_tree`` (FATE's SBT-MO): one tree per round. Each row's ciphertext packs
      all K classes' (g, h) (2K slots); histograms, subtraction and folding are unchanged
      but every candidate decodes to K pairs (G_L, H_L); the gain is the sum of the
      per-class gains and each leaf holds K weights. Encryption, the dominant cost, is
      paid once per round instead of K times.
    * ``one_output_per_tree``: K ordinary single-output trees per round, tree ``k`` on
      class ``k``'s (g, h): the binary protocol K times.

    ``secureboost.setup`` carries the outputs per tree and the trees per round (one of them
    is K), so each passive party learns the number of classes.

Exactness: g and h are quantized to ``frac_bits`` fixed-point integers *before*
encryption and plaintext mode uses the same integers, so decrypted sums equal the
plaintext sums exactly and both modes grow bit-identical trees.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.errors import ConfigurationError
from vflcrypto.spec import Command, FlowerSpec, PartyTask, ProtocolSpec

from . import cli, frontier, serve
from .active import ActiveResult, ActiveRole, decode_histograms
from .audit import CHECKS as AUDIT_CHECKS
from .audit import audit_run, demo_step, example, label_inference_attack
from .checkpoint import CheckpointDir, ResumableActive, ResumablePassive, data_digest, plan_of
from .defence import DEFENCES
from .local import LocalRun, passive_names, run_active, run_local, run_passive
from .messages import (
    ACTIVE,
    PASSIVE,
    EncryptedGradients,
    EncryptedHistograms,
    LevelRequest,
    PlainGradients,
    PlainHistograms,
    PredictAnswer,
    PredictQuery,
    Setup,
    SplitRequest,
    SplitResponse,
)
from .model import IMPORTANCE_TYPES, ActiveModel, PassiveModel, link
from .options import DEFAULT_SCHEME
from .passive import PassiveResult, PassiveRole, shuffle_candidates
from .predict import predict_active, predict_local, predict_passive
from .tree import (
    GAIN_EPS,
    BoostParams,
    base_score,
    bin_feature,
    bin_features,
    gradients,
    leaf_weight,
    select_split,
    split_gain,
)

__all__ = [
    "ACTIVE", "DEFAULT_SCHEME", "GAIN_EPS", "IMPORTANCE_TYPES", "PASSIVE", "SPEC", "ActiveModel", "ActiveResult",
    "ActiveRole",
    "BoostParams", "EncryptedGradients", "EncryptedHistograms", "LevelRequest", "LocalRun", "PassiveModel",
    "PassiveResult", "PassiveRole", "PlainGradients", "PlainHistograms", "PredictAnswer", "PredictQuery", "Setup",
    "SplitRequest", "SplitResponse", "audit_run", "base_score", "bin_feature", "bin_features", "decode_histograms",
    "demo_step", "example", "gradients", "label_inference_attack", "leaf_weight", "link", "passive_names",
    "predict_active", "predict_local", "predict_passive", "run_active", "run_local", "run_passive", "select_split",
    "shuffle_candidates", "split_gain",
]


# --------------------------------------------------------------------------- Flower


def _flower_params(run_config: Mapping[str, Any]) -> BoostParams:
    params = BoostParams(n_trees=int(run_config.get("trees", 3)), max_depth=int(run_config.get("depth", 3)),
                         max_bin=int(run_config.get("max-bin", 16)))
    params.validate()
    return params


def _flower_parties(run_config: Mapping[str, Any]) -> dict[str, str]:
    return {ACTIVE: ACTIVE, "passive-0": PASSIVE}


def _flower_role(party: str, run_config: Mapping[str, Any]) -> Any:
    """The party's role (the active party's gradients in one frame a tree: every frame is a round trip
    through the SuperLink); with run config ``checkpoint-dir``, the checkpointing one (each party writes
    ``<party>.tree-<count>.npz`` there on its own node; ``resume = true`` goes on from them)."""
    Xa, y, ca, Xp, cp = example(n=int(run_config.get("rows", 200)))
    params, plaintext = _flower_params(run_config), bool(run_config.get("plaintext", False))
    directory = str(run_config.get("checkpoint-dir", "") or "")
    resumable: dict[str, Any] = {}
    if directory:
        rows = data_digest([], ca, Xa, y) if party == ACTIVE else data_digest([], cp, Xp)
        resumable = {"checkpoint": CheckpointDir(directory, party, plan_of(params, plaintext, False), rows),
                     "resume": bool(run_config.get("resume", False))}
    elif run_config.get("resume", False):
        raise ConfigurationError("run config resume=true needs checkpoint-dir (where the interrupted run's "
                                 "checkpoints are)")
    if party == ACTIVE:
        return (ResumableActive if resumable else ActiveRole)(
            Xa, y, passives=["passive-0"], columns=ca, params=params, plaintext=plaintext,
            key_bits=int(run_config.get("key-bits", 2048)),
            allow_insecure=bool(run_config.get("allow-insecure", False)),
            scheme=str(run_config.get("scheme", DEFAULT_SCHEME)), gradient_part_rows=0, **resumable)
    return (ResumablePassive if resumable else PassiveRole)(Xp, name=party, columns=cp, **resumable)


def _flower_summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
    from vflcrypto.ml.metrics import roc_auc

    _, y, *_ = example(n=int(run_config.get("rows", 200)))
    res: ActiveResult = results[ACTIVE]
    auc = roc_auc(y, res.train_predictions())
    resumed = "" if res.resumed_from is None else f" (resumed from tree {res.resumed_from})"
    return {"lines": [f"[vflcrypto] secureboost: {res.model.n_trees} trees, training AUC {auc:.4f}{resumed}"],
            "train_auc": auc, "model_id": res.model.model_id,
            **({} if res.resumed_from is None else {"resumed_from": res.resumed_from})}


SPEC = ProtocolSpec(
    name="secureboost",
    title="SecureBoost",
    roles={ACTIVE: ActiveRole, PASSIVE: PassiveRole},
    run_local=run_local,
    audit=audit_run,
    checks=AUDIT_CHECKS,
    config=BoostParams,
    demo=demo_step,
    demo_order=40,
    commands=(Command("secureboost", "SecureBoost gradient-boosted trees (Paillier or OU)", cli.add_train_arguments,
                      cli.train, description=cli.__doc__),
              Command("secureboost", "apply saved SecureBoost trees to new rows (joint prediction)",
                      cli.add_predict_arguments, cli.predict, group="predict", description=cli.predict.__doc__)),
    party_tasks=(PartyTask("secureboost", "SecureBoost gradient-boosted trees (Paillier or OU)",
                           cli.add_party_arguments, cli.party_task, check=cli.party_check),
                 PartyTask("secureboost", "apply saved SecureBoost models to new rows (joint tree walk)",
                           cli.add_party_predict_arguments, cli.party_predict_task, group="predict"),
                 PartyTask("secureboost", "keep a SecureBoost model up: answer batches of IDs (requests on the "
                           "label holder's stdin, one JSON answer line each)", serve.add_arguments, serve.party_task,
                           group="serve", check=serve.party_check)),
    flower=FlowerSpec(ACTIVE, _flower_parties, _flower_role, _flower_summary),
    schemes=("ou-2048", "paillier", "ou", "ou-heu"),
    defences=DEFENCES,
    frontier=frontier.frontier,
)
