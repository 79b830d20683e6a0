"""Unbalanced PSI with an offline OPRF cache: one party's huge set prepared once, each partner's run online.

Parties and data
    The **large** party holds a big ID set (10⁶–10⁸), a long-term ECDH-OPRF key ``a``
    (its key file) and the **cache**: ``F_a(x) = SHA-256(u(a·H(x)))`` of every ID,
    computed once, offline, and refreshed incrementally when IDs are added
    (:mod:`.store`; the group and hash of :mod:`vflcrypto.psi.oprf`). The **small** party
    holds a small set and a **transfer**: the cache's values truncated so that a false match
    in a run of up to ``max_small`` IDs has probability ≤ 2⁻⁴⁰ (``t = ⌈(40 + log₂(n_large ·
    max_small)) / 8⌉`` bytes: 10 at 10⁶ × 10⁴, 11 at 10⁸ × 10⁵), sorted, sent once and then
    kept up to date by deltas (the values added since its generation).

Outputs
    The small party learns the intersection (its own rows, in canonical-ID order) and
    ``|large set|``; the large party learns ``|small set|`` only. Declared besides: a
    delta tells the small party how many IDs were added and, for its own IDs, which of
    them joined since its last run (it could tell by running again anyway).

Cost
    Offline: one X25519 multiplication per large-set ID (the cache); the transfer is
    ``t`` bytes per large-set ID (compressed). Online: two multiplications per small-set
    ID on the small side (blind, unblind), one on the large side, 64 bytes per small-set
    ID on the wire, and a binary search per ID in the transfer: nothing in proportion to
    the large set. Measured (``bench/psi_unbalanced.py``, both parties in one process, 2 pool
    workers on a 2-core machine shared with other jobs, load average 11-13): 10⁶ large IDs
    offline in 103 s (cache 14.1 MB; adding 10⁴ IDs: 1.9 s); transfer 8.1 MB (10 bytes per
    ID); online 0.20 s for 10³ small IDs, 2.3 s for 10⁴, 16.8 s for 10⁵. 10⁷ large IDs (load 8-11):
    offline 553 s (cache 136 MB), transfer 76 MB (10-byte values, 7.6 bytes each compressed),
    online 2.9 s for 10⁴ and 26.5 s for 10⁵; adding 10⁴ IDs 12.8 s (the merge and the rewrite of the
    whole cache file grow with the set; the OPRF work only with the added IDs).

Threat model
    Semi-honest parties; the large party's key is long-lived, so it answers only as many
    points as the small party declared and checks each (canonical, large order). A
    malicious small party learns F_a on the IDs it queries, as an OPRF allows; the
    number of queries per run is its declared set size. Security: one-more-DH on
    Curve25519 and its twist, ``H`` and the output hash as random oracles (Jarecki–Liu,
    TCC 2009, the ECDH-OPRF; Kiss, Liu, Schneider, Asokan, Wang, Tkachenko, "Private set
    intersection for unequal set sizes with mobile applications", PETS 2017, the
    precomputed-transfer design; SecretFlow's ECDH-OPRF unbalanced PSI for the shape).

Message flow (:mod:`.messages`)
    1. small → large ``upsi.hello``: its set size and the transfer it holds (key id, generation, truncation)
    2. large → small ``upsi.hello``: its set size, key id, generation, what follows; then ``upsi.values``:
       the full transfer (none held, another key, or too short for this set) or a delta (an older generation)
    3. small → large ``upsi.query``: b·H(y) for each of its IDs, in a random order
    4. large → small ``upsi.answer``: a·(b·H(y)), in the query order
    5. the small party unblinds to F_a(y) and looks each up in its transfer.

Network form: ``vflcrypto party --config parties.toml --as NAME align-unbalanced ...`` with the roles ``large``
and ``small`` in the configuration (the large party: ``--oprf-key``, ``--cache``; the small party: ``--data``,
``--transfer``, ``--out``).

Modules: :mod:`.messages`, :mod:`.store` (key, cache and transfer files), :mod:`.roles` (the two roles, local
run), :mod:`.audit` (what each party can learn), :mod:`.cli` (``vflcrypto align-cache``,
``vflcrypto align-unbalanced``, ``vflcrypto party ... align-unbalanced``).
"""

from __future__ import annotations

from vflcrypto.spec import Command, PartyTask, ProtocolSpec

from . import cli
from .audit import CHECKS, audit_run
from .messages import LARGE, SMALL, Answer, Hello, Query, UnbalancedResult, Values
from .roles import LargeRole, LocalRun, SmallRole, run_large, run_local, run_small
from .store import (
           OprfCache,
           OprfKey,
           Transfer,
           build_cache,
           export_transfer,
           load_cache,
           load_key,
           load_transfer,
           merge_transfer,
           new_key,
           save_cache,
           save_key,
           save_transfer,
           update_cache,
)

__all__ = ["LARGE", "SMALL", "SPEC", "Answer", "Hello", "LargeRole", "LocalRun", "OprfCache", "OprfKey", "Query",
           "SmallRole", "Transfer", "UnbalancedResult", "Values", "build_cache", "export_transfer", "load_cache",
           "load_key", "load_transfer", "merge_transfer", "new_key", "run_large", "run_local", "run_small",
           "save_cache", "save_key", "save_transfer", "update_cache"]

SPEC = ProtocolSpec(
    name="upsi",
    title="Unbalanced PSI with an offline OPRF cache (ECDH-OPRF on X25519)",
    roles={LARGE: LargeRole, SMALL: SmallRole},
    run_local=run_local,
    audit=audit_run,
    checks=CHECKS,
    commands=(
        Command("align-cache", "the large party's offline OPRF cache for unbalanced PSI: build, update, export; "
                "merge a delta (small party)", cli.add_cache_arguments, cli.cache_command, group=None,
                description=cli.__doc__),
        Command("align-unbalanced", "unbalanced PSI online run (large party's cache, small party's CSV) in this "
                "process", cli.add_online_arguments, cli.online_command, group=None, description=cli.__doc__),
    ),
    party_tasks=(PartyTask("align-unbalanced", "unbalanced PSI (large: key and cache; small: CSV and transfer)",
                           cli.add_party_arguments, cli.party_task, group=None),),
)
