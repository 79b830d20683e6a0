"""Encrypted gradient exchange: the core step of every vertical linear model.

Parties
    * **active party** ("active"): holds the residuals ``d`` (derived from its labels) and
      the Paillier key pair. Output: nothing new (it only ever sees a masked value).
    * **passive party** ("passive"): holds its feature block ``X`` (rows aligned with ``d``).
      Output: its own gradient ``g = Xᵀ d`` (and, in the demo, its updated weights).

Threat model
    Semi-honest, two parties. The passive party sees ``d`` only under the active party's
    key (IND-CPA under DCRA and the DJN short-exponent assumption); the active party sees
    ``g`` only behind a mask uniform mod n (perfect hiding). What is *not* hidden: the
    passive party learns its gradient ``Xᵀd`` itself, which over many iterations reveals
    information about ``d`` (and so about labels) — see Weng et al., "Privacy Leakage of
    Real-World Vertical Federated Learning" (2020). Protocols that must hide gradients
    from their owner use a coordinator (see :mod:`vflcrypto.protocols.linreg`).

Message flow (Hardy et al., "Private federated learning on vertically partitioned data
via entity resolution and additively homomorphic encryption", 2017, §3; one step; the
named steps of :mod:`.roles` in brackets)
    1. active → passive   ``PublicKeyAnnouncement``   the Paillier public key   [start]
    2. active → passive   ``EncryptedResiduals``      [[d]]                      [start]
    3. passive → active   ``MaskedGradient``          [[Xᵀd + R]], R uniform mod n  [mask_gradient]
    4. active → passive   ``DecryptedMaskedGradient`` Xᵀd + R mod n  [decrypt_masked_gradient]
    5. passive removes R and updates its weights.                  [unmask_gradient]

Modules: :mod:`.messages` (declarations), :mod:`.roles` (the steps and ``run_local``),
:mod:`.audit` (demo step and the attacks of ``vflcrypto audit exchange``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.spec import FlowerSpec, ProtocolSpec

from .audit import CHECKS as AUDIT_CHECKS
from .audit import audit_run, demo_step, example
from .messages import (
    ACTIVE,
    OU_REFUSAL,
    PASSIVE,
    DecryptedMaskedGradient,
    EncryptedResiduals,
    MaskedGradient,
    PublicKeyAnnouncement,
)
from .roles import FRAC_BITS, ActiveRole, ExchangeResult, PassiveRole, masked_gradient, run_local

__all__ = [
    "ACTIVE",
    "FRAC_BITS",
    "PASSIVE",
    "SPEC",
    "ActiveRole",
    "DecryptedMaskedGradient",
    "EncryptedResiduals",
    "ExchangeResult",
    "MaskedGradient",
    "PassiveRole",
    "PublicKeyAnnouncement",
    "audit_run",
    "demo_step",
    "example",
    "masked_gradient",
    "run_local",
]


def _flower_parties(run_config: Mapping[str, Any]) -> dict[str, str]:
    return {ACTIVE: ACTIVE, PASSIVE: PASSIVE}


def _flower_role(party: str, run_config: Mapping[str, Any]) -> Any:
    from vflcrypto.he.paillier import generate_keypair

    d, X = example(int(run_config.get("rows", 500)), int(run_config.get("features", 8)))
    if party == ACTIVE:
        bits = int(run_config.get("key-bits", 2048))
        return ActiveRole(d, generate_keypair(bits, allow_insecure=bool(run_config.get("allow-insecure", False))))
    return PassiveRole(X)


def _flower_summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
    return {"decrypted_values": len(results[ACTIVE])}  # the gradient stays with the passive party


SPEC = ProtocolSpec(
    name="exchange",
    title="Encrypted gradient exchange (Paillier)",
    roles={ACTIVE: ActiveRole, PASSIVE: PassiveRole},
    run_local=run_local,
    audit=audit_run,
    checks=AUDIT_CHECKS,
    demo=demo_step,
    demo_order=20,
    flower=FlowerSpec(ACTIVE, _flower_parties, _flower_role, _flower_summary),
    oracle=OU_REFUSAL,
)
