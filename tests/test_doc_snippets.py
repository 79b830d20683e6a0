"""Every ``python`` code block of README.md and docs/*.md runs, as written, in a fresh Python process.

A block uses names its page introduces in prose (``df``, ``y``, ``ids_bank``, the party
tables): :data:`PRELUDES` defines them per page, from the bundled bank and shop tables (a
sample of their common rows, so a block takes seconds). A page with python blocks and no
prelude fails :func:`test_every_page_with_python_blocks_has_a_prelude`. The block itself
runs unchanged except for key sizes: every call whose callee takes ``key_bits`` gets
1024 and every call whose callee takes ``allow_insecure`` gets ``True`` (looked up with
:func:`inspect.signature` at run time, so a block's explicit 2048 becomes 1024 and nothing
else changes). A block fails its test on a non-zero exit, i.e. any exception, and on a
``FitFailedWarning`` (cross-validation turns a failed fit into a warning and a NaN score).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
BLOCK = re.compile(r"```python\n(?P<body>.*?)```", re.S)
TIMEOUT = 600

# Small keys for the blocks' calls: a call f(...) becomes _small_keys(f)(...).
SMALL_KEYS = '''
import functools as _functools
import inspect as _inspect
import warnings as _warnings

from sklearn.exceptions import FitFailedWarning as _FitFailedWarning

_warnings.simplefilter("error", _FitFailedWarning)


def _small_keys(f):
    """f with key_bits=1024 and allow_insecure=True wherever it takes them."""
    try:
        params = _inspect.signature(f).parameters
    except (TypeError, ValueError):
        return f
    if "key_bits" not in params and "allow_insecure" not in params:
        return f

    @_functools.wraps(f)
    def call(*args, **kwargs):
        bound = _inspect.signature(f).bind_partial(*args, **kwargs)
        if "key_bits" in params:
            bound.arguments["key_bits"] = 1024
        if "allow_insecure" in params:
            bound.arguments["allow_insecure"] = True
        return f(*bound.args, **bound.kwargs)

    return call
'''

# The names each page's prose introduces, built from the bundled data (docs/python.md says what they are).
BANK_SHOP = '''
import numpy as np
import pandas as pd
from vflcrypto.data.tables import PartyTable
from vflcrypto.data import __file__ as _data_init
from pathlib import Path as _Path

_data = _Path(_data_init).parent
_bank, _shop = pd.read_csv(_data / "bank.csv"), pd.read_csv(_data / "shop.csv")
ids_bank, ids_shop = _bank["id"].tolist(), _shop["id"].tolist()
_common = _bank.merge(_shop, on="id").set_index("id").head(200)   # common customers, a sample
y = _common.pop("defaulted").to_numpy()
df = _common
X_active = df[["income", "age", "credit_score"]].to_numpy(float)
X_passive = df[["purchases", "basket_value", "visits"]].to_numpy(float)
_ids = tuple(df.index)
active_table = PartyTable(_ids, ("income", "age"), df[["income", "age"]].to_numpy(float),
                          df["credit_score"].to_numpy(float), "credit_score")
passive_table = PartyTable(_ids, ("purchases", "basket_value", "visits"), X_passive)
'''
PRELUDES = {"docs/python.md": BANK_SHOP}


class _SmallKeys(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        node.func = ast.Call(func=ast.Name("_small_keys", ast.Load()), args=[node.func], keywords=[])
        return node


def with_small_keys(source: str) -> str:
    """``source`` with every call's callee wrapped in ``_small_keys``."""
    tree = _SmallKeys().visit(ast.parse(source))
    return ast.unparse(ast.fix_missing_locations(tree))


def python_blocks() -> list[tuple[str, int, str]]:
    """(page, line, code) of every python block."""
    out = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        for m in BLOCK.finditer(text):
            out.append((page, text.count("\n", 0, m.start()) + 1, m.group("body")))
    return out


BLOCKS = python_blocks()


def test_the_docs_have_python_blocks() -> None:
    assert {page for page, _, _ in BLOCKS} >= {"docs/python.md"}


def test_every_page_with_python_blocks_has_a_prelude() -> None:
    assert {page for page, _, _ in BLOCKS} <= set(PRELUDES)


def test_small_keys_rewrite_keeps_the_code_and_wraps_every_call() -> None:
    code = with_small_keys("x = get('logreg').audit(2048)")
    assert code == "x = _small_keys(_small_keys(get)('logreg').audit)(2048)"


@pytest.mark.parametrize(("page", "line", "code"), BLOCKS, ids=[f"{p}:{n}" for p, n, _ in BLOCKS])
def test_python_block_runs(page: str, line: int, code: str, tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(SMALL_KEYS + textwrap.dedent(PRELUDES.get(page, "")) + "\n" + with_small_keys(code) + "\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, f"{page} line {line}:\n{code}\n{proc.stderr[-4000:]}"
