"""The Flower App of ``protovfl``: the server as the ServerApp, ``party-0`` … ``party-2`` as SuperNodes, on the digits.

Run config: ``aligned`` (aligned training rows, default 20), ``seed``, ``rounds``,
``local-epochs``, ``head-epochs``, ``plaintext`` (statistics in the clear) and, for the
secure mode, ``party-config`` pinning every party's identity key
(``vflcrypto certs --party server --party party-0 --party party-1 --party party-2``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.runtime.steps import Role
from vflcrypto.spec import FlowerSpec

from .._repvfl import party_names
from ..secagg.flower import flower_identities
from .data import BANDS, digits_example
from .math import ProtoConfig
from .messages import PARTY, SERVER
from .roles import PartyRole, ServerRole

__all__ = ["flower_config", "flower_spec"]


def flower_config(run_config: Mapping[str, Any]) -> ProtoConfig:
    """The configuration of a Flower run (its run config)."""
    return ProtoConfig(rounds=int(run_config.get("rounds", 3)), local_epochs=int(run_config.get("local-epochs", 10)),
                       head_epochs=int(run_config.get("head-epochs", 300)), seed=int(run_config.get("seed", 0)),
                       secure=not bool(run_config.get("plaintext", False)))


def flower_spec() -> FlowerSpec:
    names = party_names(len(BANDS))

    def parties(run_config: Mapping[str, Any]) -> dict[str, str]:
        return {SERVER: SERVER, **{p: PARTY for p in names}}

    def make_role(party: str, run_config: Mapping[str, Any]) -> Role[Any]:
        cfg = flower_config(run_config)
        server, data = digits_example(int(run_config.get("aligned", 20)), seed=int(run_config.get("seed", 0)))
        identity, pins = flower_identities(party, run_config, names) if cfg.secure else (None, None)
        run_id = str(run_config.get("_run-id", ""))
        if party == SERVER:
            return ServerRole(server, parties=names, config=cfg, n_test=len(data[0].X_test), pins=pins, run_id=run_id)
        k = names.index(party)
        return PartyRole(data[k], index=k, name=party, config=cfg, identity=identity, pins=pins, run_id=run_id)

    def summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
        acc = results[SERVER].test_accuracy
        return {"lines": [f"[vflcrypto] protovfl: test accuracy {acc:.4f}"], "test_accuracy": acc}

    return FlowerSpec(SERVER, parties, make_role, summary)
