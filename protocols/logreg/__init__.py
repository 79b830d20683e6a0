"""Vertical logistic regression: a plain protocol and a secure one.

Parties and roles
-----------------
* **active** party (``"active"``): holds the labels ``y`` and no features. It is the
  label-holding server of Flower's vertical-FL example (Seed 004 of the design card: "an
  active party without features"), acts as the *coordinator* of the training loop (it
  drives the steps and waits for every acknowledgement), and in the secure protocol it
  owns the Paillier key pair. Output: the loss history, the train loss of the final
  model and test loss / accuracy (predictions on the test rows).
* **passive** parties (``"passive-0"``, ``"passive-1"``, ...): hold feature blocks
  ``X_k`` of the same (aligned) rows and their own weights ``w_k``; ``passive-0`` also
  holds the intercept as a column of ones. Output: their own weights (no party ever
  holds the whole model).

The model is ``p = sigmoid(sum_k X_k w_k)`` trained by full-batch gradient descent on the
binary cross-entropy: exactly centralized logistic regression on the concatenated
features ``[X_0 | X_1 | ...]`` (the plain protocol to float round-off; the secure one to
fixed-point precision, see :data:`RING_FRAC_BITS` and :data:`GRAD_FRAC_BITS`).

Plain protocol (Flower's ``vertical-fl`` example; Seed 004)
-----------------------------------------------------------
0. active -> every passive: ``logreg.setup`` (public: mode, rows, steps, learning rate,
   digest of the row IDs so misaligned inputs fail before training).
For each step t = 0 .. steps-1 (active sends ``logreg.request`` action "step"):
1. passive k -> active: ``logreg.logits`` z_k = X_k w_k (plaintext).
2. active: z = sum_k z_k, p = sigmoid(z), loss = BCE(y, p), r = (p - y) / n;
   active -> every passive: ``logreg.residual`` r (plaintext).
3. passive k: w_k <- w_k - lr X_k^T r; passive k -> active: ``logreg.ack``.
Prediction (needs every party): active sends ``logreg.request`` "predict-train" /
"predict-test"; each passive answers ``logreg.logits`` on those rows; finally "stop".

Secure protocol
---------------
0. active -> every passive: ``logreg.setup`` with the active party's Paillier public key.
1. Pairwise key agreement (SecAgg, Bonawitz et al. CCS 2017): every pair of passives
   exchanges ``logreg.key_share`` (an ephemeral X25519 public key signed with the
   sender's Ed25519 identity key), directly passive <-> passive. Identity public keys are
   *pinned in configuration* (given to each party out of band); a bad signature aborts.
   The pair seed is HKDF(X25519 secret, names, run id) (:func:`vflcrypto.sharing.masking.agree_seed`).
For each step t:
2. passive k -> active: ``logreg.masked_logits``: z_k in fixed point mod 2^64 plus the
   signed pairwise masks PRG(seed_kj, t) (+ for the smaller name, - for the larger),
   which cancel in the sum: the active party learns z = sum_k z_k and nothing else.
3. active: p, loss, r as above; active -> every passive: ``logreg.encrypted_residual``
   [[r]] under its own Paillier key (fixed point; the passives never see r).
4. passive k: [[g_k + R_k]] = [[r]]^T X_k + [[R_k]], R_k fresh and uniform mod n;
   passive k -> active: ``logreg.masked_gradient``.
5. active decrypts; active -> passive k: ``logreg.gradient_reply`` g_k + R_k mod n
   (uniform mod n to the active party, which therefore learns nothing about g_k).
6. passive k removes R_k, decodes g_k = X_k^T r, updates w_k; sends ``logreg.ack``.
Prediction: as in the plain protocol, but the logits are pairwise-masked
(``logreg.masked_logits``) so the active party learns only the summed logits z.

Saved models and prediction on new rows (:mod:`.predict`)
---------------------------------------------------------
``vflcrypto train logreg --model-dir DIR`` saves each party's file: a feature party's weights
with its own preprocessing (training medians, mean and standard deviation, the intercept at
``passive-0``), the label holder's mode, label column and parties. ``vflcrypto predict logreg``
runs the prediction phase above on new rows in the model's mode, after a ``logreg.setup`` with
no training step (no Paillier key: nothing is encrypted at prediction). What the label holder
learns at prediction is what it learns of the test rows in training: the summed logit
z = sum_k z_k of every query row (and so sigma(z)); in secure mode nothing about one z_k while
at least two feature parties are honest, but with a single feature party z *is* that party's
score X_0 w_0 per row; in plain mode every z_k. The feature parties learn the row count and the
digest of the query IDs.

Label DP (:mod:`.defence`, off by default)
------------------------------------------
``--label-dp ε`` (both modes): the active party trains on randomized-response labels (each
kept with probability e^ε/(e^ε + 1), drawn once), announced in ``logreg.setup``; everything it
sends is pure ε-label-DP (plain residuals travel as ``logreg.dp_residual``). ``vflcrypto audit
logreg --defence label-rr --budgets 1,2,4,8`` draws its privacy–utility frontier.

Threat model
------------
Semi-honest parties. *Plain*: none of the protections below; every passive party learns
the residuals r and hence every training label (sign of r, see :func:`audit_run`), the
active party learns every z_k. *Secure*: the active party must not collude with any
passive party (it holds the Paillier key: together they decrypt [[r]] and recover the
labels); the pairwise masks hide an individual z_k from the active party only while at
least two passive parties are honest (one passive party colluding with the active party
can subtract its own masks; with only two passive parties the other's z_k then follows
from z). What remains revealed by design: the active party learns z (the full logits,
hence the model's predictions on every row); each passive party learns its own gradient
X_k^T r every step (d_k linear equations in the n residuals). Fixed-point encodings and
Python big integers are not constant-time; see SECURITY.md.

Modules: :mod:`.messages` (declarations), :mod:`.math` (the plain functions every step
calls), :mod:`.roles` (the named steps, ``run_local``), :mod:`.predict` (saved models on new
rows), :mod:`.audit` (attacks and demo), :mod:`.cli` (the train and predict commands and the
network task). The Titanic example data lives in
:mod:`vflcrypto.data.titanic`.

Citations: Hardy et al., "Private federated learning on vertically partitioned data via
entity resolution and additively homomorphic encryption" (2017) for the Paillier
residual/masked gradient pattern; Bonawitz et al. (CCS 2017) for pairwise masks;
Flower's ``examples/vertical-fl`` for the plain protocol and the Titanic split.

Titanic example (:func:`titanic_parties`, seed 0, 713 training / 178 test rows):
step-0 loss 0.6931 (= ln 2, every probability 0.5); after 20 steps at learning rate 0.5
the loss at the last step is 0.4524, the final model's train loss 0.4510, its test loss
0.4692 and its test accuracy 77.5 % (138/178); the secure protocol gives the same figures
(weights within 1e-10). (Flower's example reports 0.4534 / 78.7 % on its own
887-row variant with different features.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.data.titanic import (
    TITANIC_FILES,
    TITANIC_PARTIES,
    TitanicSplit,
    export_titanic_parties,
    titanic_parties,
    titanic_path,
)
from vflcrypto.ml.preprocess import local_features
from vflcrypto.spec import Command, FlowerSpec, PartyTask, ProtocolSpec

from . import cli
from .audit import CHECKS as AUDIT_CHECKS
from .audit import audit_run, demo_step, frontier, label_attack, majority_rate, secure_findings
from .defence import DEFENCES
from .math import (
    GRAD_FRAC_BITS,
    RING_BITS,
    RING_FRAC_BITS,
    accept_key_share,
    bce_loss,
    centralized_gd,
    decode_ring,
    decrypt_masked,
    encode_ring,
    encrypt_residual,
    local_gradient,
    make_key_share,
    mask_logits,
    masked_encrypted_gradient,
    pair_step_seed,
    partial_logits,
    residuals,
    rows_digest,
    sgd_update,
    sigmoid,
    unmask_gradient,
    unmask_sum,
)
from .messages import (
    ACTIVE,
    OU_REFUSAL,
    PASSIVE,
    Ack,
    DpResidual,
    EncryptedResidual,
    GradientReply,
    Identity,
    KeyShare,
    Logits,
    MaskedGradient,
    MaskedLogits,
    Request,
    Residual,
    Setup,
)
from .predict import PredictActiveRole, PredictPassiveRole, party_models, predict_local
from .roles import (
    ActiveResult,
    ActiveRole,
    LocalRun,
    PassiveResult,
    PassiveRole,
    passive_names,
    run_active,
    run_local,
    run_passive,
)

__all__ = [
    "ACTIVE", "DEFENCES", "GRAD_FRAC_BITS", "PASSIVE", "RING_BITS", "RING_FRAC_BITS", "SPEC", "TITANIC_FILES",
    "TITANIC_PARTIES", "Ack", "ActiveResult", "ActiveRole", "DpResidual", "EncryptedResidual", "GradientReply",
    "Identity", "KeyShare", "LocalRun", "Logits", "MaskedGradient", "MaskedLogits", "PassiveResult", "PassiveRole",
    "PredictActiveRole", "PredictPassiveRole", "Request", "Residual", "Setup", "TitanicSplit", "accept_key_share",
    "audit_run", "bce_loss", "centralized_gd", "decode_ring", "decrypt_masked", "demo_step", "encode_ring",
    "encrypt_residual", "export_titanic_parties", "frontier", "label_attack", "local_features", "local_gradient",
    "majority_rate", "make_key_share", "mask_logits", "masked_encrypted_gradient", "pair_step_seed", "partial_logits",
    "party_models", "passive_names", "predict_local", "residuals", "rows_digest", "run_active", "run_local",
    "run_passive", "secure_findings", "sgd_update", "sigmoid", "titanic_parties", "titanic_path", "unmask_gradient",
    "unmask_sum"
]


# --------------------------------------------------------------------------- Flower


def _flower_parties(run_config: Mapping[str, Any]) -> dict[str, str]:
    return {ACTIVE: ACTIVE, **{p: PASSIVE for p in passive_names(int(run_config.get("num-parties", 3)))}}


def _flower_role(party: str, run_config: Mapping[str, Any]) -> Any:
    data = titanic_parties(seed=int(run_config.get("seed", 0)))
    names = passive_names(int(run_config.get("num-parties", 3)))
    secure = bool(run_config.get("secure", False))
    if party == ACTIVE:
        return ActiveRole(data.y_train, data.y_test, parties=names, secure=secure,
                          steps=int(run_config.get("steps", 20)),
                          learning_rate=float(run_config.get("learning-rate", 0.5)),
                          key_bits=int(run_config.get("key-bits", 2048)),
                          allow_insecure=bool(run_config.get("allow-insecure", False)))
    k = names.index(party)
    return PassiveRole(party, data.X_train[k], data.X_test[k], announce_identity=secure, peers=names,
                       run_id=str(run_config.get("_run-id", "")))


def _flower_summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
    a = results[ACTIVE]
    mode = "secure" if run_config.get("secure", False) else "plain"
    lines = [f"[vflcrypto] step {t:2d} loss {loss:.4f}" for t, loss in enumerate(a.loss_history)]
    lines.append(f"[vflcrypto] {mode}: train loss {a.train_loss:.4f}, test loss {a.test_loss:.4f}, "
                 f"test accuracy {a.test_accuracy:.4f}")
    return {"lines": lines, "train_loss": a.train_loss, "test_loss": a.test_loss,
            "test_accuracy": a.test_accuracy, "loss_history": a.loss_history}


SPEC = ProtocolSpec(
    name="logreg",
    title="Vertical logistic regression (plain vs secure)",
    roles={ACTIVE: ActiveRole, PASSIVE: PassiveRole},
    run_local=run_local,
    audit=audit_run,
    checks=AUDIT_CHECKS,
    config=cli.LogRegConfig,
    demo=demo_step,
    demo_order=50,
    commands=(Command("logreg", "vertical logistic regression (plain or secure)", cli.add_train_arguments,
                      cli.train, description=cli.__doc__),
              Command("logreg", "apply a saved logistic-regression model to new rows (training's masked logits)",
                      cli.add_predict_arguments, cli.predict, group="predict", description=cli.predict.__doc__)),
    party_tasks=(PartyTask("logreg", "vertical logistic regression", cli.add_party_arguments, cli.party_task,
                           needs_identity=cli.needs_identity),
                 PartyTask("logreg", "apply saved logistic-regression models to new rows (the model's mode)",
                           cli.add_party_predict_arguments, cli.party_predict_task, group="predict",
                           needs_identity=cli.predict_needs_identity)),
    flower=FlowerSpec(
        ACTIVE, _flower_parties, _flower_role, _flower_summary,
        relayed={"logreg.identity": "public identity keys of this run (the ServerApp is trusted not to "
                                    "substitute them: README, Flower App)",
                 "logreg.key_share": "ephemeral X25519 public keys signed by the identity keys"}),
    oracle=OU_REFUSAL,
    defences=DEFENCES,
    frontier=frontier,
)
