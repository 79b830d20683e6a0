"""Secure vertical Poisson regression (log link) with a coordinator.

For count labels (doctor visits, claims) FATE ships Hetero Poisson regression; this is its
vertical protocol with the same three roles.

Parties
    * **active party** ("active", FATE's guest): the counts ``y`` and optionally its own
      columns; learns its own weights (its standardized columns, then an intercept).
    * **passive party** ("passive-0", FATE's host): its columns; learns its own weights.
      One passive party: ``exp(u_A + u_B) = exp(u_A)·exp(u_B)`` lets the active party form
      ``[[μ]]`` from ``[[exp(u_A)]]`` with one plaintext multiplication, but additive
      encryption cannot multiply the factors of two passive parties.
    * **coordinator** ("coordinator", FATE's arbiter): the key pair; learns the training
      loss of every epoch (declared) and nothing else.

Threat model
    Semi-honest; the coordinator colludes with neither data party. Data parties see each
    other's values only under the coordinator's key (IND-CPA: DCR plus DJN's short
    exponent). The coordinator decrypts each gradient only behind a fresh mask uniform mod
    n (perfect hiding), and the loss. Each data party learns its own full-batch gradient
    every epoch, which leaks information about the residuals μ − y over many epochs (as
    in every vertical linear model; no differential privacy is added).

Message flow (one epoch; the named steps of :mod:`.roles` in brackets)
    0. coordinator → both   ``poisson.public_key``; active → passive ``poisson.plan``  [start, on_key]
    1. passive → active     ``poisson.exp_u``  [[exp(u_A)]], [[u_A]]                   [on_plan]
    2. active: [[μ]] = exp(u_B)·[[exp(u_A)]], [[d]] = [[μ]] − y;
       active → passive ``poisson.residual`` [[d]];
       active → coordinator ``poisson.loss`` [[(Σ μ − y·η)/m]]
       and ``poisson.masked_gradient`` [[Z_Bᵀ d + R_B]]                             [on_exp]
    3. passive → coordinator ``poisson.masked_gradient`` [[Z_Aᵀ d + R_A]]          [on_residual]
    4. coordinator decrypts the loss and both masked gradients;
       coordinator → each ``poisson.gradient_return``                [on_loss, on_*_gradient]
    5. each removes its mask: g = G/m; momentum step v ← βv + g, w ← w − η v       [on_return]

Prediction with a saved model (:mod:`.predict`; ``train poisson --model-dir``, ``predict poisson``)
    Each data party keeps its own weights and standardization. On new rows the active party
    sends ``poisson.predict_plan`` (row count, digest of the query IDs) and the passive party
    answers ``poisson.predict_score``: its score u_A = Z_A w_A per row, in the clear; the active
    party predicts the expected count μ = exp(u_A + u_B). What the label holder learns at
    prediction: μ per query row, and with its own u_B the passive party's score u_A per row
    (which the score message sends; encrypting it would hide nothing more from the party that
    learns μ). The coordinator takes no part; the passive party learns the row count only.

Citation
    FATE Hetero Poisson regression (guest/host/arbiter; the exp factorisation); Yang et
    al., *Federated Machine Learning*, 2019, ch. 5 (the coordinator pattern).

Modules: :mod:`.math` (the reference in the clear), :mod:`.messages`, :mod:`.roles`,
:mod:`.predict`, :mod:`.audit`, :mod:`.cli`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.spec import Command, FlowerSpec, PartyTask, ProtocolSpec

from . import cli
from .audit import CHECKS as AUDIT_CHECKS
from .audit import audit_run, demo_step, example, fitted_mean
from .math import ETA_BOUND, FRAC_BITS, PoissonParams, deviance, plaintext_fit, prepare_active, prepare_passive
from .messages import (
    ACTIVE,
    COORD,
    OU_REFUSAL,
    PASSIVE,
    EncryptedExp,
    EncryptedLoss,
    EncryptedResidual,
    GradientReturn,
    MaskedGradient,
    Plan,
    PredictPlan,
    PredictScore,
    PublicKey,
)
from .predict import PredictActiveRole, PredictPassiveRole, party_models, predict_local
from .roles import ActiveRole, CoordinatorRole, PassiveRole, PoissonRun, run_local

__all__ = ["ACTIVE", "COORD", "ETA_BOUND", "FRAC_BITS", "PASSIVE", "SPEC", "ActiveRole", "CoordinatorRole",
           "EncryptedExp", "EncryptedLoss", "EncryptedResidual", "GradientReturn", "MaskedGradient", "PassiveRole",
           "Plan", "PoissonParams", "PoissonRun", "PredictActiveRole", "PredictPassiveRole", "PredictPlan",
           "PredictScore", "PublicKey", "audit_run", "demo_step", "deviance", "example", "fitted_mean", "party_models",
           "plaintext_fit", "predict_local", "prepare_active", "prepare_passive", "run_local"]


def _flower_parties(run_config: Mapping[str, Any]) -> dict[str, str]:
    return {ACTIVE: ACTIVE, "passive-0": PASSIVE, COORD: COORD}


def _flower_role(party: str, run_config: Mapping[str, Any]) -> Any:
    Xa, y, _, Xp, _ = example(int(run_config.get("rows", 300)))
    params = PoissonParams(epochs=int(run_config.get("epochs", 5)))
    if party == ACTIVE:
        return ActiveRole(Xa, y, params=params)
    if party == COORD:
        return CoordinatorRole(epochs=params.epochs, key_bits=int(run_config.get("key-bits", 2048)),
                               allow_insecure=bool(run_config.get("allow-insecure", False)))
    return PassiveRole(Xp, name=party, expected=params)


def _flower_summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
    w = results[ACTIVE]
    return {"lines": [f"[vflcrypto] poisson: active weights {' '.join(f'{v:.6f}' for v in w)}"],
            "weights": w.tolist()}


SPEC = ProtocolSpec(
    name="poisson",
    title="Secure vertical Poisson regression (Paillier, with a coordinator)",
    roles={ACTIVE: ActiveRole, PASSIVE: PassiveRole, COORD: CoordinatorRole},
    run_local=run_local,
    audit=audit_run,
    checks=AUDIT_CHECKS,
    config=PoissonParams,
    demo=demo_step,
    demo_order=32,
    commands=(Command("poisson", "secure vertical Poisson regression (log link; Paillier, with a coordinator)",
                      cli.add_train_arguments, cli.train, description=cli.__doc__),
              Command("poisson", "apply a saved Poisson model to new rows (the passive party's scores to the active "
                                 "party)", cli.add_predict_arguments, cli.predict, group="predict",
                      description=cli.predict.__doc__)),
    party_tasks=(PartyTask("poisson", "secure vertical Poisson regression (with a coordinator)",
                           cli.add_party_arguments, cli.party_task),
                 PartyTask("poisson", "apply saved Poisson-regression models to new rows (the passive party's "
                                      "score per row)",
                           cli.add_party_predict_arguments, cli.party_predict_task, group="predict")),
    flower=FlowerSpec(
        ACTIVE, _flower_parties, _flower_role, _flower_summary,
        relayed={"poisson.public_key": "the coordinator's public key (public)",
                 "poisson.masked_gradient": "the passive party's gradient plus its own mask, under the "
                                            "coordinator's key: the ServerApp's party (active) holds neither",
                 "poisson.gradient_return": "the passive party's masked gradient decrypted: uniform mod n to the "
                                            "active party, which does not know the mask"}),
    oracle=OU_REFUSAL,
)
