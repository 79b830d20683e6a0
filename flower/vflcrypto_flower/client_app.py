"""ClientApp: one SuperNode = one passive (feature) party, chosen by node config ``partition-id``.

Each handler decodes one declared ``logreg.*`` message, runs the protocol module's math,
stores the party's state in ``context.state`` and replies with one declared message.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from vflcrypto.protocols import logreg as lr

from vflcrypto.errors import InputDataError, ProtocolError
from vflcrypto.paillier import PaillierPublicKey
from vflcrypto.wire import IntVector, KeyRing, decode_value, encode_value

from .task import get_state, get_weights, load_party, pack, party_name, put_state, put_weights, unpack

app = ClientApp()


def _me(context: Context) -> tuple[str, int]:
    pid = int(context.node_config["partition-id"])
    return party_name(pid), pid


def _raw(key: Ed25519PrivateKey | X25519PrivateKey) -> bytes:
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def _reply(msg: Message, out: object, me: str, run: str) -> Message:
    return Message(pack(out, me, run), reply_to=msg)


def _keyring(st: dict) -> tuple[KeyRing, PaillierPublicKey | None]:
    ring = KeyRing()
    pk = None
    if st.get("pk"):
        pk = PaillierPublicKey.from_bytes(st["pk"], allow_insecure=bool(st.get("insecure")))
        ring.add(pk)
    return ring, pk


@app.query("setup")
def setup(msg: Message, context: Context) -> Message:
    """``logreg.setup``: check rows, remember the run; reply with this party's identity key."""
    me, pid = _me(context)
    run = str(context.run_id)
    insecure = bool(context.run_config.get("key-bits", 2048) < 2048)
    s = unpack(msg.content, lr.Setup, sender_role=lr.ACTIVE, receiver_role=lr.PASSIVE, run_id=run,
               allow_insecure=insecure)
    X, Xt = load_party(pid, int(context.run_config.get("seed", 0)))
    if s.n_train != len(X) or s.n_test != len(Xt):
        raise InputDataError(f"{me} has {len(X)}/{len(Xt)} rows, the active party {s.n_train}/{s.n_test}")
    if me not in s.parties:
        raise ProtocolError(f"{me} is not among the configured parties")
    identity = Ed25519PrivateKey.generate()
    put_weights(context, get_weights(context, X.shape[1]) * 0.0)
    put_state(context, {"secure": s.secure, "lr": s.learning_rate, "peers": [p for p in s.parties if p != me],
                        "pk": s.public_key.to_bytes() if s.public_key else b"",
                        "insecure": insecure, "identity": _raw(identity)})
    out = pack(lr.Ack(-1), me, run)
    # Flower-only: the identity *public* key rides next to the declared ack; the ServerApp
    # relays it to the peers (it is trusted not to substitute keys: see the README).
    out["identity"] = ConfigRecord({"key": identity.public_key().public_bytes_raw()})
    return Message(out, reply_to=msg)


@app.query("keyshare")
def keyshare(msg: Message, context: Context) -> Message:
    """Receive the peers' identity keys (relayed by the ServerApp); send signed X25519 shares."""
    me, _ = _me(context)
    run = str(context.run_id)
    st = get_state(context)
    ids = dict(msg.content["ids"])  # peer name -> Ed25519 public key bytes
    identity = Ed25519PrivateKey.from_private_bytes(st["identity"])
    shares = {}
    for peer in st["peers"]:
        eph, share = lr.make_key_share(identity, me, peer, run)
        st[f"eph:{peer}"] = _raw(eph)
        st[f"id:{peer}"] = ids[peer]
        shares[peer] = share
    put_state(context, st)
    out = Message(RecordDict({p: ConfigRecord({"frame": pack(s, me, run)["c"]["frame"]})
                              for p, s in shares.items()}), reply_to=msg)
    return out


@app.query("keyagree")
def keyagree(msg: Message, context: Context) -> Message:
    """Verify each peer's share against its identity key; derive and store the pair seeds."""
    me, _ = _me(context)
    run = str(context.run_id)
    st = get_state(context)
    for peer in st["peers"]:
        share = unpack(RecordDict({"c": msg.content[peer]}), lr.KeyShare, sender_role=lr.PASSIVE,
                       receiver_role=lr.PASSIVE, run_id=run)
        eph = X25519PrivateKey.from_private_bytes(st.pop(f"eph:{peer}"))
        st[f"seed:{peer}"] = lr.accept_key_share(eph, share, me, peer, run,
                                                 Ed25519PublicKey.from_public_bytes(st[f"id:{peer}"]))
    put_state(context, st)
    return _reply(msg, lr.Ack(-1), me, run)


@app.train("logits")
def logits(msg: Message, context: Context) -> Message:
    """``logreg.request`` -> ``logreg.logits`` (plain) or ``logreg.masked_logits`` (secure)."""
    me, pid = _me(context)
    run = str(context.run_id)
    st = get_state(context)
    req = unpack(msg.content, lr.Request, sender_role=lr.ACTIVE, receiver_role=lr.PASSIVE, run_id=run)
    X, Xt = load_party(pid, int(context.run_config.get("seed", 0)))
    data = Xt if req.action == "predict-test" else X
    z = lr.partial_logits(data, get_weights(context, X.shape[1]))
    if st["secure"]:
        seeds = {p: st[f"seed:{p}"] for p in st["peers"]}
        label = f"step:{req.step}" if req.action == "step" else f"{req.action}:{req.step}"
        return _reply(msg, lr.MaskedLogits(req.step, lr.mask_logits(z, me, seeds, label)), me, run)
    return _reply(msg, lr.Logits(req.step, z), me, run)


@app.train("residual")
def residual(msg: Message, context: Context) -> Message:
    """Plain: ``logreg.residual`` -> update, ``logreg.ack``. Secure: ``logreg.encrypted_residual``
    -> ``logreg.masked_gradient`` (the mask R_k is kept in the node state)."""
    me, pid = _me(context)
    run = str(context.run_id)
    st = get_state(context)
    X, _ = load_party(pid, int(context.run_config.get("seed", 0)))
    if st["secure"]:
        ring, _pk = _keyring(st)
        enc = unpack(msg.content, lr.EncryptedResidual, sender_role=lr.ACTIVE,
                     receiver_role=lr.PASSIVE, run_id=run, keyring=ring,
                     allow_insecure=bool(st.get("insecure")))
        masked, masks = lr.masked_encrypted_gradient(enc.values, X)
        st.update({"mask": encode_value(IntVector(masks)), "frac": masked.frac_bits})
        put_state(context, st)
        return _reply(msg, lr.MaskedGradient(enc.step, masked), me, run)
    r = unpack(msg.content, lr.Residual, sender_role=lr.ACTIVE, receiver_role=lr.PASSIVE, run_id=run)
    if r.values.shape != (len(X),):
        raise ProtocolError(f"{me}: residual of shape {r.values.shape}")
    w = lr.sgd_update(get_weights(context, X.shape[1]), lr.local_gradient(X, r.values), st["lr"])
    put_weights(context, w)
    return _reply(msg, lr.Ack(r.step), me, run)


@app.train("gradient")
def gradient(msg: Message, context: Context) -> Message:
    """Secure: ``logreg.gradient_reply`` -> remove R_k, update, ``logreg.ack``."""
    me, pid = _me(context)
    run = str(context.run_id)
    st = get_state(context)
    _, pk = _keyring(st)
    assert pk is not None
    rep = unpack(msg.content, lr.GradientReply, sender_role=lr.ACTIVE, receiver_role=lr.PASSIVE,
                 run_id=run)
    X, _ = load_party(pid, int(context.run_config.get("seed", 0)))
    n = int(pk.n)
    masks = decode_value(st["mask"], IntVector)
    if len(rep.values) != X.shape[1] or len(masks) != X.shape[1]:
        raise ProtocolError(f"{me}: gradient reply of length {len(rep.values)}, expected {X.shape[1]}")
    g = lr.unmask_gradient(rep.values, masks, n, st["frac"])
    put_weights(context, lr.sgd_update(get_weights(context, X.shape[1]), g, st["lr"]))
    return _reply(msg, lr.Ack(rep.step), me, run)
