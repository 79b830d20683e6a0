"""The transcript of a run: every frame sent and received, and (audits only) what each party saw.

A :class:`Transcript` is shared by the channels of the parties of one run; each
:class:`~vflcrypto.runtime.channel.Channel` appends one :class:`TranscriptEntry` per frame it sends
or receives (sizes, kinds, roles, time; never contents). The audit and the benchmarks
read it.

For an audit run it can carry an :class:`AuditTap`, which also keeps every *decoded*
message each party received and the secrets each party declared it holds
(:meth:`~vflcrypto.runtime.channel.Channel.hold`), so that empirical attacks read exactly what a
role saw in that run, with that role's own keys, instead of re-simulating it. The tap
lives in memory only, is never serialized, and is off unless a caller asks for it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import AuditError
from .wire import message_kind

__all__ = ["AuditTap", "Endpoint", "Received", "Transcript", "TranscriptEntry", "capture", "uncaptured"]


@dataclass(frozen=True)
class Endpoint:
    """A party: a unique ``name`` ("passive-1") and its protocol ``role`` ("passive")."""

    name: str
    role: str


@dataclass(frozen=True)
class TranscriptEntry:
    """One frame as seen by one side: ``event`` is "send" or "recv".

    ``step`` numbers the entries of the transcript; ``step_name`` is the protocol step that
    sent the message or handles it (the role's method, see :mod:`vflcrypto.runtime.steps`).
    """

    step: int
    event: str
    seq: int
    sender: str
    sender_role: str
    receiver: str
    receiver_role: str
    kind: str
    nbytes: int
    time: float
    step_name: str = ""


@dataclass(frozen=True)
class Received:
    """One decoded message as its receiver got it (kept by an :class:`AuditTap`)."""

    entry: TranscriptEntry
    message: Any


class AuditTap:
    """What each party received (decoded) and holds, for the empirical audit only.

    A role's attack must use that role's view: the messages it received in the run
    (:meth:`received`) and the secrets it holds (:meth:`held`: its own decryption key,
    PSI scalar, mask state), recorded by the role itself through :meth:`Channel.hold`.
    Values a *sender* holds (the unmasked gradient behind a masked one) serve only as
    ground truth to score an attack, never as the attacker's input. Thread-safe; memory
    only; never serialized.
    """

    def __init__(self, *, keep_sent: bool = False) -> None:
        """``keep_sent``: also keep what the parties send (one network party keeping its own view, see
        :mod:`vflcrypto.runtime.record`); an in-process audit keeps each message once, at its receiver."""
        self.keep_sent = keep_sent
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._held: dict[tuple[str, str], list[Any]] = {}

    def record(self, entry: TranscriptEntry, message: Any) -> None:
        with self._lock:
            self._received.append(Received(entry, message))

    def hold(self, party: str, label: str, value: Any) -> None:
        """Append ``value`` to what ``party`` holds under ``label`` (one entry per use)."""
        with self._lock:
            self._held.setdefault((party, label), []).append(value)

    def received(self, party: str | None = None, kind: str | type | None = None, *,
                 sender: str | None = None) -> list[Any]:
        """Messages ``party`` received (of ``kind``, from ``sender``), in arrival order."""
        return [r.message for r in self.records(party, kind, sender=sender)]

    def records(self, party: str | None = None, kind: str | type | None = None, *,
                sender: str | None = None) -> list[Received]:
        """Like :meth:`received`, with each message's transcript entry."""
        want = kind if kind is None or isinstance(kind, str) else message_kind(kind)
        with self._lock:
            items = list(self._received)
        return [r for r in items
                if (party is None or r.entry.receiver == party)
                and (want is None or r.entry.kind == want)
                and (sender is None or r.entry.sender == sender)]

    def held(self, party: str, label: str) -> list[Any]:
        """Every value ``party`` recorded under ``label``; ``KeyError`` naming it if none."""
        with self._lock:
            values = self._held.get((party, label))
        if values is None:
            raise AuditError(f"{party} recorded nothing under {label!r} (was the tap on?)")
        return list(values)

    def held_one(self, party: str, label: str) -> Any:
        """The single value ``party`` recorded under ``label``."""
        values = self.held(party, label)
        if len(values) != 1:
            raise AuditError(f"{party} recorded {len(values)} values under {label!r}, expected one")
        return values[0]


_capture_lock = threading.Lock()
_captures: list[list[Transcript]] = []


@contextlib.contextmanager
def capture() -> Iterator[list[Transcript]]:
    """Collect every :class:`Transcript` created while the block runs (in any thread), in creation order.

    What ``vflcrypto train ... --html`` uses to draw the runs a command made without any
    command knowing about reports.
    """
    got: list[Transcript] = []
    with _capture_lock:
        _captures.append(got)
    try:
        yield got
    finally:
        with _capture_lock:
            _captures.remove(got)


@contextlib.contextmanager
def uncaptured() -> Iterator[None]:
    """Run a block whose transcripts no :func:`capture` collects: a command's plaintext reference run,
    which is a check beside the run and no exchange between the parties, stays out of its report."""
    with _capture_lock:
        saved = _captures[:]
        _captures.clear()
    try:
        yield
    finally:
        with _capture_lock:
            _captures.extend(saved)


class Transcript:
    """Append-only, thread-safe log of every frame sent and received by the parties that share it.

    ``tap`` (audit runs only) also keeps the decoded received messages and held secrets.
    """

    def __init__(self, tap: AuditTap | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: list[TranscriptEntry] = []
        self._t0 = time.monotonic()
        self.tap = tap
        with _capture_lock:
            for c in _captures:
                c.append(self)

    def record(self, event: str, seq: int, sender: Endpoint, receiver: Endpoint,
               kind: str, nbytes: int, step_name: str = "") -> TranscriptEntry:
        with self._lock:
            entry = TranscriptEntry(len(self._entries), event, seq, sender.name, sender.role,
                                    receiver.name, receiver.role, kind, nbytes,
                                    time.monotonic() - self._t0, step_name)
            self._entries.append(entry)
        return entry

    def entries(self) -> list[TranscriptEntry]:
        with self._lock:
            return list(self._entries)

    def sent(self) -> list[TranscriptEntry]:
        return [e for e in self.entries() if e.event == "send"]

    def received(self) -> list[TranscriptEntry]:
        return [e for e in self.entries() if e.event == "recv"]

    def kinds(self) -> list[str]:
        """Kinds of all sent messages, in order."""
        return [e.kind for e in self.sent()]

    def bytes_sent_by(self, attr: str = "sender") -> dict[str, int]:
        """Total bytes sent, keyed by party name (``attr="sender"``) or role (``"sender_role"``)."""
        out: dict[str, int] = {}
        for e in self.sent():
            key = getattr(e, attr)
            out[key] = out.get(key, 0) + e.nbytes
        return out

    @property
    def total_bytes(self) -> int:
        return sum(e.nbytes for e in self.sent())

    def to_dict(self) -> list[dict[str, Any]]:
        return [asdict(e) for e in self.entries()]

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, entries: list[dict[str, Any]]) -> Transcript:
        """A transcript from :meth:`to_dict` output (e.g. a run record written by another runtime)."""
        out = cls()
        names = [f for f in TranscriptEntry.__dataclass_fields__]
        for i, e in enumerate(entries):
            values = {k: e[k] for k in names if k in e}
            values["step"] = i
            out._entries.append(TranscriptEntry(**values))
        return out

    def merge(self, other: Transcript) -> None:
        """Append another party's entries (e.g. from a separate process), renumbering steps."""
        for e in sorted(other.entries(), key=lambda x: x.time):
            with self._lock:
                self._entries.append(TranscriptEntry(len(self._entries), *list(asdict(e).values())[1:]))
