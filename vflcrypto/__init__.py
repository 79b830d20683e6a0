"""vflcrypto: privacy-preserving cryptographic protocols for vertical federated learning.

Low-level layer: primitives (Paillier, CKKS, encoding, masking, PSI) and the runtime
(typed wire format, Channel, transcript, leakage declarations). It knows nothing of any
protocol; end-to-end protocols live in the top-level package :mod:`protocols`.
"""

__version__ = "0.1.0"
