"""KKRT PSI: base OTs, the bit-matrix transpose, the OT-extension correlation, cuckoo hashing,
and the whole protocol against Python's set intersection, ECDH PSI and openmined-psi.

Hostile peers (a tampered or truncated OT message, a wrong code width, a stall) each get a
specific error.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any

import nacl.bindings as sodium
import numpy as np
import pytest
import vflcrypto.protocols.align as al
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ot_psi import check_alignment, tampered_run
from vflcrypto.protocols.align import kkrt as session

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.psi import kkrt, ot
from vflcrypto.runtime.channel import AuditTap

# --------------------------------------------------------------------------- base OTs


def test_base_ot_receiver_gets_exactly_the_chosen_keys() -> None:
    sender = ot.BaseOtSender.create()
    bits = np.frombuffer(os.urandom(64), np.uint8) & 1
    points, keys = ot.BaseOtReceiver.choose(sender.point, bits)
    k0, k1 = sender.keys(points, 64)
    chosen = np.where(bits.reshape(-1, 1) == 1, k1, k0)
    other = np.where(bits.reshape(-1, 1) == 1, k0, k1)
    assert (keys == chosen).all()
    assert not (keys == other).all(axis=1).any()
    assert len({bytes(k) for k in np.concatenate([k0, k1])}) == 128  # every key distinct


@pytest.mark.parametrize("bad", [bytes(32), b"\x01" + bytes(31), b"\xff" * 32])
def test_base_ot_refuses_points_outside_the_prime_order_group(bad: bytes) -> None:
    sender = ot.BaseOtSender.create()
    with pytest.raises(ProtocolError, match="not a valid point"):
        ot.BaseOtReceiver.choose(bad, np.zeros(4, np.uint8))
    with pytest.raises(ProtocolError, match="not a valid point"):
        sender.keys(bad * 4, 4)


def test_base_ot_refuses_a_truncated_batch() -> None:
    sender = ot.BaseOtSender.create()
    points, _ = ot.BaseOtReceiver.choose(sender.point, np.ones(8, np.uint8))
    with pytest.raises(ProtocolError, match="expected 8 points"):
        sender.keys(points[:-1], 8)


def test_base_ot_points_do_not_depend_on_the_choice_bits() -> None:
    """B_j = b_j·G + c_j·A with fresh b_j: both choices give distinct uniform-looking points."""
    sender = ot.BaseOtSender.create()
    zeros, _ = ot.BaseOtReceiver.choose(sender.point, np.zeros(256, np.uint8))
    ones, _ = ot.BaseOtReceiver.choose(sender.point, np.ones(256, np.uint8))
    for batch in (zeros, ones):
        pts = [batch[i : i + 32] for i in range(0, len(batch), 32)]
        assert len(set(pts)) == len(pts) and all(sodium.crypto_core_ed25519_is_valid_point(p) for p in pts)
        bits = np.unpackbits(np.frombuffer(batch, np.uint8).reshape(-1, 32)[:, :31])  # y-coordinate bytes
        assert abs(bits.mean() - 0.5) < 5 * math.sqrt(0.25 / len(bits))


# --------------------------------------------------------------------------- bit matrices


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 40).map(lambda r: 8 * r), cbytes=st.integers(1, 12), seed=st.binary(min_size=8, max_size=8))
def test_transpose_bits_matches_unpacking(rows: int, cbytes: int, seed: bytes) -> None:
    m = np.random.default_rng(int.from_bytes(seed, "little")).integers(0, 256, (rows, cbytes), dtype=np.uint8)
    ref = np.packbits(np.unpackbits(m, axis=1, bitorder="little").T, axis=1, bitorder="little")
    got = ot.transpose_bits(m)
    assert got.shape == (cbytes * 8, rows // 8) and (got == ref).all()
    assert (ot.transpose_bits(got) == m).all()


def test_prg_is_addressable_by_offset() -> None:
    key = os.urandom(16)
    whole = ot.prg(key, 0, 96)
    assert (ot.prg(key, 32, 48) == whole[32:80]).all()
    with pytest.raises(ValueError):
        ot.prg(key, 8, 16)


# --------------------------------------------------------------------------- the OT-extension correlation


def _ot_extension(rows: int, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    sender = ot.BaseOtSender.create()
    choice = np.frombuffer(os.urandom(kkrt.WIDTH), np.uint8) & 1
    points, keys = ot.BaseOtReceiver.choose(sender.point, choice)
    k0, k1 = sender.keys(points, kkrt.WIDTH)
    u, t = kkrt.receiver_matrix(k0, k1, codes, 0)
    q = kkrt.sender_rows(keys, choice, u, 0)
    return u, t, q, np.packbits(choice, bitorder="little")


def test_ot_extension_gives_q_equal_t_xor_code_and_s() -> None:
    rows = 256
    codes = np.frombuffer(os.urandom(rows * 64), np.uint8).reshape(rows, 64)
    _, t, q, s = _ot_extension(rows, codes)
    assert (q == (t ^ (codes & s))).all()


def _agreement_z(u: np.ndarray, codes: np.ndarray) -> float:
    """z-score of how often the sender's bits u equal the receiver's code bits (0.5 if independent)."""
    ub = np.unpackbits(u, axis=1, bitorder="little")
    cb = np.unpackbits(ot.transpose_bits(codes), axis=1, bitorder="little")
    agree = (ub == cb).mean()
    return float(abs(agree - 0.5) / math.sqrt(0.25 / ub.size))


def test_the_senders_view_is_independent_of_the_receivers_codes() -> None:
    """The sender's whole view (u) is balanced and uncorrelated with the codes, even for the
    most structured codes (all zeros, all ones); the same statistic flags an unmasked u."""
    rows = 1024
    for codes in (np.zeros((rows, 64), np.uint8), np.full((rows, 64), 255, np.uint8),
                  np.frombuffer(os.urandom(rows * 64), np.uint8).reshape(rows, 64)):
        u, _, _, _ = _ot_extension(rows, codes)
        bits = np.unpackbits(u)
        assert abs(bits.mean() - 0.5) < 5 * math.sqrt(0.25 / bits.size)
        assert _agreement_z(u, codes) < 5
    structured = np.zeros((rows, 64), np.uint8)
    assert _agreement_z(ot.transpose_bits(structured), structured) > 100  # the test has power


def test_sender_refuses_a_matrix_of_another_width() -> None:
    with pytest.raises(ProtocolError, match="code width 512"):
        kkrt.sender_rows(np.zeros((kkrt.WIDTH, 16), np.uint8), np.zeros(kkrt.WIDTH, np.uint8),
                         np.zeros((256, 16), np.uint8), 0)


# --------------------------------------------------------------------------- cuckoo hashing


def test_cuckoo_table_sizes_follow_the_published_bound() -> None:
    assert 1.50 < kkrt.cuckoo_bins(100_000) / 100_000 < 1.52
    assert 1.53 < kkrt.cuckoo_bins(1_000_000) / 1_000_000 < 1.55
    assert kkrt.cuckoo_bins(1) >= 3 and kkrt.cuckoo_bins(0) == 0
    assert all(kkrt.cuckoo_bins(n) >= n for n in (2, 7, 100, 511, 512, 5000))


@pytest.mark.parametrize("n", [1, 5, 300, 20_000])
def test_cuckoo_places_every_item_in_one_of_its_bins(n: int) -> None:
    h0 = np.frombuffer(os.urandom(16 * n), np.uint8).reshape(n, 16)
    bins = kkrt.cuckoo_bins(n)
    locs = kkrt.locations(h0, os.urandom(16), bins)
    table, which, stashed = kkrt.cuckoo_insert(locs, bins)
    assert len(stashed) == 0
    placed = table[table >= 0]
    assert sorted(placed.tolist()) == list(range(n))  # each item exactly once
    b = np.nonzero(table >= 0)[0]
    assert (locs[table[b], which[table[b]]] == b).all()


def test_cuckoo_overflow_goes_to_the_stash_or_fails_clearly() -> None:
    locs = np.zeros((5, 3), np.int64)  # five items, one bin
    table, which, stashed = kkrt.cuckoo_insert(locs, 1, stash=4)
    assert (table >= 0).sum() == 1 and len(stashed) == 4 and (which[stashed] == kkrt.STASH_TAG).all()
    with pytest.raises(kkrt.CuckooFailure, match="run the alignment again"):
        kkrt.cuckoo_insert(locs, 1, stash=3)


# --------------------------------------------------------------------------- the protocol


def _check(a: list[str], b: list[str], mode: str = "both", **kw: Any) -> al.LocalRun:
    return check_alignment(a, b, "kkrt", mode, **kw)


def test_equals_ecdh_psi_in_the_same_canonical_order_per_party() -> None:
    a = [f"user-{i}" for i in range(3000)]
    b = [f"user-{i}" for i in range(1700, 5200)]
    k = _check(a, b, chunk_size=256)  # several matrix and value chunks
    e = al.run_local(a, b, protocol="ecdh", mode="both")
    for side in (al.ACTIVE, al.PASSIVE):
        assert sorted(k.results[side].rows.tolist()) == sorted(e.results[side].rows.tolist())  # type: ignore[union-attr]


def test_every_id_in_the_stash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kkrt, "cuckoo_bins", lambda n, stat_bits=40: 0)
    a, b = [f"s{i}" for i in range(12)], [f"s{i}" for i in range(6, 20)]
    tap = AuditTap()
    _check(a, b, kkrt_stash=12, tap=tap)
    (setup,) = tap.received(al.PASSIVE, al.OtSetup)
    assert setup.bins == 0 and setup.stash == 12


def test_duplicate_ids_are_refused_as_for_ecdh() -> None:
    with pytest.raises(InputDataError, match="duplicate ID"):
        al.run_local(["a", "b", "a"], ["a"], protocol="kkrt")
    run = al.run_local(["a", "b", "a"], ["a", "1"], protocol="kkrt", duplicates="keep_first")
    assert run.results[al.ACTIVE].rows.tolist() == [0]  # type: ignore[union-attr]


# --------------------------------------------------------------------------- hostile peers


A, B = [f"u{i}" for i in range(300)], [f"u{i}" for i in range(150, 450)]


@pytest.mark.parametrize(("who", "kind", "fn", "match"), [
    (al.ACTIVE, al.OtSetup, lambda m: dataclasses.replace(m, width=256), "code of width 256"),
    (al.ACTIVE, al.OtSetup, lambda m: dataclasses.replace(m, bins=m.bins * 4), "cuckoo bins"),
    (al.ACTIVE, al.OtSetup, lambda m: dataclasses.replace(m, stash=10_000), "stash of 10000"),
    (al.ACTIVE, al.OtSetup, lambda m: dataclasses.replace(m, point=bytes(32)), "not a valid point"),
    (al.PASSIVE, al.OtChoice, lambda m: dataclasses.replace(m, points=m.points[:-32]), "expected 512 points"),
    (al.PASSIVE, al.OtChoice, lambda m: dataclasses.replace(m, points=bytes(32) + m.points[32:]), "valid point"),
    (al.ACTIVE, al.OprfMatrix, lambda m: dataclasses.replace(m, columns=m.columns[:-64]), "OT-extension matrix"),
    (al.ACTIVE, al.OprfMatrix, lambda m: dataclasses.replace(m, chunk=m.chunk + 1), "OT-extension matrix"),
    (al.PASSIVE, al.OprfValues, lambda m: dataclasses.replace(m, values=m.values[:-1]), "OPRF values"),
    (al.ACTIVE, al.CommonValues, lambda m: dataclasses.replace(m, positions=(10**12).to_bytes(8, "little")
                                                               + m.positions[8:]), "not among"),
    (al.ACTIVE, al.CommonValues, lambda m: dataclasses.replace(m, positions=m.positions[:8] * (len(m.positions) // 8)),
     "twice"),
    (al.ACTIVE, al.CommonValues, lambda m: dataclasses.replace(m, total=10**6), "impossible intersection size"),
])
def test_tampered_messages_get_specific_errors(who: str, kind: type, fn: Callable[[Any], Any], match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        tampered_run(who, kind, fn, A, B, "kkrt")


def test_chunk_sizes_stay_under_the_frame_limit() -> None:
    assert session.matrix_rows_per_chunk(1 << 20) * kkrt.WIDTH // 8 <= 4 << 20
    assert session.values_per_chunk(1 << 20) * kkrt.OUTPUT_BYTES <= 4 << 20
    assert session.matrix_rows_per_chunk(1) % kkrt.ROW_ALIGN == 0


def test_progress_counts_every_row_value_and_id() -> None:
    """The CLI's bar total for KKRT (left IDs + 6 × right IDs) is what the steps report."""
    ticks: list[int] = []
    a, b = [f"p{i}" for i in range(700)], [f"p{i}" for i in range(300, 1200)]
    al.run_local(a, b, protocol="kkrt", chunk_size=128, progress=ticks.append)
    assert sum(ticks) == len(a) + 6 * len(b) and len(ticks) > 3


def test_the_hashes_are_plain_blake2b_with_their_personalisation() -> None:
    """H₀ and the OPRF output are BLAKE2b (16 / 12 bytes, domain-separated): pinned against hashlib."""
    import hashlib

    ids = [os.urandom(k) for k in range(1, 60)]
    want = b"".join(hashlib.blake2b(x, digest_size=16, person=b"vflcrypto-kkrt0").digest() for x in ids)
    assert kkrt.item_hashes(ids).tobytes() == want
    rows = np.frombuffer(os.urandom(64 * 40), np.uint8).reshape(40, 64)
    index = np.arange(40) * 1_000_003
    want = b"".join(hashlib.blake2b(rows[i].tobytes() + int(index[i]).to_bytes(4, "little"), digest_size=12,
                                    person=b"vflcrypto-kkrt").digest() for i in range(40))
    assert kkrt.hash_rows(rows, index).tobytes() == want
