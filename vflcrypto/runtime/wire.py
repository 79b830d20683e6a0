"""Safe framing and (de)serialization of typed messages. No pickle, nothing executes.

A message is a frozen dataclass registered under a *kind* (see :func:`register_message`;
protocols use :func:`vflcrypto.runtime.declarations.declare`, which also attaches the leakage
declaration). Fields are encoded with msgpack; the field annotations are the schema and
every decoded value is checked against them. Supported field types:

* ``int``, ``float``, ``bool``, ``str``, ``bytes``, ``None`` / ``X | None``;
* ``tuple[X, ...]``, ``tuple[X, Y]``, ``list[X]``, ``dict[str, X]``;
* ``numpy.ndarray`` (numeric and bool dtypes only; never ``object``);
* nested dataclasses (encoded field by field, checked recursively);
* any type with a registered :class:`Codec` (Paillier and CKKS vectors, public keys,
  :class:`IntVector`; all defined in :mod:`vflcrypto.runtime.codecs`, which
  :mod:`vflcrypto.audit.ledger` imports).
  Codecs see a :class:`DecodeContext` whose :class:`KeyRing` names the keys the
  receiver accepts, so a ciphertext is validated against its key *on receipt*.

Frame layout (all integers big-endian)::

    magic  b"VFLW"            4 bytes
    version                    1 byte   (WIRE_VERSION)
    tag                       16 bytes  HMAC-SHA256(mac_key, body)[:16], or BLAKE2b-128(body)
    body                       msgpack  [kind, seq, run_id, {field: value}]

The tag detects corruption always and tampering when the channel has a MAC key (a
network transport adds TLS on top). Frames above ``max_bytes`` are refused before
parsing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import threading
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgpack
import numpy as np

from ..errors import ConfigurationError, DecodeError, KeyMismatchError, ProtocolError, VflError

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "MAGIC",
    "WIRE_VERSION",
    "Codec",
    "DecodeContext",
    "Frame",
    "IntVector",
    "KeyRing",
    "decode_frame",
    "decode_value",
    "encode_frame",
    "encode_value",
    "message_kind",
    "message_type",
    "peek_frame",
    "register_codec",
    "register_message",
]

MAGIC = b"VFLW"
WIRE_VERSION = 1
TAG_BYTES = 16
HEADER_BYTES = len(MAGIC) + 1 + TAG_BYTES
DEFAULT_MAX_FRAME_BYTES = 1 << 30  # 1 GiB; channels usually set a tighter bound

_EXT_CODEC = 1
_EXT_NDARRAY = 2
_ALLOWED_DTYPES = frozenset(
    np.dtype(t).str
    for t in ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float32", "float64")
)

M = TypeVar("M")


# --------------------------------------------------------------------------- key ring


class KeyRing:
    """The public keys (or public contexts) a party accepts ciphertexts under.

    Keys are indexed by their ``fingerprint`` (hex string). Thread-safe: the channels of
    one party share a ring.
    """

    def __init__(self, keys: typing.Iterable[Any] = ()) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, Any] = {}
        for key in keys:
            self.add(key)

    def add(self, key: Any) -> None:
        """Trust ``key`` (an object with a ``fingerprint`` attribute)."""
        with self._lock:
            self._keys[key.fingerprint] = key

    def get(self, fingerprint: str) -> Any:
        """Return the key with ``fingerprint`` or raise :class:`KeyMismatchError`."""
        with self._lock:
            key = self._keys.get(fingerprint)
        if key is None:
            raise KeyMismatchError("ciphertext under a key this party has not accepted")
        return key

    def __contains__(self, fingerprint: object) -> bool:
        with self._lock:
            return fingerprint in self._keys

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)


@dataclass(frozen=True)
class DecodeContext:
    """What a receiver brings to decoding: accepted keys and the parameter policy."""

    keyring: KeyRing = dataclasses.field(default_factory=KeyRing)
    allow_insecure: bool = False


# --------------------------------------------------------------------------- codecs


@dataclass(frozen=True)
class Codec:
    """How a non-builtin type crosses the wire.

    ``encode(obj)`` returns a msgpack-able value (usually ``bytes`` or a dict of builtins);
    ``decode(value, ctx)`` rebuilds and *validates* the object, raising a
    :class:`~vflcrypto.errors.VflError` subclass on anything malformed.
    """

    tag: str
    cls: type
    encode: Callable[[Any], Any]
    decode: Callable[[Any, DecodeContext], Any]


_codecs_by_type: dict[type, Codec] = {}
_codecs_by_tag: dict[str, Codec] = {}
_messages_by_kind: dict[str, type] = {}
_registry_lock = threading.Lock()


def register_codec(codec: Codec) -> None:
    """Register a codec; re-registering the same tag for the same class is a no-op."""
    with _registry_lock:
        existing = _codecs_by_tag.get(codec.tag)
        if existing is not None and existing.cls is not codec.cls:
            raise ConfigurationError(f"codec tag {codec.tag!r} already used by {existing.cls.__name__}")
        _codecs_by_tag[codec.tag] = codec
        _codecs_by_type[codec.cls] = codec


def register_message(cls: type[M], kind: str) -> type[M]:
    """Register the frozen dataclass ``cls`` as the message of ``kind``."""
    # typeshed's DataclassInstance declares only __dataclass_fields__, not __dataclass_params__
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise ConfigurationError(f"{cls.__name__} must be a frozen dataclass to be a message")
    if not kind or any(c.isspace() for c in kind):
        raise ConfigurationError(f"invalid message kind {kind!r}")
    with _registry_lock:
        existing = _messages_by_kind.get(kind)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise ConfigurationError(f"message kind {kind!r} already registered by {existing.__name__}")
        _messages_by_kind[kind] = cls
    cls.__wire_kind__ = kind  # type: ignore[attr-defined]  # tags any class: not declarable on type[M]
    return cls


def message_kind(obj_or_cls: Any) -> str:
    """The registered kind of a message instance or class."""
    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    kind = getattr(cls, "__wire_kind__", None)
    if kind is None:
        raise ProtocolError(f"{cls.__name__} is not a registered message type")
    return kind


def message_type(kind: str) -> type[Any]:
    """The message class registered for ``kind``."""
    with _registry_lock:
        cls = _messages_by_kind.get(kind)
    if cls is None:
        raise ProtocolError(f"unknown message kind {kind!r}")
    return cls


# --------------------------------------------------------------------------- values


def _default(obj: Any) -> Any:
    codec = _codecs_by_type.get(type(obj))
    if codec is not None:
        payload = msgpack.packb([codec.tag, codec.encode(obj)], default=_default, use_bin_type=True, strict_types=True)
        return msgpack.ExtType(_EXT_CODEC, payload)
    if isinstance(obj, np.ndarray):
        if obj.dtype.str not in _ALLOWED_DTYPES:
            raise TypeError(f"numpy dtype {obj.dtype} cannot cross the wire")
        arr = np.ascontiguousarray(obj)
        payload = msgpack.packb([arr.dtype.str, list(arr.shape), arr.tobytes()], use_bin_type=True)
        return msgpack.ExtType(_EXT_NDARRAY, payload)
    if isinstance(obj, np.generic):
        return obj.item()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} cannot cross the wire")


class _Ext:
    """An undecoded extension value; resolved against the annotation in :func:`_coerce`."""

    __slots__ = ("code", "data")

    def __init__(self, code: int, data: bytes) -> None:
        self.code = code
        self.data = data


def _unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            use_list=True,
            ext_hook=lambda code, payload: _Ext(code, payload),
        )
    except VflError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types on bad input
        raise DecodeError(f"malformed msgpack payload ({type(exc).__name__})") from None


def _decode_ext(ext: _Ext, ctx: DecodeContext) -> Any:
    if ext.code == _EXT_NDARRAY:
        parts = _unpack(ext.data)
        if not (isinstance(parts, list) and len(parts) == 3):
            raise DecodeError("malformed array header")
        dtype_str, shape, raw = parts
        if dtype_str not in _ALLOWED_DTYPES or not isinstance(raw, bytes):
            raise DecodeError("array dtype not allowed on the wire")
        if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
            raise DecodeError("malformed array shape")
        dtype = np.dtype(dtype_str)
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if count * dtype.itemsize != len(raw):
            raise DecodeError("array length does not match its shape")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if ext.code == _EXT_CODEC:
        parts = _unpack(ext.data)
        if not (isinstance(parts, list) and len(parts) == 2 and isinstance(parts[0], str)):
            raise DecodeError("malformed codec value")
        codec = _codecs_by_tag.get(parts[0])
        if codec is None:
            raise DecodeError(f"unknown codec {parts[0]!r}")
        return codec.decode(parts[1], ctx)
    raise DecodeError(f"unknown extension code {ext.code}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", repr(tp))


def _coerce(value: Any, tp: Any, ctx: DecodeContext, where: str) -> Any:
    """Check ``value`` (fresh from msgpack) against annotation ``tp`` and rebuild it."""
    if tp is Any:
        raise DecodeError(f"{where}: field type Any is not allowed on the wire")
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, ctx, where)
            except DecodeError as exc:
                errors.append(str(exc))
        raise DecodeError(f"{where}: value matches none of {tp}")
    if tp is type(None):
        if value is not None:
            raise DecodeError(f"{where}: expected None")
        return None
    if isinstance(value, _Ext):
        decoded = _decode_ext(value, ctx)
        expected = origin or tp
        if isinstance(expected, type) and not isinstance(decoded, expected):
            raise DecodeError(f"{where}: expected {_type_name(tp)}, got {type(decoded).__name__}")
        return decoded
    if tp is bool:
        if not isinstance(value, bool):
            raise DecodeError(f"{where}: expected bool")
        return value
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise DecodeError(f"{where}: expected int")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DecodeError(f"{where}: expected float")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise DecodeError(f"{where}: expected str")
        return value
    if tp is bytes:
        if not isinstance(value, bytes):
            raise DecodeError(f"{where}: expected bytes")
        return value
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list):
            raise DecodeError(f"{where}: expected a sequence")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], ctx, f"{where}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise DecodeError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(_coerce(v, a, ctx, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if origin is list:
        (arg,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise DecodeError(f"{where}: expected a list")
        return [_coerce(v, arg, ctx, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise DecodeError(f"{where}: expected a map")
        return {
            _coerce(k, key_tp, ctx, f"{where} key"): _coerce(v, val_tp, ctx, f"{where}[{k!r}]")
            for k, v in value.items()
        }
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, ctx, where)
    if tp is np.ndarray or tp in _codecs_by_type:
        raise DecodeError(f"{where}: expected {_type_name(tp)}")
    raise DecodeError(f"{where}: unsupported field type {_type_name(tp)}")


_hints_cache: dict[type, dict[str, Any]] = {}


def _field_types(cls: type) -> dict[str, Any]:
    hints = _hints_cache.get(cls)
    if hints is None:
        all_hints = typing.get_type_hints(cls)
        hints = {f.name: all_hints[f.name] for f in dataclasses.fields(cls) if f.init}
        _hints_cache[cls] = hints
    return hints


def _build_dataclass(cls: type[M], value: Any, ctx: DecodeContext, where: str) -> M:
    if not isinstance(value, dict):
        raise DecodeError(f"{where}: expected a map of fields")
    hints = _field_types(cls)
    if set(value) != set(hints):
        missing = sorted(set(hints) - set(value))
        extra = sorted(set(value) - set(hints))
        raise DecodeError(f"{where}: fields do not match {cls.__name__} (missing {missing}, extra {extra})")
    kwargs = {name: _coerce(value[name], tp, ctx, f"{where}.{name}") for name, tp in hints.items()}
    try:
        obj = cls(**kwargs)
    except VflError:
        raise
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"{where}: invalid {cls.__name__}: {exc}") from None
    return obj


def encode_value(obj: Any) -> bytes:
    """Encode a message-field value (or a whole dataclass) to msgpack bytes."""
    try:
        return msgpack.packb(obj, default=_default, use_bin_type=True, strict_types=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"value cannot be encoded: {exc}") from None


def decode_value(data: bytes, tp: Any, ctx: DecodeContext | None = None) -> Any:
    """Decode bytes made by :func:`encode_value` and check them against annotation ``tp``."""
    return _coerce(_unpack(data), tp, ctx or DecodeContext(), _type_name(tp))


# --------------------------------------------------------------------------- frames


@dataclass(frozen=True)
class Frame:
    """A decoded frame: the message and the channel metadata that travelled with it."""

    kind: str
    seq: int
    run_id: str
    message: Any


def _tag(body: bytes, mac_key: bytes | None) -> bytes:
    if mac_key is not None:
        return hmac.new(mac_key, body, hashlib.sha256).digest()[:TAG_BYTES]
    return hashlib.blake2b(body, digest_size=TAG_BYTES).digest()


def encode_frame(msg: Any, *, seq: int, run_id: str = "", mac_key: bytes | None = None) -> bytes:
    """Frame a registered message with its sequence number and run id."""
    kind = message_kind(msg)
    fields = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
    body = encode_value([kind, seq, run_id, fields])
    return MAGIC + bytes([WIRE_VERSION]) + _tag(body, mac_key) + body


def _checked_body(data: Any, mac_key: bytes | None, max_bytes: int) -> list[Any]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError("frame must be bytes")
    data = bytes(data)
    if len(data) > max_bytes:
        raise DecodeError(f"frame of {len(data)} bytes exceeds the limit of {max_bytes}")
    if len(data) < HEADER_BYTES + 1:
        raise DecodeError(f"truncated frame ({len(data)} bytes)")
    if data[: len(MAGIC)] != MAGIC:
        raise DecodeError("not a vflcrypto frame (bad magic)")
    version = data[len(MAGIC)]
    if version != WIRE_VERSION:
        raise ProtocolError(f"wire version {version} not supported (this side speaks {WIRE_VERSION})")
    tag = data[len(MAGIC) + 1 : HEADER_BYTES]
    body = data[HEADER_BYTES:]
    if not hmac.compare_digest(tag, _tag(body, mac_key)):
        raise DecodeError("frame integrity check failed (truncated or tampered)")
    parts = _unpack(body)
    if not (isinstance(parts, list) and len(parts) == 4):
        raise DecodeError("malformed frame body")
    kind, seq, run_id, _fields = parts
    if not isinstance(kind, str) or not isinstance(seq, int) or not isinstance(run_id, str):
        raise DecodeError("malformed frame header")
    return parts


def peek_frame(data: bytes, *, mac_key: bytes | None = None,
               max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> tuple[str, str]:
    """(kind, run id) of a frame, integrity checked, fields left undecoded (for relays)."""
    kind, _seq, run_id, _fields = _checked_body(data, mac_key, max_bytes)
    message_type(kind)  # a kind nobody registered is refused here too
    return kind, run_id


def decode_frame(
    data: bytes,
    *,
    ctx: DecodeContext | None = None,
    mac_key: bytes | None = None,
    max_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> Frame:
    """Check and decode one frame; raise :class:`DecodeError` or :class:`ProtocolError`."""
    kind, seq, run_id, fields = _checked_body(data, mac_key, max_bytes)
    cls = message_type(kind)
    message = _build_dataclass(cls, fields, ctx or DecodeContext(), kind)
    return Frame(kind=kind, seq=seq, run_id=run_id, message=message)


# --------------------------------------------------------------------------- big integers


class IntVector(tuple[int, ...]):
    """An immutable vector of arbitrary-size integers that can cross the wire.

    msgpack integers stop at 64 bits; decrypted masked values, masks and shares are
    ~2048-bit numbers. They travel as one fixed-width big-endian two's-complement block
    (width = the widest value), so every element costs the same number of bytes.
    """

    __slots__ = ()

    def __new__(cls, values: typing.Iterable[int] = ()) -> IntVector:
        return super().__new__(cls, (int(v) for v in values))

