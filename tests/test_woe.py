"""Secure WOE/IV binning and selection: equal to a plaintext WOE/IV on the joined table (pandas,
same bins), on generated data and on FATE's default_credit; hostile peers get specific errors."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import tamper_sends
from vflcrypto.protocols import woe
from vflcrypto.protocols.woe.math import ADJUSTMENT, bin_column

from vflcrypto.errors import InputDataError, KeyMismatchError, PeerTimeoutError, ProtocolError
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.runtime.channel import Endpoint, LocalNetwork, run_parties

FATE = Path(__file__).resolve().parents[2] / "shared" / "data" / "fate"


def reference(X: np.ndarray, y: np.ndarray, params: woe.WoeParams) -> list[tuple[np.ndarray, float]]:
    """WOE/IV written independently with pandas on the joined table (same bins)."""
    bins, _ = woe.bin_matrix(X, params)
    out = []
    for f in range(X.shape[1]):
        df = pd.DataFrame({"b": bins[:, f], "y": y})
        g = df.groupby("b")["y"].agg(["sum", "count"]).sort_index()
        ev, ne = g["sum"].astype(float), (g["count"] - g["sum"]).astype(float)
        adj = (ev == 0) | (ne == 0)
        ev, ne = ev + adj * ADJUSTMENT, ne + adj * ADJUSTMENT
        pe, pn = ev / y.sum(), ne / (len(y) - y.sum())
        w = np.log(pe / pn)
        out.append((w.to_numpy(), float(((pe - pn) * w).sum())))
    return out


@pytest.fixture(scope="module")
def keys() -> Any:
    return generate_keypair(512, allow_insecure=True)


@pytest.mark.parametrize("method", ["quantile", "equal_width"])
def test_secure_woe_iv_equals_plaintext_on_the_joined_table(keys: Any, method: str) -> None:
    y, Xa, ca, Xp, cp = woe.example(500)
    params = woe.WoeParams(method=method, max_bin=8, return_results=True)
    run = woe.run_local(y, Xa, [Xp], keys=keys, allow_insecure=True, params=params, active_columns=ca,
                        passive_columns=[cp])
    ref_a, ref_p = reference(Xa, y, params), reference(Xp, y, params)
    own = [f for f in run.active.features if f.party == "active"]
    for f, (w, iv) in zip(own, ref_a, strict=True):
        np.testing.assert_allclose(f.woe, w, rtol=1e-12)
        assert math.isclose(f.iv, iv, rel_tol=1e-12)
    # the passive party's features arrive anonymously: as a multiset they equal the reference
    got = sorted(round(f.iv, 12) for f in run.active.features if f.party == "passive-0")
    assert got == sorted(round(iv, 12) for _, iv in ref_p)
    # returned to the feature owner, WOE and IV map back to its own columns and bins exactly
    pres = run.passive["passive-0"]
    assert pres.woe is not None and pres.iv is not None
    for w_got, iv_got, (w, iv) in zip(pres.woe, pres.iv, ref_p, strict=True):
        np.testing.assert_allclose(w_got, w, rtol=1e-12)
        assert math.isclose(iv_got, iv, rel_tol=1e-12)


def test_without_return_the_feature_party_learns_only_its_selected_columns(keys: Any) -> None:
    """What each feature party received: the setup, the encrypted labels and one result that
    holds only the selection flags of its own features (no WOE, no IV: no label rate of a bin)."""
    from vflcrypto.runtime.channel import AuditTap

    y, Xa, ca, Xp, cp = woe.example(400)
    tap = AuditTap()
    run = woe.run_local(y, Xa, [Xp, Xp[:, :2] * 2.0], keys=keys, allow_insecure=True,
                        params=woe.WoeParams(top_k=3, iv_threshold=0.0), active_columns=ca,
                        passive_columns=[cp, ("a", "b")], tap=tap)
    sel = run.active.selected()
    assert len(sel) == 3 and all(f.iv >= g.iv for f in sel for g in run.active.features if not g.selected)
    for name, pres in run.passive.items():
        assert [type(m).__name__ for m in tap.received(name)] == ["Setup", "EncryptedLabels", "Results"]
        (res,) = tap.received(name, woe.Results, sender=woe.ACTIVE)
        assert res.woe.size == 0 and res.iv.size == 0
        assert res.selected.tolist() == [f.selected for f in run.active.features if f.party == name]
        assert pres.woe is None and pres.iv is None
        assert len(pres.selected) == sum(f.selected for f in run.active.features if f.party == name)
        assert set(pres.selected) <= set(pres.columns)


@pytest.mark.skipif(not (FATE / "default_credit_hetero_guest.csv").exists(), reason="../shared data absent")
def test_default_credit_equals_plaintext(keys: Any) -> None:
    guest = pd.read_csv(FATE / "default_credit_hetero_guest.csv")
    host = pd.read_csv(FATE / "default_credit_hetero_host.csv")
    host = host.rename(columns={c: f"host_{c}" for c in host.columns if c != "id"})
    joined = guest.merge(host, on="id")
    y = joined["y"].to_numpy().astype(np.int64)
    hcols = [c for c in host.columns if c != "id"]
    Xp = joined[hcols].to_numpy(float)
    params = woe.WoeParams(max_bin=10, return_results=True)
    run = woe.run_local(y, None, [Xp], keys=keys, allow_insecure=True, params=params, passive_columns=[hcols])
    pres = run.passive["passive-0"]
    assert pres.iv is not None
    for iv_got, (_, iv) in zip(pres.iv, reference(Xp, y, params), strict=True):
        assert math.isclose(iv_got, iv, rel_tol=1e-12)


# --------------------------------------------------------------------------- binning and selection


def test_merge_small_bins_keeps_order_and_sizes() -> None:
    rng = np.random.default_rng(0)
    for _ in range(30):
        bins = rng.integers(0, 12, rng.integers(1, 80))
        merged = woe.merge_small_bins(bins, 5)
        counts = np.bincount(merged)
        assert (counts >= min(5, len(bins))).all()
        # order kept: a higher original bin never lands in a lower merged bin
        order = np.argsort(bins, kind="stable")
        assert (np.diff(merged[order]) >= 0).all()


def test_equal_width_bins_and_nan_last() -> None:
    b = bin_column(np.array([0.0, 1.0, 2.0, 3.0, np.nan]), 3, "equal_width")
    assert b.tolist() == [0, 0, 1, 2, 2]
    assert bin_column(np.array([5.0, 5.0, np.nan]), 4, "equal_width").tolist() == [0, 0, 1]


def test_woe_iv_adds_half_a_row_to_each_count_of_a_bin_with_an_empty_cell() -> None:
    """Known values: bins 0 and 2 have an empty cell, so both of their counts get 0.5 (events
    0.5, 5, 5.5 and non-events 10.5, 5, 0.5), the shares stay over the true totals 10 and 15."""
    w, iv = woe.woe_iv(np.array([0, 5, 5]), np.array([10, 5, 0]))
    pe, pn = np.array([0.5, 5, 5.5]) / 10, np.array([10.5, 5, 0.5]) / 15
    np.testing.assert_allclose(w, [math.log(0.05 / 0.7), math.log(1.5), math.log(16.5)], rtol=1e-12)
    np.testing.assert_allclose(w, np.log(pe / pn), rtol=1e-12)
    assert iv == pytest.approx(float(np.sum((pe - pn) * np.log(pe / pn))), rel=1e-12)
    assert iv == pytest.approx(0.65 * math.log(14) + math.log(1.5) / 6 + 0.5166666666666667 * math.log(16.5), rel=1e-12)
    with pytest.raises(InputDataError, match="both events and non-events"):
        woe.woe_iv(np.array([0, 0]), np.array([3, 4]))


def test_selection_threshold_then_top_k_over_all_parties() -> None:
    got = woe.select_features({"a": [0.5, 0.01], "p": [0.3, 0.6, 0.1]}, 0.05, 2)
    assert got == {"a": [True, False], "p": [False, True, False]}


# --------------------------------------------------------------------------- hostile input


def _pair(timeout: float = 5.0) -> LocalNetwork:
    return LocalNetwork([Endpoint(woe.ACTIVE, woe.ACTIVE), Endpoint("passive-0", woe.PASSIVE)], timeout=timeout,
                        allow_insecure=True)


def _tampered(keys: Any, kind: type, fn: Callable[[Any], Any], *, who: str = "passive-0",
              params: woe.WoeParams | None = None, expected: woe.WoeParams | None = None) -> None:
    y, Xa, _, Xp, _ = woe.example(200)
    net = _pair()
    chans = net.channels(who)
    tamper_sends(chans, kind, fn)
    run_parties({woe.ACTIVE: lambda: woe.run_active(chans if who == woe.ACTIVE else net.channels(woe.ACTIVE), y, Xa,
                                                    keys=keys, params=params),
                 "passive-0": lambda: woe.run_passive(chans if who == "passive-0" else net.channels("passive-0"), Xp,
                                                      name="passive-0", expected=expected)}, network=net)


def test_counts_that_do_not_add_up_are_refused(keys: Any) -> None:
    def swap(m: woe.EncryptedCounts) -> woe.EncryptedCounts:
        c = m.counts.ciphertexts()
        tampered = keys[0].encrypt([5 << 32]).ciphertexts()  # 5 extra events in the first bin
        return dataclasses.replace(m, counts=type(m.counts).from_ciphertexts(keys[0], tampered + c[1:]))

    with pytest.raises(ProtocolError, match="do not add up to the labels' totals"):
        _tampered(keys, woe.EncryptedCounts, swap)


def test_wrong_bin_layout_is_refused(keys: Any) -> None:
    with pytest.raises(ProtocolError, match="layout does not match"):
        _tampered(keys, woe.EncryptedCounts, lambda m: dataclasses.replace(m, widths=m.widths + 1))


def test_counts_under_a_foreign_key_are_refused(keys: Any) -> None:
    other = generate_keypair(512, allow_insecure=True)[0]
    with pytest.raises(KeyMismatchError, match=r"has not accepted|foreign key"):
        _tampered(keys, woe.EncryptedCounts,
                  lambda m: dataclasses.replace(m, counts=other.encrypt([0] * len(m.counts))))


def test_a_setup_other_than_the_plan_is_refused_by_name(keys: Any) -> None:
    with pytest.raises(ProtocolError, match=r"max_bin 10 .this party expects 4."):
        _tampered(keys, woe.Setup, lambda m: m, expected=woe.WoeParams(max_bin=4))


def test_an_invalid_setup_is_refused(keys: Any) -> None:
    with pytest.raises(ProtocolError, match="invalid WOE setup"):
        _tampered(keys, woe.Setup, lambda m: dataclasses.replace(m, max_bin=1), who=woe.ACTIVE)


def test_misaligned_rows_and_bad_labels(keys: Any) -> None:
    y, Xa, _, Xp, _ = woe.example(100)
    with pytest.raises(InputDataError, match="not aligned"):
        woe.run_local(y, Xa, [Xp[:-1]], keys=keys, allow_insecure=True)
    with pytest.raises(InputDataError, match="binary labels"):
        woe.run_local(y * 2, Xa, [Xp], keys=keys, allow_insecure=True)
    with pytest.raises(InputDataError, match="both events"):
        woe.run_local(np.zeros_like(y), Xa, [Xp], keys=keys, allow_insecure=True)


def test_a_stalled_feature_party_times_out(keys: Any) -> None:
    y, Xa, _, _, _ = woe.example(50)
    net = _pair(timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match=r"woe\.counts"):
        run_parties({woe.ACTIVE: lambda: woe.run_active(net.channels(woe.ACTIVE), y, Xa, keys=keys),
                     "passive-0": lambda: time.sleep(1.0)}, network=net)
    assert time.monotonic() - t0 < 5
