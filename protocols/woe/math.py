"""Binning, weight of evidence (WOE), information value (IV) and IV-based selection.

Conventions (stated once, used by the secure protocol and by the plaintext reference):

* bin ``b`` of a feature holds ``e_b`` events (label 1) and ``n_b`` non-events (label 0);
  ``E = Σ e_b`` and ``N = Σ n_b``;
* ``WOE_b = ln((e_b / E) / (n_b / N))`` (positive: the bin is riskier than average);
* ``IV = Σ_b (e_b / E − n_b / N) · WOE_b`` (≥ 0);
* a bin with no events or no non-events would make WOE infinite: both of its counts get
  :data:`ADJUSTMENT` = 0.5 added first (the adjustment factor of FATE's hetero feature
  binning and of SAS PROC HPBIN's ``WOEADJUST=``, default 0.5).

Binning: ``quantile`` is SecureBoost's quantile binning (:func:`..secureboost.tree.bin_feature`,
the same code), ``equal_width`` splits ``[min, max]`` into equal intervals; NaN takes the
last bin. :func:`merge_small_bins` then merges every bin with fewer than ``min_bin_size``
rows into its neighbour: per-bin label counts of a bin of one row *are* that row's label.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.errors import InputDataError
from vflcrypto.spec import option

from ..secureboost.tree import bin_feature

__all__ = ["ADJUSTMENT", "COUNT_BITS", "METHODS", "WoeParams", "bin_column", "bin_matrix", "merge_small_bins",
           "plain_counts", "select_features", "woe_iv"]

ADJUSTMENT = 0.5
METHODS = ("quantile", "equal_width")
COUNT_BITS = 32  # events in the high part of a packed count, non-events in the low 32 bits


@dataclass
class WoeParams:
    """The binning and selection parameters (the one source of the ``train woe`` flags)."""

    max_bin: int = option(10, "bins per feature (2..256)")
    method: str = option("quantile", "quantile or equal_width bins", choices=METHODS)
    min_bin_size: int = option(10, "merge bins with fewer rows than this into a neighbour (1 = never): a "
                                   "bin's label counts describe its rows, one row's label if it is alone")
    iv_threshold: float = option(0.02, "select features whose IV is at least this")
    top_k: int = option(0, "then keep at most this many selected features over all parties (0 = all)")
    return_results: bool = option(False, "send each passive party the WOE of its bins and the IV of its "
                                          "features (it then learns the label rate of each of its bins)",
                                  flag="--return-results")

    def validate(self) -> None:
        if not 2 <= self.max_bin <= 256:
            raise InputDataError("max_bin must be in [2, 256]")
        if self.method not in METHODS:
            raise InputDataError(f"method must be one of {METHODS}, not {self.method!r}")
        if self.min_bin_size < 1 or self.top_k < 0 or not self.iv_threshold >= 0:
            raise InputDataError("min_bin_size must be >= 1, top_k >= 0, iv_threshold >= 0")


def bin_column(x: np.ndarray, max_bin: int, method: str) -> np.ndarray:
    """The bin of every row of one feature (int32; NaN in the last bin)."""
    x = np.asarray(x, dtype=np.float64)
    if method == "quantile":
        return bin_feature(x, max_bin)[1]
    finite = x[~np.isnan(x)]
    if finite.size == 0 or finite.min() == finite.max():
        return np.where(np.isnan(x), 1, 0).astype(np.int32) if finite.size else np.zeros(len(x), np.int32)
    edges = np.linspace(finite.min(), finite.max(), max_bin + 1)[1:-1]
    return np.searchsorted(edges, x, side="left").astype(np.int32)  # NaN sorts last: bin max_bin - 1


def merge_small_bins(bins: np.ndarray, min_size: int) -> np.ndarray:
    """Merge each bin of fewer than ``min_size`` rows into its right neighbour (the last into its
    left one), keeping the bins' order; returns bins renumbered 0, 1, ..."""
    ids, inv, counts = np.unique(bins, return_inverse=True, return_counts=True)
    groups: list[list[int]] = []
    run: list[int] = []
    size = 0
    for k, c in enumerate(counts.tolist()):
        run.append(k)
        size += c
        if size >= min_size:
            groups.append(run)
            run, size = [], 0
    if run:
        if groups:
            groups[-1].extend(run)
        else:
            groups.append(run)
    new_of = np.empty(len(ids), np.int32)
    for g, members in enumerate(groups):
        new_of[members] = g
    return new_of[inv].astype(np.int32)


def bin_matrix(X: np.ndarray, params: WoeParams) -> tuple[np.ndarray, np.ndarray]:
    """Bins of every column after merging small ones: ``(bins (n, F) int32, bins per feature (F,))``."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise InputDataError("feature matrix must be 2-D")
    if np.isinf(X).any():
        raise InputDataError("features must not be infinite")
    out = np.zeros(X.shape, np.int32)
    for f in range(X.shape[1]):
        out[:, f] = merge_small_bins(bin_column(X[:, f], params.max_bin, params.method), params.min_bin_size)
    widths = out.max(axis=0) + 1 if len(out) else np.zeros(X.shape[1], np.int64)
    return out, widths.astype(np.int64)


def plain_counts(bins: np.ndarray, widths: np.ndarray, y: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per feature, the (events, non-events) of each bin from the labels in the clear."""
    y = np.asarray(y).astype(np.int64)
    out = []
    for f, w in enumerate(widths.tolist()):
        ev = np.bincount(bins[:, f], weights=y, minlength=w).astype(np.int64)
        tot = np.bincount(bins[:, f], minlength=w).astype(np.int64)
        out.append((ev, tot - ev))
    return out


def woe_iv(events: np.ndarray, nonevents: np.ndarray) -> tuple[np.ndarray, float]:
    """WOE of every bin and the feature's IV (module docstring for the conventions)."""
    e = np.asarray(events, dtype=np.float64)
    n = np.asarray(nonevents, dtype=np.float64)
    if e.shape != n.shape or (e < 0).any() or (n < 0).any():
        raise InputDataError("event and non-event counts must be non-negative and of one length")
    E, N = e.sum(), n.sum()
    if E == 0 or N == 0:
        raise InputDataError("WOE needs both events and non-events among the labels")
    empty = (e == 0) | (n == 0)
    e = np.where(empty, e + ADJUSTMENT, e)
    n = np.where(empty, n + ADJUSTMENT, n)
    woe = np.log((e / E) / (n / N))
    iv = float(np.sum((e / E - n / N) * woe))
    return woe, iv


def select_features(ivs: dict[str, list[float]], threshold: float, top_k: int) -> dict[str, list[bool]]:
    """Which features of each party are selected: IV ≥ ``threshold``, then the ``top_k`` highest overall."""
    flat = [(iv, party, j) for party, vals in ivs.items() for j, iv in enumerate(vals) if iv >= threshold]
    flat.sort(key=lambda t: -t[0])
    if top_k:
        flat = flat[:top_k]
    keep = {(p, j) for _, p, j in flat}
    return {party: [(party, j) in keep for j in range(len(vals))] for party, vals in ivs.items()}
