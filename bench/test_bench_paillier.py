"""Paillier throughput suites (pytest-benchmark).

Run: ``.venv/bin/pytest bench/test_bench_paillier.py --benchmark-only``. Sizes scale with
``VFLCRYPTO_BENCH_N`` (records, default 2000) and the key with ``VFLCRYPTO_BENCH_BITS``
(default 2048; smaller sizes are for smoke tests only). Each benchmark records the number
of values it processes in ``extra_info["items"]`` so a report can turn time into
values/s. The phe anchor (python-paillier + gmpy2) is measured in the same run.
"""

from __future__ import annotations

import os

import numpy as np
import phe
import pytest

from vflcrypto.encoding import PackingSpec
from vflcrypto.paillier import compress, generate_keypair

N = int(os.environ.get("VFLCRYPTO_BENCH_N", "2000"))
BITS = int(os.environ.get("VFLCRYPTO_BENCH_BITS", "2048"))
ROUNDS = int(os.environ.get("VFLCRYPTO_BENCH_ROUNDS", "3"))

rng = np.random.default_rng(0)  # synthetic benchmark data


@pytest.fixture(scope="module")
def keys():
    pk, sk = generate_keypair(BITS, allow_insecure=BITS < 2048)
    pk._fixed_table()  # table construction is a one-off per key; keep it out of the timings
    sk._crt()
    return pk, sk


@pytest.fixture(scope="module")
def spec():
    return PackingSpec.create(max_terms=max(2, N), frac_bits=24, bound=2.0**8)


def _run(benchmark, fn, items):
    benchmark.extra_info["items"] = items
    benchmark.extra_info["key_bits"] = BITS
    return benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=1)


def test_encrypt_unpacked(benchmark, keys):
    pk, _ = keys
    x = rng.normal(size=N)
    _run(benchmark, lambda: pk.encrypt_fixed(x), N)


def test_encrypt_key_holder(benchmark, keys):
    _, sk = keys
    x = rng.normal(size=N)
    _run(benchmark, lambda: sk.encrypt_fixed(x), N)


def test_encrypt_packed(benchmark, keys, spec):
    pk, _ = keys
    x = rng.normal(size=N * 8)
    _run(benchmark, lambda: pk.encrypt_fixed(x, packing=spec), x.size)


def test_decrypt_unpacked(benchmark, keys):
    pk, sk = keys
    v = pk.encrypt_fixed(rng.normal(size=max(1, N // 10)))
    _run(benchmark, lambda: sk.decrypt_fixed(v), len(v))


def test_decrypt_packed(benchmark, keys, spec):
    pk, sk = keys
    x = rng.normal(size=N * 8)
    v = pk.encrypt_fixed(x, packing=spec)
    _run(benchmark, lambda: sk.decrypt_fixed(v), x.size)


def test_add(benchmark, keys):
    _, sk = keys
    v = sk.encrypt_fixed(rng.normal(size=N))
    _run(benchmark, lambda: v + v, N)


def test_mul_by_plaintext(benchmark, keys):
    _, sk = keys
    v = sk.encrypt_fixed(rng.normal(size=max(1, N // 10)))
    w = rng.normal(size=len(v))
    _run(benchmark, lambda: v * w, len(v))


@pytest.mark.parametrize("cols", [4])
def test_dot(benchmark, keys, cols):
    _, sk = keys
    v = sk.encrypt_fixed(rng.normal(size=N))
    X = rng.normal(size=(N, cols))
    _run(benchmark, lambda: v.dot(X), N * cols)


@pytest.mark.parametrize("bins", [32])
def test_sum_by_group_histogram(benchmark, keys, spec, bins):
    _, sk = keys
    gh = sk.encrypt_packed(rng.normal(size=(N, 2)), spec)
    groups = rng.integers(0, bins, size=N)
    _run(benchmark, lambda: gh.sum_by_group(groups, bins), N)


def test_compress_and_decrypt_histogram(benchmark, keys, spec):
    _, sk = keys
    gh = sk.encrypt_packed(rng.normal(size=(N, 2)), spec)
    hist = gh.sum_by_group(rng.integers(0, 32, size=N), 32)
    _run(benchmark, lambda: sk.decompress_decrypt_fixed(compress(hist)), 32 * 2)


def test_anchor_phe_encrypt(benchmark, keys):
    """Anchor: python-paillier (with gmpy2) encrypting floats."""
    _, sk = keys
    phe_pub, _ = sk.to_phe()
    x = rng.normal(size=max(1, N // 40)).tolist()
    _run(benchmark, lambda: [phe_pub.encrypt(v) for v in x], len(x))


def test_anchor_phe_decrypt(benchmark, keys):
    _, sk = keys
    phe_pub, phe_priv = sk.to_phe()
    enc = [phe_pub.encrypt(v) for v in rng.normal(size=max(1, N // 40)).tolist()]
    _run(benchmark, lambda: [phe_priv.decrypt(e) for e in enc], len(enc))


def test_phe_ciphertexts_are_ours(keys):
    """Not a benchmark: the anchor and our code agree on the scheme."""
    pk, sk = keys
    phe_pub, _ = sk.to_phe()
    assert phe_pub.n == pk.n and isinstance(phe_pub, phe.PaillierPublicKey)
