"""``vflcrypto train MODEL``: train a vertical model from CSV files, every party in-process.

The models are the ``train`` commands of the protocols in the registry
(:func:`vflcrypto.protocols.registry`, ``SPEC.commands``).
"""

from __future__ import annotations

import argparse

__all__ = ["register"]

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
            m.set_defaults(handler=cmd.run)
