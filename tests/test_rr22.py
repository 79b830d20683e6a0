"""The VOLE PSI (protocol ``rr22``): the OPRF against its definition, the whole protocol against
Python's set intersection, KKRT and openmined-psi, and hostile peers.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import vflcrypto.protocols.align as al
from test_ot_psi import check_alignment, tampered_run
from vflcrypto.protocols.align import rr22 as session

from vflcrypto.errors import ProtocolError
from vflcrypto.psi import kkrt, okvs, rr22, vole
from vflcrypto.runtime.channel import AuditTap

pytestmark = pytest.mark.skipif(rr22.why_not() is not None, reason=f"VOLE PSI unavailable: {rr22.why_not()}")

# --------------------------------------------------------------------------- the OPRF


def _oprf(ys: list[bytes], xs: list[bytes], delta: Callable[[np.ndarray], np.ndarray] = lambda d: d
          ) -> tuple[np.ndarray, np.ndarray]:
    """Both sides' outputs computed from the primitives directly, as the session does; the sender
    evaluates with ``delta(Δ)``."""
    okvs_key, hash_key = rr22.public_keys(os.urandom(16), os.urandom(16))
    h0y, h0x = kkrt.item_hashes(ys), kkrt.item_hashes(xs)
    p, starts, bands = rr22.receiver_encode(h0y, okvs_key)
    sh = vole.shape(len(p))
    receiver, sender = vole.VoleReceiver(sh), vole.VoleSender(sh)
    sums, corr, b = sender.expand(receiver.extend(sender.choose(receiver.point)))
    a, c = receiver.finish(sums, corr)
    mine = rr22.receiver_values(c, starts, bands, hash_key)
    theirs = rr22.sender_values(b, delta(sender.delta), p ^ a, okvs.rows(h0x, okvs_key, len(p)), hash_key)
    return mine, theirs


def test_the_oprf_agrees_exactly_on_common_items() -> None:
    ys = [f"y{i}".encode() for i in range(3000)]
    xs = [f"y{i}".encode() for i in range(2000, 6000)]
    mine, theirs = _oprf(ys, xs)
    own = {bytes(v): i for i, v in enumerate(mine)}
    hits = {i for i, v in enumerate(theirs) if bytes(v) in own}
    assert hits == set(range(1000))  # xs[0:1000] = y2000..y2999 are common, nothing else matches
    assert all(own[bytes(theirs[i])] == 2000 + i for i in hits)


def test_the_sender_needs_delta() -> None:
    """With another Δ the sender's values of common items no longer match: Δ is the OPRF key."""
    ys = [f"y{i}".encode() for i in range(200)]

    def flip(d: np.ndarray) -> np.ndarray:
        wrong = d.copy()
        wrong[3] ^= 0x10
        return wrong

    mine, theirs = _oprf(ys, ys, flip)
    assert not (theirs == mine).all(axis=1).any()
    mine, theirs = _oprf(ys, ys)
    assert (theirs == mine).all()


def test_a_masked_okvs_of_another_length_is_refused() -> None:
    with pytest.raises(ProtocolError, match="masked OKVS"):
        rr22.sender_values(np.zeros((10, 16), np.uint8), np.zeros(16, np.uint8), np.zeros((9, 16), np.uint8),
                           okvs.rows(np.zeros((1, 16), np.uint8), bytes(16), 10 + okvs.BAND), bytes(16))


# --------------------------------------------------------------------------- the protocol


def _check(a: list[str], b: list[str], mode: str = "both", **kw: Any) -> al.LocalRun:
    return check_alignment(a, b, "rr22", mode, **kw)


def test_equals_kkrt_in_the_same_rows_per_party() -> None:
    a = [f"user-{i}" for i in range(5000)]
    b = [f"user-{i}" for i in range(3700, 9200)]
    v = _check(a, b, chunk_size=256)  # several masked-OKVS and value chunks
    k = al.run_local(a, b, protocol="kkrt", mode="both")
    for side in (al.ACTIVE, al.PASSIVE):
        assert sorted(v.results[side].rows.tolist()) == sorted(k.results[side].rows.tolist())  # type: ignore[union-attr]


def test_the_sender_receives_only_the_declared_messages_of_the_declared_sizes() -> None:
    tap = AuditTap()
    a, b = [f"t{i}" for i in range(1000)], [f"t{i}" for i in range(500, 1800)]
    _check(a, b, tap=tap)
    (setup,) = tap.received(al.PASSIVE, al.VoleSetup)
    assert setup.columns == okvs.columns(len(a)) and setup.band == okvs.BAND
    masked = b"".join(m.values for m in tap.received(al.PASSIVE, al.OkvsMasked))
    assert len(masked) == 16 * setup.columns
    values = b"".join(m.values for m in tap.received(al.ACTIVE, al.OprfValues))
    assert len(values) == rr22.OUTPUT_BYTES * len(b)  # one value per sender ID


def test_progress_counts_every_id() -> None:
    """The CLI's bar total for the VOLE PSI (left IDs + 2 × right IDs) is what the steps report."""
    ticks: list[int] = []
    a, b = [f"p{i}" for i in range(700)], [f"p{i}" for i in range(300, 1200)]
    al.run_local(a, b, protocol="rr22", chunk_size=128, progress=ticks.append)
    assert sum(ticks) == len(a) + 2 * len(b)


# --------------------------------------------------------------------------- hostile peers


A, B = [f"u{i}" for i in range(300)], [f"u{i}" for i in range(150, 450)]


@pytest.mark.parametrize(("who", "kind", "fn", "match"), [
    (al.ACTIVE, al.VoleSetup, lambda m: dataclasses.replace(m, columns=m.columns * 2), "OKVS of"),
    (al.ACTIVE, al.VoleSetup, lambda m: dataclasses.replace(m, band=64), "band 64"),
    (al.ACTIVE, al.VoleSetup, lambda m: dataclasses.replace(m, point=bytes(32)), "not a valid point"),
    (al.PASSIVE, al.OtChoice, lambda m: dataclasses.replace(m, points=m.points[:-32]), "expected 128 points"),
    (al.ACTIVE, al.VoleMatrix, lambda m: dataclasses.replace(m, columns=m.columns[:-16]), "IKNP matrix"),
    (al.PASSIVE, al.VoleTrees, lambda m: dataclasses.replace(m, sums=m.sums[:-16]), "tree message"),
    (al.ACTIVE, al.OkvsMasked, lambda m: dataclasses.replace(m, values=m.values[:-16]), "masked OKVS"),
    (al.ACTIVE, al.OkvsMasked, lambda m: dataclasses.replace(m, chunk=m.chunk + 1), "masked OKVS"),
    (al.PASSIVE, al.OprfValues, lambda m: dataclasses.replace(m, values=m.values[:-1]), "OPRF values"),
    (al.ACTIVE, al.CommonValues, lambda m: dataclasses.replace(m, positions=(10**12).to_bytes(8, "little")
                                                               + m.positions[8:]), "not among"),
])
def test_tampered_messages_get_specific_errors(who: str, kind: type, fn: Callable[[Any], Any], match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        tampered_run(who, kind, fn, A, B, "rr22")


def test_a_tampered_masked_okvs_only_loses_matches() -> None:
    """A random error E in P ⊕ A is not detected by a semi-honest protocol: it shifts each sender
    value's argument by Δ·Decode(E, x), nonzero for every ID but with probability 2⁻¹²⁸, so common
    IDs stop matching; nothing crashes, nothing matches falsely. (Decode is linear: an error
    whose decoding is zero at some IDs, such as all bits flipped at an ID whose band has an
    even weight, leaves those IDs matching; semi-honest security does not promise more.)"""
    def flip(m: al.OkvsMasked) -> al.OkvsMasked:
        return dataclasses.replace(m, values=bytes(x ^ y for x, y in zip(m.values, os.urandom(len(m.values)),
                                                                          strict=True)))
    out = tampered_run(al.ACTIVE, al.OkvsMasked, flip, A, B, "rr22", mode="left")
    assert out[al.ACTIVE].size == 0


def test_chunk_sizes_stay_under_the_frame_limit() -> None:
    assert session.okvs_rows_per_chunk(1 << 20) * 16 <= 4 << 20


def test_without_the_extensions_the_protocol_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLCRYPTO_NATIVE", "0")
    with pytest.raises(ProtocolError, match="cannot run on this machine: VFLCRYPTO_NATIVE=0"):
        al.ActiveRole(["a"], peer=al.PASSIVE, protocol="rr22")
