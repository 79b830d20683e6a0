"""One-shot and few-shot VFL's label defences, run by the server (the label holder) on D1.

Options of :class:`~.roles.OneShotConfig` (shared with split learning:
:class:`~vflcrypto.protocols._repvfl_defence.DefendedConfig`), announced in the setup so that every
party accounts the same (ε, δ); with either on, D1 travels as ``oneshot.dp_gradient`` or
``oneshot.dp_partition`` (few-shot: ``fewshot.*``), declared
:attr:`~vflcrypto.runtime.declarations.Protection.DP`.

**label-rr** (``--label-dp ε``). At its start the server replaces each overlap label by
randomized response over the C classes (kept with probability e^ε / (e^ε + C − 1), one draw
per row: :func:`vflcrypto.privacy.randomized_response`) and uses those labels only: D1, the
head, few-shot's auxiliary heads, the gated pseudo-labels (and in client return the
pseudo-labels it sends) are post-processing of them. **Pure ε-label-DP** of each overlap row's
label in everything the server sends, whatever follows.

**grad-gauss** (``--grad-noise σ --grad-clip C``, or ``--grad-epsilon ε``). D1 is the gradient of
the summed cross-entropy of a freshly initialised head (public seed) on U1: row i of every
party's block depends on the label y_i and on row i's representations only. The server
concatenates each row's blocks over the parties (the joint row), clips it to L2 norm C, adds
N(0, σ²C²) to every coordinate and sends each party its block (the partition variant: its
k-means of the noised rows). A changed label moves one clipped joint row by at most 2C, so D1
to all parties together is one Gaussian mechanism of noise multiplier σ / 2. **D1 is sent once**:
the composition is over one release per row (the accountant composes a single Gaussian mechanism at
sampling rate 1, :func:`vflcrypto.privacy.gaussian_epsilon`); nothing else label-bearing leaves
the server in one-shot VFL or in few-shot's server mode. What it does not cover: the head the
server then trains on the true labels (it never leaves the server, which predicts), few-shot's
client-return pseudo-labels (computed from the true labels: refused unless ``--label-dp`` is on
too), the features (the server reads U1, U2 and the test representations in the clear), a
server that deviates (a party tests the noise's scale, not the clipping), and the
floating-point caveat of :mod:`vflcrypto.privacy.mechanisms`.

Cost: the parties' temporary labels come from k-means on randomized-response or noised
gradients, so their local training learns less; the frontier (``vflcrypto audit oneshot|fewshot
--defence label-rr|grad-gauss``) measures it.

**The feature parties' embedding defences** (:mod:`vflcrypto.protocols._repvfl_embed`:
``--embed-noise σ``/``--embed-epsilon ε`` with ``--embed-clip C``, and ``--dcor-weight λ``) protect
each party's raw columns against the server. Under embedding noise every representation a party
sends is clipped and noised (``dp_representation`` for U1, ``dp_representation_update`` for U2,
``dp_test_representation``; few-shot also ``dp_unaligned_representation`` and, in client return,
``dp_refit``). An overlap row is released twice (U1, U2), three times in few-shot's client
return (the refit); a test or unaligned row once: :data:`EMBED_STATEMENT` composes that many
Gaussian releases per row (:meth:`~.roles.OneShotConfig.embed_releases`). Under ``--dcor-weight``
the party adds NoPeek's term to every step of its local training (FixMatch-tab, and few-shot's
retraining on returned pseudo-labels).
"""

from __future__ import annotations

import numpy as np

from vflcrypto.privacy import mechanisms as dpm

from .._repvfl_defence import Statement
from .._repvfl_embed import DCOR_COVERS, EmbedStatement

__all__ = ["COVERS", "EMBED_STATEMENT", "FRONTIER_CLIP", "STATEMENT", "noised_d1"]

COVERS = {
    "label-rr": "each overlap row's label (label-DP, replace-one) in everything the server sends (D1 in either "
                "variant, and few-shot's client-return pseudo-labels) and trains: the randomized labels are drawn once "
                "and everything else is post-processing",
    "grad-gauss": "each overlap row's label (label-DP, replace-one: sensitivity 2C) in D1 to every party, even all "
                  "parties together (D1 is sent once: one Gaussian release per row); not the head the server trains "
                  "on the true labels afterwards, which never leaves it",
    "embed-gauss": "each row's raw columns at its party (feature-DP, replace-one: sensitivity 2C) in the "
                   "representations of it that party sends: an overlap row twice (U1, U2; few-shot's client return "
                   "three times, with the refit), a test or unaligned row once; for the extractors the run used taken "
                   "as given: what the extractors, fitted on the party's raw columns without noise, carry about a row "
                   "into other rows' representations and into the saved model is not covered",
    "dcor": DCOR_COVERS,
}
#: one-/few-shot VFL's statement of its defences (the shared LabelDefence reports its guarantees with it)
STATEMENT = Statement(COVERS, "each D1 row, joint over the parties, clipped to C and Gaussian noise of std sigma*C "
                              "added (released once)")
#: one-/few-shot VFL's statement of its embedding noise (the releases per row: the configuration's embed_releases)
EMBED_STATEMENT = EmbedStatement(COVERS["embed-gauss"], "each representation row clipped to L2 norm C by its party "
                                                        "and Gaussian noise of std sigma*C added (os.urandom)")
#: the clip norm of the frontier and the audit's defended run: about the median L2 norm (0.51; largest 0.63) of a
#: joint D1 row at the head's public initialisation on the digits, so clipping rarely binds and the noise is set
#: against the signal's own scale
FRONTIER_CLIP = 0.5


def noised_d1(grads: list[np.ndarray], clip: float, noise_multiplier: float) -> list[np.ndarray]:
    """Every party's D1 block after the joint row is clipped to ``clip`` and N(0, (σ·clip)²) is added to each
    coordinate (float32 blocks, in party order; noise from the OS CSPRNG)."""
    joint = np.concatenate([np.asarray(g, np.float64) for g in grads], axis=1)
    clipped, _ = dpm.clip_rows(joint, clip)
    noised = clipped + dpm.gaussian_noise(joint.shape, noise_multiplier * clip)
    widths = np.cumsum([np.shape(g)[1] for g in grads])[:-1]
    return [np.ascontiguousarray(part, dtype=np.float32) for part in np.split(noised, widths, axis=1)]
