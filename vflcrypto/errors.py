"""One exception hierarchy for vflcrypto.

Every error raised on purpose by the library derives from :class:`VflError`, so a caller
can catch everything the library means to raise with one clause. The classes are flat
and specific (in the spirit of ``cryptography.exceptions.InvalidTag``). Messages about
secret data stay terse so they cannot serve as oracles; messages about public structure
(frame sizes, message kinds, row counts) say exactly what was wrong.
"""

from __future__ import annotations

__all__ = [
    "AuditError",
    "CiphertextError",
    "ClusterError",
    "ConfigurationError",
    "DecodeError",
    "EncodingError",
    "EncodingOverflowError",
    "InputDataError",
    "InsecureParameterError",
    "KeyMismatchError",
    "ModelFileError",
    "OutputError",
    "PeerDisconnectedError",
    "PeerTimeoutError",
    "ProtocolError",
    "TrainingDivergedError",
    "UndeclaredMessageError",
    "VflError",
]


class VflError(Exception):
    """Base class of every error vflcrypto raises deliberately."""


class InsecureParameterError(VflError, ValueError):
    """A security parameter below the accepted minimum (key size, mask bits, ...).

    Tests opt in to small parameters explicitly (``allow_insecure=True``).
    """


class KeyMismatchError(VflError):
    """An operation mixes values under different keys, or a ciphertext names an unknown key."""


class CiphertextError(VflError, ValueError):
    """A ciphertext is not a valid element of the ciphertext space (range or unit check)."""


class EncodingError(VflError, ValueError):
    """A value cannot be encoded (NaN, infinity, wrong dtype, inconsistent layout)."""


class EncodingOverflowError(EncodingError):
    """A value, or a result of homomorphic arithmetic, exceeds the encodable range.

    Raised instead of ever wrapping around silently.
    """


class DecodeError(VflError, ValueError):
    """A frame or message could not be decoded: truncated, oversized, tampered or malformed."""


class ProtocolError(VflError):
    """The peer broke the protocol: unexpected message kind, order, version, mode or run."""


class UndeclaredMessageError(ProtocolError):
    """A message kind without a leakage declaration was sent or received."""


class PeerTimeoutError(VflError, TimeoutError):
    """A peer did not answer within the deadline (a stalled party never causes a hang)."""


class PeerDisconnectedError(VflError, ConnectionError):
    """A peer closed its channel or failed before the expected message arrived."""


class InputDataError(VflError, ValueError):
    """A party's input data is unusable: duplicate or empty IDs, mismatched rows, NaN, ..."""


class ModelFileError(InputDataError):
    """A model file or model directory is unusable: truncated, corrupted, a text file, another
    protocol's model, or a directory that already holds another run's model (the message names the file)."""


class OutputError(VflError, OSError):
    """An output could not be written (a full disk, a read-only or vanished directory): the message
    names the file, and nothing of the command's outputs was left half-written. An :class:`OSError`
    too, with the ``errno`` of the failed call; ``path`` is the file, ``reason`` the system's words."""

    path: str = ""
    reason: str = ""


class TrainingDivergedError(VflError, ArithmeticError):
    """Training diverged: the loss became non-finite or exploded (the message names the epoch)."""


class AuditError(VflError, ValueError):
    """An empirical audit cannot be computed from what it was given (inconsistent views)."""


class ClusterError(VflError, RuntimeError):
    """A party's own compute cluster (Ray) could not be started or joined (the message gives Ray's reason)."""


class ConfigurationError(VflError, ValueError):
    """An option or parameter has an invalid value (e.g. a negative timeout, zero repeats)."""
