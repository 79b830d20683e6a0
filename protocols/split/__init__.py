"""Split learning ("vanilla VFL"): representations up and gradients down, every step.

Parties and data
    * **server** S (role ``"server"``): the labels of the overlap rows and the head f_c;
      learns the test predictions.
    * **parties** ``party-0``, ... (role ``"party"``): party k holds its columns of the
      overlap rows (aligned by PSI, common order) and of the test rows, and trains its
      extractor f_k. Unaligned rows take no part: the baseline one-shot VFL is measured
      against (bench/repvfl_bench.py).

Threat model
    Semi-honest; nothing is encrypted. Every step the server sees a batch of every
    party's representations and every party sees the gradient of its batch, which carries
    the batch rows' label partition (same-class rows point the same way): both by design
    of the protocol, repeated over many rounds (SECURITY.md; ``vflcrypto audit split``).

Label defences (:mod:`.defence`, off by default)
    ``--label-dp ε``: the server trains on randomized-response labels (pure ε-label-DP), or with
    ``--label-mechanism lpmst`` on labels released by two-stage LP-MST (Ghazi et al., NeurIPS
    2021: half by RR, half by RRWithPrior with the stage-1 model's prior; still pure ε-label-DP);
    ``--grad-noise σ --grad-clip C`` or ``--grad-epsilon ε``: each example's gradient clipped
    and Gaussian noise added, the head trained by DP-SGD ((ε, δ)-label-DP of the whole
    transcript, from the ``dp-accounting`` RDP accountant). Announced in the setup; the
    gradients then travel as ``split.dp_gradient``. ``--marvell-bound s`` (binary labels only):
    Marvell's optimised noise (Li et al., ICLR 2022) on the gradients sent, an empirical
    defence bounding any attack's leak AUC per batch; they travel as ``split.marvell_gradient``.
    ``vflcrypto audit split --defence label-rr|label-lpmst|grad-gauss|marvell --budgets 1,2,4,8`` draws
    their privacy–utility frontier.

Embedding defences (:mod:`vflcrypto.protocols._repvfl_embed`, off by default)
    Each feature party's, against the server: ``--embed-noise σ --embed-clip C`` or
    ``--embed-epsilon ε`` (each representation row it sends clipped to C and Gaussian noise added:
    (ε, δ)-DP of each row's raw columns over its releases, one per epoch, for the extractors taken
    as given; the representations then travel as ``split.dp_representation`` and
    ``split.dp_test_representation``) and ``--dcor-weight λ`` (NoPeek's distance-correlation term
    in its loss: empirical, no ε). ``vflcrypto audit split --defence embed-gauss --budgets
    1,2,4,8`` and ``--defence dcor --budgets 0.1,0.5,1,3`` (λ values) draw their frontiers against
    the server's decoder of the raw columns.

Citations
    P. Vepakomma, O. Gupta, T. Swedish, R. Raskar, "Split learning for health", 2018
    (arXiv 1812.00564); seed 000 §12.5.3; NVIDIA NVFlare ``cifar10-splitnn``.

Message flow (kinds ``split.*``; steps of :mod:`.roles`)
    0. S → every party ``setup``: row counts, d, epochs, batch size, the public schedule seed,
       the label defences.
    Per batch (epochs × ⌈overlap / batch⌉ times):
    1. party k → S ``representation``: f_k(X^k) of the batch rows (current extractor;
       ``dp_representation`` under embedding noise).
    2. S: cross-entropy of f_c on the concatenation, one Adam step of f_c; S → party k
       ``gradient``: ∂L/∂H^k of the batch (``dp_gradient`` under a DP label defence,
       ``marvell_gradient`` under Marvell).
    3. party k: backpropagates it through f_k, one Adam step.
    4. (prediction) party k → S ``test_representation`` (``dp_test_representation``); S predicts.

Modules: :mod:`.messages`, :mod:`.roles`, :mod:`.defence`, :mod:`.audit`, :mod:`.frontier`; the commands are
``protocols/_repvfl_cli.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.spec import ProtocolSpec

from .. import _repvfl_cli, _repvfl_party_predict, _repvfl_predict
from .._repvfl import PartyData, RepRun, ServerData, ServerResult, flower_spec
from . import audit, frontier, messages
from .defence import DEFENCES, LabelDefence, SplitDefence
from .messages import (
    PARTY,
    SERVER,
    BatchGradient,
    BatchRepresentation,
    DpBatchGradient,
    DpBatchRepresentation,
    DpTestRepresentation,
    MarvellBatchGradient,
    Setup,
    TestRepresentation,
)
from .roles import PartyResult, PartyRole, ServerRole, SplitConfig, epoch_batches, run_local

__all__ = ["DEFENCES", "PARTY", "SERVER", "SPEC", "BatchGradient", "BatchRepresentation", "DpBatchGradient",
           "DpBatchRepresentation", "DpTestRepresentation", "LabelDefence", "MarvellBatchGradient", "PartyData",
           "PartyResult", "PartyRole", "RepRun", "ServerData", "ServerResult", "ServerRole", "Setup", "SplitConfig",
           "SplitDefence", "TestRepresentation", "epoch_batches", "run_local"]


def _flower_config(run_config: Mapping[str, Any]) -> SplitConfig:
    return SplitConfig(epochs=int(run_config.get("epochs", 5)), seed=int(run_config.get("seed", 0)))


#: the prediction of ``vflcrypto predict split`` and ``vflcrypto party ... predict split``
_PREDICT = _repvfl_predict.Predictor("split", messages.TestRepresentation)

SPEC = ProtocolSpec(
    name="split",
    title="Split learning (vanilla VFL)",
    roles={SERVER: ServerRole, PARTY: PartyRole},
    run_local=run_local,
    audit=audit.audit_run,
    config=SplitConfig,
    demo=audit.demo_step,
    demo_order=55,
    commands=(_repvfl_cli.command("split", "split learning, the many-round baseline (PyTorch extractors)",
                                  SplitConfig, run_local),
              _repvfl_predict.command(_PREDICT)),
    party_tasks=(_repvfl_cli.task("split", "split learning (server with labels, parties with columns)",
                                  SplitConfig, ServerRole, PartyRole),
                 _repvfl_party_predict.task(
                     _repvfl_party_predict.PartyPredictor(_PREDICT),
                     "apply a saved split-learning model to new rows (the server learns the predictions)")),
    flower=flower_spec(_flower_config, ServerRole, PartyRole, "split"),
    view_attacks=audit.view_attacks,
    checks=audit.CHECKS,
    defences=DEFENCES,
    frontier=frontier.frontier,
)
