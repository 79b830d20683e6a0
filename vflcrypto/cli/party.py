"""``vflcrypto party``: run ONE party of a protocol; the same command on every machine runs it.

::

    vflcrypto party --config parties.toml --as passive-0 align --data bank.csv --id-column id --out aligned.csv
    vflcrypto party --config parties.toml --as active train logreg --data labels.csv --id-column id \
        --label y --out model.npz
    vflcrypto party --config parties.toml --as coordinator train linreg --out coordinator.npz

Tasks: ``align`` (ECDH or, with pinned identity keys, keyed-hash PSI; two parties or the
all-party intersection of 3+), ``train logreg`` (plain or ``--secure``), ``train linreg``
(active, passive parties and a coordinator), ``train secureboost`` and the other protocols'
``train NAME``, and ``predict linreg|logreg|poisson|sshelr|secureboost|split|oneshot|fewshot|protovfl``
(each party applies its own saved model to new rows; the label holder writes the predictions), and
``serve secureboost`` (every party stays up with its saved model; the label holder answers batches of
IDs it reads on stdin, one JSON line each, until ``!stop``: :mod:`vflcrypto.protocols.secureboost.serve`).
Training tasks read
only this party's CSV and align rows by PSI first (active and passive parties; the
coordinator holds no data) unless ``--aligned``; their flags mirror the in-process
``vflcrypto train ...`` commands. The label holder also writes ``<out>.metrics.json``.

The party connects to its peers over mutually authenticated gRPC links
(:mod:`vflcrypto.runtime.network`), agrees on a run id with them, runs its role function
of the protocol over the resulting Channels, and writes its output atomically together
with a sidecar ``<out>.run.json`` naming the run (run id, party, role, task, configuration
digest) and what the party sent and received (its transcript). A failed run writes
neither, and a stale sidecar of an earlier run is removed first, so no output of this
command ever looks complete without being so.

Tasks are the ``party_tasks`` of the protocols in the registry
(:func:`vflcrypto.protocols.registry`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..data.files import atomic_set, atomic_write_text, check_outputs
from ..errors import OutputError, ProtocolError
from ..protocols._train import metrics_path
from ..spec import PartyTask, ProtocolSpec, TaskContext

__all__ = ["metrics_path", "register", "run_party"]


def _tasks() -> dict[str, PartyTask]:
    """Task name ("align", "train-logreg", ...) -> the protocol's network task, from the registry."""
    return {name: task for name, (task, _) in _task_specs().items()}


def _task_specs() -> dict[str, tuple[PartyTask, ProtocolSpec]]:
    from ..protocols import registry

    out = {}
    for spec in registry().values():
        for task in spec.party_tasks:
            out[task.name if task.group is None else f"{task.group}-{task.name}"] = (task, spec)
    return out


# --------------------------------------------------------------------------- runner


def sidecar_path(out: Path) -> Path:
    """Where the run description of output ``out`` goes."""
    return out.with_name(out.name + ".run.json")


#: the settings every party that holds data must share, by flag: they decide which rows each party
#: trains on, so a difference is refused in the hello (before any work) instead of surfacing as
#: "not aligned" in the middle of training; a party without data (a coordinator) sends none
SHARED = {"test_fraction": "--test-fraction", "split_seed": "--split-seed", "aligned": "--aligned"}


def shared_settings(args: argparse.Namespace) -> dict[str, str]:
    """This party's :data:`SHARED` settings as the hello carries them (none without ``--data``)."""
    if not getattr(args, "data", None):
        return {}
    def show(v: Any) -> str:
        return ("on" if v else "off") if isinstance(v, bool) else str(v)

    return {flag: show(getattr(args, dest)) for dest, flag in SHARED.items() if hasattr(args, dest)}


def _needs_identity(args: argparse.Namespace, task: str, ctx: TaskContext) -> bool:
    """Whether this party signs with its Ed25519 identity key in ``task``."""
    spec = _tasks().get(task)
    return spec is not None and spec.needs_identity(args, ctx)


def quiet_grpc(verbose: bool) -> None:
    """gRPC core's own log lines (``Got goaway``, ``Handshake failed``, ``add_port``) on stderr only
    with ``--verbose``: without it they surround the one line that says what went wrong.

    gRPC reads ``GRPC_VERBOSITY`` once, when it is first imported, so this runs before any
    import of it; a value the user set in the environment is kept.
    """
    if "grpc" in sys.modules:
        return
    os.environ.setdefault("GRPC_VERBOSITY", "INFO" if verbose else "NONE")


def run_party(args: argparse.Namespace) -> int:
    """Connect, agree on the run, run the role, write output + sidecar; abort cleanly on error."""
    quiet_grpc(bool(getattr(args, "verbose", False)))
    from .. import parallel
    from ..runtime.channel import AuditTap, Transcript
    from ..runtime.identity import PartyIdentity
    from ..runtime.network import connect_party
    from ..runtime.partyconfig import load_party_config
    from ..runtime.record import messages_path, write_messages

    task = f"{args.task}-{args.model}" if args.task in ("train", "predict", "serve") else args.task
    found = _task_specs().get(task)
    if found is None:
        raise ProtocolError(f"no protocol registers the task {task!r}")
    registered, protocol = found
    if getattr(args, "scheme", None):
        protocol.check_scheme(args.scheme)  # before connecting: a refused scheme never reaches a peer
    handler = registered.run
    config = load_party_config(args.config)
    spec = config.party(args.party)
    key = Path(args.key) if args.key else spec.key_path
    identity = PartyIdentity.from_files(spec.name, spec.cert_path, key, config.ca_path)
    out = Path(args.out)
    data = getattr(args, "data", None)
    check_outputs({"output": out, "run record": sidecar_path(out), "metrics": metrics_path(out),
                   "kept messages": messages_path(out)},
                  [data] if data else [])  # before connecting: never overwrite the input
    sidecar_path(out).unlink(missing_ok=True)  # a stale sidecar must not vouch for this run
    metrics_path(out).unlink(missing_ok=True)
    messages_path(out).unlink(missing_ok=True)
    roles = {n: p.role for n, p in config.parties.items()}
    keep = bool(getattr(args, "keep_messages", False))
    transcript = Transcript(AuditTap(keep_sent=True) if keep else None)
    t0 = time.perf_counter()
    ctx = TaskContext(spec.name, spec.role, roles, {}, config,
                      Path(args.identity_key) if args.identity_key else None)
    if _needs_identity(args, task, ctx):
        ctx.identity()  # a missing or wrong identity key fails here, before any peer waits on us
    registered.check(args, ctx)  # this party's own inputs (e.g. its model file), before any peer waits on us
    parallel.start_backend()  # a Ray cluster starts (or fails) before any peer waits on us
    party = connect_party(config, identity, task, transcript=transcript,
                          allow_insecure=bool(getattr(args, "allow_insecure", False)), settings=shared_settings(args))
    ctx.channels = party.channels
    try:
        outcome = handler(args, ctx)
    except BaseException:
        party.abort()
        raise
    meta = {"run_id": party.run_id, "party": spec.name, "role": spec.role, "task": task,
            "config_digest": config.digest}
    try:
        with atomic_set():  # output, metrics, kept messages and the run record: all of them or none
            outcome.write(out, meta)
            kept: dict[str, Any] = {}
            if transcript.tap is not None:
                count = write_messages(messages_path(out), transcript.tap, party=spec.name, role=spec.role,
                                       task=task, run_id=party.run_id, rows=outcome.rows)
                kept = {"messages": messages_path(out).name, "messages_kept": count}
            record = {**meta, "status": "complete", "output": out.name, **kept,
                      "seconds": round(time.perf_counter() - t0, 3),
                      "bytes_sent": sum(e.nbytes for e in transcript.sent()),
                      "transcript": transcript.to_dict(), "summary": outcome.summary}
            atomic_write_text(sidecar_path(out), json.dumps(record, indent=1, default=str))
            party.confirm_outputs()  # staged here and at every peer, or published nowhere
    except OutputError as exc:
        if exc.path:  # this party's own write failed: its peers learn it and keep nothing either
            party.confirm_outputs(failure=exc.reason or "an output could not be written")
            party.close()
        else:
            party.abort()
        raise
    except BaseException:
        party.abort()
        raise
    party.close()
    if args.json:
        print(json.dumps(record, default=str))
    else:
        print(f"{spec.name} ({spec.role}): {task} finished, run {party.run_id}, output {out}",
              file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("party", help="run one party of a protocol over the network (mutual TLS)")
    p.add_argument("--config", required=True, help="party configuration file (TOML)")
    p.add_argument("--as", dest="party", required=True, metavar="NAME", help="which party this is")
    p.add_argument("--key", help="this party's private key (default: key = ... in the configuration)")
    p.add_argument("--identity-key", help="this party's Ed25519 identity key (default: identity_key "
                                          "= ... in the configuration); needed by --protocol hash "
                                          "and logreg --secure")
    p.add_argument("--json", action="store_true", help="print the run record as JSON on stdout")
    p.add_argument("--verbose", action="store_true",
                   help="also print gRPC's own log lines (connections, TLS handshakes, GOAWAY) on stderr")
    tasks = p.add_subparsers(dest="task", required=True, metavar="TASK")

    groups = {}
    for group, help in (("train", "train a vertical model"),
                        ("predict", "apply this party's saved model to new rows"),
                        ("serve", "keep this party's saved model up and answer prediction requests until stopped")):
        g = tasks.add_parser(group, help=help)
        groups[group] = g.add_subparsers(dest="model", required=True, metavar="MODEL")
    for task, protocol in _task_specs().values():
        parent = groups.get(task.group or "", tasks)
        tp = parent.add_parser(task.name, help=task.help)
        task.add_arguments(tp)
        tp.add_argument("--keep-messages", action="store_true",
                        help="also keep every message this party received and sent, decoded, in OUT.messages "
                             "(owner-only), so that `vflcrypto audit --transcript OUT.run.json` can attack this "
                             "party's view alone")
        if task.group not in ("predict", "serve"):  # a prediction's key is the coordinator's fresh Paillier key
            protocol.scheme_argument(tp)  # --help offers only the schemes this protocol accepts
        tp.set_defaults(handler=run_party)
