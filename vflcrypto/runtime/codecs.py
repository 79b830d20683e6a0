"""Every wire codec of vflcrypto, defined and registered in one place.

A :class:`~vflcrypto.runtime.wire.Codec` lets a non-dataclass type cross the wire inside a
message field; the tag names the encoding on the wire. The math modules
(:mod:`vflcrypto.he.paillier`, :mod:`vflcrypto.he.ckks`) know nothing of the wire format: this
module sits above them and :mod:`vflcrypto.runtime.wire`, and :mod:`vflcrypto.audit.ledger` imports it,
so any code that declares messages has every codec registered. The codecs:

* ``"int.vec"``: :class:`~vflcrypto.runtime.wire.IntVector`, ``[count, width, block]`` with one
  fixed-width big-endian two's-complement block;
* ``"paillier.pk"``: :class:`~vflcrypto.he.paillier.PaillierPublicKey`, ``n`` as bytes
  (refuses even or undersized moduli unless the context allows insecure keys);
* ``"paillier.vec"``: :class:`~vflcrypto.he.paillier.PaillierVector`,
  ``[fingerprint, frac_bits, packing, slots, terms, size, ciphertexts]``; the key must be
  in the receiver's keyring and every ciphertext is validated against it;
* ``"paillier.cvec"``: :class:`~vflcrypto.he.paillier.CompressedVector`, the same metadata
  plus ``[value_bits, per_ciphertext, count, offset]`` and the folded ciphertexts;
* ``"ou.pk"``: :class:`~vflcrypto.he.ou.OUPublicKey`, ``[n, G, H, plaintext_bits,
  random_bits]`` (refuses parameters below HEU's unless the context allows insecure keys);
* ``"ou.vec"``: :class:`~vflcrypto.he.ou.OUVector`, as ``"paillier.vec"`` under an OU key;
* ``"ckks.ctx"``: a public :class:`~vflcrypto.he.ckks.CKKSContext` (a context holding a
  secret key is refused on both sides);
* ``"ckks.vec"``: :class:`~vflcrypto.he.ckks.CKKSVector`, ``{fp, len, parts}`` checked
  against the context its fingerprint names;
* ``"zarray"``: :class:`~vflcrypto.runtime.zarray.ZArray`, an integer array narrowed and deflated
  (``[dtype, wire dtype, shape, zlib bytes]``; bounded inflation, see :mod:`vflcrypto.runtime.zarray`).
"""

from __future__ import annotations

from typing import Any

from ..errors import DecodeError, EncodingError, KeyMismatchError
from ..he.ckks import CKKSContext, CKKSVector
from ..he.encoding import PackingSpec
from ..he.ou import OUPublicKey, OUVector
from ..he.paillier import (
    CipherVector,
    CompressedVector,
    PaillierPublicKey,
    PaillierVector,
    ciphertext_width,
    ciphertexts_to_bytes,
)
from ..he.paillier.vector import _check_meta
from .wire import Codec, DecodeContext, IntVector, register_codec
from .zarray import ZArray, decode_zarray, encode_zarray

__all__: list[str] = []


# --------------------------------------------------------------------------- big integers


def _encode_intvector(vec: IntVector) -> list[Any]:
    width = max((max(v.bit_length() for v in vec) + 8) // 8, 1) if vec else 1
    return [len(vec), width, b"".join(v.to_bytes(width, "big", signed=True) for v in vec)]


def _decode_intvector(value: Any, ctx: DecodeContext) -> IntVector:
    if not (isinstance(value, list) and len(value) == 3):
        raise DecodeError("malformed integer vector")
    count, width, block = value
    if not (isinstance(count, int) and isinstance(width, int) and isinstance(block, bytes)):
        raise DecodeError("malformed integer vector")
    if count < 0 or width < 1 or count * width != len(block):
        raise DecodeError("integer vector length does not match its header")
    return IntVector(int.from_bytes(block[i * width:(i + 1) * width], "big", signed=True) for i in range(count))


# --------------------------------------------------------------------------- Paillier


def _encode_pk(pk: PaillierPublicKey) -> bytes:
    return pk.to_bytes()


def _decode_pk(value: Any, ctx: DecodeContext) -> PaillierPublicKey:
    if not isinstance(value, bytes):
        raise DecodeError("malformed Paillier public key")
    return PaillierPublicKey.from_bytes(value, allow_insecure=ctx.allow_insecure)


def _meta_list(v: CipherVector | CompressedVector) -> list[Any]:
    return [v.public_key.fingerprint, v.frac_bits,
            None if v.packing is None else list(v.packing.to_tuple()),
            v.slots, v.terms, -1 if v.size is None else v.size]


def _parse_meta(value: Any, ctx: DecodeContext, extra: int,
                key_type: type = PaillierPublicKey) -> tuple[Any, ...]:
    scheme = "OU" if key_type is OUPublicKey else "Paillier"
    if not (isinstance(value, list) and len(value) == 7 + extra):
        raise DecodeError(f"malformed {scheme} vector")
    fp, frac_bits, packing, slots, terms, size = value[:6]
    if not isinstance(fp, str) or not all(isinstance(x, int) and not isinstance(x, bool)
                                          for x in (frac_bits, slots, terms, size)):
        raise DecodeError(f"malformed {scheme} vector metadata")
    pk = ctx.keyring.get(fp)
    if not isinstance(pk, key_type):
        raise KeyMismatchError(f"fingerprint names a key that is not a{'n' if scheme == 'OU' else ''} {scheme} key")
    spec = None
    if packing is not None:
        if not isinstance(packing, list):
            raise DecodeError("malformed packing spec")
        try:
            spec = PackingSpec.from_tuple(packing)
        except EncodingError as exc:
            raise DecodeError(f"invalid packing spec: {exc}") from None
    return pk, frac_bits, spec, slots, terms, None if size == -1 else size


def _encode_paillier_vec(v: PaillierVector) -> list[Any]:
    return [*_meta_list(v), v.to_bytes()]


def _decode_paillier_vec(value: Any, ctx: DecodeContext) -> PaillierVector:
    pk, frac_bits, spec, slots, terms, size = _parse_meta(value, ctx, 0)
    blob = value[6]
    if not isinstance(blob, bytes):
        raise DecodeError("malformed ciphertext block")
    return PaillierVector.from_bytes(pk, blob, frac_bits=frac_bits, packing=spec, slots=slots,
                                     terms=terms, size=size)


def _encode_cvec(v: CompressedVector) -> list[Any]:
    blob = ciphertexts_to_bytes(v._c, ciphertext_width(v.public_key.n))
    return [*_meta_list(v), [v.value_bits, v.per_ciphertext, v.count, v.offset], blob]


def _decode_cvec(value: Any, ctx: DecodeContext) -> CompressedVector:
    pk, frac_bits, spec, slots, terms, size = _parse_meta(value, ctx, 1)
    params, blob = value[6], value[7]
    if not (isinstance(params, list) and len(params) == 4
            and all(isinstance(x, int) and x >= 0 for x in params) and isinstance(blob, bytes)):
        raise DecodeError("malformed compressed vector")
    b, per, count, offset = params
    if b < 1 or per < 1 or per * b > pk.bits - 1 or offset >= (1 << b):
        raise DecodeError("invalid compression parameters")
    vec = PaillierVector.from_bytes(pk, blob)
    if not (len(vec) - 1) * per < count <= len(vec) * per and not (count == 0 == len(vec)):
        raise DecodeError("compressed count inconsistent with its ciphertexts")
    _check_meta(pk, count, frac_bits, spec, slots, terms, size)
    return CompressedVector(pk, vec._c, value_bits=b, per_ciphertext=per, count=count,
                            offset=offset, frac_bits=frac_bits, packing=spec, slots=slots,
                            terms=terms, size=size)


# --------------------------------------------------------------------------- Okamoto-Uchiyama


def _encode_ou_pk(pk: OUPublicKey) -> list[Any]:
    return list(pk.to_tuple())


def _decode_ou_pk(value: Any, ctx: DecodeContext) -> OUPublicKey:
    if not isinstance(value, list):
        raise DecodeError("malformed OU public key")
    return OUPublicKey.from_tuple(value, allow_insecure=ctx.allow_insecure)


def _encode_ou_vec(v: OUVector) -> list[Any]:
    return [*_meta_list(v), v.to_bytes()]


def _decode_ou_vec(value: Any, ctx: DecodeContext) -> OUVector:
    pk, frac_bits, spec, slots, terms, size = _parse_meta(value, ctx, 0, OUPublicKey)
    blob = value[6]
    if not isinstance(blob, bytes):
        raise DecodeError("malformed ciphertext block")
    return OUVector.from_bytes(pk, blob, frac_bits=frac_bits, packing=spec, slots=slots, terms=terms, size=size)


# --------------------------------------------------------------------------- CKKS


def _encode_ctx(ctx: CKKSContext) -> bytes:
    if ctx.has_secret_key:
        raise KeyMismatchError("refusing to serialize a CKKS context holding a secret key; "
                               "send ctx.public()")
    return ctx.to_bytes()


def _decode_ctx(value: Any, dctx: DecodeContext) -> CKKSContext:
    if not isinstance(value, bytes):
        raise DecodeError("CKKS context must be bytes")
    return CKKSContext.from_bytes(value, allow_insecure=dctx.allow_insecure)


def _encode_ckks_vec(vec: CKKSVector) -> dict[str, Any]:
    return {"fp": vec.context.fingerprint, "len": vec._length, "parts": vec.to_parts_bytes()}


def _decode_ckks_vec(value: Any, dctx: DecodeContext) -> CKKSVector:
    if not (isinstance(value, dict) and set(value) == {"fp", "len", "parts"}
            and isinstance(value["fp"], str) and isinstance(value["parts"], list)):
        raise DecodeError("malformed CKKS vector")
    ctx = dctx.keyring.get(value["fp"])
    if not isinstance(ctx, CKKSContext):
        raise KeyMismatchError("the fingerprint names a key that is not a CKKS context")
    return CKKSVector.from_parts_bytes(ctx, value["len"], value["parts"])


# --------------------------------------------------------------------------- registration

register_codec(Codec("int.vec", IntVector, _encode_intvector, _decode_intvector))
register_codec(Codec("paillier.pk", PaillierPublicKey, _encode_pk, _decode_pk))
register_codec(Codec("paillier.vec", PaillierVector, _encode_paillier_vec, _decode_paillier_vec))
register_codec(Codec("paillier.cvec", CompressedVector, _encode_cvec, _decode_cvec))
register_codec(Codec("ou.pk", OUPublicKey, _encode_ou_pk, _decode_ou_pk))
register_codec(Codec("ou.vec", OUVector, _encode_ou_vec, _decode_ou_vec))
register_codec(Codec("ckks.ctx", CKKSContext, _encode_ctx, _decode_ctx))
register_codec(Codec("ckks.vec", CKKSVector, _encode_ckks_vec, _decode_ckks_vec))
register_codec(Codec("zarray", ZArray, encode_zarray, lambda value, ctx: decode_zarray(value)))
