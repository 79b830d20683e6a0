"""Horizontal FL over secure aggregation: FedAvg, FedProx and SCAFFOLD (seed 000's HFL recap).

Parties and data
    * **server** (role ``"server"``): no data; holds the global model (and SCAFFOLD's
      control variate c); learns, per round, only the sum of the surviving clients'
      contributions (secure mode) and at the end the clients' test counts.
    * **clients** ``client-0``, ... (role ``"client"``): the same columns, different rows
      (plus held-out rows); each keeps its own SCAFFOLD control variate c_i.

Threat model
    Semi-honest; the server learns the sum per round (secure aggregation, see
    :mod:`vflcrypto.protocols.secagg`, fewer than t colluders) and the global models,
    which are outputs and leak about the training data unless DP-FedAvg is on; the sums of
    two rounds whose survivors differ by one client give that client's update (So et al.,
    AAAI 2023; measured by the audit). Each client binds the digest of
    the global model it received into the round's secure aggregation and aborts unless its
    neighbours received the same (a malicious server's model inconsistency, Pasquini et
    al., CCS 2022, is detected). ``--plain`` sends every client's update in the clear
    (declared).

DP-FedAvg (:mod:`.defence`, off by default)
    ``--dp-noise σ --dp-clip C`` or ``--dp-epsilon ε`` (``--dp-delta``, ``--dp-min-clients
    m``; FedAvg and FedProx): each client clips its model update to C and adds its share
    N(0, σ²C²/m) of Gaussian noise before the encoding and the masks, with weight 1
    instead of n_i; the sum is client-level (ε, δ)-DP over the rounds (``dp-accounting``'s
    RDP accountant, sampling rate 1; accounted with each round's survivors). ``--plain``
    clients add the full σC each (the same guarantee). ``vflcrypto audit hfl --defence
    dp-fedavg --budgets 1,2,4,8`` draws its privacy–utility frontier.

Citations
    H. B. McMahan et al., "Communication-Efficient Learning of Deep Networks from
    Decentralized Data", AISTATS 2017 (FedAvg); T. Li et al., "Federated Optimization in
    Heterogeneous Networks", MLSys 2020 (FedProx); S. P. Karimireddy et al., "SCAFFOLD",
    ICML 2020 (option II of the control-variate update: the seed omits it); H. B. McMahan,
    D. Ramage, K. Talwar, L. Zhang, "Learning Differentially Private Recurrent Language
    Models", ICLR 2018 (DP-FedAvg); Flower's ``DifferentialPrivacyClientSideFixedClipping``;
    seed 000 §12.1.

Message flow per round (kinds ``hfl.*`` and ``secagg.*``; steps of :mod:`.roles`)
    1. server → active clients ``model``: w (and c), the round and the public parameters.
    2. each client: K local SGD steps (:mod:`.math`), then its vector
       [n_i (w_i − w), n_i, (c_i⁺ − c_i)] in fixed point through one secure-aggregation
       round (``secagg.*``), or ``update`` in the clear (``--plain``, the same ring, so
       both modes give bit-identical models).
    3. server: w ← w + Σ n_i (w_i − w) / Σ n_i, c ← c + Σ Δc_i / N; clients that dropped
       are left out of the later rounds.
    4. after the last round: ``done`` (the model) to every client; ``evaluation``: each
       client's correct and total held-out rows.

Modules: :mod:`.messages`, :mod:`.math` (local steps and updates), :mod:`.roles`,
:mod:`.data` (the digits across clients), :mod:`.defence` (DP-FedAvg), :mod:`.audit`, :mod:`.cli`.
"""

from __future__ import annotations

from vflcrypto.spec import ProtocolSpec

from . import audit, cli, flower
from .data import digits_clients
from .defence import DEFENCES, DpFedAvg
from .math import ALGORITHMS, HFLConfig, client_vector, local_train, server_update, softmax_gradient
from .messages import CLIENT, SERVER, Done, Evaluation, GlobalModel, PlainUpdate
from .roles import ClientData, ClientRole, HFLResult, HFLRun, ServerRole, run_local

__all__ = ["ALGORITHMS", "CLIENT", "DEFENCES", "SERVER", "SPEC", "ClientData", "ClientRole", "Done", "DpFedAvg",
           "Evaluation", "GlobalModel", "HFLConfig", "HFLResult", "HFLRun", "PlainUpdate", "ServerRole",
           "client_vector", "digits_clients", "local_train", "run_local", "server_update", "softmax_gradient"]

SPEC = ProtocolSpec(
    name="hfl",
    title="Horizontal FL over secure aggregation (FedAvg, FedProx, SCAFFOLD)",
    roles={SERVER: ServerRole, CLIENT: ClientRole},
    run_local=run_local,
    audit=audit.audit_run,
    checks=audit.CHECKS,
    config=HFLConfig,
    demo=audit.demo_step,
    demo_order=75,
    commands=cli.commands(),
    flower=flower.flower_spec(),
    defences=DEFENCES,
    frontier=audit.frontier,
)
