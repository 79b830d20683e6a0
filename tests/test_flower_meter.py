"""MeteredGrid counts every message crossing a Flower Grid, each way, as Flower serializes it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from flwr.common.serde import recorddict_to_proto

from vflcrypto.runtime.flower_meter import MeteredGrid


@dataclass
class Meta:
    dst_node_id: int = 0
    src_node_id: int = 0
    reply_to_message_id: str = ""


@dataclass
class Message:
    """The part of flwr's Message the meter reads (a real one needs a running Flower task)."""

    content: RecordDict
    metadata: Meta = field(default_factory=Meta)

    def has_error(self) -> bool:
        return False


class EchoGrid:
    """A Grid whose nodes reply to each message with a 1000-value array, on the second pull."""

    def __init__(self) -> None:
        self.pushed: dict[str, Message] = {}
        self.pulls = 0
        self.run_id = 7

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        ids = []
        for m in messages:
            mid = f"m{len(self.pushed)}"
            self.pushed[mid] = m
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        self.pulls += 1
        if self.pulls % 2:
            return []
        out = []
        for mid in message_ids:
            src = self.pushed[mid]
            out.append(Message(RecordDict({"a": ArrayRecord({"v": Array(np.zeros(1000))})}),
                               Meta(src_node_id=src.metadata.dst_node_id, reply_to_message_id=mid)))
        return out


def _content(text: str) -> RecordDict:
    return RecordDict({"c": ConfigRecord({"text": text})})


def test_counts_bytes_each_way_per_node_and_forwards_the_rest() -> None:
    grid = MeteredGrid(EchoGrid(), poll=0.001)
    msgs = [Message(_content("x" * (10 * k)), Meta(dst_node_id=k)) for k in (1, 2)]
    replies = list(grid.send_and_receive(msgs, timeout=5))
    assert len(replies) == 2
    t = grid.traffic
    assert t.messages == 4
    for k in (1, 2):
        assert t.down[k] == recorddict_to_proto(_content("x" * (10 * k))).ByteSize()
        assert t.up[k] > 8000  # the 1000 float64 values
    assert t.per_client()["total"] == pytest.approx(sum(t.down.values()) / 2 + sum(t.up.values()) / 2)
    assert grid.run_id == 7  # anything else is the wrapped Grid's


def test_the_poll_loop_stops_at_the_timeout() -> None:
    class Silent(EchoGrid):
        def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
            return []

    grid = MeteredGrid(Silent(), poll=0.01)
    got = grid.send_and_receive([Message(_content("a"), Meta(dst_node_id=1))], timeout=0.1)
    assert list(got) == [] and grid.traffic.up == {}
