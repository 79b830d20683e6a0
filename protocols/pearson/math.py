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

__all__ = ["FRAC_BITS", "REVEALS", "standardize"]

FRAC_BITS = 24
REVEALS = ("active", "passive", "both")


def standardize(X: np.ndarray, name: str) -> np.ndarray:
    """Columns centred and scaled to unit population variance; constant or non-finite columns refused."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] == 0 or X.shape[0] < 2:
        raise InputDataError(f"{name}: needs a 2-D matrix with at least one column and two rows")
    if not np.isfinite(X).all():
        raise InputDataError(f"{name}: correlations need finite values (impute missing ones first)")
    std = X.std(axis=0)
    if (std == 0).any():
        raise InputDataError(f"{name}: column {int(np.argmax(std == 0))} is constant: its correlation is undefined")
    return (X - X.mean(axis=0)) / std
