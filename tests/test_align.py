"""vflcrypto.protocols.align: correctness against set intersection and openmined-psi, hostile peers, audit."""

from __future__ import annotations

import dataclasses
import time
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vflcrypto.protocols import align as al

from vflcrypto.audit.ledger import audit
from vflcrypto.errors import InputDataError, PeerTimeoutError, ProtocolError
from vflcrypto.psi import primitives as psi
from vflcrypto.runtime.channel import Endpoint, LocalNetwork, run_parties

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
FATE = SHARED / "fate"


def canon(x: Any) -> bytes:
    return psi.canonical_id(x)


def expected(a: list[Any], b: list[Any]) -> set[bytes]:
    return {canon(x) for x in a} & {canon(x) for x in b}


def check_both(a: list[Any], b: list[Any], protocol: str = "ecdh") -> al.LocalRun:
    run = al.run_local(a, b, protocol=protocol, mode="both")
    ra, rp = run.results[al.ACTIVE], run.results[al.PASSIVE]
    got_a = [canon(a[i]) for i in ra.rows]
    got_p = [canon(b[i]) for i in rp.rows]
    assert got_a == got_p, "both sides must list the common IDs in the same order"
    assert set(got_a) == expected(a, b)
    assert ra.size == rp.size == len(got_a)
    assert ra.peer_sizes == {al.PASSIVE: len(b)} and rp.peer_sizes == {al.ACTIVE: len(a)}
    return run


# IDs: short text (with NFC/NFD-sensitive characters) or ints; deduplicated on canonical form.
_text = st.lists(st.sampled_from([*"ab1éz", "e\u0301", "Å", "A\u030a"]),
                 min_size=1, max_size=4).map("".join)
_ids = st.lists(st.one_of(_text, st.integers(-50, 50)), max_size=25).map(
    lambda xs: list({canon(x): x for x in xs}.values()))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_ids, b=_ids, protocol=st.sampled_from(["ecdh", "hash"]))
def test_equals_set_intersection(a: list[Any], b: list[Any], protocol: str) -> None:
    check_both(a, b, protocol)


def _tied_prefixes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every comparison digest (ECDH, keyed hash, KKRT) keeps 1 bit of its first 8 bytes and its last 4 bytes.

    The first 8 bytes are what :func:`psi.match_digests` filters and sorts on first; with
    two prefixes, about half of any set of common IDs share each one, so an order or a match
    taken from the prefix alone shows. (33 bits remain: no two of a few hundred IDs collide.)
    """
    from vflcrypto.psi import kkrt

    def tie(d: bytes) -> bytes:
        return b"".join(bytes([d[i] & 1]) + bytes(7) + d[i + 8 : i + 12] for i in range(0, len(d), 12))

    point, keyed, rows = psi.point_digest, psi.keyed_digests, kkrt.hash_rows
    monkeypatch.setattr(psi, "point_digest", lambda pt: tie(point(pt)))
    monkeypatch.setattr(psi, "keyed_digests", lambda key, ids: tie(keyed(key, ids)))

    def tied_rows(r: Any, index: Any) -> Any:
        out = rows(r, index).copy()
        out[:, 0] &= 1
        out[:, 1:8] = 0
        return out

    monkeypatch.setattr(kkrt, "hash_rows", tied_rows)


TIED_A = [f"t{i}" for i in range(60)]
TIED_B = [f"t{i}" for i in range(89, 29, -1)]  # 30 common IDs, listed in the opposite order


@pytest.mark.parametrize("protocol", ["ecdh", "hash", "kkrt"])
def test_common_ids_whose_digests_share_the_prefix_match_and_line_up(protocol: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _tied_prefixes(monkeypatch)
    run = check_both(TIED_A, TIED_B, protocol)
    digests = [psi.point_digest(bytes(32)), psi.point_digest(b"\x01" * 32)]
    assert all(d[1:8] == bytes(7) for d in digests)  # the seam is on
    assert run.results[al.ACTIVE].size == 30


@pytest.mark.parametrize("broken", ["match", "order"])
@pytest.mark.parametrize("protocol", ["ecdh", "hash"])
def test_the_tied_prefixes_catch_a_comparator_that_uses_only_the_prefix(protocol: str, broken: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above fails on a comparator that matches, or orders, by the 8-byte prefix alone."""
    def prefix(d: Any) -> Any:
        return psi.digests_to_array(b"".join(bytes(x)[:8].ljust(psi.DIGEST_BYTES, b"\x00") for x in d))

    def by_prefix(own: Any, peer: Any) -> Any:
        if broken == "match":
            pos = np.nonzero(np.isin(prefix(own), prefix(peer)))[0]
            return pos[np.argsort(own[pos], kind="stable")].astype(np.int64)
        pos = np.nonzero(np.isin(own, peer))[0]
        return pos[np.argsort(prefix(own[pos]), kind="stable")].astype(np.int64)

    _tied_prefixes(monkeypatch)
    monkeypatch.setattr(psi, "match_digests", by_prefix)
    with pytest.raises(AssertionError):
        check_both(TIED_A, TIED_B, protocol)


@pytest.mark.parametrize("protocol", ["ecdh", "hash"])
def test_unicode_and_int_policy(protocol: str) -> None:
    a = ["caf\u00e9", 1, "01", "x"]
    b = [unicodedata.normalize("NFD", "café"), "1", "y"]
    run = check_both(a, b, protocol)
    assert run.results[al.ACTIVE].rows.tolist() and run.results[al.ACTIVE].size == 2


@pytest.mark.parametrize("protocol", ["ecdh", "hash"])
@pytest.mark.parametrize(("a", "b"), [
    ([], []), (["a"], []), ([], ["a"]),
    (["a", "b", "c"], ["c", "a", "b"]),  # all common
    (["a", "b"], ["c", "d"]),  # none common
])
def test_edge_sets(protocol: str, a: list[str], b: list[str]) -> None:
    run = check_both(a, b, protocol)
    assert len(run.results[al.ACTIVE].unaligned_rows()) == len(a) - run.results[al.ACTIVE].size


def test_larger_run_uses_the_pool_and_chunks() -> None:
    a = [f"u{i}" for i in range(3000)]
    b = [f"u{i}" for i in range(2000, 5500)]
    run = check_both(a, b)
    assert run.results[al.ACTIVE].size == 1000
    kinds = run.transcript.kinds()
    assert kinds.count("align.blinded") == 2 * 1  # one 4096-ID chunk each
    run = al.run_local(a, b, chunk_size=1000)
    assert run.transcript.kinds().count("align.blinded") == 3 + 4


def test_left_only_and_size_modes() -> None:
    a, b = ["a", "b", "c", "d"], ["d", "b", "x"]
    left = al.run_local(a, b, mode="left").results
    assert [a[i] for i in left[al.ACTIVE].rows] and set(a[i] for i in left[al.ACTIVE].rows) == {"b", "d"}
    assert left[al.PASSIVE].rows is None and left[al.PASSIVE].size is None
    with pytest.raises(ProtocolError, match="did not learn"):
        left[al.PASSIVE].unaligned_rows()
    size = al.run_local(a, b, mode="size").results
    assert size[al.ACTIVE].rows is None and size[al.PASSIVE].rows is None
    assert size[al.ACTIVE].size == size[al.PASSIVE].size == 2
    hleft = al.run_local(a, b, protocol="hash", mode="left").results
    assert hleft[al.PASSIVE].rows is None and hleft[al.ACTIVE].size == 2


def test_keyed_hash_refuses_cardinality_mode() -> None:
    with pytest.raises(ProtocolError, match="cardinality-only mode needs protocol 'ecdh'"):
        al.run_local(["a"], ["a"], protocol="hash", mode="size")


@pytest.mark.parametrize("protocol", ["ecdh", "hash"])
def test_multiparty_all_party_intersection(protocol: str) -> None:
    sets = [["a", "b", "c", "d", "e", 7], ["e", "d", "c", "z", "7"], ["7", "c", "e", "q"], ["e", 7, "c"]]
    run = al.run_multiparty_local(sets, protocol=protocol)
    names = [al.ACTIVE] + [f"passive-{j}" for j in range(3)]
    lists = [[canon(sets[k][i]) for i in run.results[n].rows] for k, n in enumerate(names)]
    assert all(lst == lists[0] for lst in lists)
    assert set(lists[0]) == {b"c", b"e", b"7"}
    assert run.results[al.ACTIVE].peer_sizes == {"passive-0": 5, "passive-1": 4, "passive-2": 3}
    rep = audit(run.transcript)
    rep.check()
    assert "align.global_order" in rep.kinds_received("passive-1")
    with pytest.raises(ProtocolError, match="at least three"):
        al.run_multiparty_local(sets[:2])


def test_duplicates_policy_through_the_protocol() -> None:
    with pytest.raises(InputDataError, match="duplicate ID"):
        al.run_local(["a", "b", "a"], ["a"])
    run = al.run_local(["a", "b", "a"], ["a", "b"], duplicates="keep_first")
    assert sorted(run.results[al.ACTIVE].rows.tolist()) == [0, 1]
    assert run.results[al.ACTIVE].unaligned_rows().tolist() == [2]


def test_same_order_on_demo_data_and_audit_kinds() -> None:
    bank, shop = al.audit.demo_ids()
    run = check_both(bank, shop)
    assert run.results[al.ACTIVE].size == 800
    rep = audit(run.transcript)
    rep.check()
    both = {"align.hello", "align.blinded", "align.doubled"}
    assert rep.kinds_received(al.ACTIVE) == both
    assert rep.kinds_received(al.PASSIVE) == both


def test_audit_kinds_per_mode() -> None:
    left = audit(al.run_local(["a", "b"], ["b"], mode="left").transcript)
    assert left.kinds_received(al.ACTIVE) == {"align.hello", "align.blinded", "align.doubled"}
    assert left.kinds_received(al.PASSIVE) == {"align.hello", "align.blinded"}
    size = audit(al.run_local(["a", "b"], ["b"], mode="size").transcript)
    assert size.kinds_received(al.ACTIVE) == {"align.hello", "align.blinded", "align.doubled_shuffled"}
    assert size.kinds_received(al.PASSIVE) == {"align.hello", "align.blinded", "align.cardinality"}
    hashed = audit(al.run_local(["a", "b"], ["b"], protocol="hash").transcript)
    assert hashed.kinds_received(al.ACTIVE) == hashed.kinds_received(al.PASSIVE) == {"align.hello", "align.tags"}
    for rep in (left, size, hashed):
        rep.check()


def test_audit_run_findings() -> None:
    outcome = al.audit_run()
    outcome.report.check()
    for observer, peer in ((al.ACTIVE, al.PASSIVE), (al.PASSIVE, al.ACTIVE)):
        dictionary = outcome.finding(f"dictionary attack on the {peer}'s blinded IDs", observer)
        assert dictionary.value == 0 and not dictionary.flagged
        assert dictionary.samples == {al.ACTIVE: 400, al.PASSIVE: 700}[observer]  # the peer's other IDs
        order = outcome.finding(f"order of the {peer}'s blinded IDs", observer)
        assert order.samples == 800  # it identified exactly the common IDs
    hash_f = outcome.finding("dictionary attack on the passive party's keyed-hash tags")
    assert hash_f.value == 400 and hash_f.flagged and hash_f.by_design  # the key holder's dictionary


def test_every_check_reports_when_its_messages_are_absent() -> None:
    """On taps that recorded nothing, each check of the audit is a finding that was not measured (never missing)."""
    from vflcrypto.protocols.align.audit import CHECKS, session_findings

    from vflcrypto.runtime.channel import AuditTap

    bank, shop = al.audit.demo_ids()
    enc = {al.ACTIVE: [canon(x) for x in bank[:20]], al.PASSIVE: [canon(x) for x in shop[:20]]}
    universe = sorted(set(enc[al.ACTIVE]) | set(enc[al.PASSIVE]))
    findings = session_findings([AuditTap() for _ in range(6)], enc, universe)
    assert sorted(f.name for f in findings if f.protection is not None) == sorted(c.name for c in CHECKS)
    assert not [f.name for f in findings if f.measured], "a check measured something on an empty tap"
    assert all(f.description.startswith("not measured") or "too few" in f.description
               or "nothing to test" in f.description for f in findings)


def test_every_check_of_the_audit_is_measured_with_its_smallest_effect() -> None:
    from conftest import honest_audit
    from vflcrypto.protocols.align.audit import CHECKS

    outcome = honest_audit("align")
    for name in (c.name for c in CHECKS):
        (f,) = [f for f in outcome.findings if f.name == name]
        assert f.measured and not f.flagged and f.min_effect is not None, name
        assert (f.min_effect == 0.0) == (f.p_value is None), name  # exact checks: 0; statistical ones: > 0


def test_demo_step(tmp_path: Path) -> None:
    from vflcrypto.spec import DemoContext

    ctx = DemoContext(workdir=tmp_path, key_bits=1024, quick=True, verbose=False, allow_insecure=True)
    summary = al.demo_step(ctx)
    assert summary["intersection"] == 800
    bank = ctx.state["aligned"]["bank"].read_text().splitlines()
    shop = ctx.state["aligned"]["shop"].read_text().splitlines()
    assert len(bank) == len(shop) == 801
    assert [r.split(",")[0] for r in bank[1:]] == [r.split(",")[0] for r in shop[1:]]


# --------------------------------------------------------------------------- hostile peers


def _pair(timeout: float = 5.0) -> LocalNetwork:
    return LocalNetwork([Endpoint(al.ACTIVE, al.ACTIVE), Endpoint(al.PASSIVE, al.PASSIVE)],
                        timeout=timeout)


@pytest.mark.parametrize(("passive_kw", "match"), [
    ({"protocol": "hash"}, "PSI protocol mismatch"),
    ({"mode": "left"}, "alignment mode mismatch"),
])
def test_protocol_or_mode_mismatch(passive_kw: dict[str, str], match: str) -> None:
    net = _pair()
    ida, idp = psi.IdentityKey.generate(), psi.IdentityKey.generate()
    kw_p = {"protocol": "ecdh", "mode": "both", **passive_kw}
    with pytest.raises(ProtocolError, match=match):
        run_parties({
            al.ACTIVE: lambda: al.run_active(net.channels(al.ACTIVE), ["a"], identity=ida,
                                             peer_identity=idp.public_bytes),
            al.PASSIVE: lambda: al.run_passive(net.channels(al.PASSIVE), ["a"], identity=idp,
                                               peer_identity=ida.public_bytes, **kw_p),
        }, network=net)


def test_version_mismatch() -> None:
    net = _pair()

    def old_passive() -> None:
        ch = net.channels(al.PASSIVE)[al.ACTIVE]
        ch.send(al.Hello("ecdh", "both", al.PROTOCOL_VERSION + 1, al.PASSIVE, 1, 4096, b"n" * 16, b"", b""))
        ch.recv(al.Hello)

    want = f"align version mismatch: peer speaks {al.PROTOCOL_VERSION + 1}, this side {al.PROTOCOL_VERSION}"
    with pytest.raises(ProtocolError, match=want):
        run_parties({al.ACTIVE: lambda: al.run_active(net.channels(al.ACTIVE), ["a"]),
                     al.PASSIVE: old_passive}, network=net)


def test_stalled_peer_times_out() -> None:
    net = _pair(timeout=0.2)
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match=r"no align\.hello from passive"):
        al.run_active(net.channels(al.ACTIVE), ["a", "b"])
    assert time.monotonic() - t0 < 5


def test_peer_stalling_mid_run_times_out() -> None:
    net = _pair(timeout=0.3)

    def half_passive() -> None:
        ch = net.channels(al.PASSIVE)[al.ACTIVE]
        ch.send(al.Hello("ecdh", "both", al.PROTOCOL_VERSION, al.PASSIVE, 2, 4096, b"n" * 16, b"", b""))
        ch.recv(al.Hello)
        time.sleep(1.0)  # never sends its blinded points

    with pytest.raises(PeerTimeoutError, match=r"align\.blinded"):
        run_parties({al.ACTIVE: lambda: al.run_active(net.channels(al.ACTIVE), ["a"]),
                     al.PASSIVE: half_passive}, network=net)


def test_small_order_point_from_peer_is_rejected() -> None:
    net = _pair()

    def evil_passive() -> None:
        ch = net.channels(al.PASSIVE)[al.ACTIVE]
        ch.send(al.Hello("ecdh", "both", al.PROTOCOL_VERSION, al.PASSIVE, 1, 4096, b"n" * 16, b"", b""))
        ch.recv(al.Hello)
        ch.send(al.BlindedChunk(0, bytes(32)))
        time.sleep(0.5)

    with pytest.raises(ProtocolError, match="small-order"):
        run_parties({al.ACTIVE: lambda: al.run_active(net.channels(al.ACTIVE), ["a"]),
                     al.PASSIVE: evil_passive}, network=net)


def test_wrong_chunk_length_is_rejected() -> None:
    net = _pair()

    def evil_passive() -> None:
        ch = net.channels(al.PASSIVE)[al.ACTIVE]
        ch.send(al.Hello("ecdh", "both", al.PROTOCOL_VERSION, al.PASSIVE, 2, 4096, b"n" * 16, b"", b""))
        ch.recv(al.Hello)
        ch.send(al.BlindedChunk(0, psi.blind_ids(psi.generate_secret(), [b"x"])))  # 1 point, 2 announced
        time.sleep(0.5)

    with pytest.raises(ProtocolError, match="malformed chunk"):
        run_parties({al.ACTIVE: lambda: al.run_active(net.channels(al.ACTIVE), ["a"]),
                     al.PASSIVE: evil_passive}, network=net)


def test_keyed_hash_rejects_unpinned_identity() -> None:
    net = _pair()
    ida, idp, mallory = (psi.IdentityKey.generate() for _ in range(3))
    with pytest.raises(ProtocolError, match="pinned identity"):
        run_parties({
            al.ACTIVE: lambda: al.run_active(net.channels(al.ACTIVE), ["a"], protocol="hash",
                                             identity=ida, peer_identity=idp.public_bytes),
            al.PASSIVE: lambda: al.run_passive(net.channels(al.PASSIVE), ["a"], protocol="hash",
                                               identity=mallory, peer_identity=ida.public_bytes),
        }, network=net)


def test_hello_is_frozen_message() -> None:
    assert dataclasses.is_dataclass(al.Hello)


# --------------------------------------------------------------------------- references


def test_matches_openmined_psi() -> None:
    om = pytest.importorskip("private_set_intersection.python")
    client_items = [f"item-{i}" for i in range(0, 300)]
    server_items = [f"item-{i}" for i in range(150, 500, 2)]
    server = om.server.CreateWithNewKey(True)
    client = om.client.CreateWithNewKey(True)
    setup = server.CreateSetupMessage(1e-9, len(client_items), server_items, om.DataStructure.RAW)
    response = server.ProcessRequest(client.CreateRequest(client_items))
    theirs = {client_items[i] for i in client.GetIntersection(setup, response)}
    run = check_both(client_items, server_items)
    ours = {client_items[i] for i in run.results[al.ACTIVE].rows}
    assert ours == theirs and len(ours) == 75


@pytest.mark.shared_data
@pytest.mark.skipif(not (FATE / "breast_hetero_host_sample_id.csv").exists(), reason="no ../shared/data")
@pytest.mark.parametrize("protocol", ["ecdh", "hash"])
def test_fate_breast_partial_overlap(protocol: str) -> None:
    guest = al.read_id_table(FATE / "breast_hetero_guest.csv", "id")
    host = al.read_id_table(FATE / "breast_hetero_host_sample_id.csv", "id")
    run = check_both(guest.ids, host.ids, protocol)
    assert run.results[al.ACTIVE].size == 299
