"""Secure linear regression over channels: one function per party, and ``run_local`` (every party in this process)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vflcrypto.data.tables import PartyTable
from vflcrypto.errors import InputDataError
from vflcrypto.he.ckks import CKKSContext
from vflcrypto.he.paillier import PaillierPrivateKey, PaillierPublicKey
from vflcrypto.runtime.channel import (
    DEFAULT_TIMEOUT,
    AuditTap,
    Channel,
    Endpoint,
    LocalNetwork,
    Transcript,
    run_parties,
)
from vflcrypto.runtime.steps import drive

from .config import LinRegConfig
from .coordinator import CoordinatorResult, CoordinatorRole
from .math import refuse_small_batches
from .messages import (
    ACTIVE,
    COORD,
    PASSIVE,
)
from .model import PartyModel
from .roles import ActiveRole, PartyResult, PassiveRole

__all__ = ["LinRegRun", "passive_names", "run_active", "run_coordinator", "run_local", "run_passive"]


# --------------------------------------------------------------------------- over channels


def run_passive(channels: Mapping[str, Channel], table: PartyTable, **kwargs: Any) -> PartyResult:
    """Passive party A_index over its channels to B and C."""
    result: PartyResult = drive(PassiveRole(table, **kwargs), channels)
    return result


def run_active(channels: Mapping[str, Channel], table: PartyTable, **kwargs: Any) -> PartyResult:
    """Active party B over its channels to C and every passive party."""
    result: PartyResult = drive(ActiveRole(table, **kwargs), channels)
    return result


def run_coordinator(channels: Mapping[str, Channel], **kwargs: Any) -> CoordinatorResult:
    """Coordinator C over its channels to every data party (its obfuscator producer stops with it)."""
    role = CoordinatorRole(**kwargs)
    try:
        result: CoordinatorResult = drive(role, channels)
    finally:
        role.close()
    return result


@dataclass
class LinRegRun:
    """Everything :func:`run_local` returns."""

    active: PartyResult
    passives: list[PartyResult]
    coordinator: CoordinatorResult
    transcript: Transcript
    seconds: float

    @property
    def models(self) -> list[PartyModel]:
        return [self.active.model] + [p.model for p in self.passives]

    @property
    def label_units(self) -> float:
        """The factor from the loss C sees (on the trained, standardized label) to the label's units squared."""
        return self.active.model.label_scale ** 2

    @property
    def losses(self) -> list[float]:
        """Per iteration, the training loss in the label's units squared (C decrypts it on the scaled label)."""
        return [self.label_units * v for v in self.coordinator.losses]

    @property
    def epoch_losses(self) -> list[float]:
        """Per epoch, the mean batch loss in the label's units squared (what C's stopping test compares)."""
        return [self.label_units * v for v in self.coordinator.epoch_losses]


def passive_names(k: int) -> list[str]:
    return [f"passive-{i}" for i in range(k)]


def run_local(active: PartyTable, passives: Sequence[PartyTable], *, config: LinRegConfig | None = None,
              timeout: float = DEFAULT_TIMEOUT, allow_insecure: bool = False, record_history: bool = False,
              keys: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None,
              ckks_context: CKKSContext | None = None,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None, flood: bool = True) -> LinRegRun:
    """Run all roles in one process (threads over in-memory Channels).

    ``overrides`` replaces a party's task (tests: a stalling or hostile party); ``tap``
    (audits) keeps what each party received and holds; ``flood=False`` returns C's CKKS
    decryptions raw (tests and benchmarks only: :class:`~.coordinator.CoordinatorRole`).
    """
    cfg = config if config is not None else LinRegConfig()
    if not passives:
        raise InputDataError("need at least one passive party")
    names = passive_names(len(passives))
    n = len(active)
    for pname, table in zip(names, passives, strict=True):  # refused before any key is made
        refuse_small_batches(n, n if cfg.batch_size is None else cfg.batch_size, table.X.shape[1], pname,
                             allowed=cfg.allow_small_batches)
    endpoints = [Endpoint(ACTIVE, ACTIVE), Endpoint(COORD, COORD), *[Endpoint(p, PASSIVE) for p in names]]
    links = [(ACTIVE, COORD), *[(ACTIVE, p) for p in names], *[(COORD, p) for p in names]]
    net = LocalNetwork(endpoints, links=links, timeout=timeout, transcript=Transcript(tap),
                       allow_insecure=allow_insecure, run_id=secrets.token_hex(8))
    # Callable[..., T], not [[], T]: the lambdas below bind loop variables as default arguments
    tasks: dict[str, Callable[..., Any]] = {
        COORD: lambda: run_coordinator(net.channels(COORD), scheme=cfg.scheme, key_bits=cfg.key_bits,
                                       allow_insecure=allow_insecure, passives=names, keys=keys,
                                       ckks_context=ckks_context, flood=flood),
        ACTIVE: lambda: run_active(net.channels(ACTIVE), active, passives=names, config=cfg,
                                   record_history=record_history),
    }
    for i, (pname, table) in enumerate(zip(names, passives, strict=True)):
        tasks[pname] = (lambda i=i, pname=pname, table=table: run_passive(
            net.channels(pname), table, index=i, name=pname, preprocess=cfg.preprocess,
            record_history=record_history))
    for pname, fn in (overrides or {}).items():
        tasks[pname] = (lambda fn=fn, pname=pname: fn(net.channels(pname)))
    t0 = time.perf_counter()
    res = run_parties(tasks, network=net)
    return LinRegRun(res[ACTIVE], [res[p] for p in names], res[COORD], net.transcript, time.perf_counter() - t0)
