"""Secure vertical (hetero) linear regression with a coordinator.

Parties and their inputs/outputs
--------------------------------
* **active party** B (``"active"``, FATE's guest): features ``X_B`` and the label ``y``;
  learns its own weights ``Θ_B`` and, at prediction time, the predictions ``Σ_k u_k``.
* **passive parties** A_1..A_k (``"passive"``, k >= 1, FATE's hosts): features ``X_A``;
  each learns only its own weights ``Θ_A``.
* **coordinator** C (``"coordinator"``, FATE's arbiter): no data; holds the decryption
  key; learns the training loss of every iteration (declared) and nothing else.

Rows are aligned beforehand (``vflcrypto.protocols.align``); every party holds the same rows in
the same order. Citation: Q. Yang, Y. Liu, Y. Cheng, Y. Kang, T. Chen, H. Yu, *Federated
Machine Learning*, Morgan & Claypool 2019, ch. 5 (vertical linear regression), and FATE's
hetero linear regression (``HeteroLinR`` guest/host/arbiter).

Threat model
------------
Semi-honest parties. **C must not collude with A or with B** (C holds the key under which
everything A and B exchange is encrypted). A and B may not collude with each other to
learn more than their joint outputs (they are the data owners; colluding they would know
both feature blocks anyway). Assumes rows ≫ features: a party's gradient is an
aggregate over rows (``Σ_i d_i x_i``); with few rows the gradients and the loss reveal
much more (a gradient with one row reveals ``d_i x_i``). Models and predictions are
outputs and leak about the training data; no differential privacy is added.

Loss and gradient convention (the plaintext reference uses exactly the same)
-----------------------------------------------------------------------------
For a batch of ``m`` rows, ``u_k = X_k Θ_k`` per passive party, ``u_B = X_B Θ_B``,
``d = Σ_k u_k + u_B − y`` and::

    L   = (1 / (2m)) Σ_i d_i²  +  (λ/2) (Σ_k ‖Θ_k‖² + ‖Θ_B‖²)
    ∇_k = (1 / m) Σ_i d_i x_k,i  +  λ Θ_k           (the exact derivative of L)
    Θ_k ← Θ_k − η ∇_k                               (likewise for B)

λ applies to every weight, including B's intercept column when ``fit_intercept`` is
set. Weights start at zero. Each epoch visits every row once in batches of
``batch_size`` (a permutation drawn by :func:`epoch_batches` from a public seed that B
picks and sends in the plan; the full batch keeps the natural order). The loss ``L`` is
computed at the weights *before* the update. After epoch ``e`` >= 1, C stops training
when ``|L̄_{e-1} − L̄_e| <= tol · max(|L̄_{e-1}|, 1e-12)`` where ``L̄`` is the mean
batch loss of an epoch (``tol=None`` disables the test).

With momentum μ (heavy ball, FATE's momentum SGD) each party keeps a local velocity:
``v ← μ v + ∇``, ``Θ ← Θ − η v`` (μ = 0 is plain gradient descent).

Local preprocessing (declared, never communicated): with ``preprocess="standardize"``
each party scales its own columns to mean 0 / standard deviation 1 with its own
statistics, with ``"whiten"`` it PCA-whitens its own block; with ``fit_intercept`` B
appends a constant column. Both are stored in the party's model and
re-applied at prediction, so predictions are in the label's original units.

Label scaling (B's own, never communicated): with ``label_scaling="standardize"`` (the
default, under Paillier and CKKS alike) B trains on ``(y − mean) / std`` of its training
rows, so ``lr`` and ``tol`` act the same on any label and under either scheme, and CKKS's
masks (which hide gradients of a bounded size) fit any label. Every weight is then in
standardized units; B's model keeps ``(offset, scale)`` and maps the summed scores back
by ``scale · s + offset``. C decrypts the loss of the standardized label (it never learns
the scale); :class:`LinRegRun` reports losses in the label's units squared (``scale²``
times C's: the data term is exactly the half mean squared error of the label-unit model),
as does :func:`plaintext_gradient_descent`. ``"none"`` trains on the label as given (then
``lr`` and ``tol`` act in the label's units; CKKS refuses a label whose batch rms exceeds
its bound).

Message flow (one iteration; message kinds ``linreg.*``)
---------------------------------------------------------
0. C generates the key pair; sends ``public_key`` to every data party. B sends ``plan``
   (rows, batch size, epochs, η, λ, tol, schedule seed, whether C supplies obfuscators;
   to passive parties also a SHA-256 of the ordered aligned IDs so misaligned inputs fail
   with InputDataError).
1. With ``coordinator_obfuscators`` (Paillier; the default): C sends each passive party
   ``obfuscators``, m + 1 fresh encryptions of zero under its key for the batch's m rows
   and the loss share (the first batch's after the plan, then each next batch's with the
   party's ``gradient_return``, or after ``control`` at an epoch's end). Each passive
   party k: ``encrypted_u`` = ``[[u_k]]`` and ``[[P_k]]`` with
   ``P_k = Σ_i u_k,i² + m λ ‖Θ_k‖²`` (scaled by 1/(2m) under CKKS) → B; with C's
   obfuscators ``[[v]] = (1 + v n) z`` for a fresh ``z`` of C's, one multiplication each.
2. With k >= 2 passive parties the loss needs ``Σ_i u_j,i u_l,i``: B sends
   ``partial_sum`` ``[[Σ_{l<j} u_l]]`` to passive j >= 1, which returns ``cross_term``
   ``[[2 Σ_i u_j,i Σ_{l<j} u_l,i]]``.
3. B: ``[[d]] = Σ_k [[u_k]] + (u_B − y)`` → every passive party (``encrypted_residual``);
   ``[[S]] = Σ_k [[P_k]] + [[U]]·2(u_B − y) + Σ_j cross_j + Σ(u_B − y)² + m λ ‖Θ_B‖²``
   (so ``S = Σ d_i² + m λ ‖Θ‖²``) → C (``encrypted_loss``).
4. Every data party computes ``[[Σ_i d_i x_i]]`` homomorphically (``dot`` =
   multi-exponentiation), adds a fresh mask ``[[R]]`` and sends ``masked_gradient``
   (``masked_gradient_ckks`` under CKKS) to C.
5. C decrypts the loss ``L = S/(2m)`` and the masked gradients, returns each masked
   gradient to its owner (``gradient_return``; under CKKS ``gradient_return_ckks``, flooded
   with fresh Gaussian noise, as is the loss C decides on); the owner removes its mask, scales by
   ``1/m``, adds ``λΘ`` and updates its weights.
6. At the end of each epoch C sends ``control`` (stop or continue) to every data party.

Prediction (:func:`predict_local`): C sends a fresh ``public_key``; B sends
``predict_plan``; each passive party sends ``predict_partial`` ``[[u_k]]``; B adds them,
masks with ``[[R]]`` (uniform mod n) and sends ``predict_masked`` to C; C returns the
decryption (``predict_return``); B removes ``R`` and adds ``u_B``. Only B learns
``Σ_k u_k + u_B``; with a single passive party this *is* ``u_A`` (the output reveals it).

Obfuscators from the coordinator (idle time)
--------------------------------------------
C holds the key and waits through steps 1–4; a passive party's encryption of ``[[u_k]]``
(one DJN exponentiation per row under the public key) is most of its own work. C
computes encryptions of zero by the CRT (cheaper than the public key's path) on a
low-priority process pool while it waits (:class:`~vflcrypto.he.obfuscators.ObfuscatorStock`,
one iteration's worth) and sends each passive party fresh ones per batch; the passive
party multiplies each once into ``1 + v n``. This reveals nothing new: C chose them and
can recover the randomness of any ciphertext under its key anyway, and it decrypts only
what it decrypts in any case. B never sees them: obfuscators B knew (or saw reused)
would strip ``[[u_k]]`` (``c_t / c_t' = 1 + (u_t − u_t') n``), which is why each is used
once and C must not collude with B (as above). A *dishonest* C could send such values;
the semi-honest model excludes it. Not in the Flower App, whose ServerApp (B) relays
every message between C and a passive party. Cost: C sends as many bytes per batch as
``[[u_k]]`` itself (one ciphertext per row) and holds one iteration's obfuscators. On by
default: with each party in its own process (``bench/linreg_processes.py``, 30,000 × 23,
Paillier 2048, all three parties on one 2-core machine) epochs took 0.86–0.91 of the time
without it; in one process, where every party shares one pool, the same within noise.

Modules: :mod:`.messages` (declarations, public constants), :mod:`.config` (the
training parameters), :mod:`.math` (schedule, loss, gradient, bounds, the plaintext
reference), :mod:`.crypto` (the Paillier and CKKS sides of a data party), :mod:`.model`
(a party's model and preprocessing), :mod:`.roles` (training as named steps,
``run_local``), :mod:`.predict` (secure prediction), :mod:`.audit`, :mod:`.cli`.

Schemes
-------
* **Paillier** (default): fixed point with ``FRAC_BITS`` = 32 fractional bits for
  ``u``, ``d`` and features (so gradients carry 64); masks uniform mod n: C's view of a
  masked gradient is uniform whatever the gradient (perfect hiding, declared as
  such). Overflow is prevented by a public value bound
  (:func:`paillier_value_bits`) that every party checks on its own values, raising
  :class:`~vflcrypto.errors.EncodingOverflowError`, never wrapping silently; decoding
  also detects middle-third residues. Accuracy: weights agree with the float64 reference
  to ~1e-9 relative per iteration (rounding 2^-33 of u, d and x), far below the 1e-6
  after 100 iterations the tests require.
* **CKKS** (fast mode, TenSEAL): the gradient is computed as a mean (features scaled by
  1/m before ``dot``) and masked with a real mask uniform on [−R, R]; CKKS has no
  modular wrap, so the mask hides a gradient of magnitude <= ``CKKS_GRADIENT_BOUND``
  only to ``CKKS_HIDING_BITS`` bits of statistical distance (declared honestly; an owner
  whose unmasked gradient exceeded the bound raises EncodingOverflowError). C floods
  every decryption it returns (``gradient_return_ckks``) and every loss its stopping bit
  comes from with fresh Gaussian noise sized by :mod:`vflcrypto.he.flooding` (IND-CPA^D:
  Li–Micciancio 2021; 30-bit statistical security): about 22 bits above the CKKS error,
  2^-11 absolute on a mean gradient at the default parameters (N = 16384, Δ = 2^54).
  Tests and benchmarks may switch it off (``run_local(..., flood=False)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.data.synthetic import synthetic_split
from vflcrypto.spec import Command, FlowerSpec, PartyTask, ProtocolSpec

from . import cli
from .audit import CHECKS as AUDIT_CHECKS
from .audit import audit_run, demo_step
from .config import OU_REFUSAL, PREPROCESSING, LinRegConfig
from .coordinator import CoordinatorResult, CoordinatorRole
from .local import LinRegRun, passive_names, run_active, run_coordinator, run_local, run_passive
from .math import (
    PlainResult,
    active_loss_share,
    batch_loss,
    converged,
    epoch_batches,
    gradient,
    paillier_value_bits,
    passive_loss_share,
    plaintext_gradient_descent,
)
from .messages import (
    ACTIVE,
    CKKS_GRADIENT_BOUND,
    CKKS_HIDING_BITS,
    COORD,
    FRAC_BITS,
    PASSIVE,
    SCHEMES,
    Control,
    CrossTerm,
    EncryptedLoss,
    EncryptedResidual,
    EncryptedU,
    GradientReturn,
    GradientReturnCKKS,
    MaskedGradient,
    MaskedGradientCKKS,
    Obfuscators,
    PartialSum,
    PredictMasked,
    PredictPartial,
    PredictPlan,
    PredictReturn,
    PublicKeyMsg,
    TrainingPlan,
)
from .model import PartyModel, Preprocessing, fit_preprocessing, predict_plain, save_models
from .predict import predict_local, run_predict_active, run_predict_coordinator, run_predict_passive
from .roles import ActiveRole, PartyResult, PassiveRole

__all__ = [
    "ACTIVE", "CKKS_GRADIENT_BOUND", "CKKS_HIDING_BITS", "COORD", "FRAC_BITS", "PASSIVE", "PREPROCESSING",
    "SCHEMES", "SPEC", "ActiveRole", "Control", "CoordinatorResult", "CoordinatorRole", "CrossTerm",
    "EncryptedLoss", "EncryptedResidual", "EncryptedU", "GradientReturn", "GradientReturnCKKS", "LinRegConfig",
    "LinRegRun", "MaskedGradient", "MaskedGradientCKKS", "Obfuscators", "PartialSum", "PartyModel", "PartyResult",
    "PassiveRole", "PlainResult", "PredictMasked", "PredictPartial", "PredictPlan", "PredictReturn", "Preprocessing",
    "PublicKeyMsg", "TrainingPlan", "active_loss_share", "audit_run", "batch_loss", "converged", "demo_step",
    "epoch_batches", "fit_preprocessing", "gradient", "paillier_value_bits", "passive_loss_share",
    "passive_names", "plaintext_gradient_descent", "predict_local", "predict_plain", "run_active",
    "run_coordinator", "run_local", "run_passive", "run_predict_active", "run_predict_coordinator",
    "run_predict_passive", "save_models", "synthetic_split",
]


# --------------------------------------------------------------------------- Flower


def flower_config(run_config: Mapping[str, Any]) -> LinRegConfig:
    """The training configuration of a Flower run (its run config; full batch, fixed schedule).

    Without coordinator obfuscators: the ServerApp's party (B) relays every message between C
    and a passive party, and B must never see them (nor may they be relayed).
    """
    return LinRegConfig(epochs=int(run_config.get("epochs", 5)), lr=float(run_config.get("lr", 0.1)), tol=None,
                        scheme=str(run_config.get("scheme", "paillier")),
                        key_bits=int(run_config.get("key-bits", 2048)), seed=0, coordinator_obfuscators=False)


def flower_data(run_config: Mapping[str, Any]) -> tuple[Any, list[Any]]:
    """The synthetic example of a Flower run: B with 3 features and the label, one passive party with 2."""
    return synthetic_split(n_rows=int(run_config.get("rows", 120)), p_active=3, p_passive=(2,))


def _flower_parties(run_config: Mapping[str, Any]) -> dict[str, str]:
    return {ACTIVE: ACTIVE, "passive-0": PASSIVE, COORD: COORD}


def _flower_role(party: str, run_config: Mapping[str, Any]) -> Any:
    cfg, (active, passives) = flower_config(run_config), flower_data(run_config)
    if party == ACTIVE:
        return ActiveRole(active, passives=["passive-0"], config=cfg)
    if party == COORD:
        return CoordinatorRole(scheme=cfg.scheme, key_bits=cfg.key_bits,
                               allow_insecure=bool(run_config.get("allow-insecure", False)), passives=["passive-0"])
    return PassiveRole(passives[0], index=0, name=party, preprocess=cfg.preprocess)


def _flower_summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
    w = results[ACTIVE].model.weights
    return {"lines": [f"[vflcrypto] linreg: active weights {' '.join(f'{v:.6f}' for v in w)}"],
            "weights": w.tolist()}


SPEC = ProtocolSpec(
    name="linreg",
    title="Secure federated linear regression",
    roles={ACTIVE: ActiveRole, PASSIVE: PassiveRole, COORD: CoordinatorRole},
    run_local=run_local,
    audit=audit_run,
    checks=AUDIT_CHECKS,
    config=LinRegConfig,
    demo=demo_step,
    demo_order=30,
    commands=(Command("linreg", "secure vertical linear regression (Paillier or CKKS)", cli.add_train_arguments,
                      cli.train, description=cli.__doc__),
              Command("linreg", "apply a saved linear-regression model to new rows (secure prediction)",
                      cli.add_predict_arguments, cli.predict, group="predict", description=cli.predict.__doc__)),
    party_tasks=(PartyTask("linreg", "secure vertical linear regression (with a coordinator)",
                           cli.add_party_arguments, cli.party_task),
                 PartyTask("linreg", "apply saved linear-regression models to new rows (secure prediction)",
                           cli.add_party_predict_arguments, cli.party_predict_task, group="predict")),
    flower=FlowerSpec(
        ACTIVE, _flower_parties, _flower_role, _flower_summary,
        relayed={"linreg.public_key": "C's public key (public)",
                 "linreg.masked_gradient": "a passive party's gradient plus its own mask, under C's key: the "
                                           "ServerApp's party (B) holds neither the key nor the mask",
                 "linreg.masked_gradient_ckks": "as linreg.masked_gradient, under C's CKKS context",
                 "linreg.gradient_return": "the passive party's masked gradient decrypted: uniform mod n to B, "
                                           "which does not know the mask",
                 "linreg.gradient_return_ckks": "as linreg.gradient_return under CKKS, flooded: the mask hides the "
                                                "gradient from B to CKKS_HIDING_BITS bits",
                 "linreg.control": "one public bit per epoch"}),
    schemes=("paillier", "ckks"),
    oracle=OU_REFUSAL,
)
