"""What KKRT and the VOLE PSI share (the OPRF-receiver protocols): each against Python's set
intersection, the three-party mode, openmined-psi, the refused cardinality mode and a
stalled peer; their own parts are in test_kkrt.py and test_rr22.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import vflcrypto.protocols.align as al
from conftest import tamper_sends
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vflcrypto.errors import PeerTimeoutError, ProtocolError
from vflcrypto.psi import rr22
from vflcrypto.runtime.channel import Endpoint, LocalNetwork, run_parties

PROTOCOLS = ["kkrt", pytest.param("rr22", marks=pytest.mark.skipif(rr22.why_not() is not None,
                                                                     reason=f"VOLE PSI unavailable: {rr22.why_not()}"))]


def check_alignment(a: list[str], b: list[str], protocol: str, mode: str = "both", **kw: Any) -> al.LocalRun:
    """Run ``protocol`` locally and check both results against Python's set intersection."""
    run = al.run_local(a, b, protocol=protocol, mode=mode, **kw)
    ra, rp = run.results[al.ACTIVE], run.results[al.PASSIVE]
    assert ra.rows is not None
    common = set(a) & set(b)
    assert {a[i] for i in ra.rows} == common and ra.size == len(common)
    if mode == "both":
        assert rp.rows is not None and [a[i] for i in ra.rows] == [b[i] for i in rp.rows]
    else:
        assert rp.rows is None and rp.size is None
    return run


def tampered_run(who: str, kind: type, fn: Callable[[Any], Any], a: list[str], b: list[str], protocol: str,
                 mode: str = "both", timeout: float = 5.0) -> dict[str, Any]:
    """Run ``protocol`` with ``who``'s outgoing ``kind`` messages replaced by ``fn(msg)``."""
    net = LocalNetwork([Endpoint(al.ACTIVE, al.ACTIVE), Endpoint(al.PASSIVE, al.PASSIVE)], timeout=timeout)
    chans = net.channels(who)
    tamper_sends(chans, kind, fn)
    tasks = {al.ACTIVE: lambda: al.run_active(chans if who == al.ACTIVE else net.channels(al.ACTIVE), a,
                                              protocol=protocol, mode=mode),
             al.PASSIVE: lambda: al.run_passive(chans if who == al.PASSIVE else net.channels(al.PASSIVE), b,
                                                protocol=protocol, mode=mode)}
    return run_parties(tasks, network=net)


ids = st.lists(st.text(min_size=1, max_size=6).filter(lambda s: s.strip() == s and s), unique=True, max_size=40)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=ids, b=ids)
def test_equals_set_intersection_on_random_sets(protocol: str, a: list[str], b: list[str]) -> None:
    check_alignment(a, b, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("a", "b"), [
    ([], []), ([], ["x"]), (["x"], []), (["x"], ["x"]), (["x"], ["y"]),
    ([f"u{i}" for i in range(50)], [f"u{i}" for i in range(50)]),  # identical
    ([f"u{i}" for i in range(50)], [f"v{i}" for i in range(50)]),  # disjoint
])
@pytest.mark.parametrize("mode", ["both", "left"])
def test_edge_sets(protocol: str, a: list[str], b: list[str], mode: str) -> None:
    check_alignment(a, b, protocol, mode)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_three_parties_all_mode(protocol: str) -> None:
    sets = [[f"u{i}" for i in range(0, 400)], [f"u{i}" for i in range(100, 500)], [f"u{i}" for i in range(200, 600)]]
    run = al.run_multiparty_local(sets, protocol=protocol)
    common = set(sets[0]) & set(sets[1]) & set(sets[2])
    rows = [[s[i] for i in run.results[name].rows] for s, name in zip(sets, [al.ACTIVE, "passive-0", "passive-1"],
                                                                      strict=True)]
    assert set(rows[0]) == common and rows[0] == rows[1] == rows[2]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cardinality_mode_is_refused_with_the_reason(protocol: str) -> None:
    with pytest.raises(ProtocolError, match="always learns which rows are common"):
        al.run_local(["a"], ["a"], protocol=protocol, mode="size")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_equals_openmined_psi_on_the_same_ids(protocol: str) -> None:
    om = pytest.importorskip("private_set_intersection.python")
    a = [f"id{i}" for i in range(0, 1500)]
    b = [f"id{i}" for i in range(900, 2600)]
    server = om.server.CreateWithNewKey(True)
    client = om.client.CreateWithNewKey(True)
    setup = server.CreateSetupMessage(1e-9, len(a), b, om.DataStructure.RAW)
    response = server.ProcessRequest(client.CreateRequest(a))
    theirs = {a[i] for i in client.GetIntersection(setup, response)}
    run = al.run_local(a, b, protocol=protocol, mode="left")
    assert {a[i] for i in run.results[al.ACTIVE].rows} == theirs  # type: ignore[union-attr]


@pytest.mark.parametrize(("protocol", "setup"), [("kkrt", al.OtSetup), ("rr22", al.VoleSetup)])
def test_peer_stalling_after_the_setup_times_out(protocol: str, setup: type) -> None:
    if protocol == "rr22" and rr22.why_not() is not None:
        pytest.skip(f"VOLE PSI unavailable: {rr22.why_not()}")
    net = LocalNetwork([Endpoint(al.ACTIVE, al.ACTIVE), Endpoint(al.PASSIVE, al.PASSIVE)], timeout=0.3)

    def stalling_sender() -> None:
        ch = net.channels(al.PASSIVE)[al.ACTIVE]
        ch.send(al.Hello(protocol, "both", al.PROTOCOL_VERSION, al.PASSIVE, 3, 4096, os.urandom(16), b"", b""))
        ch.recv(al.Hello)
        ch.recv(setup)
        time.sleep(1.0)  # never sends its base-OT points

    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match=r"align\.ot_choice"):
        run_parties({al.ACTIVE: lambda: al.run_active(net.channels(al.ACTIVE), ["a"], protocol=protocol),
                     al.PASSIVE: stalling_sender}, network=net)
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_message_of_another_protocol_is_refused(protocol: str) -> None:
    role = al.ActiveRole(["a"], peer=al.PASSIVE, protocol=protocol)
    with pytest.raises(ProtocolError, match=f"not a message of PSI protocol '{protocol}'"):
        role.on_tags(al.TagChunk(0, b""))
