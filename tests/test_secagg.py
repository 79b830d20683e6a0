"""Secure aggregation (Bonawitz et al., CCS 2017; SecAgg+'s sparse graph): exact sums, dropouts, hostile input."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np
import pytest
from vflcrypto.protocols import secagg
from vflcrypto.protocols.secagg import math as sm
from vflcrypto.protocols.secagg.roles import client_names

from vflcrypto.errors import EncodingOverflowError, InputDataError, InsecureParameterError, ProtocolError
from vflcrypto.sharing.shamir import PRIME, reconstruct, split


def _ring_sum(xs: list[np.ndarray], cfg: secagg.SecAggConfig) -> np.ndarray:
    total = np.zeros(len(xs[0]), np.uint64)
    for x in xs:
        total = total + sm.encode_ring(x, cfg.frac_bits, cfg.value_bits)
    return total


@pytest.mark.parametrize("n", [3, 7, 20, 50])
def test_the_secure_sum_is_the_fixed_point_sum_exactly(n: int) -> None:
    rng = np.random.default_rng(n)
    xs = [rng.normal(scale=100, size=64) for _ in range(n)]
    cfg = secagg.SecAggConfig()
    run = secagg.run_local(xs, config=cfg)
    np.testing.assert_array_equal(run.rounds[0].raw, _ring_sum(xs, cfg))
    np.testing.assert_allclose(run.total, np.sum(xs, 0), atol=n * 2.0 ** -24)
    assert run.rounds[0].survivors == client_names(n)


def test_a_million_entries() -> None:
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=1_000_000) for _ in range(3)]
    cfg = secagg.SecAggConfig()
    np.testing.assert_array_equal(secagg.run_local(xs, config=cfg).rounds[0].raw, _ring_sum(xs, cfg))


@pytest.mark.parametrize("phase", ["advertise", "shares", "masked", "unmask"])
def test_dropouts_up_to_n_minus_t_leave_the_survivors_sum_exact(phase: str) -> None:
    n, cfg = 9, secagg.SecAggConfig()  # t = 5: up to 4 may drop
    rng = np.random.default_rng(2)
    xs = [rng.normal(size=32) for _ in range(n)]
    gone = {f"client-{i}": (0, phase) for i in (1, 4, 6, 8)}
    res = secagg.run_local(xs, config=cfg, vanish=gone, timeout=5).rounds[0]
    kept = [i for i in range(n) if f"client-{i}" in res.survivors]
    # a client that vanishes only at unmasking still had its masked input summed
    assert len(kept) == (n if phase == "unmask" else n - 4)
    np.testing.assert_array_equal(res.raw, _ring_sum([xs[i] for i in kept], cfg))


def test_more_than_n_minus_t_dropouts_abort_without_a_sum() -> None:
    xs = [np.ones(8) for _ in range(5)]  # t = 3
    gone = {f"client-{i}": (0, "masked") for i in (0, 1, 2)}
    with pytest.raises(ProtocolError, match="fewer than"):
        secagg.run_local(xs, vanish=gone, timeout=5)


def test_dropouts_during_unmasking_beyond_t_abort() -> None:
    xs = [np.ones(8) for _ in range(5)]  # t = 3; 3 survivors send no shares: no self-mask can be removed
    gone = {f"client-{i}": (0, "unmask") for i in (0, 1, 2)}
    with pytest.raises(ProtocolError, match="shares cannot reconstruct"):
        secagg.run_local(xs, vanish=gone, timeout=5)


def test_secagg_plus_sparse_graph_with_dropouts() -> None:
    n = 12
    cfg = secagg.SecAggConfig(degree=6)  # neighbourhoods of 7, t = 4
    nb = sm.neighbours(client_names(n), 6, 0)
    assert all(len(v) == 6 for v in nb.values()) and all(u in nb[v] for u in nb for v in nb[u])  # symmetric
    rng = np.random.default_rng(3)
    xs = [rng.normal(size=16) for _ in range(n)]
    res = secagg.run_local(xs, config=cfg, vanish={"client-3": (0, "masked"), "client-7": (0, "shares")},
                           timeout=5).rounds[0]
    kept = [i for i in range(n) if f"client-{i}" in res.survivors]
    assert len(kept) == n - 2
    np.testing.assert_array_equal(res.raw, _ring_sum([xs[i] for i in kept], cfg))


def test_a_32_bit_ring_halves_the_masked_bytes_and_stays_exact() -> None:
    rng = np.random.default_rng(6)
    xs = [rng.normal(size=1000) for _ in range(6)]
    c32 = secagg.SecAggConfig(ring_bits=32, frac_bits=16, value_bits=22)
    r32, r64 = secagg.run_local(xs, config=c32), secagg.run_local(xs)
    assert r32.rounds[0].raw.dtype == np.uint32
    total = np.zeros(1000, np.uint32)
    for x in xs:
        total = total + sm.encode_ring(x, 16, 22, 32)
    np.testing.assert_array_equal(r32.rounds[0].raw, total)
    np.testing.assert_allclose(r32.total, np.sum(xs, 0), atol=6 * 2.0 ** -16)

    def masked_bytes(run: secagg.SecAggRun) -> int:
        return sum(e.nbytes for e in run.transcript.sent() if e.kind == "secagg.masked_input")

    assert masked_bytes(r32) < 0.52 * masked_bytes(r64)
    with pytest.raises(InsecureParameterError, match="too small"):
        secagg.SecAggConfig(ring_bits=32).check(6)  # 40 value bits do not fit Z_2^32


def test_every_round_has_fresh_keys_and_masks_and_an_exact_sum() -> None:
    """Across rounds, not within one: every client advertises new X25519 keys and draws a new
    self-mask seed each round, so its masked inputs of two rounds differ by anything but the
    difference of its inputs (a reused mask cancels in that difference and leaves it exactly);
    every round's sum is exact."""
    from vflcrypto.runtime.channel import AuditTap

    rng = np.random.default_rng(4)
    xs = [[rng.normal(size=8) for _ in range(3)] for _ in range(4)]
    cfg = secagg.SecAggConfig()
    tap = AuditTap()
    run = secagg.run_local(xs, config=cfg, tap=tap)
    for r in range(3):
        np.testing.assert_array_equal(run.rounds[r].raw, _ring_sum([x[r] for x in xs], cfg))
    keys = []
    for i, name in enumerate(client_names(4)):
        ads = tap.received(secagg.SERVER, secagg.Advertise, sender=name)
        assert len(ads) == 3
        keys += [k for a in ads for k in (a.c_pk, a.s_pk)]
        assert len(set(tap.held(name, "self_mask_seed"))) == 3
        masked = [m.y for m in tap.received(secagg.SERVER, secagg.MaskedInput, sender=name)]
        assert len(masked) == 3
        for r in range(2):
            inputs = [sm.encode_ring(xs[i][k], cfg.frac_bits, cfg.value_bits) for k in (r, r + 1)]
            # uint64 arithmetic wraps mod 2^64, the ring: equal entries have probability 2^-64 each
            assert ((masked[r + 1] - masked[r]) != (inputs[1] - inputs[0])).all()
    assert len(set(keys)) == 4 * 3 * 2


def test_a_late_masked_input_is_read_but_its_client_counts_as_dropped() -> None:
    """``late``: the server reads the masked input, unmasks without it (the survivors reveal the late client's
    mask key, never its self-mask seed) and hangs up on the client, which is gone in the next round."""
    from vflcrypto.protocols.secagg.messages import MaskedInput, Unmask

    from vflcrypto.runtime.channel import AuditTap

    rng = np.random.default_rng(6)
    xs = [[rng.normal(size=16) for _ in range(2)] for _ in range(6)]
    cfg, tap = secagg.SecAggConfig(), AuditTap()
    r0, r1 = secagg.run_local(xs, config=cfg, late={"client-2": 0}, tap=tap, timeout=5).rounds
    assert "client-2" in r0.shared and "client-2" not in r0.survivors
    assert [m.round for m in tap.received("server", MaskedInput, sender="client-2")] == [0]
    unmask = [m for m in tap.received("server", Unmask) if m.round == 0]
    assert len(unmask) == 5 and all(m.s_owners == ["client-2"] and "client-2" not in m.b_owners for m in unmask)
    np.testing.assert_array_equal(r0.raw, _ring_sum([x[0] for i, x in enumerate(xs) if i != 2], cfg))
    assert "client-2" not in r1.advertised
    np.testing.assert_array_equal(r1.raw, _ring_sum([x[1] for i, x in enumerate(xs) if i != 2], cfg))


def test_the_server_refuses_unmasking_shares_against_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that reveals a dropped neighbour's self-mask seed as well as its mask key: the server aborts."""
    honest = sm.reveals

    def leaky(owner: str, survivors: Any) -> tuple[bool, bool]:
        if threading.current_thread().name == "party-client-0":
            return owner not in survivors, True
        return honest(owner, survivors)

    monkeypatch.setattr(sm, "reveals", leaky)
    with pytest.raises(ProtocolError, match="inconsistent with the survivors"):
        secagg.run_local([np.ones(8) for _ in range(5)], vanish={"client-4": (0, "masked")}, timeout=5)


def test_the_audit_runs_every_check_and_an_honest_run_passes_them() -> None:
    from conftest import honest_audit
    from vflcrypto.protocols.secagg.audit import CHECKS

    outcome = honest_audit("secagg")
    assert secagg.SPEC.checks == CHECKS
    for check in CHECKS:
        hits = [f for f in outcome.findings if f.name == check.name]
        assert hits and all(f.measured and not f.flagged and f.min_effect is not None for f in hits), check.name
    assert not outcome.failures()
    assert outcome.metrics["late_clients"] == 1


# --------------------------------------------------------------------------- parameters


def test_insecure_or_unusable_parameters_are_refused() -> None:
    with pytest.raises(InsecureParameterError, match="allow_low_threshold"):
        secagg.SecAggConfig(threshold=2).check(5)  # 2 <= 5/2
    assert secagg.SecAggConfig(threshold=2, allow_low_threshold=True).check(5) == (5, 2)
    with pytest.raises(InsecureParameterError, match="too small"):
        secagg.SecAggConfig(value_bits=60).check(50)  # 60 + 6 + 1 > 64
    with pytest.raises(InputDataError, match="even"):
        secagg.SecAggConfig(degree=3).check(10)
    with pytest.raises(EncodingOverflowError):
        secagg.run_local([np.array([1e9]), np.array([0.0]), np.array([0.0])])  # 1e9 * 2^24 > 2^40


def test_shamir_any_t_shares_recover_and_fewer_do_not() -> None:
    secret = 123456789
    sh = split(secret, [1, 2, 3, 4, 5], 3)
    assert reconstruct({k: sh[k] for k in (1, 3, 5)}, 3) == secret
    with pytest.raises(ProtocolError):
        reconstruct({1: sh[1], 2: sh[2]}, 3)
    with pytest.raises(ProtocolError):  # a random wrong share interpolates outside the secrets' range (1 - 2^-9)
        reconstruct({1: (sh[1] + (1 << 515)) % PRIME, 2: sh[2], 3: sh[3]}, 3)


# --------------------------------------------------------------------------- hostile clients


class _Rewrite:
    """A channel proxy that rewrites what its party sends."""

    def __init__(self, ch: Any, fn: Any) -> None:
        self._ch, self._fn = ch, fn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ch, name)

    def send(self, msg: Any, **kw: Any) -> None:
        self._ch.send(self._fn(msg), **kw)


def _run_with(fn: Any, n: int = 4, timeout: float = 5) -> None:
    """client-0 runs an honest ClientRole whose outgoing messages pass through ``fn``."""
    import vflcrypto.protocols.secagg.roles as roles

    xs = [np.ones(4) for _ in range(n)]
    honest = roles.drive

    def patched(role: Any, channels: Any, **kw: Any) -> Any:
        if isinstance(role, roles.ClientRole) and role.name == "client-0":
            channels = {k: _Rewrite(v, fn) for k, v in channels.items()}
        return honest(role, channels, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(roles, "drive", patched)
        secagg.run_local(xs, timeout=timeout)


def test_a_share_for_the_wrong_peer_is_refused() -> None:
    def wrong(msg: Any) -> Any:
        if isinstance(msg, secagg.Shares):
            return secagg.Shares(msg.round, ["client-0", *msg.to[1:]], msg.ciphertexts)
        return msg

    with pytest.raises(ProtocolError, match="expected its present neighbours"):
        _run_with(wrong)


@pytest.mark.parametrize("fault", ["duplicate", "missing"])
def test_a_duplicate_or_missing_share_is_refused(fault: str) -> None:
    def bad(msg: Any) -> Any:
        if isinstance(msg, secagg.Shares):
            if fault == "duplicate":
                return secagg.Shares(msg.round, [msg.to[0], *msg.to[:-1]], msg.ciphertexts)
            return secagg.Shares(msg.round, msg.to[:-1], msg.ciphertexts[:-1])
        return msg

    with pytest.raises(ProtocolError, match="expected its present neighbours"):
        _run_with(bad)


def test_a_tampered_share_is_refused_by_its_receiver() -> None:
    def tamper(msg: Any) -> Any:
        if isinstance(msg, secagg.Shares):
            ct = bytearray(msg.ciphertexts[0])
            ct[20] ^= 1
            return secagg.Shares(msg.round, msg.to, [bytes(ct), *msg.ciphertexts[1:]])
        return msg

    with pytest.raises(ProtocolError, match="do not decrypt"):
        _run_with(tamper)


def test_a_replayed_round_message_is_refused() -> None:
    def replay(msg: Any) -> Any:
        if isinstance(msg, secagg.MaskedInput):
            return secagg.MaskedInput(msg.round + 7, msg.y)
        return msg

    with pytest.raises(ProtocolError, match="replayed or out of order"):
        _run_with(replay)


def test_keys_not_signed_by_the_pinned_identity_are_refused() -> None:
    def forge(msg: Any) -> Any:
        if isinstance(msg, secagg.Advertise):
            return dataclasses.replace(msg, signature=bytes(64))
        return msg

    with pytest.raises(ProtocolError, match="pinned identity"):
        _run_with(forge)


def test_a_setup_that_differs_for_one_client_is_detected() -> None:
    """A server that sends client-0 the clients in another order (other Shamir points) is caught by the digests."""
    import vflcrypto.protocols.secagg.roles as roles

    honest = roles.ServerRole

    class Reordered(honest):  # type: ignore[misc, valid-type]
        def start(self) -> Any:
            nxt = super().start()
            sends = []
            for to, msg in nxt.sends:
                if to == "client-0":
                    names = list(reversed(msg.clients))
                    nb = sm.neighbours(names, None, msg.round)
                    msg = dataclasses.replace(msg, clients=names, neighbours=[nb[c] for c in names])
                sends.append((to, msg))
            return dataclasses.replace(nxt, sends=tuple(sends))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(roles, "ServerRole", Reordered)
        with pytest.raises(ProtocolError, match="inconsistent models"):
            secagg.run_local([np.ones(4) for _ in range(4)], timeout=5)


def test_a_context_digest_changed_in_transit_breaks_the_signature() -> None:
    """The server cannot make the digests agree by rewriting them: they are signed with the clients' identities."""
    import vflcrypto.protocols.secagg.roles as roles

    honest = roles.ServerRole

    class Rewriting(honest):  # type: ignore[misc, valid-type]
        def on_advertise(self, msg: Any) -> Any:
            if msg is not None:
                msg = dataclasses.replace(msg, context=bytes(32))
            return super().on_advertise(msg)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(roles, "ServerRole", Rewriting)
        with pytest.raises(ProtocolError, match="pinned identity"):
            secagg.run_local([np.ones(4) for _ in range(4)], timeout=5)


def test_a_client_checks_the_setup_against_its_own_parameters() -> None:
    """A server that lowers the threshold (to unmask with fewer colluders) is refused by the clients."""
    import vflcrypto.protocols.secagg.roles as roles

    xs = [np.ones(4) for _ in range(5)]
    honest = roles.ServerRole
    lowered = secagg.SecAggConfig(threshold=2, allow_low_threshold=True)

    class Lowering(honest):  # type: ignore[misc, valid-type]
        def __init__(self, **kw: Any) -> None:
            super().__init__(**{**kw, "config": lowered})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(roles, "ServerRole", Lowering)
        with pytest.raises(ProtocolError, match="threshold, encoding or neighbour graph"):
            secagg.run_local(xs, timeout=5)


def test_a_stalled_client_is_dropped_after_the_timeout() -> None:
    release = threading.Event()

    def stall(channels: Any) -> None:
        channels["server"].recv(secagg.Setup, timeout=10)
        release.wait(3)

    rng = np.random.default_rng(5)
    xs = [rng.normal(size=4) for _ in range(5)]
    res = secagg.run_local(xs, overrides={"client-2": stall}, timeout=0.5).rounds[0]
    release.set()
    assert "client-2" not in res.survivors
    np.testing.assert_array_equal(res.raw, _ring_sum([x for i, x in enumerate(xs) if i != 2], secagg.SecAggConfig()))



def test_two_clients_aggregate_and_a_degree_says_why_it_needs_three() -> None:
    """Two clients are each other's only neighbour: the sum is exact; --degree (SecAgg+) is refused in words."""
    from vflcrypto.protocols.secagg.roles import run_local

    xs = [np.arange(5.0), np.full(5, 0.25)]
    res = run_local(xs).rounds[0]
    assert res.survivors == ["client-0", "client-1"] and np.allclose(res.total, xs[0] + xs[1], atol=1e-6)
    with pytest.raises(InputDataError, match="--degree needs at least 3 clients"):
        sm.SecAggConfig(degree=2).check(2)
    with pytest.raises(InputDataError, match="must be even and between 2 and 5 with 6 clients, got 3"):
        sm.SecAggConfig(degree=3).check(6)
