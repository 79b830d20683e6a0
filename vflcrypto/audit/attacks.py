"""Empirical attacks on what a role received, and the statistics that score them.

Each function takes payloads a role *received in a run* (read from the run's
:class:`~vflcrypto.runtime.channel.AuditTap`) and what that role holds (its own key, its mask
state), runs the attack an adversary in that role could run, and returns
:class:`~vflcrypto.audit.ledger.EmpiricalFinding` objects whose value is computed from the
attack's output. Ground truth (the secret behind a masked value, the true labels) is
used only to *score* an attack, never as its input.

Verdicts. A check flags when the attack beats chance at ``p < ALPHA`` (``ALPHA`` =
1e-5 per check, so an honest run is flagged by accident about once in 10^5 checks; the
test suite runs a few dozen), or by an exact criterion that a protected message meets
with negligible probability (a Paillier ciphertext that decodes without the key). Each
finding states the smallest effect its sample size detects at ``ALPHA``.

Statistics are implemented here (no SciPy at run time) and checked against SciPy in the
tests: the Kolmogorov distribution by its two classical series (so a statistic of 0
gives p = 1), Stephens' finite-sample correction for Kolmogorov–Smirnov tests, the exact
binomial tail, Fisher's z for Pearson correlations and the normal approximation for
Spearman's rank correlation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import AuditError
from ..runtime.declarations import Protection
from .ledger import EmpiricalFinding

__all__ = [
    "ALPHA",
    "accuracy_finding",
    "adjacent_order_finding",
    "ascents_sf",
    "binomial_sf",
    "equal_ciphertext_classes",
    "kolmogorov_sf",
    "ks_critical",
    "ks_one_sample",
    "ks_two_sample",
    "linear_probe_r2",
    "normal_isf",
    "normal_sf",
    "not_measured",
    "order_finding",
    "partition_finding",
    "pearson",
    "probe_finding",
    "real_mask_findings",
    "ring_mask_findings",
    "small_residues_finding",
    "spearman",
    "strip_known_paillier",
    "unrandomized_finding",
    "unrandomized_paillier",
]

ALPHA = 1e-5


# --------------------------------------------------------------------------- distributions


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def kolmogorov_sf(lam: float) -> float:
    """P(K > lam) for the Kolmogorov distribution K (the asymptotic KS p-value).

    Uses Q(l) = 2 sum (-1)^(k-1) exp(-2 k^2 l^2) for l >= 1 and, where that series
    converges badly, 1 - (sqrt(2 pi) / l) sum exp(-(2k-1)^2 pi^2 / (8 l^2)); Q(0) = 1.
    """
    if lam <= 0.0:
        return 1.0
    if lam < 1.0:
        s = sum(math.exp(-((2 * k - 1) ** 2) * math.pi**2 / (8.0 * lam * lam)) for k in range(1, 30))
        return min(1.0, max(0.0, 1.0 - math.sqrt(2.0 * math.pi) / lam * s))
    s = sum((-1) ** (k - 1) * math.exp(-2.0 * k * k * lam * lam) for k in range(1, 101))
    return min(1.0, max(0.0, 2.0 * s))


def _ks_scale(n_eff: float) -> float:
    root = math.sqrt(n_eff)
    return root + 0.12 + 0.11 / root  # Stephens (1970)


def _ks_statistic(x: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    x = np.sort(np.asarray(x, dtype=np.float64))
    n = len(x)
    f = np.clip(cdf(x), 0.0, 1.0)
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - f), np.max(f - (i - 1) / n)))


def ks_one_sample(x: Sequence[float] | np.ndarray,
                  cdf: Callable[[np.ndarray], np.ndarray] | None = None) -> tuple[float, float]:
    """Kolmogorov–Smirnov statistic and p-value of ``x`` against ``cdf`` (default U(0, 1))."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.size == 0:
        raise AuditError("KS test of an empty sample")
    d = _ks_statistic(arr, cdf if cdf is not None else (lambda v: v))
    return d, kolmogorov_sf(_ks_scale(arr.size) * d)


def ks_two_sample(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Two-sample Kolmogorov–Smirnov statistic and asymptotic p-value."""
    a, b = np.sort(np.asarray(a, dtype=np.float64)), np.sort(np.asarray(b, dtype=np.float64))
    if not a.size or not b.size:
        raise AuditError("KS test of an empty sample")
    grid = np.concatenate([a, b])
    d = float(np.max(np.abs(np.searchsorted(a, grid, side="right") / a.size
                            - np.searchsorted(b, grid, side="right") / b.size)))
    return d, kolmogorov_sf(_ks_scale(a.size * b.size / (a.size + b.size)) * d)


def ks_critical(n: float, alpha: float = ALPHA) -> float:
    """The smallest KS statistic that a sample of (effective) size ``n`` flags at ``alpha``."""
    lo, hi = 0.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if kolmogorov_sf(mid) > alpha else (lo, mid)
    return hi / _ks_scale(n)


def binomial_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), exactly (log-space sum)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    # log C(n, j) from log C(n, k) by the ratio C(n, j) / C(n, j-1) = (n-j+1)/j, summed in numpy
    j = np.arange(k + 1, n + 1, dtype=np.float64)
    log_choose = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + np.concatenate(
        ([0.0], np.cumsum(np.log(n - j + 1) - np.log(j))))
    logs = log_choose + np.arange(k, n + 1) * (lp - lq) + n * lq
    top = float(logs.max())
    return min(1.0, math.exp(top) * float(np.exp(logs - top).sum()))


def ascents_sf(sizes: Sequence[int], k: int) -> float:
    """P(at least ``k`` ascents in all) when blocks of ``sizes`` distinct items are each in a
    uniformly random, independent order, exactly.

    An order of n distinct items has j ascents (neighbours that increase) in A(n, j) of
    the n! orders (the Eulerian numbers, A(n, j) = (j + 1) A(n-1, j) + (n - j) A(n-1, j-1));
    the blocks' counts are convolved.
    """
    total, orders = [1], 1
    for n in sizes:
        row = [1]
        for m in range(2, n + 1):
            row = [(j + 1) * (row[j] if j < len(row) else 0) + (m - j) * (row[j - 1] if j else 0)
                   for j in range(m)]
        conv = [0] * (len(total) + len(row) - 1)
        for i, a in enumerate(total):
            for j, b in enumerate(row):
                conv[i + j] += a * b
        total, orders = conv, orders * math.factorial(max(n, 1))
    return min(1.0, sum(total[max(k, 0):]) / orders)


def normal_isf(p: float) -> float:
    """The z >= 0 with P(Z > z) = ``p`` (p <= 1/2), by bisection: a one-sided test's critical value."""
    lo, hi = 0.0, 40.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if normal_sf(mid) > p else (lo, mid)
    return hi


def _z_two_sided(alpha: float) -> float:
    return normal_isf(alpha / 2)


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Pearson's r and its two-sided p-value (Fisher's z); a constant input gives (0, 1)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = x.size
    if n != y.size or n < 4:
        raise AuditError("correlation needs two samples of the same size >= 4")
    sx, sy = x.std(), y.std()
    if sx == 0 or sy == 0:
        return 0.0, 1.0
    r = float(np.clip(np.mean((x - x.mean()) * (y - y.mean())) / (sx * sy), -1.0, 1.0))
    if abs(r) == 1.0:
        return r, 0.0
    return r, min(1.0, 2 * normal_sf(abs(math.atanh(r)) * math.sqrt(n - 3)))


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(len(x), dtype=np.float64)
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=ranks)
    return sums[inv] / counts[inv]  # average ranks of ties


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Spearman's rho and its two-sided p-value (normal approximation sqrt(n-1) rho)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    rho, _ = pearson(_ranks(x), _ranks(y))
    return rho, min(1.0, 2 * normal_sf(abs(rho) * math.sqrt(len(x) - 1)))


# --------------------------------------------------------------------------- masked views


def _finding(observer: str, name: str, kind: str, protection: Protection, value: float,
             baseline: float | None, p: float, samples: int, detects: str,
             description: str, min_effect: float | None = None) -> EmpiricalFinding:
    """A statistical finding; ``min_effect`` defaults to ``baseline`` (the critical value it is set beside)."""
    return EmpiricalFinding(observer, name, value, baseline, description, attacks=(kind,),
                            protection=protection, flagged=p < ALPHA, p_value=p, samples=samples,
                            detects=detects, min_effect=baseline if min_effect is None else min_effect)


def not_measured(observer: str, name: str, kinds: Sequence[str], protection: Protection | None,
                 why: str) -> EmpiricalFinding:
    """The finding of a check that could not run (``why``): verdict *not measured*, a failure of the audit."""
    return EmpiricalFinding(observer, name, float("nan"), None, f"not measured: {why}", attacks=tuple(kinds),
                            protection=protection, measured=False, samples=0)


def _truth_findings(observer: str, kind: str, what: str, centred: np.ndarray,
                    truth: Sequence[Sequence[np.ndarray]] | None,
                    protection: Protection) -> list[EmpiricalFinding]:
    if truth is None:
        return []
    t = np.concatenate([np.asarray(v, dtype=np.float64).ravel() for stream in truth for v in stream])
    if t.size != centred.size:
        raise AuditError(f"{what}: {t.size} true values for {centred.size} observed ones")
    r, p = pearson(centred, t)
    rc = math.tanh(_z_two_sided(ALPHA) / math.sqrt(max(1, t.size - 3)))
    return [_finding(observer, f"{what}: correlation with the secret", kind, protection,
                     abs(r), rc, p, t.size, f"|r| >= {rc:.3f} over {t.size} values",
                     f"Pearson r between what {observer} decoded (centred) and the true values "
                     "behind the masks; baseline = the smallest |r| this sample size flags", rc)]


def _consecutive(streams: Sequence[Sequence[Any]]) -> list[tuple[Any, Any]]:
    """Pairs of consecutive messages of equal length within each sender's stream."""
    return [(a, b) for stream in streams for a, b in itertools.pairwise(stream)
            if len(a) == len(b) and len(a)]


def ring_mask_findings(observer: str, kind: str, what: str,
                       streams: Sequence[Sequence[Sequence[int]]], modulus: int, *,
                       truth: Sequence[Sequence[np.ndarray]] | None = None,
                       protection: Protection = Protection.MASKED,
                       truth_protection: Protection | None = None, fresh: bool = True) -> list[EmpiricalFinding]:
    """Attack values masked uniformly mod ``modulus`` as their receiver saw them.

    ``streams`` holds, per sender, the received messages in arrival order, each a
    sequence of residues; ``truth`` (optional) the secrets behind them, in the same
    shape. Three checks, pooled over senders: (1) the residues are uniform over Z_M (a
    missing or short mask leaves them near 0 and M); (2) element-wise differences of a
    sender's consecutive messages are uniform too (a mask reused across iterations
    cancels and leaves the small change of the secret); (3) the centred residues do not
    correlate with the secrets. ``truth_protection`` labels check (3) when it tests a
    different claim (e.g. that only an aggregate of the secrets is revealed). ``fresh=False``
    skips check (2) where each sender sends one message per modulus by construction (a fresh
    key per run), so no two messages share a mask that could repeat.
    """
    rows = [[[int(v) % modulus for v in msg] for msg in stream] for stream in streams]
    flat = [v for stream in rows for msg in stream for v in msg]
    names = [f"{what}: uniform over Z_M", f"{what}: fresh mask per message"]
    if not flat:
        return [not_measured(observer, n, (kind,), protection, f"{observer} received no {kind} to attack")
                for n in names]
    u = np.asarray([v / modulus for v in flat])
    d, p = ks_one_sample(u)
    crit = ks_critical(len(u))
    out = [_finding(observer, names[0], kind, protection, d, crit, p, len(u),
                    f"a CDF deviation >= {crit:.3f} from uniform over {len(u)} values",
                    f"KS distance of {observer}'s {len(u)} decoded residues / M from U(0, 1); "
                    "baseline = the smallest distance this sample flags", crit)]
    pairs = _consecutive(rows)
    if not fresh:
        pass
    elif not pairs:
        out.append(not_measured(observer, names[1], (kind,), protection,
                                f"no sender sent {observer} two {kind} messages of equal length to compare"))
    else:
        diffs = np.asarray([((y - x) % modulus) / modulus for a, b in pairs
                            for x, y in zip(a, b, strict=True)])
        d2, p2 = ks_one_sample(diffs)
        crit2 = ks_critical(len(diffs))
        out.append(_finding(observer, names[1], kind, protection, d2, crit2,
                            p2, len(diffs), f"a CDF deviation >= {crit2:.3f} over {len(diffs)} differences",
                            f"KS distance from U(0, 1) of {len(pairs)} pairs of consecutive messages' "
                            "differences mod M: a reused mask cancels in them", crit2))
    half = modulus // 2
    centred = [v - modulus if v > half else v for v in flat]
    scale = max(1, max(abs(c) for c in centred))
    out += _truth_findings(observer, kind, what, np.asarray([c / scale for c in centred]), truth,
                           truth_protection or protection)
    return out


def small_residues_finding(observer: str, name: str, kind: str, values: Sequence[int], modulus: int, *,
                           margin_bits: int = 64, protection: Protection = Protection.MASKED) -> EmpiricalFinding:
    """How many received residues lie within ``modulus / 2^margin_bits`` of 0 (mod ``modulus``): an exact test.

    A value masked uniformly mod M lands there with probability 2^-(margin_bits - 1), so a
    single hit flags (p <= n 2^-(margin_bits - 1)); an unmasked fixed-point value (a
    weight, a count) is tiny against a large ring and lands there every time. Unlike a KS
    test, this has power at any sample size, for the failure it exists for: a dropped mask.
    """
    vals = [int(v) % modulus for v in values]
    if not vals:
        return not_measured(observer, name, (kind,), protection, f"{observer} received no {kind} to attack")
    bound = modulus >> margin_bits
    hits = sum(min(v, modulus - v) < bound for v in vals)
    p = min(1.0, len(vals) * 2.0 ** -(margin_bits - 1)) if hits else 1.0
    return EmpiricalFinding(observer, name, hits / len(vals), 0.0,
                            f"{hits} of {len(vals)} residues within M / 2^{margin_bits} of 0 (a uniform residue lands "
                            f"there with probability 2^-{margin_bits - 1})", attacks=(kind,), protection=protection,
                            flagged=hits > 0, p_value=p, samples=len(vals), min_effect=0.0,
                            detects="any single unmasked value")


def _triangular_cdf(width: float) -> Callable[[np.ndarray], np.ndarray]:
    """CDF of the difference of two independent U(-width, width) variables."""
    w2 = 2.0 * width

    def cdf(x: np.ndarray) -> np.ndarray:
        x = np.clip(x, -w2, w2)
        return np.where(x < 0, (x + w2) ** 2 / (2 * w2 * w2), 1 - (w2 - x) ** 2 / (2 * w2 * w2))

    return cdf


def real_mask_findings(observer: str, kind: str, what: str, streams: Sequence[Sequence[np.ndarray]],
                       half_width: float, *, truth: Sequence[Sequence[np.ndarray]] | None = None,
                       protection: Protection = Protection.MASKED) -> list[EmpiricalFinding]:
    """:func:`ring_mask_findings` for real values masked uniformly on [-R, R] (no wrap)."""
    rows = [[np.asarray(v, dtype=np.float64).ravel() for v in stream] for stream in streams]
    flat = np.concatenate([v for stream in rows for v in stream]) if any(rows) else np.zeros(0)
    names = [f"{what}: uniform on [-R, R]", f"{what}: fresh mask per message"]
    if not flat.size:
        return [not_measured(observer, n, (kind,), protection, f"{observer} received no {kind} to attack")
                for n in names]
    d, p = ks_one_sample((flat + half_width) / (2 * half_width))
    crit = ks_critical(flat.size)
    out = [_finding(observer, names[0], kind, protection, d, crit, p, flat.size,
                    f"a CDF deviation >= {crit:.3f} over {flat.size} values",
                    f"KS distance of {observer}'s decryptions from U(-R, R), R = {half_width:.4g}", crit)]
    pairs = _consecutive(rows)
    if not pairs:
        out.append(not_measured(observer, names[1], (kind,), protection,
                                f"no sender sent {observer} two {kind} messages of equal length to compare"))
    else:
        diffs = np.concatenate([b - a for a, b in pairs])
        d2, p2 = ks_one_sample(diffs, _triangular_cdf(half_width))
        crit2 = ks_critical(diffs.size)
        out.append(_finding(observer, names[1], kind, protection, d2, crit2, p2,
                            diffs.size, f"a CDF deviation >= {crit2:.3f} over {diffs.size} differences",
                            "KS distance of consecutive messages' differences from the triangular "
                            "law of two fresh masks: a reused mask cancels in them", crit2))
    out += _truth_findings(observer, kind, what, flat, truth, protection)
    return out


# --------------------------------------------------------------------------- ciphertexts


def unrandomized_paillier(n: int, ciphertexts: Sequence[int]) -> list[int | None]:
    """Decrypt, without the key, every Paillier ciphertext that carries no randomness.

    With g = n + 1, an encryption with obfuscator 1 is c = 1 + m n mod n^2, so c = 1 mod n
    gives m = (c - 1) / n. A properly obfuscated ciphertext meets c = 1 mod n with
    probability about 2^-(|n|/2). Returns m in [0, n) or ``None`` per ciphertext.
    """
    return [(int(c) - 1) // n if int(c) % n == 1 else None for c in ciphertexts]


def equal_ciphertext_classes(ciphertexts: Sequence[int]) -> np.ndarray:
    """Group ciphertexts by value: a class id per ciphertext (equal ciphertexts share one).

    Without the key, equal ciphertexts reveal equal plaintexts only when encryption is
    deterministic (no randomness); fresh randomness makes every class a singleton except
    with negligible probability. Works for any scheme (Paillier, OU).
    """
    seen: dict[int, int] = {}
    return np.asarray([seen.setdefault(int(c), len(seen)) for c in ciphertexts], dtype=np.int64)


def strip_known_paillier(n: int, received: Sequence[int], known: Sequence[Sequence[int]]) -> list[int | None]:
    """Divide out of each received ciphertext the ciphertexts the receiver knows went into it, then decode.

    A ciphertext derived homomorphically from ciphertexts its receiver sent or saw
    (``known[k][i]`` entered ``received[i]``) and plaintexts, without fresh randomness,
    leaves c / prod(known) = 1 + m n: the receiver reads m, e.g. another party's
    residual. Returns m in [0, n) or ``None`` per ciphertext.
    """
    nsq = n * n
    out: list[int | None] = []
    for i, c in enumerate(received):
        acc = int(c)
        for vec in known:
            acc = acc * pow(int(vec[i]), -1, nsq) % nsq
        out.append((acc - 1) // n if acc % n == 1 else None)
    return out


def unrandomized_finding(observer: str, kind: str, decoded: Sequence[Any],
                         protection: Protection = Protection.CIPHERTEXT,
                         what: str | None = None) -> EmpiricalFinding:
    """How many received ciphertexts of ``kind`` the receiver read without the key."""
    hits = sum(v is not None for v in decoded)
    total = len(decoded)
    return EmpiricalFinding(
        observer, what or f"{kind}: ciphertexts read without the key", hits / max(1, total), 0.0,
        f"{hits} of {total} received ciphertexts decode as c = 1 + m n (no obfuscator)",
        attacks=(kind,), protection=protection, flagged=hits > 0, samples=total, measured=total > 0,
        detects="any single ciphertext sent without randomness", min_effect=0.0)


# --------------------------------------------------------------------------- guesses and order


def accuracy_finding(observer: str, name: str, guess: np.ndarray, truth: np.ndarray,
                     baseline: float, *, attacks: Sequence[str], protection: Protection | None,
                     description: str) -> EmpiricalFinding:
    """Score per-row guesses (e.g. labels) against the truth; one-sided binomial test vs ``baseline``."""
    guess, truth = np.asarray(guess).ravel(), np.asarray(truth).ravel()
    if guess.shape != truth.shape or not truth.size:
        raise AuditError(f"{name}: {guess.size} guesses for {truth.size} true values")
    correct = int(np.sum(guess == truth))
    n = truth.size
    p = binomial_sf(correct, n, baseline)
    lo, hi = int(baseline * n), n + 1  # smallest k with P(X >= k) < ALPHA (the tail shrinks in k)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if binomial_sf(mid, n, baseline) < ALPHA else (mid + 1, hi)
    k = lo
    return EmpiricalFinding(observer, name, correct / n, baseline, description, attacks=tuple(attacks),
                            protection=protection, flagged=p < ALPHA, p_value=p, samples=n,
                            min_effect=k / n, detects=f"accuracy >= {k / n:.3f} on {n} rows")


def order_finding(observer: str, name: str, kind: str, received_position: np.ndarray,
                  sender_index: np.ndarray, description: str) -> EmpiricalFinding:
    """Does the order of what was received follow the sender's private order (Spearman)?"""
    pos, idx = np.asarray(received_position), np.asarray(sender_index)
    if pos.size < 4:
        return EmpiricalFinding(observer, name, 0.0, None, description + " (too few items to test)",
                                attacks=(kind,), protection=Protection.SHUFFLED, samples=int(pos.size),
                                measured=False)
    rho, p = spearman(pos, idx)
    rc = _z_two_sided(ALPHA) / math.sqrt(pos.size - 1)
    return EmpiricalFinding(observer, name, abs(rho), rc, description, attacks=(kind,),
                            protection=Protection.SHUFFLED, flagged=p < ALPHA, p_value=p,
                            samples=int(pos.size), detects=f"|rho| >= {rc:.3f} over {pos.size} items",
                            min_effect=rc)


def adjacent_order_finding(observer: str, name: str, kind: str, blocks: Sequence[np.ndarray],
                           description: str, *, resamples: int = 200,
                           protection: Protection = Protection.SHUFFLED, exact: bool = False) -> EmpiricalFinding:
    """Do neighbours in each received block increase more often than a random order allows?

    A receiver that sees sorted runs (e.g. cumulative counts in feature and bin order)
    can read the sender's grouping and order from them. The statistic is the number of
    strictly increasing neighbours; its null distribution is that of random orders of the
    same blocks (``resamples`` permutations; non-secret simulation randomness), scored
    as a one-sided z-test. ``exact`` (blocks of distinct values) uses the exact null
    (:func:`ascents_sf`) instead, for short blocks where the normal tail is too coarse; a
    sample too small to flag even a sorted order is then not measured.
    """
    blocks = [np.asarray(b) for b in blocks if len(b) > 1]
    if not blocks:
        return EmpiricalFinding(observer, name, 0.0, None, description + " (nothing to test)",
                                attacks=(kind,), protection=protection, measured=False)

    def stat(bs: Sequence[np.ndarray]) -> int:
        return int(sum(int(np.count_nonzero(np.diff(b) > 0)) for b in bs))

    observed = stat(blocks)
    if exact:
        return _exact_ascents(observer, name, kind, blocks, observed, description, protection)
    rng = np.random.default_rng(0)  # null-distribution simulation, not a secret
    null = np.asarray([stat([rng.permutation(b) for b in blocks]) for _ in range(resamples)], dtype=float)
    pairs = sum(len(b) - 1 for b in blocks)
    sd = max(float(null.std()), 0.5)
    z = (observed - float(null.mean())) / sd
    p = normal_sf(z)
    z_alpha = _z_two_sided(2 * ALPHA)  # one-sided ALPHA
    return EmpiricalFinding(observer, name, observed / pairs, float(null.mean()) / pairs, description,
                            attacks=(kind,), protection=protection, flagged=p < ALPHA, p_value=p,
                            samples=pairs,
                            detects=f"{z_alpha * sd / pairs:.3f} more increasing "
                                    f"neighbours (of {pairs}) than a random order",
                            min_effect=(float(null.mean()) + z_alpha * sd) / pairs)


def _exact_ascents(observer: str, name: str, kind: str, blocks: Sequence[np.ndarray], observed: int,
                   description: str, protection: Protection) -> EmpiricalFinding:
    if any(len(np.unique(b)) != len(b) for b in blocks):
        raise AuditError(f"{name}: the exact ascent test needs distinct values within each block")
    sizes = [len(b) for b in blocks]
    pairs = sum(sizes) - len(sizes)
    mean = pairs / 2  # E[ascents] of a random order of n distinct items is (n - 1) / 2
    k_min = next((k for k in range(pairs + 1) if ascents_sf(sizes, k) < ALPHA), None)
    if k_min is None:
        return EmpiricalFinding(observer, name, observed / pairs, 0.5, description +
                                f" (too few items: even {pairs} increasing neighbours of {pairs} have p >= {ALPHA:g})",
                                attacks=(kind,), protection=protection, samples=pairs, measured=False)
    p = ascents_sf(sizes, observed)
    return EmpiricalFinding(observer, name, observed / pairs, mean / pairs, description, attacks=(kind,),
                            protection=protection, flagged=p < ALPHA, p_value=p, samples=pairs,
                            detects=f"{k_min} or more increasing neighbours of {pairs} (exact null)",
                            min_effect=k_min / pairs)


# --------------------------------------------------------------------------- representations and partitions


def _null_finding(observer: str, name: str, value: float, null: np.ndarray, baseline: float, *,
                  attacks: Sequence[str], protection: Protection | None, description: str, samples: int,
                  unit: str) -> EmpiricalFinding:
    """Score ``value`` against a null distribution (the attack on shuffled rows): normal tail of its z-score."""
    mu, sd = float(np.mean(null)), float(np.std(null)) + 1e-12
    z = (value - mu) / sd
    z_alpha = _z_two_sided(2 * ALPHA)  # one-sided ALPHA
    return EmpiricalFinding(observer, name, value, baseline, description, attacks=tuple(attacks),
                            protection=protection, flagged=bool(z > z_alpha), p_value=normal_sf(z), samples=samples,
                            min_effect=mu + z_alpha * sd,
                            detects=f"{unit} >= {mu + z_alpha * sd:.3f} (null: rows shuffled, {len(null)} times)")


def partition_finding(observer: str, name: str, guess: np.ndarray, truth: np.ndarray, *, attacks: Sequence[str],
                      protection: Protection | None, description: str, shuffles: int = 200) -> EmpiricalFinding:
    """How well a partition the attacker derived (e.g. k-means clusters) matches the true classes (ARI).

    The null is the ARI of the same clusters against the labels of shuffled rows (seeded,
    not secret); the finding flags at ``p < ALPHA`` under its normal approximation.
    """
    from ..ml.metrics import adjusted_rand_index

    guess, truth = np.asarray(guess).ravel(), np.asarray(truth).ravel()
    if guess.shape != truth.shape or not truth.size:
        raise AuditError(f"{name}: {guess.size} cluster ids for {truth.size} labels")
    rng = np.random.default_rng(0)  # the null's row shuffles: not secret
    null = np.asarray([adjusted_rand_index(guess, rng.permutation(truth)) for _ in range(shuffles)])
    return _null_finding(observer, name, adjusted_rand_index(guess, truth), null, 0.0, attacks=attacks,
                         protection=protection, description=description, samples=truth.size, unit="ARI")


def linear_probe_r2(H: np.ndarray, X: np.ndarray, *, seed: int = 0, folds: int = 5, ridge: float = 0.1) -> float:
    """Mean out-of-fold R^2 of a ridge regression from representations ``H`` to raw columns ``X``.

    ``folds``-fold cross-validation (rows split by a seeded permutation); the ridge
    penalty is ``ridge`` times the mean diagonal of HᵀH (scale-free); R^2 is averaged over
    the columns of ``X`` that vary: how much of a party's raw features an observer of
    its representations reconstructs linearly on rows it did not fit.
    """
    H, X = np.asarray(H, np.float64), np.asarray(X, np.float64)
    if H.ndim != 2 or X.ndim != 2 or len(H) != len(X) or len(H) < 2 * folds:
        raise AuditError(f"a probe needs matching row counts (>= {2 * folds}), got {H.shape} and {X.shape}")
    order = np.random.default_rng(seed).permutation(len(H))  # the probe's folds: not secret
    pred = np.empty_like(X)
    for f in range(folds):
        te = order[f::folds]
        tr = np.setdiff1d(order, te)
        mu_h, mu_x = H[tr].mean(0), X[tr].mean(0)
        A = H[tr] - mu_h
        lam = ridge * float(np.trace(A.T @ A)) / max(1, A.shape[1]) + 1e-12
        W = np.linalg.solve(A.T @ A + lam * np.eye(A.shape[1]), A.T @ (X[tr] - mu_x))
        pred[te] = (H[te] - mu_h) @ W + mu_x
    resid, var = ((X - pred) ** 2).sum(0), ((X - X.mean(0)) ** 2).sum(0)
    ok = var > 1e-12
    return float(np.mean(1 - resid[ok] / var[ok])) if ok.any() else 0.0


def probe_finding(observer: str, name: str, H: np.ndarray, X: np.ndarray, *, attacks: Sequence[str],
                  protection: Protection | None, description: str, shuffles: int = 30) -> EmpiricalFinding:
    """:func:`linear_probe_r2` of received representations against the sender's raw columns, with its null."""
    rng = np.random.default_rng(1)  # the null's row shuffles: not secret
    null = np.asarray([linear_probe_r2(H, np.asarray(X)[rng.permutation(len(X))]) for _ in range(shuffles)])
    return _null_finding(observer, name, linear_probe_r2(H, X), null, 0.0, attacks=attacks, protection=protection,
                         description=description, samples=len(H), unit="R^2")
