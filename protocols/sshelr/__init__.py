"""Two-party logistic regression without a third party: secret-shared weights, Paillier cross terms.

FATE's Hetero SSHE-LR and SecretFlow's HESS-LR: the label holder and one feature party
train logistic regression with no coordinator. Every weight is an additive share of the
two parties; each cross-party product goes through an HE-based secure matrix
multiplication (one party sends its share under its own Paillier key, the other multiplies
by its plaintext columns, adds a fresh mask and sends it back, so the product ends in
additive shares); the sigmoid is FATE's first-order Taylor expansion ``σ(z) ≈ 1/2 + z/4``.

Parties
    * **active party** ("active", FATE's guest): the 0/1 labels ``y`` and optionally its
      own columns; a Paillier key pair; learns its own weights (its standardized columns,
      then an intercept) at the end, and nothing else.
    * **passive party** ("passive-0", FATE's host): its columns; its own Paillier key pair;
      learns its own weights at the end, and nothing else.
    No coordinator. Exactly one passive party (a share between two parties; FATE's SSHE-LR
    is two-party as well, SecretFlow's HESS-LR two-party only).

Threat model
    Semi-honest, two parties. Each sees the other's values only (a) under the other's
    Paillier key (IND-CPA: DCR plus DJN's short exponent) or (b) as shares: its initial
    share of the other's weights is uniform mod 2^256 (perfect), and every product it
    decrypts under its own key carries a mask uniform over 40 bits more than the product
    can span (statistical distance ≤ 2^-40 per value). Neither party learns the other's
    weights, the logits, the other's share of the logits, the errors or the gradients;
    the passive party never sees anything that depends on ``y`` except through shares.
    Revealed by design: the row count and schedule (the plan), each party's column
    count, and each party's own final weights to that party (FATE's default "reveal at
    end" to the owner). No loss is revealed. Each party's final weights are a function of
    both parties' data (as in every vertical model). Fixed-point encodings and Python big
    integers are not constant-time; see SECURITY.md.

Arithmetic (:mod:`.math`)
    Shares mod Q = 2^256; features at 20 fractional bits, weights at 32, the step η/m at
    48; the error kept as 4e = z + 2 − 4y (no division); one SecureML local truncation per
    epoch of each weight share (off by at most 2^-32; failure probability below 2^-85).
    The Taylor sigmoid makes the gradient that of ``(1/8)(z − (4y − 2))²``: the protocol
    fits a least-squares discriminant on targets ±2, close to logistic regression in
    accuracy and AUC but with uncalibrated probabilities (see :mod:`.math`).

Secure matrix multiplication (party B holds a share ``s``, party A a plaintext matrix ``M``)
    B → A ``[[s]]_B``; A → B ``[[M s + r']]_B``, ``r' = 2^b + r``, ``r`` uniform in
    ``[0, 2^(b+40))`` for the public bound ``|M s| < 2^b``; B's share is ``(M s + r') mod Q``,
    A's ``−r' mod Q``. The masked products are positive and below ``2^(b+41)``, so A folds
    ``⌊(|n| − 1)/(b + 42)⌋`` of them into each ciphertext (six at 2048 bits, b ≈ 290) and
    re-randomizes it: B decrypts six times fewer ciphertexts and the messages are six times
    smaller. A computes ``X·[[s]]`` with every ciphertext of ``[[s]]`` as a fixed base of
    windowed tables (:meth:`~vflcrypto.he.paillier.PaillierVector.matvec`), the fold included.

Message flow (the named steps of :mod:`.roles` in brackets; both parties run 2–7 mirrored)
    0. each → other   ``sshelr.public_key``                                        [start, on_key]
    1. active → passive ``sshelr.plan``; each → other ``sshelr.weight_share``:
       a uniform share of its own zero initial weights                             [on_key, on_plan, on_share]
    For every epoch:
    2. each → other   ``sshelr.*_ciphertexts``: [[its share of the other's weights]]
       under its own key                                                           [begin_epoch]
    3. each → other   ``sshelr.masked_for_*``: [[X_me·s + r]] under the other's key,
       s the other's share of my weights                                           [on_weights]
    4. each decrypts its share t of the other's cross term; logit share
       <z> = X_me<w_me> − r + t; error share <4e> (the active party adds
       (2 − 4y)·scale); each → other ``sshelr.*_ciphertexts``: [[<4e>]]            [on_logits]
    5. each → other   ``sshelr.masked_for_*``: [[X_meᵀ·s + r]], s the other's
       error share                                                                 [on_error]
    6. each decrypts its share of the other's gradient; own gradient share
       X_meᵀ<4e> − r; both weight shares updated: <w> ← <w> − trunc(c·<g>),
       c = round(η/m·2^48)                                                         [on_gradient]
    7. after the last epoch, each → other ``sshelr.reveal_share``: its share of the
       other's weights; each learns its own weights                                [on_reveal]

Prediction with a saved model (:mod:`.predict`; ``train sshelr --model-dir``, ``predict sshelr``)
    Each party keeps its own revealed weights and its standardization. On new rows the active
    party sends ``sshelr.predict_plan`` (row count, digest of the query IDs) and the passive
    party answers ``sshelr.predict_score``: its score u_P = Z_P w_P per row, in the clear; the
    active party's logit is z = u_A + u_P. What the label holder learns at prediction: z per
    query row, and with its own u_A the passive party's score u_P per row (which the score
    message sends; FATE's SSHE-LR predicts the same way once weights are revealed to their
    owners). The passive party learns the row count only.

Citation
    Chen et al., "When Homomorphic Encryption Marries Secret Sharing: Secure Large-Scale
    Sparse Logistic Regression and Applications in Risk Control", KDD 2021 (CAESAR;
    arXiv:2008.08753), the design both FATE's Hetero SSHE-LR
    (``federatedml/linear_model/bilateral_linear_model``; FATE 2 ``fate.ml.glm.hetero.sshe``:
    Taylor sigmoid, weights shared between guest and host, reveal at end) and SecretFlow's
    HESS-LR (``secretflow/ml/linear/hess_sgd``: one HEU per party, each the key holder of
    its own device) follow; Mohassel & Zhang, "SecureML", IEEE S&P 2017 (local truncation).

Modules: :mod:`.math` (the ring, fixed point and the reference in the clear),
:mod:`.messages`, :mod:`.roles`, :mod:`.predict`, :mod:`.audit`, :mod:`.cli`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.spec import Command, FlowerSpec, PartyTask, ProtocolSpec

from . import cli
from .audit import CHECKS as AUDIT_CHECKS
from .audit import audit_run, demo_step, example, logits
from .math import (
    FEATURE_FRAC,
    RING,
    RING_BITS,
    STEP_FRAC,
    WEIGHT_FRAC,
    SSHELRParams,
    plaintext_fit,
    prepare_active,
    prepare_passive,
    taylor_loss,
    taylor_sigmoid,
)
from .messages import (
    ACTIVE,
    OU_REFUSAL,
    PASSIVE,
    ActiveCiphertexts,
    MaskedForActive,
    MaskedForPassive,
    PassiveCiphertexts,
    Plan,
    PredictPlan,
    PredictScore,
    PublicKey,
    RevealShare,
    WeightShare,
)
from .predict import PredictActiveRole, PredictPassiveRole, party_models, predict_local
from .roles import ActiveRole, PassiveRole, SSHELRRun, run_local

__all__ = ["ACTIVE", "FEATURE_FRAC", "PASSIVE", "RING", "RING_BITS", "SPEC", "STEP_FRAC", "WEIGHT_FRAC",
           "ActiveCiphertexts", "ActiveRole", "MaskedForActive", "MaskedForPassive", "PassiveCiphertexts",
           "PassiveRole", "Plan", "PredictActiveRole", "PredictPassiveRole", "PredictPlan", "PredictScore",
           "PublicKey", "RevealShare", "SSHELRParams", "SSHELRRun", "WeightShare", "audit_run", "demo_step", "example",
           "logits", "party_models", "plaintext_fit", "predict_local", "prepare_active", "prepare_passive",
           "run_local", "taylor_loss", "taylor_sigmoid"]


def _flower_parties(run_config: Mapping[str, Any]) -> dict[str, str]:
    return {ACTIVE: ACTIVE, "passive-0": PASSIVE}


def _flower_role(party: str, run_config: Mapping[str, Any]) -> Any:
    Xa, y, _, Xp, _ = example(int(run_config.get("rows", 300)))
    params = SSHELRParams(epochs=int(run_config.get("epochs", 5)))
    bits, insecure = int(run_config.get("key-bits", 2048)), bool(run_config.get("allow-insecure", False))
    if party == ACTIVE:
        return ActiveRole(Xa, y, params=params, key_bits=bits, allow_insecure=insecure)
    return PassiveRole(Xp, name=party, expected=params, key_bits=bits, allow_insecure=insecure)


def _flower_summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
    w = results[ACTIVE]
    return {"lines": [f"[vflcrypto] sshelr: active weights {' '.join(f'{v:.6f}' for v in w)}"],
            "weights": w.tolist()}


SPEC = ProtocolSpec(
    name="sshelr",
    title="Two-party logistic regression without a coordinator (secret shares + Paillier, FATE SSHE-LR)",
    roles={ACTIVE: ActiveRole, PASSIVE: PassiveRole},
    run_local=run_local,
    audit=audit_run,
    checks=AUDIT_CHECKS,
    config=SSHELRParams,
    demo=demo_step,
    demo_order=52,
    commands=(Command("sshelr", "two-party logistic regression without a coordinator (secret-shared weights, "
                                "Paillier cross terms; FATE's SSHE-LR)", cli.add_train_arguments, cli.train,
                      description=cli.__doc__),
              Command("sshelr", "apply a saved SSHE-LR model to new rows (the passive party's scores to the active "
                                "party)", cli.add_predict_arguments, cli.predict, group="predict",
                      description=cli.predict.__doc__)),
    party_tasks=(PartyTask("sshelr", "two-party logistic regression without a coordinator (SSHE-LR)",
                           cli.add_party_arguments, cli.party_task),
                 PartyTask("sshelr", "apply saved SSHE-LR models to new rows (the passive party's score per row)",
                           cli.add_party_predict_arguments, cli.party_predict_task, group="predict")),
    flower=FlowerSpec(ACTIVE, _flower_parties, _flower_role, _flower_summary),
    oracle=OU_REFUSAL,
)
