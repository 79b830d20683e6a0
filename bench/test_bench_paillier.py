"""Paillier throughput suites (pytest-benchmark).

Run: ``.venv/bin/pytest bench/test_bench_paillier.py --benchmark-only``. Sizes scale with
``VFLCRYPTO_BENCH_N`` (records, default 2000) and the key with ``VFLCRYPTO_BENCH_BITS``
(default 2048; smaller keys are for smoke tests only and need
``VFLCRYPTO_BENCH_ALLOW_INSECURE=1``). Each benchmark records the number
of values it processes (``extra_info["items"]``), the pool's worker count (``workers``;
phe always runs in one process) and the median rate (``items_per_s_median``), and checks
its result against numpy after timing (a wrong result fails the benchmark instead of
reporting a speed). The phe anchor (python-paillier + gmpy2) is measured in the same run.
"""

from __future__ import annotations

import os

import numpy as np
import phe
import pytest

from vflcrypto import parallel
from vflcrypto.he.encoding import PackingSpec
from vflcrypto.he.paillier import compress, generate_keypair

N = int(os.environ.get("VFLCRYPTO_BENCH_N", "2000"))
BITS = int(os.environ.get("VFLCRYPTO_BENCH_BITS", "2048"))
ROUNDS = int(os.environ.get("VFLCRYPTO_BENCH_ROUNDS", "3"))

rng = np.random.default_rng(0)  # synthetic benchmark data


@pytest.fixture(scope="module")
def keys():
    pk, sk = generate_keypair(BITS, allow_insecure=os.environ.get("VFLCRYPTO_BENCH_ALLOW_INSECURE") == "1")
    pk._fixed_table()  # table construction is a one-off per key; keep it out of the timings
    sk._crt()
    return pk, sk


@pytest.fixture(scope="module")
def spec():
    return PackingSpec.create(max_terms=max(2, N), frac_bits=24, bound=2.0**8)


def _run(benchmark, fn, items, *, workers: int | None = None):
    benchmark.extra_info["items"] = items
    benchmark.extra_info["key_bits"] = BITS
    benchmark.extra_info["workers"] = max(1, parallel.worker_count()) if workers is None else workers
    out = benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    if benchmark.stats is not None:
        benchmark.extra_info["items_per_s_median"] = items / benchmark.stats.stats.median
    return out


def _close(got, want, atol: float = 1e-6) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=0, atol=atol)


def test_encrypt_unpacked(benchmark, keys):
    pk, sk = keys
    x = rng.normal(size=N)
    _close(sk.decrypt_fixed(_run(benchmark, lambda: pk.encrypt_fixed(x), N)), x)


def test_encrypt_key_holder(benchmark, keys):
    _, sk = keys
    x = rng.normal(size=N)
    _close(sk.decrypt_fixed(_run(benchmark, lambda: sk.encrypt_fixed(x), N)), x)


def test_encrypt_packed(benchmark, keys, spec):
    pk, sk = keys
    x = rng.normal(size=N * 8)
    out = _run(benchmark, lambda: pk.encrypt_fixed(x, packing=spec), x.size)
    benchmark.extra_info["values_per_ciphertext"] = spec.slots_for(pk.n)
    _close(sk.decrypt_fixed(out)[: x.size], x, 1e-6)


def test_decrypt_unpacked(benchmark, keys):
    pk, sk = keys
    x = rng.normal(size=max(1, N // 10))
    v = pk.encrypt_fixed(x)
    _close(_run(benchmark, lambda: sk.decrypt_fixed(v), len(v)), x)


def test_decrypt_packed(benchmark, keys, spec):
    pk, sk = keys
    x = rng.normal(size=N * 8)
    v = pk.encrypt_fixed(x, packing=spec)
    benchmark.extra_info["values_per_ciphertext"] = spec.slots_for(pk.n)
    _close(_run(benchmark, lambda: sk.decrypt_fixed(v), x.size)[: x.size], x)


def test_add(benchmark, keys):
    _, sk = keys
    x = rng.normal(size=N)
    v = sk.encrypt_fixed(x)
    _close(sk.decrypt_fixed(_run(benchmark, lambda: v + v, N)), 2 * x)


def test_mul_by_plaintext(benchmark, keys):
    _, sk = keys
    x = rng.normal(size=max(1, N // 10))
    v = sk.encrypt_fixed(x)
    w = rng.normal(size=len(v))
    _close(sk.decrypt_fixed(_run(benchmark, lambda: v * w, len(v))), x * w)


@pytest.mark.parametrize("cols", [4])
def test_dot(benchmark, keys, cols):
    _, sk = keys
    x = rng.normal(size=N)
    v = sk.encrypt_fixed(x)
    X = rng.normal(size=(N, cols))
    _close(sk.decrypt_fixed(_run(benchmark, lambda: v.dot(X), N * cols)), X.T @ x, 1e-5)


@pytest.mark.parametrize("bins", [32])
def test_sum_by_group_histogram(benchmark, keys, spec, bins):
    _, sk = keys
    gh_plain = rng.normal(size=(N, 2))
    gh = sk.encrypt_packed(gh_plain, spec)
    groups = rng.integers(0, bins, size=N)
    out = _run(benchmark, lambda: gh.sum_by_group(groups, bins), N)
    want = np.column_stack([np.bincount(groups, gh_plain[:, j], bins) for j in range(2)])
    _close(sk.decrypt_fixed(out).reshape(bins, -1)[:, :2], want, 1e-5)


def test_compress_and_decrypt_histogram(benchmark, keys, spec):
    _, sk = keys
    gh_plain = rng.normal(size=(N, 2))
    gh = sk.encrypt_packed(gh_plain, spec)
    groups = rng.integers(0, 32, size=N)
    hist = gh.sum_by_group(groups, 32)
    out = _run(benchmark, lambda: sk.decompress_decrypt_fixed(compress(hist)), 32 * 2)
    want = np.column_stack([np.bincount(groups, gh_plain[:, j], 32) for j in range(2)])
    _close(np.asarray(out).reshape(32, -1)[:, :2], want, 1e-5)


def test_anchor_phe_encrypt(benchmark, keys):
    """Anchor: python-paillier (with gmpy2) encrypting floats, in one process."""
    _, sk = keys
    phe_pub, phe_priv = sk.to_phe()
    x = rng.normal(size=max(1, N // 40)).tolist()
    out = _run(benchmark, lambda: [phe_pub.encrypt(v) for v in x], len(x), workers=1)
    _close([phe_priv.decrypt(e) for e in out], x)


def test_anchor_phe_decrypt(benchmark, keys):
    _, sk = keys
    phe_pub, phe_priv = sk.to_phe()
    x = rng.normal(size=max(1, N // 40)).tolist()
    enc = [phe_pub.encrypt(v) for v in x]
    _close(_run(benchmark, lambda: [phe_priv.decrypt(e) for e in enc], len(enc), workers=1), x)


def test_phe_ciphertexts_are_ours(keys):
    """Not a benchmark: the anchor and our code agree on the scheme."""
    pk, sk = keys
    phe_pub, _ = sk.to_phe()
    assert phe_pub.n == pk.n and isinstance(phe_pub, phe.PaillierPublicKey)
