"""Shared pieces of the Flower App: data partitions, framing, and node state.

Every Flower message carries exactly one declared ``logreg.*`` message of
:mod:`vflcrypto.protocols.logreg`, framed and validated by :mod:`vflcrypto.wire`
(typed fields, Paillier ciphertexts checked against the receiver's accepted key), so the
Flower transport exchanges only the protocol's declared messages. Role code in
``server_app.py`` / ``client_app.py`` stays thin: the math is the protocol module's.

A SuperNode's party state lives in ``context.state`` (a message may run in a fresh
process): weights in an ``ArrayRecord``, seeds, ephemeral keys, gradient masks and the
Paillier public key as bytes in a ``ConfigRecord``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, RecordDict
from vflcrypto.protocols import logreg as lr

from vflcrypto.errors import ProtocolError
from vflcrypto.leakage import declaration_for
from vflcrypto.wire import DecodeContext, KeyRing, decode_frame, encode_frame, message_kind

FRAME = "frame"
STATE = "logreg"
WEIGHTS = "logreg-weights"


def party_name(partition_id: int) -> str:
    return f"{lr.PASSIVE}-{partition_id}"


def load_party(partition_id: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The feature block of passive party ``partition_id`` of the Titanic example."""
    data = lr.titanic_parties(seed=seed)
    if not 0 <= partition_id < len(data.X_train):
        raise ValueError(f"partition-id {partition_id} out of range (0..{len(data.X_train) - 1})")
    return data.X_train[partition_id], data.X_test[partition_id]


def load_labels(seed: int = 0) -> lr.TitanicSplit:
    """The active party's view of the example (it uses only the labels and row IDs)."""
    return lr.titanic_parties(seed=seed)


def pack(msg: Any, sender: str, run_id: str) -> RecordDict:
    """Frame one declared message into a Flower RecordDict (and say who sent it)."""
    frame = encode_frame(msg, seq=0, run_id=run_id)
    return RecordDict({"c": ConfigRecord({FRAME: frame, "sender": sender})})


def unpack(content: RecordDict, expected: type, *, sender_role: str, receiver_role: str,
           run_id: str, keyring: KeyRing | None = None, allow_insecure: bool = False) -> Any:
    """Decode and validate a framed message: kind, declared route, run id, ciphertexts."""
    try:
        frame_bytes = content["c"][FRAME]  # type: ignore[index]
    except KeyError:
        raise ProtocolError("Flower message without a vflcrypto frame") from None
    frame = decode_frame(bytes(frame_bytes), ctx=DecodeContext(keyring or KeyRing(), allow_insecure))
    if frame.kind != message_kind(expected):
        raise ProtocolError(f"expected {message_kind(expected)}, got {frame.kind}")
    if frame.run_id != run_id:
        raise ProtocolError("frame belongs to another run")
    if not declaration_for(frame.kind).allows(sender_role, receiver_role):
        raise ProtocolError(f"{frame.kind} is not declared {sender_role} -> {receiver_role}")
    return frame.message


def get_state(context: Context) -> dict[str, Any]:
    rec = context.state.get(STATE)
    return dict(rec) if rec is not None else {}


def put_state(context: Context, values: dict[str, Any]) -> None:
    context.state[STATE] = ConfigRecord(values)


def get_weights(context: Context, dim: int) -> np.ndarray:
    rec = context.state.get(WEIGHTS)  # type: ignore[union-attr]
    if rec is None:
        return np.zeros(dim)
    return rec["w"].numpy()  # type: ignore[index]


def put_weights(context: Context, w: np.ndarray) -> None:
    context.state[WEIGHTS] = ArrayRecord({"w": Array(np.asarray(w, dtype=np.float64))})
