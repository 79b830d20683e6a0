# One-command entry points. Each target creates the virtual environment on first use.
PYTHON ?= python3.11
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed
# pytest-xdist workers for `make test`: three test files run at once on two cores (each file's
# tests stay in one worker, in order, with its module fixtures; each mutation test is a unit of its
# own: tests/conftest.py's scheduler); much of the suite waits on subprocesses, Flower start-up and
# sockets rather than on the cores. Measured on a 2-core machine, 3 workers: 17 min 11 s (2,952 s of
# test time), after 35 min 39 s in the same session before the last round of cuts (10 min of it a
# hung party process). --no-loadscope-reorder keeps the collection order of tests/conftest.py (the
# longest files first) instead of xdist's most-tests-first.
TEST_WORKERS ?= 3

.PHONY: demo test lint bench bench-compare clean

$(STAMP): pyproject.toml setup.py vflcrypto/he/_groupprod.c vflcrypto/psi/_blake2b.c vflcrypto/psi/_vole.c \
		vflcrypto/psi/_okvs.c vflcrypto/psi/_aesni.h vflcrypto/psi/_simd.h vflcrypto/data/_csvscan.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0  # pinned CPU build (deep extra); unpinned pulls CUDA
	# PYTHONWARNINGS: setuptools' "Editable installation ... Please be careful with folders in your
	# working directory" notice (emitted by every editable mode; strict and compat warn too) is
	# not the user's to act on; the filter matches only messages starting with that text.
	PYTHONWARNINGS='ignore:Editable installation' \
	  $(BIN)/python -m pip install --quiet -e '.[dev,flower,deep,estimators,heu]'  # flower: the Flower App; deep: torch; heu: OU interop tests
	touch $(STAMP)

demo: $(STAMP)  ## run the main job on bundled example data, no servers
	$(BIN)/vflcrypto demo

test: $(STAMP)  ## lint, type-check and run the whole test suite
	$(BIN)/ruff check vflcrypto protocols tests bench flower
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15

bench: $(STAMP)  ## pytest-benchmark suites for the primitives (not part of CI)
	$(BIN)/python -m pytest bench -q --benchmark-only

bench-compare: $(STAMP)  ## side-by-side throughput against phe, TenSEAL and HEU
	$(BIN)/vflcrypto bench gradients

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks build *.egg-info
