"""Channel, transports, transcript and the hostile-frame cases of the wire format."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest

from vflcrypto.audit.ledger import audit
from vflcrypto.errors import (
    AuditError,
    DecodeError,
    PeerDisconnectedError,
    PeerTimeoutError,
    ProtocolError,
    UndeclaredMessageError,
)
from vflcrypto.runtime.channel import (
    AuditTap,
    Channel,
    Endpoint,
    LocalNetwork,
    QueueTransport,
    Transcript,
    run_parties,
)
from vflcrypto.runtime.declarations import Protection, declare
from vflcrypto.runtime.wire import HEADER_BYTES, WIRE_VERSION, decode_frame, encode_frame, register_message


@declare("test.ping", sender="alice", receiver="bob", protection=Protection.PUBLIC,
         reveals="a counter and a vector chosen for the test")
@dataclass(frozen=True)
class Ping:
    counter: int
    values: np.ndarray
    note: str | None
    tags: tuple[str, ...]


@declare("test.pong", sender="bob", receiver="alice", protection=Protection.PUBLIC,
         reveals="the counter echoed back")
@dataclass(frozen=True)
class Pong:
    counter: int


@dataclass(frozen=True)
class Undeclared:
    x: int


register_message(Undeclared, "test.undeclared")

ALICE = Endpoint("alice-0", "alice")
BOB = Endpoint("bob-0", "bob")


def _pair(timeout: float = 2.0, **kw) -> tuple[Channel, Channel]:
    ta, tb = QueueTransport.pair()
    transcript = Transcript()
    return (Channel(ALICE, BOB, ta, transcript=transcript, timeout=timeout, **kw),
            Channel(BOB, ALICE, tb, transcript=transcript, timeout=timeout, **kw))


def _ping(counter: int = 1) -> Ping:
    return Ping(counter, np.arange(4, dtype=np.float64), None, ("a", "b"))


def test_round_trip_preserves_types_and_records_transcript() -> None:
    a, b = _pair()
    sent = a.send(_ping(7))
    got = b.recv(Ping)
    assert got.counter == 7 and got.tags == ("a", "b") and got.note is None
    np.testing.assert_array_equal(got.values, np.arange(4.0))
    assert got.values.dtype == np.float64
    b.send(Pong(7))
    assert a.recv(Pong).counter == 7
    entries = a.transcript.entries()
    assert [(e.event, e.kind) for e in entries] == [
        ("send", "test.ping"), ("recv", "test.ping"), ("send", "test.pong"), ("recv", "test.pong")]
    assert entries[0].nbytes == sent == a.bytes_sent == b.bytes_received
    assert a.transcript.bytes_sent_by("sender_role")["alice"] == sent


def test_wrong_kind_is_a_protocol_error() -> None:
    a, b = _pair()
    a.send(_ping())
    with pytest.raises(ProtocolError, match=r"expected test\.pong"):
        # bob expects a Pong from alice, which is not even declared in that direction
        b.recv(Pong)


def test_undeclared_message_cannot_be_sent() -> None:
    a, _ = _pair()
    with pytest.raises(UndeclaredMessageError):
        a.send(Undeclared(1))


def test_message_in_undeclared_direction_is_refused() -> None:
    _, b = _pair()
    with pytest.raises(UndeclaredMessageError, match=r"not bob -> alice"):
        b.send(_ping())


def test_stalled_peer_times_out_without_hanging() -> None:
    _, b = _pair(timeout=0.2)
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match=r"no test\.ping from alice-0"):
        b.recv(Ping)
    assert time.monotonic() - t0 < 2.0


def test_closed_peer_raises_disconnected() -> None:
    a, b = _pair(timeout=5.0)
    a.close()
    t0 = time.monotonic()
    with pytest.raises(PeerDisconnectedError):
        b.recv(Ping)
    assert time.monotonic() - t0 < 1.0


def test_replayed_frame_is_rejected() -> None:
    ta, tb = QueueTransport.pair()
    a = Channel(ALICE, BOB, ta, timeout=1)
    b = Channel(BOB, ALICE, tb, timeout=1)
    frame = encode_frame(_ping(), seq=0)
    ta.send_frame(frame)
    ta.send_frame(frame)  # replay
    b.recv(Ping)
    with pytest.raises(ProtocolError, match="out of order"):
        b.recv(Ping)
    del a


def test_frame_from_another_run_is_rejected() -> None:
    ta, tb = QueueTransport.pair()
    b = Channel(BOB, ALICE, tb, timeout=1, run_id="run-B")
    ta.send_frame(encode_frame(_ping(), seq=0, run_id="run-A"))
    with pytest.raises(ProtocolError, match="another run"):
        b.recv(Ping)


@pytest.mark.parametrize("cut", [0, 3, HEADER_BYTES, HEADER_BYTES + 5, -1])
def test_truncated_frame(cut: int) -> None:
    frame = encode_frame(_ping(), seq=0)
    with pytest.raises(DecodeError):
        decode_frame(frame[:cut])


def test_tampered_frame_fails_integrity() -> None:
    frame = bytearray(encode_frame(_ping(), seq=0))
    frame[-3] ^= 0x01
    with pytest.raises(DecodeError, match="integrity"):
        decode_frame(bytes(frame))


def test_mac_key_binds_frames_to_the_channel_key() -> None:
    frame = encode_frame(_ping(), seq=0, mac_key=b"k" * 32)
    assert decode_frame(frame, mac_key=b"k" * 32).message.counter == 1
    with pytest.raises(DecodeError, match="integrity"):
        decode_frame(frame, mac_key=b"x" * 32)
    with pytest.raises(DecodeError, match="integrity"):
        decode_frame(frame)


def test_oversized_frame_is_refused_before_parsing() -> None:
    frame = encode_frame(Ping(1, np.zeros(10_000), None, ()), seq=0)
    with pytest.raises(DecodeError, match="exceeds"):
        decode_frame(frame, max_bytes=1000)


def test_channel_refuses_to_send_oversized_frame() -> None:
    a, _ = _pair(max_frame_bytes=500)
    with pytest.raises(ProtocolError, match="exceeds"):
        a.send(Ping(1, np.zeros(10_000), None, ()))


def test_unknown_version_and_magic() -> None:
    frame = bytearray(encode_frame(_ping(), seq=0))
    frame[4] = WIRE_VERSION + 1
    with pytest.raises(ProtocolError, match="version"):
        decode_frame(bytes(frame))
    with pytest.raises(DecodeError, match="magic"):
        decode_frame(b"XXXX" + bytes(frame[4:]))


def test_unknown_kind_is_rejected() -> None:
    import vflcrypto.runtime.wire as wire

    body = wire.encode_value(["test.nonexistent", 0, "", {"x": 1}])
    frame = wire.MAGIC + bytes([WIRE_VERSION]) + wire._tag(body, None) + body
    with pytest.raises(ProtocolError, match="unknown message kind"):
        decode_frame(frame)


def _forge(kind: str, fields: dict) -> bytes:
    import vflcrypto.runtime.wire as wire

    body = wire.encode_value([kind, 0, "", fields])
    return wire.MAGIC + bytes([WIRE_VERSION]) + wire._tag(body, None) + body


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"counter": "7", "values": np.zeros(1), "note": None, "tags": []}, "expected int"),
        ({"counter": 7, "values": np.zeros(1), "note": None}, "missing"),
        ({"counter": 7, "values": np.zeros(1), "note": None, "tags": [], "x": 1}, "extra"),
        ({"counter": 7, "values": [1.0], "note": None, "tags": []}, "ndarray"),
        ({"counter": 7, "values": np.zeros(1), "note": 3, "tags": []}, "none of"),
        ({"counter": True, "values": np.zeros(1), "note": None, "tags": []}, "expected int"),
    ],
)
def test_fields_are_checked_against_annotations(fields: dict, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        decode_frame(_forge("test.ping", fields))


def test_object_arrays_never_cross_the_wire() -> None:
    with pytest.raises(ProtocolError):
        encode_frame(Ping(1, np.array([object()]), None, ()), seq=0)


def test_array_with_inconsistent_shape_is_rejected() -> None:
    import msgpack

    import vflcrypto.runtime.wire as wire

    fake = msgpack.ExtType(2, msgpack.packb(["<f8", [3], b"\x00" * 16], use_bin_type=True))
    body = msgpack.packb(["test.ping", 0, "", {"counter": 1, "values": fake, "note": None,
                                                 "tags": []}], use_bin_type=True)
    frame = wire.MAGIC + bytes([WIRE_VERSION]) + wire._tag(body, None) + body
    with pytest.raises(DecodeError, match="shape"):
        decode_frame(frame)


def test_run_parties_propagates_root_cause_and_unblocks_peers() -> None:
    net = LocalNetwork([ALICE, BOB], timeout=30)

    def alice() -> None:
        raise RuntimeError("alice failed")

    def bob() -> Ping:
        return net.channels("bob-0")["alice-0"].recv(Ping)

    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="alice failed"):
        run_parties({"alice-0": alice, "bob-0": bob}, network=net)
    assert time.monotonic() - t0 < 5, "bob must be released by alice's closed channel"


def test_run_parties_overall_timeout() -> None:
    net = LocalNetwork([ALICE, BOB], timeout=0.5)
    release = threading.Event()

    def bob() -> None:
        release.wait(3)

    with pytest.raises(PeerTimeoutError):
        run_parties({"bob-0": bob}, network=net, timeout=0.2)
    release.set()


def test_audit_joins_transcript_with_declarations() -> None:
    net = LocalNetwork([ALICE, BOB], timeout=2)
    ch_a, ch_b = net.channels("alice-0")["bob-0"], net.channels("bob-0")["alice-0"]

    def alice() -> int:
        ch_a.send(_ping(1))
        ch_a.send(_ping(2))
        return ch_a.recv(Pong).counter

    def bob() -> None:
        ch_b.recv(Ping)
        ch_b.recv(Ping)
        ch_b.send(Pong(2))

    assert run_parties({"alice-0": alice, "bob-0": bob}, network=net)["alice-0"] == 2
    report = audit(net.transcript)
    report.check()
    assert report.kinds_received("bob-0") == {"test.ping"}
    assert report.kinds_received("alice-0") == {"test.pong"}
    (row,) = report.for_party("bob-0")
    assert row.count == 2 and row.protection == "public"
    assert "bob-0 (bob) received" in report.to_text()
    assert report.to_dict()["parties"]["alice-0"]["received"][0]["kind"] == "test.pong"


def test_audit_flags_undeclared_entries() -> None:
    transcript = Transcript()
    transcript.record("recv", 0, ALICE, BOB, "test.not_declared", 10)
    report = audit(transcript)
    assert report.undeclared
    with pytest.raises(UndeclaredMessageError):
        report.check()


# --------------------------------------------------------------------------- audit tap


def test_audit_tap_keeps_decoded_messages_and_held_values_only_when_on() -> None:
    for tap in (None, AuditTap()):
        net = LocalNetwork([ALICE, BOB], transcript=Transcript(tap))
        a, b = net.channels("alice-0")["bob-0"], net.channels("bob-0")["alice-0"]
        a.hold("secret", 41)
        a.send(Ping(1, np.arange(3.0), None, ()))
        got = b.recv(Ping)
        b.send(Pong(got.counter))
        a.recv(Pong)
        if tap is None:
            assert net.transcript.tap is None  # production runs keep sizes and kinds only
            continue
        (ping,) = tap.received("bob-0", Ping)
        assert ping.counter == 1 and np.array_equal(ping.values, np.arange(3.0))
        assert tap.received("bob-0", "test.ping", sender="alice-0") == [ping]
        assert tap.received("alice-0", Pong)[0].counter == 1 and tap.received("alice-0", Ping) == []
        (rec,) = tap.records("bob-0")
        assert rec.entry.kind == "test.ping" and rec.entry.event == "recv"
        assert tap.held_one("alice-0", "secret") == 41
        with pytest.raises(AuditError, match="recorded nothing"):
            tap.held("bob-0", "secret")


def test_claimed_protections_exclude_public_plaintext_and_the_receivers_own_key() -> None:
    import vflcrypto.protocols.linreg  # noqa: F401  (registers its declarations)

    from vflcrypto.runtime.declarations import declaration_for

    masked = declaration_for("linreg.masked_gradient")  # under C's key, sent to C
    assert masked.receiver_holds_key
    assert masked.claimed_protections == (Protection.MASKED,)
    assert "the receiver's own" in masked.protection_label
    residual = declaration_for("linreg.encrypted_residual")  # under C's key, sent to a data party
    assert residual.claimed_protections == (Protection.CIPHERTEXT,)
    assert declaration_for("linreg.plan").claimed_protections == ()
