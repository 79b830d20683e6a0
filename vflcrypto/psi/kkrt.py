"""KKRT PSI building blocks: cuckoo hashing, the pseudorandom code, the batched OPRF.

After V. Kolesnikov, R. Kumaresan, M. Rosulek, N. Trieu, "Efficient Batched Oblivious PRF
with Applications to Private Set Intersection", ACM CCS 2016 (semi-honest).

The **receiver** R (it learns the intersection) puts each of its items into one bin of a
cuckoo table of ``bins`` rows with :data:`HASHES` = 3 hash functions, plus a stash of
``stash`` rows; the **sender** S puts each of its items into all three of its candidate
bins (simple hashing) and into every stash row. One OPRF instance per table row:

* R holds both keys ``(k⁰_j, k¹_j)`` of ``WIDTH`` base OTs (:mod:`vflcrypto.psi.ot`), S holds
  ``k^{s_j}_j`` for its secret ``s ∈ {0,1}^WIDTH``;
* for row ``i`` with item ``x`` R forms ``t_i = PRG(k⁰)_i`` and sends
  ``u_i = t_i ⊕ PRG(k¹)_i ⊕ C(x)`` (column by column: :func:`receiver_matrix`);
* S gets ``q_i = PRG(k^{s})_i ⊕ s·u_i = t_i ⊕ (C(x) ∧ s)`` (:func:`sender_rows`) and
  evaluates ``F(i, y) = H(i, q_i ⊕ (C(y) ∧ s))``: equal to R's ``H(i, t_i)`` when ``y = x``,
  pseudorandom to R otherwise (the code's minimum distance puts ≥ κ unknown bits of
  ``s`` into the difference).

Parameters
    ``WIDTH`` = 512 code bits (four AES blocks), as in libOTe's KKRT; the paper shows
    widths of 424–448 bits suffice for κ = 128 at the set sizes considered, so 512 has
    margin. The code is ``C(v) = AES_{c1}(v) ‖ … ‖ AES_{c4}(v)`` (a PRF used as a
    pseudorandom code) on the 16-byte block ``v = H₀(x)[0:15] ‖ h`` (``h`` = which hash
    function placed it, 3 for the stash), with the four keys derived from both parties'
    hello nonces. ``H₀`` is BLAKE2b-128; ``H`` is BLAKE2b over the row and its index,
    truncated to :data:`OUTPUT_BYTES` = 12 bytes: false matches have probability at most
    ``rows · values / 2⁹⁶`` (≈ 6·10⁻¹⁵ at 10⁷ × 10⁷).
    Table size: stash-less cuckoo hashing with three hash functions at the expansion
    ``e = bins / n`` for which the construction fails with probability ≤ 2⁻⁴⁰, from the
    experimentally fitted bound of Pinkas–Schneider–Zohner ("Scalable private set
    intersection based on OT extension", ACM TOPS 2018) as implemented in cryptoTools'
    ``CuckooIndex::selectParams`` (e ≈ 1.51 at n = 10⁵, 1.54 at 10⁶; the small-n lines
    for n < 2⁹). A failed insertion (≤ 2⁻⁴⁰) puts the item in the stash when one is
    configured, else is an error asking for a rerun: it reveals nothing but that event.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from ..errors import ProtocolError
from . import ot

__all__ = ["HASHES", "OUTPUT_BYTES", "ROW_ALIGN", "STASH_TAG", "WIDTH", "CuckooFailure", "code_words",
           "cuckoo_bins", "cuckoo_insert", "hash_rows", "item_hashes", "locations", "random_choice_bits",
           "receiver_matrix", "sender_rows", "table_rows"]

WIDTH = 512
WIDTH_BYTES = WIDTH // 8
HASHES = 3
STASH_TAG = 3
OUTPUT_BYTES = 12
STAT_BITS = 40
ROW_ALIGN = 128  # table rows per PRG block of every column (16 bytes)
REINSERT_LIMIT = 200
_SMALL_LINES = [(5.5, 6.35)] * 3 + [(8.5, -0.07), (13.4, -6.74), (21.9, -16.1), (57.8, -62.6), (100.0, -113.0),
                                     (142.0, -158.0)]


class CuckooFailure(ProtocolError):
    """Cuckoo hashing found no place for some items (probability ≤ 2⁻⁴⁰ at the default size)."""


def random_choice_bits() -> np.ndarray:
    """The sender's secret OPRF key ``s``: ``WIDTH`` bits (0/1 bytes) from ``os.urandom``."""
    return np.frombuffer(os.urandom(WIDTH), np.uint8) & 1


def cuckoo_bins(n: int, stat_bits: int = STAT_BITS) -> int:
    """Bins for ``n`` items, stash-less, 3 hash functions, failure ≤ ``2^-stat_bits``."""
    if n <= 0:
        return 0
    nnf = math.floor(math.log2(n))
    if nnf < 9:
        slope, y = _SMALL_LINES[nnf]
        e = (stat_bits - y) / slope
    else:
        nn = math.log2(n)
        a = 123.5 / 2 * (1 + math.erf((nn - 6.3) / (2.3 * math.sqrt(2))))
        b = -130 / 2 * (1 + math.erf((nn - 6.45) / (2.18 * math.sqrt(2)))) - nn
        e = (stat_bits - b) / a
    return max(math.ceil(e * n), HASHES)


def table_rows(bins: int, stash: int) -> int:
    """OPRF rows: the bins, then the stash, padded to a multiple of :data:`ROW_ALIGN`."""
    total = bins + stash
    return max(ROW_ALIGN, -(-total // ROW_ALIGN) * ROW_ALIGN)


def _batched_blake2b() -> Any:
    """The C extension ``_blake2b`` (one call hashes a batch, ~3.5x hashlib's per-call loop
    here), or ``None`` where it was not built or ``VFLCRYPTO_NATIVE=0``: then hashlib. The
    digests are the same bytes either way (``tests/test_kkrt_native.py``)."""
    return native_module("_blake2b")


def native_off() -> bool:
    """``VFLCRYPTO_NATIVE=0`` (or off/no/false): the compiled extensions are switched off."""
    return os.environ.get("VFLCRYPTO_NATIVE", "").strip().lower() in ("0", "off", "no", "false")


def native_module(name: str) -> Any:
    """The compiled extension ``vflcrypto.psi.<name>``, or ``None`` (not built, or switched off)."""
    if native_off():
        return None
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError:
        return None


def item_hashes(ids: Sequence[bytes]) -> np.ndarray:
    """``H₀(x)``: a 16-byte BLAKE2b digest per canonical ID (``n × 16`` uint8).

    Packed IDs (:class:`~vflcrypto.psi.packed.PackedIds`) are hashed from their buffer in
    one call and keep the result (hygiene hashes them once to find duplicates).
    """
    from .primitives import PackedIds

    native = _batched_blake2b()
    if isinstance(ids, PackedIds):
        if ids.h0 is None:
            if native is None or not len(ids):
                ids.h0 = item_hashes(list(ids))
            else:
                out = native.blake2b_many(ids.data, ids.offsets, 16, b"vflcrypto-kkrt0")
                ids.h0 = np.frombuffer(out, np.uint8).reshape(len(ids), 16)
        return ids.h0
    if native is not None and ids:
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, ids), np.int64, len(ids)), out=offsets[1:])
        out = native.blake2b_many(b"".join(ids), offsets, 16, b"vflcrypto-kkrt0")
        return np.frombuffer(out, np.uint8).reshape(len(ids), 16)
    fresh = hashlib.blake2b(digest_size=16, person=b"vflcrypto-kkrt0").copy  # copying beats re-keying per ID
    digest = b"".join([_digest(fresh, x) for x in ids])
    return np.frombuffer(digest, np.uint8).reshape(len(ids), 16)


def _digest(fresh: Callable[[], hashlib.blake2b], data: bytes | memoryview) -> bytes:
    h = fresh()
    h.update(data)
    return h.digest()


def aes_prf(key: bytes, blocks: np.ndarray) -> np.ndarray:
    """AES as a keyed permutation on independent 16-byte blocks (a PRF, not an encryption mode).

    Also the OKVS's row PRF, the GGM trees' numpy path and the VOLE PSI's output hash."""
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()  # noqa: S305  (PRF evaluation, see docstring)
    data = np.ascontiguousarray(blocks)
    out = bytearray(data.nbytes + 15)  # update_into's room for a block it may hold back (ECB holds none)
    enc.update_into(data.data.cast("B") if data.nbytes else b"", out)
    return np.frombuffer(out, np.uint8, count=data.nbytes).reshape(blocks.shape)  # writable: callers XOR in place


def locations(h0: np.ndarray, hash_key: bytes, bins: int) -> np.ndarray:
    """The three candidate bins of each item (``n × 3`` int64), from AES_{hash_key}(H₀(x))."""
    if bins <= 0:
        return np.zeros((len(h0), HASHES), np.int64)
    words = aes_prf(hash_key, h0).view("<u4").astype(np.int64)
    return words[:, :HASHES] % bins


def cuckoo_insert(locs: np.ndarray, bins: int, stash: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Place every item in one of its bins (vectorised cuckoo hashing with eviction).

    Returns ``(table, which, stashed)``: ``table[b]`` = the item in bin ``b`` or -1;
    ``which[i]`` = the hash function that placed item ``i`` (``STASH_TAG`` if stashed);
    ``stashed`` = the items in the stash, in stash-row order. An item evicted more than
    :data:`REINSERT_LIMIT` times goes to the stash; more than ``stash`` of those raise
    :class:`CuckooFailure`.
    """
    n = len(locs)
    table = np.full(max(bins, 0), -1, np.int64)
    if bins <= 0:  # no table at all (tests): every item goes to the stash
        locs = np.zeros((n, 0), np.int64)
        if n > stash:
            raise CuckooFailure(f"no cuckoo bins for {n} items and a stash of {stash}")
        return table, np.full(n, STASH_TAG, np.int64), np.arange(n, dtype=np.int64)
    which = np.zeros(n, np.int64)
    tries = np.zeros(n, np.int64)
    stashed: list[np.ndarray] = []
    pending = np.arange(n, dtype=np.int64)
    while pending.size:
        pos = locs[pending, which[pending]]
        order = np.argsort(pos, kind="stable")
        pos_sorted, items_sorted = pos[order], pending[order]
        first = np.ones(len(order), bool)
        first[1:] = pos_sorted[1:] != pos_sorted[:-1]
        winners, wpos = items_sorted[first], pos_sorted[first]
        losers = items_sorted[~first]
        evicted = table[wpos]
        table[wpos] = winners
        evicted = evicted[evicted >= 0]
        moved = np.concatenate([losers, evicted])
        which[moved] = (which[moved] + 1) % HASHES
        tries[moved] += 1
        over = tries[moved] > REINSERT_LIMIT
        if over.any():
            stashed.append(moved[over])
            moved = moved[~over]
        pending = moved
    stash_items = np.concatenate(stashed) if stashed else np.zeros(0, np.int64)
    if len(stash_items) > stash:
        raise CuckooFailure(f"cuckoo hashing left {len(stash_items)} items without a bin (stash of {stash}): "
                            "an event of probability at most 2^-40 at the default table size; run the "
                            "alignment again (fresh hash keys)")
    which[stash_items] = STASH_TAG
    return table, which, stash_items


def code_words(h0: np.ndarray, tags: np.ndarray, code_keys: Sequence[bytes]) -> np.ndarray:
    """``C(H₀(x)[0:15] ‖ tag)`` for each row (``n × 64`` uint8): four AES blocks under the code keys."""
    blocks = np.array(h0, np.uint8, copy=True)
    blocks[:, 15] = tags.astype(np.uint8)
    return np.concatenate([aes_prf(k, blocks) for k in code_keys], axis=1)


_RECORD = WIDTH_BYTES + 4  # a row and its uint32 index


def hash_rows(rows: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``H(i, row)``: BLAKE2b of each 64-byte row with its table-row index, ``OUTPUT_BYTES`` each.

    In-process: spreading these per-row hashes over the process pool was measured slower
    (pickling the rows costs more than the hashing saves).
    """
    buf = np.empty((len(rows), _RECORD), np.uint8)
    buf[:, :WIDTH_BYTES] = rows
    buf[:, WIDTH_BYTES:] = index.astype("<u4").reshape(-1, 1).view(np.uint8)
    return hash_records(buf, OUTPUT_BYTES, b"vflcrypto-kkrt")


def hash_records(records: np.ndarray, digest_size: int, person: bytes) -> np.ndarray:
    """BLAKE2b of each row of ``records`` (``n × r`` bytes), ``digest_size`` bytes each, personalised.

    One C call for the batch where built, else hashlib's copied state per record (the same digests).
    """
    n, width = records.shape
    native = _batched_blake2b()
    if native is not None and n:
        offsets = np.arange(0, n * width + 1, width, dtype=np.int64)
        return np.frombuffer(native.blake2b_many(np.ascontiguousarray(records), offsets, digest_size, person),
                             np.uint8).reshape(n, digest_size)
    mv = np.ascontiguousarray(records).reshape(-1).data  # the records, byte by byte, without a copy
    fresh = hashlib.blake2b(digest_size=digest_size, person=person).copy
    out = b"".join([_digest(fresh, mv[i : i + width]) for i in range(0, len(mv), width)])
    return np.frombuffer(out, np.uint8).reshape(n, digest_size)


def _columns(keys: np.ndarray, start_row: int, rows: int) -> np.ndarray:
    return np.stack([ot.prg(k, start_row // 8, rows // 8) for k in keys])


def receiver_matrix(k0: np.ndarray, k1: np.ndarray, codes: np.ndarray, start_row: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """R's OT-extension step for rows ``start_row …``: ``(u columns, t rows)``.

    ``codes`` are the code words of the rows' items (``rows × 64``); ``u`` (``WIDTH ×
    rows/8``) goes to the sender, ``t`` (``rows × 64``) stays: ``H(i, t_i)`` is R's output.
    """
    rows = len(codes)
    t_cols = _columns(k0, start_row, rows)
    u = t_cols ^ _columns(k1, start_row, rows) ^ ot.transpose_bits(codes)
    return u, ot.transpose_bits(t_cols)


def sender_rows(keys: np.ndarray, choice: np.ndarray, u: np.ndarray, start_row: int) -> np.ndarray:
    """S's ``q`` rows (``rows × 64``) for the received ``u`` columns: ``q_i = t_i ⊕ (C(x_i) ∧ s)``."""
    if u.shape[0] != WIDTH or u.dtype != np.uint8:
        raise ProtocolError(f"OT-extension matrix has {u.shape[0]} columns; this side uses the code width {WIDTH}")
    rows = u.shape[1] * 8
    q_cols = _columns(keys, start_row, rows)
    q_cols ^= u * choice.astype(np.uint8).reshape(-1, 1)
    return ot.transpose_bits(q_cols)
