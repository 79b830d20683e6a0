"""The plaintext side of encryption, shared by every additively homomorphic scheme here.

Integers and reals become the scheme's plaintexts before a raw encryptor turns them into
ciphertexts: :func:`as_int_array` (what ``encrypt`` accepts), :func:`encrypt_fixed` and
:func:`encrypt_packed` (fixed-point values, one per ciphertext or packed into slots).
A scheme supplies its raw encryptor (plaintexts to ciphertexts, plus the serialized block
when the pool made one), its encoding of signed integers (Paillier: residues modulo
``n``; Okamoto–Uchiyama: the signed integers themselves) and its vector class. Packed
plaintexts are non-negative and below ``2**plaintext_bits``, valid under both.
:class:`Encrypting` gives every key class the same ``encrypt*`` methods over that, and
:func:`pooled_encrypt` / :func:`pooled_decrypt` the same choice between the process pool and this process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
from gmpy2 import mpz

from ... import parallel
from ...errors import EncodingError, EncodingOverflowError
from ..encoding import DEFAULT_FRAC_BITS, PackingSpec, pack, to_fixed_ints
from .blocks import _CHUNKS_PER_WORKER, ciphertexts_from_bytes, ciphertexts_to_bytes
from .vector import CipherVector, PublicKeyLike

__all__ = ["Encrypting", "RawEncrypt", "as_int_array", "encrypt_fixed", "encrypt_packed", "pooled_decrypt",
           "pooled_encrypt"]

V = TypeVar("V", bound=CipherVector)
RawEncrypt = Callable[[Sequence[int]], tuple[list[mpz], bytes | None]]


def as_int_array(values: Sequence[int] | np.ndarray) -> np.ndarray:
    """``values`` as a flat integer array; floats are refused (they need a fixed-point scale)."""
    arr = np.asarray(values) if not isinstance(values, np.ndarray) else values
    if arr.dtype.kind == "f":
        raise EncodingError("encrypt() takes integers; use encrypt_fixed() for floats")
    if arr.dtype.kind not in "iuOb":
        raise EncodingError(f"cannot encrypt dtype {arr.dtype}")
    return arr.ravel()


def encrypt_fixed(cls: type[V], pk: PublicKeyLike, raw: RawEncrypt, encode: Callable[[np.ndarray], list[int]],
                  x: Any, frac_bits: int | None, packing: PackingSpec | None) -> V:
    """Reals as fixed-point with ``frac_bits`` fractional bits (default 32), or packed per ``packing``."""
    if packing is not None:
        if frac_bits is not None and frac_bits != packing.frac_bits:
            raise EncodingError("frac_bits differs from the packing's frac_bits")
        return encrypt_packed(cls, pk, raw, np.asarray(x).ravel(), packing)
    fb = DEFAULT_FRAC_BITS if frac_bits is None else frac_bits
    cts, blob = raw(encode(to_fixed_ints(np.asarray(x).ravel(), fb)))
    return cls._make(pk, cts, frac_bits=fb, blob=blob)


def encrypt_packed(cls: type[V], pk: PublicKeyLike, raw: RawEncrypt, x: Any, spec: PackingSpec) -> V:
    """One ciphertext per row of ``x`` (records, slots); a 1-D ``x`` is packed densely."""
    arr = np.asarray(x)
    size = None
    if arr.ndim == 1:
        size = arr.shape[0]
        per = spec.slots_in(pk.plaintext_bits)
        if per < 1:
            raise EncodingOverflowError("packing slot wider than the key's plaintext space")
        rows = -(-size // per)
        padded = np.zeros(rows * per, dtype=np.float64 if arr.dtype.kind == "f" else arr.dtype)
        padded[:size] = arr
        arr = padded.reshape(rows, per)
    elif arr.ndim != 2:
        raise EncodingError("encrypt_packed expects a 1-D or 2-D array")
    cts, blob = raw(pack(arr, spec, 1 << pk.plaintext_bits))
    return cls._make(pk, cts, blob=blob, frac_bits=spec.frac_bits, packing=spec,
                     slots=arr.shape[1], terms=1, size=size)


def pooled_encrypt(ms: Sequence[int], cost: int, worker: Callable[..., bytes], args: tuple[Any, ...], width: int,
                   local: Callable[[Sequence[int]], list[mpz]], *,
                   secret: bool = False) -> tuple[list[mpz], bytes | None]:
    """Encrypt ``ms`` in the process pool when it pays (``worker(*args, chunk)`` per chunk, serialized
    ciphertexts of ``width`` bytes back), else in this process with ``local``; returns the ciphertexts
    and, from the pool, their serialized block. ``secret``: ``args`` hold the private key (the key
    holder's CRT encryption), which never goes to a Ray cluster without TLS."""
    count = len(ms)
    workers = parallel.worker_count(secret=secret)
    if count > 1 and cost >= parallel.PARALLEL_MIN_COST and workers > 1:
        ranges = parallel.chunk_ranges(count, workers * _CHUNKS_PER_WORKER)
        chunks = [(*args, tuple(int(m) for m in ms[a:b])) for a, b in ranges]
        blob = b"".join(parallel.parallel_map(worker, chunks, cost=cost, secret=secret))
        return ciphertexts_from_bytes(blob, width), blob
    return local(ms), None


def pooled_decrypt(cts: Sequence[mpz], cost: int, worker: Callable[..., tuple[int, ...]], args: tuple[Any, ...],
                   width: int, local: Callable[[Sequence[mpz]], list[int]]) -> list[int]:
    """Decrypt ``cts`` in the process pool when it pays (``worker(*args, serialized chunk)`` per chunk),
    else in this process with ``local``: raw plaintexts in order. ``args`` hold the private key: private-key
    work, never sent to a Ray cluster without TLS (:func:`vflcrypto.parallel.on_ray`)."""
    count = len(cts)
    workers = parallel.worker_count(secret=True)
    if count > 1 and cost >= parallel.PARALLEL_MIN_COST and workers > 1:
        ranges = parallel.chunk_ranges(count, workers * _CHUNKS_PER_WORKER)
        chunks = [(*args, ciphertexts_to_bytes(cts[a:b], width)) for a, b in ranges]
        return [v for part in parallel.parallel_map(worker, chunks, cost=cost, secret=True) for v in part]
    return local(cts)


class Encrypting(Generic[V]):
    """The encryption API of a key, public or the key holder's, over its raw encryptor.

    A key class names its vector class (:meth:`_vector_type`), the public key that encodes
    plaintexts (:meth:`_public`: itself, or a private key's public key) and its raw encryptor
    (``_raw_encrypt_blob``: DJN, CRT, OU...); the methods below are the same for every scheme.
    """

    def _vector_type(self) -> type[V]:
        raise NotImplementedError

    def _public(self) -> Any:
        raise NotImplementedError

    def _raw_encrypt_blob(self, ms: Sequence[int]) -> tuple[list[mpz], bytes | None]:
        raise NotImplementedError

    def encrypt(self, values: Sequence[int] | np.ndarray) -> V:
        """Encrypt signed integers (within the key's plaintext range: Paillier ``|v| <= n // 3``, OU
        ``|v| < 2**plaintext_bits``)."""
        pk = self._public()
        cts, blob = self._raw_encrypt_blob(pk._encode(as_int_array(values)))
        return self._vector_type()._make(pk, cts, blob=blob)

    def encrypt_fixed(self, x: np.ndarray | Sequence[float], frac_bits: int | None = None, *,
                      packing: PackingSpec | None = None) -> V:
        """Encrypt reals as fixed-point with ``frac_bits`` fractional bits (default 32).

        ``x`` is flattened (C order). With ``packing``, values are packed as densely as the key
        allows (``packing.slots_in(plaintext_bits)`` per ciphertext) and ``frac_bits`` must be
        ``None`` or equal ``packing.frac_bits``; ``decrypt_fixed`` returns the flat values.
        """
        pk = self._public()
        return encrypt_fixed(self._vector_type(), pk, self._raw_encrypt_blob, pk._encode, x, frac_bits, packing)

    def encrypt_packed(self, x: np.ndarray, spec: PackingSpec) -> V:
        """One ciphertext per row of ``x`` (records, slots) with the slots packed per ``spec``.

        A 1-D ``x`` is packed densely, as :meth:`encrypt_fixed` with ``packing=spec``.
        """
        return encrypt_packed(self._vector_type(), self._public(), self._raw_encrypt_blob, x, spec)
