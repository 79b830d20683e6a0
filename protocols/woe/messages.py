"""The declared messages of secure binning, WOE/IV and selection (``woe.*``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.he.paillier import PaillierPublicKey, PaillierVector
from vflcrypto.runtime.declarations import Protection, declare

__all__ = ["ACTIVE", "OU_REFUSAL", "PASSIVE", "EncryptedCounts", "EncryptedLabels", "Results", "Setup"]

#: why woe refuses Okamoto-Uchiyama keys (vflcrypto.he.ou.refuse_decryption_oracle)
OU_REFUSAL = "the active party decrypts the bin sums each passive party forms and returns selections and WOE values"

ACTIVE, PASSIVE = "active", "passive"


@declare("woe.setup", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PUBLIC,
         reveals="the active party's Paillier public key, the row count and the binning and selection "
                 "parameters (max_bin, method, min_bin_size, iv_threshold, top_k, return_results)")
@dataclass(frozen=True)
class Setup:
    public_key: PaillierPublicKey
    rows: int
    max_bin: int
    method: str
    min_bin_size: int
    iv_threshold: float
    top_k: int
    return_results: bool


@declare("woe.labels", sender=ACTIVE, receiver=PASSIVE, protection=Protection.CIPHERTEXT, key_owner=ACTIVE,
         reveals="the number of aligned rows only: [[y·2^32 + (1 − y)]] per row (event and non-event "
                 "indicator packed in one ciphertext), IND-CPA under the active party's key")
@dataclass(frozen=True)
class EncryptedLabels:
    labels: PaillierVector


@declare("woe.counts", sender=PASSIVE, receiver=ACTIVE,
         protection=(Protection.CIPHERTEXT, Protection.AGGREGATE, Protection.SHUFFLED), key_owner=ACTIVE,
         reveals="per bin of the sender's features, the event and non-event counts (what SecureBoost's first "
                 "histograms also reveal), under anonymous feature numbers in a random order and with the "
                 "bins of each feature shuffled: not the column names, the bin edges, the bins' order or "
                 "which rows fall in a bin; the number of features and of bins per feature")
@dataclass(frozen=True)
class EncryptedCounts:
    """Bins per anonymous feature, then the packed counts of every bin, rerandomized."""

    widths: np.ndarray
    counts: PaillierVector


@declare("woe.results", sender=ACTIVE, receiver=PASSIVE, protection=Protection.PLAINTEXT,
         reveals="which of the receiver's features are selected (in its anonymous numbering); with "
                 "return_results also the WOE of each of its bins and the IV of each feature, i.e. the event "
                 "rate of each of its own bins: with its own bin membership that is a label estimate per row, "
                 "exact for every row of a bin with only events or only non-events")
@dataclass(frozen=True)
class Results:
    selected: np.ndarray
    woe: np.ndarray
    iv: np.ndarray
