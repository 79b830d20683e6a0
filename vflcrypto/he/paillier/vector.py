"""CipherVector: an immutable vector of additively homomorphic ciphertexts and its operations.

Holds :class:`CipherVector` (addition, plaintext multiplication, dot products,
``sum``/``sum_by_group``, re-randomization, indexing, concatenation, bytes), its Paillier
subclass :class:`PaillierVector`, the validation of received ciphertexts
(:func:`_validate`) and of their metadata (:func:`_check_meta`, also used by the wire
codecs in :mod:`vflcrypto.runtime.codecs`). Large inputs go to the process pool through the
workers of :mod:`.kernels`.

The operations are scheme-generic: a ciphertext is a unit modulo the key's public
``cmod`` (Paillier: ``n**2``; Okamoto–Uchiyama, :mod:`vflcrypto.he.ou`: ``n``), adding
plaintexts multiplies ciphertexts, multiplying by a plaintext ``k`` raises to ``k``, and a
plaintext ``m`` enters the group as the key's ``_gpow(m)`` (Paillier ``1 + m n``; OU
``G**m``). What a vector needs of its key is named by the :class:`PublicKeyLike`
protocol, so the keys (:mod:`.keys`, :mod:`vflcrypto.he.ou`) sit *above* this module and
the import graph stays acyclic.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any, Protocol, Self

import gmpy2
import numpy as np
from gmpy2 import mpz

from ... import parallel
from ...errors import (
    CiphertextError,
    ConfigurationError,
    DecodeError,
    EncodingError,
    EncodingOverflowError,
    KeyMismatchError,
)
from .. import native
from ..encoding import DEFAULT_FRAC_BITS, PackingSpec, to_fixed_ints
from .blocks import _CHUNKS_PER_WORKER, batch_invert, ciphertexts_from_bytes, ciphertexts_to_bytes
from .fixed_base import _ONE
from .kernels import _dot, _matvec, _sum_by_group, _w_dot, _w_matvec, _w_mul, _w_sum_by_group

__all__ = ["CipherVector", "PaillierVector", "PublicKeyLike"]


class PublicKeyLike(Protocol):
    """What a vector uses of its key (:class:`~vflcrypto.he.paillier.PaillierPublicKey`,
    :class:`~vflcrypto.he.ou.OUPublicKey`)."""

    n: mpz
    cmod: mpz  # the ciphertext group's modulus
    bits: int
    fingerprint: str
    plaintext_bits: int  # non-negative plaintexts below 2**plaintext_bits are always valid

    @property
    def ciphertext_bytes(self) -> int: ...

    def _raw_encrypt(self, ms: Sequence[int]) -> list[mpz]: ...

    def _gpow(self, ms: Sequence[int]) -> list[mpz]: ...


def _group_cost(pk: PublicKeyLike) -> float:
    """Relative cost of one multiplication in the key's ciphertext group (1.0: a 4096-bit modulus)."""
    return (int(pk.cmod).bit_length() / 4096) ** 2


def _native_group_sums(v: CipherVector, groups: np.ndarray, n_groups: int, workers: int) -> list[mpz] | None:
    """``sum_by_group``'s products by the C kernel (:mod:`vflcrypto.he.native`) on ``workers``
    threads of this process, or ``None`` where it is not in use: the process backend only (a
    Ray backend keeps its cluster's workers), and a vector of a few rows stays in Python."""
    if len(v) < 64 or parallel.backend() != "process" or not native.available():
        return None
    pk = v._pk
    w = pk.ciphertext_bytes
    rows: native.Rows = v._c if native.reads_mpz() and isinstance(v._c, list) else v._blob_bytes()
    raw = native.group_products_threaded(int(pk.cmod), w, rows, groups.reshape(-1, 1), n_groups, max(1, workers))
    return None if raw is None else ciphertexts_from_bytes(raw, w)


def _plain_scalars(x: Any, frac_bits: int | None, length: int) -> tuple[list[int], int]:
    """Encode a plaintext scalar/vector multiplier as signed ints; return (ints, frac_bits)."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iufbO":
        raise EncodingError(f"cannot multiply by dtype {arr.dtype}")
    if frac_bits is None:
        frac_bits = DEFAULT_FRAC_BITS if arr.dtype.kind == "f" else 0
    ints = to_fixed_ints(arr, frac_bits)
    flat = [int(v) for v in np.ravel(ints).tolist()]
    if arr.ndim == 0:
        flat = flat * length
    elif len(flat) != length:
        raise EncodingError(f"plaintext of length {len(flat)} does not match vector of length {length}")
    return flat, frac_bits


class CipherVector:
    """An immutable vector of ciphertexts under one key, with fixed-point and packing metadata.

    ``frac_bits``: fractional bits of the encoded values. ``packing``/``slots``: the
    :class:`PackingSpec` and slots used per ciphertext (``None``/1 when unpacked).
    ``terms``: how many packed encodings were summed into each ciphertext (decoding
    subtracts ``terms * offset`` per slot). ``size``: number of values of a densely
    packed flat vector (``None`` otherwise).
    """

    __slots__ = ("_blob", "_c", "_pk", "_shipped", "_token", "frac_bits", "packing", "size",
                 "slots", "terms")
    _blob: bytes | None  # the serialized ciphertexts, built on first use
    _c: list[mpz]
    _pk: PublicKeyLike
    _shipped: bool  # the process-pool workers hold this vector's chunks (see _map_chunks)
    _token: str  # names _blob in the workers' caches
    frac_bits: int
    packing: PackingSpec | None
    size: int | None
    slots: int
    terms: int

    def __init__(self) -> None:  # a programming-misuse guard, hence a plain TypeError
        raise ConfigurationError("build vectors with a public key's encrypt* or a vector class's from_*")

    @classmethod
    def _make(cls, pk: PublicKeyLike, cts: list[mpz], *, frac_bits: int = 0,
              packing: PackingSpec | None = None, slots: int = 1, terms: int = 1,
              size: int | None = None, blob: bytes | None = None) -> Self:
        """``blob``: the serialized ``cts`` when already at hand (pool output, wire input)."""
        v = object.__new__(cls)
        v._pk, v._c, v.frac_bits, v.packing = pk, cts, frac_bits, packing
        v.slots, v.terms, v.size, v._blob, v._token = slots, terms, size, None, ""
        v._shipped = False
        if blob is not None and len(blob) == len(cts) * pk.ciphertext_bytes:
            v._blob, v._token = blob, secrets.token_hex(8)
        return v

    def _like(self, cts: list[mpz], blob: bytes | None = None, **changes: Any) -> Self:
        """A vector of ``cts`` with this one's metadata (``changes`` override it); ``blob``: their bytes if known."""
        meta: dict[str, Any] = {"frac_bits": self.frac_bits, "packing": self.packing, "slots": self.slots,
                                "terms": self.terms, "size": self.size, "blob": blob}
        meta.update(changes)
        return type(self)._make(self._pk, cts, **meta)

    # ----------------------------------------------------------------- basics
    @property
    def public_key(self) -> PublicKeyLike:
        return self._pk

    def __len__(self) -> int:
        return len(self._c)

    def __repr__(self) -> str:
        pack_s = f", packed {self.slots} slots x {self.terms} terms" if self.packing else ""
        return (f"PaillierVector(len={len(self)}, frac_bits={self.frac_bits}{pack_s}, "
                f"key={self._pk.fingerprint})")

    def ciphertexts(self) -> list[int]:
        """The raw ciphertexts as Python ints (for interop, e.g. with phe)."""
        return [int(c) for c in self._c]

    def __getitem__(self, index: int | slice | Sequence[int] | np.ndarray) -> Self:
        """``v[i]`` (a length-1 vector), ``v[a:b]``, ``v[index_array]`` or a boolean mask."""
        rows: Any  # the same selection of the rows of this vector's bytes
        if isinstance(index, int | np.integer):
            i = int(index)
            if not -len(self) <= i < len(self):  # IndexError: what the sequence protocol expects
                raise IndexError("vector index out of range")
            cts, rows = [self._c[i]], [i]
        elif isinstance(index, slice):
            cts, rows = self._c[index], index
        else:
            idx = np.asarray(index)
            if idx.dtype == bool:
                if idx.shape != (len(self),):
                    raise EncodingError("boolean mask length does not match the vector")
                idx = np.flatnonzero(idx)
            elif idx.dtype.kind not in "iu":
                raise EncodingError("index arrays must be integer or boolean")
            c = self._c
            cts, rows = [c[i] for i in idx.ravel().tolist()], idx.ravel()
        blob = None
        if self._blob is not None:  # the same rows of the known bytes: no serialization before shipping
            w = self._pk.ciphertext_bytes
            blob = np.frombuffer(self._blob, dtype=np.uint8).reshape(-1, w)[rows].tobytes()
        return self._like(cts, size=None, blob=blob)

    @classmethod
    def concat(cls, vectors: Sequence[Self]) -> Self:
        """Concatenate vectors under one key (fixed-point scales and packed terms aligned)."""
        if not vectors:
            raise ConfigurationError("concat needs at least one vector")
        first = vectors[0]
        for v in vectors[1:]:
            first._same_key(v)
            if v.packing != first.packing or v.slots != first.slots:
                raise EncodingError("cannot concatenate vectors with different packing")
        if first.packing is not None:
            terms = max(v.terms for v in vectors)
            parts = [v._pad_terms(terms) for v in vectors]
            return first._like([c for p in parts for c in p], terms=terms, size=None)
        fb = max(v.frac_bits for v in vectors)
        return first._like([c for v in vectors for c in v._scaled(fb)], frac_bits=fb, size=None)

    # ----------------------------------------------------------------- helpers
    def _same_key(self, other: CipherVector) -> None:
        if other._pk is not self._pk and other._pk != self._pk:
            raise KeyMismatchError("vectors are encrypted under different keys")

    def _scaled(self, frac_bits: int) -> list[mpz]:
        """Ciphertexts rescaled to ``frac_bits`` (>= own): multiply by ``2**diff``."""
        diff = frac_bits - self.frac_bits
        if diff == 0:
            return self._c
        if diff < 0:
            raise EncodingError("cannot lower a vector's fixed-point scale homomorphically")
        e, nsq = 1 << diff, self._pk.cmod
        return [gmpy2.powmod(c, e, nsq) for c in self._c]

    def _pad_terms(self, terms: int) -> list[mpz]:
        """Packed ciphertexts with zero-valued encodings added up to ``terms`` terms."""
        extra = terms - self.terms
        if extra == 0:
            return self._c
        assert self.packing is not None  # internal invariant: only concat pads, only packed vectors
        pk = self._pk
        g = pk._gpow([extra * self.packing.offset_block(self.slots)])[0]
        nsq = pk.cmod
        return [c * g % nsq for c in self._c]

    def _check_terms(self, terms: int) -> None:
        if self.packing is not None and terms > self.packing.terms_limit:
            raise EncodingOverflowError(
                f"{terms} packed additions exceed the packing's headroom "
                f"({self.packing.terms_limit})"
            )

    def _no_packing(self, what: str) -> None:
        if self.packing is not None:
            raise EncodingError(f"{what} is not supported on packed vectors")

    def _map_chunks(self, fn: Any, ranges: list[tuple[int, int]], extra: Any,
                    cost: int) -> list[bytes]:
        """Run ``fn(nsq, width, token, start, count, blob, *extra(a, b))`` over ``ranges``
        in the pool. After a first call has shipped this vector's chunks, later calls send
        only its token (workers keep the parsed chunks); a worker that misses answers
        ``None`` and gets the bytes in a second round."""
        w = self._pk.ciphertext_bytes
        blob = self._blob_bytes()
        nsq = int(self._pk.cmod)

        def args(a: int, b: int, ship: bool) -> tuple[Any, ...]:
            return (nsq, w, self._token, a, b - a, blob[a * w : b * w] if ship else b"",
                    *extra(a, b))

        ship = not self._shipped
        parts = parallel.parallel_map(fn, [args(a, b, ship) for a, b in ranges], cost=cost)
        missing = [i for i, p in enumerate(parts) if p is None]
        if missing:
            again = parallel.parallel_map(fn, [args(*ranges[i], True) for i in missing], cost=cost)
            for i, p in zip(missing, again, strict=True):
                parts[i] = p
        self._shipped = True
        return parts

    def _blob_bytes(self) -> bytes:
        if self._blob is None:
            self._blob = ciphertexts_to_bytes(self._c, self._pk.ciphertext_bytes)
            self._token = secrets.token_hex(8)  # names this (immutable) content in worker caches
        return self._blob

    # ----------------------------------------------------------------- addition
    def __add__(self, other: Any) -> Self:
        if isinstance(other, CipherVector):
            return self._add_vec(other)
        return self._add_plain(other)

    def __radd__(self, other: Any) -> Self:
        return self.__add__(other)

    def _add_vec(self, other: CipherVector) -> Self:
        self._same_key(other)
        a, b = self, other
        if len(a) != len(b) and 1 not in (len(a), len(b)):
            raise EncodingError(f"length mismatch: {len(a)} vs {len(b)}")
        nsq = self._pk.cmod
        if a.packing is not None or b.packing is not None:
            if a.packing != b.packing or a.slots != b.slots:
                raise EncodingError("cannot add vectors with different packing")
            terms = a.terms + b.terms
            self._check_terms(terms)
            ca, cb = a._c, b._c
            meta: dict[str, Any] = {"terms": terms}
        else:
            fb = max(a.frac_bits, b.frac_bits)
            ca, cb = a._scaled(fb), b._scaled(fb)
            meta = {"frac_bits": fb, "terms": a.terms + b.terms}
        if len(ca) == len(cb):
            out = [x * y % nsq for x, y in zip(ca, cb, strict=True)]
            size = a.size if a.size == b.size else None
        elif len(cb) == 1:
            y = cb[0]
            out = [x * y % nsq for x in ca]
            size = a.size
        else:
            x = ca[0]
            out = [x * y % nsq for y in cb]
            size = b.size
        return self._like(out, size=size, **meta)  # packing and slots agree (checked); meta sets the rest

    def _add_plain(self, x: Any) -> Self:
        self._no_packing("adding a plaintext")
        arr = np.asarray(x)
        ints = to_fixed_ints(arr, self.frac_bits)
        flat = (ints if ints.ndim else np.full(len(self), ints.item(), dtype=ints.dtype)).ravel()
        if len(flat) != len(self):
            raise EncodingError(f"length mismatch: {len(self)} vs {len(flat)}")
        gs = self._pk._gpow([int(v) for v in flat.tolist()])
        nsq = self._pk.cmod
        return self._like([c * g % nsq for c, g in zip(self._c, gs, strict=True)])

    def __neg__(self) -> Self:
        self._no_packing("negation")
        return self._like(batch_invert(self._c, self._pk.cmod))

    def __sub__(self, other: Any) -> Self:
        if isinstance(other, CipherVector):
            self._same_key(other)
            return self._add_vec(-other)
        return self._add_plain(-np.asarray(other))

    def __rsub__(self, other: Any) -> Self:
        return (-self)._add_plain(other)

    # ----------------------------------------------------------------- multiplication
    def __mul__(self, x: Any) -> Self:
        if isinstance(x, CipherVector):
            raise EncodingError("Paillier cannot multiply two ciphertexts")
        return self.mul(x)

    def __rmul__(self, x: Any) -> Self:
        return self.__mul__(x)

    def mul(self, x: Any, frac_bits: int | None = None) -> Self:
        """Multiply by a plaintext scalar or same-length vector.

        Floats are encoded with ``frac_bits`` (default 32) fractional bits and the result
        carries ``self.frac_bits + frac_bits``; integers multiply exactly (0 extra bits).
        Negative multipliers use the inverse ciphertext raised to ``|k|``.
        """
        self._no_packing("multiplication by a plaintext")
        ks, fb = _plain_scalars(x, frac_bits, len(self))
        pk = self._pk
        count = len(ks)
        avg_bits = max(1, max((abs(k).bit_length() for k in ks), default=1))
        cost = int(count * avg_bits * 1.5 * _group_cost(pk))
        workers = parallel.worker_count()
        if count > 1 and cost >= parallel.PARALLEL_MIN_COST and workers > 1:
            w = pk.ciphertext_bytes
            blob = self._blob_bytes()
            ranges = parallel.chunk_ranges(count, workers * _CHUNKS_PER_WORKER)
            chunks = [(int(pk.cmod), w, blob[a * w : b * w], tuple(ks[a:b])) for a, b in ranges]
            out = ciphertexts_from_bytes(b"".join(parallel.parallel_map(_w_mul, chunks, cost=cost)), w)
        else:
            nsq, powmod = pk.cmod, gmpy2.powmod
            uniq = len(set(ks)) == 1
            if uniq and ks and ks[0] < 0:
                k = -ks[0]
                out = [powmod(c, k, nsq) for c in batch_invert(self._c, nsq)]
            else:
                out = [powmod(c, k, nsq) if k else _ONE for c, k in zip(self._c, ks, strict=True)]
        return self._like(out, frac_bits=self.frac_bits + fb)

    def dot(self, X: np.ndarray, frac_bits: int | None = None) -> Self:
        """``out[j] = sum_i self[i] * X[i, j]`` for a plaintext matrix ``X`` (len(self), m).

        A signed-digit bucket-method (Pippenger) multi-exponentiation per output column:
        about ``bits(X)/c`` modular multiplications per product for a window ``c ~ log2(rows)``,
        instead of one full exponentiation each; negative entries use the ciphertexts'
        inverses, from one batch inversion shared by all columns. ``X`` floats are fixed-point encoded with
        ``frac_bits`` (default 32; integers: 0); the result has ``self.frac_bits +
        frac_bits``. A 1-D ``X`` gives a length-1 result.
        """
        self._no_packing("dot with a plaintext matrix")
        arr = np.asarray(X)
        if arr.ndim == 1:
            arr = arr.reshape(-1, 1)
        if arr.ndim != 2 or arr.shape[0] != len(self):
            raise EncodingError(f"matrix of shape {arr.shape} does not match vector of length {len(self)}")
        if frac_bits is None:
            frac_bits = DEFAULT_FRAC_BITS if arr.dtype.kind == "f" else 0
        ints = to_fixed_ints(arr, frac_bits)
        if ints.dtype != object and ints.size and int(np.abs(ints).max()) >= 2**62:
            ints = ints.astype(object)
        pk = self._pk
        nsq = pk.cmod
        rows, cols = ints.shape
        bits = 1
        if ints.size:
            bits = max(1, int(np.abs(ints).max()).bit_length()) if ints.dtype != object else 64
        cost = int(rows * cols * (bits / 8 + 1) * _group_cost(pk))
        workers = parallel.worker_count()
        if (ints.dtype != object and rows > 1 and workers > 1
                and cost >= parallel.PARALLEL_MIN_COST):
            w = pk.ciphertext_bytes
            ranges = parallel.chunk_ranges(rows, workers)
            parts = [ciphertexts_from_bytes(p, w) for p in self._map_chunks(
                _w_dot, ranges, lambda a, b: (np.ascontiguousarray(ints[a:b]).tobytes(), b - a, cols),
                cost)]
            out = []
            for j in range(cols):
                acc = _ONE
                for part in parts:
                    acc = acc * part[j] % nsq
                out.append(acc)
        else:
            out = _dot(self._c, ints, nsq)
        return self._like(out, frac_bits=self.frac_bits + frac_bits, terms=self.terms * rows,
                          size=None)

    def matvec(self, M: np.ndarray, *, fold_bits: int | None = None) -> Self:
        """``out[i] = sum_j M[i, j] * self[j]`` for a plaintext integer matrix ``M`` (rows, len(self)).

        A short encrypted vector times a tall matrix (a vertical model's ``X·[[w]]``): each
        ciphertext is a fixed base for every row, with windowed tables built once, so an
        entry costs ``ceil(bits(M)/w)`` multiplications (w ≈ log2(rows)) where :meth:`dot`
        over ``M.T`` would run a multi-exponentiation of only ``len(self)`` terms per row.

        ``fold_bits``: fold the rows ``per = (bits(n) - 1) // fold_bits`` to a ciphertext as
        :func:`~vflcrypto.he.paillier.fold_ciphertexts` would (row ``p`` of a group at
        plaintext bits ``[p*fold_bits, (p+1)*fold_bits)``), at no extra cost. The caller
        makes every slot non-negative and below ``2**fold_bits`` (e.g. by adding a mask)
        before the key holder unfolds. The outputs carry the inputs' randomness (products
        of known ciphertexts): re-randomize them before they leave the party.
        """
        self._no_packing("matvec")
        arr = np.asarray(M)
        if arr.ndim != 2 or arr.shape[1] != len(self) or arr.dtype.kind not in "iu":
            raise EncodingError(f"an integer matrix with {len(self)} columns is needed, got {arr.dtype} {arr.shape}")
        if arr.size and int(np.abs(arr.astype(np.int64)).max()) >= 2**61:
            raise EncodingError("matrix entries must be below 2^61")
        arr = np.ascontiguousarray(arr, dtype=np.int64)
        pk = self._pk
        per = 1 if fold_bits is None else (pk.bits - 1) // fold_bits
        if per < 1:
            raise EncodingOverflowError("fold_bits too wide to fold under this key")
        rows, cols = arr.shape
        groups = -(-rows // per)
        bits = max(1, int(np.abs(arr).max()).bit_length()) if arr.size else 1
        cost = int(rows * cols * (bits / 6 + 1) * _group_cost(pk))
        workers = parallel.worker_count()
        fb = fold_bits or 0
        if groups > 1 and workers > 1 and cost >= parallel.PARALLEL_MIN_COST:
            w = pk.ciphertext_bytes
            blob = self._blob_bytes()
            ranges = parallel.chunk_ranges(groups, workers)  # each chunk builds its own tables
            chunks = [(int(pk.cmod), w, blob, arr[a * per : b * per].tobytes(), min(b * per, rows) - a * per,
                       cols, fb, per) for a, b in ranges]
            out = ciphertexts_from_bytes(b"".join(parallel.parallel_map(_w_matvec, chunks, cost=cost)), w)
        else:
            out = _matvec(self._c, arr, pk.cmod, fb, per)
        return self._like(out, terms=self.terms * cols, size=None)

    # ----------------------------------------------------------------- reductions
    def sum(self) -> Self:
        """Sum of all elements as a length-1 vector (packed: terms multiply by the length)."""
        terms = self.terms * len(self)
        self._check_terms(terms)
        nsq = self._pk.cmod
        acc = _ONE
        for c in self._c:
            acc = acc * c % nsq
        return self._like([acc], terms=terms, size=None)

    def sum_by_group(self, groups: np.ndarray | Sequence[int], n_groups: int) -> Self:
        """``out[g] = sum of self[i] with groups[i] == g`` (the SecureBoost histogram).

        One modular multiplication per element (the C kernel of :mod:`vflcrypto.he.native` on
        this process's threads where it is built; else Python, in the process pool). For packed
        vectors every output gets exactly ``len(self) * terms`` terms (bins with fewer elements
        are padded with encodings of zero), so the metadata does not reveal bin counts; this
        must stay within the packing's headroom.
        """
        g = np.asarray(groups)
        if g.shape != (len(self),):
            raise EncodingError("groups must be a 1-D array as long as the vector")
        if g.dtype.kind not in "iu":
            raise EncodingError("groups must be integers")
        g = g.astype(np.int64, copy=False)
        if g.size and (int(g.min()) < 0 or int(g.max()) >= n_groups):
            raise EncodingError("group index out of range")
        terms = self.terms * len(self)
        self._check_terms(terms)
        pk = self._pk
        nsq = pk.cmod
        count = len(self)
        cost = int(count * _group_cost(pk))
        workers = parallel.worker_count()
        out = _native_group_sums(self, g, n_groups, workers)
        if out is None and workers > 1 and count > 1 and cost >= parallel.PARALLEL_MIN_COST:
            w = pk.ciphertext_bytes
            ranges = parallel.chunk_ranges(count, workers)
            parts = [ciphertexts_from_bytes(p, w) for p in self._map_chunks(
                _w_sum_by_group, ranges, lambda a, b: (g[a:b].tobytes(), n_groups), cost)]
            out = parts[0]
            for part in parts[1:]:
                out = [x if y == 1 else (y if x == 1 else x * y % nsq)
                       for x, y in zip(out, part, strict=True)]
        elif out is None:
            out = _sum_by_group(self._c, g.tolist(), n_groups, nsq)
        if self.packing is not None:
            counts = np.bincount(g, minlength=n_groups).tolist()
            block = self.packing.offset_block(self.slots)
            pads = {k: pk._gpow([(terms - k * self.terms) * block])[0] for k in set(counts)
                    if k * self.terms != terms}
            out = [c * pads[k] % nsq if k in pads else c for c, k in zip(out, counts, strict=True)]
        return self._like(out, terms=terms, size=None)

    # ----------------------------------------------------------------- randomness
    def rerandomize(self) -> Self:
        """Same plaintexts, fresh randomness: multiply by ``hs**a`` (an encryption of 0)."""
        r = self._pk._raw_encrypt([0] * len(self))
        nsq = self._pk.cmod
        return self._like([c * s % nsq for c, s in zip(self._c, r, strict=True)])

    # ----------------------------------------------------------------- bytes
    def to_bytes(self) -> bytes:
        """Concatenated big-endian ciphertexts, ``2 * ceil(bits/8)`` bytes each."""
        return self._blob_bytes()

    @classmethod
    def from_bytes(cls, public_key: PublicKeyLike, data: bytes, *, frac_bits: int = 0,
                   packing: PackingSpec | None = None, slots: int = 1, terms: int = 1,
                   size: int | None = None) -> Self:
        """Parse :meth:`to_bytes`, validating every ciphertext (0 < c < n**2, unit mod n)."""
        w = public_key.ciphertext_bytes
        if not isinstance(data, bytes | bytearray | memoryview) or len(data) % w:
            raise CiphertextError(f"ciphertext block is not a multiple of {w} bytes (truncated?)")
        cts = ciphertexts_from_bytes(bytes(data), w)
        _validate(public_key, cts)
        _check_meta(public_key, len(cts), frac_bits, packing, slots, terms, size)
        return cls._make(public_key, cts, frac_bits=frac_bits, packing=packing, slots=slots, terms=terms,
                         size=size, blob=bytes(data))

    @classmethod
    def from_ciphertexts(cls, public_key: PublicKeyLike, ciphertexts: Sequence[int], *,
                         frac_bits: int = 0) -> Self:
        """Wrap raw ciphertext integers (e.g. ``phe`` ``ciphertext(be_secure=False)``), validated."""
        cts = [mpz(int(c)) for c in ciphertexts]
        _validate(public_key, cts)
        return cls._make(public_key, cts, frac_bits=frac_bits)


def _validate(pk: PublicKeyLike, cts: Sequence[mpz]) -> None:
    """0 < c < cmod for each c, and gcd(prod c mod n, n) = 1 (all units, one gcd)."""
    nsq, n = pk.cmod, pk.n
    acc = _ONE
    for c in cts:
        if not 0 < c < nsq:
            raise CiphertextError("ciphertext out of range")
        acc = acc * c % n
    if cts and gmpy2.gcd(acc, n) != 1:
        raise CiphertextError("ciphertext is not a unit modulo n")


def _check_meta(pk: PublicKeyLike, length: int, frac_bits: int, packing: PackingSpec | None,
                slots: int, terms: int, size: int | None) -> None:
    if frac_bits < 0 or frac_bits >= pk.plaintext_bits or terms < 0 or slots < 1:
        raise DecodeError("invalid vector metadata")
    if packing is None:
        if slots != 1 or size is not None:
            raise DecodeError("invalid vector metadata")
        return
    if packing.frac_bits != frac_bits or slots > packing.slots_in(pk.plaintext_bits):
        raise DecodeError("packing metadata inconsistent with the key")
    if terms > packing.terms_limit:
        raise EncodingOverflowError("packed vector has more terms than its headroom")
    if size is not None and not (length - 1) * slots < size <= length * slots:
        raise DecodeError("packed size inconsistent with the vector length")


class PaillierVector(CipherVector):
    """A vector of Paillier ciphertexts (``cmod = n**2``): built by
    :class:`~vflcrypto.he.paillier.PaillierPublicKey` and its private key."""

    __slots__ = ()
