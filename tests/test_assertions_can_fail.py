"""No test of tests/ rests on an assertion that cannot fail (read with :mod:`ast`, not run).

Four patterns, each of which passes whatever the code under test does:

* ``pytest.raises(Exception)`` (or ``BaseException``): any error passes, a typo's
  ``NameError`` included; name the library's error class of :mod:`vflcrypto.errors`.
* ``isinstance(x, type)``: true of every class.
* ``0 <= x <= 1`` (``<`` or ``<=``, ``0``/``0.0`` and ``1``/``1.0``) as the only check of ``x``
  in a test: every AUC, accuracy or probability passes; compare with a reference or a
  stated margin.
* a test whose last assertion is only ``x is not None`` or ``x >= 0``: the result exists
  (or is a count or a duration), but nothing says it is right.

The detector is tested on snippets first, so this test can fail too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _number(node: ast.AST, value: float) -> bool:
    return (isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == value)


def _conjuncts(expr: ast.expr) -> Iterator[ast.expr]:
    if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.And):
        for v in expr.values:
            yield from _conjuncts(v)
    else:
        yield expr


def _own_nodes(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The nodes of a test's body, not those of functions, lambdas or classes defined in it."""
    stack: list[ast.AST] = list(reversed(fn.body))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _tests(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            yield from (m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and m.name.startswith("test"))


def _unit_range_subject(expr: ast.expr) -> ast.expr | None:
    """``x`` of ``0 <= x <= 1`` (any mix of < and <=), else None."""
    if (isinstance(expr, ast.Compare) and len(expr.ops) == 2
            and all(isinstance(op, (ast.Lt, ast.LtE)) for op in expr.ops)
            and _number(expr.left, 0) and _number(expr.comparators[1], 1)):
        return expr.comparators[0]
    return None


def _vacuous(expr: ast.expr) -> bool:
    """``x is not None``, ``x >= 0`` or ``0 <= x``: true of any result, count or duration."""
    if not isinstance(expr, ast.Compare) or len(expr.ops) != 1:
        return False
    op, left, right = expr.ops[0], expr.left, expr.comparators[0]
    return ((isinstance(op, ast.IsNot) and isinstance(right, ast.Constant) and right.value is None)
            or (isinstance(op, ast.GtE) and _number(right, 0))
            or (isinstance(op, ast.LtE) and _number(left, 0)))


def _checked(fn: ast.FunctionDef | ast.AsyncFunctionDef, skip: ast.expr) -> set[str]:
    """The expressions a test checks other than by ``skip`` and by vacuous comparisons: the
    operands of its assertions' comparisons and the arguments of ``assert*`` calls."""
    out: set[str] = set()
    for node in _own_nodes(fn):
        if isinstance(node, ast.Assert):
            for sub in ast.walk(node.test):
                if isinstance(sub, ast.Compare) and sub is not skip and not _vacuous(sub):
                    out.update(ast.unparse(e) for e in [sub.left, *sub.comparators])
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name.startswith("assert"):
                out.update(ast.unparse(a) for a in node.args)
    return out


def findings(source: str) -> list[tuple[int, str]]:
    """(line, what) for every assertion of ``source`` that cannot fail."""
    tree = ast.parse(source)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = node.args[0]
        caught = first.elts if isinstance(first, ast.Tuple) else [first]
        if name == "raises" and any(isinstance(e, ast.Name) and e.id in ("Exception", "BaseException")
                                    for e in caught):
            out.append((node.lineno, "pytest.raises(Exception): name the vflcrypto.errors class and match="))
        if (name == "isinstance" and len(node.args) == 2 and isinstance(node.args[1], ast.Name)
                and node.args[1].id == "type"):
            out.append((node.lineno, "isinstance(x, type): true of every class"))
    for fn in _tests(tree):
        asserts = sorted((n for n in _own_nodes(fn) if isinstance(n, ast.Assert)),
                         key=lambda n: (n.lineno, n.col_offset))
        for a in asserts:
            for c in _conjuncts(a.test):
                subject = _unit_range_subject(c)
                if subject is not None and ast.unparse(subject) not in _checked(fn, c):
                    out.append((a.lineno, f"{fn.name}: {ast.unparse(c)} is the only check of "
                                          f"{ast.unparse(subject)}"))
        if asserts and all(_vacuous(c) for c in _conjuncts(asserts[-1].test)):
            out.append((asserts[-1].lineno, f"{fn.name}: the last assertion only says a result exists or "
                                            f"is >= 0: {ast.unparse(asserts[-1].test)}"))
    return out


# --------------------------------------------------------------------------- the detector itself


CANNOT_FAIL = {
    "raises Exception": "def test_a():\n    with pytest.raises(Exception):\n        f()\n",
    "raises Exception with match": "def test_a():\n    with pytest.raises(Exception, match='x'):\n        f()\n",
    "raises a tuple with BaseException": "def test_a():\n    with raises((ValueError, BaseException)):\n        f()\n",
    "isinstance type": "def test_a():\n    assert isinstance(Thing, type)\n    assert f() == 1\n",
    "unit range only": "def test_a():\n    auc = f()\n    assert 0.0 <= auc <= 1.0\n    assert g() == 2\n",
    "unit range beside is not None": "def test_a():\n    assert r.acc is not None and 0 < r.acc < 1\n",
    "last is not None": "def test_a():\n    r = f()\n    assert r.x == 1\n    assert r.y is not None\n",
    "last >= 0 in a block": "def test_a():\n    try:\n        assert f() == 1\n        assert g() >= 0.0\n"
                            "    finally:\n        h()\n",
    "method of a Test class": "class TestA:\n    def test_a(self):\n        assert f() is not None\n",
}

CAN_FAIL = {
    "specific error": "def test_a():\n    with pytest.raises(InputDataError, match='x'):\n        f()\n",
    "isinstance of a class": "def test_a():\n    assert isinstance(v, PaillierVector)\n",
    "unit range beside a reference": "def test_a():\n    assert 0 <= auc <= 1 and auc == ref_auc\n",
    "unit range beside assert_allclose": "def test_a():\n    assert 0 <= p <= 1\n"
                                         "    np.testing.assert_allclose(p, q)\n",
    "other ranges": "def test_a():\n    assert 0 <= v < 1 << 60\n    assert 1.5 < r < 1.52\n",
    "guard then a check": "def test_a():\n    assert r is not None and r.bits == 512\n",
    "not None before the last check": "def test_a():\n    assert r is not None\n    assert r.x == 3\n",
    "helper's own assertion": "def test_a():\n    def helper(x):\n        assert x is not None\n"
                              "    assert helper(1) == 2\n",
    "not a test": "def check(x):\n    assert x is not None\n",
}


@pytest.mark.parametrize("case", sorted(CANNOT_FAIL))
def test_the_detector_flags_each_assertion_that_cannot_fail(case: str) -> None:
    assert findings(CANNOT_FAIL[case]), case


@pytest.mark.parametrize("case", sorted(CAN_FAIL))
def test_the_detector_leaves_assertions_that_can_fail(case: str) -> None:
    assert findings(CAN_FAIL[case]) == [], case


def test_no_test_file_has_an_assertion_that_cannot_fail() -> None:
    files = sorted(TESTS.glob("*.py"))
    assert len(files) > 50  # the scan sees the suite
    bad = [f"{p.name}:{line}: {what}" for p in files for line, what in findings(p.read_text(encoding="utf-8"))]
    assert not bad, "\n".join(bad)
