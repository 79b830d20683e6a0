"""Silent VOLE over GF(2¹²⁸): a long vector-OLE correlation from 128 base OTs and little traffic.

After the results the VOLE PSI of :mod:`vflcrypto.psi.rr22` rests on: the receiver ends with
``(A, C)``, the sender with ``(B, Δ)``, ``m`` elements each, such that

    C = B ⊕ Δ·A      (elementwise, in GF(2¹²⁸); A pseudorandom, Δ the sender's secret)

Construction (semi-honest), as in libOTe's ``SilentVoleSender/Receiver``:

1. **IKNP correlated OTs.** 128 Chou–Orlandi base OTs (:mod:`.ot`) in which the VOLE
   *sender* chooses with the bits of Δ; the receiver then extends them (Ishai–Kilian–
   Nissim–Petrank, CRYPTO 2003) to ``M`` correlated OTs with choice bits ``r`` of its own:
   the sender holds ``q_g``, the receiver ``t_g = q_g ⊕ r_g·Δ``.
2. **Regular noise.** The code's ``N = TREES·2^h`` positions are cut into :data:`TREES`
   blocks; in each block ``i`` the receiver picks one position ``α_i`` and a value
   ``β_i ∈ GF(2¹²⁸)``. The sender expands a GGM tree of depth ``h`` from a fresh seed (the
   leaves ``v``); the receiver learns every leaf but ``α_i``'s through ``h`` OTs (it chooses
   the side *off* its path at each level and receives that side's XOR), as in the
   punctured PRFs of Boyle et al. ("Efficient Two-Round OT Extension and Silent
   Non-Interactive Secure Computation", CCS 2019). A base VOLE ``γ_i = δ_i ⊕ Δ·β_i`` from
   128 of the correlated OTs (``β_i``'s bits as choice bits, ``δ_i = Σ_j X^j q_{i,j}``) and
   the sender's correction ``δ_i ⊕ Σ_j v_{i,j}`` give the receiver ``w_{α_i} = v_{α_i} ⊕ Δ·β_i``:
   so ``w = v ⊕ Δ·e`` for the sparse noise vector ``e``.
3. **Compression by a public code.** Both sides apply the dual encoding ``G`` of the
   expand-convolute code (Raghuraman–Rindal–Tanguy, CRYPTO 2023; libOTe's ``ExConv7x24``:
   code size ``2m``, expander weight 7, two convolutions of 24 random diagonals; C in
   ``_vole.c``): ``A = G(e)``, ``C = G(w)``, ``B = G(v)``. ``G`` is linear, so the relation
   holds; ``A`` is pseudorandom under dual LPN with regular noise.

**Parameters.** :data:`TREES` = 128 noise blocks: libOTe's ``getRegNoiseWeight`` gives
``t = −λ / log₂(1 − 2d)`` for a code of relative minimum distance ``d``, and its estimate
for ExConv7x24 is ``d = 0.25``, so λ = 128 needs ``t = 128``. Long vectors are made of
independent instances of at most :data:`MAX_OUTPUTS` outputs (bounded memory: 2·2²⁰ leaves
of 16 bytes per instance), each with its own noise; short ones are padded to
:data:`MIN_OUTPUTS` (the noise rate stays ≤ 1/256).

Messages (see :class:`VoleReceiver` and :class:`VoleSender`): the receiver's base-OT point;
the sender's 128 base-OT points; the receiver's IKNP matrix (``128 × M`` bits,
``M = instances·TREES·(128 + h)``: 4.5 MiB at 10⁷ outputs); the sender's GGM level sums
under the OT keys and its corrections (``instances·TREES·(2h + 1)`` blocks).
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from ..errors import ProtocolError
from . import ot
from .kkrt import ROW_ALIGN, aes_prf, hash_records, native_module, native_off

__all__ = ["MAX_OUTPUTS", "MIN_OUTPUTS", "TREES", "VoleReceiver", "VoleSender", "VoleShape", "available",
           "gf_mul", "level_keys", "random_delta_bits", "shape", "warm", "why_not"]

TREES = 128
BITS = 128
MIN_OUTPUTS = 1 << 14
MAX_OUTPUTS = 1 << 20
EXPANDER = 7
_DOMAIN = b"vflcrypto/vole/v1"
_GGM_KEYS = (hashlib.sha256(_DOMAIN + b"/ggm-left").digest()[:16],
             hashlib.sha256(_DOMAIN + b"/ggm-right").digest()[:16])


def _native() -> Any:
    return native_module("_vole")


def why_not() -> str | None:
    """Why silent VOLE cannot run here (``None`` when it can): it needs the C extension ``_vole``."""
    if native_off():
        return "VFLCRYPTO_NATIVE=0 turns the compiled extensions off, and silent VOLE has no Python fallback"
    if _native() is None:
        return "the C extension vflcrypto.psi._vole was not built (a C compiler and Python's headers are needed)"
    return None


def available() -> bool:
    return why_not() is None


def _lib() -> Any:
    lib = _native()
    if lib is None:
        raise ProtocolError(f"silent VOLE is unavailable: {why_not()}")
    return lib


def gf_mul(a: np.ndarray, b: np.ndarray | bytes) -> np.ndarray:
    """Products in GF(2¹²⁸) of the ``n × 16`` elements ``a`` with ``b`` (``n × 16``, or one element)."""
    a = np.ascontiguousarray(a, np.uint8)
    b = np.ascontiguousarray(np.frombuffer(b, np.uint8) if isinstance(b, bytes) else b, np.uint8)
    return np.frombuffer(_lib().gf128_mul(a, b), np.uint8).reshape(-1, 16)


@lru_cache(maxsize=1)
def _powers() -> np.ndarray:
    """``X^j`` for ``j < 128`` (``128 × 16``): the weights that pack 128 correlated OTs into one element."""
    out = np.zeros((BITS, 16), np.uint8)
    out[np.arange(BITS), np.arange(BITS) // 8] = (1 << (np.arange(BITS) % 8)).astype(np.uint8)
    return out


def _pack(rows: np.ndarray) -> np.ndarray:
    """``Σ_j X^j·rows[i·128 + j]`` for each ``i`` (rows ``k·128 × 16`` → ``k × 16``)."""
    k = len(rows) // BITS
    weighted = gf_mul(rows, np.tile(_powers(), (k, 1)))
    return np.bitwise_xor.reduce(weighted.view(np.uint64).reshape(k, BITS, 2), axis=1).view(np.uint8).reshape(k, 16)


@dataclass(frozen=True)
class VoleShape:
    """How ``outputs`` VOLE elements are made: ``instances`` independent instances of ``per`` outputs."""

    outputs: int
    per: int
    instances: int
    depth: int  # of each GGM tree; its first ``block`` leaves are used
    block: int  # noise positions per tree (regular noise: one nonzero in each block)

    @property
    def leaves(self) -> int:
        """The code size ``N = TREES·block`` (≥ 2·per) of one instance."""
        return TREES * self.block

    @property
    def cots_per_instance(self) -> int:
        return TREES * (BITS + self.depth)

    @property
    def cots(self) -> int:
        """Correlated OTs for all instances, padded to the IKNP matrix's 128-row blocks."""
        total = self.instances * self.cots_per_instance
        return -(-total // ROW_ALIGN) * ROW_ALIGN


def shape(outputs: int) -> VoleShape:
    """The instances for ``outputs`` elements (``outputs ≥ 1``)."""
    if outputs < 1:
        raise ValueError("a VOLE needs at least one output")
    instances = -(-outputs // MAX_OUTPUTS)
    per = max(MIN_OUTPUTS, -(-outputs // instances))  # balanced: no instance larger than needed
    block = -(-2 * per // TREES)
    return VoleShape(outputs, per, instances, max(1, math.ceil(math.log2(block))), block)


_CODE_LOCK = threading.Lock()  # one maker of a code at a time: a caller that finds one being made waits for it


def warm(outputs: int) -> None:
    """Make the public code of a VOLE of ``outputs`` elements on a thread now (0.6 s at 10⁷ here), so that the
    encodings find it made: for a party that knows the VOLE's size while it waits on its peer."""
    sh = shape(outputs)
    threading.Thread(target=_code, args=(sh.per, sh.leaves - sh.per), name="vole-code", daemon=True).start()


def _code(per: int, size: int) -> tuple[np.ndarray, bytes, bytes]:
    """The public expand-convolute code of ``per`` outputs with a parity part of ``size`` rows (made once)."""
    with _CODE_LOCK:
        return _make_code(per, size)


@lru_cache(maxsize=4)
def _make_code(per: int, size: int) -> tuple[np.ndarray, bytes, bytes]:
    """The public expand-convolute code of ``per`` outputs with a parity part of ``size`` rows.

    From AES-128-CTR under a fixed public key per size (the code must be the same on both
    sides and independent of any secret). Expander: of the 7 indices per output, 4 are
    "regular" (one in each quarter of the parity part) and 3 uniform, as libOTe's regular
    expander splits them.
    """
    seed = _DOMAIN + b"/exconv7x24/" + per.to_bytes(8, "little") + size.to_bytes(8, "little")
    key = hashlib.sha256(seed).digest()[:16]
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    rnd = np.frombuffer(stream.update(bytes(8 * per * EXPANDER)), np.uint64).reshape(per, EXPANDER)
    uni = EXPANDER // 2
    reg = EXPANDER - uni
    step = size // reg
    idx = np.empty((per, EXPANDER), np.uint32)
    regions = np.arange(reg, dtype=np.uint64) * np.uint64(step)
    idx[:, :reg] = (rnd[:, :reg] % np.uint64(step) + regions).astype(np.uint32)
    idx[:, reg:] = (rnd[:, reg:] % np.uint64(size)).astype(np.uint32)
    c1 = stream.update(bytes(3 * size))
    c2 = stream.update(bytes(3 * size))
    return idx, c1, c2


def _encode(e: np.ndarray, per: int) -> np.ndarray:
    """``G(e)``: one instance's ``N ≥ 2·per`` elements dual-encoded to ``per`` (``e`` is overwritten)."""
    x = e.reshape(-1, 16)
    if not (x.flags.c_contiguous and x.flags.writeable):
        x = np.array(x, np.uint8, order="C")
    idx, c1, c2 = _code(per, len(x) - per)
    _lib().exconv_encode(x, per, idx, c1, c2, EXPANDER)
    return x[:per]


def _children(level: np.ndarray) -> np.ndarray:
    """One GGM level down: ``(T, k, 16)`` → ``(T, 2k, 16)``, children ``AES_{k_b}(s) ⊕ s``."""
    out = np.empty((level.shape[0], 2 * level.shape[1], 16), np.uint8)
    out[:, 0::2] = aes_prf(_GGM_KEYS[0], level) ^ level
    out[:, 1::2] = aes_prf(_GGM_KEYS[1], level) ^ level
    return out


def _xor_sides(level: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XOR of the left (even) and of the right (odd) nodes of a level, per tree (``T × 16`` each)."""
    w = level.view(np.uint64)
    return (np.bitwise_xor.reduce(w[:, 0::2], axis=1).view(np.uint8),
            np.bitwise_xor.reduce(w[:, 1::2], axis=1).view(np.uint8))


def _tree_sums(leaves: np.ndarray) -> np.ndarray:
    """The XOR of each tree's leaves (``T × k × 16`` → ``T × 16``): each 64-bit half reduced along a contiguous
    row with a stride of two words (five times faster than reducing the ``k`` axis of ``T × k × 2`` words)."""
    w = np.ascontiguousarray(leaves).view(np.uint64).reshape(len(leaves), -1)
    out = np.empty((len(leaves), 2), np.uint64)
    np.bitwise_xor.reduce(w[:, 0::2], axis=1, out=out[:, 0])
    np.bitwise_xor.reduce(w[:, 1::2], axis=1, out=out[:, 1])
    return out.view(np.uint8)


def _ot_hash(rows: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``H(g, row)``: BLAKE2b-128 of each 16-byte row with its global OT index (a correlation-robust hash)."""
    buf = np.empty((len(rows), 24), np.uint8)
    buf[:, :16] = rows
    buf[:, 16:] = index.astype("<u8").reshape(-1, 1).view(np.uint8)
    return hash_records(buf, 16, b"vflcrypto-vole")


def random_delta_bits() -> np.ndarray:
    """The sender's secret Δ: 128 bits (0/1 bytes) from ``os.urandom``."""
    return np.frombuffer(os.urandom(BITS), np.uint8) & 1


def level_keys(q: np.ndarray, delta: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two keys of each GGM-level OT: ``H(g, q_g)`` for side 0 and ``H(g, q_g ⊕ Δ)`` for side 1.

    The receiver holds ``t_g = q_g ⊕ r_g·Δ``, so exactly the key of its choice ``r_g``.
    """
    return _ot_hash(q, index), _ot_hash(q ^ delta, index)


def _columns(keys: np.ndarray, rows: int) -> np.ndarray:
    return np.stack([ot.prg(k, 0, rows // 8) for k in keys])


@dataclass
class VoleReceiver:
    """The side that ends with ``(A, C)``; it also holds both keys of the 128 base OTs."""

    shape: VoleShape
    base: ot.BaseOtSender = field(default_factory=ot.BaseOtSender.create)
    alpha: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    beta: np.ndarray = field(default_factory=lambda: np.zeros((0, 16), np.uint8))
    choice: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    t_rows: np.ndarray = field(default_factory=lambda: np.zeros((0, 16), np.uint8))

    @property
    def point(self) -> bytes:
        """Message 1: the base-OT point ``A``."""
        return self.base.point

    def extend(self, sender_points: bytes) -> bytes:
        """Message 3 from the sender's base-OT points: the IKNP matrix (128 columns of ``M`` bits)."""
        sh = self.shape
        k0, k1 = self.base.keys(sender_points, BITS)
        total = sh.instances * TREES
        self.alpha = (np.frombuffer(os.urandom(8 * total), np.uint64) % np.uint64(sh.block)).astype(np.int64)
        beta_bits = np.frombuffer(os.urandom(total * BITS), np.uint8) & 1
        self.beta = np.packbits(beta_bits.reshape(total, BITS), axis=1, bitorder="little")
        path = (self.alpha.reshape(-1, 1) >> np.arange(sh.depth - 1, -1, -1)) & 1  # level 1..h, MSB first
        ggm_choice = (1 - path).astype(np.uint8)  # the side off the path
        choice = np.zeros(sh.cots, np.uint8)  # per instance: the bits of its β's, then its GGM choices
        choice[: sh.instances * sh.cots_per_instance] = np.concatenate(
            [beta_bits.reshape(sh.instances, -1), ggm_choice.reshape(sh.instances, -1)], axis=1).ravel()
        self.choice = choice
        t_cols = _columns(k0, sh.cots)
        bits = np.packbits(choice, bitorder="little")
        u = t_cols ^ _columns(k1, sh.cots) ^ bits[None, :]
        self.t_rows = ot.transpose_bits(t_cols)
        return u.tobytes()

    def finish(self, sums: bytes, corrections: bytes) -> tuple[np.ndarray, np.ndarray]:
        """From the sender's GGM message: ``(A, C)``, ``outputs × 16`` each."""
        sh = self.shape
        h = sh.depth
        want_sums = sh.instances * TREES * h * 2 * 16
        if len(sums) != want_sums or len(corrections) != sh.instances * TREES * 16:
            raise ProtocolError(f"the VOLE sender's tree message has {len(sums)} + {len(corrections)} bytes; "
                                f"expected {want_sums} + {sh.instances * TREES * 16}")
        sums_a = np.frombuffer(sums, np.uint8).reshape(sh.instances, TREES, h, 2, 16)
        corr = np.frombuffer(corrections, np.uint8).reshape(sh.instances, TREES, 16)
        a = np.empty((sh.instances * sh.per, 16), np.uint8)
        c = np.empty_like(a)

        scratch = threading.local()

        def one(inst: int) -> None:
            base = inst * sh.cots_per_instance
            t_beta = self.t_rows[base : base + TREES * BITS]
            gamma = _pack(t_beta)  # γ_i = δ_i ⊕ Δ·β_i
            g_index = base + TREES * BITS + np.arange(TREES * h)
            key = _ot_hash(self.t_rows[g_index], g_index).reshape(TREES, h, 16)
            r = self.choice[g_index].reshape(TREES, h)
            got = sums_a[inst][np.arange(TREES)[:, None], np.arange(h)[None, :], r] ^ key  # K_l^{r}
            alpha = self.alpha[inst * TREES : (inst + 1) * TREES]
            leaves = np.ascontiguousarray(_punctured(got, alpha, h)[:, : sh.block])
            rows = np.arange(TREES)
            known = _tree_sums(leaves)  # the punctured slot is zero
            leaves[rows, alpha] = gamma ^ corr[inst] ^ known
            noise = getattr(scratch, "noise", None)  # one buffer per thread, zeroed again: no fresh pages to fault in
            if noise is None:
                noise = scratch.noise = np.zeros_like(leaves)
            else:
                noise.fill(0)
            noise[rows, alpha] = self.beta[inst * TREES : (inst + 1) * TREES]
            part = slice(inst * sh.per, (inst + 1) * sh.per)
            a[part] = _encode(noise.reshape(-1, 16), sh.per)
            c[part] = _encode(leaves.reshape(-1, 16), sh.per)

        # instances on two threads (their C parts release the GIL): the receiver works alone at this step
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(one, range(sh.instances)))
        return a[: sh.outputs], c[: sh.outputs]


def _expand(seeds: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray]:
    """The sender's GGM trees: leaves ``(T, 2^h, 16)`` and level sums ``(T, h, 2, 16)`` (left, right).

    In C with AES-NI where the CPU has it (``_vole.ggm_expand``), else level by level in numpy
    over OpenSSL's AES; the same bytes (tests/test_vole.py).
    """
    trees = len(seeds)
    lib = _native()
    if lib is not None and lib.has_aes():
        leaves, sums = lib.ggm_expand(np.ascontiguousarray(seeds), h, *_GGM_KEYS)
        return (np.frombuffer(leaves, np.uint8).reshape(trees, 1 << h, 16),  # a writable bytearray
                np.frombuffer(sums, np.uint8).reshape(trees, h, 2, 16).copy())
    level = seeds.reshape(trees, 1, 16)
    out = np.empty((trees, h, 2, 16), np.uint8)
    for lv in range(h):
        level = _children(level)
        out[:, lv, 0], out[:, lv, 1] = _xor_sides(level)
    return level, out


def _punctured(got: np.ndarray, alpha: np.ndarray, h: int) -> np.ndarray:
    """Every leaf but ``α``'s (left zero) of each tree, from the level sums off the path (C or numpy)."""
    lib = _native()
    if lib is not None and lib.has_aes():
        out = lib.ggm_punctured(np.ascontiguousarray(got), np.ascontiguousarray(alpha, np.int64), h, *_GGM_KEYS)
        return np.frombuffer(out, np.uint8).reshape(len(alpha), 1 << h, 16)  # a writable bytearray
    return _punctured_numpy(got, alpha, h)


def _punctured_numpy(got: np.ndarray, alpha: np.ndarray, h: int) -> np.ndarray:
    trees = len(alpha)
    rows = np.arange(trees)
    level = np.zeros((trees, 1, 16), np.uint8)
    for lv in range(1, h + 1):
        parent = alpha >> (h - lv + 1)  # the unknown node of the level above
        level = _children(level)
        level[rows, 2 * parent] = 0
        level[rows, 2 * parent + 1] = 0
        off = 1 - ((alpha >> (h - lv)) & 1)  # the side off the path
        left, right = _xor_sides(level)
        level[rows, 2 * parent + off] = got[:, lv - 1] ^ np.where(off[:, None] == 0, left, right)
    return level


@dataclass
class VoleSender:
    """The side that ends with ``(B, Δ)``; it chooses in the 128 base OTs with the bits of Δ."""

    shape: VoleShape
    delta_bits: np.ndarray = field(default_factory=lambda: random_delta_bits())
    keys: np.ndarray = field(default_factory=lambda: np.zeros((0, 16), np.uint8))
    level_sums: np.ndarray = field(default_factory=lambda: np.zeros((0, 16), np.uint8))  # before the OT keys

    @property
    def delta(self) -> np.ndarray:
        """Δ as one GF(2¹²⁸) element (16 bytes)."""
        return np.packbits(self.delta_bits, bitorder="little")

    def choose(self, receiver_point: bytes) -> bytes:
        """Message 2: the base-OT points for the bits of Δ."""
        points, self.keys = ot.BaseOtReceiver.choose(receiver_point, self.delta_bits)
        return points

    def expand(self, matrix: bytes) -> tuple[bytes, bytes, np.ndarray]:
        """From the IKNP matrix: message 4 ``(level sums, corrections)`` and this side's ``B``."""
        sh = self.shape
        h = sh.depth
        if len(matrix) != BITS * sh.cots // 8:
            raise ProtocolError(f"the VOLE receiver's IKNP matrix has {len(matrix)} bytes; "
                                f"expected {BITS * sh.cots // 8}")
        u = np.frombuffer(matrix, np.uint8).reshape(BITS, -1)
        q_cols = _columns(self.keys, sh.cots)
        q_cols ^= u * self.delta_bits.reshape(-1, 1)
        q = ot.transpose_bits(q_cols)
        delta = self.delta
        sums_out = np.empty((sh.instances, TREES, h, 2, 16), np.uint8)
        plain = np.empty_like(sums_out)
        corr_out = np.empty((sh.instances, TREES, 16), np.uint8)
        b = np.empty((sh.instances * sh.per, 16), np.uint8)  # filled in place: no concatenation of the parts
        for inst in range(sh.instances):
            base = inst * sh.cots_per_instance
            delta_i = _pack(q[base : base + TREES * BITS])
            level, sums = _expand(np.frombuffer(os.urandom(TREES * 16), np.uint8).reshape(TREES, 16), h)
            g_index = base + TREES * BITS + np.arange(TREES * h)
            plain[inst] = sums
            key0, key1 = level_keys(q[g_index], delta, g_index)
            sums[:, :, 0] ^= key0.reshape(TREES, h, 16)
            sums[:, :, 1] ^= key1.reshape(TREES, h, 16)
            sums_out[inst] = sums
            leaves = np.ascontiguousarray(level[:, : sh.block])  # one copy: summed, then encoded in place
            corr_out[inst] = delta_i ^ _tree_sums(leaves)
            b[inst * sh.per : (inst + 1) * sh.per] = _encode(leaves.reshape(-1, 16), sh.per)
        self.level_sums = plain
        return sums_out.tobytes(), corr_out.tobytes(), b[: sh.outputs]
