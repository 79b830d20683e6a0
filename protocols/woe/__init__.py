"""Secure binning, weight of evidence (WOE), information value (IV) and feature selection.

After alignment, credit-risk teams bin every feature, compute each bin's WOE and each
feature's IV against the label holder's labels, and keep the predictive features
(FATE 2.x Hetero Feature Binning and Selection; SecretFlow's WOE/IV binning).

Parties
    * **active party** ("active"): the 0/1 labels, the Paillier key pair and optionally its
      own features (binned and scored locally). Output: WOE per bin and IV per feature of
      every party's features (a passive party's under anonymous numbers) and the selection.
    * **passive parties** ("passive-0", ...): features only. Output: which of its columns
      were selected (and, with ``return_results``, the WOE of its bins and IV of its features).

Threat model
    Semi-honest; passive parties do not collude with the active party. The passive party
    sees only ciphertexts under the active party's key (IND-CPA: DCR plus DJN's short
    exponent). The active party learns, for every bin of every passive feature, its event
    and non-event counts: the leakage SecureBoost's first histograms have too. It does
    not learn the column names, the bin edges, the bins' order or which rows fall in a
    bin: features arrive in a random order under anonymous numbers, each feature's bins
    shuffled, and the sums rerandomized (a sum of the active party's own ciphertexts would
    otherwise be recognisable). Bins of fewer than ``min_bin_size`` rows (default 10) are
    merged first, since a one-row bin's counts are its row's label. With
    ``return_results`` the passive party learns the event rate of each of its own bins,
    and so a label estimate per row, exact for bins of one label only (measured by the audit).

Message flow (one passive party; the same with each in turn)
    1. active → passive  ``woe.setup``   public key, rows, parameters        [start]
    2. active → passive  ``woe.labels``  [[y·2^32 + (1 − y)]] per row       [start]
    3. passive → active  ``woe.counts``  per-bin packed sums, shuffled, rerandomized  [on_labels]
    4. active: decrypt, check every feature's bins add up to the label totals, WOE/IV;
       after the last party, select by IV threshold and top-k over all parties   [on_counts]
    5. active → passive  ``woe.results`` selection flags (+ WOE and IV if configured)  [on_counts]
    6. passive: maps them back to its own columns and bins                    [on_results]

Citation
    FATE Hetero Feature Binning (WOE/IV with adjustment factor 0.5); SAS PROC HPBIN's
    WOE/IV definitions; Cheng et al., "SecureBoost: A lossless federated learning
    framework", IEEE Intelligent Systems 2021 (the encrypted per-bin sums).

Modules: :mod:`.math` (binning, WOE/IV, selection), :mod:`.messages`, :mod:`.roles`,
:mod:`.audit`, :mod:`.cli`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcrypto.spec import Command, FlowerSpec, PartyTask, ProtocolSpec

from . import cli
from .audit import CHECKS as AUDIT_CHECKS
from .audit import audit_run, demo_step, example
from .math import WoeParams, bin_matrix, merge_small_bins, plain_counts, select_features, woe_iv
from .messages import ACTIVE, OU_REFUSAL, PASSIVE, EncryptedCounts, EncryptedLabels, Results, Setup
from .roles import (
    ActiveResult,
    ActiveRole,
    FeatureWoe,
    PassiveResult,
    PassiveRole,
    WoeRun,
    bin_order,
    feature_order,
    run_active,
    run_local,
    run_passive,
    shuffle_order,
)

__all__ = ["ACTIVE", "PASSIVE", "SPEC", "ActiveResult", "ActiveRole", "EncryptedCounts", "EncryptedLabels",
           "FeatureWoe", "PassiveResult", "PassiveRole", "Results", "Setup", "WoeParams", "WoeRun", "audit_run",
           "bin_matrix", "bin_order", "demo_step", "example", "feature_order", "merge_small_bins", "plain_counts",
           "run_active", "run_local", "run_passive", "select_features", "shuffle_order", "woe_iv"]


def _flower_parties(run_config: Mapping[str, Any]) -> dict[str, str]:
    return {ACTIVE: ACTIVE, "passive-0": PASSIVE}


def _flower_role(party: str, run_config: Mapping[str, Any]) -> Any:
    from vflcrypto.he.paillier import generate_keypair

    y, Xa, ca, Xp, cp = example(int(run_config.get("rows", 400)))
    params = WoeParams(return_results=bool(run_config.get("return-results", False)))
    if party == ACTIVE:
        keys = generate_keypair(int(run_config.get("key-bits", 2048)),
                                allow_insecure=bool(run_config.get("allow-insecure", False)))
        return ActiveRole(y, Xa, passives=["passive-0"], keys=keys, params=params, columns=ca)
    return PassiveRole(Xp, columns=cp, name=party, expected=params)


def _flower_summary(results: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
    res: ActiveResult = results[ACTIVE]
    sel = [f"{f.party}:{f.name}" for f in res.selected()]
    return {"lines": [f"[vflcrypto] woe: {len(res.features)} features scored, selected {sel}"],
            "ivs": {f"{f.party}:{f.name}": f.iv for f in res.features}, "selected": sel}


SPEC = ProtocolSpec(
    name="woe",
    title="Secure binning, WOE/IV and feature selection (Paillier)",
    roles={ACTIVE: ActiveRole, PASSIVE: PassiveRole},
    run_local=run_local,
    audit=audit_run,
    checks=AUDIT_CHECKS,
    config=WoeParams,
    demo=demo_step,
    demo_order=35,
    commands=(Command("woe", "secure WOE/IV binning and IV-based feature selection (Paillier)",
                      cli.add_train_arguments, cli.train, description=cli.__doc__),),
    party_tasks=(PartyTask("woe", "secure WOE/IV binning and IV-based feature selection (Paillier)",
                           cli.add_party_arguments, cli.party_task),),
    flower=FlowerSpec(ACTIVE, _flower_parties, _flower_role, _flower_summary),
    oracle=OU_REFUSAL,
)
