"""Plain-text ``--help``: the commands' descriptions are their modules' docstrings (reStructuredText).

Every parser of the command line is a :class:`HelpParser`, whose formatter renders the
docstring markup a terminal would show raw (````--json````, ``:func:`~a.b.c```, a
paragraph ending ``::``) as plain text, in descriptions and in every argument's help. The
docstrings stay valid reStructuredText for the API documentation; only ``--help`` changes.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, NoReturn

__all__ = ["HelpParser", "PlainHelpFormatter", "plain_text"]

_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|data|obj|exc|const):`~?([^`]+)`")
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
_LITERAL_BLOCK = re.compile(r"(\S)::$", re.MULTILINE)
_BARE_LITERAL_BLOCK = re.compile(r"^\s*::\s*\n", re.MULTILINE)


def _role_target(match: re.Match[str]) -> str:
    """``:func:`~a.b.c``` shows ``c`` (the tilde's meaning in Sphinx); otherwise the whole target."""
    whole = match.group(0)
    target = match.group(1)
    return target.rsplit(".", 1)[-1] if "`~" in whole else target


def plain_text(text: str) -> str:
    """``text`` without reStructuredText markup: roles and inline literals become their text."""
    text = _ROLE.sub(_role_target, text)
    text = _LITERAL.sub(r"\1", text)
    text = _BARE_LITERAL_BLOCK.sub("", text)
    return _LITERAL_BLOCK.sub(r"\1:", text)


class PlainHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions keep their line breaks (as written in the docstring); all help text is plain."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return super()._fill_text(plain_text(text), width, indent)

    def _expand_help(self, action: argparse.Action) -> str:
        return plain_text(super()._expand_help(action))


class HelpParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` with :class:`PlainHelpFormatter`; its sub-command parsers are ``HelpParser`` too.

    A command line it refuses ends in one line on stderr (what is wrong, where ``--help``
    lists the options) and exit code 2, not argparse's usage block before the error.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", PlainHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
