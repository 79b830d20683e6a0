"""One pairwise VOLE PSI session (RR22: an OKVS and a silent VOLE) as named steps, for either side.

The active party is the OPRF **receiver** (it learns the intersection), the passive party
the **sender**; the primitives are in :mod:`vflcrypto.psi.rr22`, :mod:`vflcrypto.psi.vole`
and :mod:`vflcrypto.psi.okvs`. Steps:

1. ``start``: both send ``align.hello`` (the same hello as ECDH and KKRT).
2. ``on_hello``: the receiver sends ``align.vole_setup`` (the OKVS size and band width,
   functions of its public set size, and its base-OT point ``A``).
3. ``on_vole_setup`` (sender): checks the shape, draws its secret Δ and sends
   ``align.ot_choice`` (one base-OT point per bit of Δ).
4. ``on_ot_choice`` (receiver): sends ``align.vole_matrix``, the IKNP matrix of its
   correlated OTs (noise positions and values of the silent VOLE as choice bits).
5. ``on_vole_matrix`` (sender): expands its GGM trees and sends ``align.vole_trees`` (each
   level's two sums under the OT keys, and one correction per tree); keeps ``B``. Meanwhile
   the receiver encodes its OKVS ``P`` (it needs no VOLE) on a thread of its own, and after
   sending, the sender places its own IDs in the OKVS's rows.
6. ``on_vole_trees`` (receiver): finishes ``(A, C)`` and its own OPRF outputs ``H'(Decode(C, y))``
   beside the encoding thread, then streams ``align.okvs_masked`` = ``P ⊕ A``.
7. ``on_okvs_masked`` (sender): after the last chunk, evaluates its IDs and sends
   ``align.oprf_values`` (one value per ID) sorted by value (:func:`~vflcrypto.psi.primitives.value_order`:
   independent of its file's order, as a shuffle is; the receiver then need not sort them).
8. ``on_oprf_values`` / ``on_common_values``: as in KKRT (:class:`.kkrt.KkrtSession`): the
   receiver matches, and in mode both sends the matched values' places in the sender's order.

Cardinality-only mode is refused, as for KKRT: the receiver matches the sender's values
against its own per-ID outputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import ProtocolError
from vflcrypto.psi import kkrt, okvs, rr22, vole
from vflcrypto.psi import primitives as psi
from vflcrypto.runtime.steps import Next, prefixed, send, then

from .kkrt import KkrtSession, KkrtState
from .messages import Hello, OkvsMasked, OprfValues, OtChoice, VoleMatrix, VoleSetup, VoleTrees
from .session import chunk_lengths

__all__ = ["Rr22Session", "Rr22State", "okvs_rows_per_chunk"]

_MAX_OKVS_ROWS = 1 << 18  # 4 MiB per align.okvs_masked message

assert rr22.OUTPUT_BYTES == kkrt.OUTPUT_BYTES  # the matching steps are KKRT's


def okvs_rows_per_chunk(chunk_size: int) -> int:
    """OKVS elements per ``align.okvs_masked`` message."""
    return max(1, min(_MAX_OKVS_ROWS, 16 * chunk_size))


@dataclass
class Rr22State(KkrtState):
    """What a VOLE PSI session carries between messages (all wire-encodable), beyond KKRT's matching state."""

    columns: int = 0  # the OKVS size m = the VOLE length
    # receiver: the silent VOLE's secrets until (A, C) are made
    alpha: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    beta: np.ndarray = field(default_factory=lambda: np.zeros((0, 16), np.uint8))
    cot_choice: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    t_rows: np.ndarray = field(default_factory=lambda: np.zeros((0, 16), np.uint8))
    # sender: Δ's bits, its base-OT keys, B, and the masked OKVS as it arrives
    delta_bits: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    b: np.ndarray = field(default_factory=lambda: np.zeros((0, 16), np.uint8))
    masked: np.ndarray = field(default_factory=lambda: np.zeros((0, 16), np.uint8))
    # sender: its items' OKVS rows (start, band, H(x)), made while the peer computes
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bands: np.ndarray = field(default_factory=lambda: np.zeros((0, okvs.BAND // 64), np.uint64))
    hx: np.ndarray = field(default_factory=lambda: np.zeros((0, 16), np.uint8))


class Rr22Session(KkrtSession):
    """One side of a pairwise VOLE PSI session with ``peer`` (same interface as :class:`.session.Session`)."""

    NAME = "the VOLE PSI"
    PROTOCOL = "rr22"
    state: Rr22State

    def __init__(self, role: str, peer: str, canon: Any, *, mode: str, chunk_size: int, progress: Any,
                 finished: Any, hold: Any, state: Rr22State | None = None) -> None:
        super().__init__(role, peer, canon, mode=mode, chunk_size=chunk_size, progress=progress,
                         finished=finished, hold=hold, state=state if state is not None else Rr22State())
        reason = rr22.why_not()
        if reason is not None:
            raise ProtocolError(f"the VOLE PSI (protocol 'rr22') cannot run on this machine: {reason}")

    # ----------------------------------------------------------------- 1 hello (KKRT's start)
    def on_hello(self, peer: Hello) -> Next:
        """Check the peer's hello; step 2: the receiver sends the VOLE setup."""
        self._greet(peer)
        st = self.state
        if not self.receiver:
            vole.warm(max(1, okvs.columns(st.peer_size)))  # the VOLE's public code, made while the peer sets up
            return then([], self.peer, VoleSetup, "on_vole_setup")
        st.columns = okvs.columns(len(self.canon))
        vole.warm(max(1, st.columns))
        base = ot_sender()
        st.ot_scalar, st.ot_point = base.scalar, base.point
        self.hold("rr22_ot_point", base.point)
        return then([send(self.peer, VoleSetup(st.columns, okvs.BAND, base.point))], self.peer, OtChoice,
                    "on_ot_choice")

    def _keys(self) -> tuple[bytes, list[bytes]]:
        st = self.state
        assert st.hello is not None and st.peer_hello is not None
        r, s = (st.hello, st.peer_hello) if self.receiver else (st.peer_hello, st.hello)
        okvs_key, hash_key = rr22.public_keys(r.nonce, s.nonce)
        return okvs_key, [hash_key]

    def _shape(self) -> vole.VoleShape:
        return vole.shape(max(1, self.state.columns))

    # ----------------------------------------------------------------- 3 sender: Δ in the base OTs
    def on_vole_setup(self, msg: VoleSetup) -> Next:
        """Step 3 (sender): check the OKVS shape; send the base-OT points of its secret Δ."""
        st = self.state
        expected = okvs.columns(st.peer_size)
        if msg.columns != expected or msg.band != okvs.BAND:
            raise ProtocolError(f"{self.peer} announced an OKVS of {msg.columns} columns and band {msg.band}; "
                                f"its set size {st.peer_size} gives {expected} columns and band {okvs.BAND}")
        st.columns = msg.columns
        sender = vole.VoleSender(self._shape())
        points = sender.choose(msg.point)
        st.delta_bits, st.keys = sender.delta_bits, sender.keys
        self.hold("rr22_delta_bits", sender.delta_bits)
        return then([send(self.peer, OtChoice(points))], self.peer, VoleMatrix, "on_vole_matrix")

    # ----------------------------------------------------------------- 4 receiver: the IKNP matrix
    def on_ot_choice(self, msg: OtChoice) -> Next:
        """Step 4 (receiver): both base-OT keys per bit of Δ; send the correlated OTs' matrix."""
        st = self.state
        receiver = vole.VoleReceiver(self._shape(), base=ot_sender(st.ot_scalar, st.ot_point))
        matrix = receiver.extend(msg.points)
        st.ot_scalar = b""
        st.alpha, st.beta, st.cot_choice, st.t_rows = receiver.alpha, receiver.beta, receiver.choice, receiver.t_rows
        self.hold("rr22_cot_choice", receiver.choice)
        self.hold("rr22_t_rows", receiver.t_rows)
        return prefixed(self._matrix_then_encode(matrix), then([], self.peer, VoleTrees, "on_vole_trees"))

    def _matrix_then_encode(self, matrix: bytes) -> Iterator[tuple[str, Any]]:
        """Send the matrix; then place its items in the OKVS's rows and encode it (it needs no VOLE) on a thread
        of its own (numpy's AES and the C code release the GIL): it runs while the sender expands its trees and,
        once they arrive, beside the receiver's VOLE and own outputs (:meth:`on_vole_trees`), on the core the
        waiting sender leaves free."""
        yield send(self.peer, VoleMatrix(matrix))
        okvs_key, _ = self._keys()
        h0 = kkrt.item_hashes(self.canon.encoded)
        pool = ThreadPoolExecutor(1, thread_name_prefix="okvs-encode")  # one thread: the encoding follows the rows
        rows = self._rows = pool.submit(rr22.receiver_rows, h0, okvs_key)
        self._encoding = pool.submit(lambda: rr22.receiver_encode(h0, okvs_key, rows.result())[0])
        pool.shutdown(wait=False)

    def _own_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Its items' OKVS rows: the thread's, or made now when this session was restored from its state (one step
        per process: no thread outlives a step)."""
        rows: Future[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = self.__dict__.pop("_rows", None)
        if rows is not None:
            return rows.result()
        okvs_key, _ = self._keys()
        return rr22.receiver_rows(kkrt.item_hashes(self.canon.encoded), okvs_key)

    def _encoded(self, rows: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        """The OKVS ``P``: the encoding thread's, or encoded now from ``rows`` when restored from its state."""
        encoding: Future[np.ndarray] | None = self.__dict__.pop("_encoding", None)
        if encoding is not None:
            return encoding.result()
        okvs_key, _ = self._keys()
        return rr22.receiver_encode(kkrt.item_hashes(self.canon.encoded), okvs_key, rows)[0]

    # ----------------------------------------------------------------- 5 sender: the GGM trees
    def on_vole_matrix(self, msg: VoleMatrix) -> Next:
        """Step 5 (sender): its correlated OTs; expand the trees, send their level sums; keep ``B``."""
        st = self.state
        sender = vole.VoleSender(self._shape(), delta_bits=st.delta_bits, keys=st.keys)
        sums, corrections, st.b = sender.expand(msg.columns)
        self.hold("rr22_level_sums", sender.level_sums)
        st.k = 0
        return prefixed(self._trees_then_rows(VoleTrees(sums, corrections)),
                        then([], self.peer, OkvsMasked, "on_okvs_masked"))

    def _trees_then_rows(self, trees: VoleTrees) -> Iterator[tuple[str, Any]]:
        """Send the trees; then, while the receiver finishes, place its own items in the OKVS's rows (its IDs' byte
        order waits until its values are sent: here it would take a core from the receiver's critical path)."""
        yield send(self.peer, trees)
        st = self.state
        okvs_key, (hash_key,) = self._keys()
        self.hold("rr22_public_keys", (okvs_key, hash_key))
        st.starts, st.bands, st.hx = okvs.rows(kkrt.item_hashes(self.canon.encoded), okvs_key, st.columns)

    # ----------------------------------------------------------------- 6 receiver: the masked OKVS
    def on_vole_trees(self, msg: VoleTrees) -> Next:
        """Step 6 (receiver): finish ``(A, C)``; send ``P ⊕ A`` chunk by chunk; keep its own outputs."""
        st = self.state
        receiver = vole.VoleReceiver(self._shape(), alpha=st.alpha, beta=st.beta, choice=st.cot_choice,
                                     t_rows=st.t_rows)
        a, c = receiver.finish(msg.sums, msg.corrections)
        st.alpha, st.beta, st.cot_choice, st.t_rows = (np.zeros(0, np.int64), np.zeros((0, 16), np.uint8),
                                                        np.zeros(0, np.uint8), np.zeros((0, 16), np.uint8))
        okvs_key, (hash_key,) = self._keys()
        self.hold("rr22_public_keys", (okvs_key, hash_key))
        self.hold("rr22_vole_c", c)
        # its own outputs and their index while the thread still encodes (the sender waits: a core is free)
        rows = self._own_rows()
        st.own_values = rr22.receiver_values(c, rows[0], rows[1], hash_key)
        self.hold("rr22_own_values", st.own_values)
        st.own_order = psi.digest_order(np.ascontiguousarray(st.own_values).view(psi.DIGEST_DTYPE).ravel())
        masked = rr22.mask(self._encoded(rows), a)
        del rows
        self.tick(len(self.canon))
        st.k = 0
        if st.peer_size == 0:
            return prefixed(self._masked_out(masked), self._match())
        return prefixed(self._masked_out(masked), then([], self.peer, OprfValues, "on_oprf_values"))

    def _masked_out(self, masked: np.ndarray) -> Iterator[tuple[str, Any]]:
        """Send ``P ⊕ A``; then, while the sender evaluates its IDs, the byte order of its IDs (for its output:
        before the send it would hold up the sender, which waits for the masked OKVS)."""
        per = okvs_rows_per_chunk(self.chunk_size)
        for i, start in enumerate(range(0, len(masked), per)):
            yield send(self.peer, OkvsMasked(i, masked[start : start + per].tobytes()))
        if isinstance(self.canon.encoded, psi.PackedIds):
            self.canon.encoded.byte_order()  # the output's order of all its IDs, cached

    # ----------------------------------------------------------------- 7 sender: its OPRF values
    def on_okvs_masked(self, msg: OkvsMasked) -> Next:
        """Step 7 (sender): collect ``P ⊕ A``; after the last chunk, evaluate its IDs and send the values shuffled."""
        st = self.state
        per = okvs_rows_per_chunk(st.peer_hello.chunk_size if st.peer_hello else 1)
        lengths = chunk_lengths(st.columns, per)
        if st.k >= len(lengths) or msg.chunk != st.k or len(msg.values) != 16 * lengths[st.k]:
            raise ProtocolError(f"{self.peer} sent a malformed chunk {msg.chunk} of the masked OKVS")
        if st.k == 0:
            st.masked = np.empty((st.columns, 16), np.uint8)
        st.masked[st.k * per : st.k * per + lengths[st.k]] = np.frombuffer(msg.values, np.uint8).reshape(-1, 16)
        st.k += 1
        if st.k < len(lengths):
            return then([], self.peer, OkvsMasked, "on_okvs_masked")
        _, (hash_key,) = self._keys()
        delta = np.packbits(st.delta_bits, bitorder="little")
        st.values = rr22.sender_values(st.b, delta, st.masked, (st.starts, st.bands, st.hx), hash_key)
        st.b, st.masked, st.hx = np.zeros((0, 16), np.uint8), np.zeros((0, 16), np.uint8), np.zeros((0, 16), np.uint8)
        st.starts, st.bands = np.zeros(0, np.int64), np.zeros((0, okvs.BAND // 64), np.uint64)
        self.tick(len(self.canon))
        return self._values_out()

    def _sending_order(self) -> np.ndarray:
        """Sorted by value: as private as a shuffle (a function of the values alone), and the receiver, which
        waits on its own outputs meanwhile, then matches without sorting them."""
        return psi.value_order(np.ascontiguousarray(self.state.values).view(psi.DIGEST_DTYPE).ravel())

    # ----------------------------------------------------------------- 8: matching, as KKRT's
    def _peer_value_count(self) -> int:
        return self.state.peer_size

    def _value_items(self, hit: np.ndarray) -> np.ndarray:
        return hit.astype(np.int64)


def ot_sender(scalar: bytes = b"", point: bytes = b"") -> Any:
    """The receiver's base-OT sender: fresh, or restored from its state."""
    from vflcrypto.psi import ot

    return ot.BaseOtSender(scalar, point) if scalar else ot.BaseOtSender.create()

