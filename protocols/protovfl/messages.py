"""The declared messages of prototype VFL (``protovfl.*``).

Alignment (``protovfl.psi_*``, :mod:`.align`) and training; in the secure mode the
unaligned statistics travel as one ``secagg.*`` round per training round instead of
``protovfl.stats``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.runtime.declarations import Protection, declare

from .._repvfl import PARTY, SERVER

__all__ = ["PARTY", "SERVER", "Embedding", "GlobalModel", "PsiAdvert", "PsiAlignedIds", "PsiLabelled", "PsiSetup",
           "PsiTable", "PsiWrappedKey", "PsiWrappedKeys", "PsiZeroCells", "Setup", "Stats", "TestEmbedding"]


# --------------------------------------------------------------------------- alignment


@declare("protovfl.psi_advert", sender=PARTY, receiver=SERVER, protection=Protection.PUBLIC,
         reveals="the party's ephemeral X25519 public key and the size of its ID set |I(m)|")
@dataclass(frozen=True)
class PsiAdvert:
    public_key: bytes
    size: int


@declare("protovfl.psi_setup", sender=SERVER, receiver=PARTY, protection=Protection.PUBLIC,
         reveals="every party's public key in party order and the table shape (from the largest set size)")
@dataclass(frozen=True)
class PsiSetup:
    parties: tuple[str, ...]
    public_keys: tuple[bytes, ...]
    max_size: int
    miss_bits: int


@declare("protovfl.psi_wrapped_keys", sender=PARTY, receiver=SERVER, protection=Protection.CIPHERTEXT,
         key_owner=PARTY,
         reveals="party-0's fresh table key k, AES-256-GCM-wrapped for each other party under their X25519 "
                 "agreement: nothing to the server, which relays them (its reading of them measured)")
@dataclass(frozen=True)
class PsiWrappedKeys:
    wrapped: tuple[bytes, ...]


@declare("protovfl.psi_wrapped_key", sender=SERVER, receiver=PARTY, protection=Protection.CIPHERTEXT,
         key_owner=PARTY, reveals="the relayed wrapped table key of this party")
@dataclass(frozen=True)
class PsiWrappedKey:
    wrapped: bytes


@declare("protovfl.psi_table", sender=PARTY, receiver=SERVER, protection=Protection.MASKED, hiding_bits=33,
         reveals="the party's masked hash tables over F_p (p = 2^31 - 1): every cell uniform to the server alone "
                 "(a zero-sharing from pairwise seeds, coefficients it lacks, uniform filler); only the sum over "
                 "all parties is zero, and only where every party placed the same ID (uniformity measured)")
@dataclass(frozen=True)
class PsiTable:
    values: np.ndarray


@declare("protovfl.psi_zero_cells", sender=SERVER, receiver=PARTY, protection=Protection.PUBLIC,
         reveals="the positions of the zero cells of the summed tables: each party reads off A = the IDs on every "
                 "party, and nothing about pairwise intersections (a row on two parties sums to a uniform value, "
                 "like a row on one); the server learns their count (|A| times the tables that caught each row)")
@dataclass(frozen=True)
class PsiZeroCells:
    cells: np.ndarray


@declare("protovfl.psi_aligned_ids", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="party-0 → server: the IDs of A in canonical order, which the server needs to attach its labels "
                 "(the seed's server holds the labels of A): the server learns A, including any ID of A it has no "
                 "label for")
@dataclass(frozen=True)
class PsiAlignedIds:
    ids: tuple[str, ...]


@declare("protovfl.psi_labelled", sender=SERVER, receiver=PARTY, protection=Protection.PUBLIC,
         reveals="which rows of A the server holds labels for (the rows that train and test); the others drop out")
@dataclass(frozen=True)
class PsiLabelled:
    labelled: np.ndarray


# --------------------------------------------------------------------------- training


@declare("protovfl.setup", sender=SERVER, receiver=PARTY, protection=Protection.PUBLIC,
         reveals="the numbers of aligned training and test rows, the class count K, the widths d and w, the "
                 "rounds, the mode (secure or plaintext statistics) and the public training parameters")
@dataclass(frozen=True)
class Setup:
    n_aligned: int
    n_test: int
    n_classes: int
    dim: int
    width: int
    rounds: int
    secure: bool
    alpha: float
    beta: float
    tau: float
    seed: int


@declare("protovfl.embedding", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="h_i^(m) = E_m(x_i^(m)) of every aligned training row, every round, in the clear: the server's "
                 "gate and adapters need them (linear-probe R^2 of the party's raw columns measured)")
@dataclass(frozen=True)
class Embedding:
    round: int
    H: np.ndarray


@declare("protovfl.global_model", sender=SERVER, receiver=PARTY, protection=Protection.PLAINTEXT,
         reveals="μ^g (class-conditional means in the fused space), π^g (the class proportions of the aligned "
                 "labels mixed with the unaligned soft counts) and the party's own adapter A_m: with them the "
                 "party labels its aligned rows by nearest prototype (accuracy against the base rate measured), so "
                 "labels do go down in effect; the proportions are measured against the true ones")
@dataclass(frozen=True)
class GlobalModel:
    round: int
    prototypes: np.ndarray
    prior: np.ndarray
    adapter_w: np.ndarray
    adapter_b: np.ndarray


@declare("protovfl.stats", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="plaintext mode: the party's fixed-point soft class counts Σ_j q_jk and sums Σ_j q_jk f_j over "
                 "its unaligned rows in the clear: its class mix and unaligned row count (the secure mode sends "
                 "the same vector through secagg, so the server sees only the sum over parties)")
@dataclass(frozen=True)
class Stats:
    round: int
    y: np.ndarray


@declare("protovfl.test_embedding", sender=PARTY, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="E_m of the held-out aligned rows (prediction), in the clear")
@dataclass(frozen=True)
class TestEmbedding:
    H: np.ndarray
