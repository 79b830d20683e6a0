"""Standardization and the fixed-point cross products behind the correlations.

``r_jk = (1/n) Σ_i za_ij · zp_ik`` with ``z = (x − mean) / std`` (population std, as
``numpy.corrcoef``) computed by each party on its own columns. The active party's
``za`` travels encrypted at :data:`FRAC_BITS` fractional bits; the passive party's ``zp``
multiplies it at the same precision, so each product carries ``2 · FRAC_BITS``
fractional bits and is exact up to the rounding of the two encodings (≈ 2⁻²⁴ per value,
|error of r| ≲ 10⁻⁷).
"""

from __future__ import annotations

import numpy as np

from vflcrypto.errors import InputDataError
from vflcrypto.ml.preprocess import standardize_columns

__all__ = ["FRAC_BITS", "REVEALS", "active_receives", "passive_receives", "standardize"]

FRAC_BITS = 24
REVEALS = ("active", "passive", "both")


def active_receives(reveal: str) -> bool:
    return reveal in ("active", "both")


def passive_receives(reveal: str) -> bool:
    return reveal in ("passive", "both")


def standardize(X: np.ndarray, name: str) -> np.ndarray:
    """A party's z-scores (:func:`vflcrypto.ml.preprocess.standardize_columns`), at least one column and two rows."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] == 0 or X.shape[0] < 2:
        raise InputDataError(f"{name}: needs a 2-D matrix with at least one column and two rows")
    return standardize_columns(X, name)
