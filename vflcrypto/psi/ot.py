"""Oblivious transfer: base OTs over edwards25519 and the bit-matrix tools of OT extension.

**Base OTs** are the "simplest OT" of T. Chou and C. Orlandi ("The Simplest Protocol for
Oblivious Transfer", LATINCRYPT 2015), batched, semi-honest, in the prime-order subgroup
of edwards25519 through libsodium (PyNaCl):

* the OT *sender* (it will hold both keys of every pair) draws a scalar ``a`` and sends
  ``A = a·G``;
* the OT *receiver* with choice bit ``c_j`` draws ``b_j`` and sends ``B_j = b_j·G + c_j·A``;
  its key is ``H(j, A, B_j, b_j·A)``;
* the sender's keys are ``k⁰_j = H(j, A, B_j, a·B_j)`` and ``k¹_j = H(j, A, B_j, a·(B_j − A))``:
  the receiver's key equals ``k^{c_j}_j``; under CDH in the group (``H`` a random oracle)
  the other key is pseudorandom to it, and ``B_j`` is uniform whatever ``c_j`` is, so the
  sender learns nothing of the choice bits.

Every received point is checked by ``crypto_core_ed25519_is_valid_point`` (canonical
encoding, on the curve, in the prime-order subgroup, not of small order); a bad point is a
:class:`~vflcrypto.errors.ProtocolError`. Scalars come from ``os.urandom`` (64 bytes
reduced mod the group order).

**Bit matrices** are ``uint8`` arrays, rows packed little-endian (bit ``j`` of a row is
``(row[j // 8] >> (j % 8)) & 1``). :func:`transpose_bits` turns an ``r × c`` bit matrix
into ``c × r`` with 8×8 block transposes on ``uint64`` words (no unpacking to bytes per
bit), which is what lets the IKNP/KKRT column-to-row step run at memory speed.
:func:`prg` is AES-128 in counter mode keyed by a base-OT key, addressable by byte offset
(so a column can be expanded chunk by chunk).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import nacl.bindings as sodium
import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from ..errors import ProtocolError

__all__ = ["KEY_BYTES", "POINT_BYTES", "BaseOtReceiver", "BaseOtSender", "prg", "transpose_bits"]

POINT_BYTES = 32
KEY_BYTES = 16
_DOMAIN = b"vflcrypto/ot/chou-orlandi/v1"


def _scalar() -> bytes:
    return bytes(sodium.crypto_core_ed25519_scalar_reduce(os.urandom(64)))


def _check_point(p: bytes, what: str) -> None:
    if len(p) != POINT_BYTES or not sodium.crypto_core_ed25519_is_valid_point(p):
        raise ProtocolError(f"base OT: {what} is not a valid point of the prime-order edwards25519 group")


def _key(j: int, a_point: bytes, b_point: bytes, shared: bytes) -> bytes:
    h = hashlib.sha256(_DOMAIN)
    h.update(j.to_bytes(4, "little") + a_point + b_point + shared)
    return h.digest()[:KEY_BYTES]


@dataclass
class BaseOtSender:
    """The side that ends up with both keys of each of ``count`` base OTs."""

    scalar: bytes
    point: bytes

    @classmethod
    def create(cls) -> BaseOtSender:
        a = _scalar()
        return cls(a, bytes(sodium.crypto_scalarmult_ed25519_base_noclamp(a)))

    def keys(self, choices: bytes, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Both keys ``(k⁰, k¹)`` (each ``count × 16`` bytes) from the receiver's points ``B_j``."""
        if len(choices) != count * POINT_BYTES:
            raise ProtocolError(f"base OT: expected {count} points, got {len(choices)} bytes")
        k0 = np.empty((count, KEY_BYTES), np.uint8)
        k1 = np.empty((count, KEY_BYTES), np.uint8)

        def one(j: int) -> None:
            b = choices[j * POINT_BYTES : (j + 1) * POINT_BYTES]
            _check_point(b, f"the receiver's point {j}")
            p0 = sodium.crypto_scalarmult_ed25519_noclamp(self.scalar, b)
            p1 = sodium.crypto_scalarmult_ed25519_noclamp(self.scalar, sodium.crypto_core_ed25519_sub(b, self.point))
            k0[j] = np.frombuffer(_key(j, self.point, b, p0), np.uint8)
            k1[j] = np.frombuffer(_key(j, self.point, b, p1), np.uint8)

        _each(one, count)
        return k0, k1


class BaseOtReceiver:
    """The side with choice bits; it learns one key per base OT."""

    @staticmethod
    def choose(sender_point: bytes, bits: np.ndarray) -> tuple[bytes, np.ndarray]:
        """``(B_1 … B_count, keys)`` for the choice ``bits`` (0/1, one per base OT)."""
        _check_point(sender_point, "the sender's point A")
        points = np.empty((len(bits), POINT_BYTES), np.uint8)
        keys = np.empty((len(bits), KEY_BYTES), np.uint8)
        choice = bits.tolist()
        scalars = [_scalar() for _ in choice]  # drawn in the calling thread

        def one(j: int) -> None:
            b = scalars[j]
            point = sodium.crypto_scalarmult_ed25519_base_noclamp(b)
            if choice[j]:
                point = sodium.crypto_core_ed25519_add(point, sender_point)
            points[j] = np.frombuffer(point, np.uint8)
            shared = sodium.crypto_scalarmult_ed25519_noclamp(b, sender_point)
            keys[j] = np.frombuffer(_key(j, sender_point, bytes(point), shared), np.uint8)

        _each(one, len(choice))
        return points.tobytes(), keys


def _each(fn: Callable[[int], None], count: int) -> None:
    """``fn(j)`` for every ``j < count``, over two threads (libsodium releases the GIL)."""
    if count < 64:
        for j in range(count):
            fn(j)
        return
    half = count // 2

    def part(lo: int, hi: int) -> None:
        for j in range(lo, hi):
            fn(j)

    with ThreadPoolExecutor(2) as ex:
        for f in [ex.submit(part, 0, half), ex.submit(part, half, count)]:
            f.result()  # re-raises a bad point from either half


def prg(key: bytes | np.ndarray, start: int, length: int) -> np.ndarray:
    """``length`` bytes of AES-128-CTR under ``key`` from byte offset ``start`` (a multiple of 16)."""
    if start % 16:
        raise ValueError("prg offsets are multiples of 16 bytes")
    nonce = (start // 16).to_bytes(16, "big")
    enc = Cipher(algorithms.AES(bytes(key)), modes.CTR(nonce)).encryptor()
    return np.frombuffer(enc.update(bytes(length)), np.uint8)


_M1 = np.uint64(0x00AA00AA00AA00AA)
_M2 = np.uint64(0x0000CCCC0000CCCC)
_M3 = np.uint64(0x00000000F0F0F0F0)


def _transpose8(x: np.ndarray) -> np.ndarray:
    """Transpose the 8×8 bit block in each uint64 (byte ``r`` = row ``r``, bit ``c`` = column ``c``)."""
    t = (x ^ (x >> np.uint64(7))) & _M1
    x = x ^ t ^ (t << np.uint64(7))
    t = (x ^ (x >> np.uint64(14))) & _M2
    x = x ^ t ^ (t << np.uint64(14))
    t = (x ^ (x >> np.uint64(28))) & _M3
    return x ^ t ^ (t << np.uint64(28))


def transpose_bits(m: np.ndarray) -> np.ndarray:
    """The transpose of a bit matrix: ``r × (c/8)`` bytes in, ``c × (r/8)`` bytes out (``r % 8 == 0``)."""
    rows, cbytes = m.shape
    if rows % 8:
        raise ValueError("transpose_bits needs a row count that is a multiple of 8")
    # blocks[g, c] = the 8 bytes m[8g : 8g+8, c] as one little-endian uint64 (byte r = row 8g+r)
    blocks = np.ascontiguousarray(m.reshape(rows // 8, 8, cbytes).transpose(0, 2, 1)).view(np.uint64)
    t = _transpose8(blocks.reshape(rows // 8, cbytes))
    # byte b of t[g, c] holds output row 8c+b, bits of rows 8g..8g+7 of the input
    out = t.view(np.uint8).reshape(rows // 8, cbytes, 8).transpose(1, 2, 0)
    return np.ascontiguousarray(out).reshape(cbytes * 8, rows // 8)
