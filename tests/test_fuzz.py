"""Fuzzing the entry points that read untrusted bytes: every message decoder and the CSV readers.

Whatever arrives, a decoder either returns a valid message or raises one of the library's
own errors (:class:`~vflcrypto.errors.VflError`): never a ``TypeError``, an
``OverflowError``, a numpy error or a hang. Frames carry a valid integrity tag here, so
the fuzzed bytes reach the parser and the schema checks behind it (a wrong tag is
refused earlier, tested elsewhere). Bounded for CI; ``VFLCRYPTO_FUZZ_EXAMPLES`` runs more.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vflcrypto.cli.audit import load_all_protocols
from vflcrypto.data.tables import read_csv_strings, read_party_csv
from vflcrypto.errors import VflError
from vflcrypto.runtime import wire
from vflcrypto.runtime.declarations import declarations

EXAMPLES = int(os.environ.get("VFLCRYPTO_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                derandomize=True)

load_all_protocols()
KINDS = sorted(d.kind for d in declarations())

_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
            | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20) | st.binary(max_size=64))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=5)
                       | st.dictionaries(st.text(max_size=8), inner, max_size=5), max_leaves=25)


def _frame(body: bytes) -> bytes:
    return wire.MAGIC + bytes([wire.WIRE_VERSION]) + wire._tag(body, None) + body


def _decode(data: bytes, ctx: wire.DecodeContext | None = None) -> None:
    try:
        wire.decode_frame(data, ctx=ctx)
    except VflError:
        pass


@FUZZ
@given(kind=st.sampled_from(KINDS), fields=st.dictionaries(st.text(max_size=12), _values, max_size=6),
       seq=st.integers(min_value=-5, max_value=2**40), run_id=st.text(max_size=10))
def test_arbitrary_fields_of_every_kind_raise_only_library_errors(kind: str, fields: dict[str, Any], seq: int,
                                                                  run_id: str) -> None:
    _decode(_frame(msgpack.packb([kind, seq, run_id, fields], use_bin_type=True)))


@FUZZ
@given(kind=st.sampled_from(KINDS), data=st.data())
def test_right_field_names_with_wrong_values_raise_only_library_errors(kind: str, data: st.DataObject) -> None:
    import dataclasses

    cls = wire.message_type(kind)
    names = [f.name for f in dataclasses.fields(cls)]
    fields = {n: data.draw(_values, label=n) for n in names}
    _decode(_frame(msgpack.packb([kind, 1, "", fields], use_bin_type=True)))


@FUZZ
@given(kind=st.sampled_from(KINDS), data=st.data())
def test_ndarray_and_extension_payloads_raise_only_library_errors(kind: str, data: st.DataObject) -> None:
    """Every field as a msgpack extension (the codecs' and the arrays' encoding) with fuzzed contents."""
    import dataclasses

    cls = wire.message_type(kind)
    fields = {}
    for f in dataclasses.fields(cls):
        code = data.draw(st.integers(min_value=0, max_value=10), label=f"{f.name} code")
        if data.draw(st.booleans(), label=f"{f.name} array"):
            dtype = data.draw(st.sampled_from(["<f4", "<f8", "<i8", "<u8", "|b1", "|u1", "<u4", "O", "<c16"]))
            shape = data.draw(st.lists(st.integers(min_value=-1, max_value=4), max_size=3))
            payload = msgpack.packb([dtype, shape, data.draw(st.binary(max_size=64))], use_bin_type=True)
        else:
            payload = data.draw(st.binary(max_size=96))
        fields[f.name] = msgpack.ExtType(code, payload)
    _decode(_frame(msgpack.packb([kind, 1, "", fields], use_bin_type=True)))


@FUZZ
@given(body=st.binary(max_size=300))
def test_arbitrary_frame_bodies_raise_only_library_errors(body: bytes) -> None:
    _decode(_frame(body))
    _decode(body)  # and as a whole frame (bad magic, truncation, tag)


@FUZZ
@given(kind=st.sampled_from(KINDS), flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(1, 255)),
                                                   min_size=1, max_size=4))
def test_bit_flips_in_a_valid_body_raise_only_library_errors(kind: str, flips: list[tuple[int, int]]) -> None:
    """Start from a real message's body where the kind's fields are simple enough to build; flip bytes."""
    body = bytearray(msgpack.packb([kind, 1, "", {}], use_bin_type=True))
    for pos, x in flips:
        body[pos % len(body)] ^= x
    _decode(_frame(bytes(body)))


# --------------------------------------------------------------------------- CSV


_cells = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["", "nan", "NaN", "inf", "-inf", "1e400", "0x10", "1_000", " 7 ", '"', '""', "\x00", "\r", "\n", "id"])


@FUZZ
@given(rows=st.lists(st.lists(_cells, min_size=1, max_size=4), max_size=6), raw=st.binary(max_size=40),
       mode=st.sampled_from(["rows", "raw", "both"]))
def test_csv_readers_raise_only_library_errors(tmp_path_factory: pytest.TempPathFactory, rows: list[list[str]],
                                               raw: bytes, mode: str) -> None:
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf).writerows([["id", "x", "y"], *rows])
    text = buf.getvalue().encode("utf-8", "surrogatepass") if mode != "raw" else b""
    data = text + (raw if mode != "rows" else b"")
    path = Path(tmp_path_factory.mktemp("fuzz")) / "f.csv"
    path.write_bytes(data)
    for read in (lambda: read_csv_strings(path), lambda: read_party_csv(path, "id"),
                 lambda: read_party_csv(path, "id", label="y"), lambda: read_party_csv(path, "id").check_unique_ids()):
        try:
            read()
        except VflError:
            pass


# --------------------------------------------------------------------------- mutations of real messages


def _real_frames() -> tuple[list[bytes], wire.DecodeContext]:
    """One frame per kind that small real runs send (alignment, logreg, secure aggregation, SecureBoost)."""
    import numpy as np
    from vflcrypto.protocols import align, logreg, secagg
    from vflcrypto.protocols import secureboost as sb

    from vflcrypto.runtime.channel import AuditTap

    tap = AuditTap()
    align.run_local([f"i{k}" for k in range(12)], [f"i{k}" for k in range(6, 20)], mode="both", tap=tap)
    rng = np.random.default_rng(0)
    logreg.run_local([rng.normal(size=(20, 2)) for _ in range(2)], (np.arange(20) % 2).astype(float), secure=True,
                     steps=1, key_bits=512, allow_insecure=True, tap=tap)
    secagg.run_local([[np.arange(4.0)] for _ in range(3)], tap=tap)
    Xa, y, _, Xp, _ = sb.example(n=30)
    sb.run_local(Xa, y, [Xp], params=sb.BoostParams(n_trees=1, max_depth=1, max_bin=4), key_bits=512,
                 allow_insecure=True, tap=tap)
    import dataclasses

    from vflcrypto.he.paillier import PaillierPublicKey

    seen: dict[str, bytes] = {}
    ring = wire.KeyRing()
    for r in tap.records():
        seen.setdefault(r.entry.kind, wire.encode_frame(r.message, seq=1))
        for f in dataclasses.fields(r.message):
            if isinstance(getattr(r.message, f.name), PaillierPublicKey):
                ring.add(getattr(r.message, f.name))
    # the receivers' view: the runs' keys accepted (so ciphertexts reach their own checks), 512-bit test keys
    return list(seen.values()), wire.DecodeContext(keyring=ring, allow_insecure=True)


@pytest.fixture(scope="module")
def real_frames() -> tuple[list[bytes], wire.DecodeContext]:
    return _real_frames()


@FUZZ
@given(pick=st.integers(min_value=0), flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(1, 255)),
                                                     min_size=1, max_size=6), cut=st.integers(min_value=0))
def test_mutated_real_messages_raise_only_library_errors(real_frames: tuple[list[bytes], wire.DecodeContext],
                                                         pick: int, flips: list[tuple[int, int]], cut: int) -> None:
    frames, ctx = real_frames
    frame = frames[pick % len(frames)]
    body = bytearray(frame[wire.HEADER_BYTES:])
    for pos, x in flips:
        body[pos % len(body)] ^= x
    _decode(_frame(bytes(body)), ctx)
    _decode(_frame(bytes(body[: cut % (len(body) + 1)])), ctx)  # and truncated


def test_the_real_frames_cover_many_kinds(real_frames: tuple[list[bytes], wire.DecodeContext]) -> None:
    frames, ctx = real_frames
    assert len(frames) >= 20
    for f in frames:
        wire.decode_frame(f, ctx=ctx)  # unmutated, they decode
