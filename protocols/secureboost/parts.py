"""A tree's encrypted gradients in parts: the split, the lazy encryption, and joining what a party received.

The active party sends ``secureboost.gradients`` in parts of :data:`GRADIENT_PART_ROWS` consecutive
sampled rows and encrypts a part only when the runtime asks for its send, i.e. once the part before
has been handed to the links: on a slow link the encryption of one part overlaps the transfer of the
one before (measured in bench/secureboost_processes.py, ``--part-rows``). The split is a public
function of the sample's size, so it reveals nothing beyond the row count the message already carries.

The passive party sums each part into the root's encrypted bin sums as it arrives
(:func:`add_root_part`): every sampled row is at the root, so the first level's histograms are known
before its request comes, and the product of the parts' sums is the same ciphertext the one-shot sum
gives (multiplication modulo the ciphertext modulus does not depend on grouping).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from vflcrypto.he.encoding import PackingSpec
from vflcrypto.he.paillier import ciphertexts_from_bytes, ciphertexts_to_bytes
from vflcrypto.he.schemes import PublicKey
from vflcrypto.runtime.steps import send

from .kernels import encrypted_bin_sums
from .messages import EncryptedGradients

__all__ = ["GRADIENT_PART_ROWS", "LOCAL_PART_ROWS", "add_root_part", "encrypted_parts", "gradient_parts",
           "gradients_by_tree"]

#: rows of encrypted gradients per message: about 1 MiB of OU-2048 ciphertexts (2 MiB of Paillier-2048), which
#: the active party encrypts in a fraction of a second, so the first part is on the link almost at once
GRADIENT_PART_ROWS = 4096
#: rows a part when every party runs in one process (:func:`.local.run_local`): no link to keep busy, only the
#: root's sums to overlap with the encryption, and each part costs a round of the process pool. Measured
#: (default_credit, 10 trees, ou-heu, 2 workers, two runs each): 4,096 rows 10.20 / 9.79 s, 8,192 rows 8.44 s,
#: 16,384 rows 8.69 / 8.17 s, one message 8.75 s
LOCAL_PART_ROWS = 16384


def gradient_parts(rows: int, per: int) -> list[tuple[int, int]]:
    """The ``(start, stop)`` of each part of ``rows`` sampled rows at ``per`` rows a part (0: one part)."""
    if per <= 0 or rows <= per:
        return [(0, rows)]
    return [(lo, min(lo + per, rows)) for lo in range(0, rows, per)]


def encrypted_parts(tree: int, sample_bits: np.ndarray, gh: np.ndarray, spec: PackingSpec, encryptor: Any,
                    per: int, peers: Sequence[str], busy: Callable[[], contextlib.AbstractContextManager[None]],
                    spent: Callable[[float], object]) -> Iterator[tuple[str, Any]]:
    """The sends of one tree's gradients (``gh``: its sampled rows' (g, h), packed per ``spec``) to every peer,
    part by part: a generator, so each part is encrypted only when the runtime takes its sends.

    ``busy()`` is held while a part is encrypted (the obfuscator producer pauses); ``spent(t0)`` is told
    when each encryption began (the party's timer)."""
    bounds = gradient_parts(len(gh), per)
    for p, (lo, hi) in enumerate(bounds):
        t0 = time.perf_counter()
        with busy():
            part = encryptor.encrypt_packed(gh[lo:hi], spec)
        spent(t0)
        msg = EncryptedGradients(tree, sample_bits if p == 0 else np.zeros(0, np.uint8), part, p, len(bounds))
        for q in peers:
            yield send(q, msg)


def gradients_by_tree(received: Sequence[EncryptedGradients]) -> list[EncryptedGradients]:
    """The ``secureboost.gradients`` a party received, one per tree: each tree's parts joined in order
    (the sample of its first part, every sampled row's ciphertext), as a one-part message."""
    trees: list[list[EncryptedGradients]] = []
    for m in received:
        if m.part == 0 or not trees:
            trees.append([m])
        else:
            trees[-1].append(m)
    joined = []
    for ms in trees:
        concat: Any = type(ms[0].gh).concat
        joined.append(ms[0] if len(ms) == 1 else EncryptedGradients(ms[0].tree, ms[0].sample,
                                                                     concat([m.gh for m in ms])))
    return joined


def add_root_part(pk: PublicKey, root: bytes, part: bytes, bins: np.ndarray, width: int) -> bytes:
    """The root's encrypted bin sums (feature-major, ``width`` bins a feature, fixed-width bytes) with one more
    part of the sampled rows added: ``part`` their ciphertexts, ``bins`` their bins (rows × features)."""
    w, m = pk.ciphertext_bytes, pk.cmod
    features = bins.shape[1]
    keys = np.arange(features, dtype=np.int64)[None, :] * width + bins
    sums = encrypted_bin_sums(pk, part, keys, features * width)
    if root:
        sums = [x if y == 1 else (y if x == 1 else x * y % m)
                for x, y in zip(ciphertexts_from_bytes(root, w), sums, strict=True)]
    return ciphertexts_to_bytes(sums, w)
