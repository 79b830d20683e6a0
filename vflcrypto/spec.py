"""What a protocol module offers the entry points: its demo step's context (and, later, its spec).

Low layer: no protocol is named here; protocol modules import these types and the entry
points (CLI, Flower app) read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DemoContext"]


@dataclass
class DemoContext:
    """What every demo step receives: a scratch directory, the key size, and shared state."""

    workdir: Path
    key_bits: int
    quick: bool
    state: dict[str, Any] = field(default_factory=dict)
    verbose: bool = True

    def say(self, text: str) -> None:
        if self.verbose:
            print(text, flush=True)
