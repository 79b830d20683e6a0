"""SecureBoost's encrypted gradients in parts: the same trees, lazy encryption, and the passive party's checks.

The active party sends each tree's ciphertexts in parts of ``gradient_part_rows`` consecutive
sampled rows and encrypts a part only when the one before has been handed to the links, so
on a slow link encryption overlaps transfer (measured in bench/secureboost_processes.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from vflcrypto.protocols import secureboost as sb
from vflcrypto.protocols.secureboost import audit as sb_audit
from vflcrypto.protocols.secureboost import passive as passive_module
from vflcrypto.protocols.secureboost.parts import add_root_part, gradient_parts, gradients_by_tree

from vflcrypto.errors import ConfigurationError, ProtocolError
from vflcrypto.he.paillier import PaillierPrivateKey
from vflcrypto.runtime.channel import AuditTap

TIMEOUT = 60.0
PARAMS = sb.BoostParams(n_trees=2, max_depth=2, max_bin=8)


def _data(n: int = 130) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(7)  # example data
    Xa, Xp = rng.normal(size=(n, 2)), rng.normal(size=(n, 3))
    y = (Xa[:, 0] + 1.5 * Xp[:, 1] + 0.3 * rng.normal(size=n) > 0).astype(float)
    return Xa, y, [Xp]


def _trees(run: sb.LocalRun) -> list[list[object]]:
    m = run.active.model
    return [np.asarray(a).tolist() for a in (m.feature, m.bin, m.left, m.right, m.value, m.record)]


def test_the_parts_of_a_row_count() -> None:
    assert gradient_parts(10, 0) == [(0, 10)] and gradient_parts(10, 10) == [(0, 10)]
    assert gradient_parts(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert gradient_parts(8, 4) == [(0, 4), (4, 8)]


def test_gradients_in_parts_grow_the_trees_of_one_message(small_paillier_keys) -> None:
    """130 rows in parts of 50: three messages a tree to the passive party, the plaintext mode's trees and margins
    bit for bit (as one message gives), and the audit reads each tree's parts joined."""
    Xa, y, Xps = _data()
    tap = AuditTap()
    parts = sb.run_local(Xa, y, Xps, params=PARAMS, keys=small_paillier_keys, allow_insecure=True, timeout=TIMEOUT,
                         gradient_part_rows=50, tap=tap)
    whole = sb.run_local(Xa, y, Xps, params=PARAMS, keys=small_paillier_keys, allow_insecure=True, timeout=TIMEOUT,
                         gradient_part_rows=0)
    plain = sb.run_local(Xa, y, Xps, params=PARAMS, plaintext=True, timeout=TIMEOUT)
    np.testing.assert_array_equal(parts.active.train_margin, plain.active.train_margin)
    np.testing.assert_array_equal(whole.active.train_margin, plain.active.train_margin)
    assert _trees(parts) == _trees(whole) == _trees(plain)
    got = tap.received("passive-0", sb.EncryptedGradients)
    assert [(m.tree, m.part, m.parts, len(m.gh)) for m in got] == [
        (t, p, 3, size) for t in range(2) for p, size in enumerate((50, 50, 30))]
    assert [m.sample.size for m in got] == [17, 0, 0] * 2  # the sample once a tree, in its first part
    assert [e.kind for e in whole.transcript.sent()].count("secureboost.gradients") == 2
    joined = gradients_by_tree(got)
    assert [(m.tree, len(m.gh)) for m in joined] == [(0, 130), (1, 130)]
    held = zip(joined, tap.held("active", "gradients"), tap.held("active", "packing"), strict=True)
    for m, gq, spec in held:  # every row's g, in row order
        g = small_paillier_keys[1].decrypt_fixed(m.gh)[:, 0]
        np.testing.assert_array_equal(np.round(np.ldexp(g, spec.frac_bits)), gq[:, 0])
    finding = sb_audit._gradient_label_finding(tap, "passive-0", y)  # the audit's attack on the joined parts
    assert finding.measured and not finding.flagged, finding


def test_each_part_is_encrypted_only_when_the_one_before_is_sent(small_paillier_keys,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The active party's sends are a generator: taking the first part has encrypted one part, not all."""
    Xa, y, _ = _data()
    calls: list[int] = []
    real = PaillierPrivateKey.encrypt_packed

    def counting(self, x, spec):  # type: ignore[no-untyped-def]
        calls.append(len(x))
        return real(self, x, spec)

    monkeypatch.setattr(PaillierPrivateKey, "encrypt_packed", counting)
    role = sb.ActiveRole(Xa, y, passives=["passive-0"], params=PARAMS, keys=small_paillier_keys,
                         allow_insecure=True, gradient_part_rows=50)
    seen = []
    for _peer, msg in role.start().sends:
        if isinstance(msg, sb.EncryptedGradients):
            seen.append((msg.part, list(calls)))
    assert seen == [(0, [50]), (1, [50, 50]), (2, [50, 50, 30])]
    with pytest.raises(ConfigurationError, match="gradient_part_rows"):
        sb.ActiveRole(Xa, y, passives=["passive-0"], keys=small_paillier_keys, allow_insecure=True,
                      gradient_part_rows=-1)


def _passive_after_setup(keys, n: int) -> sb.PassiveRole:  # type: ignore[no-untyped-def]
    role = sb.PassiveRole(np.random.default_rng(1).normal(size=(n, 2)))  # example data
    role.on_setup(sb.Setup("m", n, b"", False, keys[0], PARAMS))
    return role


@pytest.mark.parametrize("fault", ["skipped part", "sample again", "too many rows", "too few rows",
                                   "other packing", "new tree early"])
def test_a_passive_party_refuses_malformed_parts(small_paillier_keys, fault: str) -> None:
    n = 40
    pk, sk = small_paillier_keys
    spec = sb.tree.packing_spec(n, sb.tree.choose_frac_bits(2, n), 2)
    other = sb.tree.packing_spec(n, sb.tree.choose_frac_bits(2, n) + 2, 2)
    sample = np.packbits(np.ones(n, bool))
    none = np.zeros(0, np.uint8)

    def part(rows: int, p: int, parts: int, bits: np.ndarray = none, s=spec, tree: int = 0):  # type: ignore[no-untyped-def]
        return sb.EncryptedGradients(tree, bits, sk.encrypt_packed(np.zeros((rows, 2)), s), p, parts)

    role = _passive_after_setup(small_paillier_keys, n)
    assert role.on_gradients(part(20, 0, 3, sample)).wait.kind is sb.EncryptedGradients  # more to come
    bad = {"skipped part": part(10, 2, 3), "sample again": part(10, 1, 3, sample),
           "too many rows": part(25, 1, 3), "too few rows": None, "other packing": part(10, 1, 3, s=other),
           "new tree early": part(40, 0, 1, sample)}[fault]
    with pytest.raises(ProtocolError):
        if fault == "too few rows":
            role.on_gradients(part(10, 1, 3))
            role.on_gradients(part(5, 2, 3))
        else:
            role.on_gradients(bad)
    ok = _passive_after_setup(small_paillier_keys, n)
    for msg in (part(20, 0, 3, sample), part(10, 1, 3), part(10, 2, 3)):
        nxt = ok.on_gradients(msg)
    assert nxt.wait.kind is sb.LevelRequest and len(ok.state.blob) == n * pk.ciphertext_bytes


def test_the_root_histogram_is_summed_part_by_part_to_the_one_shot_sums(small_paillier_keys,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The passive party adds each part into the root's bin sums as it arrives: the same ciphertexts as summing
    every row at once, and the first level's histograms are answered from them without summing again."""
    n = 40
    pk, sk = small_paillier_keys
    spec = sb.tree.packing_spec(n, sb.tree.choose_frac_bits(2, n), 2)
    gh = np.random.default_rng(3).uniform(-1, 1, size=(n, 2)) * [1, 0.25] + [0, 0.25]  # example (g, h)
    whole = sk.encrypt_packed(gh, spec)
    sample = np.packbits(np.ones(n, bool))
    role = _passive_after_setup(small_paillier_keys, n)
    for p, (lo, hi) in enumerate(gradient_parts(n, 15)):
        role.on_gradients(sb.EncryptedGradients(0, sample if p == 0 else np.zeros(0, np.uint8), whole[lo:hi], p, 3))
    bins, _, width = role._bins()
    assert role.state.root == add_root_part(pk, b"", whole.to_bytes(), bins, width)

    def no_second_sum(*_a, **_k):  # type: ignore[no-untyped-def]
        raise AssertionError("the root was summed again")

    monkeypatch.setattr(passive_module, "encrypted_bin_sums", no_second_sum)
    nxt = role.on_level(sb.LevelRequest(0, 0, False, np.zeros(n, np.int32), np.zeros(1, np.int32),
                                        np.zeros((0, 3), np.int32)))
    assert isinstance(nxt.sends[0][1], sb.EncryptedHistograms)
