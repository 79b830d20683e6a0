"""DP-FedAvg over secure aggregation: client-side clipping and distributed Gaussian noise, accounted over rounds.

An option of :class:`~.math.HFLConfig` (``--dp-noise σ --dp-clip C`` or ``--dp-epsilon ε``, with
``--dp-delta`` and ``--dp-min-clients m``; FedAvg and FedProx), announced in every ``hfl.model``
and bound into the round's secure aggregation with the model's digest, so that every client
checks the server's figures against its own and clients with different noise never aggregate
together.

The mechanism (McMahan, Ramage, Talwar and Zhang, "Learning Differentially Private Recurrent
Language Models", ICLR 2018, DP-FedAvg with flat clipping and uniform weights; the
definitions of Flower's ``DifferentialPrivacyClientSideFixedClipping`` and
``fixedclipping_mod``: each client's model update w_i − w clipped to L2 norm C
(``clip_inputs_inplace``), the aggregate's noise of standard deviation σC over the sum,
i.e. ``compute_stdv`` = σC / ``num_sampled_clients`` on the mean, and accounting that
"requires no-amplification accounting and uniform FedAvg aggregation")::

    client i:  u_i = clip(w_i − w, C) + z_i,   z_i ~ N(0, (σC)² / m) per coordinate
    vector:    [u_i, 1]                          (weight 1: not n_i, which is unbounded)
    server:    w ← w + Σ_survivors u_i / (number of survivors)

Flower's wrappers add the noise on the server (central DP: the server is trusted with the
clipped updates). Here the noise is **distributed**: each client adds its share z_i to its
own vector, in float64, before the fixed-point encoding and before any mask, so the server
only ever sees the noised sum that secure aggregation reveals. The sum of s surviving
clients carries N(0, s σ²C²/m): **at least σC when at least m clients survive**, which is
what the announced guarantee assumes. What happens when clients drop: the sum then carries
less noise (σC √(s/m)); the server's final accounting (:meth:`DpFedAvg.guarantee` with
the survivors of every round) composes each round's own noise multiplier σ √(s_r / m), so
the reported ε is the realised one (larger than announced after dropouts below m). Set
``--dp-min-clients m`` below the client count so that every client adds noise for m
survivors (each adds more: the announced guarantee then holds with up to n − m dropouts).
Secure aggregation itself never reveals a sum of fewer than t clients (its threshold).

Guarantee: **client-level (ε, δ)-DP** of everything the server receives (and so of every
global model, which the clients receive) under the add-or-remove-one-client relation of
McMahan et al. (a client's whole data set present or absent; who takes part is public: the
server talks to every client, so an absent client's vector counts as zero): one client
moves the sum of clipped updates by at most C, so each round is the Gaussian mechanism of
noise multiplier σ, composed over the rounds by ``dp-accounting``'s RDP accountant at
**sampling rate q = 1**: every client takes part in every round (no amplification by
sampling is claimed; the population is the clients of the run). Plain mode (``--plain``)
gives the **same guarantee**: there the server reads each client's vector, so every client
adds the full N(0, σ²C²) to its own (local DP: each update alone is the Gaussian mechanism
of multiplier σ); the aggregate then carries √s times the noise of secure mode: secure
aggregation buys a factor √m less noise per client for the same (ε, δ).

Not covered: a server colluding with k clients knows their noise shares and subtracts
them (the honest noise is then σC √((s − k)/m): set m to the honest survivors one relies
on); clients that deviate (a client that skips its noise weakens the sum, Kairouz, Liu and
Steinke, ICML 2021, analyse such trust); the fixed-point rounding of each client's noised
vector (2^-frac_bits per coordinate, a function of the individual noised values rather
than of their sum: a gap between the analysed and the implemented mechanism, closed by
the distributed discrete Gaussian of Kairouz et al., not implemented); the floating-point
caveat of :mod:`vflcrypto.privacy.mechanisms`. Cost: the global model moves by the mean of
the clipped updates plus noise σC / s per coordinate: with five clients that noise
swamps the signal at every useful ε (the frontier, ``vflcrypto audit hfl --defence
dp-fedavg``); McMahan et al. rely on "a sufficiently large number of users" (internet scale).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError
from vflcrypto.privacy import Guarantee
from vflcrypto.privacy import mechanisms as dpm

__all__ = ["COVERS", "DEFENCE", "DEFENCES", "TAIL", "DpFedAvg", "noise_for_budget"]

DEFENCE = "dp-fedavg"
#: the defences of HFL: their names in ``vflcrypto audit hfl --defence``
DEFENCES = (DEFENCE,)
COVERS = ("each client's whole data set (client-level DP, add-or-remove-one client: sensitivity C of the sum of "
          "clipped updates), in everything the server receives and in every global model; every client takes part "
          "in every round (sampling rate 1, no amplification claimed)")
#: standard deviations of noise the fixed-point bound must hold beyond the clip norm (P(|Z| > 12) < 4e-33 a value)
TAIL = 12.0


@functools.lru_cache(maxsize=64)
def noise_for_budget(epsilon: float, delta: float, rounds: int) -> float:
    """The noise multiplier σ (the sum's noise std over C) whose ``rounds`` rounds meet (ε, δ): the library's
    calibrated multiplier of ``rounds`` Gaussian mechanisms at sampling rate 1 (the sensitivity of the sum is C).
    Cached: every role of a run (and Flower's per-message ClientApps) asks the same question."""
    from vflcrypto.privacy import calibrate_noise

    return calibrate_noise(epsilon, delta, rounds, 1.0)


@dataclass(frozen=True)
class DpFedAvg:
    """DP-FedAvg's parameters in one run, as every ``hfl.model`` announces them."""

    #: σ: the standard deviation of the noise in the sum of m clients' vectors, over C
    noise_multiplier: float
    #: C: the L2 clip norm of each client's model update
    clip: float
    delta: float
    #: m: the survivors whose noise shares add up to σC (secure mode; each client adds σC / √m)
    min_clients: int
    secure: bool = True

    def __post_init__(self) -> None:
        if not (self.noise_multiplier > 0 and math.isfinite(self.noise_multiplier)):
            raise InputDataError(f"DP-FedAvg needs a finite noise multiplier > 0, got {self.noise_multiplier}")
        if not (self.clip > 0 and math.isfinite(self.clip)):
            raise InputDataError(f"DP-FedAvg needs a finite clip norm > 0, got {self.clip}")
        if not 0 < self.delta < 1:
            raise InputDataError(f"DP-FedAvg needs 0 < delta < 1, got {self.delta}")
        if self.min_clients < 1:
            raise InputDataError(f"--dp-min-clients must be >= 1, got {self.min_clients}")

    @property
    def share_std(self) -> float:
        """The standard deviation of each client's own noise: σC/√m under secure aggregation, σC in the clear."""
        return self.noise_multiplier * self.clip / (math.sqrt(self.min_clients) if self.secure else 1.0)

    def check_ring(self, frac_bits: int, value_bits: int) -> None:
        """Refuse a clip norm and noise that may not fit the aggregation's fixed-point bound 2^(value − frac bits):
        a clipped coordinate is at most C, its noise beyond :data:`TAIL` standard deviations is never expected."""
        bound = 2.0 ** (value_bits - frac_bits)
        need = self.clip + TAIL * self.share_std
        if need >= bound:
            raise InputDataError(
                f"DP-FedAvg's values reach C + {TAIL:g} x the noise std = {need:.4g}, beyond the aggregation's "
                f"fixed-point bound 2^{value_bits - frac_bits} = {bound:g}: lower --dp-clip, raise --value-bits "
                "(within the ring) or lower --frac-bits")

    def noised(self, w: np.ndarray, w_i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """This client's vector before any encoding: ([clip(w_i − w, C), 1], its noise share on the update part).
        Returns the clean vector (the audit's ground truth) and the noise (CSPRNG); the client sends their sum."""
        update = np.asarray(w_i, np.float64) - np.asarray(w, np.float64)
        clipped, _ = dpm.clip_rows(update[None, :], self.clip)
        clean = np.concatenate([clipped[0], [1.0]])
        return clean, dpm.gaussian_noise(update.shape, self.share_std)

    def round_multipliers(self, survivors: Sequence[int]) -> list[float]:
        """Each round's noise multiplier on the sum the server obtained: σ √(s_r / m) for s_r survivors under secure
        aggregation (each survivor's share is σC/√m); σ in the clear (every vector carries σC itself)."""
        if not self.secure:
            return [self.noise_multiplier] * len(survivors)
        return [self.noise_multiplier * math.sqrt(s / self.min_clients) for s in survivors]

    def guarantee(self, rounds: int, survivors: Sequence[int] | None = None) -> Guarantee:
        """The guarantee of a run of ``rounds`` rounds: announced (at least m survivors every round) or, given each
        round's survivor count, realised (each round's own multiplier, :func:`composed_gaussian_epsilon`)."""
        from vflcrypto.privacy import composed_gaussian_epsilon, gaussian_epsilon

        announced = gaussian_epsilon(self.noise_multiplier, rounds, 1.0, self.delta)
        sigmas = self.round_multipliers(survivors) if survivors is not None else [self.noise_multiplier] * rounds
        eps = announced if survivors is None else composed_gaussian_epsilon(sigmas, self.delta)
        how = ("distributed: each client adds N(0, (sigma*C)^2/m) before masking, the sum of m carries sigma*C"
               if self.secure else "local (plaintext mode): each client adds N(0, (sigma*C)^2) to its own vector")
        return Guarantee(DEFENCE, float(eps), float(self.delta),
                         f"DP-FedAvg: each client's update clipped to C, Gaussian noise {how}",
                         "dp_accounting RdpAccountant", COVERS,
                         {"noise_multiplier": self.noise_multiplier, "clip": self.clip, "rounds": rounds,
                          "min_clients": self.min_clients, "sampling_rate": 1.0, "announced_epsilon": announced,
                          "weakest_round_multiplier": min(sigmas) if sigmas else self.noise_multiplier,
                          "client_noise_std": self.share_std})

    def privacy(self, rounds: int, survivors: Sequence[int] | None = None) -> dict[str, Any]:
        """The guarantee as JSON (``privacy`` of the CLI and the model file), with each round's survivors."""
        out = {DEFENCE: self.guarantee(rounds, survivors).to_dict()}
        if survivors is not None:
            out[DEFENCE]["survivors"] = [int(s) for s in survivors]
            out[DEFENCE]["mode"] = "secure" if self.secure else "plain"
        return out
