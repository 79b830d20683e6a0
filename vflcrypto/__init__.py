"""vflcrypto: privacy-preserving cryptographic protocols for vertical federated learning.

Low-level layer: primitives (Paillier, CKKS, encoding, masking, PSI) and the runtime
(typed wire format, Channel, transcript, leakage declarations). It knows nothing of any
protocol. End-to-end protocols live in the repository's top-level folder ``protocols/``,
installed and imported as :mod:`vflcrypto.protocols`; the command line
(:mod:`vflcrypto.cli`) sits above both.
"""

__version__ = "0.1.0"
