"""Compressed wire arrays (``zarray``): lossless round trips, smaller level requests, and refusal of
decompression bombs and malformed streams with one-line errors."""

from __future__ import annotations

import hashlib
import zlib

import msgpack
import numpy as np
import pytest
from vflcrypto.protocols import secureboost as sb

from vflcrypto.errors import DecodeError
from vflcrypto.runtime import (
    codecs,  # noqa: F401  (registers the codecs)
    zarray,
)
from vflcrypto.runtime.wire import decode_frame, encode_frame
from vflcrypto.runtime.zarray import ZArray, decode_zarray, encode_zarray


def _level(node_of_row: np.ndarray) -> sb.LevelRequest:
    return sb.LevelRequest(3, 2, False, node_of_row, np.arange(2, dtype=np.int32),
                           np.array([[2, 1, 3]], np.int32))


@pytest.mark.parametrize("arr", [
    np.array([-1, 0, 7, 3, -1], np.int32),
    np.arange(70_000, dtype=np.int64) - 5,
    np.array([2**40, -(2**40)], np.int64),
    np.zeros(0, np.int32),
    np.zeros((0, 3), np.int32),
    np.array([[1, 2, 3], [4, 5, 65535]], np.uint32),
    np.array([True, False, True]),
])
def test_round_trip_is_lossless_and_keeps_the_dtype(arr: np.ndarray) -> None:
    back = decode_zarray(encode_zarray(ZArray.of(arr)))
    assert isinstance(back, ZArray) and back.dtype == arr.dtype and back.shape == arr.shape
    assert np.array_equal(back, arr)


def test_level_request_frame_round_trips_and_shrinks() -> None:
    # example data only (not a secret): a depth-3 level's node ids over 30,000 rows
    node_of_row = np.random.default_rng(0).integers(-1, 8, 30_000).astype(np.int32)
    req = _level(node_of_row)
    frame = encode_frame(req, seq=0)
    got = decode_frame(frame).message
    assert isinstance(got.node_of_row, ZArray) and got.node_of_row.dtype == np.int32
    assert np.array_equal(got.node_of_row, node_of_row)
    assert len(frame) < node_of_row.nbytes / 6  # int32 → int8 (4x), then ~3.2 bits a row


def _frame_with(value: list) -> bytes:
    """A level request frame whose node_of_row is the raw zarray value ``value``."""
    frame = encode_frame(_level(np.zeros(4, np.int32)), seq=0)
    body = msgpack.unpackb(frame[21:], raw=False, strict_map_key=True,
                           ext_hook=lambda code, data: msgpack.ExtType(code, data))
    body[3]["node_of_row"] = msgpack.ExtType(1, msgpack.packb(["zarray", value], use_bin_type=True))
    new = msgpack.packb(body, use_bin_type=True)
    return frame[:5] + hashlib.blake2b(new, digest_size=16).digest() + new


BOMB = zlib.compress(b"\x00" * (64 << 20), 9)  # 64 MiB of zeros in ~64 KB


@pytest.mark.parametrize(("value", "match"), [
    (["<i4", "|i1", [10], BOMB], "inflates beyond its declared 10 bytes"),
    (["<i4", "|i1", [1 << 40], BOMB], "declares more than"),
    (["<i4", "|i1", [10], b"not zlib at all"], "malformed compressed array \\(zlib"),
    (["<i4", "|i1", [1000], zlib.compress(bytes(1000))[:-6]], "truncated"),
    (["<i4", "|i1", [4], zlib.compress(bytes(4)) + b"junk"], "trailing bytes"),
    (["<i4", "|i1", [8], zlib.compress(bytes(4))], "inflates to 4 bytes, its shape needs 8"),
    (["<i4", "<f8", [1], zlib.compress(bytes(8))], "dtype not allowed"),
    (["|i1", "<i4", [1], zlib.compress(bytes(4))], "not a lossless narrowing"),
    (["<i4", "|i1", [-1], zlib.compress(b"")], "shape"),
    (["<i4", "|i1", [4]], "malformed compressed array"),
])
def test_bombs_and_malformed_streams_are_refused_in_one_line(value: list, match: str) -> None:
    with pytest.raises(DecodeError, match=match) as err:
        decode_frame(_frame_with(value))
    assert "\n" not in str(err.value)


def test_a_plain_array_where_a_compressed_one_is_declared_is_refused() -> None:
    frame = encode_frame(_level(np.zeros(4, np.int32)), seq=0)
    body = msgpack.unpackb(frame[21:], raw=False, strict_map_key=True,
                           ext_hook=lambda code, data: msgpack.ExtType(code, data))
    body[3]["node_of_row"] = msgpack.ExtType(2, msgpack.packb(["<i4", [1], bytes(4)], use_bin_type=True))
    new = msgpack.packb(body, use_bin_type=True)
    with pytest.raises(DecodeError, match="expected ZArray"):
        decode_frame(frame[:5] + hashlib.blake2b(new, digest_size=16).digest() + new)


def test_floats_are_not_compressed_arrays() -> None:
    with pytest.raises(TypeError):
        ZArray.of(np.zeros(3))


MODEL_ARRAYS = ("kind", "party", "feature", "bin", "left", "right", "value", "gain", "cover", "base_score")


def _train(plaintext: bool, keys=None) -> tuple[sb.LocalRun, int]:
    # example data only: numpy RNG for features and labels
    rng = np.random.default_rng(11)
    Xa, Xp = rng.normal(size=(300, 2)), rng.normal(size=(300, 3))
    y = (Xa[:, 0] + Xp[:, 1] + 0.3 * rng.normal(size=300) > 0).astype(float)
    params = sb.BoostParams(n_trees=2, max_depth=3, max_bin=8)
    run = sb.run_local(Xa, y, [Xp], params=params, plaintext=plaintext, keys=keys, allow_insecure=True,
                       timeout=20.0)
    level = sum(e.nbytes for e in run.transcript.sent() if e.kind == "secureboost.level")
    return run, level


@pytest.mark.parametrize("plaintext", [True, False])
def test_models_are_bit_identical_with_and_without_compression(monkeypatch, small_paillier_keys,
                                                               plaintext: bool) -> None:
    keys = None if plaintext else small_paillier_keys
    packed, packed_bytes = _train(plaintext, keys)
    with monkeypatch.context() as m:  # the encoding before compression: int32 as is, stored not deflated
        m.setattr(zarray, "_narrowest", lambda arr: arr.dtype)
        m.setattr(zarray, "LEVEL", 0)
        plain, plain_bytes = _train(plaintext, keys)
    for name in MODEL_ARRAYS:
        a, b = getattr(packed.active.model, name), getattr(plain.active.model, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    assert packed.active.train_margin.tobytes() == plain.active.train_margin.tobytes()
    assert packed_bytes < plain_bytes / 3
