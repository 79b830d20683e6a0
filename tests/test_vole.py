"""Silent VOLE (vflcrypto.psi.vole) and its C arithmetic (vflcrypto.psi._vole).

GF(2^128) products are checked against Python integers (carry-less schoolbook product and
reduction by X^128 + X^7 + X^2 + X + 1), with and without the CPU's carry-less multiply;
the code against a dense numpy product built from the same public parameters, and the C
encoding on every SIMD path (AVX-512, AVX2, row by row) against the same bytes and against the
convolutions and expander written out on Python integers; the VOLE relation C = B xor Delta*A
end to end through the messages both sides really exchange.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simd_paths import assert_capped_paths_agree

from vflcrypto.errors import ProtocolError
from vflcrypto.psi import vole

pytestmark = pytest.mark.skipif(not vole.available(), reason=f"silent VOLE unavailable: {vole.why_not()}")

_POLY = (1 << 128) | 0x87


def _ref_mul(a: int, b: int) -> int:
    r = 0
    for i in range(128):
        if (b >> i) & 1:
            r ^= a << i
    for i in range(254, 127, -1):
        if (r >> i) & 1:
            r ^= _POLY << (i - 128)
    return r


def _ints(buf: bytes) -> list[int]:
    return [int.from_bytes(buf[i : i + 16], "little") for i in range(0, len(buf), 16)]


@pytest.mark.parametrize("soft", [False, True])
def test_gf128_products_equal_the_schoolbook_product(soft: bool) -> None:
    from vflcrypto.psi import _vole  # type: ignore[attr-defined]

    a, b = os.urandom(16 * 64), os.urandom(16 * 64)
    edge = (b"\xff" * 16 + (1).to_bytes(16, "little") + (1 << 127).to_bytes(16, "little") + bytes(16))
    a, b = a + edge, b + edge[::-1]
    got = _ints(_vole.gf128_mul(a, b, soft))
    assert got == [_ref_mul(x, y) for x, y in zip(_ints(a), _ints(b), strict=True)]
    scalar = os.urandom(16)
    assert _ints(_vole.gf128_mul(a, scalar, soft)) == [_ref_mul(x, _ints(scalar)[0]) for x in _ints(a)]


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=16, max_size=16), st.binary(min_size=16, max_size=16), st.binary(min_size=16, max_size=16))
def test_gf128_is_a_field_product(x: bytes, y: bytes, z: bytes) -> None:
    """Commutative, distributive over XOR, and the hardware and bitwise products agree."""
    from vflcrypto.psi import _vole  # type: ignore[attr-defined]

    xy, yx = _vole.gf128_mul(x, y), _vole.gf128_mul(y, x)
    assert xy == yx == _vole.gf128_mul(x, y, True)
    yz = bytes(p ^ q for p, q in zip(y, z, strict=True))
    lhs = _vole.gf128_mul(x, yz)
    rhs = bytes(p ^ q for p, q in zip(xy, _vole.gf128_mul(x, z), strict=True))
    assert lhs == rhs


def test_gf128_refuses_mismatched_lengths() -> None:
    from vflcrypto.psi import _vole  # type: ignore[attr-defined]

    with pytest.raises(ValueError, match="16-byte"):
        _vole.gf128_mul(bytes(17), bytes(16))
    with pytest.raises(ValueError, match="16-byte"):
        _vole.gf128_mul(bytes(32), bytes(48))


def _dense_code(per: int, size: int) -> np.ndarray:
    """The code's generator as a dense 0/1 matrix ((per + size) × per), from the same public parameters, in numpy."""
    idx, c1, c2 = vole._code(per, size)

    def convolution(coeff: bytes) -> np.ndarray:
        # x_new = x · M with M[i, j] = 1 where row i adds itself into row j (rows processed in order)
        bits = np.unpackbits(np.frombuffer(coeff, np.uint8).reshape(size, 3), axis=1, bitorder="little")
        m = np.eye(size, dtype=np.uint8)
        for i in range(size):  # row i's current value is the running combination m[:, i]
            targets = [(i + 1 + k) % size for k in range(24) if bits[i, k]] + [(i + 25) % size]
            for j in targets:
                m[:, j] ^= m[:, i]
        return m

    conv = convolution(c1) @ convolution(c2) % 2  # d ↦ d·conv1·conv2, columns = outputs
    expand = np.zeros((size, per), np.uint8)
    for i in range(per):
        for j in idx[i]:
            expand[j, i] ^= 1
    g = np.zeros((per + size, per), np.uint8)
    g[:per] = np.eye(per, dtype=np.uint8)
    g[per:] = conv @ expand % 2
    return g


def test_a_warmed_code_is_the_code() -> None:
    """vole.warm makes a shape's public code on a thread; the encodings then find that very code."""
    sh = vole.shape(20_000)
    vole._make_code.cache_clear()
    vole.warm(20_000)
    made = vole._code(sh.per, sh.leaves - sh.per)  # waits for the thread's code if it is still being made
    assert vole._make_code.cache_info().misses == 1
    vole._make_code.cache_clear()
    again = vole._code(sh.per, sh.leaves - sh.per)
    assert np.array_equal(made[0], again[0]) and made[1:] == again[1:]


@pytest.mark.parametrize(("per", "size"), [(64, 64), (48, 83)])
def test_the_code_is_the_linear_map_it_describes(per: int, size: int) -> None:
    """The C dual encoding equals e·G for G built densely in numpy from the same public parameters."""
    vole._make_code.cache_clear()
    g = _dense_code(per, size)
    e = np.frombuffer(os.urandom((per + size) * 16), np.uint8).reshape(per + size, 16)
    bits = np.unpackbits(e, axis=1)  # each of the 128 bit planes is a GF(2) vector
    want = np.packbits((g.T.astype(np.int64) @ bits.astype(np.int64)) % 2, axis=1).astype(np.uint8)
    assert np.array_equal(vole._encode(e, per), want)
    vole._make_code.cache_clear()


def test_the_code_refuses_bad_parameters() -> None:
    from vflcrypto.psi import _vole  # type: ignore[attr-defined]

    idx, c1, c2 = vole._code(64, 64)
    buf = bytearray(128 * 16)
    with pytest.raises(ValueError, match="index"):
        _vole.exconv_encode(buf, 64, idx[:10], c1, c2, 7)
    bad = idx.copy()
    bad[0, 0] = 64
    with pytest.raises(ValueError, match="out of range"):
        _vole.exconv_encode(buf, 64, bad, c1, c2, 7)
    with pytest.raises(ValueError, match="0 < m < N"):
        _vole.exconv_encode(buf, 128, idx, c1, c2, 7)


def _ref_exconv(e: bytes, m: int, idx: np.ndarray, c1: bytes, c2: bytes) -> bytes:
    """exconv_encode written out on Python integers: the whole buffer after it (the parity part convolved too)."""
    rows = _ints(e)
    x, d = rows[:m], rows[m:]
    size = len(d)
    for coeff in (c1, c2):
        for i in range(size):
            xi = d[i]  # row i's value before it adds itself anywhere (with size <= 25 it reaches itself)
            bits = int.from_bytes(coeff[3 * i : 3 * i + 3], "little") | 1 << 24  # bit 24: always row i + 25
            for k in range(25):
                if bits >> k & 1:
                    d[(i + 1 + k) % size] ^= xi
    for i, targets in enumerate(idx.tolist()):
        for j in targets:
            x[i] ^= d[j]
    return b"".join(v.to_bytes(16, "little") for v in x + d)


# parity sizes: below the convolution's reach (< 26, every row wraps around), around the SIMD kernels'
# thresholds and group boundaries (AVX2: 2 rows, from 32; AVX-512: 4 rows, from 64, 32 at a time), odd
_REF_SIZES = (1, 2, 7, 24, 25, 26, 27, 31, 32, 33, 50, 63, 64, 65, 66, 95, 96, 97, 127, 128, 129, 131, 255, 1001)


def _exconv_case(size: int, m: int, weight: int, seed: int) -> tuple[bytes, int, bytes, bytes, bytes, int]:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, size, (m, weight), dtype=np.uint32)
    return rng.bytes((m + size) * 16), m, idx.tobytes(), rng.bytes(3 * size), rng.bytes(3 * size), weight


def _exconv(case: tuple[bytes, int, bytes, bytes, bytes, int]) -> bytes:
    from vflcrypto.psi import _vole  # type: ignore[attr-defined]

    e, m, idx, c1, c2, weight = case
    buf = bytearray(e)
    _vole.exconv_encode(buf, m, idx, c1, c2, weight)
    return bytes(buf)


def test_the_encoding_is_the_convolutions_and_expander_it_describes() -> None:
    """On this process's path (``_vole.simd()``): the bytes of the code written out on Python integers."""
    from vflcrypto.psi import _vole  # type: ignore[attr-defined]

    assert _vole.simd() in ("avx512", "avx2", "scalar")
    for n, size in enumerate(_REF_SIZES):
        for m, weight in ((1, 7), (37, 7), (size + 3, 3)):
            case = _exconv_case(size, m, weight, 1000 * n + m)
            e, _, idx, c1, c2, _ = case
            want = _ref_exconv(e, m, np.frombuffer(idx, np.uint32).reshape(m, weight), c1, c2)
            assert _exconv(case) == want, (size, m, weight)


_RUN_EXCONV = """
def run(mod, case):
    e, m, idx, c1, c2, weight = case
    buf = bytearray(e)
    mod.exconv_encode(buf, m, idx, c1, c2, weight)
    return bytes(buf)
"""


def test_the_scalar_and_avx2_paths_give_the_simd_paths_bytes() -> None:
    """``VFLCRYPTO_SIMD=0`` at import: the row-by-row convolution only; ``=avx2``: AVX2 at most (on an AVX-512
    machine too). Each, in a fresh process, encodes the same inputs to the same bytes as this one: the
    reference sizes and long vectors (many passes of the kernels, then the wrapped-around tail)."""
    from vflcrypto.psi import _vole  # type: ignore[attr-defined]

    cases = [_exconv_case(size, 29, 7, size) for size in _REF_SIZES]
    cases += [_exconv_case(size, m, 7, size) for size, m in ((20_011, 9_000), (65_536, 40_000), (70_001, 70_000))]
    here = [_exconv(case) for case in cases]
    assert_capped_paths_agree(_vole, _RUN_EXCONV, [list(c) for c in cases], here)


def _run(outputs: int) -> tuple[vole.VoleReceiver, vole.VoleSender, np.ndarray, np.ndarray, np.ndarray]:
    sh = vole.shape(outputs)
    receiver, sender = vole.VoleReceiver(sh), vole.VoleSender(sh)
    matrix = receiver.extend(sender.choose(receiver.point))
    sums, corrections, b = sender.expand(matrix)
    a, c = receiver.finish(sums, corrections)
    return receiver, sender, a, b, c


@pytest.mark.parametrize("outputs", [1, 1000, 70_000])
def test_vole_correlation_holds(outputs: int) -> None:
    _, sender, a, b, c = _run(outputs)
    assert a.shape == b.shape == c.shape == (outputs, 16)
    assert np.array_equal(c, b ^ vole.gf_mul(a, sender.delta))
    # A is dense (pseudorandom), not the sparse noise: every output has bits set, about half of them
    assert (a != 0).any(axis=1).all()
    bits = np.unpackbits(a)
    assert abs(bits.mean() - 0.5) < 6 * 0.5 / np.sqrt(bits.size)  # six standard deviations


def test_a_wrong_delta_breaks_the_correlation() -> None:
    """The relation pins Δ: any other element fails it (the check above can fail)."""
    _, sender, a, b, c = _run(500)
    other = sender.delta.copy()
    other[0] ^= 1
    assert not np.array_equal(c, b ^ vole.gf_mul(a, other))


def test_the_receiver_misses_exactly_its_punctured_leaves() -> None:
    """Every GGM leaf the receiver rebuilt equals the sender's but the one at α (checked via B and C).

    With the noise at α only, C ⊕ B = Δ·A; a receiver that rebuilt a wrong leaf elsewhere
    would break the relation, so the relation test covers it; here the shape: one
    punctured leaf per tree.
    """
    sh = vole.shape(100)
    receiver = vole.VoleReceiver(sh)
    sender = vole.VoleSender(sh)
    receiver.extend(sender.choose(receiver.point))
    assert receiver.alpha.shape == (sh.instances * vole.TREES,)
    assert receiver.alpha.max() < 1 << sh.depth


def test_malformed_messages_are_refused() -> None:
    sh = vole.shape(100)
    receiver, sender = vole.VoleReceiver(sh), vole.VoleSender(sh)
    matrix = receiver.extend(sender.choose(receiver.point))
    with pytest.raises(ProtocolError, match="IKNP matrix"):
        sender.expand(matrix[:-16])
    sums, corrections, _ = sender.expand(matrix)
    with pytest.raises(ProtocolError, match="tree message"):
        receiver.finish(sums[:-1], corrections)


def test_shapes() -> None:
    assert vole.shape(1).per == vole.MIN_OUTPUTS
    big = vole.shape(10**7)
    assert big.instances == 10 and big.per == 10**6 and big.leaves >= 2 * big.per > big.leaves - vole.TREES
    assert big.block <= 1 << big.depth < 2 * big.block
    with pytest.raises(ValueError):
        vole.shape(0)


def test_the_c_trees_equal_the_numpy_trees(monkeypatch: pytest.MonkeyPatch) -> None:
    """ggm_expand / ggm_punctured (AES-NI) give the bytes of the numpy path over OpenSSL's AES."""
    lib = vole._native()
    if not lib.has_aes():
        pytest.skip("this CPU has no AES instructions: the numpy path is the one in use")
    seeds = np.frombuffer(os.urandom(5 * 16), np.uint8).reshape(5, 16)
    leaves, sums = vole._expand(seeds, 6)
    monkeypatch.setattr(lib, "has_aes", lambda: False)
    want_leaves, want_sums = vole._expand(seeds, 6)
    assert np.array_equal(leaves, want_leaves) and np.array_equal(sums, want_sums)
    alpha = np.array([0, 63, 17, 32, 5], np.int64)
    got = np.frombuffer(os.urandom(5 * 6 * 16), np.uint8).reshape(5, 6, 16)
    want = vole._punctured(got, alpha, 6)
    monkeypatch.undo()
    assert np.array_equal(vole._punctured(got, alpha, 6), want)
    with pytest.raises(ValueError, match="out of range"):
        lib.ggm_punctured(got, np.array([0, 64, 0, 0, 0], np.int64), 6, *vole._GGM_KEYS)


def test_the_vole_holds_on_the_numpy_trees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vole._native(), "has_aes", lambda: False)
    _, sender, a, b, c = _run(300)
    assert np.array_equal(c, b ^ vole.gf_mul(a, sender.delta))
