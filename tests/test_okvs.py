"""The random-band OKVS (``vflcrypto.psi.okvs`` over the C extension ``_okvs``).

Encoding is checked against references that do not use the C code: the dense ``n × m``
GF(2) matrix built in numpy from the rows (its product with ``P`` must give the values)
and the rank of that matrix (encoding must succeed exactly when the rows are independent);
the row derivation against a per-item AES evaluation of the documented PRF scheme. Hostile
inputs (duplicate keys, empty bands, bad shapes, dtypes and starts) must fail cleanly and
leave the caller's arrays untouched.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given, settings
from hypothesis import strategies as st
from simd_paths import assert_capped_paths_agree

from vflcrypto.errors import ProtocolError
from vflcrypto.psi import okvs
from vflcrypto.psi.kkrt import native_module

Rows = tuple[np.ndarray, np.ndarray, np.ndarray]


def _keyed_rows(n: int, m: int | None = None) -> tuple[Rows, int]:
    m = okvs.columns(n) if m is None else m
    h0 = np.frombuffer(os.urandom(16 * n), np.uint8).reshape(n, 16)
    return okvs.rows(h0, os.urandom(16), m), m


def _random_rows(rng: np.random.Generator, n: int, m: int, w: int, density: float = 0.5) -> Rows:
    """Rows straight from a generator (any width, any bit density), for the C functions."""
    starts = rng.integers(0, m - w + 1, n, dtype=np.int64)
    bits = (rng.random((n, w)) < density).astype(np.uint8)
    bands = np.packbits(bits, axis=1, bitorder="little").view("<u8").astype(np.uint64)
    return starts, bands, rng.integers(0, 256, (n, 16), dtype=np.uint8)


def _dense(starts: np.ndarray, bands: np.ndarray, m: int) -> np.ndarray:
    """The ``n × m`` 0/1 matrix of the rows: bit k of a band (bit k % 64 of word k // 64) at column s + k."""
    n, words = bands.shape
    bits = np.unpackbits(bands.astype("<u8").view(np.uint8).reshape(n, 8 * words), axis=1, bitorder="little")
    dense = np.zeros((n, m), np.uint8)
    dense[np.arange(n)[:, None], starts[:, None] + np.arange(64 * words)] = bits
    return dense


def _times(dense: np.ndarray, P: np.ndarray) -> np.ndarray:
    """``dense · P`` over GF(2), each of P's rows a 128-bit vector: the XOR of the selected rows."""
    p_bits = np.unpackbits(P, axis=1).astype(np.int64)
    return np.packbits((dense.astype(np.int64) @ p_bits) & 1, axis=1)


def _rank(dense: np.ndarray) -> int:
    """GF(2) rank, rows as Python integers (an elimination independent of the C code's)."""
    pivots: dict[int, int] = {}
    for row in dense:
        x = int.from_bytes(np.packbits(row).tobytes(), "big")
        while x and (top := x.bit_length() - 1) in pivots:
            x ^= pivots[top]
        if x:
            pivots[top] = x
    return len(pivots)


def _xor_of_windows(P: np.ndarray, starts: np.ndarray, bands: np.ndarray) -> np.ndarray:
    """Each row's value from numpy alone: the XOR of ``P[s + k]`` over the set bits ``k`` of its band."""
    n, words = bands.shape
    bits = np.unpackbits(bands.astype("<u8").view(np.uint8).reshape(n, 8 * words), axis=1, bitorder="little")
    windows = P[starts[:, None] + np.arange(64 * words)]  # n × w × 16: every row's whole window
    return np.bitwise_xor.reduce(np.where(bits[:, :, None].astype(bool), windows, 0), axis=1)


def test_the_extension_is_built_here() -> None:
    assert okvs.available(), okvs.why_not()
    assert okvs.why_not() is None


def test_columns_are_one_point_one_n_plus_the_band() -> None:
    assert [okvs.columns(n) for n in (0, 1, 10, 1000)] == [256, 258, 267, 1356]
    with pytest.raises(ProtocolError, match="non-negative"):
        okvs.columns(-1)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 100, 5000, 70_000])  # 70,000: P > 1 MiB, the bucket-ordered decode
def test_decoding_the_encoding_gives_the_values(n: int) -> None:
    (starts, bands, values), m = _keyed_rows(n)
    P = okvs.encode(starts, bands, values, m)
    assert P.shape == (m, 16) and P.dtype == np.uint8
    assert np.array_equal(okvs.decode(P, starts, bands), values)


def test_rows_follow_the_documented_prf() -> None:
    """B_c = AES_key(h0 with c XORed into byte 0): start from B_0, band B_1 ‖ B_2 with bit 0 set, value B_3."""
    n, m = 50, 1000
    h0 = np.frombuffer(os.urandom(16 * n), np.uint8).reshape(n, 16)
    key = os.urandom(16)
    starts, bands, values = okvs.rows(h0, key, m)
    assert starts.dtype == np.int64 and bands.dtype == np.uint64 and values.dtype == np.uint8
    assert bands.shape == (n, okvs.BAND // 64) and values.shape == (n, 16)

    def aes(block: bytes) -> bytes:
        enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()  # one block: the PRF
        return enc.update(block) + enc.finalize()

    for i in range(n):
        b = [aes(bytes([h0[i, 0] ^ c]) + h0[i, 1:].tobytes()) for c in range(4)]
        assert starts[i] == int.from_bytes(b[0][:8], "little") % (m - okvs.BAND + 1)
        band = int.from_bytes(b[1] + b[2], "little") | 1
        assert band == sum(int(word) << (64 * k) for k, word in enumerate(bands[i]))
        assert values[i].tobytes() == b[3]
    assert okvs.rows(h0, key, m)[0].tolist() == starts.tolist()  # deterministic under one key
    assert okvs.rows(h0, os.urandom(16), m)[0].tolist() != starts.tolist()


@pytest.mark.parametrize(("n", "m"), [(0, 256), (1, 256), (7, 300), (1000, 1357), (70_001, 77_357)])
def test_the_compiled_rows_are_the_numpy_rows(monkeypatch: pytest.MonkeyPatch, n: int, m: int) -> None:
    """The AES-NI rows (where this CPU has them) equal the numpy rows over OpenSSL's AES, which the test above
    checks against the documented PRF block by block."""
    h0 = np.frombuffer(os.urandom(16 * n), np.uint8).reshape(n, 16)
    key = os.urandom(16)
    made = okvs.rows(h0, key, m)
    monkeypatch.setenv("VFLCRYPTO_NATIVE", "0")
    plain = okvs.rows(h0, key, m)
    for a, b in zip(made, plain, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    monkeypatch.delenv("VFLCRYPTO_NATIVE")
    native = native_module("_okvs")
    if native is not None:
        with pytest.raises(ValueError, match="rows"):
            native.rows(bytes(15), key, m, okvs.BAND)  # not whole hashes
        with pytest.raises(ValueError, match="rows"):
            native.rows(h0.tobytes(), key, m, 192)  # a band of 1.5 AES blocks


def test_the_encoding_solves_the_dense_system_whatever_the_row_order() -> None:
    (starts, bands, values), m = _keyed_rows(300)
    dense = _dense(starts, bands, m)
    P = okvs.encode(starts, bands, values, m)
    assert np.array_equal(_times(dense, P), values)
    assert np.count_nonzero(P.any(axis=1)) <= len(values)  # only pivot columns are set
    order = np.random.default_rng().permutation(len(values))
    shuffled = okvs.encode(starts[order], bands[order], values[order], m)
    assert np.array_equal(_times(dense, shuffled), values)


def test_fill_sets_the_free_columns_only() -> None:
    (starts, bands, values), m = _keyed_rows(200)
    fill = np.frombuffer(os.urandom(16 * m), np.uint8).reshape(m, 16)
    P = okvs.encode(starts, bands, values, m, fill=fill)
    assert np.array_equal(_times(_dense(starts, bands, m), P), values)
    assert np.count_nonzero((P == fill).all(axis=1)) >= m - len(values)  # the m - n free columns kept
    with pytest.raises(ProtocolError, match="fill must be"):
        okvs.encode(starts, bands, values, m, fill=fill[1:])


@pytest.mark.parametrize("same_value", [False, True])
def test_a_duplicate_key_fails(same_value: bool) -> None:
    """Identical rows are dependent: a failure even when the values agree (the caller deduplicates)."""
    h0 = np.frombuffer(os.urandom(16 * 20), np.uint8).reshape(20, 16).copy()
    h0[7] = h0[3]
    m = okvs.columns(20)
    starts, bands, values = okvs.rows(h0, os.urandom(16), m)
    if not same_value:
        values = values.copy()
        values[7, 0] ^= 1
    kept = [a.copy() for a in (starts, bands, values)]
    with pytest.raises(okvs.OkvsFailure, match=r"singular.*rerun with a fresh key"):
        okvs.encode(starts, bands, values, m)
    assert all(np.array_equal(a, b) for a, b in zip(kept, (starts, bands, values), strict=True))


def test_an_empty_band_or_too_many_rows_fail() -> None:
    (starts, bands, values), m = _keyed_rows(50)
    bands = bands.copy()
    bands[5] = 0
    with pytest.raises(okvs.OkvsFailure):
        okvs.encode(starts, bands, values, m)
    (starts, bands, values), m = _keyed_rows(300, m=okvs.BAND)  # 300 rows, 256 columns: rank ≤ 256
    with pytest.raises(okvs.OkvsFailure):
        okvs.encode(starts, bands, values, m)


def _set(a: np.ndarray, i: int, v: int) -> np.ndarray:
    a = a.copy()
    a[i] = v
    return a


_BAD_ENCODE: list[tuple[str, Callable[[np.ndarray, np.ndarray, np.ndarray, int], tuple[Any, ...]]]] = [
    ("starts must be a 1-D int64", lambda s, b, v, m: (s.astype(np.int32), b, v, m)),
    ("starts must be a 1-D int64", lambda s, b, v, m: (s.reshape(-1, 1), b, v, m)),
    ("bands must be an n × w/64 uint64", lambda s, b, v, m: (s, b.astype(np.int64), v, m)),
    ("bands must be an n × w/64 uint64", lambda s, b, v, m: (s, b[1:], v, m)),
    ("bands must be an n × w/64 uint64", lambda s, b, v, m: (s, np.zeros((len(s), 9), np.uint64), v, m)),
    ("values must be an n × 16 uint8", lambda s, b, v, m: (s, b, v[:, :15], m)),
    ("values must be an n × 16 uint8", lambda s, b, v, m: (s, b, v.astype(np.int8), m)),
    ("values must be an n × 16 uint8", lambda s, b, v, m: (s, b, v.tolist(), m)),
    (r"start 1101 of row 4 is outside 0..m-w = 0..1100", lambda s, b, v, m: (_set(s, 4, m - 255), b, v, m)),
    (r"start -1 of row 0 is outside", lambda s, b, v, m: (_set(s, 0, -1), b, v, m)),
    (r"need m >= w", lambda s, b, v, m: (np.zeros_like(s), b, v, 255)),
]


@pytest.mark.parametrize(("message", "spoil"), _BAD_ENCODE)
def test_malformed_rows_are_refused_and_nothing_is_written(message: str, spoil: Callable[..., tuple[Any, ...]]
                                                           ) -> None:
    (starts, bands, values), m = _keyed_rows(1000)
    assert m == 1356
    args = spoil(starts, bands, values, m)
    kept = [np.array(a, copy=True) for a in args[:3]]
    with pytest.raises(ProtocolError, match=message):
        okvs.encode(*args)
    assert all(np.array_equal(a, b) for a, b in zip(kept, args[:3], strict=True))


def test_decode_refuses_malformed_input() -> None:
    (starts, bands, values), m = _keyed_rows(100)
    starts = _set(starts, 0, m - okvs.BAND)  # a row reaching the last column
    P = okvs.encode(starts, bands, values, m)
    for bad_p, message in ((P[:, :15], "m × 16 uint8"), (P.astype(np.int16), "m × 16 uint8"),
                           (P[: m - 1], "outside 0..m-w")):
        with pytest.raises(ProtocolError, match=message):
            okvs.decode(bad_p, starts, bands)
    with pytest.raises(ProtocolError, match="starts must be"):
        okvs.decode(P, starts.astype(np.uint64), bands)
    with pytest.raises(ProtocolError, match="bands must be"):
        okvs.decode(P, starts, bands[:, :2].astype(np.int64))


def test_the_inputs_stay_untouched_and_non_contiguous_rows_work() -> None:
    (starts, bands, values), m = _keyed_rows(500)
    wide = np.zeros((500, 2 * bands.shape[1]), np.uint64)
    wide[:, ::2] = bands
    strided = wide[:, ::2]  # the same bands, not contiguous
    kept = [a.copy() for a in (starts, bands, values)]
    P = okvs.encode(starts, strided, values, m)
    assert np.array_equal(okvs.decode(P, starts[::-1], strided[::-1]), values[::-1])
    assert all(np.array_equal(a, b) for a, b in zip(kept, (starts, bands, values), strict=True))
    assert not P.flags.writeable  # a view of the returned bytes


def test_the_c_functions_check_lengths() -> None:
    from vflcrypto.psi import _okvs  # type: ignore[attr-defined]

    s, b, v = np.zeros(3, np.int64), np.ones((3, 4), np.uint64), np.zeros((3, 16), np.uint8)
    for args, message in (((s, b, v, 300, 96), "multiple of 64 from 64 to 512"),
                          ((s, b, v, 300, 576), "multiple of 64 from 64 to 512"),
                          ((s.tobytes()[:-1], b, v, 300, 256), "int64s"),
                          ((s, b[:2], v, 300, 256), "n \\* w / 64"),
                          ((s, b, v[:2], 300, 256), "values must be n = 3"),
                          ((s, b, v, -1, 256), "need m >= w"),
                          ((s, b, v, 300, 256, bytes(16)), "fill must be m = 300")):
        with pytest.raises(ValueError, match=message):
            _okvs.encode(*args)
    with pytest.raises(ValueError, match="16-byte values"):
        _okvs.decode(bytes(17), s, b, 256)
    with pytest.raises(_okvs.SingularError):
        _okvs.encode(s, b, v, 300, 256)  # three identical rows
    assert _okvs.decode(bytes(16 * 256), s, b, 256) == bytes(48)
    assert _okvs.encode(s[:0], b[:0], v[:0], 0, 256) == b""  # no rows, no columns


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), w=st.sampled_from([64, 128, 192, 256, 320, 384, 448, 512]),
       n=st.integers(0, 40), extra=st.integers(0, 80), density=st.sampled_from([0.5, 0.05, 0.01]),
       duplicate=st.booleans())
def test_generated_systems_are_solved_exactly_when_independent(seed: int, w: int, n: int, extra: int,
                                                               density: float, duplicate: bool) -> None:
    """Success iff the dense matrix has full row rank; then the dense product and decode both give the values."""
    from vflcrypto.psi import _okvs  # type: ignore[attr-defined]

    rng = np.random.default_rng(seed)
    m = w + extra
    starts, bands, values = _random_rows(rng, n, m, w, density)
    if duplicate and n >= 2:
        starts[-1], bands[-1] = starts[0], bands[0]
    dense = _dense(starts, bands, m)
    if _rank(dense) < n:
        with pytest.raises(_okvs.SingularError):
            _okvs.encode(starts, bands, values, m, w)
        return
    P = np.frombuffer(_okvs.encode(starts, bands, values, m, w), np.uint8).reshape(m, 16)
    assert np.array_equal(_times(dense, P), values)
    assert _okvs.decode(P, starts, bands, w) == values.tobytes()


def test_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLCRYPTO_NATIVE", "0")
    assert not okvs.available()
    assert "VFLCRYPTO_NATIVE" in (okvs.why_not() or "")
    (starts, bands, values), m = _keyed_rows(3)
    with pytest.raises(ProtocolError, match="needs the compiled OKVS extension"):
        okvs.encode(starts, bands, values, m)
    with pytest.raises(ProtocolError, match="needs the compiled OKVS extension"):
        okvs.decode(np.zeros((m, 16), np.uint8), starts, bands)


@pytest.fixture
def native() -> Any:
    mod = native_module("_okvs")
    if mod is None:
        pytest.skip("the OKVS extension is not built here (or VFLCRYPTO_NATIVE=0)")
    return mod


def _decode_cases() -> list[tuple[bytes, bytes, bytes, int]]:
    """(P, starts, bands, w) for w = 64..512 and odd row counts, dense, sparse, full and empty bands,
    rows at both ends of P; the last case per width has P over 1 MiB (the bucket-ordered decode)."""
    rng = np.random.default_rng(20240607)
    cases = []
    for w in (64, 128, 256, 512):
        for n, m in ((1, w), (7, w + 3), (333, 3 * w + 101), (1001, 70_001 + w)):
            starts, bands, _ = _random_rows(rng, n, m, w, density=float(rng.choice([0.5, 0.05, 0.95])))
            starts[0] = m - w  # the window reaching P's last element
            bands[-1] = np.uint64(2**64 - 1)  # every bit
            if n > 2:
                starts[1] = 0
                bands[1] = 0
            P = rng.integers(0, 256, (m, 16), dtype=np.uint8)
            cases.append((P.tobytes(), starts.tobytes(), bands.tobytes(), w))
    return cases


def test_simd_names_the_decode_kernel(native: Any) -> None:
    assert native.simd() in ("avx512", "avx2", "scalar")


def test_decode_gives_the_xor_of_each_window_on_this_kernel(native: Any) -> None:
    for P, starts, bands, w in _decode_cases():
        p, s = np.frombuffer(P, np.uint8).reshape(-1, 16), np.frombuffer(starts, np.int64)
        b = np.frombuffer(bands, np.uint64).reshape(len(s), w // 64)
        assert native.decode(P, starts, bands, w) == _xor_of_windows(p, s, b).tobytes(), (w, len(s))


def test_the_scalar_and_avx2_kernels_give_this_kernels_bytes(native: Any) -> None:
    """``VFLCRYPTO_SIMD=0`` at import: the scalar kernel only; ``=avx2``: AVX2 at most (on an AVX-512
    machine too). Each, in a fresh process, decodes the same rows to the same bytes as this one."""
    cases = [list(c) for c in _decode_cases()]
    here = [native.decode(*c) for c in cases]
    assert_capped_paths_agree(native, "def run(mod, case):\n    return mod.decode(*case)", cases, here)
