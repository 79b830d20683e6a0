"""A bounded stock of precomputed encryptions of zero (obfuscators), each used exactly once.

Why. Both additively homomorphic schemes here encrypt as ``E(m) = g**m · E(0)``: the
plaintext part ``g**m`` is one multiplication for Paillier (``1 + m n``) and ``|m|/8``
for Okamoto–Uchiyama (``G**m`` from a table), while the obfuscator ``E(0)`` (Paillier's
DJN ``hs**a``, OU's ``H**r``) costs a fixed-base exponentiation: 86–128 multiplications
modulo ``n**2`` for a 2048-bit Paillier key. A party that computes encryptions of zero
while it waits on the network later encrypts at the cost of the plaintext part and one
multiplication per ciphertext. The key holder computes them cheapest, by the CRT
(:class:`~vflcrypto.he.paillier.PaillierPrivateKey`), and can hand them to a party that
encrypts under its key (what linear regression's coordinator does, ``linreg.obfuscators``).

Single use. Two ciphertexts that share an obfuscator, ``c = g**m z`` and ``c' = g**m' z``,
give ``c / c' = g**(m - m')`` to anyone who sees both: under Paillier ``1 + (m - m') n``,
the difference read off without the key (FATE removed its obfuscator-reuse modes for this
reason). :meth:`ObfuscatorStock.take` pops each obfuscator from the stock under a lock and
keeps no copy; a shortfall is computed at once and never stocked; nothing is ever handed
out twice, across rows, vectors or iterations, whatever the number of threads taking.

Bounded memory. At most ``limit`` obfuscators exist at any time, stocked or being computed
(a 2048-bit Paillier obfuscator is 512 bytes; 30,000 take ~17 MB with Python's integer
overhead). :meth:`ObfuscatorStock.close` drops them (memory is not wiped: Python cannot).

Idle time only. :meth:`ObfuscatorStock.start` runs a daemon thread that tops the stock up
``batch`` at a time through the key's own raw encryption path (the CRT path for a private
key) inside :func:`vflcrypto.parallel.background`: the work goes to the low-priority
process pool (nice 19), which the operating system runs only on CPU time that nothing else
wants, so the producer yields to the owner's foreground work and to any other process on
the machine, and the interpreter lock is not its limit. Without a pool
(``VFLCRYPTO_WORKERS=1``) the producer computes in its thread and shares the interpreter
lock with the owner's threads: wrap foreground work in :meth:`ObfuscatorStock.paused`.

Randomness comes from the key's encryptor, i.e. :func:`vflcrypto.he.paillier.fixed_base._random_digits`
(:mod:`secrets`), looked up at every call, so the privacy-mutation seam that replaces it
reaches stocked obfuscators too (in this process: pool workers are other processes).

Usage (a key holder that encrypts between rounds; a public key works the same way)::

    stock = ObfuscatorStock(private_key, limit=len(gradients)).start()
    ...                                              # waits on the network: the stock fills
    vec = stock.encrypt_packed(gradients, spec)      # stocked obfuscators first, the rest online
    stock.close()
"""

from __future__ import annotations

import collections
import contextlib
import threading
import warnings
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

import numpy as np
from gmpy2 import mpz

from .. import parallel
from ..errors import ConfigurationError, EncodingError, KeyMismatchError
from .encoding import PackingSpec
from .ou import OUPrivateKey, OUPublicKey, OUVector
from .paillier import CipherVector, PaillierPrivateKey, PaillierPublicKey, PaillierVector
from .paillier.plain import as_int_array, encrypt_fixed, encrypt_packed

__all__ = ["DEFAULT_BATCH", "ObfuscatorStock", "StockStats"]

V = TypeVar("V", bound=CipherVector)
Key = PaillierPublicKey | PaillierPrivateKey | OUPublicKey | OUPrivateKey
PublicKey = PaillierPublicKey | OUPublicKey

# Obfuscators the producer computes per round: enough that a 2048-bit key's round goes to
# the process pool (vflcrypto.parallel's cost threshold), few enough that a pause or close
# takes effect within a fraction of a second (512 CRT encryptions: ~0.15 s on 2 workers).
DEFAULT_BATCH = 512


@dataclass(frozen=True)
class StockStats:
    """Counters of one stock: how many obfuscators are stocked now, were made by the producer,
    were put in, were handed out from the stock, and were computed at once for a shortfall."""

    stocked: int
    produced: int
    put: int
    from_stock: int
    online: int


class _Store:
    """The state the stock and its producer thread share (the thread holds no reference to the
    stock, so a stock that is dropped without :meth:`ObfuscatorStock.close` still stops it)."""

    def __init__(self, key: Key, limit: int, batch: int) -> None:
        self.key, self.limit, self.batch = key, limit, batch
        self.items: collections.deque[mpz] = collections.deque()
        self.cond = threading.Condition()
        self.making = 0  # obfuscators the producer is computing now (counted against the limit)
        self.pauses = 0
        self.closed = False
        self.running = False
        self.error: BaseException | None = None
        self.produced = self.put = self.from_stock = self.online = 0

    def produce(self) -> None:
        """The producer thread: top the stock up to ``limit``, ``batch`` at a time, until closed."""
        try:
            while True:
                with self.cond:
                    while not self.closed and (self.pauses or len(self.items) + self.making >= self.limit):
                        self.cond.wait()
                    if self.closed:
                        return
                    k = min(self.batch, self.limit - len(self.items) - self.making)
                    self.making += k
                try:
                    with parallel.background():
                        made = self.key._raw_encrypt_blob([0] * k)[0]
                except BaseException:
                    with self.cond:
                        self.making -= k
                    raise
                with self.cond:  # one step: stocked + making never exceeds the limit
                    self.making -= k
                    if not self.closed:
                        self.items.extend(made)
                        self.produced += k
                    self.cond.notify_all()
        except Exception as exc:  # the stock stays correct: every take computes its shortfall online
            with self.cond:
                self.error = exc
            warnings.warn(f"obfuscator producer stopped ({type(exc).__name__}: {exc}); "
                          "encryptions continue with online obfuscators", RuntimeWarning, stacklevel=1)
        finally:
            with self.cond:
                self.running = False
                self.cond.notify_all()

    def take(self, count: int) -> list[mpz]:
        """``count`` fresh encryptions of zero: popped from the stock, the shortfall computed now."""
        if count < 0:
            raise ValueError("cannot take a negative number of obfuscators")
        with self.cond:
            if self.closed:
                raise ConfigurationError("the obfuscator stock is closed")
            popleft = self.items.popleft
            got = [popleft() for _ in range(min(count, len(self.items)))]
            self.from_stock += len(got)
            self.cond.notify_all()  # room again: wake the producer
        short = count - len(got)
        if short:
            got.extend(self.key._raw_encrypt_blob([0] * short)[0])
            with self.cond:
                self.online += short
        return got

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.items.clear()
            self.cond.notify_all()


class ObfuscatorStock(Generic[V]):
    """Precomputed encryptions of zero under one key, bounded by ``limit``, each handed out once.

    ``key``: a Paillier or Okamoto–Uchiyama public key, or the matching private key (the key
    holder's CRT encryption, the cheapest). ``limit``: the most obfuscators held at once,
    stocked or being computed. ``batch``: obfuscators the producer computes per round.

    Fill it with :meth:`start` (a background producer) or :meth:`put` (obfuscators someone
    else computed, e.g. received from the key holder); use it through :meth:`take` (the
    obfuscators themselves, as a vector of encryptions of zero) or the encryption methods,
    which mirror the key's (:meth:`encrypt`, :meth:`encrypt_fixed`, :meth:`encrypt_packed`,
    :meth:`rerandomize`) and give the same ciphertext distribution: ``g**m`` times a
    stocked obfuscator, the shortfall computed online. Thread-safe. Also a context manager
    (:meth:`start` on entry, :meth:`close` on exit).
    """

    @overload
    def __init__(self: ObfuscatorStock[PaillierVector], key: PaillierPublicKey | PaillierPrivateKey, limit: int,
                 *, batch: int = DEFAULT_BATCH) -> None: ...

    @overload
    def __init__(self: ObfuscatorStock[OUVector], key: OUPublicKey | OUPrivateKey, limit: int,
                 *, batch: int = DEFAULT_BATCH) -> None: ...

    def __init__(self, key: Key, limit: int, *, batch: int = DEFAULT_BATCH) -> None:
        if not isinstance(key, PaillierPublicKey | PaillierPrivateKey | OUPublicKey | OUPrivateKey):
            raise ConfigurationError(f"an obfuscator stock needs a Paillier or OU key, not {type(key).__name__}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigurationError("the stock's limit must be a positive number of obfuscators")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigurationError("the producer's batch must be a positive number of obfuscators")
        self._pk: PublicKey = key.public_key if isinstance(key, PaillierPrivateKey | OUPrivateKey) else key
        self._cls: type[Any] = OUVector if isinstance(self._pk, OUPublicKey) else PaillierVector
        self._store = _Store(key, limit, min(batch, limit))
        self._thread: threading.Thread | None = None
        self._finalizer = weakref.finalize(self, self._store.close)

    # ----------------------------------------------------------------- state
    @property
    def public_key(self) -> PublicKey:
        """The key the obfuscators encrypt zero under."""
        return self._pk

    @property
    def limit(self) -> int:
        return self._store.limit

    @property
    def error(self) -> BaseException | None:
        """Why the producer stopped early (``None`` while it runs or after a clean close)."""
        return self._store.error

    def __len__(self) -> int:
        """Obfuscators stocked now."""
        with self._store.cond:
            return len(self._store.items)

    def stats(self) -> StockStats:
        s = self._store
        with s.cond:
            return StockStats(len(s.items), s.produced, s.put, s.from_stock, s.online)

    def __repr__(self) -> str:
        return f"ObfuscatorStock(limit={self.limit}, stocked={len(self)}, key={self._pk.fingerprint})"

    # ----------------------------------------------------------------- producer
    def start(self) -> ObfuscatorStock[V]:
        """Start the background producer (idempotent); returns the stock."""
        s = self._store
        with s.cond:
            if s.closed:
                raise ConfigurationError("the obfuscator stock is closed")
            if s.running:
                return self
            s.running, s.error = True, None
        self._thread = threading.Thread(target=s.produce, name="vflcrypto-obfuscators", daemon=True)
        self._thread.start()
        return self

    def pause(self) -> None:
        """Stop starting new rounds until :meth:`resume` (a round already running finishes)."""
        with self._store.cond:
            self._store.pauses += 1

    def resume(self) -> None:
        with self._store.cond:
            self._store.pauses = max(0, self._store.pauses - 1)
            self._store.cond.notify_all()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The producer starts no new round while the block runs (nestable)."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def wait(self, count: int | None = None, *, timeout: float | None = None) -> bool:
        """Block until at least ``min(count, limit)`` (default ``limit``) are stocked; ``False`` on
        timeout, or at once if the producer is not running (never started, closed or failed)."""
        s = self._store
        target = s.limit if count is None else min(count, s.limit)
        with s.cond:
            s.cond.wait_for(lambda: len(s.items) >= target or not s.running or s.closed, timeout)
            return len(s.items) >= target

    def close(self, timeout: float = 5.0) -> None:
        """Stop the producer and drop the stock (idempotent). Waits up to ``timeout`` seconds for a
        round in progress to end; the daemon thread then ends by itself (never a hang)."""
        self._finalizer()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def __enter__(self) -> ObfuscatorStock[V]:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- in and out
    def take(self, count: int) -> V:
        """``count`` fresh encryptions of zero (stocked first, the shortfall computed now), as a
        vector: each is the caller's alone, to use once."""
        return self._make(self._store.take(count))

    def put(self, obfuscators: CipherVector) -> None:
        """Stock obfuscators computed elsewhere (e.g. received from the key holder, validated on
        receipt): encryptions of zero under this stock's key, which nobody else may use.

        Raises :class:`KeyMismatchError` for another key, :class:`EncodingError` for a packed
        or fixed-point vector (not obfuscators), :class:`ConfigurationError` past the limit.
        """
        if obfuscators.public_key != self._pk:
            raise KeyMismatchError("obfuscators under another key")
        if obfuscators.packing is not None or obfuscators.frac_bits:
            raise EncodingError("obfuscators are plain encryptions of zero, not packed or fixed-point values")
        s = self._store
        with s.cond:
            if s.closed:
                raise ConfigurationError("the obfuscator stock is closed")
            if len(s.items) + s.making + len(obfuscators) > s.limit:
                raise ConfigurationError(f"{len(obfuscators)} more obfuscators exceed the stock's limit of {s.limit}")
            s.items.extend(obfuscators._c)
            s.put += len(obfuscators)
            s.cond.notify_all()

    # ----------------------------------------------------------------- encryption
    def _make(self, cts: list[mpz], **meta: Any) -> V:
        vec: V = self._cls._make(self._pk, cts, **meta)
        return vec

    def _raw(self, ms: Sequence[int]) -> tuple[list[mpz], bytes | None]:
        """The raw encryptor of :mod:`vflcrypto.he.paillier.plain`: ``g**m`` times a fresh obfuscator."""
        zs = self._store.take(len(ms))
        mod = self._pk.cmod
        return [g * z % mod for g, z in zip(self._pk._gpow(ms), zs, strict=True)], None

    def encrypt(self, values: Sequence[int] | np.ndarray) -> V:
        """The key's ``encrypt`` (signed integers), with stocked obfuscators."""
        return self._make(self._raw(self._pk._encode(as_int_array(values)))[0])

    def encrypt_fixed(self, x: np.ndarray | Sequence[float], frac_bits: int | None = None, *,
                      packing: PackingSpec | None = None) -> V:
        """The key's ``encrypt_fixed`` (fixed point, or packed with ``packing``), with stocked obfuscators."""
        vec: V = encrypt_fixed(self._cls, self._pk, self._raw, self._pk._encode, x, frac_bits, packing)
        return vec

    def encrypt_packed(self, x: np.ndarray, spec: PackingSpec) -> V:
        """The key's ``encrypt_packed`` (one ciphertext per row of slots), with stocked obfuscators."""
        vec: V = encrypt_packed(self._cls, self._pk, self._raw, x, spec)
        return vec

    def rerandomize(self, vec: V) -> V:
        """``vec.rerandomize()`` with stocked obfuscators: same plaintexts, fresh randomness."""
        if vec.public_key != self._pk:
            raise KeyMismatchError("vector is encrypted under another key")
        zs = self._store.take(len(vec))
        mod = self._pk.cmod
        return vec._like([c * z % mod for c, z in zip(vec._c, zs, strict=True)])
