"""Split learning's label defences, run by the server (the label holder): randomized response and DP-SGD.

Each is an option of :class:`~.roles.SplitConfig` (``--label-dp``, ``--grad-noise`` /
``--grad-epsilon`` with ``--grad-clip`` and ``--dp-delta``), announced in the setup so that
every party accounts the same (ε, δ); with either on, the gradients travel as
``split.dp_gradient`` (declared :attr:`~vflcrypto.runtime.declarations.Protection.DP`).

**label-rr** (``--label-dp ε``). Before training the server replaces each overlap label by
randomized response over the C classes (kept with probability e^ε / (e^ε + C − 1); one
draw per row, :func:`vflcrypto.privacy.randomized_response`) and trains on those labels
only. Everything it computes afterwards (every gradient, the head, the predictions) is
post-processing of them: **pure ε-label-DP** for every overlap row's label (δ = 0), however
many epochs it trains. Cost: the head learns from labels of which a share 1 − keep is wrong.

**grad-gauss** (``--grad-noise σ --grad-clip C``, or ``--grad-epsilon ε``). Per step the
server computes every batch example's gradient of its own loss with respect to the head's
parameters *and* to its representations from every party, clips that joint vector to L2
norm C, and adds Gaussian noise N(0, σ²C²) to each coordinate of the head's summed gradient
and of every example's representation gradient; the head steps on the noised sum (DP-SGD,
Abadi et al. 2016) and party k receives the noised rows of its columns (divided by the
batch size, as the undefended mean-loss gradient). What it covers: the labels of the overlap
rows under the replace-one relation of label-DP (Ghazi et al., NeurIPS 2021), against every
party's view, even all parties' views together (and the head itself). Why it holds:

* the labels enter a step only through the clipped per-example vectors; changing one row's
  label changes its vector by at most 2C in L2 norm, so each step is the Gaussian mechanism
  with noise multiplier σ / 2 on the sensitivity 2C;
* everything else a step depends on is public or earlier noised output: the schedule (a
  public seed), the head (trained on noised sums only), each party's representations
  (computed from its own columns and the noised rows it received);
* the batches of an epoch partition the rows, so each row's label takes part in one step per
  epoch (the steps of one epoch compose in parallel); there is **no amplification by
  subsampling**: a feature party sends the batch rows' representations, so it knows which
  rows each step holds. The accountant therefore composes ``epochs`` Gaussian mechanisms at
  sampling rate 1 (:func:`vflcrypto.privacy.gaussian_epsilon`).

What it does not cover: the features (the server still reads every representation in the
clear; the probe and decoder attacks on them are unchanged), a server that deviates from
the protocol (a party cannot verify the clipping under the noise; the audit checks the
noise's scale), and the floating-point caveat of :mod:`vflcrypto.privacy.mechanisms`.
Cost: the extractors learn from rows whose noise is σ times the clip norm, the head from a
noised sum (the frontier, ``vflcrypto audit split --defence grad-gauss``, measures it).

**The feature parties' embedding defences** (:mod:`vflcrypto.protocols._repvfl_embed`:
``--embed-noise σ``/``--embed-epsilon ε`` with ``--embed-clip C``, and ``--dcor-weight λ``) protect
the other way: each party's raw columns against the server. Under embedding noise each party clips
and noises every representation row it sends (``split.dp_representation``,
``split.dp_test_representation``); an overlap row is released once per epoch (the batches of an
epoch partition the rows), a test row once, so :data:`EMBED_STATEMENT` composes ``epochs`` Gaussian
releases per row at sampling rate 1 (the server knows each batch's rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vflcrypto.privacy import Guarantee
from vflcrypto.privacy import mechanisms as dpm

from .._repvfl_defence import DEFENCES as LABEL_DEFENCES
from .._repvfl_defence import LabelDefence, Statement, noise_for_budget
from .._repvfl_embed import DCOR_COVERS, EMBED_DEFENCES, EmbedStatement

__all__ = ["COVERS", "DEFENCES", "EMBED_STATEMENT", "STATEMENT", "LabelDefence", "grad_guarantee",
           "noise_for_budget", "noised_step", "rr_guarantee"]

#: the label defences, then the feature parties' embedding defences (names for ``vflcrypto audit split --defence``)
DEFENCES = LABEL_DEFENCES + EMBED_DEFENCES

COVERS_RR = ("each overlap row's label (label-DP, replace-one), in everything the server sends or trains: the "
              "randomized labels are drawn once and everything else is post-processing")
COVERS_GAUSS = ("each overlap row's label (label-DP, replace-one: sensitivity 2C), in the transcript of every "
                 "party, even all parties together, and in the head; the rows of each step are known to the parties, "
                 "so no amplification by subsampling is claimed")
COVERS_EMBED = ("each row's raw columns at its party (feature-DP, replace-one: sensitivity 2C) in the representations "
                "of it that party sends: each overlap row once per epoch, each test row once (the server knows each "
                "batch's rows, so no amplification by subsampling is claimed), for the extractors the run used taken "
                "as given; what the extractors, trained on the raw columns without noise, carry about a row into "
                "other rows' representations and into the saved model is not covered")
#: defence -> what its guarantee protects
COVERS = {"label-rr": COVERS_RR, "grad-gauss": COVERS_GAUSS, "embed-gauss": COVERS_EMBED, "dcor": DCOR_COVERS}
#: split learning's statement of its embedding noise: each overlap row is released once per epoch
EMBED_STATEMENT = EmbedStatement(COVERS_EMBED, "each representation row clipped to L2 norm C by its party and "
                                               "Gaussian noise of std sigma*C added (os.urandom)", "epochs")
#: split learning's statement of its defences (the shared :class:`~vflcrypto.protocols._repvfl_defence.LabelDefence`
#: reports its guarantees with it); each row's label enters one noised step per epoch
STATEMENT = Statement(COVERS, "per-example joint clipping to C and Gaussian noise of std sigma*C (DP-SGD on the "
                              "server's step)", releases_name="epochs")


def rr_guarantee(epsilon: float, n_classes: int | None) -> Guarantee:
    """The guarantee of randomized response at ε: pure ε-label-DP, exact (no accountant needed)."""
    return LabelDefence(epsilon).guarantees(1, n_classes, STATEMENT)[0]


def grad_guarantee(noise_multiplier: float, clip: float, delta: float, epochs: int) -> Guarantee:
    """The guarantee of the clipped and noised gradients: ``epochs`` Gaussian mechanisms of noise multiplier
    σ / 2 (replace-one sensitivity 2C) at sampling rate 1, by the library's RDP accountant."""
    return LabelDefence(None, noise_multiplier, clip, delta).guarantees(epochs, None, STATEMENT)[0]


def noised_step(head: Any, opt: Any, hs: list[np.ndarray], y: np.ndarray, clip: float,
                noise_multiplier: float) -> tuple[list[np.ndarray], float]:
    """One DP-SGD step of the head and the noised representation gradients of the batch (see the module docstring).

    ``hs`` holds every party's batch representations (rows = the batch's examples), ``y`` the
    labels the server trains on. Returns the rows for each party (float32, divided by the batch
    size) and the batch's mean loss (the server's own bookkeeping, never sent).
    """
    import torch
    from torch.func import functional_call, grad, vmap

    H = torch.as_tensor(np.concatenate(hs, axis=1))
    t = torch.as_tensor(y, dtype=torch.long)
    params = {k: v.detach() for k, v in head.named_parameters()}

    def loss(p: dict[str, Any], h: Any, label: Any) -> Any:
        return torch.nn.functional.cross_entropy(functional_call(head, p, (h.unsqueeze(0),)), label.unsqueeze(0))

    head.train()
    g_params, g_h = vmap(grad(loss, argnums=(0, 1)), in_dims=(None, 0, 0))(params, H, t)
    b = len(t)
    flat = np.concatenate([*(g.reshape(b, -1).numpy() for g in g_params.values()), g_h.numpy()], axis=1)
    _, factor = dpm.clip_rows(flat, clip)
    std = noise_multiplier * clip
    with torch.no_grad():
        mean_loss = float(torch.nn.functional.cross_entropy(head(H), t))
    opt.zero_grad()
    for name, p in head.named_parameters():
        summed = np.tensordot(factor, g_params[name].numpy().astype(np.float64), axes=1)
        p.grad = torch.as_tensor((summed + dpm.gaussian_noise(summed.shape, std)) / b, dtype=p.dtype)
    opt.step()
    rows = (g_h.numpy().astype(np.float64) * factor[:, None] + dpm.gaussian_noise(g_h.shape, std)) / b
    widths = np.cumsum([h.shape[1] for h in hs])[:-1]
    return [part.astype(np.float32) for part in np.split(rows, widths, axis=1)], mean_loss
