"""ServerApp: plays the protocol's server party and delivers every frame between the parties.

It runs its own role in-process and relays frames: a frame for a ClientApp party goes to
that party's SuperNode in one ``train.step`` message (all deliverable frames of a round
in parallel, one per node); the frames in the replies are queued per (receiver, sender),
in order, like a Channel. Frames between two ClientApps are forwarded only for the kinds
the protocol declares ``relayed``. Every frame is recorded in a transcript (``out-dir``
/transcript.json), so ``vflcrypto audit --transcript`` works on a Flower run. A failed,
silent or deadlocked party aborts the run with an exception (the run then fails).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from vflcrypto.errors import PeerTimeoutError, ProtocolError
from vflcrypto.runtime.flower_meter import MeteredGrid
from vflcrypto.runtime.transcript import Endpoint, Transcript
from vflcrypto.runtime.wire import DecodeContext, decode_frame, message_kind, peek_frame

from .config import check_run_config
from .task import client_parties, frame, protocol, read_reply, request, role_config, write_output

app = ServerApp()
POLL_INTERVAL = 0.05  # seconds between pulls of the replies (loopback/LAN SuperLink)


def _exchange(grid: Grid, contents: dict[int, RecordDict], mtype: str, timeout: float,
              lost: set[int] | None = None) -> dict[int, RecordDict]:
    """Send one message per node and wait for every reply.

    An error or silence aborts, unless ``lost`` is given (a protocol that tolerates
    dropouts): then the failed or silent nodes are added to it and left out.
    """
    t0 = time.perf_counter()
    msgs = [Message(c, dst_node_id=n, message_type=mtype) for n, c in contents.items()]
    pending = set(grid.push_messages(msgs))
    replies: list[Message] = []
    deadline = time.monotonic() + timeout
    while pending:
        got = list(grid.pull_messages(pending))
        replies.extend(got)
        pending -= {r.metadata.reply_to_message_id for r in got}
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(POLL_INTERVAL)
    out: dict[int, RecordDict] = {}
    for r in replies:
        if r.has_error():
            if lost is None:
                raise ProtocolError(f"node {r.metadata.src_node_id} failed on {mtype}: {r.error.reason}")
            lost.add(r.metadata.src_node_id)
            continue
        out[r.metadata.src_node_id] = r.content
    missing = set(contents) - set(out) - (lost or set())
    if missing:
        if lost is None:
            raise PeerTimeoutError(f"no {mtype} reply from nodes {sorted(missing)} within {timeout:g} s")
        lost |= missing
    if isinstance(grid, MeteredGrid):
        grid.exchanges.append((len(msgs), time.perf_counter() - t0))
    return out


def _nodes(grid: Grid, parties: list[str], timeout: float) -> dict[str, int]:
    """Wait for the SuperNodes and ask each which party it plays."""
    deadline = time.monotonic() + timeout
    nodes: list[int] = []
    while len(nodes) < len(parties) and time.monotonic() < deadline:
        nodes = sorted(grid.get_node_ids())
        time.sleep(0.5 if len(nodes) < len(parties) else 0)
    if len(nodes) < len(parties):
        raise PeerTimeoutError(f"only {len(nodes)} of {len(parties)} SuperNodes joined within {timeout:g} s")
    hello = _exchange(grid, {n: RecordDict({"c": ConfigRecord({})}) for n in nodes}, "query.hello", timeout)
    node_of = {str(c["c"]["party"]): n for n, c in hello.items() if c["c"]["party"]}
    missing = [p for p in parties if p not in node_of]
    if missing:
        raise ProtocolError(f"no SuperNode plays {missing} (check each node's partition-id)")
    return node_of


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = role_config(context)
    check_run_config(cfg)  # every key, type and range, before any node is asked anything
    run_id, timeout = cfg["_run-id"], float(cfg.get("timeout", 120.0))
    spec, fl = protocol(cfg)
    spec.check_scheme(str(cfg.get("scheme", "paillier")))  # OU where a key holder returns decryptions: refused
    roles = fl.parties(cfg)
    me, clients = fl.server_party, client_parties(fl, cfg)
    meter = MeteredGrid(grid) if cfg.get("meter", False) else None  # bench: traffic on Flower's transport
    grid = meter if meter is not None else grid  # type: ignore[assignment]
    node_of = _nodes(grid, clients, timeout)
    started = time.perf_counter()
    transcript = Transcript()
    ep = {p: Endpoint(p, r) for p, r in roles.items()}
    mail: dict[tuple[str, str], deque[tuple[bytes, str]]] = {}  # (receiver, sender) -> (frame, sending step)
    waits: dict[str, tuple[str, str] | None] = {}  # client -> (peer, kind) it waits for; None = done

    role = fl.make_role(me, cfg)
    # a role that tolerates dropouts (secure aggregation) sees a failed or silent node as gone
    lost: set[int] | None = set() if role.tolerates_dropouts else None
    party_of = {n: p for p, n in node_of.items()}

    def route(sender: str, step: str, to: str, data: bytes) -> None:
        kind, frame_run = peek_frame(data)
        if frame_run != run_id:
            raise ProtocolError(f"{sender} sent a frame of another run")
        if sender != me and to != me and kind not in fl.relayed:
            raise ProtocolError(f"{sender} -> {to}: {kind} may not be relayed through the ServerApp")
        if to not in roles:
            raise ProtocolError(f"{sender} sent {kind} to unknown party {to}")
        transcript.record("send", 0, ep[sender], ep[to], kind, len(data), step)
        if sender != me and to != me:  # the relay sees the frame: the audit lists it for the ServerApp's party
            transcript.record("recv", 0, ep[sender], ep[me], kind, len(data), "relay")
        mail.setdefault((to, sender), deque()).append((data, step))

    def own_sends(step: str, sends: Any) -> None:
        for to, msg in sends:
            route(me, step, to, frame(msg, run_id))

    # start: the server's role and every client's (their first sends, their first waits);
    # clients that wait first are started with the server's first frame to them instead
    nxt = role.start()
    own_sends("start", nxt.sends)
    unstarted: set[str] = set()
    if fl.clients_wait_first:
        unstarted = set(clients)
        waits.update({c: (me, "its first frame") for c in clients})
    else:
        for content in _exchange(grid, {node_of[c]: RecordDict({"c": ConfigRecord({"start": True})})
                                        for c in clients}, "train.step", timeout, lost).values():
            party, step, frames, wait = read_reply(content)
            for to, data in frames:
                route(party, step, to, data)
            waits[party] = wait
        for n in lost or ():
            waits[party_of[n]] = None
    result: Any = None
    while True:
        # run the server's role as far as the queued frames allow
        while nxt.wait is not None:
            handled = nxt.wait
            if not mail.get((me, handled.peer)):
                if not (handled.optional and waits.get(handled.peer, None) is None):
                    break  # the peer may still send: ask the clients first
                nxt = role.step(handled, None)  # the peer is gone or finished: an optional wait gets None
                own_sends(handled.step, nxt.sends)
                continue
            data, _ = mail[(me, handled.peer)].popleft()
            got = decode_frame(data, ctx=DecodeContext(role.keyring(), bool(cfg.get("allow-insecure", False))))
            if got.kind != message_kind(handled.kind):
                raise ProtocolError(f"{me} expected {message_kind(handled.kind)} from {handled.peer}, got {got.kind}")
            transcript.record("recv", 0, ep[handled.peer], ep[me], got.kind, len(data), handled.step)
            nxt = role.step(handled, got.message)
            own_sends(handled.step, nxt.sends)
        if nxt.wait is None:
            result = nxt.result
        # one frame to every client that can take one now
        batch: dict[int, RecordDict] = {}
        for c in clients:
            w = waits.get(c)
            if w is not None and mail.get((c, w[0])):
                data, _ = mail[(c, w[0])].popleft()
                kind, _ = peek_frame(data)
                transcript.record("recv", 0, ep[w[0]], ep[c], kind, len(data), "")
                batch[node_of[c]] = request(data, w[0], "", start=c in unstarted)
                unstarted.discard(c)
        if not batch:
            if nxt.wait is None and all(w is None for w in waits.values()):
                break
            pending = {p: w for p, w in waits.items() if w is not None}
            raise ProtocolError(f"{spec.name}: no party can proceed (server waits on "
                                f"{None if nxt.wait is None else nxt.wait.peer}, clients on {pending})")
        for content in _exchange(grid, batch, "train.step", timeout, lost).values():
            party, step, frames, wait = read_reply(content)
            for to, data in frames:
                route(party, step, to, data)
            waits[party] = wait
        for n in lost or ():
            waits[party_of[n]] = None  # a lost node is gone for good
    summary = fl.summary({me: result}, cfg)
    for line in summary.get("lines", []):
        print(line, flush=True)
    out: dict[str, Any] = {"summary": summary, "result": result}
    if meter is not None:
        out["meter"] = {"seconds": time.perf_counter() - started, "nodes": node_of, "exchanges": meter.exchanges,
                        **meter.traffic.to_dict()}
    write_output(cfg, me, out)
    write_output(cfg, "transcript", {"protocol": spec.name, "run_id": run_id, "transcript": transcript.to_dict()})
