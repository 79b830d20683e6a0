"""What the ServerApp and the ClientApp share: the protocol, the parties, framing, node state.

One Flower App runs every protocol of the registry (run config ``protocol``). The
ServerApp plays the protocol's ``SPEC.flower.server_party``; SuperNode ``partition-id = k``
plays the k-th of the other parties. Both sides run the protocol's own
:class:`~vflcrypto.runtime.steps.Role` classes (the same named steps as ``run_local`` and the
network parties), so there is no second copy of any role.

Every Flower message carries one declared message framed by :mod:`vflcrypto.runtime.wire` (typed
fields, ciphertexts checked against the receiver's accepted keys on decode); a ClientApp's
reply carries the frames its step produced, each one declared and framed on its own.
Frames between two ClientApps travel through the ServerApp, which sees them: only the
kinds the spec lists as ``relayed`` (with why the ServerApp's party may see them) are
forwarded. A SuperNode's role state lives in ``context.state`` (a message may run in a
fresh process): the role's state dataclass as wire bytes, and what it waits for next.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, RecordDict
from vflcrypto.protocols import get

from vflcrypto.data.files import atomic_write_text
from vflcrypto.errors import ConfigurationError, ProtocolError
from vflcrypto.runtime.steps import Next, Recv
from vflcrypto.runtime.wire import encode_frame, message_kind, message_type
from vflcrypto.spec import FlowerSpec, ProtocolSpec

STATE = "vflcrypto-role"  # context.state record of a SuperNode's role
FRAME, SENDER, STEP = "frame", "sender", "step"


def protocol(run_config: Mapping[str, Any]) -> tuple[ProtocolSpec, FlowerSpec]:
    spec = get(str(run_config.get("protocol", "logreg")))
    if spec.flower is None:
        raise ConfigurationError(f"protocol {spec.name!r} has no Flower App")
    return spec, spec.flower


def client_parties(fl: FlowerSpec, run_config: Mapping[str, Any]) -> list[str]:
    """The parties the SuperNodes play, in partition-id order."""
    return [p for p in fl.parties(run_config) if p != fl.server_party]


def role_config(context: Context) -> dict[str, Any]:
    """The run config the protocol's Flower spec sees (plus the run id); ``scheme = "default"`` becomes
    the protocol's own default scheme, the first of :attr:`~vflcrypto.spec.ProtocolSpec.schemes`
    (SecureBoost: ``ou-2048``; linreg: ``paillier``)."""
    cfg = {**dict(context.run_config), "_run-id": str(context.run_id)}
    if cfg.get("scheme") == "default":
        cfg["scheme"] = protocol(cfg)[0].schemes[0]
    return cfg


def frame(msg: Any, run_id: str) -> bytes:
    return encode_frame(msg, seq=0, run_id=run_id)


def record_bytes(rec: Mapping[str, object], key: str) -> bytes:
    """The bytes field ``key`` of a record (a frame, a role state); any other type is refused
    (``bytes(n)`` of an int ``n`` would allocate ``n`` zero bytes)."""
    value = rec[key]
    if not isinstance(value, bytes):
        raise ProtocolError(f"record field {key!r} is a {type(value).__name__}, not bytes")
    return value


def request(frame_bytes: bytes, sender: str, step: str, *, start: bool = False) -> RecordDict:
    """One frame to a ClientApp (and who sent it); ``start``: the role starts, then handles it."""
    rec: dict[str, Any] = {FRAME: frame_bytes, SENDER: sender, STEP: step}
    if start:
        rec["start"] = True
    return RecordDict({"c": ConfigRecord(rec)})


def reply(party: str, step: str, nxt: Next, run_id: str) -> RecordDict:
    """A ClientApp's reply: the frames its step produced (each declared), and what it waits for."""
    rec: dict[str, Any] = {"party": party, STEP: step, "n": 0, "done": nxt.wait is None}
    for i, (to, msg) in enumerate(nxt.sends):
        rec[f"to{i}"], rec[f"frame{i}"] = to, frame(msg, run_id)
        rec["n"] = i + 1
    if nxt.wait is not None:
        rec.update(wait_peer=nxt.wait.peer, wait_kind=message_kind(nxt.wait.kind), wait_step=nxt.wait.step)
    return RecordDict({"c": ConfigRecord(rec)})


def read_reply(content: RecordDict) -> tuple[str, str, list[tuple[str, bytes]], tuple[str, str] | None]:
    """(party, step, [(to, frame)], (wait peer, wait kind) or None when done)."""
    try:
        rec = content["c"]
        n = rec["n"]
        if not isinstance(n, int) or isinstance(n, bool):
            raise ProtocolError(f"malformed ClientApp reply: frame count {n!r}")
        frames = [(str(rec[f"to{i}"]), record_bytes(rec, f"frame{i}")) for i in range(n)]
        wait = None if bool(rec["done"]) else (str(rec["wait_peer"]), str(rec["wait_kind"]))
        return str(rec["party"]), str(rec[STEP]), frames, wait
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed ClientApp reply: {exc}") from None


def save_wait(context: Context, state: bytes, wait: Recv | None) -> None:
    rec: dict[str, Any] = {"state": state, "done": wait is None}
    if wait is not None:
        rec.update(peer=wait.peer, kind=message_kind(wait.kind), step=wait.step)
    context.state[STATE] = ConfigRecord(rec)


def load_wait(context: Context) -> tuple[bytes, Recv | None] | None:
    rec = context.state.get(STATE)
    if rec is None:
        return None
    if rec["done"]:
        return record_bytes(rec, "state"), None
    wait = Recv(str(rec["peer"]), message_type(str(rec["kind"])), str(rec["step"]))
    return record_bytes(rec, "state"), wait


def jsonable(value: Any) -> Any:
    """A result as JSON-able data (numpy arrays as lists, dataclasses as dicts without the fields marked
    ``metadata={"secret": True}``, e.g. SecureBoost's GOSS key: an output file never holds a secret)."""
    import dataclasses

    import numpy as np

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not f.metadata.get("secret")}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return repr(value)


def write_output(run_config: Mapping[str, Any], name: str, data: Any) -> None:
    """``<out-dir>/<name>.json`` when the run config names an output directory (each party its own)."""
    out = str(run_config.get("out-dir", "") or "")
    if out:
        atomic_write_text(Path(out) / f"{name}.json", json.dumps(jsonable(data), indent=1))
