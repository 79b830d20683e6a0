"""Okamoto–Uchiyama (OU): a second additively homomorphic scheme, behind Paillier's interfaces.

Scheme (Okamoto, Uchiyama, "A new public-key cryptosystem as secure as factoring",
EUROCRYPT 1998, with the faster decryption of Coron, Naccache, Paillier, "Accelerating
Okamoto–Uchiyama's public-key cryptosystem", Electronics Letters 35(4), 1999, as in
SecretFlow HEU): ``n = p**2 q`` with ``|p| = |q| = |n|/3``; ``p - 1 = t u`` for a prime
``t``; public ``G = g**u mod n`` and ``H = g'**(n u) mod n``. A plaintext ``m`` (signed,
``|m| < 2**plaintext_bits``, 40 bits below ``p/2``) encrypts to ``c = G**m H**r mod n`` with a fresh
``r`` of ``random_bits`` bits, and decrypts as ``m = L(c**t mod p**2) / L(G**t mod p**2)
mod p`` with ``L(x) = (x - 1)/p``. Ciphertexts multiply to add plaintexts, exactly as
Paillier's, so :class:`OUVector` is a :class:`~vflcrypto.he.paillier.CipherVector` (``cmod
= n``) with every homomorphic operation, packing, compression, fixed-width validated
bytes and the process pool. Encryption costs ``|r|/w + |m|/8`` multiplications modulo
``n`` from fixed-base tables (Paillier: ``|n|/2w`` modulo ``n**2``); decryption one
exponentiation by the 256-bit ``t`` modulo ``p**2``; a ciphertext is half Paillier's size.

Security argument and parameters (:class:`OUParams`)
    * **Assumptions.** Semantic security rests on the p-subgroup assumption (deciding
      membership in the subgroup of order ``p``) and, because ``r`` is short, on the
      short-exponent assumption for ``H**r``: the best known way to confirm a guessed
      plaintext ``m`` is a kangaroo search for ``r`` in ``c G**-m = H**r``, about
      ``2**(random_bits/2)`` group operations. ``t`` bounds the order of ``H`` modulo
      ``p**2``, so a rho search there costs ``2**(factor_bits/2)``.
    * **Key size.** Factoring ``p**2 q`` is believed no easier than factoring an RSA
      modulus of the same size by the number field sieve (the original paper), but some
      argue OU needs 500–600 more bits for the same strength (Boneh, Durfee,
      Howgrave-Graham, "Factoring N = p^r q for large r", CRYPTO 1999, is efficient only for
      large r; HEU's own documentation calls the strength contested). The default is
      therefore **3072 bits** (128-bit for an RSA modulus; at least Paillier-2048's level
      under the pessimistic view), with ``random_bits = factor_bits = 256 = 2κ``.
    * **HEU's parameters** (:meth:`OUParams.heu`, explicit): 2048-bit ``n``, 224-bit ``t``
      and 110-bit ``r`` (112 here: whole bytes); at 3072 bits 256 and 128. A 110-bit ``r``
      lets a kangaroo search confirm one guessed plaintext in ~2**55 operations, which is
      why it is not the default. A key another party sends is accepted down to these sizes
      (its owner's choice protects the owner's own data).

The decryption-oracle restriction
    A plaintext at or above ``p`` decrypts to ``m mod p``; whoever learns that residue for a
    ciphertext of a known larger plaintext learns a multiple of ``p`` and factors ``n``
    (``gcd(m - m', n)``). Additions and plaintext multiplications can push any ciphertext
    past ``p``, so a party that can have the key holder decrypt a ciphertext *it formed* and
    *see the result* breaks the key. :class:`OUPrivateKey` refuses every plaintext outside
    ``+-2**plaintext_bits``, 40 bits below ``p/2`` for keys made here (a wrapped residue lands
    inside with probability ~2**-40; HEU's bound sits at ``p/4``, where a wrap passes half
    the time), which blocks the honest path, but the protocols must not open the oracle at
    all: OU is refused (:func:`refuse_decryption_oracle`) wherever the key
    holder returns decryptions of ciphertexts another party formed (linear and logistic
    regression's coordinator, the gradient exchange, Poisson regression, Pearson
    correlation, SSHE logistic regression, WOE). SecureBoost, whose active party decrypts
    histogram sums and returns only split choices, is its intended user.

Limitations: Python big-integer arithmetic is not constant-time and memory holding
secrets is not wiped; the threat model is semi-honest.
"""

from __future__ import annotations

from ...errors import ConfigurationError
from .keys import (
    DEFAULT_KEY_BITS,
    DETECTION_BITS,
    MIN_KEY_BITS,
    MIN_RANDOM_BITS,
    OUParams,
    OUPrivateKey,
    OUPublicKey,
    OUVector,
    generate_keypair,
    security_bits,
)

__all__ = [
    "DEFAULT_KEY_BITS",
    "DETECTION_BITS",
    "MIN_KEY_BITS",
    "MIN_RANDOM_BITS",
    "OUParams",
    "OUPrivateKey",
    "OUPublicKey",
    "OUVector",
    "generate_keypair",
    "refuse_decryption_oracle",
    "security_bits",
]


def refuse_decryption_oracle(key: object, protocol: str, why: str) -> None:
    """Raise :class:`ConfigurationError` if ``key`` is an OU key: ``protocol`` would give a
    decryption oracle (``why`` says whose ciphertexts the key holder decrypts for whom)."""
    if isinstance(key, OUPublicKey | OUPrivateKey) or key in ("ou", "ou-heu", "ou-2048"):
        raise ConfigurationError(
            f"{protocol} cannot run under Okamoto-Uchiyama: {why}, and an OU key holder that returns "
            "decryptions of ciphertexts another party formed reveals p (a plaintext past p decrypts to "
            "m mod p); use Paillier (--scheme paillier)")
