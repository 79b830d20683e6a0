"""The VOLE PSI (protocol ``rr22``): the OPRF against its definition, the whole protocol against
Python's set intersection, KKRT and openmined-psi, and hostile peers.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import vflcrypto.protocols.align as al
from conftest import tamper_sends
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vflcrypto.protocols.align import rr22 as session

from vflcrypto.errors import PeerTimeoutError, ProtocolError
from vflcrypto.psi import kkrt, okvs, rr22, vole
from vflcrypto.runtime.channel import AuditTap, Endpoint, LocalNetwork, run_parties

pytestmark = pytest.mark.skipif(rr22.why_not() is not None, reason=f"VOLE PSI unavailable: {rr22.why_not()}")

# --------------------------------------------------------------------------- the OPRF


def _oprf(ys: list[bytes], xs: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Both sides' outputs computed from the primitives directly, as the session does."""
    okvs_key, hash_key = rr22.public_keys(os.urandom(16), os.urandom(16))
    h0y, h0x = kkrt.item_hashes(ys), kkrt.item_hashes(xs)
    p, starts, bands = rr22.receiver_encode(h0y, okvs_key)
    sh = vole.shape(len(p))
    receiver, sender = vole.VoleReceiver(sh), vole.VoleSender(sh)
    sums, corr, b = sender.expand(receiver.extend(sender.choose(receiver.point)))
    a, c = receiver.finish(sums, corr)
    mine = rr22.receiver_values(c, starts, bands, hash_key)
    theirs = rr22.sender_values(b, sender.delta, p ^ a, h0x, okvs_key, hash_key)
    return mine, theirs, sender.delta


def test_the_oprf_agrees_exactly_on_common_items() -> None:
    ys = [f"y{i}".encode() for i in range(3000)]
    xs = [f"y{i}".encode() for i in range(2000, 6000)]
    mine, theirs, _ = _oprf(ys, xs)
    own = {bytes(v): i for i, v in enumerate(mine)}
    hits = {i for i, v in enumerate(theirs) if bytes(v) in own}
    assert hits == set(range(1000))  # xs[0:1000] = y2000..y2999 are common, nothing else matches
    assert all(own[bytes(theirs[i])] == 2000 + i for i in hits)


def test_the_sender_needs_delta() -> None:
    """With another Δ the sender's values of common items no longer match: Δ is the OPRF key."""
    okvs_key, hash_key = rr22.public_keys(b"r" * 16, b"s" * 16)
    ys = [f"y{i}".encode() for i in range(200)]
    h0 = kkrt.item_hashes(ys)
    p, starts, bands = rr22.receiver_encode(h0, okvs_key)
    sh = vole.shape(len(p))
    receiver, sender = vole.VoleReceiver(sh), vole.VoleSender(sh)
    sums, corr, b = sender.expand(receiver.extend(sender.choose(receiver.point)))
    a, c = receiver.finish(sums, corr)
    mine = rr22.receiver_values(c, starts, bands, hash_key)
    wrong = sender.delta.copy()
    wrong[3] ^= 0x10
    theirs = rr22.sender_values(b, wrong, p ^ a, h0, okvs_key, hash_key)
    assert not (theirs == mine).all(axis=1).any()
    assert (rr22.sender_values(b, sender.delta, p ^ a, h0, okvs_key, hash_key) == mine).all()


def test_a_masked_okvs_of_another_length_is_refused() -> None:
    with pytest.raises(ProtocolError, match="masked OKVS"):
        rr22.sender_values(np.zeros((10, 16), np.uint8), np.zeros(16, np.uint8), np.zeros((9, 16), np.uint8),
                           np.zeros((1, 16), np.uint8), bytes(16), bytes(16))


# --------------------------------------------------------------------------- the protocol


def _check(a: list[str], b: list[str], mode: str = "both", **kw: Any) -> al.LocalRun:
    run = al.run_local(a, b, protocol="rr22", mode=mode, **kw)
    ra, rp = run.results[al.ACTIVE], run.results[al.PASSIVE]
    assert ra.rows is not None
    common = set(a) & set(b)
    assert {a[i] for i in ra.rows} == common and ra.size == len(common)
    if mode == "both":
        assert rp.rows is not None and [a[i] for i in ra.rows] == [b[i] for i in rp.rows]
    else:
        assert rp.rows is None and rp.size is None
    return run


ids = st.lists(st.text(min_size=1, max_size=6).filter(lambda s: s.strip() == s and s), unique=True, max_size=40)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=ids, b=ids)
def test_equals_set_intersection_on_random_sets(a: list[str], b: list[str]) -> None:
    _check(a, b)


@pytest.mark.parametrize(("a", "b"), [
    ([], []), ([], ["x"]), (["x"], []), (["x"], ["x"]), (["x"], ["y"]),
    ([f"u{i}" for i in range(50)], [f"u{i}" for i in range(50)]),  # identical
    ([f"u{i}" for i in range(50)], [f"v{i}" for i in range(50)]),  # disjoint
])
@pytest.mark.parametrize("mode", ["both", "left"])
def test_edge_sets(a: list[str], b: list[str], mode: str) -> None:
    _check(a, b, mode)


def test_equals_kkrt_in_the_same_rows_per_party() -> None:
    a = [f"user-{i}" for i in range(5000)]
    b = [f"user-{i}" for i in range(3700, 9200)]
    v = _check(a, b, chunk_size=256)  # several masked-OKVS and value chunks
    k = al.run_local(a, b, protocol="kkrt", mode="both")
    for side in (al.ACTIVE, al.PASSIVE):
        assert sorted(v.results[side].rows.tolist()) == sorted(k.results[side].rows.tolist())  # type: ignore[union-attr]


def test_three_parties_all_mode() -> None:
    sets = [[f"u{i}" for i in range(0, 400)], [f"u{i}" for i in range(100, 500)], [f"u{i}" for i in range(200, 600)]]
    run = al.run_multiparty_local(sets, protocol="rr22")
    common = set(sets[0]) & set(sets[1]) & set(sets[2])
    rows = [[s[i] for i in run.results[name].rows] for s, name in zip(sets, [al.ACTIVE, "passive-0", "passive-1"],
                                                                      strict=True)]
    assert set(rows[0]) == common and rows[0] == rows[1] == rows[2]


def test_cardinality_mode_is_refused_with_the_reason() -> None:
    with pytest.raises(ProtocolError, match="always learns which rows are common"):
        al.run_local(["a"], ["a"], protocol="rr22", mode="size")


def test_equals_openmined_psi_on_the_same_ids() -> None:
    om = pytest.importorskip("private_set_intersection.python")
    a = [f"id{i}" for i in range(0, 1500)]
    b = [f"id{i}" for i in range(900, 2600)]
    server = om.server.CreateWithNewKey(True)
    client = om.client.CreateWithNewKey(True)
    setup = server.CreateSetupMessage(1e-9, len(a), b, om.DataStructure.RAW)
    response = server.ProcessRequest(client.CreateRequest(a))
    theirs = {a[i] for i in client.GetIntersection(setup, response)}
    run = al.run_local(a, b, protocol="rr22", mode="left")
    assert {a[i] for i in run.results[al.ACTIVE].rows} == theirs  # type: ignore[union-attr]


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


def _tampered_run(who: str, kind: type, fn: Callable[[Any], Any], a: list[str], b: list[str],
                  timeout: float = 5.0) -> None:
    """Run the VOLE PSI with ``who``'s outgoing ``kind`` messages replaced by ``fn(msg)``."""
    net = LocalNetwork([Endpoint(al.ACTIVE, al.ACTIVE), Endpoint(al.PASSIVE, al.PASSIVE)], timeout=timeout)
    chans = net.channels(who)
    tamper_sends(chans, kind, fn)
    tasks = {al.ACTIVE: lambda: al.run_active(chans if who == al.ACTIVE else net.channels(al.ACTIVE), a,
                                              protocol="rr22"),
             al.PASSIVE: lambda: al.run_passive(chans if who == al.PASSIVE else net.channels(al.PASSIVE), b,
                                                protocol="rr22")}
    run_parties(tasks, network=net)


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
    (al.ACTIVE, al.CommonValues, lambda m: dataclasses.replace(m, values=os.urandom(len(m.values))),
     "not sorted|not among"),
])
def test_tampered_messages_get_specific_errors(who: str, kind: type, fn: Callable[[Any], Any], match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        _tampered_run(who, kind, fn, A, B)


def test_a_tampered_masked_okvs_only_loses_matches() -> None:
    """A random error E in P ⊕ A is not detected by a semi-honest protocol: it shifts each sender
    value's argument by Δ·Decode(E, x), nonzero for every ID but with probability 2⁻¹²⁸, so common
    IDs stop matching; nothing crashes, nothing matches falsely. (Decode is linear: an error
    whose decoding is zero at some IDs, such as all bits flipped at an ID whose band has an
    even weight, leaves those IDs matching; semi-honest security does not promise more.)"""
    def flip(m: al.OkvsMasked) -> al.OkvsMasked:
        return dataclasses.replace(m, values=bytes(x ^ y for x, y in zip(m.values, os.urandom(len(m.values)),
                                                                          strict=True)))
    net = LocalNetwork([Endpoint(al.ACTIVE, al.ACTIVE), Endpoint(al.PASSIVE, al.PASSIVE)], timeout=5.0)
    chans = tamper_sends(net.channels(al.ACTIVE), al.OkvsMasked, flip)
    out = run_parties({al.ACTIVE: lambda: al.run_active(chans, A, protocol="rr22", mode="left"),
                       al.PASSIVE: lambda: al.run_passive(net.channels(al.PASSIVE), B, protocol="rr22",
                                                          mode="left")}, network=net)
    assert out[al.ACTIVE].size == 0


def test_peer_stalling_after_the_setup_times_out() -> None:
    net = LocalNetwork([Endpoint(al.ACTIVE, al.ACTIVE), Endpoint(al.PASSIVE, al.PASSIVE)], timeout=0.3)

    def stalling_sender() -> None:
        ch = net.channels(al.PASSIVE)[al.ACTIVE]
        ch.send(al.Hello("rr22", "both", al.PROTOCOL_VERSION, al.PASSIVE, 3, 4096, os.urandom(16), b"", b""))
        ch.recv(al.Hello)
        ch.recv(al.VoleSetup)
        time.sleep(1.0)  # never sends its base-OT points

    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match=r"align\.ot_choice"):
        run_parties({al.ACTIVE: lambda: al.run_active(net.channels(al.ACTIVE), ["a"], protocol="rr22"),
                     al.PASSIVE: stalling_sender}, network=net)
    assert time.monotonic() - t0 < 5


def test_a_message_of_another_protocol_is_refused() -> None:
    role = al.ActiveRole(["a"], peer=al.PASSIVE, protocol="rr22")
    with pytest.raises(ProtocolError, match="not a message of PSI protocol 'rr22'"):
        role.on_tags(al.TagChunk(0, b""))


def test_chunk_sizes_stay_under_the_frame_limit() -> None:
    assert session.okvs_rows_per_chunk(1 << 20) * 16 <= 4 << 20


def test_without_the_extensions_the_protocol_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLCRYPTO_NATIVE", "0")
    with pytest.raises(ProtocolError, match="cannot run on this machine: VFLCRYPTO_NATIVE=0"):
        al.ActiveRole(["a"], peer=al.PASSIVE, protocol="rr22")
