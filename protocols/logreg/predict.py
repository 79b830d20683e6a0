"""Prediction with a saved logistic-regression model: the training run's own prediction messages on new rows.

The parties are those of training: the label holder (``active``, no features, no weights)
and the feature parties, each with its own saved weights and preprocessing
(:class:`~vflcrypto.protocols._linear.LinearParty`). The flow is training's prediction phase
(package docstring, "Prediction"), started by a setup with no training step:

0. active → every feature party: ``logreg.setup`` (the model's mode, ``steps`` 0, the row
   count and the digest of the query IDs: misaligned rows fail before any score is sent);
   secure mode: every pair of feature parties agrees on fresh pairwise mask seeds
   (``logreg.key_share``, signed with identity keys pinned for this run);
1. active → every feature party: ``logreg.request`` ``predict``;
2. feature party k → active: ``logreg.masked_logits`` (secure: its score ``z_k = X_k w_k`` in
   fixed point plus pairwise masks that cancel in the sum) or ``logreg.logits`` (plain: ``z_k``
   in the clear); the active party sums them to ``z`` and sends ``logreg.request`` ``stop``.

What the label holder learns: the summed logit ``z = Σ_k z_k`` of every query row (hence the
probability ``σ(z)``), as in training's test predictions; in secure mode nothing about an
individual ``z_k`` while two or more feature parties are honest; with one feature party ``z``
*is* that party's score. Plain mode: every ``z_k``. The feature parties learn the row count
and nothing else. No Paillier key is needed (a prediction sends no residual).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from vflcrypto.data.tables import PartyTable
from vflcrypto.errors import ConfigurationError, InputDataError, ProtocolError
from vflcrypto.ml.preprocess import LocalScaling
from vflcrypto.runtime.channel import DEFAULT_TIMEOUT, AuditTap, Endpoint, LocalNetwork, Transcript, run_parties
from vflcrypto.runtime.steps import Next, Role, done, drive, send, then

from .._linear import LinearParty
from .math import rows_digest, sigmoid, unmask_sum
from .messages import ACTIVE, PASSIVE, Logits, MaskedLogits, Request, Setup
from .roles import PREDICT, LocalRun, PassiveRole, passive_names

__all__ = ["PredictActiveRole", "PredictPassiveRole", "party_models", "predict_local"]


def party_models(run: LocalRun, scalings: Sequence[LocalScaling], columns: Sequence[Sequence[str]], *,
                 secure: bool, preprocess: str, label: str) -> list[LinearParty]:
    """Every party's model after ``run``: the label holder's (no weights: the mode, the label and the parties)
    first, then each feature party's weights with its own preprocessing."""
    names = passive_names(len(scalings))
    settings = {"secure": secure, "preprocess": preprocess}
    active = LinearParty("logreg", ACTIVE, ACTIVE, (), np.zeros(0), LocalScaling.identity(0),
                         {**settings, "label": label, "parties": names})
    return [active, *(LinearParty("logreg", n, PASSIVE, tuple(c), run.passives[n].weights, s, settings)
                      for n, s, c in zip(names, scalings, columns, strict=True))]


@dataclass
class _ActiveState:
    k: int = 0
    parts: list[np.ndarray] = field(default_factory=list)


class PredictActiveRole(Role[_ActiveState]):
    """The label holder at prediction: the setup and the request, then every feature party's (masked) logits."""

    role = ACTIVE
    State = _ActiveState

    def __init__(self, ids: Sequence[str], *, parties: Sequence[str], secure: bool, name: str = ACTIVE) -> None:
        super().__init__(name)
        self.ids, self.parties, self.secure = list(ids), list(parties), secure
        if not self.parties:
            raise ProtocolError("at least one feature party is required")

    def start(self) -> Next:
        """Steps 0-1: the setup (no training step) and the request to every feature party."""
        n = len(self.ids)
        setup = Setup(secure=self.secure, steps=0, learning_rate=0.0, n_train=n, n_test=0,
                      parties=tuple(self.parties), ids_digest=rows_digest(self.ids, n))
        sends = [*(send(p, setup) for p in self.parties), *(send(p, Request(PREDICT, 0)) for p in self.parties)]
        return then(sends, self.parties[0], MaskedLogits if self.secure else Logits, "collect_logits")

    def collect_logits(self, msg: Logits | MaskedLogits) -> Next:
        """Step 2: every party's (masked) logits; their sum is the result."""
        st = self.state
        if msg.values.shape != (len(self.ids),):
            raise ProtocolError(f"{self.parties[st.k]} sent {msg.values.shape} logits for {len(self.ids)} rows")
        st.parts.append(np.asarray(msg.values))
        st.k += 1
        if st.k < len(self.parties):
            return then([], self.parties[st.k], type(msg), "collect_logits")
        z = unmask_sum(st.parts) if self.secure else np.sum(st.parts, axis=0)
        return done(z, [send(p, Request("stop", 0)) for p in self.parties])


class PredictPassiveRole(PassiveRole):
    """A feature party at prediction: training's passive role, its saved weights, the query rows as its rows.

    It refuses a setup in another mode than its model's (a plain request to a secure model's
    party would have its score sent in the clear) or with a training step.
    """

    def __init__(self, model: LinearParty, X: np.ndarray, ids: Sequence[str], **kwargs: Any) -> None:
        super().__init__(model.name, model.features(X), ids_train=list(ids), **kwargs)
        self.state.weights = np.asarray(model.weights, dtype=np.float64)
        self.secure = bool(model.settings.get("secure", True))

    def on_setup(self, setup: Setup) -> Next:
        if setup.steps or setup.secure != self.secure:
            mode = "secure" if self.secure else "plain"
            raise ConfigurationError(f"{self.name}: its model predicts in {mode} mode with no training step; the "
                                     f"active party asked for {'secure' if setup.secure else 'plain'} mode and "
                                     f"{setup.steps} steps")
        return super().on_setup(setup)


def predict_local(models: Sequence[LinearParty], tables: Sequence[PartyTable], *, timeout: float = DEFAULT_TIMEOUT,
                  tap: AuditTap | None = None) -> tuple[np.ndarray, Transcript]:
    """Every party of a saved model in this process: ``models`` and ``tables`` (aligned query rows) are the label
    holder's first, then each feature party's. Returns the label holder's probabilities ``σ(z)`` and the
    transcript; the mode is the model's (the label holder's ``secure`` setting)."""
    if len(models) != len(tables) or len(models) < 2:
        raise InputDataError("need the label holder's table and one table per feature party")
    names = passive_names(len(models) - 1)
    secure = bool(models[0].settings.get("secure", True))
    ids = list(tables[0].ids)
    links = [(ACTIVE, n) for n in names]
    if secure:
        links += [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    run_id = secrets.token_hex(8)
    net = LocalNetwork([Endpoint(ACTIVE, ACTIVE), *(Endpoint(n, PASSIVE) for n in names)], links=links,
                       timeout=timeout, transcript=Transcript(tap), run_id=run_id)
    identities = {n: Ed25519PrivateKey.generate() for n in names}  # fresh, pinned for this run only
    pinned: dict[str, Ed25519PublicKey] = {n: k.public_key() for n, k in identities.items()}
    tasks: dict[str, Callable[..., Any]] = {
        ACTIVE: lambda: drive(PredictActiveRole(ids, parties=names, secure=secure), net.channels(ACTIVE))}
    for n, m, t in zip(names, models[1:], tables[1:], strict=True):
        tasks[n] = (lambda n=n, m=m, t=t: drive(PredictPassiveRole(
            m, t.X, t.ids, identity=identities[n], peer_identities={p: pinned[p] for p in names if p != n},
            run_id=run_id), net.channels(n)))
    out = run_parties(tasks, network=net)
    return sigmoid(out[ACTIVE]), net.transcript
