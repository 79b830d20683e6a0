"""Private set intersection building blocks.

* :mod:`.primitives`: ID hygiene (canonical IDs), ECDH (X25519) blinding and digest
  matching, keyed-hash PSI keys; :mod:`.packed`: canonical IDs in one buffer and their byte order;
* :mod:`.ot`: base oblivious transfer and the bit-matrix tools of OT extension;
* :mod:`.kkrt`: the KKRT batched OPRF, cuckoo hashing and its code;
* :mod:`.okvs`, :mod:`.vole`, :mod:`.rr22`: the random-band OKVS, silent VOLE over
  GF(2¹²⁸), and the VOLE PSI's OPRF that composes them;
* :mod:`.mpsi`: the all-party-only intersection with a non-colluding aggregator.

The two- and many-party alignment protocols that compose them are in
:mod:`vflcrypto.protocols.align`. Imports: :mod:`vflcrypto.errors`,
:mod:`vflcrypto.parallel`. Public names: the modules above.
"""

__all__ = ["kkrt", "mpsi", "okvs", "ot", "packed", "primitives", "rr22", "vole"]
