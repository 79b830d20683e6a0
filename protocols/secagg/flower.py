"""The Flower App of ``secagg`` (the server as the ServerApp, ``client-k`` on SuperNode k), and its helpers.

Identities are not distributed in-band: the run config names a party configuration
(``party-config``; ``vflcrypto certs --party server --party client-0 ...`` writes one)
that pins every client's Ed25519 identity key; each client reads only its own identity
key file. ``clients`` sets the number of clients; ``drop`` makes the last K of them
vanish in the middle of round 0's aggregation (the ServerApp sees their nodes finish
and treats them as dropped); ``degree`` > 0 selects SecAgg+'s sparse graph.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from vflcrypto.errors import ConfigurationError
from vflcrypto.runtime.steps import Role
from vflcrypto.spec import FlowerSpec

from .math import SecAggConfig
from .messages import CLIENT, SERVER
from .roles import ClientRole, ServerRole, client_names

__all__ = ["config_of", "example_vector", "flower_identities", "flower_spec", "names_of", "parties_of", "vanish_of"]


def flower_identities(party: str, run_config: Mapping[str, Any], names: list[str]) -> tuple[Any, dict[str, bytes]]:
    """(this party's identity key, or None for the server; every client's pinned identity) from ``party-config``.

    Cached per file version: a ClientApp is rebuilt for every message, and reading a
    configuration of n parties for each of the O(n) messages would cost O(n^2).
    """
    path = str(run_config.get("party-config", "") or "")
    if not path:
        raise ConfigurationError("secure aggregation needs party-config = <parties.toml> pinning the clients' "
                                 "identity keys (vflcrypto certs --party server --party client-0 ... writes one)")
    import os

    return _identities(path, os.stat(path).st_mtime_ns, party, tuple(names))


def _identities(path: str, mtime: int, party: str, names: tuple[str, ...]) -> tuple[Any, dict[str, bytes]]:
    return (_identity(path, mtime, party) if party != SERVER else None), _pins(path, mtime, names)


@functools.lru_cache(maxsize=1024)
def _identity(path: str, mtime: int, party: str) -> Any:
    """``party``'s own identity key (its key file read once per configuration version)."""
    return _context(path, mtime, party).identity()


@functools.lru_cache(maxsize=4)
def _config(path: str, mtime: int) -> Any:
    """The parsed party configuration (once per file version)."""
    from vflcrypto.runtime.partyconfig import load_party_config

    return load_party_config(path)


def _context(path: str, mtime: int, party: str) -> Any:
    """``party``'s task context over the parsed configuration."""
    from vflcrypto.spec import TaskContext

    config = _config(path, mtime)
    roles = {n: p.role for n, p in config.parties.items()}
    return TaskContext(party, roles.get(party, ""), roles, {}, config)


@functools.lru_cache(maxsize=4)
def _pins(path: str, mtime: int, names: tuple[str, ...]) -> dict[str, bytes]:
    """Every client's pinned identity."""
    ctx = _context(path, mtime, SERVER)
    return {n: ctx.peer_identity(n) for n in names}


def example_vector(index: int, length: int) -> np.ndarray:
    """Client ``index``'s example vector (public example data)."""
    return np.random.default_rng(index).normal(size=length)  # example data, not secret


def names_of(run_config: Mapping[str, Any]) -> list[str]:
    return client_names(int(run_config.get("clients", 3)))


def parties_of(run_config: Mapping[str, Any]) -> dict[str, str]:
    return {SERVER: SERVER, **{n: CLIENT for n in names_of(run_config)}}


def vanish_of(party: str, run_config: Mapping[str, Any], phase: str = "masked") -> tuple[int, str] | None:
    names, k = names_of(run_config), int(run_config.get("drop", 0))
    return (0, phase) if k and party in names[-k:] else None


def config_of(run_config: Mapping[str, Any]) -> SecAggConfig:
    """The secure-aggregation parameters of the run config (0 = the default graph / threshold)."""
    return SecAggConfig(degree=int(run_config.get("degree", 0)) or None,
                        threshold=int(run_config.get("threshold", 0)) or None,
                        ring_bits=int(run_config.get("ring-bits", 64)),
                        frac_bits=int(run_config.get("frac-bits", 24)),
                        value_bits=int(run_config.get("value-bits", 40)))


def flower_spec() -> FlowerSpec:
    """``protocol = "secagg"``: every client sums its example vector of ``length`` values."""

    def make_role(party: str, run_config: Mapping[str, Any]) -> Role[Any]:
        names, length = names_of(run_config), int(run_config.get("length", 1000))
        identity, pins = flower_identities(party, run_config, names)
        run_id = str(run_config.get("_run-id", ""))
        if party == SERVER:
            return ServerRole(clients=names, length=length, pins=pins, run_id=run_id, config=config_of(run_config))
        i = names.index(party)
        return ClientRole([example_vector(i, length)], name=party, identity=identity, pins=pins, run_id=run_id,
                          config=config_of(run_config), vanish_at=vanish_of(party, run_config))

    def summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
        res = results[SERVER][-1]
        names, length = names_of(run_config), int(run_config.get("length", 1000))
        want = np.sum([example_vector(names.index(c), length) for c in res.survivors], 0)
        err = float(np.abs(res.total - want).max())
        return {"lines": [f"[vflcrypto] secagg: sum over {len(res.survivors)} of {len(names)} clients, "
                          f"max error {err:.2e}"], "survivors": res.survivors, "max_error": err}

    return FlowerSpec(SERVER, parties_of, make_role, summary, clients_wait_first=True)
