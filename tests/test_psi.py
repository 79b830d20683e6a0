"""vflcrypto.psi.primitives: ID hygiene, X25519 commutativity, hostile points, keyed hashing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.psi import primitives as psi

# --------------------------------------------------------------------------- ID hygiene


def test_nfc_nfd_variants_are_one_id() -> None:
    assert psi.canonical_id("e\u0301") == psi.canonical_id("\u00e9") == "é".encode()


def test_int_and_decimal_string_are_one_id_but_leading_zero_is_not() -> None:
    assert psi.canonical_id(1) == psi.canonical_id("1") == b"1"
    assert psi.canonical_id(np.int64(-7)) == b"-7"
    assert psi.canonical_id("01") != psi.canonical_id(1)


@pytest.mark.parametrize("bad", [True, 1.0, None, ("a",)])
def test_other_types_are_refused(bad: object) -> None:
    with pytest.raises(InputDataError, match="ID of type"):
        psi.canonical_id(bad)


def test_no_silent_stripping() -> None:
    assert psi.canonical_id(" a ") == b" a "
    assert psi.canonical_id(" a ", strip=True) == b"a"
    with pytest.raises(InputDataError, match="empty ID"):
        psi.canonical_id("  ", strip=True)


def test_non_utf8_bytes_rejected_with_row_number() -> None:
    with pytest.raises(InputDataError, match=r"row 2: ID is not valid UTF-8"):
        psi.canonicalize_ids([b"ok", "fine", b"\xff\xfe"])


def test_duplicates_error_names_rows_or_keep_first() -> None:
    with pytest.raises(InputDataError, match=r"row 3: duplicate ID \(first seen at row 1\)"):
        psi.canonicalize_ids(["a", "1", "b", 1])
    c = psi.canonicalize_ids(["a", "1", "b", 1, "e\u0301", "\u00e9"], duplicates="keep_first")
    assert c.encoded == (b"a", b"1", b"b", "é".encode())
    assert c.rows.tolist() == [0, 1, 2, 4]
    assert c.n_input == 6


def test_row_label_and_offset_for_csv_lines() -> None:
    with pytest.raises(InputDataError, match=r"line 4: duplicate ID \(first seen at line 2\)"):
        psi.canonicalize_ids(["x", "y", "x"], row_label="line", first_row=2)


def test_empty_input_is_valid() -> None:
    c = psi.canonicalize_ids([])
    assert len(c) == 0 and c.rows.dtype == np.int64


# --------------------------------------------------------------------------- ECDH


def test_blinding_commutes() -> None:
    ka, kb = psi.generate_secret(), psi.generate_secret()
    ids = [b"alice", b"bob", "zoë".encode()]
    via_a = psi.reblind_points(kb, psi.blind_ids(ka, ids))
    via_b = psi.reblind_points(ka, psi.blind_ids(kb, ids))
    assert via_a == via_b
    assert len(via_a) == 3 * psi.DIGEST_BYTES
    other = psi.reblind_points(kb, psi.blind_ids(ka, [b"carol"]))
    assert other not in {via_a[i : i + 12] for i in range(0, 36, 12)}


def test_blinding_is_randomised_per_secret() -> None:
    ids = [b"alice"]
    assert psi.blind_ids(psi.generate_secret(), ids) != psi.blind_ids(psi.generate_secret(), ids)


@pytest.mark.parametrize("u", [0, 1, 2**255 - 20])  # small order (0, 1) and order-2 point p-1
def test_small_order_peer_points_rejected(u: int) -> None:
    with pytest.raises(ProtocolError, match="small-order"):
        psi.reblind_points(psi.generate_secret(), u.to_bytes(32, "little"))


def test_non_canonical_and_truncated_points_rejected() -> None:
    with pytest.raises(ProtocolError, match="non-canonical"):
        psi.reblind_points(psi.generate_secret(), (2**255 - 19).to_bytes(32, "little"))
    with pytest.raises(ProtocolError, match="32-byte"):
        psi.reblind_points(psi.generate_secret(), b"\x09" * 31)


def test_hash_to_small_order_point_retries_with_next_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    real = psi.hash_to_u

    def fake(id_bytes: bytes, counter: int = 0) -> bytes:
        return bytes(32) if counter == 0 else real(id_bytes, counter)  # u = 0: all-zero output

    ka, kb = psi.generate_secret(), psi.generate_secret()
    monkeypatch.setattr(psi, "hash_to_u", fake)
    a = psi.reblind_points(kb, psi.blind_ids(ka, [b"x"]))
    b = psi.reblind_points(ka, psi.blind_ids(kb, [b"x"]))
    assert a == b


def test_blind_stream_matches_serial_and_order() -> None:
    k = psi.generate_secret()
    ids = [str(i).encode() for i in range(10)]
    order = psi.random_permutation(10)
    blocks = list(psi.blind_stream(k, ids, order, chunk_size=4))
    assert [len(b) // 32 for b in blocks] == [4, 4, 2]
    assert b"".join(blocks) == psi.blind_ids(k, [ids[i] for i in order])


def test_random_permutation() -> None:
    p = psi.random_permutation(1000)
    assert sorted(p.tolist()) == list(range(1000))
    assert p.tolist() != list(range(1000))
    assert len(psi.random_permutation(0)) == 0


def test_match_digests_orders_by_the_whole_digest_when_prefixes_tie() -> None:
    """The order is the digests' byte order: by their first 8 bytes, and past them where those tie."""
    head = bytes(8)
    own = np.array([head + b"\x02\x00\x00\x00", b"\x01" * 12, head + b"\x01\x00\x00\x00", b"\x00" * 12],
                   dtype=psi.DIGEST_DTYPE)
    assert psi.match_digests(own, own[::-1].copy()).tolist() == [3, 2, 0, 1]
    distinct = np.array([b"\x09" + bytes(11), b"\x01" + bytes(11), b"\x05" + bytes(11)], dtype=psi.DIGEST_DTYPE)
    assert psi.match_digests(distinct, distinct).tolist() == [1, 2, 0]


def test_match_digests_orders_by_digest() -> None:
    own = psi.digests_to_array(b"".join(bytes([b]) * 12 for b in (5, 1, 9, 3)))
    peer = psi.digests_to_array(b"".join(bytes([b]) * 12 for b in (3, 9, 7)))
    assert psi.match_digests(own, peer).tolist() == [3, 2]
    assert psi.match_digests(own[:0], peer).tolist() == []


def test_match_pairs_unordered_gives_the_same_pairs() -> None:
    """ordered=False (the OT PSIs, which send their pairs' order) finds exactly the ordered pairs."""
    rng = np.random.default_rng(5)
    own = psi.digests_to_array(rng.bytes(12 * 500))
    peer = np.concatenate([own[rng.permutation(500)[:200]], psi.digests_to_array(rng.bytes(12 * 300))])
    i, j = psi.match_pairs(own, peer)
    ui, uj = psi.match_pairs(own, peer, ordered=False)
    pairs = sorted(zip(ui.tolist(), uj.tolist(), strict=True))
    assert len(i) == 200 and pairs == sorted(zip(i.tolist(), j.tolist(), strict=True))
    assert all(own[a] == peer[b] for a, b in pairs)
    # a peer that sends its values in value_order is joined without sorting them: the same pairs
    sent = psi.value_order(peer)
    si, sj = psi.match_pairs(own, peer[sent], own_order=psi.digest_order(own), ordered=False)
    assert sorted(zip(si.tolist(), sent[sj].tolist(), strict=True)) == pairs


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3000), st.integers(1, 64), st.integers(0, 2**32))
def test_prefix_order_sorts_like_argsort(n: int, spread: int, seed: int) -> None:
    """The packed-key sort gives sorted keys whatever their spread: uniform, tied on the high bits that the
    sort reads (mended run by run), or so tied that it falls back to one argsort."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**64, n, dtype=np.uint64) >> np.uint64(64 - spread)
    keys <<= np.uint64(64 - spread)  # only the top `spread` bits vary: ties on the high bits when spread is small
    keys |= rng.integers(0, 4, n, dtype=np.uint64)  # and low bits that the packed sort overwrites
    order = psi.prefix_order(keys)
    assert np.array_equal(np.sort(order), np.arange(n))
    assert np.array_equal(keys[order], np.sort(keys))


def test_digests_with_trailing_zero_bytes_compare_exactly() -> None:
    a = psi.digests_to_array(b"\x01" + bytes(11))
    b = psi.digests_to_array(b"\x01" + bytes(10) + b"\x02")
    assert psi.match_digests(a, b).tolist() == []
    assert psi.match_digests(a, a).tolist() == [0]


def test_collision_bound() -> None:
    assert psi.collision_bound(10**7, 10**7) < 2e-15


# --------------------------------------------------------------------------- keyed hash


def test_authenticated_key_agreement_and_keyed_digests() -> None:
    ida, idb = psi.IdentityKey.generate(), psi.IdentityKey.generate()
    ea, eb = psi.EphemeralKey(), psi.EphemeralKey()
    sig = ida.sign(b"hello-a" + ea.public_bytes)
    psi.verify_identity(ida.public_bytes, sig, b"hello-a" + ea.public_bytes)
    with pytest.raises(ProtocolError, match="pinned identity"):
        psi.verify_identity(idb.public_bytes, sig, b"hello-a" + ea.public_bytes)
    with pytest.raises(ProtocolError, match="pinned identity"):
        psi.verify_identity(ida.public_bytes, sig, b"hello-a" + eb.public_bytes)
    ka = psi.derive_psi_key(ea.exchange(eb.public_bytes), b"transcript")
    kb = psi.derive_psi_key(eb.exchange(ea.public_bytes), b"transcript")
    assert ka == kb
    assert psi.derive_psi_key(ea.exchange(eb.public_bytes), b"other") != ka
    ids = [b"a", b"b"]
    assert psi.keyed_digests(ka, ids) == psi.keyed_digests(kb, ids)
    assert psi.keyed_digests(ka, ids) != psi.keyed_digests(bytes(32), ids)
    assert "secret" in repr(ea) and ida.fingerprint in repr(ida)


def test_ephemeral_exchange_rejects_small_order() -> None:
    with pytest.raises(ProtocolError, match="small order"):
        psi.EphemeralKey().exchange(bytes(32))


def test_lone_surrogate_is_rejected_with_its_row() -> None:
    from vflcrypto.errors import InputDataError
    from vflcrypto.psi.primitives import canonicalize_ids

    with pytest.raises(InputDataError, match="row 1: ID is not valid Unicode"):
        canonicalize_ids(["ok", "bad\udc80"])


def _prefix_be(digests: np.ndarray) -> np.ndarray:
    """The first 8 bytes of each digest as a big-endian integer (their lexicographic order)."""
    raw = np.ascontiguousarray(digests).view(np.uint8).reshape(len(digests), psi.DIGEST_BYTES)
    return np.ascontiguousarray(raw[:, :8]).view(">u8").ravel().astype(np.uint64)


@st.composite
def _prefix_sharing_sets(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """Own and peer digests from one pool in which digests share a few 8-byte prefixes (the fast path's key).

    Every pool digest is common, own-only or peer-only. The first four share one prefix:
    two common digests, one on the own side only and one on the peer side only, so matching
    on the prefix alone finds a false match and ordering by the prefix alone meets a tie
    (the own side lists the two common ones in descending digest order, so a stable sort on
    the prefix keeps them wrong). Each side lists its digests in its own order; the peer
    side may repeat some.
    """
    prefixes = draw(st.lists(st.binary(min_size=8, max_size=8), min_size=1, max_size=3, unique=True))
    suffixes = draw(st.lists(st.binary(min_size=4, max_size=4), min_size=4, max_size=40, unique=True))
    rest = len(suffixes) - 4
    where = draw(st.lists(st.sampled_from(["both", "own", "peer"]), min_size=rest, max_size=rest))
    pick = draw(st.lists(st.integers(0, len(prefixes) - 1), min_size=rest, max_size=rest))
    pool = [prefixes[0] + x for x in suffixes[:4]] + [prefixes[k] + x for k, x in zip(pick, suffixes[4:], strict=True)]
    roles = ["both", "both", "own", "peer", *where]
    own = draw(st.permutations([d for d, r in zip(pool, roles, strict=True) if r != "peer"]))
    i, j = own.index(pool[0]), own.index(pool[1])
    if (i < j) == (pool[0] < pool[1]):  # the tied common pair in descending digest order on the own side
        own[i], own[j] = own[j], own[i]
    peer = draw(st.permutations([d for d, r in zip(pool, roles, strict=True) if r != "own"]))
    peer += draw(st.lists(st.sampled_from(peer), max_size=5))
    return np.array(own, dtype=psi.DIGEST_DTYPE), np.array(peer, dtype=psi.DIGEST_DTYPE)


def _assert_equals_isin(match: Any, own: np.ndarray, peer: np.ndarray) -> None:
    want = np.nonzero(np.isin(own, peer))[0]
    want = want[np.argsort(own[want], kind="stable")]
    assert match(own, peer).tolist() == want.tolist()


def _match_on_the_prefix(own: np.ndarray, peer: np.ndarray) -> np.ndarray:
    """Broken on purpose: matches on the 8-byte prefix alone (orders by the whole digest)."""
    pos = np.nonzero(np.isin(_prefix_be(own), _prefix_be(peer)))[0]
    return pos[np.argsort(own[pos], kind="stable")]


def _order_by_the_prefix(own: np.ndarray, peer: np.ndarray) -> np.ndarray:
    """Broken on purpose: matches whole digests, orders by the prefix alone (ties keep the own order)."""
    pos = np.nonzero(np.isin(own, peer))[0]
    return pos[np.argsort(_prefix_be(own[pos]), kind="stable")]


@settings(max_examples=60, deadline=None)
@given(sets=_prefix_sharing_sets())
def test_match_digests_equals_isin_when_common_digests_share_their_first_8_bytes(
        sets: tuple[np.ndarray, np.ndarray]) -> None:
    """The fast path filters on an 8-byte prefix; digests that share it must still be told apart and ordered."""
    own, peer = sets
    common = own[np.isin(own, peer)]
    assert len(set(_prefix_be(common).tolist())) < len(common)  # the generator's promise: a tie among them
    _assert_equals_isin(psi.match_digests, own, peer)


@pytest.mark.parametrize("broken", [_match_on_the_prefix, _order_by_the_prefix])
def test_the_prefix_sharing_sets_catch_a_comparator_that_uses_only_the_prefix(broken: Any) -> None:
    @settings(max_examples=20, deadline=None, database=None)
    @given(sets=_prefix_sharing_sets())
    def same_as_isin(sets: tuple[np.ndarray, np.ndarray]) -> None:
        _assert_equals_isin(broken, *sets)

    with pytest.raises(AssertionError):
        same_as_isin()


@settings(max_examples=80, deadline=None)
@given(ids=st.lists(st.one_of(st.text(max_size=4), st.sampled_from(["é", "e\u0301", "1", "", " a"])), max_size=12),
       duplicates=st.sampled_from(["error", "keep_first"]))
def test_the_list_fast_path_equals_the_row_by_row_canonicalisation(ids: list[str], duplicates: str) -> None:
    """A list of strings takes a one-pass path; it must agree with the loop (a generator) exactly."""
    def run(values: Any) -> Any:
        try:
            c = psi.canonicalize_ids(values, duplicates=duplicates)
        except InputDataError as exc:
            return str(exc)
        return c.encoded, c.rows.tolist(), c.n_input

    assert run(list(ids)) == run(iter(ids))
