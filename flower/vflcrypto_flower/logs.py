"""One line instead of a traceback when a ServerApp or ClientApp stops on the library's own error.

Flower logs an app's exception with its traceback (``log(ERROR, "ServerApp raised an exception",
exc_info=ex)``), and ``flwr log --stream`` prints it before the run's status line. For a
:class:`~vflcrypto.errors.VflError` (a peer that timed out, bad input, a refused setting) or
an :class:`OSError` (a file that cannot be read or written) the traceback says nothing the
message does not, and hides it: :class:`OneLineErrors` rewrites such a record into one line
("ServerApp raised an exception: PeerTimeoutError: ..."). Any other exception is a bug and
keeps its traceback.
"""

from __future__ import annotations

import logging

from vflcrypto.errors import VflError

__all__ = ["OneLineErrors", "install"]


class OneLineErrors(logging.Filter):
    """Drop the traceback of a logged VflError or OSError; keep the record, now one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, VflError | OSError):
            record.msg, record.args = f"{record.getMessage()}: {type(exc).__name__}: {exc}", None
            record.exc_info, record.exc_text = None, None
        return True


def install() -> None:
    """Put the filter on Flower's logger (once per process)."""
    flwr = logging.getLogger("flwr")
    if not any(isinstance(f, OneLineErrors) for f in flwr.filters):
        flwr.addFilter(OneLineErrors())
