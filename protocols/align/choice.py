"""``--protocol auto`` (the default): the PSI protocol chosen from the two parties' set sizes.

No one protocol is fastest at every size. ECDH costs two curve operations per ID and no
fixed cost; the OT PSIs cost a fixed setup (base OTs, and for the VOLE PSI the silent VOLE's
trees) and then far less per ID. Measured in one process, two parties of ``n`` IDs each,
half common (the fixed costs are set-up rounds, so a network adds to the OT PSIs):

========  ========  ========  =========
n         ECDH      KKRT      VOLE PSI
========  ========  ========  =========
1,000     0.020 s   0.129 s   0.043 s
10,000    0.165 s   0.173 s   0.055 s
30,000    0.469 s   0.267 s   0.087 s
========  ========  ========  =========

and at 10⁷ × 10⁷ (``bench/psi_scale.py``) the VOLE PSI takes 16–18 s, KKRT 40 s. So
:func:`choose` takes the VOLE PSI from :data:`VOLE_MIN_ROWS` rows in all, KKRT (when the
VOLE PSI's C extensions are missing on either side) from :data:`KKRT_MIN_ROWS`, and ECDH
below those, for cardinality-only runs (only ECDH has that mode) and for 3+ parties (one
protocol for every pair, chosen without every pair's sizes). Keyed hash is never chosen: it
is weaker, and asked for by name.

Two parties in two processes each know only their own size, so they first exchange an
``align.offer`` (:func:`negotiate`): row count, role, mode and the protocols each build can
run; both then call :func:`choose` on the same values and run the same protocol. The offer
reveals nothing the chosen protocol's ``align.hello`` does not (the set size), beyond
whether the sender's build has the C extensions.
"""

from __future__ import annotations

from collections.abc import Sequence

from vflcrypto.errors import ProtocolError
from vflcrypto.runtime.channel import Channel

from .messages import ACTIVE_ROLES, PROTOCOL_VERSION, Offer

__all__ = ["AUTO", "KKRT_MIN_ROWS", "VOLE_MIN_ROWS", "available", "choose", "negotiate", "resolve_local"]

AUTO = "auto"
#: rows of both parties together from which the VOLE PSI is chosen (it is faster than ECDH from
#: about 5,000 in one process; twice that leaves room for its extra rounds over a network)
VOLE_MIN_ROWS = 10_000
#: the same for KKRT, when the VOLE PSI cannot run (KKRT overtakes ECDH near 20,000 in all)
KKRT_MIN_ROWS = 40_000


def available() -> tuple[str, ...]:
    """The PSI protocols this build can run (``rr22`` needs its two C extensions)."""
    from vflcrypto.psi import rr22

    return ("ecdh", "hash", "kkrt") + (("rr22",) if rr22.why_not() is None else ())


def choose(rows: Sequence[int], mode: str, common: Sequence[str], *, parties: int = 2) -> str:
    """The protocol for ``rows`` (every party's row count), ``mode`` and the protocols all can run."""
    if mode == "size" or parties > 2:
        return "ecdh"
    total = sum(rows)
    if "rr22" in common and total >= VOLE_MIN_ROWS:
        return "rr22"
    if "kkrt" in common and total >= KKRT_MIN_ROWS:
        return "kkrt"
    return "ecdh"


def resolve_local(rows: Sequence[int], mode: str) -> str:
    """``auto`` for parties of one process (every row count known, one build)."""
    return choose(rows, mode, available())


def negotiate(ch: Channel, *, role: str, rows: int, mode: str, timeout: float | None = None) -> str:
    """Both parties of a two-party run: exchange ``align.offer`` over ``ch``, return the protocol both chose.

    A peer of another version, the same role or another mode is a :class:`ProtocolError`
    (the same checks the protocols' hellos make, before any work)."""
    mine = Offer(PROTOCOL_VERSION, role, mode, rows, available())
    ch.send(mine, step="offer")
    peer: Offer = ch.recv(Offer, timeout=timeout, step="offer")
    name = ch.peer.name
    if peer.version != PROTOCOL_VERSION:
        raise ProtocolError(f"{name} speaks alignment protocol version {peer.version}, this side {PROTOCOL_VERSION}")
    if (peer.role in ACTIVE_ROLES) == (role in ACTIVE_ROLES):
        raise ProtocolError(f"both parties claim the role {role!r}")
    if peer.mode != mode:
        raise ProtocolError(f"{name} runs mode {peer.mode!r}, this side {mode!r}")
    if peer.rows < 0:
        raise ProtocolError(f"{name} offered a negative row count ({peer.rows})")
    common = [p for p in mine.protocols if p in peer.protocols]
    return choose((rows, peer.rows), mode, common)
