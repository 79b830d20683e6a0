"""Fixed-point encoding and packing (no encryption involved)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vflcrypto.errors import EncodingError, EncodingOverflowError
from vflcrypto.he.encoding import PackingSpec, decode_fixed, encode_fixed, pack, to_fixed_ints, unpack

N = (1 << 511) + 187  # an odd stand-in modulus; encoding does not need a real key


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=-1e12, max_value=1e12, allow_nan=False), min_size=0, max_size=20),
       st.integers(min_value=0, max_value=80))
def test_fixed_round_trip(values, frac_bits):
    x = np.array(values, dtype=np.float64)
    y = decode_fixed(encode_fixed(x, frac_bits, N), frac_bits, N)
    assert y.shape == x.shape
    assert np.all(np.abs(y - x) <= 2.0 ** -(frac_bits + 1) + 1e-300 + np.abs(x) * 2**-52)


def test_exact_rounding_for_large_frac_bits():
    assert to_fixed_ints(np.array([0.5]), 100)[0] == 1 << 99
    assert to_fixed_ints(np.array([-3.0]), 0)[0] == -3
    assert to_fixed_ints(np.array([2.5]), 0)[0] == 2  # half to even, like numpy.rint


def test_negative_values_wrap_mod_n():
    (r,) = encode_fixed(np.array([-1.0]), 0, N)
    assert r == N - 1


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_inf_refused(bad):
    with pytest.raises(EncodingError):
        encode_fixed(np.array([1.0, bad]), 16, N)


def test_overflow_refused_not_wrapped():
    with pytest.raises(EncodingOverflowError):
        encode_fixed(np.array([2.0**500]), 16, N)


def test_decode_detects_middle_third_and_huge_frac_bits():
    with pytest.raises(EncodingOverflowError):
        decode_fixed([N // 2], 0, N)
    with pytest.raises(EncodingOverflowError):
        decode_fixed([1], 600, N)


def test_pack_unpack_with_terms():
    spec = PackingSpec.create(max_terms=8, frac_bits=16, bound=100.0)
    x = np.array([[1.5, -2.0, 99.0], [-99.0, 0.0, 0.25]])
    p = pack(x, spec, N)
    assert np.allclose(unpack(p, spec, 3, 1), x)
    summed = [p[0] + p[1]]  # two packed encodings added: terms = 2
    assert np.allclose(unpack(summed, spec, 3, 2), x.sum(axis=0, keepdims=True))


def test_pack_refuses_value_beyond_value_bits():
    spec = PackingSpec.create(max_terms=8, frac_bits=16, bound=4.0)
    with pytest.raises(EncodingOverflowError):
        pack(np.array([[5.0]]), spec, N)


def test_unpack_detects_misuse_and_headroom():
    spec = PackingSpec.create(max_terms=4, frac_bits=8, bound=16.0)
    p = pack(np.array([[1.0, 2.0]]), spec, N)
    with pytest.raises(EncodingOverflowError):
        unpack(p, spec, 2, spec.terms_limit + 1)
    with pytest.raises(EncodingOverflowError):  # terms understated: slot outside its range
        unpack([p[0] + p[0]], spec, 2, 1)


def test_spec_validation():
    with pytest.raises(EncodingError):
        PackingSpec(slot_bits=10, frac_bits=4, value_bits=10, headroom_bits=2)
    spec = PackingSpec.create(max_terms=1000, frac_bits=24)
    assert spec.terms_limit == 1000
    assert PackingSpec.from_tuple(spec.to_tuple()) == spec
    assert spec.slots_for(N) == 510 // spec.slot_bits
