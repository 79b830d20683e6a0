"""vflcrypto: privacy-preserving cryptographic protocols for vertical federated learning.

The package in layers; a module imports only from its own layer or the layers below it
(``tests/test_layers.py`` enforces the subpackage directions)::

    entry points   cli/ (and cli/gradbench), estimators, __main__; the Flower App (flower/)
    protocols      vflcrypto.protocols.NAME (the repository's protocols/ folder)
    contract       spec: the one protocol shape the entry points read
    analysis       audit/: ledger, attacks, HTML report
    runtime        runtime/: wire, declarations, channels, transcript, steps, gRPC transport
    data, sharing  data/: tables, output files, datasets; sharing/: masks, Shamir
    primitives     he/: Paillier, OU, CKKS, encoding;  psi/: ECDH, OT, KKRT;  ml/: local models;
                   privacy/: DP mechanisms and the dp-accounting wrappers
    foundation     errors; pinned_pool; parallel (the process pool and the Ray backend, above both)

Nothing below ``protocols`` knows any protocol.
"""

__version__ = "0.1.0"
