"""``vflcrypto train MODEL``: train a vertical model from CSV files, every party in-process.

The models are the ``train`` commands of the protocols in the registry
(:func:`vflcrypto.protocols.registry`, ``SPEC.commands``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["register"]


def _outputs_first(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Check ``--model-dir`` before any work: training never finishes and then fails to save."""

    def checked(args: argparse.Namespace) -> int:
        from ..dataio import check_output_dir

        if getattr(args, "model_dir", None):
            check_output_dir(args.model_dir, "--model-dir")
        return run(args)

    return checked


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ..protocols import registry

    p = sub.add_parser("train", help="train a vertical model on CSV files (parties in-process)")
    models = p.add_subparsers(dest="model", required=True, metavar="MODEL")
    for spec in registry().values():
        for cmd in spec.commands:
            if cmd.group != "train":
                continue
            m = models.add_parser(cmd.name, help=cmd.help, description=cmd.description,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
            cmd.add_arguments(m)
            m.set_defaults(handler=_outputs_first(cmd.run))
