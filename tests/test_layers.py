"""Imports point down only: vflcrypto's primitives and runtime never import protocols."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_low_level_modules_do_not_import_protocols() -> None:
    offenders = []
    for path in (ROOT / "vflcrypto").rglob("*.py"):
        if "cli" in path.relative_to(ROOT / "vflcrypto").parts:
            continue  # the entry-point layer sits above protocols
        for name in _imports(path):
            if name == "protocols" or name.startswith("protocols."):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offenders, offenders


def test_no_pickle_anywhere_in_the_package() -> None:
    offenders = []
    for pkg in ("vflcrypto", "protocols"):
        for path in (ROOT / pkg).rglob("*.py"):
            names = _imports(path)
            if {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve"} & names:
                offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, offenders
