"""Batched BLAKE2b (the C extension ``vflcrypto.psi._blake2b``) gives hashlib's digests.

KKRT hashes every OPRF row and every ID with BLAKE2b; the batched C version must give the
bytes hashlib gives (the reference: CPython's BLAKE2b, which this package did not write) on
every message length across the 128-byte block boundaries, for the digest sizes and
personalizations the protocol uses and others, so a party with the extension and a party
without it agree.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simd_paths import assert_capped_paths_agree
from vflcrypto.protocols.align import spill

from vflcrypto.psi import kkrt


@pytest.fixture
def blake() -> object:
    mod = kkrt._batched_blake2b()
    if mod is None:
        cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
        if shutil.which(cc) and Path(sysconfig.get_paths()["include"], "Python.h").is_file():
            pytest.fail("a C compiler and Python's headers were at hand, yet the BLAKE2b extension is not built")
        pytest.skip("no C compiler at install: KKRT hashes with hashlib")
    return mod


def _offsets(msgs: list[bytes]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(m) for m in msgs])]).astype(np.int64)


@pytest.mark.parametrize(("size", "person"), [(12, b"vflcrypto-kkrt"), (16, b"vflcrypto-kkrt0"), (64, b""),
                                              (1, b"0123456789abcdef"), (32, b"x")])
def test_every_length_across_the_block_boundaries_is_hashlibs(blake, size: int, person: bytes) -> None:
    msgs = [os.urandom(n) for n in range(301)]  # 0 .. 300 bytes: empty, one block, exactly 128 and 256, partial
    got = blake.blake2b_many(b"".join(msgs), _offsets(msgs), size, person)
    assert got == b"".join(hashlib.blake2b(m, digest_size=size, person=person).digest() for m in msgs)


@pytest.mark.parametrize("key", [b"k", bytes(range(32)), bytes(range(64))])
def test_keyed_hashes_of_every_length_are_hashlibs(blake, key: bytes) -> None:
    """Keyed (the bucket hash of the bucketed alignment): the key block first, the empty message included."""
    msgs = [os.urandom(n) for n in range(301)]
    for size, person in ((8, b""), (64, b"p")):
        got = blake.blake2b_many(b"".join(msgs), _offsets(msgs), size, person, key)
        assert got == b"".join(hashlib.blake2b(m, digest_size=size, person=person, key=key).digest() for m in msgs)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=400), max_size=20), st.integers(1, 64), st.binary(max_size=16),
       st.binary(max_size=64))
def test_generated_batches_are_hashlibs(msgs: list[bytes], size: int, person: bytes, key: bytes) -> None:
    mod = kkrt._batched_blake2b()
    if mod is None:
        pytest.skip("the BLAKE2b extension is not built")
    got = mod.blake2b_many(b"".join(msgs), _offsets(msgs), size, person, key)
    assert got == b"".join(hashlib.blake2b(m, digest_size=size, person=person, key=key).digest() for m in msgs)


def test_bad_batches_are_refused(blake) -> None:
    data = b"abcdef"
    two = np.array([0, 2], np.int64)
    for offsets, size, person, key in ((np.array([0, 7], np.int64), 12, b"", b""),  # past the data
                                       (np.array([3, 2], np.int64), 12, b"", b""),  # falling
                                       (np.array([-1, 2], np.int64), 12, b"", b""),
                                       (two, 65, b"", b""),  # digest too long
                                       (two, 0, b"", b""),
                                       (two, 12, b"p" * 17, b""),  # person too long
                                       (two, 12, b"", b"k" * 65),  # key too long
                                       (np.zeros(0, np.int64), 12, b"", b"")):  # not even one offset
        with pytest.raises(ValueError):
            blake.blake2b_many(data, offsets, size, person, key)
    assert blake.blake2b_many(data, np.array([0], np.int64), 12, b"") == b""


def test_kkrt_rows_ids_and_buckets_hash_the_same_with_and_without_it(blake, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(4)
    rows = rng.integers(0, 256, (1000, kkrt.WIDTH_BYTES), dtype=np.uint8)  # example OPRF rows
    index = rng.integers(0, 2**32, 1000)
    ids = [f"customer-{i}".encode() * (1 + i % 9) for i in range(1000)] + [b""]
    fast_rows, fast_ids = kkrt.hash_rows(rows, index), kkrt.item_hashes(ids)
    monkeypatch.setenv("VFLCRYPTO_NATIVE", "0")
    assert kkrt._batched_blake2b() is None
    assert np.array_equal(fast_rows, kkrt.hash_rows(rows, index))
    assert np.array_equal(fast_ids, kkrt.item_hashes(ids))
    assert kkrt.item_hashes([]).shape == (0, 16)
    monkeypatch.delenv("VFLCRYPTO_NATIVE")
    key = bytes(range(32))
    fast_buckets = spill.bucket_index(key, ids, 12)
    monkeypatch.setenv("VFLCRYPTO_NATIVE", "0")
    assert np.array_equal(fast_buckets, spill.bucket_index(key, ids, 12))  # the bucketed alignment's spill


def _mixed_batch(seed: int) -> list[bytes]:
    """1003 messages (not a multiple of 4 or 8: a tail the lanes leave to the scalar path) of random
    lengths 0..300: one-block messages of mixed lengths share lane groups, longer ones go one by one."""
    rng = np.random.default_rng(seed)
    return [rng.bytes(int(n)) for n in rng.integers(0, 301, 1003)]


@pytest.mark.parametrize("key", [b"", bytes(range(32))], ids=["unkeyed", "keyed"])
@pytest.mark.parametrize("size", [16, 64])
def test_mixed_lengths_in_the_simd_lanes_are_hashlibs(blake, size: int, key: bytes) -> None:
    """On x86-64 one-block messages are hashed 4 (AVX2) or 8 (AVX-512) at a time, each lane with its
    own length; ``simd()`` names the path this process took."""
    assert blake.simd() in ("avx512", "avx2", "scalar")
    msgs = _mixed_batch(size + len(key))
    person = b"vflcrypto-kkrt0"
    got = blake.blake2b_many(b"".join(msgs), _offsets(msgs), size, person, key)
    assert got == b"".join(hashlib.blake2b(m, digest_size=size, person=person, key=key).digest() for m in msgs)


def test_the_scalar_and_avx2_paths_give_the_simd_paths_bytes(blake) -> None:
    """``VFLCRYPTO_SIMD=0`` at import: the scalar path only; ``=avx2``: AVX2 at most (on an AVX-512
    machine too). Each, in a fresh process, hashes the same batches to the same bytes as this one."""
    msgs = _mixed_batch(7)
    data, offsets = b"".join(msgs), _offsets(msgs).tobytes()
    batches = [[data, offsets, size, b"vflcrypto-kkrt0", key] for size in (16, 64) for key in (b"", b"k" * 64)]
    here = [blake.blake2b_many(*b) for b in batches]
    assert_capped_paths_agree(blake, "def run(mod, case):\n    return mod.blake2b_many(*case)", batches, here)
