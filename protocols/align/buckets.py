"""Bucketed, streamed alignment with bounded memory (``--memory-budget``), resumable (``--resume``).

Each party holds at most one bucket of its set in memory, whatever the set's size:

1. both → peer ``align.bucket_hello``: a proposed bucket count ``⌈rows · BYTES_PER_ID /
   (budget − FIXED_BYTES)⌉`` (the run uses the larger proposal) and a SHA-256 commitment to a fresh
   32-byte nonce (``secrets``); on ``--resume``, the first bucket the sender has not
   finished and the digest of its stored plan.
2. both → peer ``align.bucket_nonce``: the nonces; each checks the peer's against its
   commitment. The bucket key is SHA-256 of both nonces (active first), so neither party
   chooses it (a commit-then-open coin toss).
3. each streams its CSV once into per-bucket spill files (:mod:`.spill`; the bucket of an
   ID is keyed BLAKE2b of its canonical bytes, so a common ID lands in the same bucket at
   both) and counts the distinct IDs of each bucket; both → peer ``align.bucket_sizes``.
   These counts are the one new thing revealed: a histogram, over the sender's set, of a
   hash whose key the receiver knows (the audit measures what it tells about membership).
4. bucket by bucket, the ordinary two-party PSI (ECDH, KKRT or keyed hash, its own
   messages and fresh secrets per bucket) over the same link; a bucket empty at either
   party is skipped (both know both sizes). Each party writes the bucket's aligned rows,
   sorted by canonical ID, to a result file atomically.
5. the output: one external merge of the result files by canonical ID: the same bytes as
   the unbucketed run writes (its order is also the canonical IDs').

A killed run restarts with ``--resume`` at the first bucket either party has not finished;
the plan (protocol, mode, bucket count, both commitments, the input's SHA-256) is kept in
the work directory and checked, so a resume with other inputs or another peer run is
refused in one line. Cardinality-only mode is refused: per-bucket sizes would reveal the
intersection's histogram, not just its size.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import hmac
import json
import math
import re
import secrets
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vflcrypto.data.atomic import PRIVATE, atomic_write_text
from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.parallel import ordered_map
from vflcrypto.runtime import progress
from vflcrypto.runtime.channel import Channel

from .bucket_parallel import bucket_executor
from .idtable import IdTable
from .messages import ACTIVE_ROLES, BucketHello, BucketNonce, BucketSizes
from .roles import run_active, run_passive
from .spill import (
    BucketRows,
    count_bucket,
    count_spilled,
    input_digest,
    load_bucket,
    merge_results,
    parse_bucket,
    result_index,
    result_path,
    result_records,
    spill_bytes,
    spill_rows,
    write_result,
    write_result_bytes,
)

__all__ = ["BUCKET_VERSION", "BYTES_PER_ID", "MAX_BUCKETS", "BucketedResult", "bucket_key", "finish_output",
           "parse_size", "plan_buckets", "run_bucketed"]

BUCKET_VERSION = 1
#: a bucket smaller than this is not followed by a full garbage collection (:func:`_release_memory`)
RELEASE_MIN_IDS = 50_000
#: the resident size a party process has whatever its bucket size (the interpreter, numpy, gRPC and
#: TLS, the PSI's fixed-size buffers: ~150-190 MiB measured): the budget less this is for the buckets
FIXED_BYTES = 160 << 20
#: resident size per ID of one bucket (the PSI's state, the bucket's rows and CSV lines, and what the
#: allocator keeps of the previous bucket's pages: ~1 KB/ID measured at 10⁵-ID buckets), the planning constant
BYTES_PER_ID = 1000
MAX_BUCKETS = 512  # the final merge keeps one file per bucket open
_KEY_DOMAIN = b"vflcrypto/align/bucket-key/v1\x00"
_COMMIT_DOMAIN = b"vflcrypto/align/bucket-commit/v1\x00"
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20, "gi": 2**30,
          "gib": 2**30, "ti": 2**40, "tib": 2**40}


def parse_size(text: str) -> int:
    """A memory size such as ``2GiB``, ``500MB`` or ``1e9`` in bytes (ValueError otherwise)."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a memory size: {text!r} (e.g. 2GiB, 500MB)")
    value = float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
    if value < 1 << 20:
        raise ValueError(f"memory budget {text!r} is below 1 MiB")
    return int(value)


def plan_buckets(rows: int, budget: int) -> int:
    """This party's proposed bucket count: its rows at :data:`BYTES_PER_ID` over the budget less
    :data:`FIXED_BYTES` (at least a quarter of the budget: a budget below the fixed part is not met)."""
    return max(1, min(MAX_BUCKETS, math.ceil(rows * BYTES_PER_ID / max(budget - FIXED_BYTES, budget // 4))))


def bucket_key(active_nonce: bytes, passive_nonce: bytes) -> bytes:
    return hashlib.sha256(_KEY_DOMAIN + active_nonce + passive_nonce).digest()


def _commit(nonce: bytes) -> bytes:
    return hashlib.sha256(_COMMIT_DOMAIN + nonce).digest()


def _plan_digest(protocol: str, mode: str, buckets: int, c_active: bytes, c_passive: bytes) -> bytes:
    return hashlib.sha256(json.dumps([protocol, mode, buckets, c_active.hex(), c_passive.hex()]).encode()).digest()


@dataclass(frozen=True)
class BucketedResult:
    """One party's bucketed run: sizes, the intersection size if learned, where the results are."""

    own_size: int
    peer_size: int
    intersection: int | None
    buckets: int
    resumed_from: int | None
    work: Path
    learns: bool
    sizes: tuple[int, ...]
    peer_sizes: tuple[int, ...]
    seconds: Mapping[str, float] = field(default_factory=dict)
    cluster_tasks: int = 0  # tasks this run sent to the party's Ray cluster (:mod:`.bucket_parallel`)


def _load_plan(work: Path) -> dict[str, Any]:
    try:
        plan: dict[str, Any] = json.loads((work / "plan.json").read_text())
    except FileNotFoundError:
        raise InputDataError(f"nothing to resume in {work} (no plan.json): run without --resume") from None
    return plan


def _exchange(ch: Channel, msg: Any, kind: type, timeout: float | None) -> Any:
    ch.send(msg, step="bucket")
    return ch.recv(kind, timeout=timeout, step="bucket")


def run_bucketed(channels: Mapping[str, Channel], table: IdTable, work: Path, *, role: str, protocol: str,
                 mode: str, budget: int, duplicates: str = "error", strip: bool = False, resume: bool = False,
                 chunk_size: int | None = None, timeout: float | None = None, keep_first_flag: str = "--keep-first",
                 psi_kwargs: Mapping[str, Any] | None = None, propose: int | None = None,
                 tick: Callable[[int, int], None] | None = None, parallel: str | None = None) -> BucketedResult:
    """One party of a bucketed alignment over its single channel; aligned rows left in ``work``.

    ``role`` is ``"active"`` or ``"passive"`` (the PSI's roles); ``psi_kwargs`` go to each
    bucket's :func:`.roles.run_active` / :func:`.roles.run_passive` (identities for keyed hash).
    ``tick(done, total)`` is told each finished bucket (default: the progress reporter);
    ``propose`` (audits) proposes that bucket count instead of the budget's. ``parallel``
    (``"process"`` or ``"ray"``; default :func:`vflcrypto.parallel.backend`): with Ray, the local
    per-bucket work runs as tasks on the party's cluster (:mod:`.bucket_parallel`), the same bytes.
    ``seconds`` of the result: wall time of the spill, the sizes' exchange, the buckets and the rest.
    """
    t0 = time.perf_counter()
    seconds: dict[str, float] = {}
    ex = bucket_executor(parallel)
    if mode not in ("both", "left"):
        raise ProtocolError(f"bucketed alignment runs modes 'both' and 'left', not {mode!r}: per-bucket "
                            "cardinalities would reveal more than the intersection size")
    ((peer, ch),) = channels.items()
    active = role in ACTIVE_ROLES
    digest = input_digest(table.path)
    if resume:
        plan = _load_plan(work)
        mine = {"protocol": protocol, "mode": mode, "id_column": table.id_column, "duplicates": duplicates,
                "strip": strip, "input_sha256": digest}
        for k, v in mine.items():
            if plan.get(k) != v:
                what = "input file" if k == "input_sha256" else k
                raise InputDataError(f"cannot resume from {work}: its run had another {what} "
                                     f"({plan.get(k)!r} there, {v!r} now); run without --resume")
        nonce = bytes.fromhex(plan["nonce"])
        first = next((b for b in range(plan["buckets"]) if not result_path(work, b).exists()), plan["buckets"])
        c_a, c_p = (_commit(nonce), bytes.fromhex(plan["peer_commitment"]))
        if not active:
            c_a, c_p = c_p, c_a
        hello = BucketHello(BUCKET_VERSION, role, protocol, mode, plan["buckets"], _commit(nonce), True, first,
                            _plan_digest(protocol, mode, plan["buckets"], c_a, c_p))
    else:
        if (work / "plan.json").exists():
            raise InputDataError(f"{work} holds an unfinished bucketed run: pass --resume to finish it, or remove "
                                 "the directory")
        nonce = secrets.token_bytes(32)
        hello = BucketHello(BUCKET_VERSION, role, protocol, mode, propose or plan_buckets(table.n_rows, budget),
                            _commit(nonce), False, 0, b"")
    peer_hello: BucketHello = _exchange(ch, hello, BucketHello, timeout)
    if peer_hello.version != BUCKET_VERSION or (peer_hello.protocol, peer_hello.mode) != (protocol, mode):
        raise ProtocolError(f"{peer} runs bucketed {peer_hello.protocol}/{peer_hello.mode} v{peer_hello.version}, "
                            f"this side {protocol}/{mode} v{BUCKET_VERSION}")
    if (peer_hello.role in ACTIVE_ROLES) == active:
        raise ProtocolError(f"both parties claim the role {role!r}")
    if peer_hello.resume != resume:
        raise ProtocolError(f"{peer} {'resumes' if peer_hello.resume else 'starts'} a bucketed run while this side "
                            f"{'resumes' if resume else 'starts'} one: pass --resume to both or to neither")
    if resume:
        if peer_hello.plan_digest != hello.plan_digest:
            raise ProtocolError(f"{peer} resumes another bucketed run than the one in {work}: its plan differs")
        buckets = hello.buckets
    else:
        buckets = max(hello.buckets, peer_hello.buckets)
        if not 1 <= buckets <= MAX_BUCKETS:
            raise ProtocolError(f"{peer} proposed {peer_hello.buckets} buckets (at most {MAX_BUCKETS})")
    peer_nonce: BucketNonce = _exchange(ch, BucketNonce(nonce), BucketNonce, timeout)
    if len(peer_nonce.nonce) != 32 or not hmac.compare_digest(_commit(peer_nonce.nonce), peer_hello.commitment):
        raise ProtocolError(f"{peer}'s bucket nonce does not open its commitment")
    key = bucket_key(*((nonce, peer_nonce.nonce) if active else (peer_nonce.nonce, nonce)))
    ch.hold("bucket_key", key)  # audit runs only

    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not resume:
        plan = {"format": BUCKET_VERSION, "role": role, "protocol": protocol, "mode": mode,
                "id_column": table.id_column, "duplicates": duplicates, "strip": strip, "input": str(table.path),
                "input_sha256": digest, "buckets": buckets, "nonce": nonce.hex(),
                "peer_commitment": peer_hello.commitment.hex(), "spilled": False}
        atomic_write_text(work / "plan.json", json.dumps(plan, indent=1), permissions=PRIVATE)
    seconds["setup"] = time.perf_counter() - t0
    if not plan.get("spilled"):
        spill_rows(table, work, key, buckets, strip=strip, executor=ex)
        if ex is not None:
            count_args = ((spill_bytes(work, b), duplicates, str(table.path), keep_first_flag) for b in range(buckets))
            sizes = list(ordered_map(ex, count_bucket, count_args))
        else:
            sizes = [count_spilled(work, b, duplicates, str(table.path), keep_first_flag) for b in range(buckets)]
        _release_memory()
        plan.update(spilled=True, sizes=sizes)
        atomic_write_text(work / "plan.json", json.dumps(plan, indent=1), permissions=PRIVATE)
    sizes = list(plan["sizes"])
    ch.hold("own_bucket_sizes", sizes)  # audit runs only
    seconds["spill"] = time.perf_counter() - t0 - seconds["setup"]
    # the peer may still be spilling a large file: wait for its sizes longer than for a PSI message
    got: BucketSizes = _exchange(ch, BucketSizes(np.asarray(sizes, np.int64)), BucketSizes,
                                 max(timeout if timeout is not None else ch.timeout, 3600.0))
    peer_sizes = np.asarray(got.sizes, np.int64)
    if peer_sizes.shape != (buckets,) or np.any(peer_sizes < 0):
        raise ProtocolError(f"{peer} sent {peer_sizes.size} bucket sizes for {buckets} buckets")
    if resume and plan.get("peer_sizes") not in (None, peer_sizes.tolist()):
        raise ProtocolError(f"{peer}'s bucket sizes differ from those of the run in {work}")
    if plan.get("peer_sizes") is None:
        plan["peer_sizes"] = peer_sizes.tolist()
        atomic_write_text(work / "plan.json", json.dumps(plan, indent=1), permissions=PRIVATE)

    start = min(hello.first_unfinished, peer_hello.first_unfinished) if resume else 0
    report = tick or (lambda done, total: progress.report(f"aligning buckets ({protocol})", done, total,
                                                          unit="bucket"))
    learns = active or mode == "both"
    run = run_active if active else run_passive
    kw: dict[str, Any] = {"protocol": protocol, "mode": mode, "progress": lambda _n: None, **(psi_kwargs or {})}
    if chunk_size is not None:
        kw["chunk_size"] = chunk_size
    report(start, buckets)
    t1 = time.perf_counter()
    seconds["sizes_wait"] = t1 - t0 - seconds["setup"] - seconds["spill"]
    if ex is not None:
        _buckets_on_cluster(ex, channels, work, table, sizes, peer_sizes.tolist(), range(start, buckets), run, kw,
                            learns=learns, duplicates=duplicates, keep_first_flag=keep_first_flag, timeout=timeout,
                            report=report)
    else:
        for b in range(start, buckets):
            rows = load_bucket(work, b, duplicates=duplicates, path=table.path, keep_first_flag=keep_first_flag,
                               size=sizes[b])
            if sizes[b] and peer_sizes[b]:
                res = run(channels, rows.canon(), timeout=timeout, **kw)
                positions = res.rows
            else:  # empty at one party: nothing in common, and both know it from the sizes
                positions = np.zeros(0, np.int64) if learns else None
            write_result(work, b, rows, positions)
            del rows, positions
            _release_memory(sizes[b])
            report(b + 1, buckets)
    seconds["buckets"] = time.perf_counter() - t1
    intersection = None
    if learns:
        intersection = sum(len(result_index(work, b)) for b in range(buckets))
    return BucketedResult(sum(sizes), int(peer_sizes.sum()), intersection, buckets,
                          start if resume else None, work, learns, tuple(sizes), tuple(peer_sizes.tolist()), seconds,
                          getattr(ex, "tasks", 0))


def _buckets_on_cluster(ex: Any, channels: Mapping[str, Channel], work: Path, table: IdTable, sizes: list[int],
                        peer_sizes: list[int], todo: range, run: Callable[..., Any], kw: dict[str, Any], *,
                        learns: bool, duplicates: str, keep_first_flag: str, timeout: float | None,
                        report: Callable[[int, int], None]) -> None:
    """The bucket loop with the local work on the party's Ray cluster (:mod:`.bucket_parallel`).

    While bucket ``b``'s PSI runs here on the link, a task parses bucket ``b + 1``'s spill file and
    another sorts bucket ``b − 1``'s aligned rows; result files are still written in bucket order,
    each once its bucket is finished (a resume starts at the first missing one, as in process).
    """
    def parse(b: int) -> Any:
        return ex.submit(parse_bucket, spill_bytes(work, b), duplicates, str(table.path), keep_first_flag)

    total = len(sizes)
    nxt = parse(todo.start) if len(todo) else None
    pending: tuple[int, Any] | None = None
    for b in todo:
        assert nxt is not None
        rows = BucketRows(*nxt.result())
        nxt = parse(b + 1) if b + 1 < todo.stop else None
        if sizes[b] and peer_sizes[b]:
            positions = run(channels, rows.canon(), timeout=timeout, **kw).rows
        else:  # empty at one party: nothing in common, and both know it from the sizes
            positions = np.zeros(0, np.int64) if learns else None
        if pending is not None:
            write_result_bytes(work, pending[0], pending[1].result())
            report(pending[0] + 1, total)
        pending = (b, ex.submit(result_records, rows.keys, rows.lines, positions))
        del rows, positions
        _release_memory(sizes[b])
    if pending is not None:
        write_result_bytes(work, pending[0], pending[1].result())
        report(pending[0] + 1, total)


def _release_memory(ids: int | None = None) -> None:
    """Free the last bucket's state now and hand the freed heap back to the OS.

    A PSI session and its role refer to each other (bound-method callbacks), so a bucket's
    arrays wait for the cyclic garbage collector, which counts objects, not bytes: without
    ``gc.collect()`` the resident size grew by ~50 MiB per bucket of 2.5·10⁵ IDs (measured).
    glibc's ``malloc_trim`` then returns the freed pages of its per-thread arenas (a no-op elsewhere).
    A bucket of fewer than :data:`RELEASE_MIN_IDS` IDs (``ids``) is left to the collector's own
    schedule: its few MiB do not matter, while a full collection costs time in proportion to
    every live object of the process (0.1–0.3 s in a large one), per bucket.
    """
    if ids is not None and ids < RELEASE_MIN_IDS:
        return
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def finish_output(res: BucketedResult, table: IdTable, out: Path) -> int | None:
    """Merge the run's per-bucket results into ``out`` (the unbucketed run's bytes); remove the work directory.

    A party that learns no rows writes nothing and returns ``None``.
    """
    count = merge_results(res.work, res.buckets, out, table.header) if res.learns else None
    shutil.rmtree(res.work, ignore_errors=True)
    return count


def align_files_bucketed(left: IdTable, right: IdTable, *, protocol: str, reveal: str, paths: Mapping[str, Path],
                         work_dir: Path, budget: int, duplicates: str = "error", strip: bool = False,
                         resume: bool = False, timeout: float = 120.0, tap: Any = None,
                         propose: int | None = None, parallel: str | None = None) -> dict[str, Any]:
    """Both parties in this process (threads over a local network), each with its own work directory.

    Returns the parts of :func:`.files.align_files`'s summary a bucketed run fills (and the
    transcript under ``"_transcript"``); ``tap`` (audits) keeps what each party received.
    """
    import os

    from vflcrypto.data.atomic import atomic_set
    from vflcrypto.psi.primitives import IdentityKey
    from vflcrypto.runtime.channel import Endpoint, LocalNetwork, Transcript, run_parties

    from .messages import ACTIVE, PASSIVE

    net = LocalNetwork([Endpoint(ACTIVE, ACTIVE), Endpoint(PASSIVE, PASSIVE)], timeout=timeout,
                       run_id=os.urandom(8).hex(), transcript=Transcript(tap))
    ids = {ACTIVE: IdentityKey.generate(), PASSIVE: IdentityKey.generate()}
    sides = {ACTIVE: ("left", left), PASSIVE: ("right", right)}

    def task(name: str) -> BucketedResult:
        side, table = sides[name]
        other = PASSIVE if name == ACTIVE else ACTIVE
        kw = {"identity": ids[name], "peer_identity": ids[other].public_bytes} if protocol == "hash" else {}
        return run_bucketed(net.channels(name), table, work_dir / side, role=name, protocol=protocol, mode=reveal,
                            budget=budget, duplicates=duplicates, strip=strip, resume=resume, timeout=timeout,
                            psi_kwargs=kw, propose=propose, tick=None if name == ACTIVE else (lambda _d, _t: None),
                            parallel=parallel)

    results = run_parties({ACTIVE: lambda: task(ACTIVE), PASSIVE: lambda: task(PASSIVE)}, network=net)
    outputs: dict[str, str] = {}
    with atomic_set():
        for name in (ACTIVE, PASSIVE):
            side, table = sides[name]
            if results[name].learns:
                finish_output(results[name], table, paths[side])
                outputs[side] = str(paths[side])
    shutil.rmtree(work_dir, ignore_errors=True)
    res = results[ACTIVE]
    return {"left_size": res.own_size, "right_size": res.peer_size, "intersection": res.intersection,
            "buckets": res.buckets, "resumed_from": res.resumed_from, "bytes_sent": net.transcript.total_bytes,
            "outputs": outputs, "_transcript": net.transcript,
            "phase_seconds": {sides[n][0]: dict(results[n].seconds) for n in (ACTIVE, PASSIVE)},
            "cluster_tasks": {sides[n][0]: results[n].cluster_tasks for n in (ACTIVE, PASSIVE)}}
