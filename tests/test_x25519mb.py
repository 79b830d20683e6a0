"""Batched X25519 (:mod:`vflcrypto.psi.x25519mb`) computes exactly what one ``cryptography`` call per ID does.

ECDH-PSI's blinding and re-blinding give the same bytes with and without the batch; small-order and
non-canonical points are refused the same way; an all-zero output is redone with the retry counter;
ECDH-PSI over the batch equals a plain set intersection.
"""

from __future__ import annotations

import os

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from vflcrypto.protocols.align import run_local

from vflcrypto.errors import ProtocolError
from vflcrypto.psi import primitives as psi
from vflcrypto.psi import x25519mb

pytestmark = pytest.mark.skipif(not x25519mb.available(), reason="ipp-crypto's crypto_mb or AVX-512 IFMA missing")


def test_batched_scalarmult_equals_one_call_per_point() -> None:
    k = os.urandom(32)
    pts = [os.urandom(32) for _ in range(21)]  # a short last batch; top bits set at random (RFC 7748 ignores it)
    key = X25519PrivateKey.from_private_bytes(k)
    want = b"".join(key.exchange(X25519PublicKey.from_public_bytes(p)) for p in pts)
    assert x25519mb.scalarmult(k, b"".join(pts)) == want
    assert x25519mb.scalarmult(k, b"") == b""


def test_blinding_and_reblinding_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [f"id{i}".encode() for i in range(37)]
    k, other = os.urandom(32), os.urandom(32)
    batched = psi.blind_ids(k, ids), psi.reblind_points(k, psi.blind_ids(other, ids))
    monkeypatch.setattr(x25519mb, "available", lambda: False)
    assert (psi.blind_ids(k, ids), psi.reblind_points(k, psi.blind_ids(other, ids))) == batched


def test_small_order_and_noncanonical_points_are_refused() -> None:
    k = os.urandom(32)
    good = psi.blind_ids(os.urandom(32), [b"a", b"b"])
    with pytest.raises(ProtocolError, match="small-order"):
        psi.reblind_points(k, good + bytes(32))  # u = 0
    p = (2**255 - 19).to_bytes(32, "little")
    with pytest.raises(ProtocolError, match="non-canonical"):
        psi.reblind_points(k, good + p)
    with pytest.raises(ProtocolError, match="non-canonical"):
        psi.reblind_points(k, good[:31] + bytes([good[31] | 0x80]) + good[32:])


def test_an_all_zero_output_is_redone_with_the_retry_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [f"id{i}".encode() for i in range(10)]
    k = os.urandom(32)
    want = psi.blind_ids(k, ids)
    real = x25519mb.scalarmult

    def zero_third(s: bytes, pts: bytes) -> bytes:
        out = bytearray(real(s, pts))
        out[64:96] = bytes(32)
        return bytes(out)

    monkeypatch.setattr(x25519mb, "scalarmult", zero_third)
    assert psi.blind_ids(k, ids) == want  # row 2 recomputed one by one (a real zero would take the next counter)


def test_ecdh_psi_over_the_batch_equals_a_set_intersection() -> None:
    a = [f"u{i}" for i in range(0, 3000, 2)]
    b = [f"u{i}" for i in range(0, 3000, 3)]
    run = run_local(a, b, protocol="ecdh")
    got = sorted(a[i] for i in run.results["active"].rows)
    assert got == sorted(set(a) & set(b))
    assert sorted(b[i] for i in run.results["passive"].rows) == got


def test_minus_one_is_small_order_in_both_paths() -> None:
    """u = p − 1: the library's Edwards form gives a non-zero output; ECDH-PSI refuses the point all the same."""
    minus_one = (2**255 - 20).to_bytes(32, "little")
    with pytest.raises(ProtocolError, match="small-order"):
        psi.reblind_points(os.urandom(32), psi.blind_ids(os.urandom(32), [b"a"]) + minus_one)


def test_unbalanced_psi_oprf_is_unchanged_by_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OPRF of unbalanced PSI (offline evaluation, blinding, the large party's key, unblinding on the curve
    and on the twist) gives the same values batched and one call per point, and the blind path equals F_a."""
    from vflcrypto.psi import oprf

    ids = [f"user-{i}".encode() for i in range(45)]  # about half the hashes land on the twist
    a, blinder = os.urandom(32), oprf.Blinder()
    points, flags = blinder.blind(ids)
    assert 0 < sum(flags) < len(ids)
    batched = (oprf.evaluate_ids(a, ids).tobytes(), points, oprf.apply_key(a, points))
    online = blinder.unblind(batched[2], flags).tobytes()
    assert online == batched[0]
    monkeypatch.setattr(x25519mb, "available", lambda: False)
    assert (oprf.evaluate_ids(a, ids).tobytes(), *blinder.blind(ids)[:1], oprf.apply_key(a, points)) == batched
    assert blinder.unblind(batched[2], flags).tobytes() == online


def test_unbalanced_psi_refuses_bad_points_on_the_batched_path() -> None:
    from vflcrypto.psi import oprf

    good = oprf.Blinder().blind([b"a", b"b"])[0]
    minus_one = (2**255 - 20).to_bytes(32, "little")
    for bad, what in ((bytes(32), "small-order"), (minus_one, "small-order"),
                      ((2**255 - 19).to_bytes(32, "little"), "non-canonical")):
        with pytest.raises(ProtocolError, match=what):
            oprf.apply_key(os.urandom(32), good + bad)
