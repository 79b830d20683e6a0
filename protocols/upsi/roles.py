"""The two roles of unbalanced PSI as named steps, and the in-process run.

Steps (numbered as in the package docstring): small ``start`` (1 hello) → large
``on_hello`` (2 hello, then the transfer or delta if the small party's is missing or old)
→ small ``on_hello`` / ``on_values`` (3 queries) → large ``on_query`` (4 answers, per
chunk) → small ``on_answer`` (5 unblind and look up).

The small party's transfer (an input, refreshed by the run) lives on the role object, not
in its wire state: these roles run on :func:`~vflcrypto.runtime.steps.drive` (threads,
processes, network links), not on the stateless Flower runtime.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import ProtocolError
from vflcrypto.psi import oprf
from vflcrypto.psi import primitives as psi
from vflcrypto.runtime.channel import (
    DEFAULT_TIMEOUT,
    AuditTap,
    Channel,
    Endpoint,
    LocalNetwork,
    Transcript,
    run_parties,
)
from vflcrypto.runtime.steps import Next, Role, done, drive, send, then

from .messages import (
    FULL,
    LARGE,
    MAX_CHUNK,
    NO_VALUES,
    PROTOCOL_VERSION,
    SMALL,
    Answer,
    Hello,
    Query,
    UnbalancedResult,
    Values,
)
from .store import OprfCache, OprfKey, Transfer, build_cache, export_transfer, merge_transfer, new_key

__all__ = ["LargeRole", "LocalRun", "SmallRole", "run_large", "run_local", "run_small"]

DEFAULT_CHUNK = 50_000
DEFAULT_MAX_SMALL = 1_000_000


def _lengths(n: int, chunk: int) -> list[int]:
    return [min(chunk, n - s) for s in range(0, n, chunk)]


def _check_hello(h: Hello, role: str) -> None:
    if h.version != PROTOCOL_VERSION:
        raise ProtocolError(f"unbalanced PSI version mismatch: peer speaks {h.version}, this side {PROTOCOL_VERSION}")
    if h.role != role:
        raise ProtocolError(f"the peer claims role {h.role!r}; unbalanced PSI expects {role!r}")
    if h.set_size < 0 or not 1 <= h.chunk_size <= MAX_CHUNK or h.values_total < 0:
        raise ProtocolError("peer's hello has an invalid set size, chunk size or value count")


@dataclass
class _LargeState:
    k: int = 0
    peer_size: int = 0
    peer_chunk: int = 1


class LargeRole(Role[_LargeState]):
    """The large party: its cache and OPRF key; ships a transfer or delta when needed, then answers queries."""

    role = LARGE
    State = _LargeState

    def __init__(self, cache: OprfCache, key: OprfKey, *, peer: str = SMALL, chunk_size: int = DEFAULT_CHUNK,
                 max_small: int = DEFAULT_MAX_SMALL, name: str = LARGE) -> None:
        super().__init__(name)
        if cache.key_id != key.key_id:
            raise ProtocolError(f"the cache was built with OPRF key {cache.key_id}, not {key.key_id}")
        self.cache, self.key, self.peer = cache, key, peer
        self.chunk_size, self.max_small = chunk_size, max_small

    def start(self) -> Next:
        self.hold("oprf_key", self.key.secret)
        return then([], self.peer, Hello, "on_hello")

    def _transfer_for(self, h: Hello) -> tuple[int, Transfer | None]:
        """What the small party needs: nothing, a delta after its generation, or a full transfer."""
        c = self.cache
        if h.key_id == c.key_id and 0 <= h.generation <= c.generation and h.value_bytes > 0:
            have = Transfer(c.key_id, h.generation, c.count, h.value_bytes, h.max_small, np.zeros(0, "S1"))
            if have.covers(max(h.set_size, h.max_small)):
                if h.generation == c.generation:
                    return NO_VALUES, None
                return h.generation, export_transfer(c, h.max_small, since=h.generation, value_bytes=h.value_bytes)
        return FULL, export_transfer(c, max(self.max_small, h.set_size))

    def on_hello(self, h: Hello) -> Next:
        """Step 2: the small party's hello; our hello, then the values it lacks."""
        _check_hello(h, SMALL)
        st = self.state
        st.peer_size, st.peer_chunk, st.k = h.set_size, h.chunk_size, 0
        since, t = self._transfer_for(h)
        vals = t.values if t is not None else np.zeros(0, "S1")
        width = t.value_bytes if t is not None else h.value_bytes
        reply = Hello(PROTOCOL_VERSION, LARGE, self.cache.count, self.chunk_size, self.cache.key_id,
                      self.cache.generation, width, t.max_small if t is not None else h.max_small, since, len(vals))
        sends = [send(self.peer, reply)]
        sends += [send(self.peer, Values(k, vals[s : s + self.chunk_size].tobytes()))
                  for k, s in enumerate(range(0, len(vals), self.chunk_size))]
        if st.peer_size == 0:
            return done(self._result(), sends)
        return then(sends, self.peer, Query, "on_query")

    def on_query(self, q: Query) -> Next:
        """Step 4: apply the key to one chunk of blinded IDs and answer it."""
        st = self.state
        lengths = _lengths(st.peer_size, st.peer_chunk)
        if st.k >= len(lengths) or q.chunk != st.k or len(q.points) != lengths[st.k] * oprf.POINT_BYTES:
            raise ProtocolError(f"{self.peer} sent a malformed query chunk {q.chunk}")
        st.k += 1
        sends = [send(self.peer, Answer(q.chunk, oprf.apply_key(self.key.secret, bytes(q.points))))]
        if st.k < len(lengths):
            return then(sends, self.peer, Query, "on_query")
        return done(self._result(), sends)

    def _result(self) -> UnbalancedResult:
        return UnbalancedResult(self.name, LARGE, self.cache.count, self.cache.count, self.state.peer_size,
                                None, None)


@dataclass
class _SmallState:
    k: int = 0
    peer_size: int = 0
    peer_chunk: int = 1
    since: int = NO_VALUES
    values_total: int = 0
    hello: Hello | None = None
    values: list[bytes] = field(default_factory=list)
    answers: list[bytes] = field(default_factory=list)
    blind_secret: bytes = b""
    flags: bytes = b""
    order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class SmallRole(Role[_SmallState]):
    """The small party: its IDs and (if it has one) its transfer; learns the intersection."""

    role = SMALL
    State = _SmallState

    def __init__(self, canon: psi.CanonicalIds, transfer: Transfer | None = None, *, peer: str = LARGE,
                 chunk_size: int = DEFAULT_CHUNK, name: str = SMALL) -> None:
        super().__init__(name)
        self.canon, self.transfer, self.peer, self.chunk_size = canon, transfer, peer, chunk_size
        self.received = 0

    def start(self) -> Next:
        """Step 1: set size and what transfer it holds."""
        t = self.transfer
        h = Hello(PROTOCOL_VERSION, SMALL, len(self.canon), self.chunk_size, t.key_id if t else "",
                  t.generation if t else -1, t.value_bytes if t else 0, t.max_small if t else 0, NO_VALUES, 0)
        return then([send(self.peer, h)], self.peer, Hello, "on_hello")

    def on_hello(self, h: Hello) -> Next:
        """Step 3: the large party's hello; receive values if any follow, else send the queries."""
        _check_hello(h, LARGE)
        st = self.state
        st.peer_size, st.peer_chunk, st.since, st.values_total, st.hello, st.k = \
            h.set_size, h.chunk_size, h.since, h.values_total, h, 0
        if h.since == NO_VALUES:
            t = self.transfer
            if t is None or (t.key_id, t.generation, t.n_large) != (h.key_id, h.generation, h.set_size):
                raise ProtocolError("the large party sent no values, but this party's transfer is not its current one")
            return self._queries()
        if not 1 <= h.value_bytes <= oprf.OUTPUT_BYTES or h.since < FULL:
            raise ProtocolError("the large party's hello announces invalid values")
        if h.values_total == 0:
            return self._values_done()
        return then([], self.peer, Values, "on_values")

    def on_values(self, msg: Values) -> Next:
        """Step 3 (continued): one chunk of the transfer or delta."""
        st = self.state
        assert st.hello is not None  # set by on_hello, the only way into this step
        lengths = _lengths(st.values_total, st.peer_chunk)
        if st.k >= len(lengths) or msg.chunk != st.k or len(msg.values) != lengths[st.k] * st.hello.value_bytes:
            raise ProtocolError(f"{self.peer} sent a malformed values chunk {msg.chunk}")
        st.k += 1
        st.values.append(bytes(msg.values))
        if st.k < len(lengths):
            return then([], self.peer, Values, "on_values")
        return self._values_done()

    def _values_done(self) -> Next:
        st = self.state
        h = st.hello
        assert h is not None
        vals = np.frombuffer(b"".join(st.values), dtype=f"S{h.value_bytes}").copy()
        st.values, self.received = [], len(vals)
        if len(vals) > 1 and not bool(np.all(vals[:-1] <= vals[1:])):
            raise ProtocolError("the large party's values are not sorted")
        got = Transfer(h.key_id, h.generation, h.set_size, h.value_bytes, h.max_small, vals)
        if h.since == FULL:
            if len(vals) != h.set_size:
                raise ProtocolError(f"the transfer holds {len(vals)} values for a set of {h.set_size}")
            self.transfer = got
        else:
            if self.transfer is None:
                raise ProtocolError("the large party sent a delta, but this party holds no transfer")
            self.transfer = merge_transfer(self.transfer, got, h.since)
        return self._queries()

    def _queries(self) -> Next:
        st = self.state
        t = self.transfer
        assert t is not None
        if not t.covers(len(self.canon)):
            raise ProtocolError(f"the transfer's {t.value_bytes}-byte values do not keep false matches of "
                                f"{len(self.canon)} IDs below 2^-{oprf.FALSE_MATCH_BITS}")
        st.k = 0
        if not len(self.canon):
            return done(self._result(np.zeros(0, np.int64)))
        blinder = oprf.Blinder()
        st.blind_secret, st.order = blinder.secret, psi.random_permutation(len(self.canon))
        self.hold("blind_secret", blinder.secret)
        self.hold("send_order", st.order)
        points, st.flags = blinder.blind([self.canon.encoded[j] for j in st.order.tolist()])
        w = self.chunk_size * oprf.POINT_BYTES
        sends = [send(self.peer, Query(k, points[s : s + w])) for k, s in enumerate(range(0, len(points), w))]
        return then(sends, self.peer, Answer, "on_answer")

    def on_answer(self, msg: Answer) -> Next:
        """Step 5: the answers; when all are in, unblind, look up, and finish."""
        st = self.state
        lengths = _lengths(len(self.canon), self.chunk_size)
        if st.k >= len(lengths) or msg.chunk != st.k or len(msg.points) != lengths[st.k] * oprf.POINT_BYTES:
            raise ProtocolError(f"{self.peer} sent a malformed answer chunk {msg.chunk}")
        st.k += 1
        st.answers.append(bytes(msg.points))
        if st.k < len(lengths):
            return then([], self.peer, Answer, "on_answer")
        values = oprf.Blinder(st.blind_secret).unblind(b"".join(st.answers), st.flags)
        st.answers = []
        assert self.transfer is not None
        return done(self._result(st.order[self.transfer.contains(values)]))

    def _result(self, pos: np.ndarray) -> UnbalancedResult:
        enc = self.canon.encoded
        pos = np.asarray(sorted(pos.tolist(), key=enc.__getitem__), np.int64)  # canonical-ID order
        return UnbalancedResult(self.name, SMALL, len(self.canon), self.canon.n_input, self.state.peer_size,
                                len(pos), self.canon.rows[pos], self.transfer, self.received)


# --------------------------------------------------------------------------- over channels


def _one(channels: Mapping[str, Channel]) -> str:
    if len(channels) != 1:
        raise ProtocolError(f"unbalanced PSI needs exactly one peer, got {sorted(channels)}")
    return next(iter(channels))


def run_large(channels: Mapping[str, Channel], cache: OprfCache, key: OprfKey, *, timeout: float | None = None,
              **kwargs: Any) -> UnbalancedResult:
    """The large party over its single channel."""
    peer = _one(channels)
    result: UnbalancedResult = drive(LargeRole(cache, key, peer=peer, name=channels[peer].local.name, **kwargs),
                                     channels, timeout=timeout)
    return result


def run_small(channels: Mapping[str, Channel], canon: psi.CanonicalIds, transfer: Transfer | None, *,
              timeout: float | None = None, **kwargs: Any) -> UnbalancedResult:
    """The small party over its single channel (``transfer``: the one it holds, or ``None``)."""
    peer = _one(channels)
    result: UnbalancedResult = drive(SmallRole(canon, transfer, peer=peer, name=channels[peer].local.name,
                                               **kwargs), channels, timeout=timeout)
    return result


@dataclass
class LocalRun:
    """Both results, the transcript, the seconds of the online run, and the cache and key used."""

    results: dict[str, UnbalancedResult]
    transcript: Transcript
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def run_local(large_ids: Sequence[Any] | psi.CanonicalIds, small_ids: Sequence[Any] | psi.CanonicalIds, *,
              key: OprfKey | None = None, cache: OprfCache | None = None, transfer: Transfer | None = None,
              max_small: int = DEFAULT_MAX_SMALL, chunk_size: int = DEFAULT_CHUNK, timeout: float = DEFAULT_TIMEOUT,
              tap: AuditTap | None = None,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None) -> LocalRun:
    """Both parties in-process. Without ``cache`` the large party builds one under ``key`` (a new key if none)."""
    small = small_ids if isinstance(small_ids, psi.CanonicalIds) else psi.canonicalize_ids(small_ids)
    key = key or new_key()
    if cache is None:
        large = large_ids if isinstance(large_ids, psi.CanonicalIds) else psi.canonicalize_ids(large_ids)
        cache = build_cache(key, large.encoded)
    net = LocalNetwork([Endpoint(LARGE, LARGE), Endpoint(SMALL, SMALL)], timeout=timeout,
                       run_id=os.urandom(8).hex(), transcript=Transcript(tap))
    tasks: dict[str, Callable[..., Any]] = {
        LARGE: lambda: run_large(net.channels(LARGE), cache, key, chunk_size=chunk_size, max_small=max_small),
        SMALL: lambda: run_small(net.channels(SMALL), small, transfer, chunk_size=chunk_size),
    }
    for name, fn in (overrides or {}).items():
        tasks[name] = (lambda fn=fn, name=name: fn(net.channels(name)))
    t0 = time.perf_counter()
    results = run_parties(tasks, network=net)
    return LocalRun(results, net.transcript, time.perf_counter() - t0, {"cache": cache, "key": key})
