"""Count what crosses a Flower Grid: messages and their serialized bytes, each way.

A ServerApp wraps its ``Grid`` in :class:`MeteredGrid` to measure the traffic of a run
on Flower's own transport, the same way for any app (vflcrypto's protocols and Flower's
built-in workflows alike): every message's content is measured as the protobuf that
Flower puts on the wire (``recorddict_to_proto(...).ByteSize()``), the metadata
excluded. Used by ``bench/secagg_bench.py`` to compare bytes per client with Flower's
SecAgg+; it needs ``flwr`` (the ``flower`` extra) and imports it only when used.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MeteredGrid", "Traffic"]


@dataclass
class Traffic:
    """Bytes and messages per node, to the clients (down) and from them (up)."""

    down: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    up: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    messages: int = 0

    def per_client(self, nodes: Iterable[int] | None = None) -> dict[str, float]:
        """Mean bytes per client node, down and up (over ``nodes``, default every node seen)."""
        ids = sorted(set(nodes) if nodes is not None else set(self.down) | set(self.up))
        n = max(len(ids), 1)
        down = sum(self.down.get(i, 0) for i in ids) / n
        up = sum(self.up.get(i, 0) for i in ids) / n
        return {"down": down, "up": up, "total": down + up}

    def to_dict(self) -> dict[str, Any]:
        return {"down": dict(self.down), "up": dict(self.up), "messages": self.messages}


def _size(message: Any) -> int:
    from flwr.common.serde import recorddict_to_proto

    if message.has_error():
        return 0
    return int(recorddict_to_proto(message.content).ByteSize())


class MeteredGrid:
    """A Grid that forwards every call and counts the messages pushed and pulled.

    ``poll`` (seconds) replaces the wrapped Grid's ``send_and_receive`` by push, then
    pull every ``poll`` seconds (Flower's own sleeps 3 s between pulls, which would
    dominate a benchmark of the protocol); ``None`` keeps Flower's.
    """

    def __init__(self, grid: Any, poll: float | None = None) -> None:
        self._grid = grid
        self.poll = poll
        self.traffic = Traffic()
        self.exchanges: list[tuple[int, float]] = []  # (messages, seconds) of each exchange a caller logs

    def __getattr__(self, name: str) -> Any:  # everything else: the wrapped Grid's
        return getattr(self._grid, name)

    def _out(self, messages: Iterable[Any]) -> list[Any]:
        msgs = list(messages)
        for m in msgs:
            self.traffic.down[m.metadata.dst_node_id] += _size(m)
            self.traffic.messages += 1
        return msgs

    def _in(self, messages: Iterable[Any]) -> list[Any]:
        msgs = list(messages)
        for m in msgs:
            self.traffic.up[m.metadata.src_node_id] += _size(m)
            self.traffic.messages += 1
        return msgs

    def push_messages(self, messages: Iterable[Any]) -> Iterable[str]:
        return self._grid.push_messages(self._out(messages))

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Any]:
        return self._in(self._grid.pull_messages(message_ids))

    def send_and_receive(self, messages: Iterable[Any], *, timeout: float | None = None) -> Iterable[Any]:
        if self.poll is None:
            return self._in(self._grid.send_and_receive(self._out(messages), timeout=timeout))
        pending = set(self.push_messages(messages))
        deadline = None if timeout is None else time.monotonic() + timeout
        got: list[Any] = []
        while pending:
            replies = list(self.pull_messages(pending))
            got.extend(replies)
            pending -= {r.metadata.reply_to_message_id for r in replies}
            if not pending or (deadline is not None and time.monotonic() >= deadline):
                break
            time.sleep(self.poll)
        return got
