"""ServerApp: the active party (labels, coordinator of the loop, Paillier key owner).

Drives the protocol of :mod:`vflcrypto.protocols.logreg` over Flower messages: each
message carries one declared ``logreg.*`` frame. A missing or failed reply aborts the run
with an exception (so the run's final status is a failure).
"""

from __future__ import annotations

import time

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp
from vflcrypto.protocols import logreg as lr

from vflcrypto.errors import PeerTimeoutError, ProtocolError
from vflcrypto.metrics import accuracy
from vflcrypto.paillier import generate_keypair
from vflcrypto.wire import KeyRing

from .task import load_labels, pack, party_name, unpack

app = ServerApp()
POLL_INTERVAL = 0.1  # seconds between pulls of the replies (loopback/LAN SuperLink)


def _exchange(grid: Grid, contents: dict[int, RecordDict], mtype: str, timeout: float
              ) -> dict[int, RecordDict]:
    """Send one message per node and wait for every reply (error or silence aborts).

    Polls with :data:`POLL_INTERVAL` instead of ``grid.send_and_receive`` (which sleeps 3 s
    between pulls of a deployed SuperLink): the protocol is many short sequential rounds.
    """
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
            raise ProtocolError(f"node {r.metadata.src_node_id} failed on {mtype}: {r.error.reason}")
        out[r.metadata.src_node_id] = r.content
    missing = set(contents) - set(out)
    if missing:
        raise PeerTimeoutError(f"no {mtype} reply from nodes {sorted(missing)} within {timeout:g} s")
    return out


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    secure = bool(cfg.get("secure", False))
    steps, rate = int(cfg.get("steps", 20)), float(cfg.get("learning-rate", 0.5))
    key_bits, timeout = int(cfg.get("key-bits", 2048)), float(cfg.get("timeout", 120.0))
    num = int(cfg.get("num-parties", 3))
    run = str(context.run_id)
    data = load_labels(int(cfg.get("seed", 0)))
    y, yt = data.y_train, data.y_test

    deadline = time.monotonic() + timeout
    nodes: list[int] = []
    while len(nodes) < num and time.monotonic() < deadline:
        nodes = sorted(grid.get_node_ids())
        time.sleep(0.5 if len(nodes) < num else 0)
    if len(nodes) < num:
        raise PeerTimeoutError(f"only {len(nodes)} of {num} SuperNodes joined within {timeout:g} s")
    nodes = nodes[:num]

    pk = sk = None
    ring = KeyRing()
    if secure:
        pk, sk = generate_keypair(key_bits, allow_insecure=key_bits < 2048)
        ring.add(pk)
    # Which node is which party: nodes announce nothing; the setup reply is checked below.
    names = [party_name(k) for k in range(num)]
    setup = lr.Setup(secure=secure, steps=steps, learning_rate=rate, n_train=len(y), n_test=len(yt),
                     parties=tuple(names), ids_digest=lr.rows_digest(None, len(y)), public_key=pk)
    replies = _exchange(grid, {n: pack(setup, lr.ACTIVE, run) for n in nodes}, "query.setup", timeout)
    who = {n: str(c["c"]["sender"]) for n, c in replies.items()}
    if sorted(who.values()) != names:
        raise ProtocolError(f"SuperNodes are {sorted(who.values())}, expected {names} "
                            "(check each node's partition-id)")
    node_of = {name: n for n, name in who.items()}
    for c in replies.values():
        unpack(c, lr.Ack, sender_role=lr.PASSIVE, receiver_role=lr.ACTIVE, run_id=run)

    if secure:  # relay identity keys, then the signed X25519 shares (declared passive -> passive)
        ids = {who[n]: bytes(c["identity"]["key"]) for n, c in replies.items()}
        shares = _exchange(grid, {n: RecordDict({"ids": ConfigRecord(ids)}) for n in nodes},
                           "query.keyshare", timeout)
        inbox = {
            n: RecordDict({who[src]: ConfigRecord({"frame": c[who[n]]["frame"]})
                           for src, c in shares.items() if src != n})
            for n in nodes
        }
        for c in _exchange(grid, inbox, "query.keyagree", timeout).values():
            unpack(c, lr.Ack, sender_role=lr.PASSIVE, receiver_role=lr.ACTIVE, run_id=run)

    def gather(action: str, step: int, rows: int) -> np.ndarray:
        req = pack(lr.Request(action, step), lr.ACTIVE, run)
        out = _exchange(grid, {n: req for n in nodes}, "train.logits", timeout)
        kind = lr.MaskedLogits if secure else lr.Logits
        parts = [unpack(out[node_of[p]], kind, sender_role=lr.PASSIVE, receiver_role=lr.ACTIVE,
                        run_id=run).values for p in names]
        if any(v.shape != (rows,) for v in parts):
            raise ProtocolError("logits of the wrong length")
        return lr.unmask_sum(parts) if secure else np.sum(parts, axis=0)

    for t in range(steps):
        _, r, loss = lr.residuals(gather("step", t, len(y)), y)
        if secure:
            enc = pack(lr.EncryptedResidual(t, lr.encrypt_residual(sk, r)), lr.ACTIVE, run)
            grads = _exchange(grid, {n: enc for n in nodes}, "train.residual", timeout)
            replies_g = {}
            for n, c in grads.items():
                mg = unpack(c, lr.MaskedGradient, sender_role=lr.PASSIVE, receiver_role=lr.ACTIVE,
                            run_id=run, keyring=ring, allow_insecure=key_bits < 2048)
                replies_g[n] = pack(lr.GradientReply(t, lr.decrypt_masked(sk, mg.values)), lr.ACTIVE, run)
            acks = _exchange(grid, replies_g, "train.gradient", timeout)
        else:
            res = pack(lr.Residual(t, r), lr.ACTIVE, run)
            acks = _exchange(grid, {n: res for n in nodes}, "train.residual", timeout)
        for c in acks.values():
            if unpack(c, lr.Ack, sender_role=lr.PASSIVE, receiver_role=lr.ACTIVE, run_id=run).step != t:
                raise ProtocolError("acknowledgement for the wrong step")
        print(f"[vflcrypto] step {t:2d} loss {loss:.4f}", flush=True)

    p_train = lr.sigmoid(gather("predict-train", steps, len(y)))
    p_test = lr.sigmoid(gather("predict-test", steps, len(yt)))
    print(f"[vflcrypto] {'secure' if secure else 'plain'}: train loss {lr.bce_loss(y, p_train):.4f}, "
          f"test loss {lr.bce_loss(yt, p_test):.4f}, test accuracy {accuracy(yt, p_test):.4f}",
          flush=True)
