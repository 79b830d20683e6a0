"""Every ``--help`` of the command line is plain text: no reStructuredText from the docstrings it shows."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from vflcrypto.cli import build_parser
from vflcrypto.cli.helptext import plain_text

MARKUP = re.compile(r"``|:(?:py:)?(?:func|mod|class|meth|attr|data|obj|exc):`")


def all_helps(parser: argparse.ArgumentParser, path: str = "vflcrypto") -> Iterator[tuple[str, str]]:
    """(command, its ``--help`` text) for the parser and every sub-command below it."""
    yield path, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from all_helps(sub, f"{path} {name}")


def test_no_help_of_any_command_contains_restructuredtext_markup() -> None:
    helps = dict(all_helps(build_parser()))
    assert {"vflcrypto align", "vflcrypto train woe", "vflcrypto party train linreg",
            "vflcrypto examples"} <= set(helps)
    marked = {cmd: MARKUP.findall(text) for cmd, text in helps.items() if MARKUP.search(text)}
    assert marked == {}


def test_descriptions_come_from_the_docstrings_with_their_text_kept() -> None:
    helps = dict(all_helps(build_parser()))
    assert "Rows are aligned by PSI first unless\n--aligned. The JSON summary" in helps["vflcrypto train woe"]


def test_plain_text_keeps_the_words_of_roles_and_literals() -> None:
    rst = ("Writes ``DIR/<stem>.csv``; see :func:`vflcrypto.protocols.registry`, :class:`~a.b.Command` "
           "and :mod:`vflcrypto.cli`. Example::\n\n    vflcrypto align\n")
    assert plain_text(rst) == ("Writes DIR/<stem>.csv; see vflcrypto.protocols.registry, Command "
                               "and vflcrypto.cli. Example:\n\n    vflcrypto align\n")
