"""The demo's encrypted gradient exchange: correctness, audit, hostile cases, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from vflcrypto.protocols import exchange as gx

from vflcrypto.audit.ledger import audit
from vflcrypto.cli import main
from vflcrypto.errors import InputDataError, PeerTimeoutError
from vflcrypto.runtime.channel import Endpoint, LocalNetwork, run_parties
from vflcrypto.runtime.steps import drive
from vflcrypto.sharing.masking import mask_ciphertexts, unmask_residues


def test_gradient_matches_numpy() -> None:
    d, X = gx.example(200, 6)
    res = gx.run_local(d, X, key_bits=1024, allow_insecure=True)
    np.testing.assert_allclose(res.gradient, X.T @ d, rtol=0, atol=1e-7)


def test_audit_sees_every_message_with_its_protection() -> None:
    d, X = gx.example(50, 3)
    report = audit(gx.run_local(d, X, key_bits=1024, allow_insecure=True).transcript)
    report.check()
    assert report.kinds_received("passive") == {
        "exchange.public_key", "exchange.encrypted_residuals", "exchange.decrypted_masked_gradient"}
    assert report.kinds_received("active") == {"exchange.masked_gradient"}
    (row,) = report.for_party("active")
    assert "perfect hiding" in row.protection


def test_masking_under_encryption_hides_and_restores(paillier_keys) -> None:
    pk, sk = paillier_keys
    x = np.array([1.5, -2.25, 0.0, 1e6])
    masked, masks = mask_ciphertexts(pk.encrypt_fixed(x))
    seen = [v % pk.n for v in sk.decrypt(masked)]
    # what the key holder sees is not the value (and differs between two maskings)
    masked2, _ = mask_ciphertexts(pk.encrypt_fixed(x))
    assert seen != [v % pk.n for v in sk.decrypt(masked2)]
    np.testing.assert_allclose(unmask_residues(seen, masks, pk.n, masked.frac_bits), x)


def test_audit_attacks_what_the_active_party_decrypted() -> None:
    outcome = gx.audit_run(512, allow_insecure=True, runs=4)
    uniform = outcome.finding("masked gradient: uniform over Z_M")
    assert uniform.samples == 4 * 16 and not uniform.flagged
    assert outcome.finding("masked gradient: fresh mask per message").samples == 3 * 16
    assert outcome.finding("masked gradient: correlation with the secret").samples == 4 * 16
    assert outcome.finding("exchange.encrypted_residuals: ciphertexts read without the key").samples == 4 * 200


def test_misaligned_rows_are_a_clear_error() -> None:
    d, X = gx.example(30, 2)
    with pytest.raises(InputDataError, match="not aligned"):
        gx.run_local(d, X[:-1], key_bits=512, allow_insecure=True)


def test_stalled_active_party_times_out() -> None:
    net = LocalNetwork([Endpoint("active", gx.ACTIVE), Endpoint("passive", gx.PASSIVE)], timeout=0.3)
    _, X = gx.example(10, 2)
    with pytest.raises(PeerTimeoutError):
        run_parties({"passive": lambda: drive(gx.PassiveRole(X), net.channels("passive"))}, network=net)


def test_audit_cli_prints_table_and_json(capsys) -> None:
    assert main(["audit", "exchange", "--key-bits", "512", "--allow-insecure", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["protocol"] == "exchange"
    assert {r["kind"] for r in out["parties"]["active"]["received"]} == {"exchange.masked_gradient"}
    assert {f["name"] for f in out["empirical"]} >= {"masked gradient: uniform over Z_M"}
    assert not any(f["flagged"] for f in out["empirical"])
