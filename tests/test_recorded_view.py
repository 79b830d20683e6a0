"""A network party keeps its own messages (``--keep-messages``) and is attacked from its view alone.

The end-to-end test runs split learning as three processes over mutual TLS, keeps party-0's
messages, and runs ``vflcrypto audit --transcript`` on party-0's run record with the server's
label file as the truth: the published label attacks read only what party-0 received and sent.
The unit tests cover the kept-messages file: what it holds, its mode, and bad files.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import msgpack
import numpy as np
import pytest

from vflcrypto.errors import InputDataError
from vflcrypto.runtime.channel import AuditTap, LocalNetwork
from vflcrypto.runtime.record import FORMAT, messages_path, read_messages, write_messages
from vflcrypto.runtime.transcript import Endpoint, Transcript, TranscriptEntry


def _kept_run(tmp_path: Path) -> Path:
    """A two-party exchange of split-learning messages in which the party keeps what it received and sent."""
    from vflcrypto.protocols.split.messages import BatchGradient, BatchRepresentation, Setup

    tap = AuditTap(keep_sent=True)
    net = LocalNetwork([Endpoint("server", "server"), Endpoint("party-0", "party")], run_id="r1",
                       transcript=Transcript(tap))
    server, party = net.channels("server")["party-0"], net.channels("party-0")["server"]
    server.send(Setup(4, 0, 2, 1, 4, 7))
    party.recv(Setup)
    party.send(BatchRepresentation(0, 0, np.ones((4, 2))))
    server.recv(BatchRepresentation)
    server.send(BatchGradient(0, 0, np.full((4, 2), 0.5)))
    party.recv(BatchGradient)
    path = tmp_path / "party-0.npz.messages"
    # the in-process network shares one tap: keep only what party-0 saw, as its own process would
    only = AuditTap()
    for r in tap.records():
        if "party-0" in (r.entry.sender, r.entry.receiver) and (r.entry.event == "recv") == (
                r.entry.receiver == "party-0"):
            only.record(r.entry, r.message)
    assert write_messages(path, only, party="party-0", role="party", task="train-split", run_id="r1",
                          rows=["a", "b", "c", "d"]) == 3
    return path


def test_kept_messages_read_back_as_the_party_view_and_are_owner_only(tmp_path: Path) -> None:
    from vflcrypto.protocols.split.messages import BatchGradient, BatchRepresentation, Setup

    path = _kept_run(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    view = read_messages(path)
    assert (view.party, view.role, view.task, view.rows) == ("party-0", "party", "train-split", ("a", "b", "c", "d"))
    assert view.tap.received("party-0", Setup) == [Setup(4, 0, 2, 1, 4, 7)]
    (g,) = view.tap.received("party-0", BatchGradient)
    assert np.array_equal(g.G, np.full((4, 2), 0.5))
    (h,) = view.tap.received(None, BatchRepresentation, sender="party-0")  # what it sent
    assert np.array_equal(h.H, np.ones((4, 2))) and not view.undecoded
    assert messages_path(Path("d/party-0.npz")) == Path("d/party-0.npz.messages")


@pytest.mark.parametrize("damage, error", [
    (lambda b: b[: len(b) // 2], "not a file of kept messages"),
    (lambda b: msgpack.packb({"format": "other"}), "expected format"),
    (lambda b: msgpack.packb({"format": FORMAT, "party": "p", "role": "r", "task": "t", "run_id": "x",
                              "messages": [[1, 2]]}), "message 0 is malformed"),
    (lambda b: msgpack.packb({"format": FORMAT, "party": "p", "role": "r", "task": "t", "run_id": "x",
                              "messages": [["recv", 0, "s", "server", "p", "party", "split.setup", "",
                                            msgpack.packb({"n_overlap": "many"})]]}), "split.setup.*does not decode"),
    (lambda b: msgpack.packb({"format": FORMAT, "party": "p", "role": "r", "task": "t", "run_id": "x",
                              "messages": [["recv", 0, "s", "server", "p", "party", "no.such.kind", "",
                                            b""]]}), "no.such.kind"),
])
def test_a_damaged_or_foreign_messages_file_is_refused_in_one_line(tmp_path: Path, damage, error: str) -> None:
    path = _kept_run(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(InputDataError, match=error) as info:
        read_messages(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_ciphertexts_under_a_key_the_file_does_not_carry_are_counted_not_decoded(tmp_path: Path,
                                                                                    small_paillier_keys) -> None:
    from vflcrypto.protocols.logreg.messages import EncryptedResidual

    pk, _ = small_paillier_keys
    tap = AuditTap()
    entry = TranscriptEntry(0, "recv", 0, "active", "active", "passive-0", "passive", "logreg.encrypted_residual", 1,
                            0.0)
    tap.record(entry, EncryptedResidual(0, pk.encrypt_fixed(np.array([0.5, 1.0, 2.0]), 16)))
    path = tmp_path / "m"
    write_messages(path, tap, party="passive-0", role="passive", task="train-logreg", run_id="r")
    view = read_messages(path)
    assert view.undecoded == {"logreg.encrypted_residual": 1} and not view.tap.records()


def test_a_network_party_is_attacked_from_its_kept_messages_alone(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Split learning as three processes; party-0 keeps its messages; the label attacks on its view alone recover
    the classes (direction scoring) as the in-process audit does."""
    pytest.importorskip("torch")
    from test_party_processes import representation_processes

    from vflcrypto.cli import main

    labels, _, recs = representation_processes(tmp_path, "split", ["--epochs", "2"], keep="party-0",
                                                     timeout=120)
    assert recs["party-0"]["messages"] == "party-0.npz.messages" and "messages" not in recs["party-1"]
    record = tmp_path / "party-0.npz.run.json"
    assert main(["audit", "--transcript", str(record), "--truth", str(labels), "--truth-id-column", "id",
                 "--truth-label", "digit", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    card = {row["attack"]: row for row in out["scorecard"]}
    assert {r["observer"] for r in out["scorecard"]} == {"party-0"}
    direction = card["split.gradient: direction scoring label inference"]
    assert direction["samples"] == 200 and direction["score"] > 0.9 and direction["outcome"] == "leaks by design"
    assert len(card) == 3, card
    partial = tmp_path / "some-labels.csv"
    partial.write_text("\n".join(labels.read_text().splitlines()[:50]) + "\n")
    assert main(["audit", "--transcript", str(record), "--truth", str(partial), "--truth-id-column", "id",
                 "--truth-label", "digit"]) != 0
    assert f"{partial}: no 'digit' for" in capsys.readouterr().err
    # without --keep-messages there is nothing to attack, and the command says so
    assert main(["audit", "--transcript", str(tmp_path / "party-1.npz.run.json"), "--truth", str(labels),
                 "--truth-id-column", "id", "--truth-label", "digit"]) != 0
    assert "kept no messages to attack (run the party with --keep-messages)" in capsys.readouterr().err
