"""Split learning's label defences, run by the server (the label holder): randomized response, DP-SGD, Marvell.

Each is an option of :class:`~.roles.SplitConfig` (``--label-dp``, ``--grad-noise`` /
``--grad-epsilon`` with ``--grad-clip`` and ``--dp-delta``: the options every representation-VFL
protocol shares, :mod:`vflcrypto.protocols._repvfl_defence`; ``--marvell-bound``, split
learning's own), announced in the setup (:class:`SplitDefence`, the shared
:class:`~vflcrypto.protocols._repvfl_defence.LabelDefence` plus Marvell's bound) so that every
party accounts the same guarantee and refuses a setup that differs from its own flags; with
either DP defence on, the gradients travel as ``split.dp_gradient`` (declared
:attr:`~vflcrypto.runtime.declarations.Protection.DP`), under Marvell as
``split.marvell_gradient`` (:attr:`~vflcrypto.runtime.declarations.Protection.NOISED`: noise
without an (ε, δ)).

**label-rr** (``--label-dp ε``). Before training the server replaces each overlap label by
randomized response over the C classes (kept with probability e^ε / (e^ε + C − 1); one
draw per row, :func:`vflcrypto.privacy.randomized_response`) and trains on those labels
only. Everything it computes afterwards (every gradient, the head, the predictions) is
post-processing of them: **pure ε-label-DP** for every overlap row's label (δ = 0), however
many epochs it trains. Cost: the head learns from labels of which a share 1 − keep is wrong.

**label-lpmst** (``--label-dp ε --label-mechanism lpmst``). LP-MST with two stages (Ghazi et
al., "Deep Learning with Label Differential Privacy", NeurIPS 2021, Algorithm 3): a public seeded
rule (:func:`lpmst_stage2`, from the schedule seed, independent of the labels) splits the overlap
rows into two halves. Stage 1 (the first ⌊epochs / 2⌋ epochs) releases half 1's labels by
RRWithPrior with the uniform prior, which is plain randomized response over the C classes, and
trains on them only (the other rows of each batch get a zero gradient). Stage 2 (the remaining
epochs): the first time a half-2 row is in a batch, the server takes the softmax of the head on
that batch's representations (the joint forward pass it runs anyway: the model trained so far
on released labels) as the row's prior and releases its label by RRWithPrior
(:func:`vflcrypto.privacy.mechanisms.rr_with_prior`: only the k* classes of largest prior can be
output, the true one with probability e^ε / (e^ε + k* − 1) if it is among them); training then
uses every released label. Each row's label is released once, by a mechanism that is pure ε-DP
whatever its prior, and a row's prior depends only on other rows' released labels and on public
or party-held values: the whole run is **pure ε-label-DP** by (adaptive) parallel composition
(the paper's Section 4), accounted by the same exact pure-ε figure as label-rr. Refused beside
the gradient noise (a run uses one label mechanism). Cost: half the rows train the first half
of the epochs alone; gain: at small ε the half-2 labels are kept far more often than RR's
e^ε / (e^ε + C − 1) (the frontier, ``vflcrypto audit split --defence label-lpmst``, measures it).

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

**marvell** (``--marvell-bound s``; binary labels only, refused for C > 2). Li et al.'s
optimised noise (ICLR 2022, :mod:`vflcrypto.privacy.marvell`): per step and per party, the
server splits the batch's gradient rows of that party by label, solves for the noise
covariance of least symmetrised KL between the two classes' perturbed gradients under the
power constraint P = s·‖ḡ_1 − ḡ_0‖² (the authors' fixed-scale runs), and adds that noise to
the rows it sends; the head trains on the true gradient (the paper's setting: only what
crosses the cut layer is perturbed). No (ε, δ): an **empirical** defence. What it bounds:
for the Gaussian model of one batch's gradients (each class isotropic around its mean), the
AUC of *any* scoring of that party's perturbed rows by label is at most ½ + √κ/2 − κ/8 for
the batch's symmetrised KL κ; the server reports the largest κ and that bound over the run.
Not covered: rows of several batches pooled (the bound is per batch), the real, non-Gaussian
distribution of the gradients, parties that pool their blocks (each party's noise is solved
for its own block), the features and the head. Marvell runs alone (not with the DP
defences). Cost: the extractors learn from noised rows (the power s·‖Δ‖² per row on
average); the frontier (``vflcrypto audit split --defence marvell``) measures it on binary
digits, beside clipped Gaussian noise there (``--defence grad-gauss --binary``).

**The feature parties' embedding defences** (:mod:`vflcrypto.protocols._repvfl_embed`:
``--embed-noise σ``/``--embed-epsilon ε`` with ``--embed-clip C``, and ``--dcor-weight λ``) protect
the other way: each party's raw columns against the server. Under embedding noise each party clips
and noises every representation row it sends (``split.dp_representation``,
``split.dp_test_representation``); an overlap row is released once per epoch (the batches of an
epoch partition the rows), a test row once, so :data:`EMBED_STATEMENT` composes ``epochs`` Gaussian
releases per row at sampling rate 1 (the server knows each batch's rows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcrypto.errors import InputDataError
from vflcrypto.privacy import Guarantee, rr_with_prior_guarantee
from vflcrypto.privacy import mechanisms as dpm

from .._repvfl_defence import DEFENCES as SHARED_DEFENCES
from .._repvfl_defence import LabelDefence, Statement, noise_for_budget
from .._repvfl_embed import DCOR_COVERS, EMBED_DEFENCES, EmbedStatement

__all__ = ["COVERS", "DEFENCES", "EMBED_STATEMENT", "LABEL_MECHANISMS", "STATEMENT", "LabelDefence", "MarvellState",
           "SplitDefence", "grad_guarantee", "lpmst_stage2", "lpmst_stage2_epoch", "marvell_guarantee",
           "noise_for_budget", "noised_step", "rr_guarantee"]

#: split learning's defences (their names in ``vflcrypto audit split --defence``): the shared label ones, LP-MST and
#: Marvell, then the feature parties' embedding defences
DEFENCES = (*SHARED_DEFENCES, "label-lpmst", "marvell", *EMBED_DEFENCES)
#: how ``--label-dp ε`` releases the labels: ``rr`` (randomized response) or ``lpmst`` (two-stage LP-MST)
LABEL_MECHANISMS = ("rr", "lpmst")

COVERS_RR = ("each overlap row's label (label-DP, replace-one), in everything the server sends or trains: the "
              "randomized labels are drawn once and everything else is post-processing")
COVERS_LPMST = ("each overlap row's label (label-DP, replace-one), in everything the server sends or trains: each "
                "label is released once by RRWithPrior (pure epsilon-DP whatever its prior), the two stages' rows are "
                "disjoint and chosen by a public rule, a row's prior depends only on other rows' released labels "
                "(parallel composition)")
COVERS_GAUSS = ("each overlap row's label (label-DP, replace-one: sensitivity 2C), in the transcript of every "
                 "party, even all parties together, and in the head; the rows of each step are known to the parties, "
                 "so no amplification by subsampling is claimed")
COVERS_MARVELL = ("each overlap row's binary label against each party's view of one batch (empirical, no "
                  "(epsilon, delta)): the AUC of any scoring of the party's perturbed rows is at most 1/2 + sqrt(k)/2 "
                  "- k/8 for the batch's symmetrised KL k, under the Gaussian model of the batch's gradients")
COVERS_EMBED = ("each row's raw columns at its party (feature-DP, replace-one: sensitivity 2C) in the representations "
                "of it that party sends: each overlap row once per epoch, each test row once (the server knows each "
                "batch's rows, so no amplification by subsampling is claimed), for the extractors the run used taken "
                "as given; what the extractors, trained on the raw columns without noise, carry about a row into "
                "other rows' representations and into the saved model is not covered")
#: defence -> what its guarantee protects
COVERS = {"label-rr": COVERS_RR, "label-lpmst": COVERS_LPMST, "grad-gauss": COVERS_GAUSS, "marvell": COVERS_MARVELL,
          "embed-gauss": COVERS_EMBED, "dcor": DCOR_COVERS}
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


def marvell_guarantee(scale: float, sum_kls: Sequence[float] | None = None) -> Guarantee:
    """Marvell's statement: no (ε, δ); the power bound s and, for the server (which solved every step), the largest
    symmetrised KL over the steps and parties and the leak-AUC bound it implies (a party knows s only)."""
    from vflcrypto.privacy import marvell

    return marvell.guarantee(scale, COVERS_MARVELL, sum_kls)


def lpmst_stage2(n: int, seed: int) -> np.ndarray:
    """LP-MST's partition of the ``n`` overlap rows: True for the rows of stage 2 (half of them, ⌈n / 2⌉), from the
    public schedule seed only (a rule that does not depend on the labels, as Algorithm 3 requires)."""
    order = np.random.default_rng([0x4C504D5354, seed]).permutation(n)  # public partition, not secret
    out = np.zeros(n, bool)
    out[order[n // 2:]] = True
    return out


def lpmst_stage2_epoch(epochs: int) -> int:
    """The first epoch of LP-MST's stage 2: ⌊epochs / 2⌋ (stage 1 trains on half 1's labels before it)."""
    return epochs // 2


@dataclass(frozen=True)
class SplitDefence(LabelDefence):
    """The shared label defences plus Marvell's power bound s (P = s·‖ḡ_1 − ḡ_0‖² per batch and party; ``None``:
    off) and how ``--label-dp`` releases the labels (``rr`` or ``lpmst``), as split learning's setup announces
    them."""

    marvell_bound: float | None = None
    label_mechanism: str = "rr"

    def __post_init__(self) -> None:
        if self.label_mechanism not in LABEL_MECHANISMS:
            raise InputDataError(f"--label-mechanism is one of {', '.join(LABEL_MECHANISMS)}, "
                                 f"not {self.label_mechanism!r}")
        if self.lpmst:
            if self.label_epsilon is None:
                raise InputDataError("--label-mechanism lpmst needs --label-dp epsilon")
            if self.noise_multiplier is not None:
                raise InputDataError("LP-MST runs without --grad-noise or --grad-epsilon (one label mechanism)")
        if self.marvell_bound is not None:
            if not (self.marvell_bound > 0 and math.isfinite(self.marvell_bound)):
                raise InputDataError(f"--marvell-bound needs a finite power bound > 0, got {self.marvell_bound}")
            if self.label_epsilon is not None or self.noise_multiplier is not None:
                raise InputDataError("Marvell runs alone: no --label-dp, --grad-noise or --grad-epsilon with "
                                     "--marvell-bound")
        super().__post_init__()

    @property
    def on(self) -> bool:
        return self.dp or self.marvell_bound is not None

    @property
    def lpmst(self) -> bool:
        """The labels are released by two-stage LP-MST (else, under ``--label-dp``, by randomized response)."""
        return self.label_mechanism == "lpmst"

    @property
    def dp(self) -> bool:
        """A DP defence is on (the gradients travel as ``split.dp_gradient``)."""
        return self.label_epsilon is not None or self.noise_multiplier is not None

    def check_task(self, n_classes: int) -> None:
        """Marvell protects binary labels only: refused, in one line, for a task of more classes."""
        if self.marvell_bound is not None and n_classes != 2:
            raise InputDataError(f"--marvell-bound: Marvell protects binary labels only, this task has {n_classes} "
                                 "classes")

    def guarantees(self, releases: int, n_classes: int | None, statement: Statement,
                   sum_kls: Sequence[float] | None = None) -> list[Guarantee]:
        """The shared defences' guarantees, then Marvell's (with the symmetrised KL of every step when the server
        gives them)."""
        out = super().guarantees(releases, n_classes, statement)
        if self.lpmst:
            assert self.label_epsilon is not None  # checked in __post_init__
            out = [rr_with_prior_guarantee(self.label_epsilon, n_classes, COVERS_LPMST) if g.defence == "label-rr"
                   else g for g in out]
        if self.marvell_bound is not None:
            out.append(marvell_guarantee(self.marvell_bound, sum_kls))
        return out

    def privacy(self, releases: int, n_classes: int | None, statement: Statement,
                sum_kls: Sequence[float] | None = None) -> dict[str, Any]:
        """The guarantees as JSON: defence name -> its (ε, δ) (None for Marvell), mechanism, accountant, coverage."""
        return {g.defence: g.to_dict() for g in self.guarantees(releases, n_classes, statement, sum_kls)}


@dataclass
class MarvellState:
    """The server's Marvell bookkeeping: per party the last batch's solution and direction (reused for a batch of
    one label, which has no Δ), and every step's symmetrised KL."""

    last: dict[int, tuple[Any, np.ndarray]] = field(default_factory=dict)
    sum_kls: list[float] = field(default_factory=list)

    def noise(self, k: int, G: np.ndarray, y: np.ndarray, scale: float) -> tuple[np.ndarray, Any, np.ndarray]:
        """Party ``k``'s rows ``G`` (labels ``y``) with Marvell's noise at power bound ``scale``: the rows (float32),
        the solution and the unit direction."""
        from vflcrypto.privacy import marvell

        prev = self.last.get(k)
        rows, sol, unit = marvell.marvell_noise(G, y, scale, *(prev or (None, None)))
        self.last[k] = (sol, unit)
        self.sum_kls.append(sol.sum_kl)
        return rows.astype(np.float32), sol, unit


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
