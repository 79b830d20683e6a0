"""Progress of long runs: protocols say how far they are, the command line decides whether to draw it.

Protocol code only reports counts, e.g. ``report("linreg", 3, 20, unit="epoch")`` when
its third of twenty epochs is done, or ``add("aligning (ecdh)", 500, unit="id")`` for
work counted in increments. Nothing is drawn unless a :class:`Reporter` is installed with
:func:`reporting`: the command line installs :class:`Bars` (tqdm bars on stderr, with
elapsed time and an estimate of the time left) when stderr is a terminal and ``--json``
is absent, or when the user asks with ``--progress``. Without a reporter a report costs
one context-variable look-up; stdout, JSON output and the protocols' messages and
results never depend on it.

The reporter lives in a context variable. :func:`vflcrypto.runtime.channel.run_parties`
runs each in-process party's thread in a copy of the caller's context (so every party of
a local run reports to the command's reporter) and wraps the run in a :func:`section`,
which finishes the counters the run opened, so the next run's "epoch 1" starts a new
bar. :func:`report` gives absolute counts: several parties reporting the same counter
(each party of an in-process run counts its own epochs) draw one bar at the furthest
count, and a count that is not past the bar's is ignored. :func:`add` counts increments
(each party's own work adds to the total).
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NoReturn, TextIO

from tqdm import tqdm

__all__ = ["Bars", "Count", "Reporter", "add", "counter", "report", "reporting", "section"]


@dataclass
class Count:
    """One counter: ``done`` of ``total`` (``None``: unknown) ``unit``\\ s of the task ``what``."""

    what: str
    unit: str
    done: int = 0
    total: int | None = None


class Reporter:
    """Receives the reports of the current context and keeps every counter's furthest count.

    Draws nothing itself (tests install it to read what was reported); :class:`Bars`
    draws. ``finished`` lists every counter in the order its section (or the reporter)
    closed it, with its last count.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str], Count] = {}
        self._sections: list[set[tuple[str, str]]] = []
        self.finished: list[Count] = []

    # ------------------------------------------------------------- reports
    def update(self, what: str, unit: str, done: int | None, total: int | None, *, add: int = 0) -> None:
        """Set the counter to ``done`` (or advance it by ``add``); ``total`` when known."""
        with self._lock:
            key = (what, unit)
            count = self._open.get(key)
            new = count is None
            if count is None:
                count = self._open[key] = Count(what, unit)
                if self._sections:
                    self._sections[-1].add(key)
            target = count.done + add if done is None else done
            if not new and target <= count.done and (total is None or total == count.total):
                return  # a late or repeated report (another party, a step behind)
            count.done = max(count.done, target)
            if total is not None:
                count.total = total
            self._drew(count, new)

    # ------------------------------------------------------------- sections
    def enter(self) -> None:
        """A run begins: counters opened from now until :meth:`leave` belong to it."""
        with self._lock:
            self._sections.append(set())

    def leave(self) -> None:
        """The run ended: finish its counters (the next report of the same name starts anew)."""
        with self._lock:
            keys = self._sections.pop() if self._sections else set()
            for key in sorted(keys, key=list(self._open).index):
                self._finish(self._open.pop(key))

    def close(self) -> None:
        """Finish every counter still open (the command is done)."""
        with self._lock:
            for count in self._open.values():
                self._finish(count)
            self._open.clear()
            self._sections.clear()

    def _finish(self, count: Count) -> None:
        self.finished.append(count)
        self._finished(count)

    # ------------------------------------------------------------- drawing (subclasses)
    def _drew(self, count: Count, new: bool) -> None:
        """Called under the lock after ``count`` changed (``new``: its first report)."""

    def _finished(self, count: Count) -> None:
        """Called under the lock when ``count`` is finished."""


class Bars(Reporter):
    """Draws each counter as a tqdm bar on ``stream`` (stderr): count, total, elapsed time, time left.

    A finished counter's bar stays on screen with its final count and elapsed time (a
    record of where the time went); a run that stopped early (converged) shows where.
    On a terminal, open bars are redrawn every ``tick`` seconds, so the elapsed time runs
    on during a long epoch or phase; into a file (``--progress 2> log``) they are drawn
    only when a count changes, so the log does not grow by a line a second.
    """

    def __init__(self, stream: TextIO, *, tick: float | None = 1.0) -> None:
        super().__init__()
        self.stream = stream
        self.tick = tick if _isatty(stream) else None
        self._bars: dict[int, tqdm[NoReturn]] = {}  # bars without an iterable
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def _drew(self, count: Count, new: bool) -> None:
        bar = self._bars.get(id(count))
        if bar is None:
            cols, rows = _screen(self.stream)
            bar = tqdm(total=count.total, desc=count.what, unit=f" {count.unit}", file=self.stream, leave=True,
                       ncols=cols, nrows=rows, dynamic_ncols=cols is None, mininterval=0.2, disable=False)
            self._bars[id(count)] = bar
            if self._ticker is None and self.tick is not None:
                self._ticker = threading.Thread(target=self._tick, name="vflcrypto-progress", daemon=True)
                self._ticker.start()
        if count.total is not None and bar.total != count.total:
            bar.total = count.total
        bar.update(count.done - bar.n)
        if new:
            bar.refresh()  # the first count at once (tqdm holds back updates within mininterval of the last draw)

    def _finished(self, count: Count) -> None:
        bar = self._bars.pop(id(count), None)
        if bar is not None:
            bar.close()

    def _tick(self) -> None:
        assert self.tick is not None
        while not self._stop.wait(self.tick):
            with self._lock:
                for bar in self._bars.values():
                    bar.refresh()

    def close(self) -> None:
        super().close()
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or minimal stream
        return False


def _screen(stream: TextIO) -> tuple[int | None, int]:
    """(columns, rows) for tqdm: columns ``None`` (follow the terminal) when the terminal knows its size,
    else 100; rows at least 20 (a terminal of unknown size reports 0 rows, and tqdm hides every bar below it)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return 100, 20
    return (None if size.columns > 0 else 100), max(size.lines, 20)


_current: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar("vflcrypto_progress", default=None)


@contextlib.contextmanager
def reporting(reporter: Reporter) -> Iterator[Reporter]:
    """Send this context's reports (and those of the runs it starts) to ``reporter``; close it at the end."""
    token = _current.set(reporter)
    try:
        yield reporter
    finally:
        _current.reset(token)
        reporter.close()


@contextlib.contextmanager
def section() -> Iterator[None]:
    """One run: the counters it opens are finished when it ends (no-op without a reporter)."""
    reporter = _current.get()
    if reporter is None:
        yield
        return
    reporter.enter()
    try:
        yield
    finally:
        reporter.leave()


def report(what: str, done: int, total: int | None = None, *, unit: str = "step") -> None:
    """``done`` of ``total`` ``unit``\\ s of ``what`` are finished (e.g. ``report("linreg", 3, 20, unit="epoch")``)."""
    reporter = _current.get()
    if reporter is not None:
        reporter.update(what, unit, done, total)


def add(what: str, n: int, total: int | None = None, *, unit: str = "item") -> None:
    """``n`` more ``unit``\\ s of ``what`` are finished (work counted in increments, e.g. IDs blinded)."""
    reporter = _current.get()
    if reporter is not None:
        reporter.update(what, unit, None, total, add=n)


def counter(what: str, total: int | None = None, *, unit: str = "item") -> Callable[[int], None]:
    """A callback ``advance(n)`` that reports ``n`` more ``unit``\\ s of ``what`` (for code that takes one)."""
    return lambda n: add(what, n, total, unit=unit)
