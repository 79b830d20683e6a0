"""One party's messages of a network run, kept on its own disk so that it can be attacked from its view alone.

``vflcrypto party ... --keep-messages`` attaches an :class:`~vflcrypto.runtime.transcript.AuditTap`
that keeps every message the party **received and sent**, decoded, and writes them beside
its run record as ``OUT.messages`` (:func:`write_messages`). Nothing else goes in: none of
the party's keys, masks or other secrets (what an attack may add from the party's own
knowledge comes from its own files), and nothing of any other party beyond what reached
this one. ``vflcrypto audit --transcript OUT.run.json`` reads the file back
(:func:`read_messages`) into a tap holding exactly this party's view, and runs the attacks
its protocol defines for that role.

Format: msgpack (no pickle; every message re-checked against its declared schema on
reading), ``{"format": FORMAT, "party", "role", "task", "run_id", "rows", "messages"}``
with one ``[event, seq, sender, sender_role, receiver, receiver_role, kind, step_name,
encoded message]`` per message, in the order the party saw them. ``rows`` lists, when the
task states it, the IDs of the rows its messages are indexed by (the aligned training rows,
in order), so that a user can score an attack against labels of their own. Messages whose
ciphertexts are under a key the file does not carry are counted, not decoded, on reading.
The file holds what the party received (as sensitive as its own data): it is written
atomically, readable by its owner only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from ..data.files import PRIVATE, atomic_write_bytes
from ..errors import DecodeError, InputDataError, KeyMismatchError, ProtocolError
from .transcript import AuditTap, TranscriptEntry
from .wire import DecodeContext, decode_value, encode_value, message_type

__all__ = ["FORMAT", "RecordedView", "messages_path", "read_messages", "write_messages"]

FORMAT = "vflcrypto.messages/1"


def messages_path(out: Path) -> Path:
    """Where the kept messages of the party whose output is ``out`` go."""
    return out.with_name(out.name + ".messages")


@dataclass(frozen=True)
class RecordedView:
    """One party's view of a recorded run: the messages it received and sent, decoded, in a tap.

    ``tap.received(party, kind)`` gives what it received, ``tap.received(peer, kind,
    sender=party)`` what it sent; ``rows`` the IDs its messages' rows stand for (may be empty);
    ``undecoded`` counts, per kind, messages left undecoded (ciphertexts under a key the file
    does not carry).
    """

    party: str
    role: str
    task: str
    run_id: str
    tap: AuditTap
    rows: tuple[str, ...] = ()
    undecoded: dict[str, int] = field(default_factory=dict)


def write_messages(path: Path, tap: AuditTap, *, party: str, role: str, task: str, run_id: str,
                   rows: Sequence[str] = ()) -> int:
    """Write the messages ``tap`` kept (this party's received and sent ones) to ``path``; return their count."""
    items = []
    for r in tap.records():
        e = r.entry
        items.append([e.event, e.seq, e.sender, e.sender_role, e.receiver, e.receiver_role, e.kind, e.step_name,
                      encode_value(r.message)])
    body = {"format": FORMAT, "party": party, "role": role, "task": task, "run_id": run_id,
            "rows": [str(x) for x in rows], "messages": items}
    atomic_write_bytes(path, msgpack.packb(body, use_bin_type=True), permissions=PRIVATE)
    return len(items)


def read_messages(path: Path) -> RecordedView:
    """Read a file of :func:`write_messages` back into one party's view (every message schema-checked)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputDataError(f"{path}: cannot read the kept messages ({exc.strerror or exc})") from None
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, msgpack.exceptions.ExtraData, msgpack.exceptions.FormatError,
            msgpack.exceptions.StackError) as exc:
        raise InputDataError(f"{path}: not a file of kept messages (msgpack: {exc})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise InputDataError(f"{path}: not a file of kept messages (expected format {FORMAT!r})")
    try:
        party, role, task, run_id = (str(body[k]) for k in ("party", "role", "task", "run_id"))
        rows = tuple(str(x) for x in body.get("rows", ()))
        items = list(body["messages"])
    except (KeyError, TypeError) as exc:
        raise InputDataError(f"{path}: kept messages without {exc}") from None
    tap, undecoded = AuditTap(), dict[str, int]()
    ctx = DecodeContext()
    for i, item in enumerate(items):
        if not isinstance(item, list) or len(item) != 9 or not isinstance(item[8], bytes):
            raise InputDataError(f"{path}: message {i} is malformed")
        event, seq, sender, sender_role, receiver, receiver_role, kind, step_name, blob = item
        try:
            message = decode_value(blob, message_type(str(kind)), ctx)
        except KeyMismatchError:
            undecoded[str(kind)] = undecoded.get(str(kind), 0) + 1
            continue
        except (DecodeError, ProtocolError) as exc:
            raise InputDataError(f"{path}: message {i} ({kind}) does not decode: {exc}") from None
        entry = TranscriptEntry(i, str(event), int(seq), str(sender), str(sender_role), str(receiver),
                                str(receiver_role), str(kind), len(blob), 0.0, str(step_name))
        tap.record(entry, message)
    return RecordedView(party, role, task, run_id, tap, rows, undecoded)
