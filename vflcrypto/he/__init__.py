"""Homomorphic encryption: the schemes and what they share.

* :mod:`.paillier`: Paillier with DJN obfuscation, CRT decryption, packed and compressed
  vectors (:class:`~vflcrypto.he.paillier.PaillierVector`), the scheme-generic
  :class:`~vflcrypto.he.paillier.CipherVector`;
* :mod:`.ou`: Okamoto–Uchiyama behind Paillier's interfaces;
* :mod:`.ckks`: CKKS through TenSEAL (approximate arithmetic on real vectors);
* :mod:`.flooding`: noise flooding of CKKS decryptions that leave their key holder (IND-CPA^D)
  and the error model that sizes it;
* :mod:`.encoding`: fixed-point encoding and packing of many values per plaintext;
* :mod:`.obfuscators`: precomputed encryptions of zero, filled in idle time;
* :mod:`.schemes`: the additively homomorphic schemes by name (what ``--scheme`` chooses).

Imports: :mod:`vflcrypto.errors` and :mod:`vflcrypto.parallel` only (the bottom layer).
Public names: the modules above; import them by name (nothing is loaded eagerly, so a
protocol that never touches CKKS never imports TenSEAL).
"""

__all__ = ["ckks", "encoding", "flooding", "obfuscators", "ou", "paillier", "schemes"]
