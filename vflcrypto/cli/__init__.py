"""The ``vflcrypto`` command line: the entry-point layer.

Each sub-command lives in its own module under :mod:`vflcrypto.cli` and exposes
``register(subparsers)``. The entry-point layer sits *above* both the :mod:`vflcrypto`
primitives and :mod:`vflcrypto.protocols`; it is the only part of the ``vflcrypto``
package that imports protocols.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import VflError
from .helptext import HelpParser

__all__ = ["main"]

COMMAND_MODULES = (
    "vflcrypto.cli.demo",
    "vflcrypto.cli.examples",
    "vflcrypto.cli.train",
    "vflcrypto.cli.predict",
    "vflcrypto.cli.audit",
    "vflcrypto.cli.bench",
    "vflcrypto.cli.certs",
    "vflcrypto.cli.party",
)


def build_parser() -> argparse.ArgumentParser:
    parser = HelpParser(
        prog="vflcrypto",
        description="Privacy-preserving cryptographic protocols for vertical federated learning.",
    )
    parser.add_argument("--parallel", choices=("process", "ray"), default=None,
                        help="where a party's big-integer work runs: this machine's process pool (default) or "
                             "the party's own Ray cluster (also $VFLCRYPTO_BACKEND); private-key work goes to Ray "
                             "only under Ray's TLS (RAY_USE_TLS=1), else it stays in the local pool")
    parser.add_argument("--ray-address", default=None,
                        help="with --parallel ray: the party's cluster ('auto', host:port); default: a local "
                             "instance (also $VFLCRYPTO_RAY_ADDRESS)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help=PROGRESS_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # command not built yet
                continue
            raise
        module.register(sub)
    from ..protocols import registry

    for spec in registry().values():  # protocols' top-level commands (e.g. vflcrypto align)
        for cmd in spec.commands:
            if cmd.group is None:
                p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description)
                cmd.add_arguments(p)
                p.set_defaults(handler=cmd.run)
    _progress_flag_everywhere(sub)
    return parser


PROGRESS_HELP = ("progress bars on stderr (elapsed time, time left): --progress always, --no-progress never; "
                 "default: when stderr is a terminal and --json is not given. Never on stdout or in JSON")


def _progress_flag_everywhere(sub: argparse._SubParsersAction[Any]) -> None:
    """``--progress``/``--no-progress`` on every command too (``vflcrypto train linreg ... --progress``).

    ``default=SUPPRESS``: a command's parser sets it only when given, so the global flag
    (``vflcrypto --progress train ...``) is not overwritten by the command's default.
    """
    for p in {id(p): p for p in sub.choices.values()}.values():
        if not any("--progress" in a.option_strings for a in p._actions):
            p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                           help=PROGRESS_HELP)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                _progress_flag_everywhere(action)


def _shows_progress(args: argparse.Namespace) -> bool:
    """Whether to draw progress: as ``--progress``/``--no-progress`` say, else on a terminal without ``--json``."""
    if args.progress is not None:
        return bool(args.progress)
    return sys.stderr.isatty() and not getattr(args, "json", False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.parallel is not None or args.ray_address is not None:
        from .. import parallel

        if args.ray_address is not None and (args.parallel or parallel.backend()) != "ray":
            parser.error("--ray-address needs --parallel ray")
        parallel.configure(args.parallel or parallel.backend(), address=args.ray_address)
    from ..runtime import progress
    from ..spec import check_config_args

    try:
        check_config_args(args)  # every protocol setting refused or accepted before any work
        if not _shows_progress(args):
            return int(args.handler(args) or 0)
        with progress.reporting(progress.Bars(sys.stderr)):
            return int(args.handler(args) or 0)
    except VflError as exc:
        print(f"vflcrypto: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vflcrypto: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
