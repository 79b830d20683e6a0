"""Compression for decryption: several small plaintexts folded into each ciphertext.

Holds :class:`CompressedVector`, :func:`fold_ciphertexts` (the Horner fold, run in the
pool by :func:`.kernels._w_fold`) and :func:`compress`. The key holder decrypts a
compressed vector with :meth:`~vflcrypto.he.paillier.PaillierPrivateKey.decompress_decrypt`;
the keys sit above this module, which names its key through
:class:`.vector.PublicKeyLike`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from gmpy2 import mpz

from ... import parallel
from ...errors import EncodingError, EncodingOverflowError
from ..encoding import PackingSpec
from .blocks import ciphertexts_from_bytes, ciphertexts_to_bytes
from .kernels import _w_fold
from .vector import CipherVector, PublicKeyLike, _group_cost

__all__ = ["CompressedVector", "compress", "fold_ciphertexts"]


class CompressedVector:
    """Several small non-negative plaintexts folded into each ciphertext for decryption.

    Built by :func:`compress`; decrypted by
    :meth:`PaillierPrivateKey.decompress_decrypt` (/``_fixed``), which returns exactly
    what decrypting the original vector would.
    """

    __slots__ = ("_c", "_pk", "count", "frac_bits", "offset", "packing", "per_ciphertext",
                 "size", "slots", "terms", "value_bits")

    def __init__(self, pk: PublicKeyLike, cts: list[mpz], *, value_bits: int,
                 per_ciphertext: int, count: int, offset: int, frac_bits: int,
                 packing: PackingSpec | None, slots: int, terms: int, size: int | None) -> None:
        self._pk, self._c = pk, cts
        self.value_bits, self.per_ciphertext, self.count, self.offset = (
            value_bits, per_ciphertext, count, offset)
        self.frac_bits, self.packing, self.slots, self.terms, self.size = (
            frac_bits, packing, slots, terms, size)

    @property
    def public_key(self) -> PublicKeyLike:
        return self._pk

    def __len__(self) -> int:
        return len(self._c)

    def __repr__(self) -> str:
        return (f"CompressedVector({self.count} values in {len(self)} ciphertexts, "
                f"{self.value_bits} bits each, key={self._pk.fingerprint})")

    def source_meta(self) -> CompressedVector:
        return self  # carries frac_bits/packing/slots/terms/size of the source vector



def fold_ciphertexts(pk: PublicKeyLike, cts: Sequence[Any], bits: int) -> tuple[list[mpz], int]:
    """Fold ``per = plaintext_bits // bits`` ciphertexts of non-negative ``bits``-bit plaintexts into one.

    Horner over each group: ciphertext ``i`` of a group lands at plaintext bits
    ``[i*bits, (i+1)*bits)``. Runs in the process pool for large inputs. Returns the
    folded ciphertexts and ``per``. The folded ciphertexts carry the product of the
    inputs' randomness: re-randomize before sending them to the key holder.
    """
    per = pk.plaintext_bits // bits
    if per < 1:
        raise EncodingOverflowError("values too wide to fold under this key")
    w = pk.ciphertext_bytes
    groups = -(-len(cts) // per)
    n_chunks = min(groups, max(1, parallel.worker_count()) * 2)
    bounds = [min(len(cts), round(i * groups / n_chunks) * per) for i in range(n_chunks + 1)] if groups else []
    chunks = [(int(pk.cmod), w, ciphertexts_to_bytes(cts[a:b], w), bits, per)
              for a, b in itertools.pairwise(bounds) if b > a]
    cost = int(len(cts) * bits * _group_cost(pk))
    out: list[mpz] = []
    for part in parallel.parallel_map(_w_fold, chunks, cost=cost):
        out.extend(ciphertexts_from_bytes(part, w))
    return out, per


def compress(vec: CipherVector, bound_bits: int | None = None) -> CompressedVector:
    """Fold ciphertexts so the key holder decrypts ``~(bits-1)/b`` times fewer of them.

    Horner: ``acc = acc**(2**b) * c`` over the ciphertexts (last first), so ciphertext
    ``i`` lands at bits ``[i*b, (i+1)*b)`` of the folded plaintext. For a packed vector
    ``b = slots * slot_bits`` (its plaintexts are non-negative by construction). For an
    unpacked vector of signed values with ``|v| < 2**(bound_bits - 1)`` the public side
    first adds ``2**(bound_bits - 1)`` homomorphically and uses ``b = bound_bits + 1``
    (one guard bit to detect values beyond the bound).
    """
    pk = vec.public_key
    nsq = pk.cmod
    if vec.packing is not None:
        b = vec.slots * vec.packing.slot_bits
        offset = 0
        cts = vec._c
    else:
        if bound_bits is None or bound_bits < 1:
            raise EncodingError("compressing an unpacked vector needs bound_bits")
        b = bound_bits + 1
        offset = 1 << (bound_bits - 1)
        g = pk._gpow([offset])[0]
        cts = [c * g % nsq for c in vec._c]
    out, per = fold_ciphertexts(pk, cts, b)
    return CompressedVector(pk, out, value_bits=b, per_ciphertext=per, count=len(cts),
                            offset=offset, frac_bits=vec.frac_bits, packing=vec.packing,
                            slots=vec.slots, terms=vec.terms, size=vec.size)
