"""Label DP for vertical logistic regression: randomized response on the active party's labels (``--label-dp ε``).

Before the first step the active party replaces each binary training label y_i by ỹ_i: kept
with probability e^ε / (e^ε + 1), flipped otherwise (one draw per row from the OS CSPRNG,
:func:`vflcrypto.privacy.randomized_response` with k = 2; Warner 1965), and trains on ỹ only.
The residuals r = (p − ỹ)/n it sends in plain mode (``logreg.dp_residual``), the encrypted
residuals and the gradient replies of the secure mode, and so every passive party's weights,
are post-processing of ỹ: **pure ε-label-DP** of each training row's label (δ = 0), however
many steps it trains. A passive party reading the residuals' signs reads ỹ, right about y with
probability e^ε / (e^ε + 1) (at ε = 1, 0.73). With π the majority class's share, guessing the
minority class where ỹ says so beats the majority class only when e^ε > π / (1 − π): at
ε ≤ ln(π / (1 − π)) (0.50 on Titanic's training rows, π = 0.62) the residuals add nothing to the
majority guess.

What it does not cover: the features (the active party still learns the summed logits z), the
active party's own outputs (its train loss is on the true labels; its test figures on the test
labels), and the floating-point caveat of :mod:`vflcrypto.privacy.mechanisms`. The setup
announces ε (``logreg.setup``) so that every party accounts the same guarantee; a network party
started with another ``--label-dp`` refuses the run. Cost: the model learns from labels of which
a share 1/(e^ε + 1) is flipped (``vflcrypto audit logreg --defence label-rr`` measures it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError
from vflcrypto.privacy import mechanisms, rr_guarantee

__all__ = ["COVERS", "DEFENCES", "check_epsilon", "privacy", "randomize"]

#: the defences of logistic regression (``vflcrypto audit logreg --defence``)
DEFENCES = ("label-rr",)
COVERS = ("each training row's label (label-DP, replace-one) in everything the active party sends after drawing the "
          "randomized labels: the residuals (plain), the encrypted residuals and gradient replies (secure), and so "
          "every passive party's weights; drawn once, everything else is post-processing")


def check_epsilon(epsilon: float | None) -> float | None:
    """``epsilon`` itself when it is None (off) or finite and > 0, else :class:`InputDataError`."""
    if epsilon is not None and not (epsilon > 0 and math.isfinite(epsilon)):
        raise InputDataError(f"--label-dp needs a finite epsilon > 0, got {epsilon}")
    return epsilon


def randomize(y: np.ndarray, epsilon: float) -> np.ndarray:
    """The binary labels ``y`` (0/1) through randomized response at ε, as float64 0/1."""
    return mechanisms.randomized_response(np.asarray(y).astype(np.int64), 2, epsilon).astype(np.float64)


def privacy(epsilon: float | None) -> dict[str, Any]:
    """The guarantee as JSON (defence name -> its (ε, δ), mechanism, accountant and what it covers); empty when off."""
    if epsilon is None:
        return {}
    return {"label-rr": rr_guarantee(epsilon, 2, COVERS).to_dict()}
