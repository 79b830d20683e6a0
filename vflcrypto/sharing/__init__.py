"""Secret sharing and masking: the pieces of the protocols' multi-party computation.

* :mod:`.masking`: uniform masks (mod n under encryption, or on a real interval),
  two-party additive shares, SecAgg-style pairwise masks;
* :mod:`.shamir`: Shamir secret sharing over GF(2^521 − 1).

Imports: :mod:`vflcrypto.he` (masks added under Paillier encryption), :mod:`vflcrypto.errors`.
Public names: the modules above.
"""

__all__ = ["masking", "shamir"]
