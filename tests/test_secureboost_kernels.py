"""The histogram kernel leaves out each feature's largest bin and recovers it from the node's total.

What the passive party sends must not change: the recovered sums are the same ciphertexts, byte
for byte, as multiplying every row in, under both schemes, for one node or several, in one
process or split over the workers; and they decrypt to the plain per-bin sums.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import use_native
from vflcrypto.protocols.secureboost import kernels
from vflcrypto.protocols.secureboost.kernels import encrypted_bin_sums, plan_skip

from vflcrypto import parallel
from vflcrypto.errors import ProtocolError
from vflcrypto.he import native, ou


@pytest.fixture(scope="module")
def ou_keys() -> tuple[Any, Any]:
    return ou.generate_keypair(1024, allow_insecure=True)


def _layout(rows: int, nodes: int, width: int, dominant: list[float], seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """SecureBoost's layout: group = node * F * width + feature * width + bin; feature f puts ``dominant[f]`` of
    its rows in one bin (example data)."""
    rng = np.random.default_rng(seed)
    F = len(dominant)
    node = np.sort(rng.integers(0, nodes, rows))
    bins = np.stack([np.where(rng.random(rows) < d, int(rng.integers(0, width)), rng.integers(0, width, rows))
                     for d in dominant], axis=1)
    keys = node[:, None] * (F * width) + np.arange(F)[None, :] * width + bins
    return keys.astype(np.int64), node, nodes * F * width


def _values(rows: int) -> np.ndarray:
    return np.random.default_rng(11).integers(-1000, 1000, rows)  # example plaintexts


@pytest.mark.parametrize("scheme", ["paillier", "ou"])
@pytest.mark.parametrize("nodes", [1, 3])
def test_left_out_bins_are_recovered_to_the_same_ciphertexts(scheme: str, nodes: int, small_paillier_keys,
                                                             ou_keys) -> None:
    pk, sk = small_paillier_keys if scheme == "paillier" else ou_keys
    keys, node, groups = _layout(600, nodes, 8, [0.1, 0.6, 0.5, 0.9], seed=nodes)
    x = _values(len(keys))
    enc = sk.encrypt(x)
    blob = enc.to_bytes()
    plan = plan_skip(keys, groups, node)
    assert plan.skipped and plan.multiplications < 0.7 * keys.size  # three of four features skip their largest bin
    skipped = encrypted_bin_sums(pk, blob, keys, groups, node)
    full = encrypted_bin_sums(pk, blob, keys, groups, node, skip=False)
    assert [int(c) for c in skipped] == [int(c) for c in full]
    plain = np.bincount(keys.ravel(), weights=np.repeat(x, keys.shape[1]).astype(float), minlength=groups)
    assert sk.decrypt(type(enc).from_ciphertexts(pk, skipped)) == plain.astype(np.int64).tolist()


def test_the_recovery_is_what_makes_them_equal(small_paillier_keys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation: without the recovery the left-out bins stay empty, and the sums differ."""
    pk, sk = small_paillier_keys
    keys, _, groups = _layout(300, 1, 8, [0.2, 0.8], seed=5)
    blob = sk.encrypt(_values(300)).to_bytes()
    full = encrypted_bin_sums(pk, blob, keys, groups, skip=False)
    monkeypatch.setattr(kernels, "fill_skipped", lambda sums, plan, mod: sums)
    assert [int(c) for c in encrypted_bin_sums(pk, blob, keys, groups)] != [int(c) for c in full]


@pytest.mark.parametrize("kernel", ["python", "native"])
def test_split_over_workers_the_sums_are_the_same(kernel: str, small_paillier_keys,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Three chunks: of the process pool (the Python kernel) or of this process's threads (the C kernel)."""
    pk, sk = small_paillier_keys
    keys, node, groups = _layout(400, 2, 6, [0.3, 0.7, 0.7], seed=9)
    blob = sk.encrypt(_values(400)).to_bytes()
    use_native(monkeypatch, kernel == "native")
    full = encrypted_bin_sums(pk, blob, keys, groups, node, skip=False)
    chunks: list[int] = []
    real_map, real_products = parallel.parallel_map, native.group_products

    def in_three(fn: Any, parts: Any, **kw: Any) -> Any:
        chunks.append(len(parts))
        return real_map(fn, parts, **kw)

    def counted(*args: Any) -> Any:
        out = real_products(*args)
        if out is not None:  # the kernel in use
            chunks.append(1)
        return out

    monkeypatch.setattr(parallel, "worker_count", lambda secret=False: 3)
    monkeypatch.setattr(parallel, "parallel_map", in_three)
    monkeypatch.setattr(native, "group_products", counted)
    monkeypatch.setattr(native, "_THREAD_MIN_ROWS", 100)
    assert [int(c) for c in encrypted_bin_sums(pk, blob, keys, groups, node)] == [int(c) for c in full]
    assert chunks == ([3] if kernel == "python" else [1, 1, 1, 1])  # native: three shares and their merge


def test_nothing_is_left_out_where_it_would_not_pay_or_the_layout_has_no_total() -> None:
    uniform = np.stack([np.arange(80) % 8, 8 + np.arange(80) % 8], axis=1).astype(np.int64)
    assert not plan_skip(uniform, 16).skipped  # 10 rows a bin: recovering one costs 7 + 4 multiplications
    assert plan_skip(np.concatenate([uniform, uniform]), 16).skipped  # 20 rows a bin: it pays
    shared = np.stack([np.zeros(50, np.int64), np.zeros(50, np.int64)], axis=1)  # one group in two columns
    assert not plan_skip(shared, 1).skipped and plan_skip(shared, 1).keys is shared
    assert not plan_skip(np.zeros((50, 1), np.int64), 1).skipped  # one feature: it is its own total


def test_a_ciphertext_without_an_inverse_is_refused_in_one_line(small_paillier_keys) -> None:
    pk, sk = small_paillier_keys
    keys, _, groups = _layout(100, 1, 4, [0.1, 0.9], seed=2)
    cts = [int(c) for c in sk.encrypt(_values(100)).ciphertexts()]
    w = pk.ciphertext_bytes
    plan = plan_skip(keys, groups)
    other = next(iter(plan.skipped[0][2]))
    row = int(np.flatnonzero(keys[:, 1] == other)[0])
    cts[row] = 0  # not a unit: a tampered message
    blob = b"".join(c.to_bytes(w, "big") for c in cts)
    with pytest.raises(ProtocolError, match="not invertible"):
        encrypted_bin_sums(pk, blob, keys, groups)
