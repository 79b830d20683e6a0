"""The SIMD tests' check that the capped paths agree (helpers for tests/test_kkrt_native.py,
tests/test_okvs.py and tests/test_vole.py).

Each compiled module with SIMD kernels picks its path once, at import, from the CPU and the
``VFLCRYPTO_SIMD`` variable (``0``: the portable C only; ``avx2``: AVX2 at most, on an AVX-512
machine too). :func:`assert_capped_paths_agree` runs the same cases in a fresh process under
each cap and requires the bytes this process got. Cases and results cross the pipe as
msgpack (bytes and integers only).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import msgpack

_CHILD = """
import importlib, sys, msgpack
mod = importlib.import_module(sys.argv[1])
namespace = {}
exec(sys.argv[2], namespace)
cases = msgpack.unpackb(sys.stdin.buffer.read())
sys.stdout.buffer.write(msgpack.packb([mod.simd(), [namespace["run"](mod, case) for case in cases]]))
"""


def assert_capped_paths_agree(module: Any, run_source: str, cases: list[list[Any]], here: list[bytes]) -> None:
    """``run(mod, case) -> bytes``, defined by ``run_source``, gives ``here`` under ``VFLCRYPTO_SIMD=0`` and
    ``=avx2`` in fresh processes, which report the path they took ("scalar", and "avx2" where this CPU has SIMD)."""
    for switch in ("0", "avx2"):
        run = subprocess.run([sys.executable, "-c", _CHILD, module.__name__, run_source],
                             input=msgpack.packb(cases), capture_output=True,
                             env={**os.environ, "VFLCRYPTO_SIMD": switch}, check=True, timeout=60)
        path, there = msgpack.unpackb(run.stdout)
        assert there == here
        if switch == "0":
            assert path == "scalar"
        else:  # at most AVX2; a CPU with AVX-512 (this process's path) has AVX2 too
            assert path == "avx2" if module.simd() != "scalar" else path in ("avx2", "scalar")
