"""Shared fixtures: small Paillier keys (tests opt in to insecure sizes explicitly)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from vflcrypto.he.paillier import PaillierPrivateKey, PaillierPublicKey, generate_keypair


@pytest.fixture(scope="session")
def paillier_keys() -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    """A 1024-bit keypair (insecure size, for tests only)."""
    return generate_keypair(1024, allow_insecure=True)


@pytest.fixture(scope="session")
def small_paillier_keys() -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    """A 512-bit keypair (insecure size, for fast tests only)."""
    return generate_keypair(512, allow_insecure=True)


def spawn_connected_then_hanging(cfg_path: Path, name: str, task: str, seconds: float) -> subprocess.Popen[bytes]:
    """A real party process that connects with ``task`` and then hangs (a peer to kill or stall).

    It prints ``connected`` once its links are up; the caller kills it.
    """
    script = textwrap.dedent(f"""
        import time
        from vflcrypto.runtime.partyconfig import load_party_config
        from vflcrypto.runtime.identity import PartyIdentity
        from vflcrypto.runtime.network import connect_party
        cfg = load_party_config({str(cfg_path)!r})
        p = cfg.party({name!r})
        party = connect_party(cfg, PartyIdentity.from_files({name!r}, p.cert_path, p.key_path,
                                                             cfg.ca_path), {task!r})
        print("connected", flush=True)
        time.sleep({seconds!r})
    """)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            cwd=Path(__file__).resolve().parents[1])


AUDIT_KEY_BITS = 512  # insecure size: audits at test speed
_AUDITS: dict[str, Any] = {}


def tamper_sends(channels: Mapping[str, Any], kind: type, fn: Callable[[Any], Any]) -> Mapping[str, Any]:
    """``channels`` with every outgoing message of ``kind`` replaced by ``fn(message)`` (a hostile peer)."""
    for ch in channels.values():
        honest = ch.send
        ch.send = (lambda msg, honest=honest, **kw: honest(fn(msg) if isinstance(msg, kind) else msg, **kw))
    return channels


def honest_audit(name: str) -> Any:
    """The audit of protocol ``name`` at test key sizes, run once per session (honest runs only: never a mutation)."""
    if name not in _AUDITS:
        from vflcrypto.protocols import get

        _AUDITS[name] = get(name).run_audit(AUDIT_KEY_BITS, allow_insecure=True)
    return _AUDITS[name]


#: modules whose tests are each their own pytest-xdist work unit (see :func:`pytest_xdist_make_scheduler`)
PER_TEST_MODULES = frozenset({"tests/test_privacy_mutations.py"})
#: the one work unit of every test that calls :func:`honest_audit` (see :func:`pytest_xdist_make_scheduler`)
HONEST_AUDIT_UNIT = "honest audits"


def honest_audit_tests(tests_dir: Path | None = None) -> frozenset[str]:
    """``tests/<file>::<test>`` of every test function whose body calls :func:`honest_audit` (read with ``ast``)."""
    tests_dir = tests_dir or Path(__file__).resolve().parent
    found = set()
    for path in sorted(tests_dir.glob("test_*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.FunctionDef) and node.name.startswith("test")
                    and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "honest_audit"
                            for n in ast.walk(node))):
                found.add(f"{tests_dir.name}/{path.name}::{node.name}")
    return frozenset(found)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: absent with -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, except that each test of :data:`PER_TEST_MODULES` is a work unit of its own,
    and that every test calling :func:`honest_audit` is in one work unit (:data:`HONEST_AUDIT_UNIT`).

    Every mutation test runs a whole audit with one protection switched off (5–60 s each, 80 of
    them) and shares nothing with its neighbours but the cached honest audits; as one file-sized
    unit they kept one worker busy for a quarter of an hour after the others had finished.
    An honest audit is cached per worker process: spread over the workers, linear regression's
    (its CKKS session: 45–60 s on a loaded machine) ran up to four times in one suite (the report,
    the mutation suite's honest run, the scorecard, the coordinator's view); in one unit, once.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    honest = honest_audit_tests()

    class FileOrTestScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.split("[", 1)[0] in honest:
                return HONEST_AUDIT_UNIT
            module = nodeid.split("::", 1)[0]
            return nodeid if module in PER_TEST_MODULES else module

    return FileOrTestScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the modules with the most ``slow`` tests first, each module's tests in their own order.

    ``make test`` hands whole modules (and each test of :data:`PER_TEST_MODULES`) to three pytest-xdist
    workers in collection order
    (``--dist loadfile --no-loadscope-reorder``); starting the longest modules (the Flower
    Apps, the README tour, every protocol's report) first keeps every worker busy to the end
    instead of leaving one long module running alone.
    """
    del config

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    slow: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(module(item), i)
        if item.get_closest_marker("slow") is not None:
            slow[module(item)] = slow.get(module(item), 0) + 1
    items.sort(key=lambda it: (-slow.get(module(it), 0), first[module(it)]))


def use_native(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    """Switch the C group-product kernel (:mod:`vflcrypto.he.native`) on or off for one test.

    On where it is not built skips the test, saying why (tests/test_native_groupprod.py fails
    instead where a C compiler was at hand)."""
    from vflcrypto.he import native

    monkeypatch.setenv("VFLCRYPTO_NATIVE", "1" if on else "0")
    monkeypatch.setattr(native, "_state", {})  # loaded afresh; the test's end restores the real one
    if on and not native.available():
        pytest.skip(f"the C kernel is not in use: {native.why_not()}")
