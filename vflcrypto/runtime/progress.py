"""A minimal progress bar for long work, written to stderr only when it is a terminal.

Kept dependency-free on purpose: it never writes to stdout, so ``--json`` output stays
machine-readable, and it is silent in CI and in tests.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sized
from typing import TextIO, TypeVar

__all__ = ["Progress", "track"]

T = TypeVar("T")


class Progress:
    """``with Progress("encrypting", total=n) as p: ... p.advance(k)``."""

    def __init__(self, label: str, total: int | None = None, *, stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._t0 = time.monotonic()
        self._last = 0.0

    def __enter__(self) -> Progress:
        self._draw(force=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self._draw(force=True)
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._draw()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        elapsed = now - self._t0
        if self.total:
            frac = min(1.0, self.done / self.total)
            bar = "#" * int(30 * frac)
            text = f"\r{self.label:<28} [{bar:<30}] {self.done}/{self.total} {elapsed:6.1f}s"
        else:
            text = f"\r{self.label:<28} {self.done} {elapsed:6.1f}s"
        self.stream.write(text)
        self.stream.flush()


def track(items: Iterable[T], label: str, total: int | None = None) -> Iterator[T]:
    """Iterate over ``items`` while drawing a progress bar."""
    if total is None and isinstance(items, Sized):
        total = len(items)
    with Progress(label, total) as p:
        for item in items:
            yield item
            p.advance()
