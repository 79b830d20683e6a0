"""The feature parties' defences of their representations (split learning, one-shot and few-shot VFL).

The server of each receives every party's per-row representations H = f_k(X^k) and can
decode the party's raw columns from them (He et al., ACSAC 2019: the audits' trained
decoder). Two defences, both run by each feature party on what it sends, both off by
default and announced in the server's setup (like the label defences, so that every role
accounts the same guarantee; a party started with other embedding flags refuses the run):

* **embed-gauss** (``--embed-noise σ --embed-clip C``, or ``--embed-epsilon ε`` with
  ``--embed-delta δ``, default δ = 1/n², n the overlap plus test rows): before sending, the
  party scales each row of H to L2 norm at most C and adds Gaussian noise N(0, σ²C²) to every
  coordinate, drawn from the OS CSPRNG (:mod:`vflcrypto.privacy.mechanisms`). A row's raw
  columns enter a release only through its own clipped row, which moves by at most 2C when
  the row is replaced (replace-one), so each release is a Gaussian mechanism of noise
  multiplier σ / 2; a row is released once per message that carries it (each protocol states
  how many: split learning once per epoch). ``dp-accounting``'s RDP accountant composes
  those releases at sampling rate 1 (the server knows which rows each message holds) into
  the (ε, δ) every role reports (:func:`vflcrypto.privacy.gaussian_guarantee`); ``--embed-epsilon``
  is calibrated by :func:`vflcrypto.privacy.calibrate_noise` over the same count. The party
  backpropagates through the clipping (the noise is additive, its gradient the identity).
* **dcor** (``--dcor-weight λ``): NoPeek (Vepakomma, Singh, Gupta and Raskar, "NoPeek:
  Information leakage reduction to share activations in distributed deep learning", ICDMW
  2020): the party adds λ · dCor(X_batch, H_batch) (:func:`vflcrypto.ml.nn.distance_correlation`)
  to the loss of its extractor's every local step, so that its representations keep less of
  the geometry of its raw rows. **An empirical defence with no formal guarantee**: its
  effect is measured (the frontier, ``vflcrypto audit split --defence dcor``), never bounded.

What the Gaussian guarantee covers, stated exactly: for the sequence of extractors the run
used, taken as given, the representations of a row that the party sends are (ε, δ)-DP in
that row's raw columns. The extractors themselves are trained on the raw columns without
noise, so what their parameters carry about a row into *other* rows' representations, into
later releases and into the saved model is not covered (only an extractor that depends on no
row would make the release unconditional: none here, even an untrained default extractor
standardises by its party's column means and deviations); nor are
the representations ``vflcrypto predict`` sends for new rows (in the clear), a party that
deviates (the server tests the noise's scale, not the clipping), or floating-point sampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.privacy import gaussian_guarantee
from vflcrypto.privacy import mechanisms as dpm

__all__ = [
    "DCOR_COVERS",
    "EMBED_DEFENCES",
    "EmbedStatement",
    "EmbeddingDefence",
    "announced_embedding",
    "default_delta",
]

#: the embedding defences (their names in ``vflcrypto audit NAME --defence``)
EMBED_DEFENCES = ("embed-gauss", "dcor")
DCOR_COVERS = ("nothing formally: an empirical defence (no epsilon). Each party's extractor is trained to lower the "
               "distance correlation between its raw rows and its representations of them; how far that lowers the "
               "server's decoding of the raw columns is measured, not bounded")


def default_delta(rows: int) -> float:
    """δ = 1/n² for ``rows`` = n rows (below 1/n, as a meaningful δ must be)."""
    return 1.0 / float(max(rows, 2)) ** 2


@dataclass(frozen=True)
class EmbedStatement:
    """A protocol's statement of its embedding noise: what it covers and how many releases a row takes."""

    covers: str
    mechanism: str
    #: how the guarantee's parameters name the number of releases (split learning: epochs)
    releases_name: str = "releases_per_row"


def _positive(value: float | None, what: str) -> None:
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise InputDataError(f"{what} must be finite and > 0, got {value}")


@dataclass(frozen=True)
class EmbeddingDefence:
    """The embedding defences of one run, as the setup announces them (``None``: off)."""

    noise_multiplier: float | None = None
    clip: float | None = None
    delta: float | None = None
    dcor_weight: float | None = None

    def __post_init__(self) -> None:
        _positive(self.dcor_weight, "the distance-correlation weight")
        if self.noise_multiplier is not None:
            _positive(self.noise_multiplier, "the embedding noise multiplier")
            _positive(self.clip, "the embedding clip norm")
            if self.clip is None:
                raise InputDataError("embedding noise needs a clip norm")
            if self.delta is None or not 0 < self.delta < 1:
                raise InputDataError(f"embedding noise needs 0 < delta < 1, got {self.delta}")

    @property
    def on(self) -> bool:
        return self.noised or self.dcor_weight is not None

    @property
    def noised(self) -> bool:
        """Whether the representations are clipped and noised (they then travel as the protocol's ``dp_`` kinds)."""
        return self.noise_multiplier is not None

    def release(self, H: np.ndarray) -> np.ndarray:
        """What the party sends for representations ``H`` (rows): each row clipped to C and N(0, (σC)²) added to each
        coordinate (CSPRNG noise), float32; ``H`` itself when no noise is announced."""
        if self.noise_multiplier is None or self.clip is None:
            return np.asarray(H, np.float32)
        clipped, _ = dpm.clip_rows(np.asarray(H, np.float64), self.clip)
        return np.ascontiguousarray(clipped + dpm.gaussian_noise(clipped.shape, self.noise_multiplier * self.clip),
                                    dtype=np.float32)

    def clipped(self, H: Any) -> Any:
        """The torch rows ``H`` clipped as :meth:`release` clips them (differentiable: the party backpropagates the
        server's gradient through the clipping); ``H`` itself without noise."""
        if self.clip is None or self.noise_multiplier is None:
            return H
        import torch

        norms = torch.linalg.vector_norm(H, dim=1, keepdim=True)
        return H * torch.clamp(self.clip / torch.clamp(norms, min=1e-12), max=1.0)

    def penalty(self) -> Callable[[Any, Any], Any] | None:
        """NoPeek's term λ · dCor(X, H) of a batch (on the clipped rows under noise), or ``None`` without it."""
        if self.dcor_weight is None:
            return None
        from vflcrypto.ml.nn import distance_correlation

        weight = self.dcor_weight

        def term(X: Any, H: Any) -> Any:
            return weight * distance_correlation(X, self.clipped(H))

        return term

    def privacy(self, releases: int, statement: EmbedStatement) -> dict[str, Any]:
        """The guarantees as JSON (defence name -> its figures): embed-gauss's (ε, δ) over ``releases`` Gaussian
        releases per row, by the library's RDP accountant; dcor's weight, with no ε (no formal guarantee)."""
        out: dict[str, Any] = {}
        if self.noise_multiplier is not None:
            assert self.clip is not None and self.delta is not None  # checked in __post_init__
            out["embed-gauss"] = gaussian_guarantee(
                self.noise_multiplier, self.clip, self.delta, releases, statement.covers,
                mechanism=statement.mechanism, defence="embed-gauss", releases_name=statement.releases_name).to_dict()
        if self.dcor_weight is not None:
            out["dcor"] = {"defence": "dcor", "epsilon": None, "delta": None,
                           "mechanism": "NoPeek: weight * dCor(X_batch, H_batch) added to each party's local loss",
                           "accountant": "none: an empirical defence, no formal guarantee", "covers": DCOR_COVERS,
                           "params": {"weight": self.dcor_weight}}
        return out


def announced_embedding(setup: Any, party: str, mine: EmbeddingDefence | None = None) -> EmbeddingDefence:
    """The embedding defences a setup announces (its fields ``embed_noise_multiplier``, ``embed_clip``,
    ``embed_delta``, ``dcor_weight``); :class:`ProtocolError` when they are invalid, or when ``mine`` (the defences
    the party was itself asked for) is on and differs."""
    try:
        announced = EmbeddingDefence(setup.embed_noise_multiplier, setup.embed_clip, setup.embed_delta,
                                     setup.dcor_weight)
    except InputDataError as exc:
        raise ProtocolError(f"the setup announces invalid embedding defences: {exc}") from None
    if mine is not None and mine.on and mine != announced:
        raise ProtocolError(f"{party} asks for the embedding defences {mine}, the server announced {announced}")
    return announced
