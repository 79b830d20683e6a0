"""The declared messages of unbalanced PSI (``upsi.*``) and the parties' results.

Roles: ``large`` (holds the big set, its OPRF key and the offline cache) and ``small``
(holds the small set; learns the intersection). The large party learns ``|small set|``;
the small party learns the intersection and ``|large set|`` (both in the hellos).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vflcrypto.runtime.declarations import Protection, declare

__all__ = ["LARGE", "MAX_CHUNK", "PROTOCOL_VERSION", "SMALL", "Answer", "Hello", "Query", "UnbalancedResult",
           "Values"]

PROTOCOL_VERSION = 1
LARGE = "large"
SMALL = "small"
MAX_CHUNK = 1 << 20
#: ``Hello.since`` of the large party: no values follow (the small party's transfer is current)
NO_VALUES = -2
#: ``Hello.since``: a full transfer follows (the small party had none, or one it cannot use)
FULL = -1


@declare(
    "upsi.hello",
    sender=(LARGE, SMALL), receiver=(LARGE, SMALL),
    protection=Protection.PUBLIC,
    reveals="version, role and the sender's set size (public by design: the small party learns |large set|, "
            "the large party |small set|); the large party's OPRF key id (a hash of its public key), cache "
            "generation and transfer parameters; the small party's key id, generation and transfer "
            "parameters of the cached transfer it holds",
)
@dataclass(frozen=True)
class Hello:
    """First message each way: small → large (what it holds), then large → small (what follows)."""

    version: int
    role: str
    set_size: int
    chunk_size: int
    key_id: str
    generation: int  # the small party: its transfer's generation (-1: none); the large party: its cache's
    value_bytes: int  # bytes per transferred value (the truncation)
    max_small: int  # the largest small set the transfer's truncation covers at <= 2^-40 false matches
    since: int  # large party: NO_VALUES, FULL, or the generation a delta starts after
    values_total: int  # large party: how many values follow


@declare(
    "upsi.values",
    sender=LARGE, receiver=SMALL,
    protection=Protection.BLINDED,
    reveals="the truncated OPRF values F_a(x) of the large party's IDs (all of them, or those added since the "
            "receiver's generation), sorted: pseudorandom without the OPRF key a (one-more-DH, random oracle), "
            "so only their number (|large set|, or how many IDs were added) and, once the receiver evaluates "
            "F_a on its own IDs, which of those are in the large set",
)
@dataclass(frozen=True)
class Values:
    """One chunk of the one-time transfer (or a delta): sorted ``value_bytes``-byte values, concatenated."""

    chunk: int
    values: bytes


@declare(
    "upsi.query",
    sender=SMALL, receiver=LARGE,
    protection=Protection.BLINDED,
    reveals="b·H(y) for each of the small party's IDs under its fresh per-run scalar b: uniform in the group "
            "whatever y is (DDH), so only their number |small set|",
)
@dataclass(frozen=True)
class Query:
    """One chunk of the small party's blinded IDs (32-byte u-coordinates, in a random order)."""

    chunk: int
    points: bytes


@declare(
    "upsi.answer",
    sender=LARGE, receiver=SMALL,
    protection=Protection.BLINDED,
    reveals="a·(b·H(y)) for each query point, in the query's order: with b the small party gets F_a(y) for its "
            "own IDs (the intended OPRF output), nothing of the key a (one-more-DH)",
)
@dataclass(frozen=True)
class Answer:
    """One chunk of the large party's answers (32-byte u-coordinates, in the query order)."""

    chunk: int
    points: bytes


@dataclass(frozen=True)
class UnbalancedResult:
    """One party's output: ``rows`` (small party) its input rows of the intersection, in canonical-ID order
    of the common OPRF values' sort; ``None`` for the large party, which learns only ``peer_size``.

    ``transfer``: the small party's transfer after the run (refreshed when values arrived).
    """

    party: str
    role: str
    own_size: int
    n_rows: int
    peer_size: int
    size: int | None
    rows: np.ndarray | None
    transfer: Any = None  # a store.Transfer
    received_values: int = 0
