"""Few-shot VFL: one-shot VFL plus the parties' unaligned rows at the server.

Parties and data
    As in one-shot VFL (:mod:`vflcrypto.protocols.oneshot`): a **server** with the
    labels of the overlap rows and the head, **parties** with their columns of the
    overlap, test and unaligned rows.

Threat model
    Semi-honest; nothing is encrypted. Beyond one-shot VFL's leaks (the server sees
    representations; D1 carries the overlap label partition) the server learns, per
    party, how many rows it holds that the others lack and their representations. In
    **client-return** mode the server sends class pseudo-labels to the parties, which
    lets a party name its clusters of the overlap rows, i.e. learn the overlap labels
    (measured: ``vflcrypto audit fewshot``). The default **server** mode sends nothing
    label-bearing after D1.

Label defences
    One-shot VFL's (:mod:`vflcrypto.protocols.oneshot.defence`): ``--label-dp ε`` (randomized
    response; in client return the pseudo-labels are computed from those labels too) and
    ``--grad-noise``/``--grad-epsilon`` (D1 clipped and noised, one release per row; refused in
    client return without ``--label-dp``, whose pseudo-labels it would not cover).
    ``vflcrypto audit fewshot --defence label-rr|grad-gauss --budgets 1,2,4,8``.

Citations
    Sun et al., ICCV 2023 (the few-shot extension), seed 000 §12.6.2 and §12.10-12.11;
    the attention estimate of a missing view follows FedCVT (Kang, Liu, Liang, ACM TIST
    2022).

Message flow (kinds ``fewshot.*``; steps of :mod:`.roles`)
    0-4. As one-shot VFL (``setup`` also names the mode; D1 is ``gradient`` or
       ``partition``), and at step 4 party k also sends ``unaligned_representation``:
       H_u^k of its unaligned rows.
    5. S: f_c on the overlap rows; per party k an auxiliary head f_c^k on H_o^k; for the
       unaligned rows of party k every other party j's view is estimated by attention,
       Ĥ_u^j = softmax(H_u^k (H_o^k)ᵀ / √d) H_o^j; a pseudo-label is kept only under the
       dual-classifier gate (Eq. 9) p̂ = 1(ĉ_k = ĉ_joint)·1(p_k* > t)·1(p_joint* > t)·p_joint*.
       Server mode: f_c is fine-tuned on the overlap rows plus the kept rows (weights p̂).
       Client mode: S → party k ``pseudo_labels`` (rows, classes, p̂); party k retrains
       f_k on them and sends ``refit`` (its new H_o^k); S fits f_c again.
    6. (prediction) party k → S ``test_representation``; S predicts.

Modules: :mod:`.messages`, :mod:`.math` (the attention estimate and the gate),
:mod:`.roles` (subclasses of one-shot VFL's roles), :mod:`.audit`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.spec import ProtocolSpec

from .. import _repvfl_audit, _repvfl_cli, _repvfl_party_predict, _repvfl_predict
from .._repvfl import PartyData, RepRun, ServerData, ServerResult, flower_spec
from .._repvfl_defence import DEFENCES
from .._repvfl_embed import EMBED_DEFENCES
from ..oneshot import flower_config
from . import audit, messages
from .math import attention_estimate, dual_gate, softmax_rows
from .messages import (
    MODES,
    PARTY,
    SERVER,
    DpGradient,
    DpPartition,
    Gradient,
    Partition,
    PseudoLabels,
    Refit,
    Representation,
    RepresentationUpdate,
    Setup,
    TestRepresentation,
    UnalignedRepresentation,
)
from .roles import FewShotConfig, Kinds, PartyRole, ServerRole, run_local

__all__ = ["DEFENCES", "MODES", "PARTY", "SERVER", "SPEC", "DpGradient", "DpPartition", "FewShotConfig", "Gradient",
           "Kinds", "Partition", "PartyData",
           "PartyRole", "PseudoLabels", "Refit", "RepRun", "Representation", "RepresentationUpdate", "ServerData",
           "ServerResult", "ServerRole", "Setup", "TestRepresentation", "UnalignedRepresentation",
           "attention_estimate", "dual_gate", "run_local", "softmax_rows"]


def _flower_config(run_config: Mapping[str, Any]) -> FewShotConfig:
    return FewShotConfig(**{**vars(flower_config(run_config)), "mode": str(run_config.get("fewshot-mode", "server"))})


#: the prediction of ``vflcrypto predict fewshot`` and ``vflcrypto party ... predict fewshot``
_PREDICT = _repvfl_predict.Predictor("fewshot", messages.TestRepresentation)

SPEC = ProtocolSpec(
    name="fewshot",
    title="Few-shot VFL (unaligned rows at the server)",
    roles={SERVER: ServerRole, PARTY: PartyRole},
    run_local=run_local,
    audit=audit.audit_run,
    config=FewShotConfig,
    demo=audit.demo_step,
    demo_order=65,
    commands=(_repvfl_cli.command("fewshot", "few-shot VFL: one-shot plus the unaligned rows (PyTorch extractors)",
                                  FewShotConfig, run_local),
              _repvfl_predict.command(_PREDICT)),
    party_tasks=(_repvfl_cli.task("fewshot", "few-shot VFL (server with labels, parties with columns)",
                                  FewShotConfig, ServerRole, PartyRole),
                 _repvfl_party_predict.task(
                     _repvfl_party_predict.PartyPredictor(_PREDICT),
                     "apply a saved few-shot VFL model to new rows (the server learns the predictions)")),
    flower=flower_spec(_flower_config, ServerRole, PartyRole, "fewshot"),
    view_attacks=_repvfl_audit.view_attacks("fewshot"),
    checks=audit.CHECKS,
    defences=DEFENCES + EMBED_DEFENCES,
    frontier=audit.frontier,
)
