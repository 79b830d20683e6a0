"""Side-by-side throughput of encrypted-gradient operations (``vflcrypto bench gradients``).

Every backend runs the same operations on the same data in one process, one after the
other, so the ratios are measured under identical conditions:

============ ==================================================================== =========
operation    what one call does                                                   unit
============ ==================================================================== =========
encrypt      encrypt ``n`` float gradients                                        values
add          add two encrypted vectors of ``n`` values                            values
mul_plain    multiply ``n`` encrypted values by ``n`` plaintext floats            values
dot          Xᵀ·[[d]] for X of shape (n, 8): ``8·n`` multiply-accumulates          MACs
histogram    sum ``n`` encrypted (g, h) rows into 32 bins of one feature, on a    samples
             vector the backend has not seen before (with the Python kernel,
             vflcrypto's pool must first receive the ciphertexts: that shipping
             is inside the timer; bytes already known, as for a vector received
             from the wire or made in the pool, are not serialized again; the C
             kernel reads them on threads of this process)
hist_again   the same on the same vector again (SecureBoost bins one [[g, h]]     samples
             vector once per feature; the pool's workers then hold it)
decrypt      decrypt ``n`` values                                                 values
============ ==================================================================== =========

Honesty rules, each visible in the output:

* **Same work.** Every backend gets the same ``n`` and sums both g and h in the
  histograms. A backend too slow for ``n`` (phe) runs a prefix of the same data and the
  output names its ``n``; rates are per item, so only per-call overheads differ.
* **Schemes.** vflcrypto's rows are named by scheme: ``-paillier`` (``--key-bits``), ``-ou``
  (Okamoto–Uchiyama at its conservative default, 3072 bits and 256-bit randomness) and
  ``-ou-heu`` (OU at HEU's 2048-bit parameters); HEU's rows are ``heu-zpaillier`` and
  ``heu-ou`` (2048 bits, HEU's own parameters). The ratio columns compare each row with
  phe and with HEU's implementation of the same scheme.
* **Workers and per-core rates.** vflcrypto's Paillier and OU run on its process pool
  (``workers`` = :func:`vflcrypto.parallel.worker_count`; the histograms, with the C kernel
  of :mod:`vflcrypto.he.native`, on as many threads of this process: each row's note says
  which kernel ran); phe and the others run in one
  process (TenSEAL and HEU may use threads inside it). Each row reports the wall rate and
  the **per-core rate** = items / CPU seconds of every process that worked (this process's
  threads plus the pool's workers, read from ``/proc``); the ratio to phe is per core.
* **Set-up has its own row**: key generation, fixed-base tables, pool start-up and
  warm-up are timed once as ``setup_seconds``, never silently dropped; the histogram's
  shipping of ciphertexts to the workers is inside ``histogram``.
* **Repeats.** Each operation is timed ``repeats`` times (fresh output each time); the
  table shows the median rate and the range (fastest–slowest call).
* **Packed rows state their packing**: rates count values, and ``values/ct`` says how
  many values share one ciphertext (a packed "encryption" is one Paillier encryption
  per ``values/ct`` values).
* **Checked before reported.** Every call's result is decrypted and compared with numpy;
  an error above the backend's tolerance raises :class:`BenchmarkError` instead of
  printing a speed.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import parallel
from ..errors import ConfigurationError, VflError

__all__ = ["OPERATIONS", "BackendResult", "BenchmarkError", "OpTiming", "run_gradient_bench"]

OPERATIONS = ("encrypt", "add", "mul_plain", "dot", "histogram", "hist_again", "decrypt")
N_BINS = 32
DOT_COLUMNS = 8
COUNT_PER_CALL = {"dot": DOT_COLUMNS}  # items per row of data; 1 otherwise


class BenchmarkError(VflError, RuntimeError):
    """A backend's result did not match numpy: no speed is reported for it."""


@dataclass
class OpTiming:
    """Repeated timings of one operation: ``count`` items per call."""

    count: int
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    max_abs_error: float = 0.0

    @property
    def wall_rate(self) -> float:
        """Items per wall second at the median call."""
        med = statistics.median(self.wall)
        return self.count / med if med > 0 else math.inf

    @property
    def per_core_rate(self) -> float:
        """Items per CPU second (all processes and threads that worked) at the median call."""
        med = statistics.median(self.cpu)
        return self.count / med if med > 0 else math.inf

    @property
    def rate_range(self) -> tuple[float, float]:
        """(slowest, fastest) wall rate over the repeats."""
        return self.count / max(self.wall), self.count / max(min(self.wall), 1e-12)

    @property
    def cores_used(self) -> float:
        return statistics.median(self.cpu) / max(statistics.median(self.wall), 1e-12)

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "wall_rate": self.wall_rate, "per_core_rate": self.per_core_rate,
                "wall_rate_range": list(self.rate_range), "cores_used": self.cores_used,
                "wall_seconds": self.wall, "cpu_seconds": self.cpu, "max_abs_error": self.max_abs_error}


@dataclass
class BackendResult:
    """One backend's measurements (``ops[name]``), its set-up time and how it ran."""

    name: str
    n: int
    workers: int
    setup_seconds: float
    values_per_ciphertext: int = 1
    ops: dict[str, OpTiming] = field(default_factory=dict)
    note: str = ""

    @property
    def rates(self) -> dict[str, float]:
        """Median wall rates per operation."""
        return {op: t.wall_rate for op, t in self.ops.items()}

    @property
    def max_abs_error(self) -> float:
        return max((t.max_abs_error for t in self.ops.values()), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "workers": self.workers, "setup_seconds": self.setup_seconds,
                "values_per_ciphertext": self.values_per_ciphertext, "note": self.note,
                "ops": {op: t.to_dict() for op, t in self.ops.items()}}


@dataclass(frozen=True)
class _Op:
    """One operation of a backend: ``run`` does the work, ``check`` returns its max abs error."""

    name: str
    run: Callable[[], Any]
    check: Callable[[Any], float]
    before: Callable[[], None] | None = None  # untimed per-call preparation (a fresh input)


class _Data:
    """The shared inputs: gradients g, hessians h, plaintext multipliers, a feature matrix, bins."""

    def __init__(self, n: int, seed: int = 7, ops: frozenset[str] | None = None) -> None:
        self.ops = ops  # the operations to time (None: all)
        rng = np.random.default_rng(seed)  # synthetic benchmark data, not secret
        self.g = rng.uniform(-1, 1, n)
        self.h = rng.uniform(0, 0.25, n)
        self.w = rng.uniform(-2, 2, n)
        self.X = rng.standard_normal((n, DOT_COLUMNS))
        self.bins = rng.integers(0, N_BINS, n).astype(np.int64)

    def head(self, k: int) -> _Data:
        out = object.__new__(_Data)
        out.ops = self.ops
        out.g, out.h, out.w = self.g[:k], self.h[:k], self.w[:k]
        out.X, out.bins = self.X[:k], self.bins[:k]
        return out

    @property
    def hist_ref(self) -> np.ndarray:
        """(bins, 2): per-bin sums of g and h."""
        return np.column_stack([np.bincount(self.bins, self.g, N_BINS), np.bincount(self.bins, self.h, N_BINS)])


def _err(got: Any, want: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(got, dtype=np.float64).reshape(want.shape) - want)))


def _measure(res: BackendResult, ops: list[_Op], n: int, repeats: int, tolerance: float,
             only: frozenset[str] | None = None) -> None:
    for op in ops:
        if only is not None and op.name not in only:
            continue
        timing = OpTiming(n * COUNT_PER_CALL.get(op.name, 1))
        for _ in range(repeats):
            if op.before is not None:
                op.before()
            c0, t0 = parallel.cpu_seconds(), time.perf_counter()
            out = op.run()
            timing.wall.append(time.perf_counter() - t0)
            timing.cpu.append(parallel.cpu_seconds() - c0)
            err = op.check(out)
            timing.max_abs_error = max(timing.max_abs_error, err)
            if not err <= tolerance:
                raise BenchmarkError(f"{res.name} {op.name}: max abs error {err:.3g} > {tolerance:g}")
        res.ops[op.name] = timing


# --------------------------------------------------------------------------- backends


def _bench_vfl(data: _Data, key_bits: int, packed: bool, repeats: int, allow_insecure: bool,
               scheme: str = "paillier") -> BackendResult:
    from ..he.encoding import PackingSpec
    from ..he.ou import OUPublicKey
    from ..he.schemes import generate_keypair

    n = len(data.g)
    t0 = time.perf_counter()
    # the ou-heu row is HEU's own 2048-bit parameters whatever --key-bits says (its anchor runs at 2048)
    pk, sk = generate_keypair(scheme, 2048 if scheme == "ou-heu" else key_bits, allow_insecure=allow_insecure)
    # Build the fixed-base tables and start the pool as a long-running party would; the
    # tables grow with use (vflcrypto.he.paillier.fixed_base._pick_window), so warm up with a full batch.
    warm = pk.encrypt_fixed(data.w)
    sk.decrypt_fixed(warm[: min(n, 4000)])
    warm[: min(n, 4000)].dot(data.X[: min(n, 4000)])
    setup = time.perf_counter() - t0
    name = f"vflcrypto-{scheme}" + ("-packed" if packed else "")
    res = BackendResult(name, n, max(1, parallel.worker_count()), setup)
    about = f"{pk.bits}-bit Paillier"
    if isinstance(pk, OUPublicKey):
        about = (f"{pk.bits}-bit OU, {pk.random_bits}-bit randomness "
                 f"({'HEU' if scheme == 'ou-heu' else 'conservative'} parameters)")
    ref = data.hist_ref
    if packed:
        spec = PackingSpec.create(max_terms=n, frac_bits=24, bound=4.0)
        res.values_per_ciphertext = spec.slots_in(pk.plaintext_bits)
        ct = pk.encrypt_fixed(data.g, packing=spec)
        ct2 = pk.encrypt_fixed(data.w, packing=spec)
        gh = pk.encrypt_packed(np.column_stack([data.g, data.h]), spec)  # one (g, h) row per ciphertext
        box: dict[str, Any] = {}

        def fresh() -> None:
            box["gh"] = gh[:]  # a new vector object: its ciphertexts must be shipped again

        def hist_check(v: Any) -> float:
            return _err(sk.decrypt_fixed(v).reshape(N_BINS, -1)[:, :2], ref)

        ops = [
            _Op("encrypt", lambda: pk.encrypt_fixed(data.g, packing=spec),
                lambda v: _err(sk.decrypt_fixed(v)[:n], data.g)),
            _Op("add", lambda: ct + ct2, lambda v: _err(sk.decrypt_fixed(v)[:n], data.g + data.w)),
            _Op("histogram", lambda: box["gh"].sum_by_group(data.bins, N_BINS), hist_check, fresh),
            _Op("hist_again", lambda: gh.sum_by_group(data.bins, N_BINS), hist_check),
            _Op("decrypt", lambda: sk.decrypt_fixed(ct), lambda v: _err(v[:n], data.g)),
        ]
        res.note = (f"{about}; {res.values_per_ciphertext} values per ciphertext (histogram: one (g, h) pair per "
                    f"ciphertext; {_kernel()}); mul_plain and dot need one value per ciphertext")
        _measure(res, ops, n, repeats, 1e-5, data.ops)
        return res
    cg, chh = pk.encrypt_fixed(data.g), pk.encrypt_fixed(data.h)
    box = {}

    def fresh_pair() -> None:
        box["pair"] = (cg[:], chh[:])

    def hist(pair: tuple[Any, Any]) -> tuple[Any, Any]:
        return pair[0].sum_by_group(data.bins, N_BINS), pair[1].sum_by_group(data.bins, N_BINS)

    def pair_check(v: tuple[Any, Any]) -> float:
        return _err(np.column_stack([sk.decrypt_fixed(v[0]), sk.decrypt_fixed(v[1])]), ref)

    ops = [
        _Op("encrypt", lambda: pk.encrypt_fixed(data.g), lambda v: _err(sk.decrypt_fixed(v), data.g)),
        _Op("add", lambda: cg + chh, lambda v: _err(sk.decrypt_fixed(v), data.g + data.h)),
        _Op("mul_plain", lambda: cg * data.w, lambda v: _err(sk.decrypt_fixed(v), data.g * data.w)),
        _Op("dot", lambda: cg.dot(data.X), lambda v: _err(sk.decrypt_fixed(v), data.X.T @ data.g)),
        _Op("histogram", lambda: hist(box["pair"]), pair_check, fresh_pair),
        _Op("hist_again", lambda: hist((cg, chh)), pair_check),
        _Op("decrypt", lambda: sk.decrypt_fixed(cg), lambda v: _err(v, data.g)),
    ]
    res.note = f"{about}; one value per ciphertext; the histogram sums the g and the h vector ({_kernel()})"
    _measure(res, ops, n, repeats, 1e-6, data.ops)
    return res


def _kernel() -> str:
    """Which histogram kernel ran: the C one on this process's threads, or Python on the pool (and why)."""
    from ..he import native

    if native.available() and parallel.backend() == "process":
        return f"C histogram kernel over GMP, {max(1, parallel.worker_count())} thread(s) of this process"
    reason = native.why_not() or f"the {parallel.backend()} backend"
    return f"Python histogram kernel on the pool ({reason})"


def _bench_vfl_ckks(data: _Data, repeats: int) -> BackendResult:
    from ..he.ckks import CKKSContext, CKKSVector

    n = len(data.g)
    t0 = time.perf_counter()
    ctx = CKKSContext.generate()
    CKKSVector.encrypt(ctx, data.g[:100]).decrypt(ctx, flood=False)
    res = BackendResult("vflcrypto-ckks", n, 1, time.perf_counter() - t0,
                        values_per_ciphertext=ctx.slots)
    cg, chh = CKKSVector.encrypt(ctx, data.g), CKKSVector.encrypt(ctx, data.h)
    onehot = np.zeros((n, N_BINS))
    onehot[np.arange(n), data.bins] = 1.0
    ref = data.hist_ref

    def hist() -> tuple[Any, Any]:
        return cg.dot(onehot), chh.dot(onehot)

    def hist_check(v: tuple[Any, Any]) -> float:
        return _err(np.column_stack([v[0].decrypt(ctx, flood=False), v[1].decrypt(ctx, flood=False)]), ref)

    ops = [
        _Op("encrypt", lambda: CKKSVector.encrypt(ctx, data.g), lambda v: _err(v.decrypt(ctx, flood=False), data.g)),
        _Op("add", lambda: cg + chh, lambda v: _err(v.decrypt(ctx, flood=False), data.g + data.h)),
        _Op("mul_plain", lambda: cg * data.w, lambda v: _err(v.decrypt(ctx, flood=False), data.g * data.w)),
        _Op("dot", lambda: cg.dot(data.X), lambda v: _err(v.decrypt(ctx, flood=False), data.X.T @ data.g)),
        _Op("histogram", hist, hist_check),
        _Op("hist_again", hist, hist_check),
        # checks read raw decryptions (the key holder's own); the timed decrypt is the flooded release
        _Op("decrypt", lambda: cg.decrypt(ctx), lambda v: _err(v, data.g)),
    ]
    res.note = (f"TenSEAL, {ctx.slots} slots per ciphertext; histogram = a dot with a one-hot bin "
                "matrix for g and for h (CKKS has no cheap gather); approximate arithmetic")
    _measure(res, ops, n, repeats, 1e-2, data.ops)
    return res


def _bench_phe(data: _Data, key_bits: int, repeats: int) -> BackendResult:
    import phe

    n = len(data.g)
    t0 = time.perf_counter()
    pk, sk = phe.generate_paillier_keypair(n_length=key_bits)
    res = BackendResult("phe", n, 1, time.perf_counter() - t0)
    cg = [pk.encrypt(float(v)) for v in data.g]
    chh = [pk.encrypt(float(v)) for v in data.h]
    ref = data.hist_ref

    def dec(vs: list[Any]) -> np.ndarray:
        return np.array([sk.decrypt(c) for c in vs])

    def dot() -> list[Any]:
        cols = []
        for j in range(DOT_COLUMNS):
            acc = cg[0] * float(data.X[0, j])
            for i in range(1, n):
                acc = acc + cg[i] * float(data.X[i, j])
            cols.append(acc)
        return cols

    def hist() -> list[list[Any]]:
        sums: list[list[Any]] = [[pk.encrypt(0.0), pk.encrypt(0.0)] for _ in range(N_BINS)]
        for a, b, k in zip(cg, chh, data.bins, strict=True):
            sums[k] = [sums[k][0] + a, sums[k][1] + b]
        return sums

    def hist_check(v: list[list[Any]]) -> float:
        return _err([[sk.decrypt(a), sk.decrypt(b)] for a, b in v], ref)

    ops = [
        _Op("encrypt", lambda: [pk.encrypt(float(v)) for v in data.g], lambda v: _err(dec(v), data.g)),
        _Op("add", lambda: [a + b for a, b in zip(cg, chh, strict=True)], lambda v: _err(dec(v), data.g + data.h)),
        _Op("mul_plain", lambda: [a * float(w) for a, w in zip(cg, data.w, strict=True)],
            lambda v: _err(dec(v), data.g * data.w)),
        _Op("dot", dot, lambda v: _err(dec(v), data.X.T @ data.g)),
        _Op("histogram", hist, hist_check),
        _Op("hist_again", hist, hist_check),
        _Op("decrypt", lambda: dec(cg), lambda v: _err(v, data.g)),
    ]
    res.note = "python-paillier with gmpy2, one EncryptedNumber per value, one process"
    _measure(res, ops, n, repeats, 1e-6, data.ops)
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


HEU_SCALE = 2**32  # HEU's float encoder scale: the same 32 fractional bits as vflcrypto's unpacked rows


def _bench_heu(data: _Data, key_bits: int, repeats: int, schema: str = "ZPaillier") -> BackendResult:
    from heu import numpy as hnp
    from heu import phe as hphe

    n = len(data.g)
    t0 = time.perf_counter()
    kit = hnp.setup(getattr(hphe.SchemaType, schema), key_bits)
    enc, dec, ev = kit.encryptor(), kit.decryptor(), kit.evaluator()
    fe = kit.float_encoder(scale=HEU_SCALE)
    name = "heu-" + schema.lower()
    res = BackendResult(name, n, 1, time.perf_counter() - t0)
    ct, ct2 = enc.encrypt(kit.array(data.g, fe)), enc.encrypt(kit.array(data.h, fe))
    row = enc.encrypt(kit.array(data.g.reshape(1, -1), fe))
    Xp = kit.array(data.X, fe)
    gh = enc.encrypt(kit.array(np.column_stack([data.g, data.h]), fe))
    subgroup = np.ones((1, n), dtype=np.int8)
    order = data.bins.reshape(n, 1).astype(np.int8)
    ref = data.hist_ref

    def out(v: Any) -> np.ndarray:
        return dec.decrypt(v).to_numpy(fe)

    def out2(v: Any) -> np.ndarray:
        """A product of two encodings carries the scale twice: decode, then divide once more."""
        return out(v) / HEU_SCALE

    def hist() -> Any:
        return ev.feature_wise_bucket_sum(gh, subgroup, order, N_BINS, False)

    ops = [
        _Op("encrypt", lambda: enc.encrypt(kit.array(data.g, fe)), lambda v: _err(out(v), data.g)),
        _Op("add", lambda: ev.add(ct, ct2), lambda v: _err(out(v), data.g + data.h)),
        _Op("mul_plain", lambda: ev.mul(ct, kit.array(data.w, fe)), lambda v: _err(out2(v), data.g * data.w)),
        _Op("dot", lambda: ev.matmul(row, Xp), lambda v: _err(out2(v), data.X.T @ data.g)),
        _Op("histogram", hist, lambda v: _err(out(v), ref)),
        _Op("hist_again", hist, lambda v: _err(out(v), ref)),
        _Op("decrypt", lambda: dec.decrypt(ct), lambda v: _err(v.to_numpy(fe), data.g)),
    ]
    res.note = (f"SecretFlow HEU {schema} (C++) at {key_bits} bits, its own thread pool inside this process; "
                "floats at scale 2^32")
    _measure(res, ops, n, repeats, 1e-5, data.ops)
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
    heu_n: int | None = None,
    repeats: int = 5,
    allow_insecure: bool = False,
    backends: tuple[str, ...] | None = None,
    ops: tuple[str, ...] | None = None,
    progress: Callable[[str], None] | None = None,
    finished: Callable[[BackendResult, float], None] | None = None,
) -> list[BackendResult]:
    """Run every available backend on the same data; return their measurements.

    Every backend gets ``n`` rows except phe (``phe_n``, a prefix of the same data, since
    phe needs minutes at 20,000) and HEU when ``heu_n`` is given. Keys below 2048 bits
    need ``allow_insecure`` (smoke tests). ``progress(name)`` is called before each backend
    runs, ``finished(result, seconds)`` as soon as it has finished (seconds: its set-up and
    every timed call). ``ops`` times only those operations (default: all of :data:`OPERATIONS`).
    """
    if repeats < 1:
        raise ConfigurationError("repeats must be >= 1")
    unknown = sorted(set(ops or ()) - set(OPERATIONS))
    if unknown:
        raise ConfigurationError(f"unknown operation(s) {', '.join(unknown)}: choose from {', '.join(OPERATIONS)}")
    data = _Data(n, ops=frozenset(ops) if ops else None)
    def vfl(scheme: str, packed: bool) -> Callable[[], BackendResult]:
        return lambda: _bench_vfl(data, key_bits, packed, repeats, allow_insecure, scheme)

    plan: list[tuple[str, Callable[[], BackendResult]]] = [
        ("vflcrypto-paillier-packed", vfl("paillier", True)),
        ("vflcrypto-paillier", vfl("paillier", False)),
        ("vflcrypto-ou-packed", vfl("ou", True)),
        ("vflcrypto-ou", vfl("ou", False)),
        ("vflcrypto-ou-heu", vfl("ou-heu", False)),
        ("vflcrypto-ckks", lambda: _bench_vfl_ckks(data, repeats)),
        ("phe", lambda: _bench_phe(data.head(min(n, phe_n)), key_bits, repeats)),
    ]
    if _heu_available():
        def heu(schema: str, bits: int) -> Callable[[], BackendResult]:
            def run() -> BackendResult:
                with _stdout_to_stderr():
                    return _bench_heu(data.head(min(n, heu_n or n)), bits, repeats, schema)
            return run

        plan.append(("heu-zpaillier", heu("ZPaillier", key_bits)))
        plan.append(("heu-ou", heu("OU", max(key_bits, 2048))))
    results = []
    for name, fn in plan:
        if backends is not None and name not in backends:
            continue
        if progress is not None:
            progress(name)
        t0 = time.perf_counter()
        results.append(fn())
        if finished is not None:
            finished(results[-1], time.perf_counter() - t0)
    return results
