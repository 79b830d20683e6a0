"""The additively homomorphic schemes by name: what a protocol's ``--scheme`` chooses.

* ``paillier``: :mod:`vflcrypto.he.paillier` (``--key-bits``, default 2048);
* ``ou``: Okamoto–Uchiyama (:mod:`vflcrypto.he.ou`) at its conservative parameters, a modulus of
  at least 3072 bits (``--key-bits`` above that is honoured) with 256-bit randomness;
* ``ou-heu``: OU at SecretFlow HEU's parameters (2048 bits, 110-bit randomness), by explicit
  choice only;
* ``ou-2048``: OU with a 2048-bit modulus and 224-bit randomness and decryption factor
  (:meth:`vflcrypto.he.ou.OUParams.standard`: 112-bit strength against every known attack,
  Paillier-2048's level); SecureBoost's default. ``--key-bits`` other than 2048 is refused
  (``ou --key-bits N`` is the larger choice).

A protocol lists the schemes it accepts (:attr:`vflcrypto.spec.ProtocolSpec.schemes`); OU
is refused wherever the key holder returns decryptions of ciphertexts another party formed
(:func:`vflcrypto.he.ou.refuse_decryption_oracle`).
"""

from __future__ import annotations

from typing import TypeAlias

from ..errors import ConfigurationError
from . import ou, paillier

__all__ = ["SCHEMES", "PrivateKey", "PublicKey", "Vector", "describe", "family", "generate_keypair", "scheme_of"]

SCHEMES = ("paillier", "ou", "ou-heu", "ou-2048")

PublicKey: TypeAlias = paillier.PaillierPublicKey | ou.OUPublicKey
PrivateKey: TypeAlias = paillier.PaillierPrivateKey | ou.OUPrivateKey
Vector: TypeAlias = paillier.PaillierVector | ou.OUVector


def generate_keypair(scheme: str = "paillier", key_bits: int = paillier.DEFAULT_KEY_BITS, *,
                     allow_insecure: bool = False) -> tuple[PublicKey, PrivateKey]:
    """A fresh key pair of ``scheme`` (see the module docstring for what ``key_bits`` means per scheme).

    Keys below 2048 bits need ``allow_insecure`` (tests only); for ``ou`` such a key is made
    at exactly ``key_bits``.
    """
    if scheme == "paillier":
        return paillier.generate_keypair(key_bits, allow_insecure=allow_insecure)
    if scheme == "ou":
        small = allow_insecure and key_bits < ou.MIN_KEY_BITS
        return ou.generate_keypair(key_bits if small else max(key_bits, ou.DEFAULT_KEY_BITS),
                                   allow_insecure=allow_insecure)
    if scheme == "ou-2048":
        if allow_insecure and key_bits < ou.MIN_KEY_BITS:  # tests: small keys, the same exponent sizes
            return ou.generate_keypair(ou.OUParams(key_bits, 224, 224, "standard"), allow_insecure=True)
        if key_bits != ou.MIN_KEY_BITS:
            raise ConfigurationError(f"ou-2048 has a 2048-bit modulus, not {key_bits} bits: for a larger "
                                     "one choose --scheme ou --key-bits N")
        return ou.generate_keypair(ou.OUParams.standard(), allow_insecure=allow_insecure)
    if scheme == "ou-heu":
        params = ou.OUParams.heu(key_bits) if key_bits >= ou.MIN_KEY_BITS or not allow_insecure else \
            ou.OUParams(key_bits, 112, 224, "heu")
        return ou.generate_keypair(params, allow_insecure=allow_insecure)
    raise ConfigurationError(f"unknown scheme {scheme!r}: choose one of {', '.join(SCHEMES)}")


def family(scheme: str) -> str:
    """The key type a scheme name makes: ``"ou"`` for ``ou``, ``ou-heu`` and ``ou-2048``, else the name."""
    return "ou" if scheme.startswith("ou") else scheme


def scheme_of(key: PublicKey | PrivateKey) -> str:
    """``"paillier"`` or ``"ou"`` (``ou-heu`` keys are OU keys)."""
    return "ou" if isinstance(key, ou.OUPublicKey | ou.OUPrivateKey) else "paillier"


def describe(pk: PublicKey) -> str:
    """A short name of the key's scheme and size, e.g. ``paillier-2048`` or ``ou-3072``."""
    return f"{scheme_of(pk)}-{pk.bits}"
