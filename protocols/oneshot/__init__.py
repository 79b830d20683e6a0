"""One-shot VFL: two uploads and one download per party, for few overlapping rows.

Parties and data
    * **server** S (role ``"server"``): the labels y_o of the *overlap* rows O (IDs on
      the server and on every party, found by PSI: :mod:`vflcrypto.protocols.align`) and
      the classifier head f_c on the concatenation H^1 ∘ ... ∘ H^K; learns the test
      predictions.
    * **parties** ``party-0``, ``party-1``, ... (role ``"party"``): party k holds its own
      columns X^k of the overlap rows (in the common order), of the held-out test rows
      and of its *unaligned* rows U_k (rows no other party has); it trains its extractor
      f_k (a ``torch.nn.Module``; by default an MLP) and keeps it.

Threat model
    Semi-honest. The server sees every representation in the clear (there is no cipher
    under which it could train its head on them) and each party sees a gradient that
    carries the label partition of the overlap rows **by design**: D1 is exactly what
    makes one-shot training possible, so no encryption can remove it within the one-shot
    budget (SECURITY.md). Parties must not collude with each other (pooling D1s and
    representations adds nothing about labels but joins their feature views) nor with
    the server (it holds the labels).

Label defences (:mod:`.defence`, off by default)
    ``--label-dp ε``: the server uses randomized-response labels only (pure ε-label-DP of all it
    sends); ``--grad-noise σ --grad-clip C`` or ``--grad-epsilon ε``: each D1 row, joint over the
    parties, clipped and Gaussian noise added ((ε, δ)-label-DP of D1, one release per row, from
    the ``dp-accounting`` RDP accountant). Announced in the setup; D1 then travels as
    ``dp_gradient`` or ``dp_partition``. ``vflcrypto audit oneshot --defence label-rr|grad-gauss
    --budgets 1,2,4,8`` draws their privacy–utility frontier.

Citations
    Y. Sun, Y. Wang, M. Hu et al., "Communication-Efficient Vertical Federated Learning
    with Limited Overlapping Samples", ICCV 2023 (arXiv 2303.16270), Algorithm 1; NVIDIA
    NVFlare ``research/one-shot-vfl``; seed 000 §12.6.1. Local training is FixMatch
    (Sohn et al., NeurIPS 2020) with the tabular augmentations of the seed (weak =
    random feature masking, strong = more masking plus noise).

Message flow (every message kind ``oneshot.*``; steps of :mod:`.roles`)
    0. S → every party ``setup``: overlap and test row counts, d, the D1 variant, the
       public training seed, the label defences.
    1. (U1) party k → S ``representation``: H_o^k = f_k(X_o^k) with its untrained extractor.
    2. (D1, the only download) S → party k ``gradient``: G^k = ∂L/∂H_o^k of the summed
       cross-entropy of its freshly initialised head on H_o^1 ∘ ... ∘ H_o^K, and the class
       count C; or, with ``variant="partition"``, ``partition``: S's own k-means of the
       rows of G^k into C clusters, renumbered by first appearance (only the partition).
       Under a label defence ``dp_gradient`` / ``dp_partition``, from randomized-response
       labels and/or the clipped, noised rows.
    3. party k: k-means (K = C) on the rows of G^k gives temporary labels of the overlap
       rows (rows of one class have the same gradient direction at a near-uniform
       prediction); FixMatch-tab on the pseudo-labelled overlap rows plus its unaligned
       rows trains f_k (with a local classifier it discards).
    4. (U2) party k → S ``representation_update``: H_o^k from the trained f_k.
    5. S fine-tunes f_c on the overlap rows.
    6. (prediction) party k → S ``test_representation``: f_k of the test rows; S predicts.

Per party: 2 uploads and 1 download in training (plus the public setup), one upload at
prediction. Modules: :mod:`.messages`, :mod:`.roles` (the roles and ``run_local``),
:mod:`.defence`, :mod:`.audit`; the shared data, checks, local runs and commands are in ``protocols/_repvfl*.py``,
the neural parts in :mod:`vflcrypto.ml.nn` (the ``deep`` extra: torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.spec import ProtocolSpec

from .. import _repvfl_audit, _repvfl_cli, _repvfl_party_predict, _repvfl_predict
from .._repvfl import PartyData, RepRun, ServerData, ServerResult, digits_example, flower_spec
from .._repvfl_defence import DEFENCES, LabelDefence
from .._repvfl_embed import EMBED_DEFENCES
from . import audit, messages
from .messages import (
    PARTY,
    SERVER,
    VARIANTS,
    DpGradient,
    DpPartition,
    Gradient,
    Partition,
    Representation,
    RepresentationUpdate,
    Setup,
    TestRepresentation,
)
from .roles import Kinds, OneShotConfig, PartyResult, PartyRole, ServerRole, run_local

__all__ = ["DEFENCES", "PARTY", "SERVER", "SPEC", "VARIANTS", "DpGradient", "DpPartition", "Gradient", "Kinds",
           "LabelDefence", "OneShotConfig", "Partition", "PartyData", "PartyResult", "PartyRole", "RepRun",
           "Representation", "RepresentationUpdate", "ServerData", "ServerResult", "ServerRole", "Setup",
           "TestRepresentation", "digits_example", "flower_config", "run_local"]


def flower_config(run_config: Mapping[str, Any]) -> OneShotConfig:
    """The configuration of a Flower run (its run config)."""
    return OneShotConfig(variant=str(run_config.get("variant", "gradient")), seed=int(run_config.get("seed", 0)),
                         ssl_epochs=int(run_config.get("ssl-epochs", 60)),
                         head_epochs=int(run_config.get("head-epochs", 200)))


#: the prediction of ``vflcrypto predict oneshot`` and ``vflcrypto party ... predict oneshot``
_PREDICT = _repvfl_predict.Predictor("oneshot", messages.TestRepresentation)

SPEC = ProtocolSpec(
    name="oneshot",
    title="One-shot VFL (few overlapping rows)",
    roles={SERVER: ServerRole, PARTY: PartyRole},
    run_local=run_local,
    audit=audit.audit_run,
    config=OneShotConfig,
    demo=audit.demo_step,
    demo_order=60,
    commands=(_repvfl_cli.command("oneshot", "one-shot VFL with few overlapping rows (PyTorch extractors)",
                                  OneShotConfig, run_local),
              _repvfl_predict.command(_PREDICT)),
    party_tasks=(_repvfl_cli.task("oneshot", "one-shot VFL (server with labels, parties with columns)",
                                  OneShotConfig, ServerRole, PartyRole),
                 _repvfl_party_predict.task(
                     _repvfl_party_predict.PartyPredictor(_PREDICT),
                     "apply a saved one-shot VFL model to new rows (the server learns the predictions)")),
    flower=flower_spec(flower_config, ServerRole, PartyRole, "oneshot"),
    view_attacks=_repvfl_audit.view_attacks("oneshot"),
    checks=audit.CHECKS,
    defences=DEFENCES + EMBED_DEFENCES,
    frontier=audit.frontier,
)
