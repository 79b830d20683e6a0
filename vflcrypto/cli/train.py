"""``vflcrypto train MODEL``: train a vertical model from CSV files, every party in-process.

The models are the ``train`` commands of the protocols in the registry
(:func:`vflcrypto.protocols.registry`, ``SPEC.commands``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["register"]


def _outputs_first(run: Callable[[argparse.Namespace], int],
                   check_scheme: Callable[[str], None]) -> Callable[[argparse.Namespace], int]:
    """Check ``--scheme``, ``--model-dir`` (refused if it holds an earlier model, unless ``--overwrite``)
    and ``--html`` before any work (training never finishes and then
    fails to save); with ``--html``, draw every run the command made (alignment, training, prediction) as a
    report. The model directory and the report are published together when the command succeeds, or
    neither is (:func:`~vflcrypto.data.files.atomic_set`)."""

    def checked(args: argparse.Namespace) -> int:
        from ..data.files import atomic_set, atomic_write_text, check_model_dir, check_outputs
        from ..runtime.transcript import capture

        if getattr(args, "scheme", None):
            check_scheme(args.scheme)
        if getattr(args, "model_dir", None):
            check_model_dir(args.model_dir, overwrite=getattr(args, "overwrite", False), what="--model-dir")
        if not args.html:
            with atomic_set():
                return run(args)
        check_outputs({"HTML report": args.html})
        with atomic_set():
            with capture() as runs:
                code = run(args)
            atomic_write_text(args.html, _report(args.model, runs))
        print(f"wrote {args.html}", file=sys.stderr)
        return code

    return checked


def _report(model: str, runs: list[Any]) -> str:
    """The report of a training command's runs: declared leakage per message (no attacks: those need the audit)."""
    from ..audit.ledger import AuditOutcome, audit_runs
    from ..audit.report import render_html
    from ..cli.audit import load_all_protocols

    load_all_protocols()
    named = {}
    for i, t in enumerate(r for r in runs if r.entries()):
        protocols = sorted({e.kind.split(".", 1)[0] for e in t.entries()})
        named[f"{i + 1}. {' + '.join(protocols)}"] = t
    report, sections = audit_runs(named)
    outcome = AuditOutcome(model, report, sections=sections, transcripts=tuple(named.items()))
    return render_html(outcome, title=f"vflcrypto train {model}: what crossed each party boundary")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ..protocols import registry

    p = sub.add_parser("train", help="train a vertical model on CSV files (parties in-process)")
    models = p.add_subparsers(dest="model", required=True, metavar="MODEL")
    for spec in registry().values():
        for cmd in spec.commands:
            if cmd.group != "train":
                continue
            m = models.add_parser(cmd.name, help=cmd.help, description=cmd.description)
            cmd.add_arguments(m)
            if "--model-dir" in m._option_string_actions:
                m.add_argument("--overwrite", action="store_true",
                               help="replace the model already in --model-dir (its files are removed first; "
                                    "without this flag such a directory is refused)")
            spec.scheme_argument(m)  # --help offers only the schemes this protocol accepts
            m.add_argument("--html", metavar="FILE", help="also write an HTML report of every run this command makes "
                                                          "(sequence diagrams, what each role received)")
            m.set_defaults(handler=_outputs_first(cmd.run, spec.check_scheme))
