"""All-party-only intersection with a non-colluding aggregator: every party learns A = ∩_m I(m), and nothing else.

The building block of the prototype VFL's alignment (seed 002). The existing multi-party
ECDH mode reveals pairwise intersections to the active party. Here each set holder
sends the aggregator S one masked table and learns only A.

**Tables.** The parties share a key k that S does not know. Each party places every ID x
in ``tables`` hash tables of ``cells`` cells, at pos_j(x) = PRF_k(j, x) mod cells. When
two own IDs collide in a cell, the one with the smaller PRF_k("pick", x) is kept, the
same choice at every party. For each table j, cell c and repetition r, party m sends:

    v_m = z_m + ρ_m · H_r(x)   if it placed an ID x in c, else   v_m = z_m + u   (u fresh, uniform)

Everything is computed in the prime field F_p, p = 2^31 − 1:

* H_r(x) = PRF_k(r, x) mod p;
* the coefficients ρ_m = PRG_k(m, j, r)[c] for m < n − 1, and ρ_{n−1} = −Σ_{m<n−1} ρ_m,
  so Σ_m ρ_m = 0 (known to the parties, not to S);
* z_m = Σ_{m'>m} PRG(s_{mm'})[c] − Σ_{m'<m} PRG(s_{mm'})[c], a zero-sharing from
  pairwise seeds (Σ_m z_m = 0).

S adds the n tables:

    Σ_m v_m = Σ_m ρ_m H_r(x_m) + (the u of the parties that left c empty)

* If every party placed the same x, this is H_r(x) · Σ ρ_m = 0.
* If any party left c empty, the sum is uniform.
* If the parties placed different IDs, the sum is uniform as well: ρ is uniform on
  the hyperplane Σ ρ = 0 and the vector of H values is not constant, so their inner
  product is uniform.

So for a row on C1 and C2 but not on C3, S sees a uniform value, exactly as for a row
on one party. S returns the positions of the zero cells (both repetitions zero). Each
party reads off which of its own IDs sit there: that is A, nothing more.

**What each side learns.**
* S learns every set size (it sizes the tables), the number of zero cells (|A| times
  the tables in which each row of A was detected) and their positions, which are
  pseudorandom under k.
* A party learns A; its own ID's cell is zero only if every party placed that same ID.

Errors:
* a false zero per cell has probability p^-reps ≈ 2^-62;
* a row of A is missed if it loses a collision at some party in every table; the
  table count is chosen for a miss probability ≤ 2^-``miss_bits`` per row.

The masks are uniform mod p up to a bias of about 2^-33 (64-bit draws reduced mod p).

**What each mask is for.** The filler u: without it a cell every party left empty sums to
Σ_m z_m = 0, so the zero cells also mark the cells no party filled (S counts far more than
|A| per table and estimates |∪_m I(m)|; a party sees zero cells where it placed nothing,
i.e. where no other party holds an ID). The coefficients ρ: unknown to S, they make each
v_m uniform to S alone. The zero-sharing z: it is what protects a party against S
*colluding with another party* (below); against S alone ρ and u suffice.

**Threat model.** Semi-honest parties and a semi-honest S that does not collude with a
party. Collusion of S with one party c, worked out (the audit of prototype VFL measures
both lines):

* c holds k, hence ρ_m of every party, H_r and pos_j, and its seeds s_{cm}; S holds every
  table. For another party m the coalition removes the one term of z_m it knows,
  ±PRG(s_{cm}), and compares, for a guessed ID x, w = v_m ∓ PRG(s_{cm}) at pos_j(x) with
  ρ_m · H_r(x). What remains of z_m, Σ_{m'∉{c,m}} ±PRG(s_{mm'}), is uniform to the
  coalition as soon as there are three parties: a single party's table reveals nothing.
  Without the zero-sharing w = ρ_m H_r(x) wherever m placed x, and the coalition reads
  off m's set for every guess. With two parties the coalition knows z_m entirely: the
  zero-sharing protects nothing against it.
* What no mask hides: the honest parties' tables sum to Σ_{m≠c} v_m = −z_c +
  Σ_{m≠c} ρ_m H_r(x_m) (+ the u of the empty cells), and where every one of them placed
  the same x this is −z_c − ρ_c H_r(x), which the coalition computes for a guess. So S with
  c tests whether a guessed ID is on *all the other* parties: the intersection of their
  sets, more than A for an ID outside I(c). Declared; the protocol does not defend it.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..errors import InputDataError, ProtocolError
from .primitives import canonical_id

__all__ = ["FIELD", "KEY_BYTES", "REPS", "MPSIParams", "Placement", "coefficients", "combine", "decode", "encode",
           "encodings", "pair_term", "plan", "positions", "uniform_field"]

FIELD = (1 << 31) - 1  # p: products of two elements fit in a uint64
REPS = 2  # independent repetitions per cell: a false zero has probability p^-2 ≈ 2^-62
KEY_BYTES = 32
_DOMAIN = b"vflcrypto/mpsi/v1"


@dataclass(frozen=True)
class MPSIParams:
    """The public table shape every party and S agree on (from the party count and the largest set)."""

    parties: int
    max_size: int
    tables: int
    cells: int
    miss_bits: int = 40

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.tables, self.cells, REPS)


def plan(parties: int, max_size: int, *, miss_bits: int = 40) -> MPSIParams:
    """Tables and cells for a miss probability <= 2^-miss_bits per row of A (the cheapest load factor).

    A party loses x in one table when another of its IDs lands in x's cell and is picked,
    probability <= (N − 1)/(2·cells); a union bound over the parties gives
    q = parties·N/(2·cells) per table, and the row is missed with q^tables.
    """
    if not 2 <= parties <= 63 or max_size < 0 or not 1 <= miss_bits <= 128:
        raise InputDataError("need 2..63 parties, a non-negative set size and 1 <= miss_bits <= 128")
    n = max(max_size, 1)
    best: tuple[int, int, int] | None = None
    for load in (2, 3, 4, 6, 8, 12, 16, 24, 32):  # cells per ID and party
        q = parties / (2.0 * load)
        if q >= 1:
            continue
        tables = max(1, math.ceil(miss_bits / -math.log2(q)))
        cost = tables * load
        if best is None or cost < best[0]:
            best = (cost, tables, load * n)
    assert best is not None  # load 32 always works for parties <= 63
    _, tables, cells = best
    return MPSIParams(parties, max_size, tables, max(cells, 1), miss_bits)


def _prf(key: bytes, label: bytes, ids: Sequence[bytes]) -> np.ndarray:
    """8 bytes of keyed BLAKE2b per ID as uint64 (label separates the uses)."""
    out = np.empty(len(ids), np.uint64)
    for i, x in enumerate(ids):
        d = hashlib.blake2b(x, key=key, digest_size=8, person=label[:16].ljust(16, b"\0")).digest()
        out[i] = int.from_bytes(d, "little")
    return out


def _stream(seed: bytes, purpose: bytes, n: int) -> np.ndarray:
    """n field elements from a 32-byte seed: AES-256-CTR, 64-bit draws reduced mod p."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_DOMAIN + purpose).derive(seed)
    enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    raw = enc.update(bytes(8 * n)) + enc.finalize()
    return np.frombuffer(raw, "<u8") % np.uint64(FIELD)


def uniform_field(n: int) -> np.ndarray:
    """n fresh uniform field elements from the OS CSPRNG (the filler of empty cells)."""
    return _stream(secrets.token_bytes(32), b"fill", n)


def _rho(key: bytes, me: int, params: MPSIParams) -> np.ndarray:
    """ρ_me over every cell: its own stream, or minus the others' for the last party (Σ_m ρ_m = 0)."""
    size = params.tables * params.cells * REPS
    if me < params.parties - 1:
        return _stream(key, b"rho" + me.to_bytes(2, "big"), size)
    total = np.zeros(size, np.uint64)
    for m in range(params.parties - 1):
        total = (total + _stream(key, b"rho" + m.to_bytes(2, "big"), size)) % np.uint64(FIELD)
    return (np.uint64(FIELD) - total) % np.uint64(FIELD)


def coefficients(key: bytes, me: int, params: MPSIParams) -> np.ndarray:
    """ρ_me over every cell (shape ``params.shape``): what every holder of k can compute for any party."""
    return _rho(key, me, params).reshape(params.shape)


def encodings(ids: Sequence[Any], key: bytes) -> np.ndarray:
    """H_r(x) = PRF_k(r, x) mod p of each ID (IDs × REPS): the value an ID contributes, times ρ, to its cells."""
    canon = [canonical_id(i) for i in ids]
    if not canon:
        return np.zeros((0, REPS), np.uint64)
    return np.stack([_prf(key, b"h" + bytes([r]), canon) % np.uint64(FIELD) for r in range(REPS)], axis=1)


def pair_term(me: int, other: int, seed: bytes, params: MPSIParams) -> np.ndarray:
    """The term of z_me from the seed party ``me`` shares with ``other``: +PRG(s) if other > me, else −PRG(s).

    Both parties of the pair can compute it (shape ``params.shape``, field elements).
    """
    if not isinstance(seed, bytes) or len(seed) != KEY_BYTES:
        raise InputDataError("pairwise seeds are 32 bytes")
    if me == other:
        raise InputDataError("a pairwise seed joins two different parties")
    s = _stream(seed, b"zero", params.tables * params.cells * REPS)
    p = np.uint64(FIELD)
    return (s if other > me else (p - s) % p).reshape(params.shape)


def _zero_share(me: int, pair_seeds: Mapping[int, bytes], params: MPSIParams) -> np.ndarray:
    """z_me = Σ_{m'>me} PRG(s) − Σ_{m'<me} PRG(s) mod p (pairwise seeds with every other party)."""
    size = params.tables * params.cells * REPS
    if set(pair_seeds) != set(range(params.parties)) - {me}:
        raise InputDataError(f"party {me} needs one pairwise seed with each of the other {params.parties - 1}")
    z = np.zeros(size, np.uint64)
    p = np.uint64(FIELD)
    for other, seed in sorted(pair_seeds.items()):
        z = (z + pair_term(me, other, seed, params).ravel()) % p
    return z


@dataclass(frozen=True)
class Placement:
    """Where a party put its IDs: for each table, cell → the row of the ID kept there."""

    rows: tuple[dict[int, int], ...]


def _canonical(ids: Sequence[Any]) -> list[bytes]:
    canon = [canonical_id(i) for i in ids]
    if len(set(canon)) != len(canon):
        raise InputDataError("duplicate IDs: every ID must appear once in a party's set")
    return canon


def encode(ids: Sequence[Any], me: int, params: MPSIParams, key: bytes,
           pair_seeds: Mapping[int, bytes]) -> tuple[np.ndarray, Placement]:
    """Party ``me``'s masked tables (shape ``params.shape``, field elements) and where its IDs went."""
    if not isinstance(key, bytes) or len(key) != KEY_BYTES:
        raise InputDataError("the parties' shared key is 32 bytes")
    if not 0 <= me < params.parties:
        raise InputDataError(f"party index {me} outside 0..{params.parties - 1}")
    canon = _canonical(ids)
    if len(canon) > params.max_size:
        raise InputDataError(f"{len(canon)} IDs exceed the agreed maximum {params.max_size}")
    p = np.uint64(FIELD)
    T, C = params.tables, params.cells
    values = uniform_field(T * C * REPS).reshape(T, C, REPS)  # empty cells: uniform
    pick = _prf(key, b"pick", canon)
    h = np.stack([_prf(key, b"h" + bytes([r]), canon) % p for r in range(REPS)], axis=1)  # N x REPS
    rho = _rho(key, me, params).reshape(T, C, REPS)
    placement = []
    for j in range(T):
        pos = (_prf(key, b"pos" + j.to_bytes(2, "big"), canon) % np.uint64(C)).astype(np.int64)
        order = np.lexsort((pick, pos))  # by cell, then by the pick value: the first of each cell wins
        first = np.ones(len(order), bool)
        first[1:] = pos[order][1:] != pos[order][:-1]
        kept = order[first]
        cells = pos[kept]
        values[j, cells] = (rho[j, cells] * h[kept]) % p  # < p^2 < 2^62: no overflow
        placement.append(dict(zip(cells.tolist(), kept.tolist(), strict=True)))
    z = _zero_share(me, pair_seeds, params).reshape(T, C, REPS)
    return (values + z) % p, Placement(tuple(placement))


def positions(ids: Sequence[Any], key: bytes, params: MPSIParams) -> np.ndarray:
    """pos_j(x) of every ID in every table (tables × IDs): where a holder of ``key`` places each ID."""
    canon = [canonical_id(i) for i in ids]
    return np.stack([(_prf(key, b"pos" + j.to_bytes(2, "big"), canon) % np.uint64(params.cells)).astype(np.int64)
                     for j in range(params.tables)]) if canon else np.zeros((params.tables, 0), np.int64)


def combine(tables: Sequence[Any], params: MPSIParams) -> np.ndarray:
    """S's step: the sum of every party's table; the flat positions (table · cells + cell) of the zero cells."""
    if len(tables) != params.parties:
        raise ProtocolError(f"{len(tables)} tables for {params.parties} parties")
    total = np.zeros(params.shape, np.uint64)
    for m, t in enumerate(tables):
        a = np.asarray(t)
        if a.shape != params.shape or a.dtype != np.uint64:
            raise ProtocolError(f"party {m} sent a table of shape {a.shape} ({a.dtype}), expected {params.shape}")
        if (a >= FIELD).any():
            raise ProtocolError(f"party {m} sent values outside the field")
        total = (total + a) % np.uint64(FIELD)
    zero = (total == 0).all(axis=2)
    return np.flatnonzero(zero.ravel()).astype(np.int64)


def decode(placement: Placement, zero_cells: Any, params: MPSIParams) -> np.ndarray:
    """The rows of this party's IDs that are in A (sorted): those kept in a zero cell of some table."""
    flat = np.asarray(zero_cells, np.int64)
    if flat.ndim != 1 or (flat.size and (flat.min() < 0 or flat.max() >= params.tables * params.cells)):
        raise ProtocolError("zero-cell positions outside the tables")
    rows: set[int] = set()
    for f in flat.tolist():
        row = placement.rows[f // params.cells].get(f % params.cells)
        if row is not None:
            rows.add(row)
    return np.asarray(sorted(rows), np.int64)
