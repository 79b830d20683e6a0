"""The label defences the representation-VFL protocols share (split learning, one-shot and few-shot VFL).

The server (the label holder) of each can train on randomized-response labels (``--label-dp ε``)
and add clipped Gaussian noise to the gradients it sends (``--grad-noise σ --grad-clip C``, or
``--grad-epsilon ε`` with ``--dp-delta``). What the three share is here:

* :class:`DefendedConfig`: the options, one source of the flags of every protocol that offers them;
* :class:`LabelDefence`: what the server announces in its setup, so that every party accounts the
  same (ε, δ), and the guarantees each role reports (:meth:`LabelDefence.privacy`);
* :func:`announced_defence`: a party reads the announcement and refuses one that differs from the
  defences it was itself asked to run with (:meth:`LabelDefence.announced`: a protocol that offers
  more defences extends :class:`LabelDefence` and :class:`DefendedConfig`, and its setup carries the
  subclass's fields by name: split learning's Marvell, :mod:`vflcrypto.protocols.split.defence`);
* :func:`noise_for_budget`: the noise multiplier that meets (ε, δ) over a protocol's releases.

:class:`DefendedConfig` also carries the feature parties' embedding defences (``--embed-noise`` /
``--embed-epsilon``, ``--embed-clip``, ``--embed-delta``, ``--dcor-weight``), whose mechanism and
statement are in :mod:`._repvfl_embed`.

How a protocol applies the noise and what its guarantee covers are its own
(:mod:`vflcrypto.protocols.split.defence`: DP-SGD over the epochs; :mod:`vflcrypto.protocols.oneshot.defence`:
the one download D1, released once). Every figure comes from :mod:`vflcrypto.privacy` (randomized
response's exact ε; ``dp-accounting``'s RDP accountant for the Gaussian mechanism).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.privacy import Guarantee, calibrate_noise, gaussian_guarantee, rr_guarantee
from vflcrypto.spec import option

from ._repvfl import RepConfig
from ._repvfl_embed import EmbeddingDefence, default_delta

__all__ = ["DEFENCES", "DefendedConfig", "LabelDefence", "Statement", "announced_defence", "noise_for_budget"]

#: the label defences (their names in ``vflcrypto audit NAME --defence``)
DEFENCES = ("label-rr", "grad-gauss")


@functools.lru_cache(maxsize=256)
def noise_for_budget(epsilon: float, delta: float, releases: int) -> float:
    """The noise multiplier σ (std over the clip norm C) whose ``releases`` Gaussian mechanisms meet (ε, δ) under
    replace-one DP of values clipped to C: twice the library's calibrated multiplier (a changed label, or a replaced
    row's features, moves one clipped row by 2C)."""
    return 2.0 * calibrate_noise(epsilon, delta, releases, 1.0)


@dataclass(frozen=True)
class Statement:
    """A protocol's statement of its defences: what each covers and how the Gaussian noise is applied."""

    #: defence name -> what its guarantee protects, against whom, under which relation
    covers: Mapping[str, str]
    #: the Gaussian mechanism as the protocol applies it
    gauss_mechanism: str
    #: how the guarantee's parameters name the number of releases (split learning: epochs)
    releases_name: str = "releases"


@dataclass(frozen=True)
class LabelDefence:
    """The label defences of one run, as the setup announces them (``None``: off)."""

    label_epsilon: float | None = None
    noise_multiplier: float | None = None
    clip: float | None = None
    delta: float | None = None

    def __post_init__(self) -> None:
        if self.label_epsilon is not None and not (self.label_epsilon > 0 and math.isfinite(self.label_epsilon)):
            raise InputDataError(f"--label-dp needs a finite epsilon > 0, got {self.label_epsilon}")
        if self.noise_multiplier is not None:
            if not (self.noise_multiplier > 0 and math.isfinite(self.noise_multiplier)):
                raise InputDataError(f"the gradient noise multiplier must be finite and > 0, "
                                     f"got {self.noise_multiplier}")
            if self.clip is None or not (self.clip > 0 and math.isfinite(self.clip)):
                raise InputDataError(f"gradient noise needs a finite clip norm > 0, got {self.clip}")
            if self.delta is None or not 0 < self.delta < 1:
                raise InputDataError(f"gradient noise needs 0 < delta < 1, got {self.delta}")

    @property
    def on(self) -> bool:
        return self.label_epsilon is not None or self.noise_multiplier is not None

    @property
    def noised(self) -> bool:
        return self.noise_multiplier is not None

    def guarantees(self, releases: int, n_classes: int | None, statement: Statement) -> list[Guarantee]:
        """Each defence's guarantee (both hold at once when both are on); ``releases``: how many noised gradients
        each row's label enters."""
        out = []
        if self.label_epsilon is not None:
            out.append(rr_guarantee(self.label_epsilon, n_classes, statement.covers["label-rr"]))
        if self.noise_multiplier is not None:
            assert self.clip is not None and self.delta is not None  # checked in __post_init__
            out.append(gaussian_guarantee(self.noise_multiplier, self.clip, self.delta, releases,
                                          statement.covers["grad-gauss"], mechanism=statement.gauss_mechanism,
                                          releases_name=statement.releases_name))
        return out

    def privacy(self, releases: int, n_classes: int | None, statement: Statement) -> dict[str, Any]:
        """The guarantees as JSON: defence name -> its (ε, δ), mechanism, accountant and what it covers."""
        return {g.defence: g.to_dict() for g in self.guarantees(releases, n_classes, statement)}

    @classmethod
    def announced(cls, setup: Any, party: str, mine: LabelDefence | None = None) -> Self:
        """The defences a setup announces: every field of ``cls`` read from the setup's field of the same name
        (``label_epsilon``, ``noise_multiplier``, ``clip``, ``delta``, and a subclass's own);
        :class:`ProtocolError` when they are invalid, or when ``mine`` (the defences the party was itself asked
        for) is on and differs."""
        try:
            announced = cls(**{f.name: getattr(setup, f.name) for f in dataclasses.fields(cls)})
        except InputDataError as exc:
            raise ProtocolError(f"the setup announces invalid label defences: {exc}") from None
        if mine is not None and mine.on and mine != announced:
            raise ProtocolError(f"{party} asks for the label defences {mine}, the server announced {announced}")
        return announced


def announced_defence(setup: Any, party: str, mine: LabelDefence | None = None) -> LabelDefence:
    """:meth:`LabelDefence.announced` of the shared defences (one-shot and few-shot VFL)."""
    return LabelDefence.announced(setup, party, mine)


@dataclass(frozen=True)
class DefendedConfig(RepConfig):
    """:class:`RepConfig` plus the label defences and the embedding defences (all off by default); a subclass
    states, by :meth:`releases`, how many noised gradients each row's label enters and, by :meth:`embed_releases`,
    how many noised representations of one row a party sends."""

    label_dp: float | None = option(None, "label DP by randomized response: the server trains on labels kept with "
                                          "probability e^eps/(e^eps+C-1), eps = this (pure eps-label-DP)")
    grad_noise: float | None = option(None, "Gaussian noise on the gradients the server sends: its std over "
                                            "--grad-clip (each example's gradient clipped first)")
    grad_epsilon: float | None = option(None, "Gaussian gradient noise calibrated to this label-DP eps at "
                                              "--dp-delta (RDP accountant); instead of --grad-noise")
    grad_clip: float = option(1.0, "L2 clip norm C of each example's gradient (with --grad-noise/--grad-epsilon)")
    dp_delta: float = option(1e-5, "delta of the gradient-noise guarantee")
    embed_noise: float | None = option(None, "Gaussian noise on every representation a party sends: its std over "
                                             "--embed-clip (each row clipped first)")
    embed_epsilon: float | None = option(None, "Gaussian embedding noise calibrated to this feature-DP eps at "
                                               "--embed-delta over each row's releases (RDP accountant); instead of "
                                               "--embed-noise")
    embed_clip: float = option(1.0, "L2 clip norm C of each representation row (with --embed-noise/--embed-epsilon)")
    embed_delta: float | None = option(None, "delta of the embedding-noise guarantee (default 1/n^2, n the overlap "
                                             "plus test rows)")
    dcor_weight: float | None = option(None, "NoPeek: each party adds this weight times the distance correlation "
                                             "of its batch's raw rows and representations to its loss (empirical, "
                                             "no formal guarantee)")

    def releases(self) -> int:
        """How many noised gradients each row's label enters (one-/few-shot VFL: 1, the one download D1)."""
        return 1

    def embed_releases(self) -> int:
        """How many noised representations of one row a party sends at most (one-shot VFL: 2, U1 and U2)."""
        return 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.grad_noise is not None and self.grad_epsilon is not None:
            raise InputDataError("give --grad-noise or --grad-epsilon, not both")
        if self.grad_epsilon is not None and not (self.grad_epsilon > 0 and math.isfinite(self.grad_epsilon)):
            raise InputDataError(f"--grad-epsilon must be finite and > 0, got {self.grad_epsilon}")
        self.defence()  # the defences' own checks (and the calibration), before any party starts
        if self.embed_noise is not None and self.embed_epsilon is not None:
            raise InputDataError("give --embed-noise or --embed-epsilon, not both")
        for value, flag in ((self.embed_epsilon, "--embed-epsilon"), (self.embed_clip, "--embed-clip"),
                            (self.dcor_weight, "--dcor-weight")):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise InputDataError(f"{flag} must be finite and > 0, got {value}")
        if self.embed_delta is not None and not 0 < self.embed_delta < 1:
            raise InputDataError(f"--embed-delta must lie in (0, 1), got {self.embed_delta}")
        if self.embed_delta is not None or self.embed_noise is not None:
            self.embedding(2)  # checked now where the row count does not enter (an explicit delta, or sigma)

    def defence(self) -> LabelDefence:
        """The label defences this configuration asks for (the noise multiplier calibrated to --grad-epsilon)."""
        sigma = self.grad_noise
        if self.grad_epsilon is not None:
            sigma = noise_for_budget(self.grad_epsilon, self.dp_delta, self.releases())
        if sigma is None:
            return LabelDefence(self.label_dp)
        return LabelDefence(self.label_dp, sigma, self.grad_clip, self.dp_delta)

    def embedding(self, rows: int) -> EmbeddingDefence:
        """The embedding defences this configuration asks for in a run over ``rows`` rows (the overlap plus the test
        rows: δ defaults to 1/rows²; --embed-epsilon calibrated over :meth:`embed_releases`)."""
        sigma = self.embed_noise
        if sigma is None and self.embed_epsilon is None:
            return EmbeddingDefence(dcor_weight=self.dcor_weight)
        delta = self.embed_delta if self.embed_delta is not None else default_delta(rows)
        if self.embed_epsilon is not None:
            sigma = noise_for_budget(self.embed_epsilon, delta, self.embed_releases())
        return EmbeddingDefence(sigma, self.embed_clip, delta, self.dcor_weight)
