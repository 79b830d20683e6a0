"""Okamoto–Uchiyama: keys, parameters, vectors, the decryption range check, the wire, HEU interop."""

from __future__ import annotations

from dataclasses import dataclass

import gmpy2
import numpy as np
import pytest

from vflcrypto import parallel
from vflcrypto.errors import (
    CiphertextError,
    ConfigurationError,
    DecodeError,
    EncodingOverflowError,
    InsecureParameterError,
    KeyMismatchError,
)
from vflcrypto.he import ou
from vflcrypto.he.encoding import PackingSpec
from vflcrypto.he.ou import OUParams, OUPrivateKey, OUPublicKey, OUVector
from vflcrypto.he.paillier import PaillierVector, compress, fixed_base
from vflcrypto.runtime.declarations import Protection, declare
from vflcrypto.runtime.wire import DecodeContext, KeyRing, decode_value, encode_value

rng = np.random.default_rng(11)  # synthetic, non-secret test data only


@declare("test.ou_vec", sender="alice", receiver="bob", protection=Protection.CIPHERTEXT,
         key_owner="bob", reveals="nothing without bob's key (test message)")
@dataclass(frozen=True)
class _OUVecMsg:
    values: OUVector


@declare("test.ou_pk", sender="bob", receiver="alice", protection=Protection.PUBLIC,
         reveals="bob's OU public key (test message)")
@dataclass(frozen=True)
class _OUKeyMsg:
    key: OUPublicKey


@pytest.fixture(scope="module")
def keys() -> tuple[OUPublicKey, OUPrivateKey]:
    """A 1024-bit key pair (insecure size, tests only)."""
    return ou.generate_keypair(1024, allow_insecure=True)


# --------------------------------------------------------------------------- parameters and keys


def test_default_parameters_are_conservative():
    p = OUParams()
    assert (p.key_bits, p.random_bits, p.factor_bits, p.profile) == (3072, 256, 256, "conservative")
    p.validate()
    assert OUParams.conservative(4096).random_bits == 256 and OUParams.conservative(7680).random_bits == 384


@pytest.mark.parametrize("weak", [OUParams(2048, 224, 224), OUParams(3072, 128, 256), OUParams(3072, 256, 128)])
def test_weak_parameters_are_refused_unless_explicitly_heu(weak):
    with pytest.raises(InsecureParameterError):
        weak.validate()
    with pytest.raises(InsecureParameterError):
        ou.generate_keypair(weak)
    weak.validate(allow_insecure=True)


def test_heu_parameters_by_explicit_choice():
    heu = OUParams.heu()
    assert (heu.key_bits, heu.random_bits, heu.factor_bits) == (2048, 112, 224)
    heu.validate()
    assert OUParams.heu(3072).random_bits == 128
    with pytest.raises(InsecureParameterError):
        OUParams(2048, 64, 224, "heu").validate()
    with pytest.raises(InsecureParameterError):
        OUParams(key_bits=1024, profile="heu").validate()


def test_keygen_structure(keys):
    pk, sk = keys
    p, q, t = sk.secret_numbers()
    assert pk.bits == 1024 and p * p * q == pk.n and (p - 1) % t == 0
    assert gmpy2.is_prime(p) and gmpy2.is_prime(q) and gmpy2.is_prime(t)
    assert pk.plaintext_bits == p.bit_length() - 2 - ou.DETECTION_BITS and pk.cmod == pk.n
    assert pk.ciphertext_bytes == 128  # half of Paillier's 2 * 128 at the same n
    assert repr(sk) == f"OUPrivateKey(fingerprint={pk.fingerprint})" and str(p) not in repr(sk)


def test_full_size_default_key():
    pk, sk = ou.generate_keypair()
    p, q, t = sk.secret_numbers()
    assert pk.bits == 3072 and p.bit_length() == q.bit_length() == 1024 and t.bit_length() == 256
    assert pk.random_bits == 256 and pk.plaintext_bits == 1022 - ou.DETECTION_BITS
    v = pk.encrypt([5, -7, 2**(pk.plaintext_bits - 1)])
    assert sk.decrypt(v) == [5, -7, 2**(pk.plaintext_bits - 1)]
    assert sk.decrypt(v[:2] + v[:2]) == [10, -14]
    assert sk.decrypt(sk.encrypt([3, -3])) == [3, -3]


def test_received_key_checks():
    pk, _ = ou.generate_keypair(1024, allow_insecure=True)
    with pytest.raises(InsecureParameterError):
        OUPublicKey(pk.n, pk.G, pk.H, pk.plaintext_bits, pk.random_bits)  # 1024 bits without allow_insecure
    with pytest.raises(InsecureParameterError):
        OUPublicKey(pk.n, pk.G, pk.H, pk.bits // 3, pk.random_bits, allow_insecure=True)  # bound past p
    with pytest.raises(InsecureParameterError):
        OUPublicKey(pk.n, pk.n, pk.H, pk.plaintext_bits, pk.random_bits, allow_insecure=True)
    with pytest.raises(InsecureParameterError):
        OUPublicKey(pk.n + 1, pk.G, pk.H, pk.plaintext_bits, pk.random_bits, allow_insecure=True)


def test_private_key_must_match(keys):
    pk, sk = keys
    p, q, t = sk.secret_numbers()
    with pytest.raises(InsecureParameterError):
        OUPrivateKey(pk, q, p, t)
    with pytest.raises(InsecureParameterError):
        OUPrivateKey(pk, p, q, t + 2)


# --------------------------------------------------------------------------- arithmetic against numpy


def test_signed_round_trip_public_and_key_holder(keys):
    pk, sk = keys
    lim = 2**pk.plaintext_bits - 1
    ms = [0, 1, -1, 12345, -98765, lim, -lim]
    assert sk.decrypt(pk.encrypt(ms)) == ms
    assert sk.decrypt(sk.encrypt(ms)) == ms
    with pytest.raises(EncodingOverflowError):
        pk.encrypt([lim + 1])


def test_known_answer_with_fixed_randomness(keys, monkeypatch):
    """A fixed r gives c = G^m H^r mod n exactly (public and key-holder paths)."""
    pk, sk = keys
    r = 0x1234_5678_9ABC_DEF0
    nbytes = (pk.random_bits + 7) // 8

    def digits(count, nb, w):
        bits = [(r >> i) & 1 for i in range(8 * nb)]
        rows = -(-len(bits) // w)
        bits += [0] * (rows * w - len(bits))
        return [[sum(bits[k * w + j] << j for j in range(w)) for k in range(rows)] for _ in range(count)]

    monkeypatch.setattr(fixed_base, "_random_digits", digits)
    n = int(pk.n)
    for m in (0, 7, -7, 2**60 + 3):
        want = pow(int(pk.G), m, n) * pow(int(pk.H), r, n) % n
        assert pk.encrypt([m]).ciphertexts() == [want]
        assert sk.encrypt([m]).ciphertexts() == [want]
    assert nbytes * 8 >= r.bit_length()


def test_encryptions_are_randomized_within_and_across_calls(keys):
    """Within one call and across calls, by the public key and by the key holder."""
    pk, sk = keys
    calls = [pk.encrypt([42, 42]), pk.encrypt([42, 42]), sk.encrypt([42]), sk.encrypt([42])]
    cs = [c for v in calls for c in v.ciphertexts()]
    assert len(set(cs)) == len(cs) == 6
    assert [sk.decrypt(v) for v in calls] == [[42, 42], [42, 42], [42], [42]]


def test_homomorphic_operations_match_numpy(keys):
    pk, sk = keys
    x = rng.uniform(-50, 50, 40)
    y = rng.uniform(-50, 50, 40)
    X = rng.standard_normal((40, 3))
    ex, ey = pk.encrypt_fixed(x), sk.encrypt_fixed(y)
    np.testing.assert_allclose(sk.decrypt_fixed(ex + ey), x + y, atol=1e-8)
    np.testing.assert_allclose(sk.decrypt_fixed(ex - ey), x - y, atol=1e-8)
    np.testing.assert_allclose(sk.decrypt_fixed(-ex), -x, atol=1e-8)
    np.testing.assert_allclose(sk.decrypt_fixed(ex + 2.5), x + 2.5, atol=1e-8)
    np.testing.assert_allclose(sk.decrypt_fixed(ex * y), x * y, atol=1e-6)
    np.testing.assert_allclose(sk.decrypt_fixed(ex.dot(X)), X.T @ x, atol=1e-6)
    np.testing.assert_allclose(sk.decrypt_fixed(ex.sum()), [x.sum()], atol=1e-7)
    M = rng.integers(-1000, 1000, (7, 40))
    ints = pk.encrypt(rng.integers(-(2**20), 2**20, 40))
    assert sk.decrypt(ints.matvec(M)) == (M @ np.asarray(sk.decrypt(ints), dtype=object)).tolist()
    np.testing.assert_allclose(sk.decompress_decrypt_fixed(compress(ex, 48)), x, atol=1e-8)
    np.testing.assert_allclose(sk.decrypt_fixed(OUVector.concat([ex, ey])), np.r_[x, y], atol=1e-8)


def test_packed_histograms_match_numpy(keys):
    """SecureBoost's use: packed (g, h) rows summed by bin, compressed, decrypted."""
    pk, sk = keys
    n = 200
    g, h = rng.uniform(-1, 1, n), rng.uniform(0, 0.25, n)
    bins = rng.integers(0, 8, n)
    spec = PackingSpec.create(max_terms=n, frac_bits=24, bound=2.0)
    gh = sk.encrypt_packed(np.column_stack([g, h]), spec)
    hist = sk.decrypt_fixed(gh.sum_by_group(bins, 8))
    want = np.column_stack([np.bincount(bins, g, 8), np.bincount(bins, h, 8)])
    np.testing.assert_allclose(hist, want, atol=1e-5)
    np.testing.assert_allclose(sk.decompress_decrypt_fixed(compress(gh.sum_by_group(bins, 8))), want, atol=1e-5)
    dense = pk.encrypt_fixed(g, packing=spec)
    assert len(dense) < n and np.allclose(sk.decrypt_fixed(dense), g, atol=1e-6)


def test_process_pool_paths_agree(keys, monkeypatch):
    pk, sk = keys
    monkeypatch.setattr(parallel, "PARALLEL_MIN_COST", 1)
    if parallel.worker_count() < 2:
        pytest.skip("one worker")
    ms = rng.integers(-(2**40), 2**40, 64).tolist()
    v, w = pk.encrypt(ms), sk.encrypt(ms)
    assert sk.decrypt(v) == ms and sk.decrypt(w) == ms
    assert sk.decrypt(v.sum_by_group(np.arange(64) % 4, 4)) == [sum(ms[i::4]) for i in range(4)]


# --------------------------------------------------------------------------- the decryption range check


def test_a_plaintext_past_the_bound_is_never_returned(keys):
    """The oracle HEU documents: push a ciphertext past p, decrypt, gcd(m - m mod p, n) = p.

    Decryption refuses anything outside +-2^plaintext_bits instead of returning m mod p.
    """
    pk, sk = keys
    big = pk.encrypt([2 ** (pk.plaintext_bits - 1) + 12345])
    for k in (4, 2**20, 2**200):
        with pytest.raises(EncodingOverflowError) as err:
            sk.decrypt(big * k)
        assert str(err.value) == "decrypted value outside the plaintext range"  # terse: no residue


def test_keys_and_schemes_do_not_mix(keys):
    pk, _ = keys
    pk2, sk2 = ou.generate_keypair(1024, allow_insecure=True)
    a, b = pk.encrypt([1]), pk2.encrypt([1])
    with pytest.raises(KeyMismatchError):
        sk2.decrypt(a)
    with pytest.raises(KeyMismatchError):
        _ = a + b
    from vflcrypto.he.paillier import generate_keypair

    ppk, _ = generate_keypair(512, allow_insecure=True)
    with pytest.raises(KeyMismatchError):
        _ = a + ppk.encrypt([1])


def test_refusal_names_the_oracle(keys):
    with pytest.raises(ConfigurationError, match="reveals p"):
        ou.refuse_decryption_oracle(keys[0], "linreg", "the coordinator returns decryptions")
    ou.refuse_decryption_oracle("paillier", "linreg", "-")


def test_masking_for_the_key_holder_is_paillier_only(keys):
    from vflcrypto.sharing.masking import mask_ciphertexts

    with pytest.raises(ConfigurationError):
        mask_ciphertexts(keys[0].encrypt([1, 2]))


# --------------------------------------------------------------------------- the wire


def _ctx(pk: OUPublicKey, allow_insecure: bool = True) -> DecodeContext:
    return DecodeContext(keyring=KeyRing([pk]), allow_insecure=allow_insecure)


def test_wire_round_trip_and_validation(keys):
    pk, sk = keys
    key_back = decode_value(encode_value(_OUKeyMsg(pk)), _OUKeyMsg, _ctx(pk)).key
    assert key_back == pk and key_back.fingerprint == pk.fingerprint
    with pytest.raises(InsecureParameterError):
        decode_value(encode_value(_OUKeyMsg(pk)), _OUKeyMsg, _ctx(pk, allow_insecure=False))
    v = pk.encrypt_fixed(np.array([1.5, -2.25]))
    back = decode_value(encode_value(_OUVecMsg(v)), _OUVecMsg, _ctx(pk)).values
    assert isinstance(back, OUVector) and back.ciphertexts() == v.ciphertexts()
    np.testing.assert_allclose(sk.decrypt_fixed(back), [1.5, -2.25])
    w = pk.ciphertext_bytes
    blob = v.to_bytes()
    for bad, err in ((blob[:-1], CiphertextError), (int(pk.n).to_bytes(w, "big") + blob[w:], CiphertextError),
                     (bytes(w) + blob[w:], CiphertextError)):
        with pytest.raises(err):
            OUVector.from_bytes(pk, bad, frac_bits=v.frac_bits)
    other, _ = ou.generate_keypair(1024, allow_insecure=True)
    with pytest.raises(KeyMismatchError):
        decode_value(encode_value(_OUVecMsg(v)), _OUVecMsg, _ctx(other))


def test_a_paillier_vector_is_not_an_ou_vector(keys):
    from vflcrypto.he.paillier import generate_keypair

    ppk, _ = generate_keypair(512, allow_insecure=True)
    ctx = DecodeContext(keyring=KeyRing([ppk, keys[0]]), allow_insecure=True)
    with pytest.raises(DecodeError):
        decode_value(encode_value(_OUVecMsg(ppk.encrypt([1]))), _OUVecMsg, ctx)  # type: ignore[arg-type]
    assert not isinstance(keys[0].encrypt([1]), PaillierVector)


# --------------------------------------------------------------------------- against SecretFlow HEU


def _heu_numbers(blob: bytes) -> list[int]:
    """The integers of a serialized HEU object (its BigInt: little-endian magnitude bytes)."""
    import msgpack

    u = msgpack.Unpacker(raw=True)
    u.feed(blob)
    return [int.from_bytes(b, "little") if isinstance(b, bytes) else int(b) for b in next(u)]


def _montgomery_r(n: int) -> int:
    """HEU keeps ciphertexts in Montgomery form ``c R mod n``, ``R = 2**(60 * digits)`` (60-bit digits)."""
    return pow(2, 60 * -(-n.bit_length() // 60), n)


@pytest.fixture(scope="module")
def heu_pair():
    """HEU's own OU key pair at 2048 bits, and ours built from its numbers."""
    phe = pytest.importorskip("heu.phe")
    kit = phe.setup(phe.SchemaType.OU, 2048)
    n, G, H, bound_bits = _heu_numbers(kit.public_key().serialize())
    p, q, t = _heu_numbers(kit.secret_key().serialize())[:3]
    pk = OUPublicKey(n, G, H, bound_bits, OUParams.heu().random_bits)
    return phe, kit, pk, OUPrivateKey(pk, p, q, t)


def test_we_decrypt_heu_ciphertexts(heu_pair):
    _, kit, pk, sk = heu_pair
    enc = kit.encryptor()
    ms = [0, 1, -1, 2**60, -(2**100), 123456789]
    n = int(pk.n)
    r_inv = pow(_montgomery_r(n), -1, n)
    cts = [_heu_numbers(enc.encrypt_raw(m).serialize())[0] * r_inv % n for m in ms]
    assert sk.decrypt(OUVector.from_ciphertexts(pk, cts)) == ms


def test_heu_decrypts_our_ciphertexts(heu_pair):
    import msgpack

    phe, kit, pk, sk = heu_pair
    suffix = kit.encryptor().encrypt_raw(0).serialize()
    u = msgpack.Unpacker(raw=True)
    u.feed(suffix)
    next(u)
    tail = suffix[u.tell():]
    dec = kit.decryptor()
    n, R = int(pk.n), _montgomery_r(int(pk.n))
    ms = [0, 7, -7, 2**90 + 5, -(2**64)]
    twice = [2 * m for m in ms]
    for vec, want in ((pk.encrypt(ms), ms), (sk.encrypt(ms), ms), (pk.encrypt(ms) + sk.encrypt(ms), twice)):
        got = []
        for c in vec.ciphertexts():
            c = c * R % n
            raw = c.to_bytes(c.bit_length() // 8 + 1, "little")  # HEU's BigInt: room for a sign bit
            ct = phe.Ciphertext.load_from(msgpack.packb([raw]) + tail)
            got.append(dec.decrypt_raw(ct))
        assert got == want


@pytest.mark.parametrize("name", ["exchange", "logreg", "pearson", "poisson", "sshelr", "woe"])
def test_protocols_whose_key_holder_returns_decryptions_refuse_ou_keys(name, keys):
    """Handed OU keys in code (not only through --scheme), each refuses before any message, saying why."""
    import importlib

    roles = importlib.import_module(f"vflcrypto.protocols.{name}.roles")
    X, y = rng.normal(size=(4, 2)), np.array([0.0, 1, 0, 1])
    make = {
        "exchange": lambda: roles.ActiveRole(y, keys),
        "logreg": lambda: roles.ActiveRole(y, parties=["party-0"], secure=True, keys=keys),
        "pearson": lambda: roles.ActiveRole(X, passives=["passive-0"], keys=keys),
        "poisson": lambda: roles.CoordinatorRole(epochs=1, keys=keys),
        "sshelr": lambda: roles.ActiveRole(X, y, keys=keys),
        "woe": lambda: roles.ActiveRole(y, X, passives=["passive-0"], keys=keys),
    }[name]
    with pytest.raises(ConfigurationError, match=f"{name} cannot run under Okamoto-Uchiyama"):
        make()


def test_standard_profile_is_112_bits_on_every_axis_and_refuses_other_sizes() -> None:
    """``ou-2048`` (SecureBoost's default): a 2048-bit modulus, 224-bit randomness and decryption factor;
    weaker exponents or a smaller modulus are refused, and the scheme name admits no other key size."""
    from vflcrypto.errors import ConfigurationError
    from vflcrypto.he.schemes import generate_keypair

    params = ou.OUParams.standard()
    assert (params.key_bits, params.random_bits, params.factor_bits) == (2048, 224, 224)
    params.validate()
    for weak in (ou.OUParams(2048, 112, 224, "standard"), ou.OUParams(2048, 224, 200, "standard"),
                 ou.OUParams(1536, 224, 224, "standard")):
        with pytest.raises(InsecureParameterError):
            weak.validate()
    with pytest.raises(ConfigurationError, match="--scheme ou --key-bits"):
        generate_keypair("ou-2048", 3072)
    pk, sk = generate_keypair("ou-2048", 512, allow_insecure=True)  # tests: small keys, the same exponents
    assert pk.random_bits == 224 and sk.decrypt(pk.encrypt([5, -7])) == [5, -7]
