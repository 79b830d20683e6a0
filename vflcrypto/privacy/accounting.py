"""(ε, δ) of composed Gaussian mechanisms, and the noise that meets a budget, from ``dp-accounting``.

Every figure comes from Google's ``dp-accounting`` library (``dp_accounting.rdp.RdpAccountant``:
Rényi DP, Mironov 2017, converted to (ε, δ) by the library's tight conversion): the wrappers
here only describe the mechanism as the library's ``DpEvent`` and ask it. The event of one
training run is ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), steps)``:
``steps`` applications of the Gaussian mechanism with noise multiplier σ (the noise's
standard deviation over the L2 sensitivity of what it is added to), each on a Poisson
sample of rate q of the rows (q = 1: every row, no amplification by subsampling), under the
library's default add-or-remove-one neighbouring relation. At q = 1 the event is the plain
Gaussian mechanism, whose privacy depends only on σ (a replace-one caller doubles the
sensitivity before dividing: see the split defence).

The library's accountant is checked against published figures in ``tests/test_dp_defences.py``:
its RDP curve, converted as the moments accountant converts it, gives Abadi et al.'s
ε ≈ 1.26 at q = 0.01, σ = 4, 10 000 steps, δ = 1e-5 (CCS 2016, §3.1).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputDataError

__all__ = ["Guarantee", "calibrate_noise", "composed_gaussian_epsilon", "gaussian_epsilon", "gaussian_guarantee",
           "gaussian_rdp", "rr_guarantee", "rr_with_prior_guarantee"]


@dataclass(frozen=True)
class Guarantee:
    """One defence's stated guarantee: (ε, δ), the mechanism, the accountant and what it covers (an empirical
    defence, Marvell, states what it bounds with ε = δ = None)."""

    #: the defence's name (``label-rr``, ``grad-gauss``, ``marvell``)
    defence: str
    epsilon: float | None
    delta: float | None
    mechanism: str
    #: where the figure comes from (the library's accountant, or the mechanism's exact pure-DP bound)
    accountant: str
    #: what the guarantee protects, against whom, under which neighbouring relation
    covers: str
    #: the mechanism's parameters (noise multiplier, clip norm, steps, keep probability)
    params: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"defence": self.defence, "epsilon": self.epsilon, "delta": self.delta, "mechanism": self.mechanism,
                "accountant": self.accountant, "covers": self.covers, "params": dict(self.params)}


def _check(noise_multiplier: float, steps: int, sampling_rate: float, delta: float) -> None:
    if not noise_multiplier > 0 or steps < 1:
        raise InputDataError(f"need a noise multiplier > 0 and >= 1 step, got {noise_multiplier} and {steps}")
    if not 0 < sampling_rate <= 1:
        raise InputDataError(f"the sampling rate must lie in (0, 1], got {sampling_rate}")
    if not 0 < delta < 1:
        raise InputDataError(f"δ must lie in (0, 1), got {delta}")


def _event(noise_multiplier: float, steps: int, sampling_rate: float) -> Any:
    import dp_accounting

    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(sampling_rate, dp_accounting.GaussianDpEvent(noise_multiplier)), steps)


def gaussian_epsilon(noise_multiplier: float, steps: int, sampling_rate: float, delta: float) -> float:
    """ε at ``delta`` of ``steps`` Gaussian mechanisms of noise multiplier σ, each on a Poisson sample of rate q.

    The library's RDP accountant (``dp_accounting.rdp.RdpAccountant``, its default orders and
    add-or-remove-one relation) composes the event and converts to (ε, δ).
    """
    from dp_accounting.rdp import RdpAccountant

    _check(noise_multiplier, steps, sampling_rate, delta)
    accountant = RdpAccountant()
    accountant.compose(_event(noise_multiplier, steps, sampling_rate))
    return float(accountant.get_epsilon(delta))


def composed_gaussian_epsilon(noise_multipliers: Sequence[float], delta: float) -> float:
    """ε at ``delta`` of Gaussian mechanisms applied one after another, each with its own noise multiplier (no
    sampling: every row in every step).

    For runs whose noise changed between steps (a distributed mechanism whose share of the
    noise depends on how many contributors survived a round): the library's RDP accountant
    composes ``ComposedDpEvent`` of the ``GaussianDpEvent`` of each step (equal multipliers
    grouped as one ``SelfComposedDpEvent``) and converts to (ε, δ). Equal multipliers give
    :func:`gaussian_epsilon` at sampling rate 1.
    """
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    sigmas = [float(s) for s in noise_multipliers]
    if not sigmas:
        raise InputDataError("need at least one step to account")
    for s in sigmas:
        _check(s, 1, 1.0, delta)
    groups: dict[float, int] = {}
    for s in sigmas:
        groups[s] = groups.get(s, 0) + 1
    accountant = RdpAccountant()
    accountant.compose(dp_accounting.ComposedDpEvent(
        [dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(s), k) for s, k in groups.items()]))
    return float(accountant.get_epsilon(delta))


def gaussian_rdp(noise_multiplier: float, steps: int, sampling_rate: float, orders: Sequence[float]) -> np.ndarray:
    """The library's Rényi DP of the same event at each of ``orders`` (for comparing with published accountants
    that convert RDP to (ε, δ) their own way)."""
    from dp_accounting.rdp import RdpAccountant

    _check(noise_multiplier, steps, sampling_rate, 0.5)
    accountant = RdpAccountant(orders=[float(o) for o in orders])
    accountant.compose(_event(noise_multiplier, steps, sampling_rate))
    return np.asarray(accountant._rdp, dtype=np.float64)  # the library keeps the curve in _rdp (no public getter)


def calibrate_noise(epsilon: float, delta: float, steps: int, sampling_rate: float) -> float:
    """The smallest noise multiplier σ whose event (:func:`gaussian_epsilon`) stays within (``epsilon``, ``delta``).

    ``dp_accounting.calibrate_dp_mechanism`` searches σ by Brent's method with fresh RDP
    accountants (to within 1e-6, on the side that meets the budget, which is checked again here).
    """
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    if not epsilon > 0:
        raise InputDataError(f"ε must be > 0, got {epsilon}")
    _check(1.0, steps, sampling_rate, delta)
    sigma = float(dp_accounting.calibrate_dp_mechanism(RdpAccountant, lambda s: _event(s, steps, sampling_rate),
                                                       epsilon, delta, tol=1e-6))
    if gaussian_epsilon(sigma, steps, sampling_rate, delta) > epsilon:  # pragma: no cover - the library's contract
        raise InputDataError(f"calibration missed: σ = {sigma} gives more than ε = {epsilon}")
    return sigma


def rr_guarantee(epsilon: float, k: int | None, covers: str, *, defence: str = "label-rr",
                 mechanism: str = "randomized response on the training labels (one draw per row)") -> Guarantee:
    """The guarantee of k-ary randomized response at ε (:func:`~vflcrypto.privacy.mechanisms.randomized_response`):
    pure ε-DP of each label, exact (no accountant). ``k`` adds the keep probability to the parameters when the
    caller knows the class count; ``covers`` is the protocol's statement of what it protects."""
    from .mechanisms import rr_keep_probability

    params: dict[str, float] = {"epsilon": float(epsilon)}
    if k is not None:
        params.update(classes=k, keep_probability=rr_keep_probability(epsilon, k))
    return Guarantee(defence, float(epsilon), 0.0, mechanism, "exact: pure epsilon-DP of k-ary randomized response",
                     covers, params)


def rr_with_prior_guarantee(epsilon: float, k: int | None, covers: str, *, defence: str = "label-lpmst",
                            mechanism: str = "LP-MST: randomized response with a prior (RRWithPrior) on the training "
                                             "labels, one release per row over disjoint stages") -> Guarantee:
    """The guarantee of labels released by RRWithPrior (:func:`~vflcrypto.privacy.mechanisms.rr_with_prior`), each
    once, in stages over disjoint rows (LP-MST, Ghazi et al., NeurIPS 2021, Algorithm 3): each release is pure ε-DP
    of its row's label whatever the prior (Corollary 2: k* depends on the prior only), the prior of a row depends on
    other rows' released labels only, so the whole is ε-label-DP by (adaptive) parallel composition. The figure is
    :func:`rr_guarantee`'s exact pure ε (no accountant); ``params`` keep RR's keep probability, the first stage's."""
    g = rr_guarantee(epsilon, k, covers, defence=defence, mechanism=mechanism)
    return dataclasses.replace(g, accountant="exact: pure epsilon-DP of RRWithPrior per row, each label released "
                                             "once (parallel composition over the stages)")


def gaussian_guarantee(noise_multiplier: float, clip: float, delta: float, releases: int, covers: str, *,
                       mechanism: str, sensitivity: float = 2.0, defence: str = "grad-gauss",
                       releases_name: str = "releases") -> Guarantee:
    """The guarantee of ``releases`` Gaussian mechanisms of noise std σ·C on values clipped to L2 norm C, each
    row taking part in every release (sampling rate 1), by the library's RDP accountant
    (:func:`gaussian_epsilon`). ``sensitivity`` is the L2 change of one row's clipped contribution in units of
    C (2 under replace-one: a changed label moves a vector of norm <= C to another), so the accounted noise
    multiplier is σ / sensitivity. ``releases_name`` names the count in the parameters (split learning: epochs)."""
    eps = gaussian_epsilon(noise_multiplier / sensitivity, releases, 1.0, delta)
    return Guarantee(defence, eps, float(delta), mechanism, "dp_accounting RdpAccountant", covers,
                     {"noise_multiplier": noise_multiplier, "clip": clip, releases_name: releases,
                      "sampling_rate": 1.0})
