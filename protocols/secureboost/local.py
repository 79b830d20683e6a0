"""SecureBoost training over Channels (``run_active``, ``run_passive``) and in one process (``run_local``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.he.paillier import DEFAULT_KEY_BITS
from vflcrypto.he.schemes import PrivateKey, PublicKey
from vflcrypto.runtime.channel import DEFAULT_TIMEOUT, AuditTap, Channel, Transcript, run_parties
from vflcrypto.runtime.steps import drive

from .active import ActiveResult, ActiveRole
from .checkpoint import CheckpointDir, data_digest, plan_of
from .checkpoint import run_active as checkpoint_run_active
from .checkpoint import run_passive as checkpoint_run_passive
from .messages import ACTIVE
from .parts import LOCAL_PART_ROWS
from .passive import PassiveResult, PassiveRole
from .predict import network
from .tree import BoostParams

__all__ = ["LocalRun", "passive_names", "run_active", "run_local", "run_passive"]


def passive_names(k: int) -> list[str]:
    return [f"passive-{i}" for i in range(k)]


def run_active(channels: Mapping[str, Channel], X: np.ndarray, y: np.ndarray, *, timeout: float | None = None,
               **kwargs: Any) -> ActiveResult:
    """The active party over its channels to every passive party (their order fixes the owner order)."""
    if not channels:
        raise InputDataError("SecureBoost needs at least one passive party")
    result: ActiveResult = drive(ActiveRole(X, y, passives=list(channels), **kwargs), channels, timeout=timeout)
    return result


def run_passive(channels: Mapping[str, Channel], X: np.ndarray, *, timeout: float | None = None,
                **kwargs: Any) -> PassiveResult:
    """A passive party over its one channel to the active party."""
    if len(channels) != 1:
        raise ProtocolError("a passive party talks to exactly one active party")
    (active, ch), = channels.items()
    result: PassiveResult = drive(PassiveRole(X, name=ch.local.name, active=active, **kwargs), channels,
                                   timeout=timeout)
    return result


@dataclass
class LocalRun:
    """Every party's result of an in-process run, and the shared transcript."""

    active: ActiveResult
    passive: dict[str, PassiveResult]
    transcript: Transcript
    seconds: float

    @property
    def bytes_sent(self) -> dict[str, int]:
        return self.transcript.bytes_sent_by("sender")


def run_local(X_active: np.ndarray, y: np.ndarray, X_passive: Sequence[np.ndarray], *,
              params: BoostParams | None = None, plaintext: bool = False, key_bits: int = DEFAULT_KEY_BITS,
              keys: tuple[PublicKey, PrivateKey] | None = None, allow_insecure: bool = False, scheme: str = "paillier",
              precompute: bool = False, weights: np.ndarray | None = None, goss_key: bytes | None = None,
              ids: Sequence[str] | None = None, active_columns: Sequence[str] | None = None,
              passive_columns: Sequence[Sequence[str]] | None = None, timeout: float = DEFAULT_TIMEOUT,
              overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None,
              tap: AuditTap | None = None, checkpoint: str | Path | None = None, resume: bool = False,
              gradient_part_rows: int = LOCAL_PART_ROWS) -> LocalRun:
    """Train with every party in this process (threads over in-memory channels).

    ``scheme``: ``paillier``, ``ou`` or ``ou-heu`` (:mod:`vflcrypto.he.schemes`; ignored with ``keys``);
    ``precompute``: the active party's obfuscators for the next tree in idle time (see :class:`ActiveRole`);
    ``weights``: the active party's sample weights (n,); ``goss_key``: the secret of its GOSS draws (default fresh);
    ``gradient_part_rows``: rows per message of a tree's encrypted gradients (0: one message; see :class:`ActiveRole`;
    the default here is larger than the party command's, :data:`.parts.LOCAL_PART_ROWS`).
    ``overrides`` maps a party name to a callable ``(channels) -> Any`` that replaces its
    role (tests: a stalling or hostile party); ``tap`` (audits) keeps what each party
    received and holds. ``checkpoint``: a directory where every party writes its own state after every
    completed tree (``<party>.tree-<count>.npz``, :mod:`.checkpoint`); with ``resume`` the run goes on from
    them (the GOSS secret from the active party's checkpoint) to the model an uninterrupted run grows.
    """
    names = passive_names(len(X_passive))
    net = network(names, timeout, allow_insecure, Transcript(tap))
    if resume and checkpoint is None:
        raise InputDataError("resume needs a checkpoint directory (the one the interrupted run wrote)")
    ckpt: dict[str, dict[str, Any]] = {n: {} for n in (ACTIVE, *names)}
    if checkpoint is not None:
        plan = plan_of(params or BoostParams(), plaintext, weights is not None)
        rows = {ACTIVE: data_digest(ids or [], active_columns or [], X_active, y, weights),
                **{n: data_digest(ids or [], passive_columns[i] if passive_columns is not None else [], X_passive[i])
                   for i, n in enumerate(names)}}
        ckpt = {n: {"checkpoint": CheckpointDir(checkpoint, n, plan, rows[n]), "resume": resume} for n in rows}
        if resume:
            for c in ckpt.values():
                c["checkpoint"].check()  # another plan or other rows: one line, before any work
    active_run = run_active if checkpoint is None else checkpoint_run_active
    passive_run = run_passive if checkpoint is None else checkpoint_run_passive
    # Callable[..., T], not [[], T]: the lambdas below bind loop variables as default arguments
    tasks: dict[str, Callable[..., Any]] = {
        ACTIVE: lambda: active_run(
            net.channels(ACTIVE), X_active, y, ids=ids, columns=active_columns, params=params, plaintext=plaintext,
            key_bits=key_bits, keys=keys, allow_insecure=allow_insecure, scheme=scheme, precompute=precompute,
            weights=weights, goss_key=goss_key, gradient_part_rows=gradient_part_rows, **ckpt[ACTIVE]),
    }
    for i, name in enumerate(names):
        cols = passive_columns[i] if passive_columns is not None else None
        tasks[name] = (lambda name=name, X=X_passive[i], cols=cols: passive_run(
            net.channels(name), X, ids=ids, columns=cols, **ckpt[name]))
    for name, fn in (overrides or {}).items():
        tasks[name] = (lambda fn=fn, name=name: fn(net.channels(name)))
    t0 = time.perf_counter()
    results = run_parties(tasks, network=net)
    return LocalRun(results[ACTIVE], {n: results[n] for n in names}, net.transcript, time.perf_counter() - t0)
