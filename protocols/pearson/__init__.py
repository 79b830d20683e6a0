"""Cross-party Pearson correlation: every active column with every passive column.

Before training, teams check how the parties' columns relate (FATE 2.x Hetero Pearson,
SecretFlow's ss_pearsonr): redundant columns across parties, leakage-prone proxies.

Parties
    * **active party** ("active"): its columns and the Paillier key pair.
    * **passive parties** ("passive-0", ...): their columns.
    Output: the correlation matrix of the active party's columns with each passive
    party's, to whoever ``reveal`` names (``active``, ``passive`` or ``both``); nobody
    else learns anything about the other's columns.

Threat model
    Semi-honest, no collusion. Each party standardizes its own columns (z-scores), so
    ``r_jk = (1/n) Σ_i za_ij zp_ik``. The passive party sees the active party's z-scores
    only under its key (IND-CPA: DCR plus DJN's short exponent) and computes the products
    homomorphically, adding a fresh mask uniform mod n to each before the key holder
    decrypts it (perfect hiding): the active party then learns nothing unless the
    passive party sends its masks (``reveal`` active/both), and the passive party learns
    the products only if the active party returns the decrypted masked values (``reveal``
    passive/both). What the receivers learn is the declared output: the cross-party
    correlations, with ``n``. VIF is not offered: it needs the within-party correlations
    too, i.e. revealing more than the cross block.

Message flow (one passive party; the same with each in turn)
    1. active → passive  ``pearson.setup``            public key, rows, columns, reveal   [start]
    2. active → passive  ``pearson.columns``          [[Za]], fixed point              [start]
    3. passive → active  ``pearson.masked_products``  [[Zaᵀ Zp + R]]              [on_columns]
    4. active decrypts (uniform mod n)                                             [on_masked]
    5. passive → active  ``pearson.mask``  R (reveal active/both)               [on_columns]
    6. active: r = (view − R) / n                                                  [on_mask]
    7. active → passive  ``pearson.decrypted_masked`` (reveal passive/both); the passive
       party removes R: r = (view − R) / n                                      [on_decrypted]

Citation
    FATE Hetero Pearson; Hardy et al. 2017 (the masked encrypted dot product, as in
    :mod:`vflcrypto.protocols.exchange`).

Modules: :mod:`.math`, :mod:`.messages`, :mod:`.roles`, :mod:`.audit`, :mod:`.cli`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.spec import Command, FlowerSpec, PartyTask, ProtocolSpec

from . import cli
from .audit import CHECKS as AUDIT_CHECKS
from .audit import audit_run, demo_step, example
from .math import FRAC_BITS, REVEALS, standardize
from .messages import ACTIVE, OU_REFUSAL, PASSIVE, DecryptedMasked, EncryptedColumns, MaskedProducts, ProductMask, Setup
from .roles import ActiveRole, PassiveRole, PearsonRun, run_active, run_local, run_passive

__all__ = ["ACTIVE", "FRAC_BITS", "PASSIVE", "REVEALS", "SPEC", "ActiveRole", "DecryptedMasked", "EncryptedColumns",
           "MaskedProducts", "PassiveRole", "PearsonRun", "ProductMask", "Setup", "audit_run", "demo_step", "example",
           "run_active", "run_local", "run_passive", "standardize"]


def _flower_parties(run_config: Mapping[str, Any]) -> dict[str, str]:
    return {ACTIVE: ACTIVE, "passive-0": PASSIVE}


def _flower_role(party: str, run_config: Mapping[str, Any]) -> Any:
    from vflcrypto.he.paillier import generate_keypair

    Xa, _, Xp, _ = example(int(run_config.get("rows", 300)))
    reveal = str(run_config.get("reveal", "both"))
    if party == ACTIVE:
        keys = generate_keypair(int(run_config.get("key-bits", 2048)),
                                allow_insecure=bool(run_config.get("allow-insecure", False)))
        return ActiveRole(Xa, passives=["passive-0"], keys=keys, reveal=reveal)
    return PassiveRole(Xp, name=party, expected_reveal=reveal)


def _flower_summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
    corr = results[ACTIVE].get("passive-0")
    shape = None if corr is None else list(corr.shape)
    return {"lines": [f"[vflcrypto] pearson: active party learns {shape or 'nothing'}"],
            "active_corr": None if corr is None else corr.tolist()}


SPEC = ProtocolSpec(
    name="pearson",
    title="Cross-party Pearson correlation (Paillier, masked products)",
    roles={ACTIVE: ActiveRole, PASSIVE: PassiveRole},
    run_local=run_local,
    audit=audit_run,
    checks=AUDIT_CHECKS,
    demo=demo_step,
    demo_order=36,
    commands=(Command("pearson", "cross-party Pearson correlation of every active with every passive column",
                      cli.add_train_arguments, cli.train, description=cli.__doc__),),
    party_tasks=(PartyTask("pearson", "cross-party Pearson correlation (Paillier, masked products)",
                           cli.add_party_arguments, cli.party_task),),
    flower=FlowerSpec(ACTIVE, _flower_parties, _flower_role, _flower_summary),
    oracle=OU_REFUSAL,
)
