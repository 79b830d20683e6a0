"""One pairwise KKRT PSI session (OT-extension OPRF) as named steps, for either side.

The active party is the OPRF **receiver** (it learns the intersection), the passive party
the **sender**; the primitives are in :mod:`vflcrypto.psi.kkrt` and :mod:`vflcrypto.psi.ot`.
Steps (numbered as in the package docstring):

1. ``start``: both send ``align.hello`` (the same hello as ECDH).
2. ``on_hello``: the receiver cuckoo-hashes its IDs and sends ``align.ot_setup`` (code
   width, bins, stash rows, base-OT point ``A``); the sender waits for it.
3. ``on_ot_setup`` (sender): checks the shape, draws its secret choice bits ``s`` and sends
   ``align.ot_choice`` (one base-OT point per code bit).
4. ``on_ot_choice`` (receiver): derives both base-OT keys and streams ``align.oprf_matrix``
   (the OT-extension matrix, one chunk of table rows at a time), keeping its own OPRF
   output for each of its rows.
5. ``on_oprf_matrix`` (sender): per chunk, evaluates the OPRF for each of its IDs whose
   bins fall in the chunk (and every stash row); after the last chunk it shuffles all its
   values once (a per-chunk order would tell the receiver the bin of each value) and
   sends ``align.oprf_values``.
6. ``on_oprf_values`` (receiver): matches them against its own outputs; in mode both it
   sends, as ``align.common_values``, the matched values' places in the sender's sending
   order, listed in the order of the matched values.
7. ``on_common_values`` (sender, mode both): maps the places back to its own rows.

Both sides order the intersection by the common OPRF value, so the rows line up.
Cardinality-only mode is refused for KKRT: the receiver matches values against its own
per-row outputs, so it always learns *which* rows are common.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import ProtocolError
from vflcrypto.psi import kkrt, ot
from vflcrypto.psi import primitives as psi
from vflcrypto.runtime.steps import Next, prefixed, send, then

from .messages import ACTIVE, PROTOCOL_VERSION, CommonValues, Hello, OprfMatrix, OprfValues, OtChoice, OtSetup
from .session import check_hello, chunk_lengths

__all__ = ["MAX_STASH", "KkrtSession", "KkrtState", "matrix_rows_per_chunk", "values_per_chunk"]

ProgressFn = Callable[[int], None]
MAX_STASH = 64
_MAX_MATRIX_ROWS = 1 << 16  # 4 MiB per align.oprf_matrix message
_MAX_VALUES = 1 << 18  # 3 MiB per align.oprf_values / align.common_values message
_KEY_DOMAIN = b"vflcrypto/kkrt/public-keys/v1"


def matrix_rows_per_chunk(chunk_size: int) -> int:
    """Table rows per ``align.oprf_matrix`` message (a multiple of :data:`kkrt.ROW_ALIGN`)."""
    return max(kkrt.ROW_ALIGN, min(_MAX_MATRIX_ROWS, 16 * chunk_size) // kkrt.ROW_ALIGN * kkrt.ROW_ALIGN)


def values_per_chunk(chunk_size: int) -> int:
    return max(1, min(_MAX_VALUES, 16 * chunk_size))


def public_keys(receiver_nonce: bytes, sender_nonce: bytes) -> tuple[bytes, list[bytes]]:
    """The cuckoo hash key and the four code keys, from both hellos' nonces (public, fresh per run)."""
    def derive(i: int) -> bytes:
        return hashlib.sha256(_KEY_DOMAIN + bytes([i]) + receiver_nonce + sender_nonce).digest()[:16]
    return derive(0), [derive(i) for i in range(1, 5)]


@dataclass
class KkrtState:
    """What a KKRT session carries between messages (all wire-encodable)."""

    hello: Hello | None = None
    peer_hello: Hello | None = None
    peer_size: int = 0
    k: int = 0
    h0: np.ndarray = field(default_factory=lambda: np.zeros((0, 16), np.uint8))  # H0 of own IDs
    bins: int = 0
    stash: int = 0
    # receiver
    ot_scalar: bytes = b""
    ot_point: bytes = b""
    row_items: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # item per table row, or -1
    row_tags: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    own_values: np.ndarray = field(default_factory=lambda: np.zeros((0, kkrt.OUTPUT_BYTES), np.uint8))
    received: np.ndarray = field(default_factory=lambda: np.zeros((0, kkrt.OUTPUT_BYTES), np.uint8))
    # sender
    choice: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    keys: np.ndarray = field(default_factory=lambda: np.zeros((0, ot.KEY_BYTES), np.uint8))
    pair_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # grouped by matrix chunk
    pair_items: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    pair_tags: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    chunk_starts: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))  # pairs of chunk c: [c, c+1)
    values: np.ndarray = field(default_factory=lambda: np.zeros((0, kkrt.OUTPUT_BYTES), np.uint8))
    #: the receiver's argsort of its digests' first 8 bytes (:func:`psi.digest_order`), made while the peer computes
    own_order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    send_order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # sender: value sent k-th
    common: list[bytes] = field(default_factory=list)
    common_total: int = 0


class KkrtSession:
    """One side of a pairwise KKRT session with ``peer`` (same interface as :class:`.session.Session`)."""

    NAME = "KKRT"
    PROTOCOL = "kkrt"

    def __init__(self, role: str, peer: str, canon: psi.CanonicalIds, *, mode: str, chunk_size: int,
                 progress: ProgressFn | None, finished: Callable[[np.ndarray | None, int | None, int], Next],
                 hold: Callable[[str, Any], None], stash: int = 0, state: KkrtState | None = None) -> None:
        if mode == "size":
            raise ProtocolError(f"cardinality-only mode is not offered for {self.NAME}: the receiver matches the "
                                "sender's values against its own per-row outputs, so it always learns which "
                                "rows are common (use protocol 'ecdh')")
        if not 0 <= stash <= MAX_STASH:
            raise ProtocolError(f"KKRT stash size must be 0..{MAX_STASH}")
        self.role, self.peer, self.canon = role, peer, canon
        self.pair_mode = "both" if mode == "all" else mode
        self.mode, self.chunk_size, self.stash = mode, chunk_size, stash
        self.tick = progress or (lambda _n: None)
        self.finished, self.hold = finished, hold
        self.state = state if state is not None else KkrtState()

    @property
    def receiver(self) -> bool:
        return self.role == ACTIVE

    # ----------------------------------------------------------------- 1 hello
    def start(self) -> Next:
        """Step 1: the hello (protocol, mode, version, role, set size, chunk size, nonce)."""
        hello = Hello(self.PROTOCOL, self.mode, PROTOCOL_VERSION, self.role, len(self.canon), self.chunk_size,
                      os.urandom(16), b"", b"")
        self.state.hello = hello
        return then([send(self.peer, hello)], self.peer, Hello, "on_hello")

    def on_hello(self, peer: Hello) -> Next:
        """Check the peer's hello; step 2: the receiver hashes its IDs and sends the OT setup."""
        self._greet(peer)
        if not self.receiver:
            return then([], self.peer, OtSetup, "on_ot_setup")
        return self._setup()

    def _greet(self, peer: Hello) -> None:
        """Check the peer's hello against this side's and keep its set size."""
        st, mine = self.state, self.state.hello
        assert mine is not None  # set by start
        check_hello(mine, peer)
        st.peer_hello, st.peer_size = peer, peer.set_size

    def _keys(self) -> tuple[bytes, list[bytes]]:
        st = self.state
        assert st.hello is not None and st.peer_hello is not None
        r, s = (st.hello, st.peer_hello) if self.receiver else (st.peer_hello, st.hello)
        return public_keys(r.nonce, s.nonce)

    def _setup(self) -> Next:
        st = self.state
        n = len(self.canon)
        st.bins, st.stash = kkrt.cuckoo_bins(n), self.stash
        rows = kkrt.table_rows(st.bins, st.stash)
        hash_key, _ = self._keys()
        st.h0 = kkrt.item_hashes(self.canon.encoded)
        table, which, stashed = kkrt.cuckoo_insert(kkrt.locations(st.h0, hash_key, st.bins), st.bins, st.stash)
        st.row_items = np.full(rows, -1, np.int32)
        st.row_items[: st.bins] = table
        st.row_items[st.bins : st.bins + len(stashed)] = stashed
        st.row_tags = np.zeros(rows, np.int8)
        occupied = st.row_items >= 0
        st.row_tags[occupied] = which[st.row_items[occupied]]
        sender = ot.BaseOtSender.create()
        st.ot_scalar, st.ot_point = sender.scalar, sender.point
        self.hold("kkrt_table", st.row_items)
        self.hold("kkrt_public_keys", [hash_key, *self._keys()[1]])
        self.hold("kkrt_bins", st.bins)
        self.hold("kkrt_ot_point", sender.point)
        return then([send(self.peer, OtSetup(kkrt.WIDTH, st.bins, st.stash, sender.point))],
                    self.peer, OtChoice, "on_ot_choice")

    # ----------------------------------------------------------------- 3 sender: base-OT choices
    def on_ot_setup(self, msg: OtSetup) -> Next:
        """Step 3 (sender): check the table shape; send the base-OT points of its secret choice bits."""
        st = self.state
        if msg.width != kkrt.WIDTH:
            raise ProtocolError(f"{self.peer} uses a KKRT code of width {msg.width}; this side uses {kkrt.WIDTH}")
        if not 0 <= msg.stash <= MAX_STASH:
            raise ProtocolError(f"{self.peer} asks for a stash of {msg.stash} rows (at most {MAX_STASH})")
        expected = kkrt.cuckoo_bins(st.peer_size)
        if msg.bins != expected:
            raise ProtocolError(f"{self.peer} announced {msg.bins} cuckoo bins; its set size {st.peer_size} "
                                f"gives {expected}")
        st.bins, st.stash = msg.bins, msg.stash
        st.choice = kkrt.random_choice_bits()
        points, st.keys = ot.BaseOtReceiver.choose(msg.point, st.choice)
        self.hold("kkrt_choice", st.choice)
        self._sender_pairs()
        st.k = 0
        return then([send(self.peer, OtChoice(points))], self.peer, OprfMatrix, "on_oprf_matrix")

    def _sender_pairs(self) -> None:
        """Every (table row, item, tag) the sender evaluates: 3 cuckoo bins per item, then each stash row.

        Grouped by matrix chunk (a stable radix sort on the 16-bit chunk number), so each
        chunk's pairs are one contiguous slice; compact dtypes keep 10⁷ IDs in bounded memory.
        """
        st = self.state
        n = len(self.canon)
        hash_key, _ = self._keys()
        st.h0 = kkrt.item_hashes(self.canon.encoded)
        locs = kkrt.locations(st.h0, hash_key, st.bins).astype(np.int32)
        copies = kkrt.HASHES + st.stash
        rows = np.empty(n * copies, np.int32)
        for h in range(kkrt.HASHES):
            rows[h * n : (h + 1) * n] = locs[:, h]
        for j in range(st.stash):
            rows[(kkrt.HASHES + j) * n : (kkrt.HASHES + j + 1) * n] = st.bins + j
        per = matrix_rows_per_chunk(st.peer_hello.chunk_size if st.peer_hello else 1)
        chunks = len(chunk_lengths(kkrt.table_rows(st.bins, st.stash), per))
        order = np.argsort((rows // per).astype(np.uint16 if chunks <= 1 << 16 else np.uint32), kind="stable")
        st.pair_rows = rows[order]
        st.pair_items = (order % max(n, 1)).astype(np.int32)
        st.pair_tags = np.minimum(order // max(n, 1), kkrt.STASH_TAG).astype(np.int8)
        counts = np.bincount(st.pair_rows // per, minlength=chunks)
        st.chunk_starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        st.values = np.zeros((len(order), kkrt.OUTPUT_BYTES), np.uint8)

    # ----------------------------------------------------------------- 4 receiver: the OT-extension matrix
    def on_ot_choice(self, msg: OtChoice) -> Next:
        """Step 4 (receiver): both base-OT keys per code bit; stream the OT-extension matrix."""
        st = self.state
        k0, k1 = ot.BaseOtSender(st.ot_scalar, st.ot_point).keys(msg.points, kkrt.WIDTH)
        st.ot_scalar = b""
        st.own_values = np.zeros((len(self.canon), kkrt.OUTPUT_BYTES), np.uint8)
        st.k = 0
        last = then([], self.peer, OprfValues, "on_oprf_values")
        if st.peer_size == 0:
            return prefixed(self._matrix_out(k0, k1), self._match())
        return prefixed(self._matrix_out(k0, k1), last)

    def _matrix_out(self, k0: np.ndarray, k1: np.ndarray) -> Iterator[tuple[str, Any]]:
        st = self.state
        _, code_keys = self._keys()
        per = matrix_rows_per_chunk(self.chunk_size)
        total = len(st.row_items)
        for c, start in enumerate(range(0, total, per)):
            items = st.row_items[start : start + per]
            blocks = np.frombuffer(os.urandom(16 * len(items)), np.uint8).reshape(-1, 16).copy()  # empty rows
            occupied = items >= 0
            blocks[occupied] = st.h0[items[occupied]]
            codes = kkrt.code_words(blocks, st.row_tags[start : start + per], code_keys)
            self.hold("kkrt_codes", codes)
            u, t = kkrt.receiver_matrix(k0, k1, codes, start)
            idx = np.nonzero(occupied)[0]
            st.own_values[items[idx]] = kkrt.hash_rows(t[idx], idx + start)
            self.hold("kkrt_t", t)
            self.hold("kkrt_row_values", (idx + start, st.own_values[items[idx]]))
            self.tick(int(occupied.sum()))
            yield send(self.peer, OprfMatrix(c, u.tobytes()))

    # ----------------------------------------------------------------- 5 sender: the OPRF values
    def on_oprf_matrix(self, msg: OprfMatrix) -> Next:
        """Step 5 (sender): evaluate its IDs on one chunk of rows; after the last, send all values shuffled."""
        st = self.state
        per = matrix_rows_per_chunk(st.peer_hello.chunk_size if st.peer_hello else 1)
        lengths = chunk_lengths(kkrt.table_rows(st.bins, st.stash), per)
        if st.k >= len(lengths) or msg.chunk != st.k or len(msg.columns) != kkrt.WIDTH * lengths[st.k] // 8:
            raise ProtocolError(f"{self.peer} sent a malformed chunk {msg.chunk} of the OT-extension matrix")
        start = st.k * per
        st.k += 1
        u = np.frombuffer(msg.columns, np.uint8).reshape(kkrt.WIDTH, -1)
        q = kkrt.sender_rows(st.keys, st.choice, u, start)
        lo, hi = int(st.chunk_starts[st.k - 1]), int(st.chunk_starts[st.k])
        if hi > lo:
            _, code_keys = self._keys()
            codes = kkrt.code_words(st.h0[st.pair_items[lo:hi]], st.pair_tags[lo:hi], code_keys)
            s_bytes = np.packbits(st.choice, bitorder="little")
            rows = st.pair_rows[lo:hi].astype(np.int64)
            st.values[lo:hi] = kkrt.hash_rows(q[rows - start] ^ (codes & s_bytes), rows)
            self.tick(int(hi - lo))
        if st.k < len(lengths):
            return then([], self.peer, OprfMatrix, "on_oprf_matrix")
        return self._values_out()

    def _values_out(self) -> Next:
        st = self.state
        order = self._sending_order()
        st.send_order = order  # mode both: the receiver names the matched values by their place in it
        per = values_per_chunk(self.chunk_size)
        st.k = 0
        if self.pair_mode != "both":
            return prefixed(self._values_sends(order, per), self.finished(None, None, st.peer_size))
        return prefixed(self._values_sends(order, per, index=True),
                        then([], self.peer, CommonValues, "on_common_values"))

    def _sending_order(self) -> np.ndarray:
        """The order the values go in, independent of this party's table and file: one global shuffle."""
        return psi.random_permutation(len(self.state.values))

    def _values_sends(self, order: np.ndarray, per: int, *, index: bool = False) -> Iterator[tuple[str, Any]]:
        """The shuffled values, chunk by chunk; then (mode both), while the receiver matches, sort this party's
        IDs for its output."""
        st = self.state
        for c, s in enumerate(range(0, len(order), per)):
            # np.take of whole rows: about twice as fast as fancy indexing the 2-D array
            yield send(self.peer, OprfValues(c, np.take(st.values, order[s : s + per], axis=0).tobytes()))
        if index and isinstance(self.canon.encoded, psi.PackedIds):
            self.canon.encoded.byte_order()  # the output's order of all its IDs, cached

    def _peer_value_count(self) -> int:
        """How many OPRF values the sender sends: one per cuckoo candidate bin and stash row of each ID."""
        return self.state.peer_size * (kkrt.HASHES + self.state.stash)

    def _value_items(self, hit: np.ndarray) -> np.ndarray:
        """The sender's own rows (canonical positions) of its values at positions ``hit``."""
        return self.state.pair_items[hit].astype(np.int64)

    # ----------------------------------------------------------------- 6 receiver: match
    def on_oprf_values(self, msg: OprfValues) -> Next:
        """Step 6 (receiver): collect the sender's values; after the last chunk, match them."""
        st = self.state
        assert st.peer_hello is not None
        expected = self._peer_value_count()
        lengths = chunk_lengths(expected, values_per_chunk(st.peer_hello.chunk_size))
        if st.k >= len(lengths) or msg.chunk != st.k or len(msg.values) != lengths[st.k] * kkrt.OUTPUT_BYTES:
            raise ProtocolError(f"{self.peer} sent a malformed chunk {msg.chunk} of OPRF values")
        if st.k == 0:
            st.received = np.empty((expected, kkrt.OUTPUT_BYTES), np.uint8)
        at = st.k * values_per_chunk(st.peer_hello.chunk_size)
        st.received[at : at + lengths[st.k]] = np.frombuffer(msg.values, np.uint8).reshape(-1, kkrt.OUTPUT_BYTES)
        st.k += 1
        self.tick(len(msg.values) // kkrt.OUTPUT_BYTES)
        if st.k < len(lengths):
            return then([], self.peer, OprfValues, "on_oprf_values")
        return self._match()

    def _match(self) -> Next:
        st = self.state
        own = np.ascontiguousarray(st.own_values).view(psi.DIGEST_DTYPE).ravel()
        # the pairs' order goes to the sender in align.common_values (mode both) and both sides then sort their
        # rows by canonical ID, so the digest order's sort is not needed
        pos, where = psi.match_pairs(own, np.ascontiguousarray(st.received).view(psi.DIGEST_DTYPE).ravel(),
                                     own_order=st.own_order if len(st.own_order) == len(own) else None,
                                     ordered=False)
        st.received = np.zeros((0, kkrt.OUTPUT_BYTES), np.uint8)
        if self.pair_mode != "both":
            return self.finished(pos, len(pos), st.peer_size)
        places = where.astype("<u8")  # each matched value's place in the sender's sending order
        per = values_per_chunk(self.chunk_size)
        sends = [send(self.peer, CommonValues(c, len(pos), places[s : s + per].tobytes()))
                 for c, s in enumerate(range(0, len(pos), per))] or [send(self.peer, CommonValues(0, 0, b""))]
        return prefixed(sends, self.finished(pos, len(pos), st.peer_size))

    # ----------------------------------------------------------------- 7 sender: its rows
    def on_common_values(self, msg: CommonValues) -> Next:
        """Step 7 (sender, mode both): map the matched values' places to its own rows, in the values' order."""
        st = self.state
        assert st.peer_hello is not None
        if st.k == 0:
            if not 0 <= msg.total <= min(len(self.canon), st.peer_size):
                raise ProtocolError(f"{self.peer} reported an impossible intersection size {msg.total}")
            st.common_total = msg.total
        lengths = chunk_lengths(st.common_total, values_per_chunk(st.peer_hello.chunk_size)) or [0]
        if st.k >= len(lengths) or msg.chunk != st.k or msg.total != st.common_total \
                or len(msg.positions) != lengths[st.k] * 8:
            raise ProtocolError(f"{self.peer} sent a malformed chunk {msg.chunk} of the common values")
        st.k += 1
        st.common.append(bytes(msg.positions))
        if st.k < len(lengths):
            return then([], self.peer, CommonValues, "on_common_values")
        places = np.frombuffer(b"".join(st.common), "<u8")
        if len(places) and int(places.max()) >= len(st.send_order):
            raise ProtocolError(f"{self.peer} reported common values that are not among this party's own "
                                f"(a place past the {len(st.send_order)} values it sent)")
        taken = np.zeros(len(st.send_order), bool)
        taken[places.astype(np.int64)] = True
        if int(taken.sum()) != len(places):
            raise ProtocolError(f"{self.peer} reported one of this party's values twice")
        items = self._value_items(st.send_order[places.astype(np.int64)])
        seen = np.zeros(len(self.canon), bool)
        seen[items] = True
        if int(seen.sum()) != len(items):
            raise ProtocolError(f"{self.peer} reported two common values for one ID")
        return self.finished(items, len(items), st.peer_size)

