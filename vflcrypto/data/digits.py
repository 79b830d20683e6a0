"""The handwritten digits (8×8, 1,797 rows) split vertically: party A the left half, party B the right.

Bundled as ``vflcrypto/data/digits.csv.gz`` (a copy of the file scikit-learn ships; the
data is the test set of the UCI "Optical Recognition of Handwritten Digits" dataset,
E. Alpaydin and C. Kaynak, 1998, licensed CC BY 4.0; see ``vflcrypto/data/README.md``).
Each row is 64 pixel counts in 0..16 followed by the digit. The usual VFL split gives
party A pixel columns 0-3 of every image row and party B columns 4-7 (32 features each).

:func:`few_overlap_split` builds the seed-000 setting: a held-out aligned test set, ``overlap``
aligned training rows (on both parties, labels at the server) and the remaining
training rows unaligned, each on exactly one party (alternating), with string row IDs
so that the protocols' PSI can find the overlap.
"""

from __future__ import annotations

import gzip
import importlib.resources
from dataclasses import dataclass

import numpy as np

from ..errors import InputDataError

__all__ = ["DIGITS_FILE", "FewOverlapSplit", "PartyView", "few_overlap_split", "load_digits", "split_columns"]

DIGITS_FILE = "digits.csv.gz"


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)``: 1,797 × 64 pixel counts (float32, 0..16) and the digits (int64)."""
    path = importlib.resources.files("vflcrypto") / "data" / DIGITS_FILE
    with importlib.resources.as_file(path) as p, gzip.open(p, "rt", encoding="ascii") as fh:
        data = np.loadtxt(fh, delimiter=",", dtype=np.float64)
    if data.shape != (1797, 65):
        raise InputDataError(f"{DIGITS_FILE}: expected 1797 x 65 values, got {data.shape}")
    return data[:, :64].astype(np.float32), data[:, 64].astype(np.int64)


def split_columns(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left (pixel columns 0-3) and right (4-7) halves of 8×8 images given as 64 columns."""
    img = np.asarray(X).reshape(len(X), 8, 8)
    return img[:, :, :4].reshape(len(X), 32), img[:, :, 4:].reshape(len(X), 32)


@dataclass(frozen=True)
class PartyView:
    """One party's rows: IDs and features (its aligned rows first, in the common order, then its own)."""

    ids: list[str]
    X: np.ndarray


@dataclass(frozen=True)
class FewOverlapSplit:
    """The seed-000 setting on the digits.

    ``parties[k]`` holds its overlap and test rows plus its unaligned rows; the server
    holds the labels of the overlap rows (``labels``, by ID). ``test_ids``/``y_test`` are
    the held-out aligned rows, whose labels only evaluation uses.
    """

    parties: tuple[PartyView, ...]
    labels: dict[str, int]
    overlap_ids: list[str]
    test_ids: list[str]
    y_test: np.ndarray
    n_classes: int


def few_overlap_split(overlap: int, *, seed: int = 0, n_test: int = 360) -> FewOverlapSplit:
    """Digits halves with ``overlap`` aligned training rows; the rest of the training rows unaligned.

    The row shuffle uses ``seed`` (public example data, not a secret). The unaligned rows
    alternate between party A and party B, so each holds about half of them.
    """
    X, y = load_digits()
    n = len(y)
    if not 1 <= overlap <= n - n_test:
        raise InputDataError(f"overlap must be in 1..{n - n_test}, got {overlap}")
    order = np.random.default_rng(seed).permutation(n)  # example data split, not secret
    test, train = order[:n_test], order[n_test:]
    ov, rest = train[:overlap], train[overlap:]
    left, right = split_columns(X)
    ids = [f"d{i:04d}" for i in range(n)]
    views = []
    for k, half in enumerate((left, right)):
        own = rest[k::2]
        rows = np.concatenate([ov, test, own])
        views.append(PartyView([ids[i] for i in rows], half[rows]))
    return FewOverlapSplit(tuple(views), {ids[i]: int(y[i]) for i in ov}, [ids[i] for i in ov],
                           [ids[i] for i in test], y[test], 10)
