"""Shared fixtures: small Paillier keys (tests opt in to insecure sizes explicitly)."""

from __future__ import annotations

import pytest

from vflcrypto.paillier import PaillierPrivateKey, PaillierPublicKey, generate_keypair


@pytest.fixture(scope="session")
def paillier_keys() -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    """A 1024-bit keypair (insecure size, for tests only)."""
    return generate_keypair(1024, allow_insecure=True)


@pytest.fixture(scope="session")
def small_paillier_keys() -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    """A 512-bit keypair (insecure size, for fast tests only)."""
    return generate_keypair(512, allow_insecure=True)
