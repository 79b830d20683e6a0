"""The declared messages of horizontal FL over secure aggregation (``hfl.*``).

The aggregation itself uses the ``secagg.*`` messages (one secure-aggregation round per
training round); these are the model broadcasts, the plaintext mode's updates and the
final evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.runtime.declarations import Protection, declare

from ..secagg.messages import CLIENT, SERVER

__all__ = ["CLIENT", "SERVER", "Done", "Evaluation", "GlobalModel", "PlainUpdate"]


@declare("hfl.model", sender=SERVER, receiver=CLIENT, protection=Protection.PUBLIC,
         reveals="the round, the algorithm's public parameters and the global model (SCAFFOLD: and the server's "
                 "control variate c): the output of the previous rounds, shared with every client; under DP-FedAvg "
                 "also its noise multiplier, clip norm and minimum survivors (each client checks them against its "
                 "own), and the model is a noised aggregate: (epsilon, delta)-DP at client level")
@dataclass(frozen=True)
class GlobalModel:
    round: int
    algorithm: str
    w: np.ndarray
    c: np.ndarray
    local_steps: int
    lr: float
    mu: float
    #: DP-FedAvg (None: off): the sum's noise std over C, the clip norm C, the survivors m the noise is shared for
    dp_noise: float | None = None
    dp_clip: float | None = None
    dp_min_clients: int | None = None


@declare("hfl.update", sender=CLIENT, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="plaintext mode: the client's fixed-point update n_i (w_i - w), n_i (and SCAFFOLD's change of "
                 "c_i) in the clear: its sample count and what its data moved the model (the secure mode sends "
                 "the same vector through secagg, so the server sees only the sum); under DP-FedAvg its clipped "
                 "update plus its own full Gaussian noise and weight 1 (local DP: the same (epsilon, delta) as the "
                 "secure mode's sum, at sqrt(m) times the noise per client)")
@dataclass(frozen=True)
class PlainUpdate:
    round: int
    y: np.ndarray


@declare("hfl.done", sender=SERVER, receiver=CLIENT, protection=Protection.PUBLIC,
         reveals="the final global model (the output)")
@dataclass(frozen=True)
class Done:
    w: np.ndarray


@declare("hfl.evaluation", sender=CLIENT, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="how many of the client's held-out rows the final model classifies correctly, and how many it holds")
@dataclass(frozen=True)
class Evaluation:
    correct: int
    rows: int
