"""Imports point down only: vflcrypto's primitives and runtime never import vflcrypto.protocols.

The entry points (the CLI, ``vflcrypto.__main__`` and the scikit-learn estimators,
``vflcrypto.estimators``) sit on top of the protocols and may import them. Inside the low
layer, each subpackage imports only the subpackages below it (:data:`ALLOWED`, the picture
in ``vflcrypto/__init__.py``'s docstring), every subpackage states its role and public
names, and no module grows past :data:`MAX_LINES`.
"""

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


LOW, PROTOCOLS, ENTRY = "low", "protocols", "entry"


def _layer_of_path(path: Path) -> str:
    rel = path.relative_to(ROOT)
    if rel.parts[0] == "protocols":
        return PROTOCOLS
    entry = rel.parts[:2] == ("vflcrypto", "cli") or rel in (Path("vflcrypto/__main__.py"),
                                                             Path("vflcrypto/estimators.py"))
    return ENTRY if entry else LOW


def _layer_of_module(name: str) -> str | None:
    if name == "vflcrypto.protocols" or name.startswith("vflcrypto.protocols."):
        return PROTOCOLS
    if name in ("vflcrypto.cli", "vflcrypto.estimators") or name.startswith("vflcrypto.cli."):
        return ENTRY
    if name == "vflcrypto" or name.startswith("vflcrypto."):
        return LOW
    return None


def _package_files() -> list[Path]:
    return [*(ROOT / "vflcrypto").rglob("*.py"), *(ROOT / "protocols").rglob("*.py")]


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "protocols":
        parts = ["vflcrypto", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolved_imports(path: Path) -> set[str]:
    """Absolute module names imported by ``path`` (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = _module_name(path).split(".")
    package = me if path.name == "__init__.py" else me[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
            out.add(mod)
            out.update(f"{mod}.{alias.name}" for alias in node.names)  # "from pkg import module"
    return out


def test_imports_point_down_only() -> None:
    """low (primitives, runtime) <- protocols <- entry (cli); nothing imports upward."""
    rank = {LOW: 0, PROTOCOLS: 1, ENTRY: 2}
    offenders = []
    for path in _package_files():
        mine = _layer_of_path(path)
        for name in _resolved_imports(path):
            theirs = _layer_of_module(name)
            if theirs is not None and rank[theirs] > rank[mine]:
                offenders.append(f"{path.relative_to(ROOT)} ({mine}) imports {name} ({theirs})")
            if name == "protocols" or name.startswith("protocols."):
                offenders.append(f"{path.relative_to(ROOT)} imports the old top-level name {name}")
    assert not offenders, offenders


def test_no_import_cycles_between_modules() -> None:
    """The module import graph of the package has no cycle, counting every import
    (module level, inside functions and under ``TYPE_CHECKING``)."""
    mods = {_module_name(p): p for p in _package_files()}
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                me = name.split(".")
                package = me if path.name == "__init__.py" else me[:-1]
                base = package[: len(package) - node.level + 1] if node.level else []
                mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
                deps |= {m for m in (mod, *(f"{mod}.{a.name}" for a in node.names)) if m in mods}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in mods}
        graph[name] = deps - {name} - {n for n in deps if name.startswith(n + ".")}  # a package's own parents
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt):], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, cycles


def test_no_pickle_anywhere_in_the_package() -> None:
    offenders = []
    for pkg in ("vflcrypto", "protocols"):  # protocols/ is vflcrypto.protocols
        for path in (ROOT / pkg).rglob("*.py"):
            names = _imports(path)
            if {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve"} & names:
                offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, offenders


def test_every_package_directory_is_installed() -> None:
    """pyproject's explicit package list names every package folder (a wheel would miss one)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    found = {_module_name(init) for init in _package_files() if init.name == "__init__.py"}
    assert found == listed, {"not listed": sorted(found - listed), "listed but absent": sorted(listed - found)}


# The low layer's groups (a subpackage, or a top-level module) and what each may import.
# Siblings of one level (he, psi, ml) do not import each other.
_FOUNDATION = {"vflcrypto", "errors", "pinned_pool", "parallel"}
ALLOWED: dict[str, set[str]] = {
    "vflcrypto": set(),
    "errors": {"vflcrypto"},
    "pinned_pool": {"vflcrypto"},
    "parallel": {"vflcrypto", "errors", "pinned_pool"},  # its one-line ClusterError; its process pool
    "he": _FOUNDATION,
    "psi": _FOUNDATION,
    "ml": _FOUNDATION,
    "privacy": _FOUNDATION,
    "sharing": _FOUNDATION | {"he"},
    "data": _FOUNDATION | {"psi", "ml"},
    "runtime": _FOUNDATION | {"he", "data"},
    "audit": _FOUNDATION | {"he", "ml", "data", "runtime", "privacy"},
    "spec": _FOUNDATION | {"he", "runtime", "audit"},
}
SUBPACKAGES = ("he", "sharing", "psi", "runtime", "audit", "ml", "data", "privacy", "cli")
MAX_LINES = 600


def _group(module: str) -> str:
    """The low-layer group of a module: its subpackage, or its own name at the top level."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_subpackages_import_only_the_layers_below() -> None:
    """he/psi/ml/privacy <- sharing, data <- runtime <- audit <- spec: checked on every import, lazy ones too."""
    mods = {_module_name(p): p for p in _package_files()}
    offenders = []
    groups_seen = set()
    for name, path in mods.items():
        if _layer_of_path(path) != LOW:
            continue
        mine = _group(name)
        groups_seen.add(mine)
        assert mine in ALLOWED, f"{path.relative_to(ROOT)}: group {mine!r} has no entry in ALLOWED"
        for dep in _resolved_imports(path):
            if dep not in mods or _layer_of_module(dep) != LOW:
                continue
            theirs = _group(dep)
            if theirs != mine and theirs not in ALLOWED[mine]:
                offenders.append(f"{path.relative_to(ROOT)} ({mine}) imports {dep} ({theirs})")
    assert not offenders, offenders
    assert {"he", "psi", "ml", "sharing", "data", "runtime", "audit"} <= groups_seen


def test_every_subpackage_states_its_role_and_public_names() -> None:
    """Each subpackage's __init__ has a docstring naming what it may import, and an __all__ of real names."""
    import importlib

    for sub in SUBPACKAGES:
        init = ROOT / "vflcrypto" / sub / "__init__.py"
        module = ast.parse(init.read_text(encoding="utf-8"))
        doc = ast.get_docstring(module)
        assert doc and len(doc.splitlines()) >= 3, f"{sub}: no docstring stating its role"
        pkg = importlib.import_module(f"vflcrypto.{sub}")
        if sub == "cli":
            continue  # the entry point: its public name is main
        assert "Imports:" in doc, f"{sub}: the docstring does not say what it may import"
        names = getattr(pkg, "__all__", None)
        assert names, f"{sub}: no __all__"
        for n in names:
            submodule = (init.parent / f"{n}.py").exists() or (init.parent / n / "__init__.py").exists()
            assert hasattr(pkg, n) or submodule, f"vflcrypto.{sub}.__all__ names {n!r}: neither defined nor a module"


def test_no_module_is_over_the_size_limit() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _package_files()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long
