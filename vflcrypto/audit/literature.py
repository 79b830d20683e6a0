"""Published attacks on vertical FL and secure aggregation, run on one role's view and scored against a baseline.

Every function here is one attack from the literature. Its input is **one role's view**:
arrays decoded from the messages that role received in a run (an audit tap, or a run record
read back) plus that role's own data and side knowledge (the few labels or raw rows the
paper grants the attacker). Ground truth (``truth``, the victim's raw columns on the rows
the attacker does not know) is used only to *score* the attack. Each returns an
:class:`~vflcrypto.audit.ledger.EmpiricalFinding` whose ``paper`` names the publication,
whose ``baseline`` is what the attack achieves without the leak (chance, the majority
class, or the same attack on rows whose pairing was shuffled), and whose ``flagged`` says the
attack beat that baseline at ``p <`` :data:`~vflcrypto.audit.attacks.ALPHA`.

Attacks (numpy only: every model an attacker trains here is a closed-form or full-batch fit):

* :func:`norm_scoring` and :func:`direction_scoring` — label inference from the per-row
  gradients a feature party receives (:data:`LI_2022`);
* :func:`model_completion` — passive label inference from the party's own bottom-model
  outputs with a handful of known labels (:data:`FU_2022`);
* :func:`representation_inversion` — the server decodes a party's raw columns from the
  representations it received, having learned the decoder on rows whose raw values it
  knows (:data:`HE_2019`);
* :func:`round_difference` — a secure-aggregation server subtracts the sums of two rounds
  whose survivors differ by one client and reads that client's input (:data:`SO_2023`).
  The model-inconsistency attack of :data:`PASQUINI_2022` is an active server's and lives
  with the protocol it attacks (``vflcrypto.protocols.hfl.audit``).

The multi-class generalisations (the papers' label attacks are stated for binary labels)
are given in each function's docstring. Randomness here only simulates the attacker's side
knowledge (which rows it knows) and null distributions: a seeded numpy generator, no secret.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import AuditError
from ..runtime.declarations import Protection
from .attacks import ALPHA, accuracy_finding, normal_isf, normal_sf, not_measured
from .ledger import EmpiricalFinding

__all__ = [
    "FU_2022",
    "GUO_2022",
    "HE_2019",
    "KMPRT_2017",
    "LI_2022",
    "MAX_ROWS",
    "PAPERS",
    "PASQUINI_2022",
    "SO_2023",
    "TAKAHASHI_2023",
    "WENG_2020",
    "auc_finding",
    "direction_scoring",
    "inversion_r2",
    "known_labels",
    "model_completion",
    "norm_scoring",
    "representation_inversion",
    "roc_auc",
    "round_difference",
]

LI_2022 = "Li et al., Label Leakage and Protection in Two-party Split Learning, ICLR 2022"
FU_2022 = "Fu et al., Label Inference Attacks Against Vertical Federated Learning, USENIX Security 2022"
HE_2019 = "He, Zhang and Lee, Model Inversion Attacks against Collaborative Inference, ACSAC 2019"
TAKAHASHI_2023 = ("Takahashi, Liu and Liu, Eliminating Label Leakage in Tree-Based Vertical Federated Learning, "
                  "arXiv:2307.10318, 2023")
WENG_2020 = "Weng et al., Privacy Leakage of Real-World Vertical Federated Learning, arXiv:2011.09290, 2020"
GUO_2022 = ("Guo et al., Birds of a Feather Flock Together: How Set Bias Helps to Deanonymize You via Revealed "
            "Intersection Sizes, USENIX Security 2022")
KMPRT_2017 = ("Kolesnikov, Matania, Pinkas, Rosulek and Trieu, Practical Multi-party Private Set Intersection from "
              "Symmetric-Key Techniques, ACM CCS 2017")
SO_2023 = ("So, Ali, Güler, Jiao and Avestimehr, Securing Secure Aggregation: Mitigating Multi-Round Privacy "
           "Leakage in Federated Learning, AAAI 2023")
PASQUINI_2022 = ("Pasquini, Francati and Ateniese, Eluding Secure Aggregation in Federated Learning via Model "
                 "Inconsistency, ACM CCS 2022")
#: short key -> citation of every paper an attack here (or in :mod:`.literature_tabular`, :mod:`.literature_psi`,
#: or an audit) reproduces
PAPERS = {"li2022": LI_2022, "fu2022": FU_2022, "he2019": HE_2019, "takahashi2023": TAKAHASHI_2023,
          "weng2020": WENG_2020, "guo2022": GUO_2022, "kmprt2017": KMPRT_2017, "so2023": SO_2023,
          "pasquini2022": PASQUINI_2022}
#: the inversion attack works on at most this many rows (a seeded subsample beyond): its kernels cost O(rows^2)
#: memory and an O(rows^3) eigendecomposition
MAX_ROWS = 1500
_ZA = normal_isf(ALPHA)  # the one-sided critical value of ALPHA (about 4.26)


# --------------------------------------------------------------------------- side knowledge and scores


def known_labels(truth: Sequence[int] | np.ndarray, per_class: int, *, seed: int = 0) -> dict[int, int]:
    """The attacker's side knowledge of labels: ``per_class`` rows of every class, row -> label.

    This *simulates* what the papers grant the attacker (Li et al.: the label of one
    example; Fu et al.: a few labelled examples per class, e.g. 40 for CIFAR-10's 10
    classes): the rows are drawn with a seeded generator from the classes' rows, so the
    truth decides only *which* rows the attacker is assumed to know.
    """
    y = np.asarray(truth).ravel()
    rng = np.random.default_rng(seed)  # simulated side knowledge, not a secret
    out: dict[int, int] = {}
    for c in np.unique(y):
        rows = np.flatnonzero(y == c)
        for r in rng.permutation(rows)[:per_class]:
            out[int(r)] = int(c)
    return out


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(1, len(x) + 1, dtype=np.float64)
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(inv, weights=ranks) / counts)[inv]  # average ranks of ties


def roc_auc(scores: Sequence[float] | np.ndarray, positive: Sequence[bool] | np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` for the rows marked ``positive`` (Mann–Whitney U / n1 n0; ties count
    one half). The papers' *leak AUC*: 1 recovers every label, 0.5 is chance."""
    s, pos = np.asarray(scores, np.float64).ravel(), np.asarray(positive, bool).ravel()
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if s.shape != pos.shape or not n1 or not n0:
        raise AuditError(f"an AUC needs scores for both classes, got {n1} positive and {n0} negative rows")
    r = _ranks(s)
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def _auc_test(auc: float, n1: int, n0: int) -> tuple[float, float]:
    """One-sided p-value of an AUC above 0.5 and the smallest AUC flagged (Mann–Whitney normal approximation)."""
    sd = math.sqrt((n1 + n0 + 1) / (12.0 * n1 * n0))
    return normal_sf((auc - 0.5) / sd), 0.5 + _ZA * sd


def auc_finding(observer: str, name: str, score: np.ndarray, positive: np.ndarray, description: str, *,
                paper: str, attacks: Sequence[str], protection: Protection | None) -> EmpiricalFinding:
    """The leak AUC of ``score`` for the rows whose label is ``positive`` (True), against chance (0.5):
    a one-sided Mann–Whitney test; ``min_effect`` is the smallest AUC it flags at these class sizes."""
    t = np.asarray(positive, bool)
    n1, n0 = int(t.sum()), int((~t).sum())
    auc = roc_auc(np.asarray(score, np.float64), t)
    p, crit = _auc_test(auc, n1, n0)
    return EmpiricalFinding(observer, name, auc, 0.5, description, attacks=tuple(attacks), protection=protection,
                            flagged=p < ALPHA, p_value=p, samples=n1 + n0, min_effect=crit,
                            detects=f"AUC >= {crit:.3f} on {n1 + n0} rows", paper=paper)


def _null_finding(observer: str, name: str, value: float, null: np.ndarray, *, paper: str, attacks: Sequence[str],
                  protection: Protection | None, description: str, samples: int, unit: str) -> EmpiricalFinding:
    """``value`` against the same attack's values on shuffled pairings: baseline = their mean, normal z-test."""
    mu, sd = float(np.mean(null)), float(np.std(null)) + 1e-12
    z = (value - mu) / sd
    return EmpiricalFinding(observer, name, value, mu, description, attacks=tuple(attacks), protection=protection,
                            flagged=bool(z > _ZA), p_value=normal_sf(z), samples=samples, min_effect=mu + _ZA * sd,
                            detects=f"{unit} >= {mu + _ZA * sd:.3f} (null: pairs shuffled {len(null)} times)",
                            paper=paper)


def _labels(G: np.ndarray, truth: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    G, y = np.asarray(G, np.float64), np.asarray(truth).ravel()
    if G.ndim != 2 or len(G) != len(y) or len(y) < 4:
        raise AuditError(f"{what}: need one row per label (>= 4), got {G.shape} for {y.size} labels")
    return G, y


# --------------------------------------------------------------------------- Li et al. (ICLR 2022)


def norm_scoring(observer: str, name: str, G: np.ndarray, truth: np.ndarray, *, attacks: Sequence[str],
                 protection: Protection | None = None, positive: int | None = None,
                 shuffles: int = 200) -> EmpiricalFinding:
    """Norm scoring (Li et al., ICLR 2022, section 3): the row norms of the received gradient predict the labels.

    ``G`` holds one received gradient row per example (∂L/∂H of that example's
    representation), ``truth`` its true label (scoring only). In the paper's binary
    setting the positive class is the rare one, so its examples' loss gradients are the
    larger: the score is ‖g_i‖ and the value the leak AUC for ``positive`` (default: the
    larger label), scored against chance (0.5) by the Mann–Whitney normal approximation.

    With C > 2 classes (our generalisation): per class c, the AUC of ‖g_i‖ for c against
    the other classes, taken in the better direction (an attacker told which classes draw
    the larger gradients, as the paper's attacker is told the positives are rare), averaged
    over the classes. Orienting by the truth lifts the statistic above 0.5 even without a
    leak, so the baseline is the same statistic on shuffled labels.
    """
    G, y = _labels(G, truth, name)
    norms = np.linalg.norm(G, axis=1)
    classes = np.unique(y)
    if len(classes) < 2:
        raise AuditError(f"{name}: the rows hold one class only")
    if len(classes) == 2:
        pos = int(classes.max()) if positive is None else int(positive)
        n1, n0 = int(np.sum(y == pos)), int(np.sum(y != pos))
        auc = roc_auc(norms, y == pos)
        p, crit = _auc_test(auc, n1, n0)
        return EmpiricalFinding(observer, name, auc, 0.5,
                                f"leak AUC of the received gradient's row norms for label {pos} ({n1} of "
                                f"{n1 + n0} rows; larger norm = label {pos}); baseline: chance",
                                attacks=tuple(attacks), protection=protection, flagged=p < ALPHA, p_value=p,
                                samples=n1 + n0, min_effect=crit, detects=f"AUC >= {crit:.3f} on {n1 + n0} rows",
                                paper=LI_2022)
    r = _ranks(norms)

    def oriented(labels: np.ndarray) -> float:
        aucs = []
        for c in classes:
            m = labels == c
            n1, n0 = int(m.sum()), int((~m).sum())
            a = (r[m].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)
            aucs.append(max(a, 1 - a))
        return float(np.mean(aucs))

    rng = np.random.default_rng(0)  # the null's label shuffles: not secret
    null = np.asarray([oriented(rng.permutation(y)) for _ in range(shuffles)])
    return _null_finding(observer, name, oriented(y), null, paper=LI_2022, attacks=attacks, protection=protection,
                         samples=len(y), unit="mean one-vs-rest AUC",
                         description=f"{len(classes)} classes: mean over classes of the one-vs-rest AUC of the "
                                     "received gradient's row norms, each in its better direction (the binary "
                                     "attack generalised); baseline: the same on shuffled labels")


def direction_scoring(observer: str, name: str, G: np.ndarray, truth: np.ndarray, known: Mapping[int, int], *,
                      attacks: Sequence[str], protection: Protection | None = None,
                      positive: int | None = None) -> EmpiricalFinding:
    """Direction scoring (Li et al., ICLR 2022, section 3): cosine similarity with a row whose label is known.

    In a two-class run the gradients of one class point one way and those of the other
    the opposite way; the attacker, who knows the label of one example (``known``: row ->
    label, its side knowledge), scores every other row by the cosine of its gradient with
    that example's (the mean cosine over its known ``positive`` rows): the value is the leak
    AUC for ``positive`` on the rows it did not know, against chance.

    With C > 2 classes (our generalisation): the attacker knows one row (or a few) per
    class and gives every other row the label of the known row whose gradient is nearest in
    cosine; the value is the accuracy on the unknown rows against the majority class's
    share (what a guess without the gradients achieves), by an exact binomial test.
    """
    G, y = _labels(G, truth, name)
    unit = G / np.maximum(np.linalg.norm(G, axis=1, keepdims=True), 1e-30)
    rows = np.asarray(sorted(known), dtype=np.int64)
    labels = np.asarray([known[int(r)] for r in rows])
    rest = np.setdiff1d(np.arange(len(y)), rows)
    if not len(rows) or len(rest) < 2 or rows.max() >= len(y):
        raise AuditError(f"{name}: need known rows inside the {len(y)} rows and at least 2 others")
    cos = unit[rest] @ unit[rows].T
    classes = np.unique(y)
    if len(classes) == 2:
        pos = int(classes.max()) if positive is None else int(positive)
        if not np.any(labels == pos):
            raise AuditError(f"{name}: direction scoring needs a known row of label {pos}")
        return auc_finding(observer, name, cos[:, labels == pos].mean(1), y[rest] == pos,
                           f"leak AUC of the cosine between each received gradient row and the gradient of "
                           f"{int(np.sum(labels == pos))} row(s) it knows to have label {pos}, on the "
                           f"{len(rest)} rows it did not know; baseline: chance",
                           paper=LI_2022, attacks=attacks, protection=protection)
    guess = labels[cos.argmax(1)]
    majority = float(np.max(np.unique(y[rest], return_counts=True)[1]) / len(rest))
    found = accuracy_finding(observer, name, guess, y[rest], majority, attacks=attacks, protection=protection,
                             description=f"{len(classes)} classes: each of the {len(rest)} rows it did not know "
                                         "gets the label of the known row whose received gradient is nearest in "
                                         f"cosine ({len(rows)} known rows); baseline: the majority class's share")
    return dataclasses.replace(found, paper=LI_2022)


# --------------------------------------------------------------------------- Fu et al. (USENIX Security 2022)


def _softmax_head(X: np.ndarray, y: np.ndarray, n_classes: int, l2: float, steps: int) -> np.ndarray:
    """A multinomial logistic regression (weights with a bias row) by full-batch gradient descent from zero."""
    A = np.hstack([X, np.ones((len(X), 1))])
    Y = np.eye(n_classes)[y]
    W = np.zeros((A.shape[1], n_classes))
    step = 1.0 / (0.5 * float(np.linalg.eigvalsh(A.T @ A / len(A)).max()) + l2)
    for _ in range(steps):
        Z = A @ W
        P = np.exp(Z - Z.max(1, keepdims=True))
        P /= P.sum(1, keepdims=True)
        W -= step * (A.T @ (P - Y) / len(A) + l2 * np.vstack([W[:-1], np.zeros((1, n_classes))]))
    return W


def model_completion(observer: str, name: str, H: np.ndarray, truth: np.ndarray, known: Mapping[int, int], *,
                     attacks: Sequence[str], protection: Protection | None = None, l2: float = 1e-2,
                     steps: int = 300) -> EmpiricalFinding:
    """Passive model completion (Fu et al., USENIX Security 2022, section 4): the feature party completes its
    bottom model with an inference head trained on a handful of labels.

    ``H`` holds the party's own bottom-model outputs (the representations it sent) for every
    row, ``known`` the rows whose labels it knows (Fu et al. use e.g. 40 for CIFAR-10, 20
    for Breast Cancer Wisconsin). The head is a multinomial logistic regression on the
    standardised outputs (the paper trains an MLP head with MixMatch on the unlabelled rows
    too: ours is the supervised lower bound). The value is the head's accuracy on the rows
    it did not know, against the majority class's share among them (exact binomial test).
    A bottom model that training shaped to separate the classes completes well; one whose
    outputs carry nothing about the labels stays at the baseline.
    """
    H, y = _labels(H, truth, name)
    rows = np.asarray(sorted(known), dtype=np.int64)
    rest = np.setdiff1d(np.arange(len(y)), rows)
    if len(rows) < 2 or len(rest) < 2 or rows.max() >= len(y):
        raise AuditError(f"{name}: need >= 2 known rows inside the {len(y)} rows and >= 2 others")
    classes = np.unique(np.asarray([known[int(r)] for r in rows]))
    index = {int(c): i for i, c in enumerate(classes)}
    sd = H.std(0)
    Z = (H - H.mean(0)) / np.where(sd > 0, sd, 1.0)  # the party standardises its own outputs (all rows)
    W = _softmax_head(Z[rows], np.asarray([index[known[int(r)]] for r in rows]), len(classes), l2, steps)
    guess = classes[(np.hstack([Z[rest], np.ones((len(rest), 1))]) @ W).argmax(1)]
    majority = float(np.max(np.unique(y[rest], return_counts=True)[1]) / len(rest))
    found = accuracy_finding(observer, name, guess, y[rest], majority, attacks=attacks, protection=protection,
                             description=f"an inference head (softmax regression) on its own bottom-model outputs, "
                                         f"fitted on {len(rows)} rows whose labels it knows, labels the other "
                                         f"{len(rest)} rows; baseline: the majority class's share")
    return dataclasses.replace(found, paper=FU_2022)


# --------------------------------------------------------------------------- representation inversion


def _standardise(A: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mu, sd = A[rows].mean(0), A[rows].std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return (A - mu) / sd, mu, sd


class _Decoder:
    """Kernel ridge decoders from representations to raw columns, fitted on ``train``, predicting ``test``.

    Kernels: linear (the linear probe's family) and RBF at two widths around the median
    squared distance; penalties over a grid relative to each kernel's mean eigenvalue (one
    eigendecomposition per kernel serves every penalty and every null shuffle). The attacker
    chooses kernel and penalty by the exact leave-one-out error on its own known pairs, so
    the held-out rows play no part in fitting or choosing.
    """

    LAMBDAS = (1e-2, 1e-1, 1.0, 10.0, 100.0)
    WIDTHS = (0.5, 2.0)

    def __init__(self, H: np.ndarray, train: np.ndarray, test: np.ndarray) -> None:
        self.train, self.test = train, test
        Z = _standardise(H, train)[0]
        A, B = Z[train], Z[test]
        na, nb = (A * A).sum(1), (B * B).sum(1)
        d2 = np.maximum(na[:, None] + na[None, :] - 2 * A @ A.T, 0.0)
        med = float(np.median(d2[np.triu_indices(len(A), 1)])) or 1.0
        dt = np.maximum(nb[:, None] + na[None, :] - 2 * B @ A.T, 0.0)
        kernels = [(A @ A.T, B @ A.T)]
        kernels += [(np.exp(-d2 / (w * med)), np.exp(-dt / (w * med))) for w in self.WIDTHS]
        self.fits = []
        for K, Kt in kernels:
            s, V = np.linalg.eigh(K)
            s = np.clip(s, 0.0, None)
            lam = np.asarray(self.LAMBDAS) * (float(s.mean()) or 1.0)
            f = s[None, :] / (s[None, :] + lam[:, None])  # (penalties, eigenvalues): the shrinkage per penalty
            self.fits.append((s, V, Kt, lam, f, 1.0 / np.maximum(1.0 - (V * V) @ f.T, 1e-9)))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The held-out rows' raw columns as the decoder with the smallest leave-one-out error predicts them."""
        Yall, mu, sd = _standardise(X, self.train)
        Y = Yall[self.train]
        c = Y.shape[1]
        best: tuple[float, int, int] | None = None
        for k, (_s, V, _Kt, lam, f, inv) in enumerate(self.fits):
            VtY = V.T @ Y
            # every penalty's leave-one-out residuals at once: (Y - hat Y) / (1 - diag(hat)), hat = V diag(f) V^T
            R = V @ ((1.0 - f)[:, :, None] * VtY[None, :, :]).transpose(1, 0, 2).reshape(len(V), len(lam) * c)
            errs = ((R.reshape(len(V), len(lam), c) * inv[:, :, None]) ** 2).sum((0, 2))
            j = int(errs.argmin())
            if best is None or errs[j] < best[0]:
                best = (float(errs[j]), k, j)
        assert best is not None
        s, V, Kt, lam, _, _ = self.fits[best[1]]
        return (Kt @ (V @ ((V.T @ Y) / (s + lam[best[2]])[:, None]))) * sd + mu


def _oof_r2(decoders: Sequence[_Decoder], X: np.ndarray) -> float:
    """R² of every row's out-of-fold reconstruction, averaged over the columns that vary (as the linear probe's)."""
    rows = np.concatenate([d.test for d in decoders])
    pred = np.empty_like(X)
    for d in decoders:
        pred[d.test] = d.predict(X)
    truth, pred = X[rows], pred[rows]
    sst = ((truth - truth.mean(0)) ** 2).sum(0)
    ok = sst > 1e-12
    return float(np.mean(1.0 - ((truth - pred) ** 2).sum(0)[ok] / sst[ok])) if ok.any() else 0.0


def _fold_decoders(H: np.ndarray, known_fraction: float, seed: int) -> list[_Decoder]:
    """Cross-fitting: ``m = round(1 / (1 - known_fraction))`` folds, each held out from a decoder fitted on the rest
    (so each decoder knows a fraction ``(m - 1) / m`` of the rows, and every row is scored once)."""
    if not 0.0 < known_fraction < 1.0:
        raise AuditError(f"the known fraction must lie in (0, 1), got {known_fraction}")
    n = len(H)
    m = max(2, min(n // 5, round(1.0 / (1.0 - known_fraction))))
    rng = np.random.default_rng(seed)  # simulated side knowledge (which rows the attacker knows): not secret
    order = rng.permutation(n)[:MAX_ROWS]  # a seeded subsample beyond MAX_ROWS caps the kernels' cost
    folds = [np.sort(order[i::m]) for i in range(m)]
    return [_Decoder(H, np.sort(np.setdiff1d(order, f)), f) for f in folds]


def inversion_r2(H: np.ndarray, X: np.ndarray, *, known_fraction: float = 0.5, seed: int = 0) -> float:
    """R² of the raw columns ``X`` reconstructed from the representations ``H`` by an attacker that knows the raw
    values of a ``known_fraction`` of the rows (cross-fitted: every row is reconstructed by a decoder that did not
    know it). 1: every column recovered; 0: no better than the column means."""
    H, X = np.asarray(H, np.float64), np.asarray(X, np.float64)
    return _oof_r2(_fold_decoders(H, known_fraction, seed), X)


def representation_inversion(observer: str, name: str, H: np.ndarray, X: np.ndarray, *, attacks: Sequence[str],
                             protection: Protection | None = None, known_fraction: float = 0.5, seed: int = 0,
                             shuffles: int = 20) -> EmpiricalFinding:
    """Feature inversion by the receiver of representations: a decoder from ``H`` back to the raw columns ``X``.

    The learning-based (black-box) model inversion of He, Zhang and Lee (ACSAC 2019)
    trains an inverse network on (representation, input) pairs; in vertical FL the server
    cannot query a party's extractor, so we grant it, as feature-inference attacks do, the
    raw values of a ``known_fraction`` of the rows it received representations of (leaked
    or public records of those individuals). Its decoder (kernel ridge, linear or RBF,
    chosen by leave-one-out on those pairs: at least the linear probe of
    :func:`~vflcrypto.audit.attacks.linear_probe_r2` when the known pairs say so)
    reconstructs the other rows' raw columns; the value is their R² (:func:`inversion_r2`,
    every row reconstructed once by cross-fitting). The baseline is the same attack with the
    rows of ``X`` shuffled against ``H`` (representations that carry nothing about the raw
    row), its z-score the test. Cost: one eigendecomposition of a (known rows)² kernel per
    kernel and fold; rows beyond :data:`MAX_ROWS` are subsampled.
    """
    H, X = np.asarray(H, np.float64), np.asarray(X, np.float64)
    if H.ndim != 2 or X.ndim != 2 or len(H) != len(X) or len(H) < 10:
        raise AuditError(f"{name}: need >= 10 matching rows of representations and raw columns, got {H.shape} and "
                         f"{X.shape}")
    decoders = _fold_decoders(H, known_fraction, seed)
    value = _oof_r2(decoders, X)
    rng = np.random.default_rng(seed + 1)  # the null's row shuffles: not secret
    null = np.asarray([_oof_r2(decoders, X[rng.permutation(len(X))]) for _ in range(shuffles)])
    scored = sum(len(d.test) for d in decoders)
    return _null_finding(observer, name, value, null, paper=HE_2019, attacks=attacks, protection=protection,
                         samples=scored, unit="R^2",
                         description=f"R^2 of the sender's {X.shape[1]} raw columns decoded from the received "
                                     f"representations by kernel ridge, fitted on the raw values of "
                                     f"{len(decoders[0].train)} of {scored} rows it is assumed to know, every row "
                                     f"scored by a decoder that did not know it ({len(decoders)} folds); baseline: "
                                     "the same attack with the rows shuffled")


# --------------------------------------------------------------------------- So et al. (AAAI 2023)


def _pooled_r(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[float, int]:
    """Pearson r over the concatenated pairs (each piece centred on its own) and the number of values."""
    xs = [np.asarray(a, np.float64).ravel() for a, _ in pairs]
    ys = [np.asarray(b, np.float64).ravel() for _, b in pairs]
    x = np.concatenate([a - a.mean() for a in xs])
    y = np.concatenate([b - b.mean() for b in ys])
    den = float(np.sqrt((x @ x) * (y @ y)))
    return (float(x @ y) / den if den > 0 else 0.0), len(x)


def round_difference(observer: str, name: str, aggregates: Sequence[np.ndarray], survivors: Sequence[Sequence[str]],
                     truth: Mapping[str, Sequence[np.ndarray]], *, attacks: Sequence[str], what: str = "input",
                     coords: slice = slice(None)) -> EmpiricalFinding:
    """The round-difference (disaggregation) attack on secure aggregation (So et al., AAAI 2023, section 3).

    The server's own view: the sum it computed in every round (``aggregates``) and who
    survived it (``survivors``). For every two rounds whose survivor sets differ by exactly
    one client v, the difference of their sums is v's vector plus the change of the other
    survivors' vectors between the rounds: v's vector exactly when the inputs repeat across
    rounds, close to it when they change slowly (model updates). The value is the Pearson r
    (over ``coords`` of every such difference, pooled) between the difference and v's true
    vector of the round it survived (``truth[v][round]``; scoring only).

    The baseline is what a difference of two rounds says about v when v's presence did not
    change: the differences of every two rounds with the same survivors, scored against the
    same vectors of v (the better sign, |r|); without such rounds, each attacked difference
    scored against the clients that survived both of its rounds. The test is one-sided
    (Fisher z of two correlations); randomness: none.
    """
    attacked: list[tuple[np.ndarray, np.ndarray]] = []
    same: list[np.ndarray] = []
    fallback: list[tuple[np.ndarray, np.ndarray]] = []
    targets: list[np.ndarray] = []
    found: list[str] = []

    def vec(client: str, k: int) -> np.ndarray | None:
        rows = truth.get(client, ())
        return np.asarray(rows[k], np.float64)[coords] if k < len(rows) else None

    agg = [np.asarray(a, np.float64)[coords] for a in aggregates]
    for a in range(len(agg)):
        for b in range(a + 1, len(agg)):
            sa, sb = set(survivors[a]), set(survivors[b])
            if sa == sb:
                same.append(agg[a] - agg[b])
                continue
            if len(sa ^ sb) != 1:
                continue
            (v,) = sa ^ sb
            hi, lo = (a, b) if v in sa else (b, a)
            target = vec(v, hi)
            if target is None:
                continue
            est = agg[hi] - agg[lo]
            attacked.append((est, target))
            targets.append(target)
            found.append(f"{v} (rounds {hi} - {lo})")
            fallback += [(est, t) for c in sorted(sa & sb) if (t := vec(c, hi)) is not None]
    if not attacked:
        return not_measured(observer, name, attacks, None, "no two rounds whose survivors differ by one client")
    r, n = _pooled_r(attacked)
    r2 = 1.0 - sum(float(((t - e) ** 2).sum()) for e, t in attacked) / \
        sum(float(((t - t.mean()) ** 2).sum()) for _, t in attacked)
    if same:
        base = [(d, t) for d in same for t in targets]
        how = f"the {len(same)} difference(s) of two rounds with the same survivors, scored against the same vectors"
    else:
        base = fallback
        how = "each difference scored against the clients that survived both of its rounds"
    r0, n0 = _pooled_r(base) if base else (0.0, n)
    r0 = abs(r0)
    se = math.sqrt(1.0 / max(n - 3, 1) + 1.0 / max(n0 - 3, 1))
    clip = 1.0 - 1e-12
    z = (math.atanh(min(r, clip)) - math.atanh(min(r0, clip))) / se
    crit = math.tanh(math.atanh(min(r0, clip)) + _ZA * se)
    return EmpiricalFinding(
        observer, name, r, r0,
        f"the server subtracts the sums of two rounds whose survivors differ by one client ({'; '.join(found)}) and "
        f"takes the difference as that client's {what}: Pearson r {r:.3f} over {n} values (R^2 {r2:.3f}); baseline: "
        f"{how} (|r| {r0:.3f}); by design of secure aggregation, which protects one round's sum only",
        attacks=tuple(attacks), protection=None, flagged=bool(normal_sf(z) < ALPHA), p_value=normal_sf(z),
        samples=n, min_effect=crit, detects=f"r >= {crit:.3f} on {n} values", paper=SO_2023)
