"""The Flower App of ``hfl``: FedAvg/FedProx/SCAFFOLD on the digits across ``clients`` SuperNodes.

The same run config as ``secagg``'s App (``party-config``, ``clients``, ``drop``,
``degree``) plus ``hfl-algorithm``, ``hfl-rounds``, ``skew`` and ``plaintext``, and
DP-FedAvg's ``dp-epsilon`` or ``dp-noise`` (0: off), ``dp-clip``, ``dp-delta`` and
``dp-min-clients`` (0: every client); the ServerApp's summary then carries ``privacy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.runtime.steps import Role
from vflcrypto.spec import FlowerSpec

from ..secagg.flower import config_of, flower_identities, names_of, parties_of, vanish_of
from .data import digits_clients
from .math import HFLConfig
from .messages import SERVER
from .roles import ClientRole, ServerRole

__all__ = ["flower_spec"]


def _config(run_config: Mapping[str, Any]) -> HFLConfig:
    return HFLConfig(algorithm=str(run_config.get("hfl-algorithm", "fedavg")),
                     rounds=int(run_config.get("hfl-rounds", 5)), secure=not bool(run_config.get("plaintext", False)),
                     dp_epsilon=float(run_config.get("dp-epsilon", 0.0)) or None,
                     dp_noise=float(run_config.get("dp-noise", 0.0)) or None,
                     dp_clip=float(run_config.get("dp-clip", 1.0)), dp_delta=float(run_config.get("dp-delta", 1e-5)),
                     dp_min_clients=int(run_config.get("dp-min-clients", 0)) or None)


def flower_spec() -> FlowerSpec:
    def make_role(party: str, run_config: Mapping[str, Any]) -> Role[Any]:
        names = names_of(run_config)
        data = digits_clients(len(names), seed=int(run_config.get("seed", 0)), skew=float(run_config.get("skew", 0)))
        identity, pins = flower_identities(party, run_config, names)
        run_id, cfg = str(run_config.get("_run-id", "")), _config(run_config)
        if party == SERVER:
            return ServerRole(clients=names, n_features=data[0].X.shape[1], n_classes=10, config=cfg, pins=pins,
                              run_id=run_id, secagg=config_of(run_config))
        i = names.index(party)
        return ClientRole(data[i], name=party, index=i, n_classes=10, config=cfg, identity=identity, pins=pins,
                          run_id=run_id, secagg=config_of(run_config), vanish_at=vanish_of(party, run_config))

    def summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
        res = results[SERVER]
        lines = [f"[vflcrypto] hfl: test accuracy {res.test_accuracy:.4f}, survivors "
                 f"{[len(s) for s in res.survivors]}"]
        lines += [f"[vflcrypto] hfl: {d} ({g['epsilon']:.4g}, {g['delta']:.2g})-DP at client level"
                  for d, g in res.privacy.items()]
        out = {"lines": lines, "test_accuracy": res.test_accuracy, "survivors": res.survivors}
        return {**out, "privacy": res.privacy} if res.privacy else out

    return FlowerSpec(SERVER, parties_of, make_role, summary, clients_wait_first=True)
