"""A SecureBoost prediction service: ``vflcrypto party ... serve secureboost``.

Every party starts once, loads its own saved model and its own rows (``--data``, keyed by the ID column, no
alignment: a request names the IDs) and stays up over the run's mutually authenticated TLS links. The active
party (the label holder) reads requests from its standard input, one line per batch, and writes one JSON line
per request on its standard output::

    r001,r002 r003              IDs separated by commas or whitespace (or a JSON array: ["r001", "r002"])
    {"batch": 1, "ids": ["r001", "r002", "r003"], "prediction": [0, 1, 0], "probability": [0.21, 0.74, 0.33]}
    nosuchid
    {"batch": 2, "error": "unknown ID 'nosuchid': not in the active party's --data"}
    !stop                       (or the end of the input) stops the service at every party

Per batch the active party sends the requested IDs to each passive party (``secureboost.serve_request``);
each answers which of them it does not hold (``secureboost.serve_rows``: usually none); then the rows are
routed exactly as a batch prediction routes them (``secureboost.predict_query`` and ``predict_answer`` of
:func:`.predict.predict_active` / :func:`.predict.predict_passive`, the active party
learning only the left/right bit of each row at each passive node). An ID unknown to the active party is
answered with an error without asking anyone; an ID unknown to a passive party ends the batch with an
error answer (no row routed) and the service goes on. ``!stop`` or the end of the input sends the stop to
every passive party, and each party writes its ``--out`` summary and run record (with ``--json`` the label
holder's record follows the answers as the last line of its standard output). A vanished peer (its link
breaks: a killed process resets its TCP connection, a silent machine misses the HTTP/2 keepalive) ends the
service with a one-line error, also while the active party idles between requests (it polls its links); a
peer that stops answering inside a batch, after the configuration's receive timeout. A passive party waits
for the next request at most ``--idle-timeout`` seconds.
"""

from __future__ import annotations

import argparse
import json
import queue
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from vflcrypto.data.tables import read_party_csv
from vflcrypto.errors import InputDataError, PeerDisconnectedError, ProtocolError
from vflcrypto.runtime.channel import DEFAULT_TIMEOUT, Channel, Transcript, run_parties
from vflcrypto.spec import PartyOutcome, TaskContext

from .._predict import own_model
from .._train import json_outcome
from .cli import _load_party_model, prediction_columns
from .messages import ACTIVE, PASSIVE, PredictQuery, ServeRequest, ServeRows
from .model import ActiveModel, PassiveModel
from .predict import network, predict_active, predict_passive
from .tree import as_matrix

__all__ = ["STOP", "ActiveService", "pack_ids", "parse_request", "serve_lines", "serve_local", "serve_passive",
           "unpack_ids", "watched_lines"]

#: the request line that stops the service (the end of the input does too)
STOP = "!stop"


def parse_request(line: str) -> list[str] | None:
    """The IDs of one request line (``None``: the stop line). IDs are separated by commas or whitespace, or
    the line is a JSON array of ID strings (for IDs that hold commas or spaces)."""
    text = line.strip()
    if text == STOP:
        return None
    if text.startswith("["):
        try:
            ids = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputDataError(f"request is not a JSON array of IDs: {exc.msg} at column {exc.colno}") from None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InputDataError("request is not a JSON array of ID strings")
        return ids
    return [t for t in re.split(r"[,\s]+", text) if t]


def pack_ids(ids: Sequence[str]) -> tuple[bytes, np.ndarray]:
    """IDs as one UTF-8 blob and the offsets of each (a list of strings decodes ID by ID: 10x slower)."""
    parts = [i.encode() for i in ids]
    return b"".join(parts), np.cumsum([0, *map(len, parts)], dtype=np.int64)


def unpack_ids(blob: bytes, offsets: np.ndarray) -> list[str]:
    """The IDs of :func:`pack_ids`; a malformed layout is a :class:`ProtocolError`."""
    offs = np.asarray(offsets, dtype=np.int64)
    if offs.ndim != 1 or len(offs) < 1 or offs[0] != 0 or offs[-1] != len(blob) or (np.diff(offs) < 0).any():
        raise ProtocolError("malformed prediction request: ID offsets do not describe the IDs")
    try:
        text = blob.decode()
    except UnicodeDecodeError:
        raise ProtocolError("malformed prediction request: IDs are not UTF-8") from None
    if len(text) == len(blob):  # ASCII: byte offsets are character offsets
        return [text[a:b] for a, b in zip(offs[:-1].tolist(), offs[1:].tolist(), strict=True)]
    try:
        return [blob[a:b].decode() for a, b in zip(offs[:-1].tolist(), offs[1:].tolist(), strict=True)]
    except UnicodeDecodeError:
        raise ProtocolError("malformed prediction request: an ID offset splits a character") from None


def _unknown(ids: Sequence[str], where: str) -> str:
    more = f" (and {len(ids) - 1} more)" if len(ids) > 1 else ""
    return f"unknown ID {ids[0]!r}{more}: not in {where}"


def _index(ids: Sequence[str], who: str) -> dict[str, int]:
    index = {rid: k for k, rid in enumerate(ids)}
    if len(index) != len(ids):
        raise InputDataError(f"{who}: the ID column lists an ID twice; a request could not say which row it means")
    return index


class ActiveService:
    """The label holder's side: answers one batch of IDs at a time over its channels to the passive parties.

    ``ids`` and ``X`` are the active party's rows (its model's columns). :meth:`answer` returns the JSON
    object of one answer (an ``error`` instead of predictions for a bad request); :meth:`stop` ends the
    service at every passive party.
    """

    def __init__(self, channels: Mapping[str, Channel], model: ActiveModel, ids: Sequence[str], X: np.ndarray, *,
                 max_batch: int = 100_000, timeout: float | None = None) -> None:
        names = list(model.passive_parties)
        if set(channels) != set(names):
            raise InputDataError(f"model was trained with passive parties {names}, got {sorted(channels)}")
        self.X = as_matrix(X, "active party")
        if self.X.shape[1] != len(model.columns) or self.X.shape[0] != len(ids):
            raise InputDataError(f"active party has {self.X.shape[1]} features, the model {len(model.columns)}")
        self.channels = {n: channels[n] for n in names}
        self.model = model
        self.index = _index(ids, "active party")
        self.max_batch = max_batch
        self.timeout = timeout
        self.batch = 0
        self.rows = 0
        self.errors = 0

    def _error(self, message: str) -> dict[str, Any]:
        self.errors += 1
        return {"batch": self.batch, "error": message}

    def answer(self, ids: Sequence[str]) -> dict[str, Any]:
        """Score one batch: ``{"batch", "ids", "prediction"[, "probability"]}`` or ``{"batch", "error"}``."""
        self.batch += 1
        if not ids:
            return self._error("empty request: no IDs")
        if len(ids) > self.max_batch:
            return self._error(f"request of {len(ids)} IDs exceeds --max-batch {self.max_batch}")
        where = [self.index.get(i, -1) for i in ids]
        if min(where) < 0:  # answered here: an ID the active party does not hold never reaches a passive party
            return self._error(_unknown([i for i, k in zip(ids, where, strict=True) if k < 0],
                                        "the active party's --data"))
        blob, offsets = pack_ids(ids)
        for ch in self.channels.values():
            ch.send(ServeRequest(self.model.model_id, self.batch, blob, offsets), step="serve")
        absent: list[str] = []
        for name, ch in self.channels.items():
            rows = ch.recv(ServeRows, timeout=self.timeout, step="serve")
            pos = np.asarray(rows.missing, dtype=np.int64)
            if rows.batch != self.batch or (len(pos) and (pos.min() < 0 or pos.max() >= len(ids))):
                raise ProtocolError(f"{name} answered a prediction request with the wrong batch or positions")
            if len(pos) and not absent:
                absent = [f"{name}'s data"] + [ids[int(k)] for k in pos]
        if absent:  # end the batch at every passive party without routing a row
            end = PredictQuery(self.model.model_id, len(ids), 0, True, np.zeros(0, np.int64), np.zeros(1, np.int64),
                               np.zeros(0, np.int32))
            for ch in self.channels.values():
                ch.send(end, step="serve")
            return self._error(_unknown(absent[1:], absent[0]))
        out = predict_active(self.channels, self.model, self.X[where], timeout=self.timeout)
        self.rows += len(ids)
        cols = prediction_columns(self.model.objective, out)
        return {"batch": self.batch, "ids": list(ids), **{k: np.asarray(v).tolist() for k, v in cols.items()}}

    def stop(self) -> None:
        """Tell every passive party that the service ends."""
        for ch in self.channels.values():
            ch.send(ServeRequest(self.model.model_id, self.batch + 1, b"", np.zeros(1, np.int64), stop=True),
                    step="serve")

    def summary(self) -> dict[str, Any]:
        return {"batches": self.batch, "rows": self.rows, "errors": self.errors}


def serve_passive(channels: Mapping[str, Channel], model: PassiveModel, ids: Sequence[str], X: np.ndarray, *,
                  idle_timeout: float, timeout: float | None = None) -> dict[str, Any]:
    """A passive party's side until the stop: per request, say which IDs it lacks, then answer left/right at its
    own nodes for the batch's rows (:func:`.predict.predict_passive`). Returns its counts."""
    ch = next(iter(channels.values()))
    X = as_matrix(X, model.party)
    if X.shape[1] != len(model.columns):
        raise InputDataError(f"{model.party} has {X.shape[1]} features, its model {len(model.columns)}")
    index = _index(ids, model.party)
    batches = rows = answered = 0
    while True:
        req = ch.recv(ServeRequest, timeout=idle_timeout, step="serve")
        if not secrets.compare_digest(req.model_id.encode(), model.model_id.encode()):
            raise ProtocolError(f"{model.party}: prediction request for another model: stale or mismatched "
                                "passive model")
        if req.stop:
            return {"batches": batches, "rows": rows, "answered": answered}
        where = np.asarray([index.get(i, -1) for i in unpack_ids(req.ids, req.offsets)], dtype=np.int64)
        missing = np.flatnonzero(where < 0).astype(np.int32)
        ch.send(ServeRows(req.batch, missing), step="serve")
        batches += 1
        if len(missing):
            end = ch.recv(PredictQuery, timeout=timeout, step="serve")
            if not end.done:
                raise ProtocolError(f"{model.party}: rows routed for a request with IDs it does not hold")
            continue
        answered += predict_passive(dict(channels), model, X[where], timeout=timeout)
        rows += len(where)


def serve_lines(service: ActiveService, lines: Iterable[str | None], write: Callable[[str], None]) -> dict[str, Any]:
    """Answer request ``lines`` (``None`` or :data:`STOP`: the end) with one JSON line each through ``write``;
    then stop every party. Latency per answered batch is kept in the summary (median and 99th percentile)."""
    seconds: list[float] = []
    for line in lines:
        if line is None:
            break
        t0 = time.perf_counter()
        try:
            ids = parse_request(line)
        except InputDataError as exc:
            service.batch += 1
            write(json.dumps(service._error(str(exc))))
            continue
        if ids is None:
            break
        write(json.dumps(service.answer(ids)))
        seconds.append(time.perf_counter() - t0)
    service.stop()
    lat = np.asarray(seconds) if seconds else np.zeros(1)
    return {**service.summary(), "latency_s": {"p50": round(float(np.percentile(lat, 50)), 6),
                                               "p99": round(float(np.percentile(lat, 99)), 6)}}


def watched_lines(stream: IO[str], channels: Mapping[str, Channel], poll: float = 0.2) -> Iterator[str | None]:
    """The lines of ``stream`` (then ``None``), read on a thread; while none arrives, every ``poll`` seconds the
    links are checked, so a passive party that vanished while the service idled ends it with one line."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        try:
            for line in stream:
                lines.put(line)
        finally:
            lines.put(None)

    threading.Thread(target=read, name="serve-requests", daemon=True).start()
    while True:
        try:
            item = lines.get(timeout=poll)
        except queue.Empty:
            for name, ch in channels.items():
                err = ch.link_failure()
                if err is not None:
                    raise PeerDisconnectedError(f"{name} left the prediction service: {err}") from None
            continue
        yield item
        if item is None:
            return


def serve_local(active: tuple[ActiveModel, Sequence[str], np.ndarray],
                passive: Sequence[tuple[PassiveModel, Sequence[str], np.ndarray]], requests: Iterable[str], *,
                timeout: float = DEFAULT_TIMEOUT, transcript: Transcript | None = None) -> list[dict[str, Any]]:
    """The service with every party in this process (tests, the audit): the answers to ``requests``."""
    model, ids, X = active
    names = list(model.passive_parties)
    by_name = {m.party: (m, i, x) for m, i, x in passive}
    if set(by_name) != set(names):
        raise InputDataError(f"model needs passive parties {names}, got {sorted(by_name)}")
    net = network(names, timeout, True, transcript)
    answers: list[dict[str, Any]] = []

    def run_active() -> dict[str, Any]:
        service = ActiveService(net.channels(ACTIVE), model, ids, X, timeout=timeout)
        return serve_lines(service, requests, lambda line: answers.append(json.loads(line)))

    def run_passive(name: str) -> Callable[[], Any]:
        m, i, x = by_name[name]
        return lambda: serve_passive(net.channels(name), m, i, x, idle_timeout=timeout, timeout=timeout)

    tasks: dict[str, Callable[[], Any]] = {ACTIVE: run_active, **{name: run_passive(name) for name in names}}
    run_parties(tasks, network=net)
    return answers


# --------------------------------------------------------------------------- vflcrypto party ... serve secureboost


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = __doc__.split("\n\n", 1)[1] if __doc__ else None
    p.add_argument("--model-dir", help="a `vflcrypto train secureboost --model-dir` directory: this party's "
                                       "<party>.npz there (checked against the manifest)")
    p.add_argument("--model", dest="model_file", metavar="FILE",
                   help="this party's own model file instead of --model-dir (e.g. the --out of `party ... train "
                        "secureboost`)")
    p.add_argument("--data", help="this party's CSV: the ID column and its model's columns (each ID once)")
    p.add_argument("--id-column", help="the ID column of --data")
    p.add_argument("--out", required=True, help="a JSON summary of the service when it stops (batches, rows, "
                                                "errors; the active party: latency p50/p99)")
    p.add_argument("--max-batch", type=int, default=100_000, help="active party: the most IDs one request may "
                                                                  "name (default 100000)")
    p.add_argument("--idle-timeout", type=float, default=None, metavar="S",
                   help="passive party: how long to wait for the next request before giving up (default: the "
                        "configuration's run deadline)")


def _own(args: argparse.Namespace, ctx: TaskContext) -> ActiveModel | PassiveModel:
    if args.model_dir and not args.model_file:
        args.model_file = str(Path(args.model_dir) / f"{ctx.me}.npz")
    return own_model(args, ctx, _load_party_model,
                     lambda m: (None, ACTIVE) if isinstance(m, ActiveModel) else (m.party, PASSIVE))


def party_check(args: argparse.Namespace, ctx: TaskContext) -> None:
    """Before connecting: this party's own model file (refused in one line if it is another party's)."""
    _own(args, ctx)


def party_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    """``vflcrypto party ... serve secureboost``: one party of the prediction service until the stop."""
    model = _own(args, ctx)
    table = read_party_csv(args.data, args.id_column, features=list(model.columns))
    t0 = time.perf_counter()
    if isinstance(model, ActiveModel):
        names = list(model.passive_parties)
        if sorted(names) != sorted(ctx.names(PASSIVE)):
            raise InputDataError(f"{args.model_file} was trained with the passive parties {names}; the "
                                 f"configuration names {ctx.names(PASSIVE)}")
        channels = ctx.only(names)
        service = ActiveService(channels, model, list(table.ids), table.X, max_batch=args.max_batch)
        def write(line: str) -> None:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

        summary = serve_lines(service, watched_lines(sys.stdin, channels), write)
    else:
        idle = args.idle_timeout if args.idle_timeout is not None else ctx.config.settings.deadline
        summary = serve_passive(ctx.only([ctx.one(ACTIVE)]), model, list(table.ids), table.X, idle_timeout=idle)
    return json_outcome({**summary, "seconds": round(time.perf_counter() - t0, 3)})
