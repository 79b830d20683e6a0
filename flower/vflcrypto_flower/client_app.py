"""ClientApp: SuperNode ``partition-id = k`` plays the k-th non-server party of the protocol.

``query.hello`` names the party; each ``train.step`` message carries one frame (or the
start signal), which this node's role handles with the step it waits on; the reply
carries the frames that step sends. The role's state is kept in ``context.state``.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from vflcrypto.errors import ProtocolError
from vflcrypto.runtime.declarations import declaration_for
from vflcrypto.runtime.wire import DecodeContext, decode_frame, message_kind

from . import logs
from .task import (
    FRAME,
    SENDER,
    client_parties,
    load_wait,
    protocol,
    record_bytes,
    reply,
    role_config,
    save_wait,
    write_output,
)

app = ClientApp()
logs.install()  # the library's own errors in one line, not a traceback


def _party(context: Context) -> str:
    _, fl = protocol(context.run_config)
    parties = client_parties(fl, role_config(context))
    k = int(context.node_config["partition-id"])
    return parties[k] if 0 <= k < len(parties) else ""


@app.query("hello")
def hello(msg: Message, context: Context) -> Message:
    """Which party this node plays in this run ("" when the protocol needs fewer nodes)."""
    return Message(RecordDict({"c": ConfigRecord({"party": _party(context)})}), reply_to=msg)


@app.train("step")
def step(msg: Message, context: Context) -> Message:
    """Run one step of this node's role on the frame in ``msg`` (or its start)."""
    cfg = role_config(context)
    spec, fl = protocol(cfg)
    party = _party(context)
    if not party:
        raise ProtocolError(f"node {context.node_id} plays no party of {spec.name}")
    role = fl.make_role(party, cfg)
    insecure = bool(cfg.get("allow-insecure", False))
    saved = load_wait(context)
    rec = msg.content["c"]
    if saved is None:
        if not rec.get("start"):
            raise ProtocolError(f"{party}: a frame arrived before the run started")
        name, nxt = "start", role.start()
        started_with_frame = FRAME in rec
        if started_with_frame and (nxt.sends or nxt.wait is None):
            raise ProtocolError(f"{party} was started with a frame but its start does not just wait")
        wait = nxt.wait
    else:
        state, wait = saved
        role.load_state(state, allow_insecure=insecure)
        if wait is None:
            raise ProtocolError(f"{party}: a frame arrived after the role finished")
        started_with_frame = True
    if started_with_frame:
        assert wait is not None
        sender = str(rec[SENDER])
        frame = decode_frame(record_bytes(rec, FRAME), ctx=DecodeContext(role.keyring(), insecure))
        if frame.run_id != cfg["_run-id"]:
            raise ProtocolError(f"{party}: frame of another run")
        if sender != wait.peer or frame.kind != message_kind(wait.kind):
            raise ProtocolError(f"{party} waits for {message_kind(wait.kind)} from {wait.peer}, "
                                f"got {frame.kind} from {sender}")
        roles = fl.parties(cfg)
        if not declaration_for(frame.kind).allows(roles[sender], role.role):
            raise ProtocolError(f"{frame.kind} is not declared {roles[sender]} -> {role.role}")
        name, nxt = wait.step, role.step(wait, frame.message)
    sends = tuple(nxt.sends)  # a step may stream its sends: materialize them for the reply
    nxt = type(nxt)(sends, nxt.wait, nxt.result)
    save_wait(context, role.dump_state(), nxt.wait)
    if nxt.wait is None:
        write_output(cfg, party, nxt.result)  # this party's own output stays on its node
    return Message(reply(party, name, nxt, cfg["_run-id"]), reply_to=msg)
