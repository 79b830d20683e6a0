"""Additive masks, two-party additive shares, and SecAgg-style pairwise masks.

Three kinds of masking, each with the hiding it gives:

* **Uniform mod n** (:func:`uniform_mod`): added to a value under Paillier encryption,
  the masked plaintext is uniform mod n whatever the value: *perfectly* hiding.
* **Statistical masks over the integers** (:func:`statistical_masks`): for a value
  |v| < 2^k, a mask uniform in [0, 2^(k+s)) makes v + r statistically close to r
  (distance <= 2^-s). ``STAT_SECURITY_BITS`` = 40 is the default s; smaller values raise
  :class:`InsecureParameterError` unless ``allow_insecure=True``. The mask length grows
  by s bits over the value, which a Paillier plaintext space (2048 bits) easily holds.
* **Pairwise masks** (Bonawitz et al., "Practical Secure Aggregation for
  Privacy-Preserving Machine Learning", CCS 2017): parties i < j agree a seed s_ij by
  X25519 + HKDF-SHA256 (:func:`agree_seed`), expand it with SHAKE-256
  (:func:`pairwise_masks`), and i adds while j subtracts (:func:`signed_pairwise_mask`),
  so the masks cancel in the sum mod the modulus. Hiding is computational (the PRG and
  X25519) and holds only while no two parties collude against a third's pair seed;
  dropout recovery (secret-shared seeds) is not implemented.

All randomness comes from :mod:`secrets` (the OS CSPRNG). The module-level
``_randbelow`` is a private seam for known-answer tests only. Python integers are not
constant-time and memory is not wiped.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..errors import ConfigurationError, EncodingError, EncodingOverflowError, InsecureParameterError, ProtocolError
from ..he.encoding import decode_fixed, exceeds_bits
from ..he.paillier import PaillierVector

__all__ = [
    "PRG_EXTRA_BITS",
    "SEED_BYTES",
    "STAT_SECURITY_BITS",
    "additive_shares",
    "agree_seed",
    "derive_seed",
    "mask_ciphertexts",
    "mask_fixed",
    "pairwise_mask",
    "pairwise_masks",
    "reconstruct",
    "ring_dtype",
    "ring_mask",
    "seed_context",
    "share",
    "signed_pairwise_mask",
    "statistical_mask",
    "statistical_mask_bits",
    "statistical_masks",
    "uniform_mask_mod",
    "uniform_mod",
    "unmask_fixed",
    "unmask_residues",
]

STAT_SECURITY_BITS = 40
SEED_BYTES = 32
PRG_EXTRA_BITS = 128  # bias of reducing (bits(modulus) + 128)-bit integers mod modulus <= 2^-128
_PRG_DOMAIN = b"vflcrypto.masking.pairwise.v1"
_HKDF_INFO = b"vflcrypto.masking.agree_seed.v1|"

_randbelow = secrets.randbelow  # private seam for known-answer tests; never reassign in code


def _check_modulus(modulus: int) -> None:
    if not isinstance(modulus, int) or modulus < 2:
        raise EncodingError("modulus must be an integer >= 2")


def _check_sec_bits(sec_bits: int, allow_insecure: bool) -> None:
    if sec_bits < 1:
        raise InsecureParameterError("sec_bits must be positive")
    if sec_bits < STAT_SECURITY_BITS and not allow_insecure:
        raise InsecureParameterError(
            f"statistical security of {sec_bits} bits < {STAT_SECURITY_BITS} "
            "(allow_insecure=True for tests)")


# --------------------------------------------------------------------------- uniform


def uniform_mod(modulus: int, size: int) -> list[int]:
    """``size`` integers uniform in [0, modulus): perfectly hiding masks mod ``modulus``."""
    _check_modulus(modulus)
    return [_randbelow(modulus) for _ in range(size)]


def uniform_mask_mod(n: int, size: int) -> list[int]:
    """Alias of :func:`uniform_mod` (name in the API spec)."""
    return uniform_mod(n, size)


# --------------------------------------------------------------------------- statistical


def statistical_mask_bits(value_bits: int, sec_bits: int = STAT_SECURITY_BITS, *,
                          allow_insecure: bool = False) -> int:
    """Bits of a mask that hides integers |v| < 2^value_bits to distance 2^-sec_bits."""
    if value_bits < 0:
        raise EncodingError("value_bits must be >= 0")
    _check_sec_bits(sec_bits, allow_insecure)
    return value_bits + sec_bits


def statistical_masks(size: int, value_bits: int, sec_bits: int = STAT_SECURITY_BITS, *,
                      allow_insecure: bool = False) -> list[int]:
    """``size`` masks uniform in [0, 2^(value_bits + sec_bits)).

    For any integer |v| < 2^value_bits, v + r is within statistical distance
    |v| / 2^(value_bits+sec_bits) < 2^-sec_bits of r itself, so it reveals (almost)
    nothing about v; the masked value needs value_bits + sec_bits + 1 bits of room.
    """
    bound = 1 << statistical_mask_bits(value_bits, sec_bits, allow_insecure=allow_insecure)
    return [_randbelow(bound) for _ in range(size)]


def statistical_mask(shape: int | tuple[int, ...], value_bound_bits: int, frac_bits: int,
                     sec_bits: int = STAT_SECURITY_BITS, *,
                     allow_insecure: bool = False) -> np.ndarray:
    """Masks (numpy object array of Python ints) for fixed-point values.

    A float |x| < 2^value_bound_bits encoded with ``frac_bits`` fractional bits is an
    integer below 2^(value_bound_bits + frac_bits); the masks are uniform in
    [0, 2^(value_bound_bits + frac_bits + sec_bits)).
    """
    shp = (shape,) if isinstance(shape, int) else tuple(shape)
    size = math.prod(shp)
    flat = statistical_masks(size, value_bound_bits + frac_bits, sec_bits,
                             allow_insecure=allow_insecure)
    out = np.empty(size, dtype=object)
    out[:] = flat
    return out.reshape(shp)


def mask_fixed(x: np.ndarray, frac_bits: int, value_bits: int,
               sec_bits: int = STAT_SECURITY_BITS, *,
               allow_insecure: bool = False) -> tuple[list[int], list[int]]:
    """Encode floats |x| < 2^value_bits at ``frac_bits`` and mask them statistically.

    Returns ``(masked, masks)`` as Python ints, masked = round(x * 2^frac_bits) + mask.
    Raises :class:`EncodingError` on NaN/inf and :class:`EncodingOverflowError` when a
    value is out of the declared range (the hiding bound would not hold).
    """
    arr = np.asarray(x, dtype=np.float64).ravel()
    if not np.all(np.isfinite(arr)):
        raise EncodingError("values contain NaN or infinity")
    if exceeds_bits(arr, value_bits):
        raise EncodingOverflowError(f"a value exceeds the declared bound 2^{value_bits}")
    encoded = [round(v * (1 << frac_bits)) for v in arr.tolist()]
    masks = statistical_masks(len(encoded), value_bits + frac_bits, sec_bits,
                              allow_insecure=allow_insecure)
    return [e + m for e, m in zip(encoded, masks, strict=True)], masks


def unmask_fixed(masked: Sequence[int], masks: Sequence[int], frac_bits: int) -> np.ndarray:
    """Inverse of :func:`mask_fixed`: (masked - mask) / 2^frac_bits as float64."""
    if len(masked) != len(masks):
        raise EncodingError("masked values and masks differ in length")
    scale = float(1 << frac_bits)
    return np.array([(int(a) - int(m)) / scale for a, m in zip(masked, masks, strict=True)],
                    dtype=np.float64)


# --------------------------------------------------------------------------- shares


def share(values: Iterable[int], modulus: int) -> tuple[list[int], list[int]]:
    """Two-party additive shares: s0 uniform mod n, s1 = v - s0 mod n (each alone is uniform)."""
    _check_modulus(modulus)
    vals = [int(v) for v in values]
    s0 = uniform_mod(modulus, len(vals))
    s1 = [(v - r) % modulus for v, r in zip(vals, s0, strict=True)]
    return s0, s1


def additive_shares(x: Iterable[int], modulus: int) -> tuple[list[int], list[int]]:
    """Alias of :func:`share` (name in the API spec)."""
    return share(x, modulus)


def reconstruct(s0: Sequence[int], s1: Sequence[int], modulus: int, *,
                signed: bool = True) -> list[int]:
    """s0 + s1 mod n; centred in (-n/2, n/2] when ``signed`` (the default)."""
    _check_modulus(modulus)
    if len(s0) != len(s1):
        raise EncodingError("shares differ in length")
    out = [(int(a) + int(b)) % modulus for a, b in zip(s0, s1, strict=True)]
    if signed:
        half = modulus // 2
        out = [v - modulus if v > half else v for v in out]
    return out


# --------------------------------------------------------------------------- pairwise


def seed_context(name_a: str, name_b: str, run_id: str, purpose: str = "secagg") -> bytes:
    """The HKDF context binding a pair of parties (order-independent), a run and a purpose."""
    lo, hi = sorted((name_a, name_b))
    parts = (purpose, lo, hi, run_id)
    # Length-prefixed so no two different tuples encode the same bytes.
    return b"".join(len(p.encode()).to_bytes(4, "big") + p.encode() for p in parts)


def agree_seed(private_key: X25519PrivateKey, peer_public: X25519PublicKey,
               context: bytes) -> bytes:
    """A 32-byte pair seed: HKDF-SHA256 of the X25519 shared secret, bound to ``context``.

    Both parties get the same seed for the same context (build it with
    :func:`seed_context`); a different context gives an independent seed.
    """
    if not isinstance(context, bytes) or not context:
        raise ProtocolError("agree_seed needs a non-empty context binding names and run id")
    return derive_seed(private_key.exchange(peer_public), context)


def derive_seed(secret: bytes, context: bytes) -> bytes:
    """The 32-byte seed :func:`agree_seed` derives from a shared ``secret``: HKDF-SHA256 bound to ``context``.

    Public so that an audit can try the seeds a broken agreement would give (an all-zero
    shared secret, public material in place of it).
    """
    return HKDF(algorithm=hashes.SHA256(), length=SEED_BYTES, salt=None, info=_HKDF_INFO + context).derive(secret)


def pairwise_masks(seed: bytes, length: int, modulus: int) -> list[int]:
    """``length`` values mod ``modulus`` expanded deterministically from a 32-byte seed.

    SHAKE-256 (domain-separated) yields bits(modulus) + 128 bits per value, reduced mod
    the modulus (statistical distance from uniform <= 2^-128 per value).
    """
    if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
        raise EncodingError(f"seed must be {SEED_BYTES} bytes")
    _check_modulus(modulus)
    width = (modulus.bit_length() + PRG_EXTRA_BITS + 7) // 8
    stream = hashlib.shake_256(_PRG_DOMAIN + seed).digest(width * length)
    return [int.from_bytes(stream[i * width:(i + 1) * width], "big") % modulus
            for i in range(length)]


def _resolve_modulus(modulus_or_bits: int) -> int:
    # Moduli <= 4096 are useless for masking, so small ints unambiguously mean bit widths.
    return 1 << modulus_or_bits if modulus_or_bits <= 4096 else modulus_or_bits


def pairwise_mask(seed: bytes, length: int, modulus_or_bits: int, sign: int) -> list[int]:
    """Spec form: the pair mask times ``sign`` (+1 or -1), mod the modulus.

    ``modulus_or_bits`` <= 4096 is a bit width b (modulus 2^b); larger is the modulus.
    """
    if sign not in (1, -1):
        raise EncodingError("sign must be +1 or -1")
    modulus = _resolve_modulus(modulus_or_bits)
    masks = pairwise_masks(seed, length, modulus)
    return masks if sign == 1 else [(-m) % modulus for m in masks]


def signed_pairwise_mask(my_name: str, peer_name: str, seed: bytes, length: int,
                         modulus: int) -> list[int]:
    """The pair mask as this party applies it: added by the lexicographically smaller
    name, subtracted by the other, so the two cancel in the sum mod ``modulus``."""
    if my_name == peer_name:
        raise ProtocolError("a party has no pairwise mask with itself")
    masks = pairwise_masks(seed, length, modulus)
    return masks if my_name < peer_name else [(-m) % modulus for m in masks]


_RING_DOMAIN = b"vflcrypto.masking.ring64.v1|"


def ring_mask(seed: bytes, length: int, purpose: bytes = b"", bits: int = 64) -> np.ndarray:
    """``length`` uniform values mod 2^bits (uint64, or uint32 for ``bits=32``) from a 32-byte seed: AES-256-CTR.

    The AES key is HKDF-SHA256(seed, ``purpose``), so one seed gives independent streams
    for different purposes; the counter starts at zero (each key encrypts one stream).
    A power-of-two ring needs no reduction, so every value is exactly uniform given a
    uniform keystream. Vectorised: about a gigabyte of mask per second and core.
    """
    if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
        raise EncodingError(f"seed must be {SEED_BYTES} bytes")
    if length < 0 or bits not in (32, 64):
        raise EncodingError("a mask needs a non-negative length and a ring of 32 or 64 bits")
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_RING_DOMAIN + purpose).derive(seed)
    enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    raw = enc.update(bytes(bits // 8 * length)) + enc.finalize()
    return np.frombuffer(raw, dtype="<u8" if bits == 64 else "<u4").astype(ring_dtype(bits))


def ring_dtype(bits: int) -> type[np.unsignedinteger[Any]]:
    """The numpy type of the ring Z_2^bits (arithmetic on it wraps, as the ring does)."""
    return np.uint64 if bits == 64 else np.uint32


# --------------------------------------------------------------------------- masks under encryption


def mask_ciphertexts(vec: PaillierVector) -> tuple[PaillierVector, list[int]]:
    """``[[v + R]]`` with ``R`` uniform mod n, re-randomized; returns the masked vector and ``R``.

    This is how a party lets the key holder decrypt a value it must not see (a gradient):
    the key holder decrypts ``v + R mod n``, which is uniform and independent of ``v``
    (perfect hiding), and hands it back; only the masking party can remove ``R`` with
    :func:`unmask_residues`. ``R`` is added to the raw residue (multiplying by
    ``g^R = 1 + R·n``) because a uniform residue is not a valid *signed* encoding; the
    fixed-point scale of ``vec`` is kept. Unpacked vectors only.
    """
    if vec.packing is not None:
        raise EncodingError("mask a packed vector slot by slot (not supported)")
    if not isinstance(vec, PaillierVector):  # the key holder decrypts and returns: an oracle that breaks OU
        raise ConfigurationError("masked decryption for another party is Paillier-only")
    pk = vec.public_key
    n, nsq = int(pk.n), int(pk.cmod)
    masks = uniform_mod(n, len(vec))
    cts = [int(c) * (1 + m * n) % nsq for c, m in zip(vec.ciphertexts(), masks, strict=True)]
    return PaillierVector.from_ciphertexts(pk, cts, frac_bits=vec.frac_bits).rerandomize(), masks


def unmask_residues(values: Sequence[int], masks: Sequence[int], modulus: int, frac_bits: int) -> np.ndarray:
    """Remove the masks of :func:`mask_ciphertexts` from decrypted values and decode them.

    ``values`` are the key holder's decryptions (any representative mod n); overflow of
    the underlying value is still detected by :func:`~vflcrypto.he.encoding.decode_fixed`.
    """
    if len(values) != len(masks):
        raise ProtocolError(f"{len(values)} masked values returned for {len(masks)} masks")
    n = int(modulus)
    return decode_fixed([(int(v) - int(m)) % n for v, m in zip(values, masks, strict=True)], frac_bits, n)
