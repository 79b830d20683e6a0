"""``--protocol auto``: the rule, the ``align.offer`` exchange, and the command's choice."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from vflcrypto.protocols.align import choice
from vflcrypto.protocols.align.messages import ACTIVE, PASSIVE, PROTOCOL_VERSION, Offer

from vflcrypto.cli import main
from vflcrypto.errors import ProtocolError
from vflcrypto.runtime.channel import Endpoint, LocalNetwork, run_parties
from vflcrypto.runtime.transcript import Transcript

ALL = ("ecdh", "hash", "kkrt", "rr22")


@pytest.mark.parametrize(("rows", "mode", "common", "parties", "expected"), [
    ((100, 200), "both", ALL, 2, "ecdh"),                       # small: no fixed cost to amortise
    ((5_000, 5_000), "both", ALL, 2, "rr22"),                   # the threshold, in all
    ((4_999, 5_000), "both", ALL, 2, "ecdh"),
    ((10**7, 10**5), "left", ALL, 2, "rr22"),                   # unbalanced sizes add up
    ((10**6, 10**6), "size", ALL, 2, "ecdh"),                   # only ECDH has a cardinality mode
    ((10**6, 10**6, 10**6), "all", ALL, 3, "ecdh"),             # one protocol for every pair
    ((30_000, 30_000), "both", ("ecdh", "hash", "kkrt"), 2, "kkrt"),  # a side without the C extensions
    ((10_000, 10_000), "both", ("ecdh", "hash", "kkrt"), 2, "ecdh"),
])
def test_the_rule(rows: tuple[int, ...], mode: str, common: tuple[str, ...], parties: int, expected: str) -> None:
    assert choice.choose(rows, mode, common, parties=parties) == expected


def _negotiate(rows: dict[str, int], modes: dict[str, str], offers: dict[str, tuple[str, ...]] | None = None,
               roles: dict[str, str] | None = None) -> dict[str, object]:
    """Both sides' :func:`choice.negotiate` over an in-process link; ``offers`` stands in for a side's build."""
    net = LocalNetwork([Endpoint(ACTIVE, ACTIVE), Endpoint(PASSIVE, PASSIVE)], timeout=5,
                       run_id=os.urandom(8).hex(), transcript=Transcript())

    def side(name: str) -> object:
        ch = net.channels(name)[PASSIVE if name == ACTIVE else ACTIVE]
        role = (roles or {}).get(name, name)
        if offers and name in offers:  # a peer whose build offers other protocols: its own Offer, then the rule
            ch.send(Offer(PROTOCOL_VERSION, role, modes[name], rows[name], offers[name]), step="offer")
            peer = ch.recv(Offer, step="offer")
            return choice.choose((rows[name], peer.rows), modes[name],
                                 [p for p in offers[name] if p in peer.protocols])
        return choice.negotiate(ch, role=role, rows=rows[name], mode=modes[name])

    return run_parties({n: (lambda n=n: side(n)) for n in (ACTIVE, PASSIVE)}, network=net)


def test_both_sides_choose_the_same_protocol_from_each_others_offer() -> None:
    vole = choice.choose((6_000, 6_000), "both", choice.available())  # rr22 where its C extensions are built
    assert _negotiate({ACTIVE: 6_000, PASSIVE: 6_000}, {ACTIVE: "both", PASSIVE: "both"}) \
        == {ACTIVE: vole, PASSIVE: vole}
    assert _negotiate({ACTIVE: 100, PASSIVE: 100}, {ACTIVE: "both", PASSIVE: "both"}) \
        == {ACTIVE: "ecdh", PASSIVE: "ecdh"}
    # one side alone knows neither total: 3,000 + 8,000 crosses the threshold, each alone does not
    assert set(_negotiate({ACTIVE: 3_000, PASSIVE: 8_000}, {ACTIVE: "left", PASSIVE: "left"}).values()) \
        == {choice.choose((3_000, 8_000), "left", choice.available())}


def test_a_peer_without_the_vole_extensions_moves_both_to_kkrt() -> None:
    got = _negotiate({ACTIVE: 50_000, PASSIVE: 50_000}, {ACTIVE: "both", PASSIVE: "both"},
                     offers={PASSIVE: ("ecdh", "hash", "kkrt")})
    assert got == {ACTIVE: "kkrt", PASSIVE: "kkrt"}


@pytest.mark.parametrize(("modes", "roles", "words"), [
    ({ACTIVE: "both", PASSIVE: "left"}, None, "runs mode"),
    ({ACTIVE: "both", PASSIVE: "both"}, {PASSIVE: ACTIVE}, "both parties claim"),
])
def test_a_mismatched_offer_is_refused_before_any_psi(modes: dict[str, str], roles: dict[str, str] | None,
                                                      words: str) -> None:
    with pytest.raises(ProtocolError, match=words):
        _negotiate({ACTIVE: 10, PASSIVE: 10}, modes, roles=roles)


def _ids(path: Path, n: int, offset: int) -> Path:
    path.write_text("id,x\n" + "".join(f"u{offset + i},{i}\n" for i in range(n)))
    return path


@pytest.mark.parametrize(("n", "reveal", "expected"), [(6_000, "both", "rr22"), (200, "both", "ecdh"),
                                                        (6_000, "size", "ecdh")])
def test_the_command_defaults_to_auto(tmp_path: Path, capsys: pytest.CaptureFixture[str], n: int, reveal: str,
                                      expected: str) -> None:
    if expected not in choice.available():
        expected = choice.resolve_local((n, n), "both")  # a build without the VOLE PSI's C extensions
    left, right = _ids(tmp_path / "l.csv", n, 0), _ids(tmp_path / "r.csv", n, n // 2)
    assert main(["align", "--left", str(left), "--right", str(right), "--id-column", "id", "--reveal", reveal,
                 "--out-dir", str(tmp_path / "out"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["protocol"] == expected and summary["intersection"] == n - n // 2
