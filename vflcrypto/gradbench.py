"""Side-by-side throughput of encrypted-gradient operations (``vflcrypto bench gradients``).

Every backend runs the same six operations on the same data in one process, one after
the other, so the ratios are measured under identical conditions:

============ ================================================================= =========
operation    what is timed                                                     unit
============ ================================================================= =========
encrypt      encrypt ``n`` float gradients                                     values/s
add          add two encrypted vectors of ``n`` values                         values/s
mul_plain    multiply ``n`` encrypted values by ``n`` plaintext floats         values/s
dot          Xᵀ·[[d]] for X of shape (n, m): ``n·m`` multiply-accumulates      MACs/s
histogram    sum ``n`` encrypted (g, h) rows into 32 bins of one feature       samples/s
decrypt      decrypt ``n`` values                                              values/s
============ ================================================================= =========

Slow backends (phe) run on a smaller ``n`` so the whole comparison stays short; the
throughput is per value, so sizes do not bias the ratio beyond fixed per-call overheads.
Backends: vflcrypto Paillier (unpacked and packed), vflcrypto CKKS, phe (python-paillier,
with gmpy2), and SecretFlow HEU (``sf-heu``) when installed.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["OPERATIONS", "BackendResult", "run_gradient_bench"]

OPERATIONS = ("encrypt", "add", "mul_plain", "dot", "histogram", "decrypt")
N_BINS = 32
DOT_COLUMNS = 8


@dataclass
class BackendResult:
    """Throughput of one backend: ``rates[operation]`` in values (or MACs, samples) per second."""

    name: str
    n: int
    rates: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    max_abs_error: float = 0.0
    note: str = ""


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _record(res: BackendResult, op: str, count: int, fn: Callable[[], Any]) -> Any:
    out, dt = _timed(fn)
    res.seconds[op] = dt
    res.rates[op] = count / dt if dt > 0 else math.inf
    return out


class _Data:
    """The shared inputs: gradients g, hessians h, plaintext multipliers, a feature matrix, bins."""

    def __init__(self, n: int, seed: int = 7) -> None:
        rng = np.random.default_rng(seed)  # synthetic benchmark data, not secret
        self.g = rng.uniform(-1, 1, n)
        self.h = rng.uniform(0, 0.25, n)
        self.w = rng.uniform(-2, 2, n)
        self.X = rng.standard_normal((n, DOT_COLUMNS))
        self.bins = rng.integers(0, N_BINS, n).astype(np.int64)

    def head(self, k: int) -> _Data:
        out = object.__new__(_Data)
        out.g, out.h, out.w = self.g[:k], self.h[:k], self.w[:k]
        out.X, out.bins = self.X[:k], self.bins[:k]
        return out


# --------------------------------------------------------------------------- backends


def _bench_vfl_paillier(data: _Data, key_bits: int, packed: bool) -> BackendResult:
    from .encoding import PackingSpec
    from .paillier import generate_keypair

    n = len(data.g)
    pk, sk = generate_keypair(key_bits, allow_insecure=key_bits < 2048)
    res = BackendResult("vflcrypto-paillier-packed" if packed else "vflcrypto-paillier", n)
    # Warm-up, not timed: build the fixed-base tables and start the process pool once, as
    # a long-running party would (every backend gets its set-up outside the timings). The
    # tables grow with use (vflcrypto.paillier._pick_window), so warm up with one full
    # batch of n encryptions (a "previous epoch") rather than a few thousand.
    warm = pk.encrypt_fixed(data.w)
    sk.decrypt_fixed(warm[: min(n, 4000)])
    warm[: min(n, 4000)].dot(data.X[: min(n, 4000)])
    if packed:
        # The packed backend packs many values per ciphertext for transfer-side encryption,
        # and (g, h) pairs into one ciphertext for the histogram (SecureBoost's layout).
        spec = PackingSpec.create(max_terms=n, frac_bits=24, bound=4.0)
        ct = _record(res, "encrypt", n, lambda: pk.encrypt_fixed(data.g, packing=spec))
        ct2 = pk.encrypt_fixed(data.w, packing=spec)
        _record(res, "add", n, lambda: ct + ct2)
        gh = pk.encrypt_packed(np.column_stack([data.g, data.h]), spec)
        # SecureBoost bins one [[g, h]] vector once per feature: the first call ships it
        # to the pool workers, later calls reuse it. The unpacked backend's histogram below
        # follows a dot on the same vector (already shipped), so time both in that state.
        gh.sum_by_group(data.bins[::-1].copy(), N_BINS)
        hist = _record(res, "histogram", n, lambda: gh.sum_by_group(data.bins, N_BINS))
        dec = _record(res, "decrypt", n, lambda: sk.decrypt_fixed(ct))
        ref = np.column_stack([np.bincount(data.bins, data.g, N_BINS), np.bincount(data.bins, data.h, N_BINS)])
        got = sk.decrypt_fixed(hist).reshape(N_BINS, -1)[:, :2]
        res.max_abs_error = float(max(np.max(np.abs(dec[:n] - data.g)), np.max(np.abs(got - ref))))
        res.note = "packed: mul_plain and dot need one value per ciphertext"
        return res
    ct = _record(res, "encrypt", n, lambda: pk.encrypt_fixed(data.g))
    ct2 = pk.encrypt_fixed(data.h)
    s = _record(res, "add", n, lambda: ct + ct2)
    prod = _record(res, "mul_plain", n, lambda: ct * data.w)
    dot = _record(res, "dot", n * DOT_COLUMNS, lambda: ct.dot(data.X))
    hist = _record(res, "histogram", n, lambda: ct.sum_by_group(data.bins, N_BINS))
    dec = _record(res, "decrypt", n, lambda: sk.decrypt_fixed(ct))
    errs = [
        np.abs(dec - data.g).max(),
        np.abs(sk.decrypt_fixed(s) - (data.g + data.h)).max(),
        np.abs(sk.decrypt_fixed(prod) - data.g * data.w).max(),
        np.abs(sk.decrypt_fixed(dot) - data.X.T @ data.g).max(),
        np.abs(sk.decrypt_fixed(hist) - np.bincount(data.bins, data.g, N_BINS)).max(),
    ]
    res.max_abs_error = float(max(errs))
    return res


def _bench_vfl_ckks(data: _Data) -> BackendResult:
    from .ckks import CKKSContext, CKKSVector

    n = len(data.g)
    ctx = CKKSContext.generate()
    res = BackendResult("vflcrypto-ckks", n)
    CKKSVector.encrypt(ctx, data.g[:100]).decrypt(ctx)  # warm-up, not timed
    ct = _record(res, "encrypt", n, lambda: CKKSVector.encrypt(ctx, data.g))
    ct2 = CKKSVector.encrypt(ctx, data.h)
    s = _record(res, "add", n, lambda: ct + ct2)
    prod = _record(res, "mul_plain", n, lambda: ct * data.w)
    dot = _record(res, "dot", n * DOT_COLUMNS, lambda: ct.dot(data.X))
    onehot = np.zeros((n, N_BINS))
    onehot[np.arange(n), data.bins] = 1.0
    hist = _record(res, "histogram", n, lambda: ct.dot(onehot))
    dec = _record(res, "decrypt", n, lambda: ct.decrypt(ctx))
    errs = [
        np.abs(dec - data.g).max(),
        np.abs(s.decrypt(ctx) - (data.g + data.h)).max(),
        np.abs(prod.decrypt(ctx) - data.g * data.w).max(),
        np.abs(dot.decrypt(ctx) - data.X.T @ data.g).max(),
        np.abs(hist.decrypt(ctx) - np.bincount(data.bins, data.g, N_BINS)).max(),
    ]
    res.max_abs_error = float(max(errs))
    res.note = "histogram as a dot with a one-hot bin matrix (CKKS has no cheap gather)"
    return res


def _bench_phe(data: _Data, key_bits: int) -> BackendResult:
    import phe

    n = len(data.g)
    pk, sk = phe.generate_paillier_keypair(n_length=key_bits)
    res = BackendResult("phe", n)
    ct = _record(res, "encrypt", n, lambda: [pk.encrypt(float(v)) for v in data.g])
    ct2 = [pk.encrypt(float(v)) for v in data.h]
    s = _record(res, "add", n, lambda: [a + b for a, b in zip(ct, ct2, strict=True)])
    _record(res, "mul_plain", n, lambda: [a * float(w) for a, w in zip(ct, data.w, strict=True)])

    def dot() -> list[Any]:
        cols = []
        for j in range(DOT_COLUMNS):
            acc = ct[0] * float(data.X[0, j])
            for i in range(1, n):
                acc = acc + ct[i] * float(data.X[i, j])
            cols.append(acc)
        return cols

    d = _record(res, "dot", n * DOT_COLUMNS, dot)

    def hist() -> list[Any]:
        sums: list[Any] = [pk.encrypt(0.0)] * N_BINS
        for c, b in zip(ct, data.bins, strict=True):
            sums[b] = sums[b] + c
        return sums

    _record(res, "histogram", n, hist)
    dec = _record(res, "decrypt", n, lambda: [sk.decrypt(c) for c in ct])
    errs = [np.abs(np.array(dec) - data.g).max(),
            np.abs(np.array([sk.decrypt(c) for c in s]) - (data.g + data.h)).max(),
            np.abs(np.array([sk.decrypt(c) for c in d]) - data.X.T @ data.g).max()]
    res.max_abs_error = float(max(errs))
    res.note = "python-paillier with gmpy2; one EncryptedNumber per value"
    return res


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send file descriptor 1 to stderr for a while: HEU's native logger writes to stdout,
    which would corrupt ``--json`` output."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _bench_heu(data: _Data, key_bits: int) -> BackendResult:
    from heu import numpy as hnp
    from heu import phe as hphe

    n = len(data.g)
    kit = hnp.setup(hphe.SchemaType.ZPaillier, key_bits)
    enc, dec, ev = kit.encryptor(), kit.decryptor(), kit.evaluator()
    fe = kit.float_encoder()
    res = BackendResult("heu-zpaillier", n)
    ct = _record(res, "encrypt", n, lambda: enc.encrypt(kit.array(data.g, fe)))
    ct2 = enc.encrypt(kit.array(data.h, fe))
    _record(res, "add", n, lambda: ev.add(ct, ct2))
    _record(res, "mul_plain", n, lambda: ev.mul(ct, kit.array(data.w, fe)))
    row = enc.encrypt(kit.array(data.g.reshape(1, -1), fe))
    Xp = kit.array(data.X, fe)
    _record(res, "dot", n * DOT_COLUMNS, lambda: ev.matmul(row, Xp))
    gh = enc.encrypt(kit.array(np.column_stack([data.g, data.h]), fe))
    subgroup = np.ones((1, n), dtype=np.int8)
    order = data.bins.reshape(n, 1).astype(np.int8)
    _record(res, "histogram", n, lambda: ev.feature_wise_bucket_sum(gh, subgroup, order, N_BINS, False))
    out = _record(res, "decrypt", n, lambda: dec.decrypt(ct))
    res.max_abs_error = float(np.abs(out.to_numpy(fe) - data.g).max())
    res.note = "SecretFlow HEU ZPaillier (C++), one thread pool per process"
    return res


def _heu_available() -> bool:
    try:
        import heu  # noqa: F401
    except ImportError:
        return False
    return True


def run_gradient_bench(
    n: int = 20_000,
    key_bits: int = 2048,
    *,
    phe_n: int = 200,
    heu_n: int = 2_000,
    backends: tuple[str, ...] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[BackendResult]:
    """Run every available backend on the same data; return their throughputs."""
    data = _Data(n)
    plan: list[tuple[str, Callable[[], BackendResult]]] = [
        ("vflcrypto-paillier-packed", lambda: _bench_vfl_paillier(data, key_bits, packed=True)),
        ("vflcrypto-paillier", lambda: _bench_vfl_paillier(data, key_bits, packed=False)),
        ("vflcrypto-ckks", lambda: _bench_vfl_ckks(data)),
        ("phe", lambda: _bench_phe(data.head(min(n, phe_n)), key_bits)),
    ]
    if _heu_available():
        def heu() -> BackendResult:
            with _stdout_to_stderr():
                return _bench_heu(data.head(min(n, heu_n)), key_bits)

        plan.append(("heu-zpaillier", heu))
    results = []
    for name, fn in plan:
        if backends is not None and name not in backends:
            continue
        if progress is not None:
            progress(name)
        results.append(fn())
    return results
