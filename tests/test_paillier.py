"""Paillier keys, vectors, packing, compression, parallel paths and the wire codec."""

from __future__ import annotations

from dataclasses import dataclass

import gmpy2
import numpy as np
import phe
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vflcrypto import parallel
from vflcrypto.errors import (
    CiphertextError,
    EncodingError,
    EncodingOverflowError,
    InsecureParameterError,
    KeyMismatchError,
    ProtocolError,
)
from vflcrypto.he.encoding import PackingSpec
from vflcrypto.he.paillier import (
    MIN_KEY_BITS,
    CompressedVector,
    PaillierPrivateKey,
    PaillierPublicKey,
    PaillierVector,
    compress,
    generate_keypair,
)
from vflcrypto.runtime.channel import Endpoint, LocalNetwork, run_parties
from vflcrypto.runtime.declarations import Protection, declare
from vflcrypto.runtime.wire import DecodeContext, KeyRing, decode_value, encode_value

rng = np.random.default_rng(7)  # synthetic, non-secret test data only


@declare("test.paillier_vec", sender="alice", receiver="bob", protection=Protection.CIPHERTEXT,
         key_owner="bob", reveals="nothing without bob's key (test message)")
@dataclass(frozen=True)
class _VecMsg:
    values: PaillierVector


@declare("test.paillier_pk", sender="bob", receiver="alice", protection=Protection.PUBLIC,
         reveals="bob's public key (test message)")
@dataclass(frozen=True)
class _KeyMsg:
    key: PaillierPublicKey


# --------------------------------------------------------------------------- keys


def test_keygen_sizes_and_minimum():
    pk, sk = generate_keypair(512, allow_insecure=True)
    assert pk.bits == 512 and int(pk.n).bit_length() == 512
    assert sk._p != sk._q and sk._p * sk._q == pk.n
    assert gmpy2.gcd(pk.n, (sk._p - 1) * (sk._q - 1)) == 1
    with pytest.raises(InsecureParameterError):
        generate_keypair(1024)
    with pytest.raises(InsecureParameterError):
        PaillierPublicKey(int(pk.n))


def test_repr_shows_only_fingerprint(small_paillier_keys):
    pk, sk = small_paillier_keys
    assert pk.fingerprint in repr(sk) and str(sk._p) not in repr(sk) and str(pk.n) not in repr(pk)
    assert len(pk.fingerprint) == 32


def test_private_key_never_crosses_the_wire(small_paillier_keys):
    with pytest.raises(ProtocolError):
        encode_value(small_paillier_keys[1])


def test_public_key_codec_validation(small_paillier_keys):
    pk, _ = small_paillier_keys
    data = encode_value(pk)
    with pytest.raises(InsecureParameterError):
        decode_value(data, PaillierPublicKey, DecodeContext())
    assert decode_value(data, PaillierPublicKey, DecodeContext(allow_insecure=True)) == pk
    even = PaillierPublicKey.__new__(PaillierPublicKey)
    with pytest.raises(InsecureParameterError):
        PaillierPublicKey.from_bytes((int(pk.n) + 1).to_bytes(64, "big"), allow_insecure=True)
    del even


@pytest.mark.slow
def test_2048_bit_round_trip():
    pk, sk = generate_keypair()
    assert pk.bits == MIN_KEY_BITS == 2048
    x = np.array([1.25, -3.5, 1e6])
    assert np.allclose(sk.decrypt_fixed(pk.encrypt_fixed(x)), x)
    assert np.allclose(sk.decrypt_fixed(sk.encrypt_fixed(x) + pk.encrypt_fixed(x)), 2 * x)


# --------------------------------------------------------------------------- phe interop


def test_phe_interop_both_ways(paillier_keys):
    pk, sk = paillier_keys
    phe_pub, phe_priv = sk.to_phe()
    ours = pk.encrypt([5, -7, 123456789])
    got = [phe_priv.decrypt(phe.EncryptedNumber(phe_pub, c, exponent=0)) for c in ours.ciphertexts()]
    assert got == [5, -7, 123456789]
    theirs = [phe_pub.encrypt(v) for v in (3, -11, 2**40)]
    vec = PaillierVector.from_ciphertexts(pk, [e.ciphertext(be_secure=False) for e in theirs])
    assert sk.decrypt(vec) == [3, -11, 2**40]


def test_from_phe_keys():
    phe_pub, phe_priv = phe.generate_paillier_keypair(n_length=512)
    with pytest.raises(InsecureParameterError):
        PaillierPrivateKey.from_phe(phe_priv)
    sk = PaillierPrivateKey.from_phe(phe_priv, allow_insecure=True)
    c = phe_pub.encrypt(-42).ciphertext(be_secure=False)
    assert sk.decrypt(PaillierVector.from_ciphertexts(sk.public_key, [c])) == [-42]
    assert sk.public_key.n == phe_pub.n


# --------------------------------------------------------------------------- encryption


def test_encryptions_are_randomized_within_and_across_calls(small_paillier_keys):
    """Within one call and across calls, by the public key and by the key holder (CRT path):
    randomness drawn once per call or per process would repeat in the second call."""
    pk, sk = small_paillier_keys
    a, b = pk.encrypt([1, 1]).ciphertexts()
    assert a != b
    calls = [pk.encrypt([1, 1]), pk.encrypt([1, 1]), sk.encrypt([1, 1]), sk.encrypt([1, 1]),
             pk.encrypt_fixed(np.array([0.5])), pk.encrypt_fixed(np.array([0.5]))]
    cs = [c for v in calls for c in v.ciphertexts()]
    assert len(set(cs)) == len(cs) == 10
    assert [sk.decrypt(v) for v in calls[:4]] == [[1, 1]] * 4


def test_key_holder_crt_encryption_matches(paillier_keys):
    pk, sk = paillier_keys
    vals = [0, 1, -1, 2**200, -(2**200)]
    assert sk.decrypt(sk.encrypt(vals)) == sk.decrypt(pk.encrypt(vals)) == vals
    x = rng.normal(size=7)
    assert np.allclose(sk.decrypt_fixed(sk.encrypt_fixed(x, 40)), x, atol=1e-11)


def test_rerandomize_changes_ciphertext_not_plaintext(small_paillier_keys):
    pk, sk = small_paillier_keys
    v = pk.encrypt([3, -4, 5])
    r = v.rerandomize()
    assert all(a != b for a, b in zip(v.ciphertexts(), r.ciphertexts(), strict=True))
    assert sk.decrypt(r) == [3, -4, 5]


def test_encrypt_refuses_floats_nan_and_overflow(small_paillier_keys):
    pk, _ = small_paillier_keys
    with pytest.raises(EncodingError):
        pk.encrypt(np.array([1.5]))
    with pytest.raises(EncodingError):
        pk.encrypt_fixed(np.array([np.nan]))
    with pytest.raises(EncodingError):
        pk.encrypt_fixed(np.array([np.inf]))
    with pytest.raises(EncodingOverflowError):
        pk.encrypt_fixed(np.array([2.0**500]), 32)
    with pytest.raises(EncodingOverflowError):
        pk.encrypt([int(pk.n) // 2])


# --------------------------------------------------------------------------- arithmetic


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(-(2**60), 2**60), min_size=1, max_size=6), st.data())
def test_homomorphic_ops_match_ints(small_paillier_keys, a, data):
    pk, sk = small_paillier_keys
    b = data.draw(st.lists(st.integers(-(2**60), 2**60), min_size=len(a), max_size=len(a)))
    k = data.draw(st.integers(-(2**40), 2**40))
    va, vb = pk.encrypt(a), pk.encrypt(b)
    assert sk.decrypt(va + vb) == [x + y for x, y in zip(a, b, strict=True)]
    assert sk.decrypt(va - vb) == [x - y for x, y in zip(a, b, strict=True)]
    assert sk.decrypt(-va) == [-x for x in a]
    assert sk.decrypt(va * k) == [x * k for x in a]
    assert sk.decrypt(va * np.array(b)) == [x * y for x, y in zip(a, b, strict=True)]
    assert sk.decrypt(va + np.array(b)) == [x + y for x, y in zip(a, b, strict=True)]
    assert sk.decrypt(va.sum()) == [sum(a)]


def test_fixed_point_scales_align(small_paillier_keys):
    pk, sk = small_paillier_keys
    x, y = np.array([1.5, -2.25]), np.array([0.125, 4.0])
    vx, vy = pk.encrypt_fixed(x, 8), pk.encrypt_fixed(y, 20)
    s = vx + vy
    assert s.frac_bits == 20
    assert np.allclose(sk.decrypt_fixed(s), x + y)
    p = vx * 2.5
    assert p.frac_bits == 8 + 32
    assert np.allclose(sk.decrypt_fixed(p), x * 2.5)
    assert np.allclose(sk.decrypt_fixed(p + vy), x * 2.5 + y)
    assert np.allclose(sk.decrypt_fixed(vx * np.array([-1.0, 3.0])), x * [-1, 3])
    assert np.allclose(sk.decrypt_fixed(1.0 - vx), 1.0 - x)


def test_decode_detects_frac_bits_beyond_modulus(small_paillier_keys):
    pk, sk = small_paillier_keys
    v = pk.encrypt_fixed(np.array([1.0]), 300)
    with pytest.raises(EncodingOverflowError):
        sk.decrypt_fixed(v * 1.5 * 1.5 * 1.5 * 1.5 * 1.5 * 1.5 * 1.5 * 1.5 * 1.5)


def test_indexing_slicing_concat(small_paillier_keys):
    pk, sk = small_paillier_keys
    v = pk.encrypt(list(range(10)))
    assert sk.decrypt(v[3]) == [3]
    assert sk.decrypt(v[-1]) == [9]
    assert sk.decrypt(v[2:5]) == [2, 3, 4]
    assert sk.decrypt(v[np.array([9, 0, 0])]) == [9, 0, 0]
    assert sk.decrypt(v[np.arange(10) % 3 == 0]) == [0, 3, 6, 9]
    w = PaillierVector.concat([v[:2], pk.encrypt_fixed(np.array([0.5]), 4)])
    assert w.frac_bits == 4 and np.allclose(sk.decrypt_fixed(w), [0, 1, 0.5])
    with pytest.raises(IndexError):
        v[10]


@pytest.mark.parametrize("rows,cols", [(1, 1), (7, 3), (60, 2)])
def test_dot_matches_numpy(small_paillier_keys, rows, cols):
    pk, sk = small_paillier_keys
    d = rng.normal(size=rows)
    X = rng.normal(scale=3.0, size=(rows, cols))
    X[0, 0] = 0.0
    out = pk.encrypt_fixed(d, 24).dot(X)
    assert len(out) == cols and out.frac_bits == 24 + 32
    assert np.allclose(sk.decrypt_fixed(out), d @ X, atol=1e-6)


def test_dot_integer_matrix_exact(small_paillier_keys):
    pk, sk = small_paillier_keys
    a = rng.integers(-1000, 1000, size=40)
    X = rng.integers(-(2**40), 2**40, size=(40, 3))
    assert sk.decrypt(pk.encrypt(a).dot(X)) == [int(v) for v in (a.astype(object) @ X.astype(object))]


def test_matvec_equals_the_exact_products_plain_and_folded(small_paillier_keys):
    """A short vector times a tall matrix with negative entries; folded, row p of a group sits at
    bits [p*fold, (p+1)*fold) of its plaintext (the workers' chunks are whole groups)."""
    pk, sk = small_paillier_keys
    rng = np.random.default_rng(3)
    s = [int(v) << 100 for v in rng.integers(0, 2**40, 3)]
    M = rng.integers(-2**20, 2**20, (11, 3))
    ref = [int(v) for v in M.astype(object) @ np.array(s, dtype=object)]
    vec = pk.encrypt(np.array(s, dtype=object))
    assert sk.decrypt(vec.matvec(M)) == ref
    fold = 200  # two rows per 512-bit plaintext
    got = [v % pk.n for v in sk.decrypt(vec.matvec(M, fold_bits=fold))]
    assert got == [(ref[i] + (ref[i + 1] << fold if i + 1 < 11 else 0)) % pk.n for i in range(0, 11, 2)]
    with pytest.raises(EncodingError):
        vec.matvec(M.T)


def test_sum_by_group_matches_bincount(small_paillier_keys):
    pk, sk = small_paillier_keys
    x = rng.normal(size=50)
    groups = rng.integers(0, 6, size=50)
    groups[groups == 4] = 5  # an empty group
    out = pk.encrypt_fixed(x).sum_by_group(groups, 6)
    assert np.allclose(sk.decrypt_fixed(out), np.bincount(groups, weights=x, minlength=6))
    with pytest.raises(ValueError):
        pk.encrypt_fixed(x).sum_by_group(groups, 5)


def test_selections_keep_the_bytes_and_histograms_stay_bit_identical(small_paillier_keys, monkeypatch):
    """A slice, gather, mask or element of a vector whose bytes are known carries the same rows of
    those bytes (nothing to serialize before shipping it to the pool); its histogram is the same
    integers, in process and in the pool, as the product of its ciphertexts per bin mod n**2."""
    from vflcrypto.he.paillier.blocks import ciphertexts_to_bytes

    pk, _ = small_paillier_keys
    w = pk.ciphertext_bytes
    v = PaillierVector.from_bytes(pk, pk.encrypt_fixed(rng.normal(size=60)).to_bytes(), frac_bits=32)
    assert ciphertexts_to_bytes(v._c, w) == b"".join(int(c).to_bytes(w, "big") for c in v._c)
    nsq = int(pk.n) ** 2
    for sel in (slice(3, 50), slice(None, None, 3), np.arange(59, 0, -2), np.arange(60) % 3 == 0, 7, -1):
        sub = v[sel]
        assert sub._blob == b"".join(int(c).to_bytes(w, "big") for c in sub._c)
        groups = rng.integers(0, 5, size=len(sub))
        want = [1] * 5
        for c, g in zip(sub.ciphertexts(), groups.tolist(), strict=True):
            want[g] = want[g] * c % nsq
        for workers in ("1", "2"):  # in process, and in the pool (its chunks shipped from the carried bytes)
            monkeypatch.setenv("VFLCRYPTO_WORKERS", workers)
            monkeypatch.setattr(parallel, "PARALLEL_MIN_COST", 0)
            assert sub[:].sum_by_group(groups, 5).ciphertexts() == want


# --------------------------------------------------------------------------- packing


def test_packed_records_round_trip_and_histogram(paillier_keys):
    pk, sk = paillier_keys
    spec = PackingSpec.create(max_terms=64, frac_bits=24, bound=64.0)
    gh = np.column_stack([rng.normal(size=40), rng.uniform(0, 1, size=40)])
    v = pk.encrypt_packed(gh, spec)
    assert len(v) == 40 and v.slots == 2 and v.packing == spec
    assert np.allclose(sk.decrypt_fixed(v), gh, atol=1e-7)
    groups = rng.integers(0, 5, size=40)
    hist = v.sum_by_group(groups, 5)
    assert hist.terms == 40
    expect = np.column_stack([np.bincount(groups, weights=gh[:, k], minlength=5) for k in range(2)])
    assert np.allclose(sk.decrypt_fixed(hist), expect, atol=1e-6)
    assert np.allclose(sk.decrypt_fixed(v.sum()), gh.sum(axis=0, keepdims=True), atol=1e-6)
    assert np.allclose(sk.decrypt_fixed(sk.encrypt_packed(gh, spec) + v), 2 * gh, atol=1e-6)


def test_dense_packing_of_flat_vector(paillier_keys):
    pk, sk = paillier_keys
    spec = PackingSpec.create(max_terms=4, frac_bits=24, bound=16.0)
    x = rng.uniform(-15, 15, size=101)
    v = pk.encrypt_fixed(x, packing=spec)
    per = spec.slots_for(pk.n)
    assert len(v) == -(-101 // per) and v.size == 101
    assert np.allclose(sk.decrypt_fixed(v), x, atol=1e-7)
    assert np.allclose(sk.decrypt_fixed(v + v + v), 3 * x, atol=1e-6)
    assert np.allclose(sk.decrypt_fixed(sk.encrypt_packed(x, spec)), x, atol=1e-7)


def test_packing_headroom_and_unsupported_ops(small_paillier_keys):
    pk, _ = small_paillier_keys
    spec = PackingSpec.create(max_terms=3, frac_bits=8, bound=4.0)
    v = pk.encrypt_packed(np.ones((4, 2)), spec)
    with pytest.raises(EncodingOverflowError):
        v + v + v + v
    with pytest.raises(EncodingOverflowError):
        v.sum()  # 4 terms > 3
    with pytest.raises(EncodingOverflowError):
        v.sum_by_group(np.zeros(4, dtype=int), 2)
    for op in (lambda: v * 2, lambda: -v, lambda: v.dot(np.ones((4, 1))), lambda: v + 1.0):
        with pytest.raises(EncodingError):
            op()
    with pytest.raises(EncodingOverflowError):
        pk.encrypt_packed(np.array([[5.0, 0.0]]), spec)
    with pytest.raises(EncodingOverflowError):  # more slots than the key holds
        pk.encrypt_packed(np.zeros((1, spec.slots_for(pk.n) + 1)), spec)


# --------------------------------------------------------------------------- compression


def test_compress_packed_histogram(paillier_keys):
    pk, sk = paillier_keys
    spec = PackingSpec.create(max_terms=64, frac_bits=20, bound=8.0)
    gh = rng.uniform(-1, 1, size=(30, 2))
    hist = pk.encrypt_packed(gh, spec).sum_by_group(rng.integers(0, 16, size=30), 16)
    c = compress(hist)
    assert isinstance(c, CompressedVector) and len(c) < len(hist)
    assert np.array_equal(sk.decompress_decrypt_fixed(c), sk.decrypt_fixed(hist))
    assert sk.decompress_decrypt(c) == sk.decrypt(hist)


def test_compress_unpacked_signed(small_paillier_keys):
    pk, sk = small_paillier_keys
    vals = [5, -3, 0, 2**30, -(2**30), 7, 8, 9, -1]
    v = pk.encrypt(vals)
    c = compress(v, bound_bits=32)
    assert len(c) < len(v)
    assert sk.decompress_decrypt(c) == vals
    f = pk.encrypt_fixed(np.array([0.5, -0.25]), 16)
    assert np.allclose(sk.decompress_decrypt_fixed(compress(f, 24)), [0.5, -0.25])
    with pytest.raises(EncodingOverflowError):
        sk.decompress_decrypt(compress(pk.encrypt([2**31 + 5, 1]), bound_bits=32))


# --------------------------------------------------------------------------- hostile inputs


def _block(pk, value):
    return int(value).to_bytes(pk.ciphertext_bytes, "big")


def test_from_bytes_rejects_bad_ciphertexts(small_paillier_keys):
    pk, sk = small_paillier_keys
    good = pk.encrypt([1]).to_bytes()
    assert sk.decrypt(PaillierVector.from_bytes(pk, good)) == [1]
    nsq = int(pk.nsquare)
    for bad in (0, nsq, nsq + 1, 2 ** (8 * pk.ciphertext_bytes) - 1):
        with pytest.raises(CiphertextError):
            PaillierVector.from_bytes(pk, good + _block(pk, bad))
    with pytest.raises(CiphertextError):  # not a unit: multiple of p
        PaillierVector.from_bytes(pk, good + _block(pk, sk._p * 12345))
    with pytest.raises(CiphertextError):  # truncated block
        PaillierVector.from_bytes(pk, good[:-1])


def test_mixing_keys_refused(small_paillier_keys):
    pk, _ = small_paillier_keys
    other, _ = generate_keypair(512, allow_insecure=True)
    with pytest.raises(KeyMismatchError):
        pk.encrypt([1]) + other.encrypt([1])
    with pytest.raises(KeyMismatchError):
        PaillierVector.concat([pk.encrypt([1]), other.encrypt([1])])


def test_wire_codec_checks_keyring(small_paillier_keys):
    pk, sk = small_paillier_keys
    other, _ = generate_keypair(512, allow_insecure=True)
    data = encode_value(pk.encrypt_fixed(np.array([1.5, -2.0]), 16))
    with pytest.raises(KeyMismatchError):
        decode_value(data, PaillierVector, DecodeContext(KeyRing([other])))
    v = decode_value(data, PaillierVector, DecodeContext(KeyRing([pk])))
    assert v.frac_bits == 16 and np.allclose(sk.decrypt_fixed(v), [1.5, -2.0])
    tampered = bytearray(data)
    tampered[-3:] = b"\x00\x00\x00"
    tampered[-pk.ciphertext_bytes:] = b"\x00" * pk.ciphertext_bytes  # ciphertext 0
    with pytest.raises(CiphertextError):
        decode_value(bytes(tampered), PaillierVector, DecodeContext(KeyRing([pk])))


def test_round_trip_over_local_network(paillier_keys):
    pk, sk = paillier_keys
    net = LocalNetwork([Endpoint("alice", "alice"), Endpoint("bob", "bob")], timeout=30,
                       allow_insecure=True)
    spec = PackingSpec.create(max_terms=8, frac_bits=16, bound=8.0)
    x = rng.uniform(-1, 1, size=(5, 2))

    def bob():
        ch = net.channels("bob")["alice"]
        ch.keyring.add(pk)
        ch.send(_KeyMsg(pk))
        msg = ch.recv(_VecMsg)
        return sk.decrypt_fixed(msg.values)

    def alice():
        ch = net.channels("alice")["bob"]
        key = ch.recv(_KeyMsg).key
        v = key.encrypt_packed(x, spec)
        ch.send(_VecMsg((v + v).rerandomize()))

    out = run_parties({"alice": alice, "bob": bob}, network=net, timeout=60)
    assert np.allclose(out["bob"], 2 * x, atol=1e-4)
    kinds = [e.kind for e in net.transcript.received()]
    assert kinds == ["test.paillier_pk", "test.paillier_vec"]


def test_compressed_vector_crosses_the_wire(paillier_keys):
    pk, sk = paillier_keys
    v = pk.encrypt([1, -2, 3, 4])
    data = encode_value(compress(v, 8))
    c = decode_value(data, CompressedVector, DecodeContext(KeyRing([pk])))
    assert sk.decompress_decrypt(c) == [1, -2, 3, 4]


# --------------------------------------------------------------------------- process pool


def test_parallel_paths_match(monkeypatch, small_paillier_keys):
    pk, sk = small_paillier_keys
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "2")
    monkeypatch.setattr(parallel, "PARALLEL_MIN_COST", 0)
    x = rng.normal(size=9)
    v = pk.encrypt_fixed(x, 24)
    assert np.allclose(sk.decrypt_fixed(v), x, atol=1e-6)
    assert np.allclose(sk.decrypt_fixed(sk.encrypt_fixed(x, 24)), x, atol=1e-6)
    X = rng.normal(size=(9, 3))
    assert np.allclose(sk.decrypt_fixed(v.dot(X)), x @ X, atol=1e-5)
    assert np.allclose(sk.decrypt_fixed(v * np.arange(-4.0, 5.0)), x * np.arange(-4.0, 5.0), atol=1e-5)
    g = np.arange(9) % 4
    assert np.allclose(sk.decrypt_fixed(v.sum_by_group(g, 4)),
                       np.bincount(g, weights=x, minlength=4), atol=1e-6)


def test_big_python_int_multipliers(small_paillier_keys):
    pk, sk = small_paillier_keys
    v = pk.encrypt([3, -2])
    assert sk.decrypt(v * 2**100) == [3 * 2**100, -2 * 2**100]
    assert sk.decrypt(v * np.array([2**70, -(2**70)], dtype=object)) == [3 * 2**70, 2 * 2**70]


def test_fixed_base_windows_and_growth(small_paillier_keys):
    """Every table window gives correct ``hs**a``; the window grows only with use."""
    from vflcrypto.he.encoding import encode_ints
    from vflcrypto.he.paillier import fixed_base
    from vflcrypto.he.paillier.kernels import _obfuscate_public

    pk, sk = small_paillier_keys
    fb = fixed_base._FixedBase(pk.hs, (pk.nsquare,), pk._exp_bytes)
    assert fb.prepare(0)[0] == fixed_base.TABLE_WINDOW
    for w in range(fixed_base.TABLE_WINDOW, fixed_base.TABLE_MAX_WINDOW + 1):
        table = fixed_base._fixed_base_table(pk.hs, fb.ebits, w, pk.nsquare)
        for digits in fixed_base._random_digits(3, fb.nbytes, w):
            a = sum(d << (w * k) for k, d in enumerate(digits))
            assert a < 2 ** fb.ebits
            acc = gmpy2.mpz(1)
            for row, d in zip(table, digits, strict=True):
                acc = acc * row[d] % pk.nsquare
            assert acc == gmpy2.powmod(pk.hs, a, pk.nsquare)
    assert fixed_base._pick_window(1024, 512, 8, 1000) == 8  # small jobs keep the small table
    assert fixed_base._pick_window(1024, 512, 8, 10**6) == 12  # Paillier-2048: the byte cap binds
    assert fixed_base._pick_window(256, 384, 8, 10**6) == fixed_base.TABLE_MAX_WINDOW  # OU-3072's 256-bit r
    grown = fixed_base._FixedBase(pk.hs, (pk.nsquare,), pk._exp_bytes)
    w, _ = grown.prepare(10**6)
    assert w > fixed_base.TABLE_WINDOW and grown.nbytes_held <= fixed_base.TABLE_MAX_BYTES
    vals = [0, 1, -1, 2**100]
    assert sk.decrypt(PaillierVector._make(pk, _obfuscate_public(
        grown, pk.n, pk.nsquare, encode_ints(np.array(vals, dtype=object), pk.n)))) == vals


def test_pool_reuses_shipped_vectors(monkeypatch, small_paillier_keys):
    pk, sk = small_paillier_keys
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "2")
    monkeypatch.setattr(parallel, "PARALLEL_MIN_COST", 0)
    from vflcrypto.he.paillier import blocks

    x = rng.normal(size=12)
    v = PaillierVector.from_bytes(pk, pk.encrypt_fixed(x, 24).to_bytes(), frac_bits=24)
    g = np.arange(12) % 3
    expect = np.bincount(g, weights=x, minlength=3)
    for _ in range(3):  # first call ships the chunks, later ones send the token only
        assert np.allclose(sk.decrypt_fixed(v.sum_by_group(g, 3)), expect, atol=1e-6)
    blocks._chunk_cache.clear()  # in-process fallback or a worker that lost its cache: resend
    X = rng.normal(size=(12, 2))
    assert np.allclose(sk.decrypt_fixed(v.dot(X)), x @ X, atol=1e-5)


@pytest.mark.parametrize("signed", [True, False])
def test_dot_kernels_equal_exponentiation(monkeypatch: pytest.MonkeyPatch, signed: bool) -> None:
    """Both multi-exponentiations (signed digits over one shared batch inversion, and the
    unsigned one kept for few columns) equal plain modular powers, every digit pattern."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from vflcrypto.he.paillier import kernels

    monkeypatch.setattr(kernels, "_signed_pays", lambda X: signed)
    prime = 2**127 - 1

    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.lists(st.integers(-(2**62) + 1, 2**62 - 1) | st.integers(-40, 40), min_size=3, max_size=3),
                    min_size=1, max_size=40))
    def check(rows: list[list[int]]) -> None:
        X = np.array(rows, dtype=np.int64)
        cts = [gmpy2.mpz(3 + 2 * i) for i in range(len(rows))]
        got = kernels._dot(cts, X, gmpy2.mpz(prime))
        for j in range(3):
            ref = 1
            for c, k in zip(cts, X[:, j].tolist(), strict=True):
                ref = ref * pow(int(c), int(k), prime) % prime
            assert int(got[j]) == ref

    check()
