"""The declared messages of entity alignment (``align.*``) and a party's result."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.errors import ProtocolError
from vflcrypto.runtime.declarations import Protection, declare

__all__ = ["ACTIVE", "MAX_CHUNK", "MODES", "PASSIVE", "PROTOCOLS", "PROTOCOL_VERSION", "AlignmentResult",
           "BlindedChunk", "BucketHello", "BucketNonce", "BucketSizes", "Cardinality", "CommonValues", "DoubledChunk",
           "DoubledShuffledChunk", "GlobalOrder",
           "Hello", "Offer", "OkvsMasked", "OprfMatrix", "OprfValues", "OtChoice", "OtSetup", "TagChunk", "VoleMatrix",
           "VoleSetup", "VoleTrees"]

PROTOCOL_VERSION = 2  # 2: align.common_values holds positions, not values
ACTIVE = "active"
PASSIVE = "passive"
PROTOCOLS = ("ecdh", "hash", "kkrt", "rr22")
MODES = ("both", "left", "size", "all")
MAX_CHUNK = 1 << 20
#: roles that align as the active party: the active party, and the label-holding server of the
#: representation-VFL protocols (split, oneshot, fewshot); their feature parties align as passive
ACTIVE_ROLES = (ACTIVE, "server")
PASSIVE_ROLES = (PASSIVE, "party")
ANY_ROLE = ACTIVE_ROLES + PASSIVE_ROLES


@declare(
    "align.hello",
    sender=ANY_ROLE, receiver=ANY_ROLE,
    protection=Protection.PUBLIC,
    reveals="protocol, mode, version and the sender's set size (public by design); for "
            "keyed-hash PSI also the sender's ephemeral X25519 public key, signed by its "
            "identity key",
)
@dataclass(frozen=True)
class Hello:
    """First message of every run, both ways: a mismatch is a clear ProtocolError."""

    protocol: str
    mode: str
    version: int
    role: str
    set_size: int
    chunk_size: int
    nonce: bytes
    ephemeral_public: bytes
    signature: bytes


@declare(
    "align.blinded",
    sender=ANY_ROLE, receiver=ANY_ROLE,
    protection=(Protection.BLINDED, Protection.SHUFFLED),
    reveals="k·H(x) for each of the sender's IDs in random order: pseudorandom without the "
            "sender's secret scalar (DDH); only the number of IDs",
)
@dataclass(frozen=True)
class BlindedChunk:
    """One chunk of the sender's blinded IDs (32-byte u-coordinates, concatenated)."""

    chunk: int
    points: bytes


@declare(
    "align.doubled",
    sender=ANY_ROLE, receiver=ANY_ROLE,
    protection=Protection.BLINDED,
    reveals="the receiver's own blinded IDs re-blinded by the sender, in the receiver's "
            "sending order: with its own re-blinding of the sender's points this tells the "
            "receiver which of its rows are in the intersection, nothing about the "
            "sender's other IDs",
)
@dataclass(frozen=True)
class DoubledChunk:
    """Digests of double-blinded values of the receiver's points, in the receiver's order."""

    chunk: int
    digests: bytes


@declare(
    "align.doubled_shuffled",
    sender=PASSIVE_ROLES, receiver=ACTIVE_ROLES,
    protection=(Protection.BLINDED, Protection.SHUFFLED),
    reveals="the active party's IDs double-blinded and reshuffled: only how many of them are "
            "in the intersection (cardinality mode)",
)
@dataclass(frozen=True)
class DoubledShuffledChunk:
    """Cardinality mode: double-blinded digests of the active party's IDs, reshuffled."""

    chunk: int
    digests: bytes


@declare(
    "align.cardinality",
    sender=ACTIVE_ROLES, receiver=PASSIVE_ROLES,
    protection=Protection.PLAINTEXT,
    reveals="the intersection size (the declared output of cardinality mode)",
)
@dataclass(frozen=True)
class Cardinality:
    """Cardinality mode: the intersection size, shared with the passive party."""

    size: int


@declare(
    "align.tags",
    sender=ANY_ROLE, receiver=ANY_ROLE,
    protection=Protection.SHUFFLED,
    reveals="HMAC tags of the sender's IDs under the jointly agreed key, shuffled: the "
            "receiver holds the key, so it learns which of its IDs are common AND can test "
            "guessed IDs against the sender's other tags (dictionary attack on "
            "low-entropy IDs); the key hides the IDs from outsiders only",
)
@dataclass(frozen=True)
class TagChunk:
    """One chunk of keyed-hash tags (DIGEST_BYTES each, concatenated)."""

    chunk: int
    tags: bytes


@declare(
    "align.ot_setup",
    sender=ACTIVE_ROLES, receiver=PASSIVE_ROLES,
    protection=Protection.PUBLIC,
    reveals="KKRT parameters (code width, cuckoo bins, stash rows: all functions of the public "
            "set size and configuration) and the base-OT point A = a·G of a fresh scalar",
)
@dataclass(frozen=True)
class OtSetup:
    """KKRT, receiver → sender: the OPRF table's shape and the Chou–Orlandi point ``A``."""

    width: int
    bins: int
    stash: int
    point: bytes


@declare(
    "align.ot_choice",
    sender=PASSIVE_ROLES, receiver=ACTIVE_ROLES,
    protection=Protection.BLINDED,
    reveals="the base-OT points B_j = b_j·G + s_j·A, one per bit of the sender's secret (KKRT's "
            "code bits s; the VOLE PSI's Δ): uniform in the group whatever the secret bits s_j are "
            "(fresh b_j each), so nothing",
)
@dataclass(frozen=True)
class OtChoice:
    """KKRT and the VOLE PSI, sender → receiver: its base-OT points (32 bytes each, concatenated)."""

    points: bytes


@declare(
    "align.oprf_matrix",
    sender=ACTIVE_ROLES, receiver=PASSIVE_ROLES,
    protection=Protection.MASKED, hiding_bits=128,
    reveals="the OT-extension matrix u = PRG(k0) xor PRG(k1) xor C(x), column by column: each "
            "column is masked by an AES-CTR stream under a base-OT key the sender does not "
            "hold, so it is pseudorandom to the sender and says nothing of the receiver's "
            "items or where they sit in its cuckoo table",
)
@dataclass(frozen=True)
class OprfMatrix:
    """KKRT, receiver → sender: one chunk of table rows of ``u`` (``WIDTH`` columns, rows/8 bytes each)."""

    chunk: int
    columns: bytes


@declare(
    "align.oprf_values",
    sender=PASSIVE_ROLES, receiver=ACTIVE_ROLES,
    protection=(Protection.BLINDED, Protection.SHUFFLED),
    reveals="the OPRF values of each of the sender's IDs (KKRT: at its three cuckoo bins and the "
            "stash rows; the VOLE PSI: one per ID), in an order independent of the sender's file (KKRT: "
            "one random order; the VOLE PSI: sorted by value, a function of the values alone): those of "
            "common IDs equal the receiver's own outputs (it learns which of its rows are common); the others are "
            "pseudorandom without the sender's OPRF key (KKRT's s, the VOLE's Δ); the count "
            "reveals the sender's set size (public)",
)
@dataclass(frozen=True)
class OprfValues:
    """KKRT and the VOLE PSI, sender → receiver: one chunk of its shuffled OPRF values (``OUTPUT_BYTES`` each)."""

    chunk: int
    values: bytes


@declare(
    "align.vole_setup",
    sender=ACTIVE_ROLES, receiver=PASSIVE_ROLES,
    protection=Protection.PUBLIC,
    reveals="VOLE PSI parameters (the OKVS size m and band width: functions of the public set "
            "size and configuration) and the base-OT point A = a·G of a fresh scalar",
)
@dataclass(frozen=True)
class VoleSetup:
    """VOLE PSI, receiver → sender: the OKVS's shape (= the VOLE's length) and the Chou–Orlandi point ``A``."""

    columns: int
    band: int
    point: bytes


@declare(
    "align.vole_matrix",
    sender=ACTIVE_ROLES, receiver=PASSIVE_ROLES,
    protection=Protection.MASKED, hiding_bits=128,
    reveals="the IKNP matrix u = PRG(k0) xor PRG(k1) xor r of the receiver's correlated OTs, "
            "column by column: each column is masked by an AES-CTR stream under a base-OT key the "
            "sender does not hold, so it says nothing of the choice bits r (the silent VOLE's "
            "secret noise positions and values)",
)
@dataclass(frozen=True)
class VoleMatrix:
    """VOLE PSI, receiver → sender: the IKNP matrix (128 columns of ``M`` bits, concatenated)."""

    columns: bytes


@declare(
    "align.vole_trees",
    sender=PASSIVE_ROLES, receiver=ACTIVE_ROLES,
    protection=Protection.MASKED, hiding_bits=128,
    reveals="for each GGM tree of the silent VOLE, each level's two sums encrypted under the "
            "two keys H(q) and H(q xor Δ) of one correlated OT (the receiver holds only the key of "
            "the side off its punctured path), and one correction δ xor (sum of the leaves): the "
            "receiver learns every leaf but its punctured one, which stays masked by Δ",
)
@dataclass(frozen=True)
class VoleTrees:
    """VOLE PSI, sender → receiver: the encrypted level sums (instances × 128 × depth × 2 blocks) and corrections."""

    sums: bytes
    corrections: bytes


@declare(
    "align.okvs_masked",
    sender=ACTIVE_ROLES, receiver=PASSIVE_ROLES,
    protection=Protection.MASKED, hiding_bits=128,
    reveals="the receiver's OKVS P of its IDs masked by the VOLE's A (pseudorandom under dual "
            "LPN): uniform to the sender, which can decode nothing from it without A",
)
@dataclass(frozen=True)
class OkvsMasked:
    """VOLE PSI, receiver → sender: one chunk of ``P ⊕ A`` (16 bytes per OKVS element)."""

    chunk: int
    values: bytes


@declare(
    "align.common_values",
    sender=ACTIVE_ROLES, receiver=PASSIVE_ROLES,
    protection=Protection.PLAINTEXT,
    reveals="which of the sender's OPRF values the receiver matched, as their places in the "
            "sender's own sending order, listed in the order of the matched values: which of the "
            "sender's IDs are common (the declared output of mode both), and nothing else (the "
            "sender chose that order and holds every value)",
)
@dataclass(frozen=True)
class CommonValues:
    """KKRT and the VOLE PSI, mode both: one chunk of the matched values' places in the sender's
    sending order (little-endian uint64 each), in the order of the matched values; ``total`` in all."""

    chunk: int
    total: int
    positions: bytes


@declare(
    "align.global_order",
    sender=ACTIVE_ROLES, receiver=PASSIVE_ROLES,
    protection=Protection.PLAINTEXT,
    reveals="which of the receiver's pairwise-common rows are common to ALL parties, in the "
            "all-party order (the all-party intersection, the declared output)",
)
@dataclass(frozen=True)
class GlobalOrder:
    """3+ parties: positions into the receiver's pairwise-intersection list."""

    positions: np.ndarray


@declare(
    "align.offer",
    sender=ANY_ROLE, receiver=ANY_ROLE,
    protection=Protection.PUBLIC,
    reveals="--protocol auto, both ways before the run: the sender's set size (its file's row count when "
            "bucketed; every protocol's align.hello announces the set size too), its role and mode, and which "
            "PSI protocols its build can run (rr22 needs the C extensions); both then pick the same protocol "
            "from the two sizes",
)
@dataclass(frozen=True)
class Offer:
    """``--protocol auto``: what this party can run and how many rows it holds (the choice is :mod:`.choice`'s)."""

    version: int
    role: str
    mode: str
    rows: int
    protocols: tuple[str, ...]


@declare(
    "align.bucket_hello",
    sender=ANY_ROLE, receiver=ANY_ROLE,
    protection=Protection.PUBLIC,
    reveals="bucketed PSI (--memory-budget): the sender's proposed bucket count ceil(rows x "
            "bytes-per-ID / (budget - fixed part)) (a coarse function of its row count and budget), a SHA-256 "
            "commitment to its bucket-key nonce, and on --resume the first bucket it has not "
            "finished and the digest of its stored plan",
)
@dataclass(frozen=True)
class BucketHello:
    """Bucketed PSI, both ways: the plan's parameters, before the bucket key is drawn."""

    version: int
    role: str
    protocol: str
    mode: str
    buckets: int
    commitment: bytes
    resume: bool
    first_unfinished: int
    plan_digest: bytes


@declare(
    "align.bucket_nonce",
    sender=ANY_ROLE, receiver=ANY_ROLE,
    protection=Protection.PUBLIC,
    reveals="the sender's 32-byte nonce (secrets.token_bytes) opening its commitment: the bucket key is "
            "SHA-256 of both nonces, so neither party chooses it; the key is known to both "
            "parties (it hides nothing from them, it only spreads IDs evenly over the buckets)",
)
@dataclass(frozen=True)
class BucketNonce:
    """Bucketed PSI, both ways: the nonce committed to in ``align.bucket_hello``."""

    nonce: bytes


@declare(
    "align.bucket_sizes",
    sender=ANY_ROLE, receiver=ANY_ROLE,
    protection=Protection.PUBLIC,
    reveals="the number of the sender's distinct IDs in each bucket: a histogram of a hash "
            "keyed by a key both parties know, over the sender's set; the receiver can hash "
            "any candidate ID into its bucket, so each count bounds how many candidates of "
            "that bucket can be members (measured by the audit: a membership guess from the "
            "counts is near chance unless buckets hold few IDs); the total is the set size, "
            "public already",
)
@dataclass(frozen=True)
class BucketSizes:
    """Bucketed PSI, both ways: distinct IDs per bucket (int64, one per bucket)."""

    sizes: np.ndarray


@dataclass(frozen=True)
class AlignmentResult:
    """One party's output.

    ``rows``: the party's own input row indices of the intersection in canonical order
    (``None`` when this party does not learn it); ``size``: the intersection size
    (``None`` when not learned); ``own_size``/``peer_sizes``: set sizes after hygiene.
    """

    party: str
    role: str
    protocol: str
    mode: str
    own_size: int
    n_rows: int
    peer_sizes: dict[str, int]
    size: int | None
    rows: np.ndarray | None

    def unaligned_rows(self) -> np.ndarray:
        """This party's input rows that are not in the intersection (ascending)."""
        if self.rows is None:
            raise ProtocolError(f"{self.party} did not learn the intersection in mode {self.mode!r}")
        mask = np.ones(self.n_rows, dtype=bool)
        mask[self.rows] = False
        return np.nonzero(mask)[0].astype(np.int64)
