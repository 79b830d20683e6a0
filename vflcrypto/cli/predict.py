"""``vflcrypto predict MODEL``: apply a saved model directory to new rows, every party in-process.

The models are the ``predict`` commands of the protocols in the registry
(:func:`vflcrypto.protocols.registry`, ``SPEC.commands``); what they share is
:mod:`vflcrypto.protocols._predict` (manifest checked first, rows aligned by PSI like
training, the protocol's own prediction messages, the predictions written atomically).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["register"]


def _outputs_first(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Check ``--out`` (not an input, in a writable directory) before any work; write inside one
    :func:`~vflcrypto.data.files.atomic_set` (the predictions, or nothing)."""

    def checked(args: argparse.Namespace) -> int:
        from ..data.files import atomic_set, check_outputs

        inputs: list[str] = []
        for a in ("active", "server", "coordinator", "passive", "party", "data"):  # one file, or one per party
            given = getattr(args, a, None) or []
            inputs += [given] if isinstance(given, str) else list(given)
        check_outputs({"predictions": args.out}, inputs)
        with atomic_set():
            return run(args)

    return checked


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ..protocols import registry

    p = sub.add_parser("predict", help="apply a saved model (train ... --model-dir) to new rows (parties in-process)",
                       description=__doc__)
    models = p.add_subparsers(dest="model", required=True, metavar="MODEL")
    for spec in registry().values():
        for cmd in spec.commands:
            if cmd.group != "predict":
                continue
            m = models.add_parser(cmd.name, help=cmd.help, description=cmd.description)
            cmd.add_arguments(m)
            m.set_defaults(handler=_outputs_first(cmd.run))
