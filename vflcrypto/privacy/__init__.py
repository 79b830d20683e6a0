"""Differential privacy for the protocols' defences: the mechanisms' math and the accountant's figures.

* :mod:`.accounting`: (ε, δ) of the Gaussian mechanism composed over steps, and the noise
  that meets a budget, from Google's ``dp-accounting`` RDP accountant (no hand-written
  accountant); :class:`Guarantee`, one defence's stated guarantee;
* :mod:`.mechanisms`: randomized response on class labels (pure ε-DP), and with a prior
  (RRWithPrior, Ghazi et al. 2021; pure ε-DP), per-row L2
  clipping and Gaussian noise, with randomness from the OS CSPRNG;
* :mod:`.marvell`: Marvell's optimised gradient noise for binary labels (Li et al., ICLR
  2022), an empirical defence (no (ε, δ)) whose symmetrised KL bounds any attack's leak AUC.

Nothing here knows a protocol: a protocol's defence module decides what the sensitivity
is, what is clipped, which rows take part in which step, and states what its guarantee
covers.

Imports: :mod:`vflcrypto.errors` only (and numpy; ``dp_accounting`` inside the functions
that account). Public names: the modules above and their main functions.
"""

from . import marvell
from .accounting import (
    Guarantee,
    calibrate_noise,
    composed_gaussian_epsilon,
    gaussian_epsilon,
    gaussian_guarantee,
    gaussian_rdp,
    rr_guarantee,
    rr_with_prior_guarantee,
)
from .mechanisms import (
    clip_rows,
    gaussian_noise,
    randomized_response,
    rr_epsilon,
    rr_keep_probability,
    rr_with_prior,
    secure_uniform,
)

__all__ = [
    "Guarantee",
    "accounting",
    "calibrate_noise",
    "clip_rows",
    "composed_gaussian_epsilon",
    "gaussian_epsilon",
    "gaussian_guarantee",
    "gaussian_noise",
    "gaussian_rdp",
    "marvell",
    "mechanisms",
    "randomized_response",
    "rr_epsilon",
    "rr_guarantee",
    "rr_keep_probability",
    "rr_with_prior",
    "rr_with_prior_guarantee",
    "secure_uniform",
]
