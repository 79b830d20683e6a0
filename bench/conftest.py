"""The benchmarks' pytest set-up: smoke tests run in CI, timed benchmarks only under ``--benchmark-only``.

``make test`` collects bench/ beside tests/ (pyproject's testpaths): every script's tiny-size
smoke test runs there, so a benchmark that can no longer produce its row fails CI. The
pytest-benchmark tests (those taking the ``benchmark`` fixture) time primitives at full
size; they are skipped unless ``--benchmark-only`` asks for them, as ``make bench`` does.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("benchmark_only", default=False):
        return
    skip = pytest.mark.skip(reason="timed benchmark: `make bench` runs it (pytest bench --benchmark-only)")
    for item in items:
        if "benchmark" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)
