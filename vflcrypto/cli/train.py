"""``vflcrypto train MODEL``: train a vertical model from CSV files, every party in-process.

Each model's sub-command lives in its own module (``vflcrypto.cli.train_<model>``) and
exposes ``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib

__all__ = ["MODEL_MODULES", "register"]

MODEL_MODULES = (
    "vflcrypto.cli.train_linreg",
    "vflcrypto.cli.train_secureboost",
    "vflcrypto.cli.train_logreg",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("train", help="train a vertical model on CSV files (parties in-process)")
    models = p.add_subparsers(dest="model", required=True, metavar="MODEL")
    for name in MODEL_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(models)
