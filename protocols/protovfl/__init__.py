"""Prototype VFL with unaligned data (seed 002): parties with different columns, few rows on all of them.

Parties and data
    * **server** S (role ``"server"``): the labels of the aligned rows A (the IDs on every
      party), the adapters A_m, the per-sample gate, the global classifier, the global
      prototypes μ^g and priors π^g.
    * **parties** ``party-0``, ``party-1``, … (role ``"party"``, two or more; the seed has
      three): their own columns of their rows I(m); the aligned rows A = ∩_m I(m) and the
      unaligned rows U(m) = I(m) \\ A (a row on two parties but not the third is unaligned
      on both). Each trains its extractor E_m on U(m) against class prototypes.

Threat model
    Semi-honest; S does not collude with a party. Alignment (:mod:`.align`): every party
    learns A and nothing about pairwise overlaps; S learns the set sizes and A (to attach
    its labels). Training: S receives every aligned embedding h_i^(m) in the clear (its
    gate and adapters need them) and, in the secure mode, only the sum over parties of
    the unaligned statistics (secure aggregation, :mod:`vflcrypto.protocols.secagg`);
    ``--plain`` sends each party's statistics in the clear. μ^g and π^g go down to every
    party: class-conditional means and class proportions, which with the party's adapter
    label its aligned rows by nearest prototype (measured: ``vflcrypto audit protovfl``).

Citations
    Guo et al., "Proto-EVFL" (arXiv 2507.22488; no public code); Tanwisuth et al.,
    "A Prototype-Oriented Framework for Unsupervised Domain Adaptation" (PCT, NeurIPS
    2021: the transport-style prototype loss and the posterior); Bonawitz et al., CCS 2017
    (the aggregation); seed 002 (``../shared/SEEDS.md``: its formulas, worked numbers and
    inconsistencies; the choices made here are in :mod:`.math` and
    :mod:`vflcrypto.ml.prototypes`).

Message flow (kinds ``protovfl.*`` and ``secagg.*``; steps of :mod:`.roles`)
    0. S → party ``setup``: row counts, K, the widths d and w, rounds, mode, α, β, τ, seed.
    1. party → S ``embedding``: h_i^(m) = E_m(x_i^(m)) of every aligned training row.
    2. (from round 1) each party's soft class counts Σ_j q_jk and sums Σ_j q_jk f_j over
       U(m) in fixed point: one secure-aggregation round (``secagg.*``), or ``stats`` in the
       clear (``--plain``; the same ring, so both modes give bit-identical models).
    3. S: adapters g_i^(m) = A_m(h_i^(m)), gate weights w_i = softmax(G[h_i^(1) ∘ …]) (≥ 0,
       summing to 1), z_i = Σ_m w_i^(m) g_i^(m), the classifier on z with cross-entropy;
       μ^g_k and π^g_k from the aligned rows' z and labels plus the summed statistics.
       If rounds remain: S → party ``global_model``: μ^g, π^g and its own adapter A_m.
    4. party: the local step on U(m) (mixed prior and prototypes, EM posteriors, the
       smooth two-way loss; :mod:`.math`); then 1 and 2 of the next round.
    5. after the last round: party → S ``test_embedding``; S predicts the held-out rows.

Measured accuracy (the bundled digits, 20 aligned training rows, 360 held-out rows, pools
130 / 1300 / 2, default settings, ``--plain`` = ``--secure``)
    On 20 aligned rows the prototype rounds do not reliably help: over 3 public splits
    (``--split-seed`` 0-2) × 4 training seeds (``--seed`` 0-3), three rounds changed the
    test accuracy of the aligned-rows-only model (``--rounds 0``) by −8.3 to +7.8 points,
    +0.2 on average (split 0, seed 0, the documented command: 50.0 % → 50.3 %; seed 2:
    40.0 % → 33.1 %). The accuracy of the aligned-only model itself ranges over 36-50 %
    across those seeds: with two labelled rows per class, the seed and the rows' order
    matter as much as the rounds. The unaligned rows enter the local step in mini-batches,
    so their order shapes the model: every party takes its aligned and unaligned rows in
    canonical ID order (:func:`.align.unaligned_rows`), so the same rows give the same model
    whatever the order of its file, and ``vflcrypto train protovfl --dataset digits`` (its
    files, then the PSI) gets exactly the inputs of :func:`digits_example` and ``vflcrypto
    demo`` (before, the unaligned rows came in each file's shuffled order: the command line
    printed 0.500 → 0.469 where the demo printed 50.0 % → 50.3 %).

Modules: :mod:`.messages`, :mod:`.math` (the fusion, the local step, the statistics),
:mod:`.roles`, :mod:`.align` (the all-party-only PSI), :mod:`.data` (the three-party
digits), :mod:`.audit`, :mod:`.cli`, :mod:`.flower`.
"""

from __future__ import annotations

from vflcrypto.spec import ProtocolSpec

from .._repvfl import PartyData, ServerData
from . import audit, cli, flower
from .align import AlignedInputs, PsiPartyRole, PsiServerRole, aligned_inputs, run_align_local
from .data import digits_example, digits_split, digits_tables
from .math import ProtoConfig, fit_fusion, global_prototypes, local_step
from .messages import (
    PARTY,
    SERVER,
    Embedding,
    GlobalModel,
    PsiAdvert,
    PsiAlignedIds,
    PsiLabelled,
    PsiSetup,
    PsiTable,
    PsiWrappedKey,
    PsiWrappedKeys,
    PsiZeroCells,
    Setup,
    Stats,
    TestEmbedding,
)
from .roles import PartyResult, PartyRole, ProtoRun, ProtoServerResult, ServerRole, run_local

__all__ = ["PARTY", "SERVER", "SPEC", "AlignedInputs", "Embedding", "GlobalModel", "PartyData", "PartyResult",
           "PartyRole", "ProtoConfig", "ProtoRun", "ProtoServerResult", "PsiAdvert", "PsiAlignedIds", "PsiLabelled",
           "PsiPartyRole", "PsiServerRole", "PsiSetup", "PsiTable", "PsiWrappedKey", "PsiWrappedKeys", "PsiZeroCells",
           "ServerData", "ServerRole", "Setup", "Stats", "TestEmbedding", "aligned_inputs", "digits_example",
           "digits_split", "digits_tables", "fit_fusion", "global_prototypes", "local_step", "run_align_local",
           "run_local"]

SPEC = ProtocolSpec(
    name="protovfl",
    title="Prototype VFL with unaligned data (seed 002)",
    roles={SERVER: ServerRole, PARTY: PartyRole},
    run_local=run_local,
    audit=audit.audit_run,
    checks=audit.CHECKS,
    config=ProtoConfig,
    demo=audit.demo_step,
    demo_order=80,
    commands=(cli.command(), cli.predict_command()),
    party_tasks=(cli.party_task(), cli.predict_party_task()),
    flower=flower.flower_spec(),
)
