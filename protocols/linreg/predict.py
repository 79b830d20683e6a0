"""Secure prediction with the parties' linear models, as named steps, and ``predict_local``.

C sends a fresh ``public_key``; B sends ``predict_plan``; each passive party sends
``predict_partial`` [[u_k]]; B adds them, masks with [[R]] (uniform mod n) and sends
``predict_masked`` to C; C returns the decryption (``predict_return``); B removes R and
adds u_B. Only B learns Σ_k u_k + u_B.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.files import verify_model_dir
from vflcrypto.data.tables import PartyTable, ids_digest
from vflcrypto.errors import InputDataError, ModelFileError, ProtocolError
from vflcrypto.he.paillier import DEFAULT_KEY_BITS, PaillierPublicKey, PaillierVector, generate_keypair
from vflcrypto.runtime.channel import (
    DEFAULT_TIMEOUT,
    AuditTap,
    Channel,
    Endpoint,
    LocalNetwork,
    Transcript,
    run_parties,
)
from vflcrypto.runtime.steps import Next, Role, done, drive, send, then
from vflcrypto.runtime.wire import IntVector
from vflcrypto.sharing import masking

from .crypto import reveal_masked
from .local import passive_names
from .math import validate_table
from .messages import (
    ACTIVE,
    COORD,
    FRAC_BITS,
    PASSIVE,
    PredictMasked,
    PredictPartial,
    PredictPlan,
    PredictReturn,
    PublicKeyMsg,
)
from .model import PartyModel

__all__ = ["PredictActiveRole", "PredictCoordinatorRole", "PredictPassiveRole", "predict_local",
           "run_predict_active", "run_predict_coordinator", "run_predict_passive"]


@dataclass
class _Empty:
    pass


class PredictCoordinatorRole(Role[_Empty]):
    """C at prediction: a fresh key pair; it decrypts only B's masked sum."""

    role = COORD
    State = _Empty

    def __init__(self, *, key_bits: int = DEFAULT_KEY_BITS, allow_insecure: bool = False,
                 passives: Sequence[str] = ("passive-0",), active: str = ACTIVE, name: str = COORD) -> None:
        super().__init__(name)
        self.pk, self.sk = generate_keypair(key_bits, allow_insecure=allow_insecure)
        self.active, self.passives = active, list(passives)

    def accepted_keys(self) -> list[PaillierPublicKey]:
        return [self.pk]

    def start(self) -> Next:
        self.hold("secret_key", self.sk)
        return then([send(p, PublicKeyMsg("paillier", self.pk, None)) for p in [self.active, *self.passives]],
                    self.active, PredictPlan, "on_plan")

    def on_plan(self, msg: PredictPlan) -> Next:
        return then([], self.active, PredictMasked, "decrypt_masked_sum")

    def decrypt_masked_sum(self, msg: PredictMasked) -> Next:
        return done(None, [send(self.active, PredictReturn(reveal_masked(self.sk, msg.values).residues))])


@dataclass
class _PassiveState:
    key: PaillierPublicKey | None = None


class PredictPassiveRole(Role[_PassiveState]):
    """A passive party at prediction: [[u_k]] for the query rows to B."""

    role = PASSIVE
    State = _PassiveState

    def __init__(self, model: PartyModel, table: PartyTable, *, active: str = ACTIVE, coordinator: str = COORD) -> None:
        super().__init__(model.name)
        self.model, self.table, self.active, self.coordinator = model, table, active, coordinator
        self.X = validate_table(table, model.name, needs_label=False)

    def accepted_keys(self) -> list[PaillierPublicKey]:
        return [self.state.key] if self.state.key is not None else []

    def start(self) -> Next:
        return then([], self.coordinator, PublicKeyMsg, "on_public_key")

    def on_public_key(self, msg: PublicKeyMsg) -> Next:
        if msg.paillier is None:
            raise ProtocolError(f"{self.name}: prediction needs a Paillier key")
        self.state.key = msg.paillier
        return then([], self.active, PredictPlan, "on_plan")

    def on_plan(self, plan: PredictPlan) -> Next:
        if plan.n_rows != self.X.shape[0] or plan.id_digest != ids_digest(self.table.ids, "linreg"):
            raise InputDataError(f"{self.model.name}: query rows are not aligned with the active party's")
        assert self.state.key is not None
        u = self.state.key.encrypt_fixed(self.model.scores(self.X), FRAC_BITS)
        return done(None, [send(self.active, PredictPartial(u))])


@dataclass
class _ActiveState:
    key: PaillierPublicKey | None = None
    k: int = 0
    total: PaillierVector | None = None
    mask: IntVector = field(default_factory=IntVector)
    frac_bits: int = 0


class PredictActiveRole(Role[_ActiveState]):
    """B at prediction: sums the passive [[u_k]], masks, has C decrypt; its result is the predictions."""

    role = ACTIVE
    State = _ActiveState

    def __init__(self, model: PartyModel, table: PartyTable, *, passives: Sequence[str],
                 coordinator: str = COORD) -> None:
        super().__init__(model.name)
        self.model, self.table, self.passives, self.coordinator = model, table, list(passives), coordinator
        self.X = validate_table(table, model.name, needs_label=False)

    def accepted_keys(self) -> list[PaillierPublicKey]:
        return [self.state.key] if self.state.key is not None else []

    def start(self) -> Next:
        return then([], self.coordinator, PublicKeyMsg, "on_public_key")

    def on_public_key(self, msg: PublicKeyMsg) -> Next:
        if msg.paillier is None:
            raise ProtocolError(f"{self.name}: prediction needs a Paillier key")
        self.state.key = msg.paillier
        n = self.X.shape[0]
        sends = [send(self.coordinator, PredictPlan(n, b"")),
                 *(send(p, PredictPlan(n, ids_digest(self.table.ids, "linreg"))) for p in self.passives)]
        return then(sends, self.passives[0], PredictPartial, "on_partial")

    def on_partial(self, msg: PredictPartial) -> Next:
        st = self.state
        if len(msg.u) != self.X.shape[0]:
            raise ProtocolError("partial prediction of the wrong length")
        st.total = msg.u if st.total is None else st.total + msg.u
        st.k += 1
        if st.k < len(self.passives):
            return then([], self.passives[st.k], PredictPartial, "on_partial")
        masked, R = masking.mask_ciphertexts(st.total)
        st.mask, st.frac_bits = IntVector(R), st.total.frac_bits
        return then([send(self.coordinator, PredictMasked(masked))], self.coordinator, PredictReturn, "on_return")

    def on_return(self, msg: PredictReturn) -> Next:
        assert self.state.key is not None
        partial = masking.unmask_residues(msg.residues, self.state.mask, self.state.key.n, self.state.frac_bits)
        self.hold("passive_sum", partial)  # the secret behind the masked sum (audit ground truth)
        return done(self.model.to_label(partial + self.model.scores(self.X)))


def run_predict_passive(channels: Mapping[str, Channel], model: PartyModel, table: PartyTable) -> None:
    """Passive party's prediction role: send ``[[u_k]]`` for the query rows to B."""
    drive(PredictPassiveRole(model, table), channels)


def run_predict_active(channels: Mapping[str, Channel], model: PartyModel, table: PartyTable,
                       passives: Sequence[str]) -> np.ndarray:
    """Active party's prediction role; returns the predictions."""
    result: np.ndarray = drive(PredictActiveRole(model, table, passives=passives), channels)
    return result


def run_predict_coordinator(channels: Mapping[str, Channel], key_bits: int, allow_insecure: bool,
                            passives: Sequence[str]) -> None:
    """Coordinator's prediction role: a fresh key pair, then decrypt B's masked sum only."""
    drive(PredictCoordinatorRole(key_bits=key_bits, allow_insecure=allow_insecure, passives=passives), channels)


def predict_local(model_dir: str | os.PathLike[str] | Sequence[PartyModel], tables: Sequence[PartyTable], *,
                  key_bits: int = DEFAULT_KEY_BITS, allow_insecure: bool = False, timeout: float = DEFAULT_TIMEOUT,
                  tap: AuditTap | None = None) -> tuple[np.ndarray, Transcript]:
    """Secure prediction: ``tables`` = [active, passive-0, ...] query rows (aligned).

    ``model_dir`` holds ``active.npz``, ``passive-<i>.npz`` and their manifest (or pass the
    models); the manifest and every digest are checked first
    (:class:`~vflcrypto.errors.ModelFileError`). Runs the declared prediction messages;
    returns B's predictions and the transcript.
    """
    if isinstance(model_dir, str | os.PathLike):
        d = Path(model_dir)
        manifest = verify_model_dir(d, "linreg")
        expected = {f"{ACTIVE}.npz", *(f"{p}.npz" for p in passive_names(len(tables) - 1))}
        if set(manifest["files"]) != expected:
            raise ModelFileError(f"the model in {d} has {len(manifest['files'])} parties "
                                 f"({', '.join(sorted(manifest['files']))}); {len(tables)} tables were given")
        models = [PartyModel.load(d / f"{ACTIVE}.npz")]
        models += [PartyModel.load(d / f"{p}.npz") for p in passive_names(len(tables) - 1)]
    else:
        models = list(model_dir)
    if len(models) != len(tables) or len(tables) < 2:
        raise InputDataError("need the active table and one table per passive party")
    for m, t in zip(models, tables, strict=True):
        if tuple(t.columns) != tuple(m.columns):
            raise InputDataError(f"{m.name}: query columns {list(t.columns)} differ from the model's {list(m.columns)}")
    names = passive_names(len(tables) - 1)
    endpoints = [Endpoint(ACTIVE, ACTIVE), Endpoint(COORD, COORD), *[Endpoint(p, PASSIVE) for p in names]]
    links = [(ACTIVE, COORD), *[(ACTIVE, p) for p in names], *[(COORD, p) for p in names]]
    net = LocalNetwork(endpoints, links=links, timeout=timeout, transcript=Transcript(tap),
                       allow_insecure=allow_insecure, run_id=secrets.token_hex(8))
    # Callable[..., T], not [[], T]: the lambdas below bind loop variables as default arguments
    tasks: dict[str, Callable[..., Any]] = {
        COORD: lambda: run_predict_coordinator(net.channels(COORD), key_bits, allow_insecure, names),
        ACTIVE: lambda: run_predict_active(net.channels(ACTIVE), models[0], tables[0], names),
    }
    for pname, m, t in zip(names, models[1:], tables[1:], strict=True):
        tasks[pname] = (lambda pname=pname, m=m, t=t: run_predict_passive(net.channels(pname), m, t))
    res = run_parties(tasks, network=net)
    return res[ACTIVE], net.transcript
