"""The obfuscator stock: each encryption of zero handed out once, bounded, correct under every key, stoppable."""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

import numpy as np
import pytest

from vflcrypto import parallel
from vflcrypto.errors import ConfigurationError, EncodingError, KeyMismatchError
from vflcrypto.he import ou
from vflcrypto.he.encoding import PackingSpec
from vflcrypto.he.obfuscators import ObfuscatorStock
from vflcrypto.he.paillier import PaillierVector, fixed_base, generate_keypair


@pytest.fixture(autouse=True)
def _in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "1")  # small keys: every producer round in this process


@pytest.fixture(scope="module")
def paillier() -> tuple[Any, Any]:
    return generate_keypair(512, allow_insecure=True)


@pytest.fixture(scope="module")
def ou_keys() -> tuple[Any, Any]:
    return ou.generate_keypair(1024, allow_insecure=True)


def _keys(which: str, paillier: tuple[Any, Any], ou_keys: tuple[Any, Any]) -> tuple[Any, Any]:
    """(the key the stock uses, the private key that decrypts)."""
    pk, sk = paillier if which.startswith("paillier") else ou_keys
    return (pk if which.endswith("public") else sk), sk


KEYS = ["paillier-public", "paillier-private", "ou-public", "ou-private"]


# --------------------------------------------------------------------------- single use


def test_no_obfuscator_is_handed_out_twice_with_concurrent_takers(paillier: tuple[Any, Any]) -> None:
    """Eight threads take while the producer refills a small stock: every obfuscator appears once,
    and every one is an encryption of zero."""
    _, sk = paillier
    got: list[list[int]] = []
    lock = threading.Lock()
    with ObfuscatorStock(sk, 40, batch=7) as stock:
        stock.wait(timeout=10)

        def taker(seed: int) -> None:
            rng = np.random.default_rng(seed)
            mine = []
            for _ in range(25):
                mine.extend(stock.take(int(rng.integers(0, 9))).ciphertexts())
            with lock:
                got.append(mine)

        threads = [threading.Thread(target=taker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        stats = stock.stats()
    flat = [c for mine in got for c in mine]
    assert len(got) == 8 and len(flat) == len(set(flat)) > 300
    assert stats.from_stock + stats.online == len(flat) and stats.from_stock > 0
    assert set(sk.decrypt(PaillierVector.from_ciphertexts(sk.public_key, flat))) == {0}


def test_encryptions_never_share_an_obfuscator(paillier: tuple[Any, Any]) -> None:
    """Equal plaintexts from one stock give distinct ciphertexts whose quotients are never 1 mod n
    (a shared obfuscator would give c / c' = 1 + (m - m') n: the difference, read without the key)."""
    pk, sk = paillier
    stock = ObfuscatorStock(pk, 16)
    stock.put(stock.take(16))  # 16 computed online (nothing stocked yet), then stocked by put
    a = stock.encrypt(np.full(10, 7))
    b = stock.encrypt(np.full(10, 7))  # 6 stocked, 4 online
    n, nsq = int(pk.n), int(pk.n) ** 2
    assert sk.decrypt(a) == sk.decrypt(b) == [7] * 10
    assert len(set(a.ciphertexts() + b.ciphertexts())) == 20
    assert all(x * pow(y, -1, nsq) % nsq % n != 1 for x, y in zip(a.ciphertexts(), b.ciphertexts(), strict=True))
    assert stock.stats().online == 16 + 4 and len(stock) == 0
    stock.close()


# --------------------------------------------------------------------------- bounded


def test_the_stock_never_holds_more_than_its_limit(paillier: tuple[Any, Any]) -> None:
    _, sk = paillier
    seen = []
    with ObfuscatorStock(sk, 30, batch=8) as stock:
        for _ in range(40):
            seen.append(len(stock))
            stock.take(5)
            time.sleep(0.002)
        assert stock.wait(timeout=10)
        time.sleep(0.1)  # a full stock stays full: the producer waits, it does not overfill
        stats = stock.stats()
        assert len(stock) == 30 == stats.stocked
        assert stats.produced + stats.put == stats.from_stock + stats.stocked
    assert max(seen) <= 30


def test_put_refuses_past_the_limit_another_key_and_non_obfuscators(paillier: tuple[Any, Any],
                                                                    ou_keys: tuple[Any, Any]) -> None:
    pk, sk = paillier
    stock = ObfuscatorStock(sk, 4)
    with pytest.raises(ConfigurationError, match="limit"):
        stock.put(pk.encrypt(np.zeros(5, dtype=np.int64)))
    other, _ = generate_keypair(512, allow_insecure=True)
    with pytest.raises(KeyMismatchError):
        stock.put(other.encrypt([0]))
    with pytest.raises(KeyMismatchError):
        stock.put(ou_keys[0].encrypt([0]))
    with pytest.raises(EncodingError):
        stock.put(pk.encrypt_fixed(np.zeros(2)))
    with pytest.raises(EncodingError):
        stock.put(pk.encrypt_fixed(np.zeros(3), packing=PackingSpec.create(max_terms=4, frac_bits=8, bound=1.0)))
    with pytest.raises(KeyMismatchError):
        stock.rerandomize(other.encrypt([1]))
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ConfigurationError):
            ObfuscatorStock(sk, bad)  # type: ignore[call-overload]
    with pytest.raises(ConfigurationError):
        ObfuscatorStock(object(), 4)  # type: ignore[call-overload]
    with pytest.raises(ValueError):
        stock.take(-1)


# --------------------------------------------------------------------------- correct


@pytest.mark.parametrize("which", KEYS)
def test_stocked_encryptions_decrypt_like_the_keys_own(which: str, paillier: tuple[Any, Any],
                                                       ou_keys: tuple[Any, Any]) -> None:
    key, sk = _keys(which, paillier, ou_keys)
    rng = np.random.default_rng(0)
    ints = rng.integers(-10**6, 10**6, 12)
    x = rng.normal(size=9)
    spec = PackingSpec.create(max_terms=8, frac_bits=20, bound=4.0)
    rows = rng.uniform(-2, 2, (5, 2))
    with ObfuscatorStock(key, 20, batch=6) as stock:
        assert stock.wait(timeout=10)
        enc = stock.encrypt(ints)
        fixed = stock.encrypt_fixed(x, 24)
        dense = stock.encrypt_fixed(x, packing=spec)
        packed = stock.encrypt_packed(rows, spec)
        rerand = stock.rerandomize(enc)
        zeros = stock.take(3)
    assert type(enc) is type(key.encrypt([1])) and enc.public_key == sk.public_key
    assert sk.decrypt(enc) == ints.tolist() == sk.decrypt(rerand)
    assert set(enc.ciphertexts()).isdisjoint(rerand.ciphertexts())
    np.testing.assert_allclose(sk.decrypt_fixed(fixed), x, atol=2**-23)
    np.testing.assert_allclose(sk.decrypt_fixed(dense), x, atol=2**-19)
    np.testing.assert_allclose(sk.decrypt_fixed(packed), rows, atol=2**-19)
    np.testing.assert_allclose(sk.decrypt_fixed(fixed + key.encrypt_fixed(x, 24)), 2 * x, atol=2**-22)
    assert sk.decrypt(zeros) == [0, 0, 0]


@pytest.mark.parametrize("which", KEYS)
def test_the_privacy_seam_reaches_stocked_obfuscators(which: str, paillier: tuple[Any, Any],
                                                      ou_keys: tuple[Any, Any],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With fixed_base._random_digits zeroed (the mutation suite's seam), every stocked
    obfuscator is 1: the producer draws its randomness where every encryptor does."""
    key, _ = _keys(which, paillier, ou_keys)
    strong = fixed_base._random_digits
    monkeypatch.setattr(fixed_base, "_random_digits",
                        lambda count, nbytes, w: [[0] * len(r) for r in strong(count, nbytes, w)])
    with ObfuscatorStock(key, 12, batch=5) as stock:
        assert stock.wait(timeout=10)
        assert stock.take(12).ciphertexts() == [1] * 12
        assert stock.stats().online == 0


# --------------------------------------------------------------------------- producer life


def test_a_paused_producer_makes_nothing_and_resumes(paillier: tuple[Any, Any]) -> None:
    _, sk = paillier
    stock = ObfuscatorStock(sk, 20, batch=4)
    with stock.paused():
        stock.start()
        assert not stock.wait(timeout=0.3)
        assert stock.stats().produced == 0
    assert stock.wait(timeout=10) and len(stock) == 20
    stock.close()
    assert len(stock) == 0
    with pytest.raises(ConfigurationError, match="closed"):
        stock.take(1)
    with pytest.raises(ConfigurationError, match="closed"):
        stock.start()


class _SlowKey:
    """A Paillier private key whose raw encryption takes ``delay`` seconds a round (a stuck pool)."""

    def __init__(self, sk: Any, delay: float) -> None:
        self.sk, self.delay = sk, delay

    def __call__(self, ms: Any) -> Any:
        time.sleep(self.delay)
        return self.sk.__class__._raw_encrypt_blob(self.sk, ms)


def test_close_never_hangs_on_a_round_in_progress(paillier: tuple[Any, Any],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _, sk = paillier
    stock = ObfuscatorStock(sk, 8, batch=8)
    monkeypatch.setattr(sk, "_raw_encrypt_blob", _SlowKey(sk, 2.0))
    stock.start()
    time.sleep(0.1)  # the producer is inside its round
    t0 = time.monotonic()
    stock.close(timeout=0.2)
    assert time.monotonic() - t0 < 1.0
    thread = stock._thread
    assert thread is not None
    thread.join(5)  # the round ends, the thread sees the stock closed and stocks nothing
    assert not thread.is_alive() and len(stock) == 0


def test_a_dropped_stock_stops_its_producer(paillier: tuple[Any, Any]) -> None:
    _, sk = paillier
    stock = ObfuscatorStock(sk, 5, batch=5).start()
    stock.wait(timeout=10)
    thread = stock._thread
    assert thread is not None and thread.is_alive()
    del stock
    gc.collect()
    thread.join(5)
    assert not thread.is_alive()


def test_a_failing_producer_warns_and_encryption_goes_on(paillier: tuple[Any, Any],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pk, sk = paillier

    def broken(ms: Any) -> Any:
        raise OSError("pool gone")

    stock = ObfuscatorStock(pk, 6)
    monkeypatch.setattr(pk, "_raw_encrypt_blob", broken)
    with pytest.warns(RuntimeWarning, match="online obfuscators"):
        stock.start()
        assert not stock.wait(timeout=5)
    assert isinstance(stock.error, OSError)
    monkeypatch.undo()
    monkeypatch.setenv("VFLCRYPTO_WORKERS", "1")
    assert sk.decrypt(stock.encrypt([5, 6])) == [5, 6] and stock.stats().online == 2
    stock.close()


def test_background_work_runs_on_a_low_priority_pool_whose_cpu_time_is_counted_apart(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside parallel.background() the chunks run on a second pool whose workers are at nice 19,
    so the OS gives them only otherwise idle CPU time; the ordinary pool stays at the owner's.
    background_cpu_seconds() counts the background workers' CPU time and only theirs."""
    import hashlib
    import os

    monkeypatch.setenv("VFLCRYPTO_WORKERS", "2")
    before = os.nice(0)
    cost = 10 * parallel.PARALLEL_MIN_COST
    work = [("sha256", b"vflcrypto", b"salt", 1_500_000)]  # ~0.2-0.5 CPU seconds per chunk, by the CPU
    t0 = time.process_time()
    hashlib.pbkdf2_hmac(*work[0])
    one = time.process_time() - t0  # one chunk's CPU time on this machine (a faster CPU made a fixed 0.4 flaky)
    try:
        with parallel.background():
            low = parallel.parallel_map(os.nice, [(0,), (0,), (0,), (0,)], cost=cost)
            start = parallel.background_cpu_seconds()
            parallel.parallel_map(hashlib.pbkdf2_hmac, work * 4, cost=cost)
        spent = parallel.background_cpu_seconds() - start
        normal = parallel.parallel_map(os.nice, [(0,), (0,)], cost=cost)
        parallel.parallel_map(hashlib.pbkdf2_hmac, work * 2, cost=cost)
        assert set(low) == {max(before, parallel.LOW_PRIORITY)} and set(normal) == {before}
        assert parallel.dispatch_counts()["background"] >= 8
        # four chunks, each as costly as `one` (within 20 %: the workers' clock), less a tick (0.01 s) a worker
        assert spent >= 4 * one * 0.8 - 0.02 and spent > 0.2, (spent, one)
        # the ordinary pool's two chunks are not the background pool's
        assert parallel.background_cpu_seconds() - start == pytest.approx(spent, abs=0.05)
    finally:
        parallel.shutdown()
