"""A tree's encrypted gradients in parts: the split, the lazy encryption, and joining what a party received.

The active party sends ``secureboost.gradients`` in parts of :data:`GRADIENT_PART_ROWS` consecutive
sampled rows and encrypts a part only when the runtime asks for its send, i.e. once the part before
has been handed to the links: on a slow link the encryption of one part overlaps the transfer of the
one before (measured in bench/secureboost_processes.py, ``--part-rows``). The split is a public
function of the sample's size, so it reveals nothing beyond the row count the message already carries.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from vflcrypto.he.encoding import PackingSpec
from vflcrypto.runtime.steps import send

from .messages import EncryptedGradients

__all__ = ["GRADIENT_PART_ROWS", "encrypted_parts", "gradient_parts", "gradients_by_tree"]

#: rows of encrypted gradients per message: about 1 MiB of OU-2048 ciphertexts (2 MiB of Paillier-2048), which
#: the active party encrypts in a fraction of a second, so the first part is on the link almost at once
GRADIENT_PART_ROWS = 4096


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
