"""``vflcrypto audit NAME``: what each role received in a run, and what really leaks.

Every protocol of the registry (:func:`vflcrypto.protocols.registry`) contributes its
audit (``SPEC.run_audit(key_bits, allow_insecure=...) -> AuditOutcome``): it runs the protocol
on example data, joins the transcript with the declarations and attacks what each role
received, held to the protocol's declared checks (:mod:`vflcrypto.audit.checks`). The
command exits 1, naming each one, when a check flags a declared protection as failed or
could not be measured (no messages to attack, or too little power to detect its failure).
``net`` audits the network hello of :mod:`vflcrypto.runtime.network`.
``--defence D --budgets 1,2,4,8`` draws a protocol's privacy–utility frontier instead: its
audit's attacks, the test accuracy and the accounted (ε, δ) at each budget, beside the
undefended run (:class:`vflcrypto.audit.defences.Frontier`); ``--html FILE`` and ``--plot DIR``
draw it (:mod:`vflcrypto.audit.frontier_report`); split's ``--binary`` runs it on the binary
digits (Marvell, ``--defence marvell``, always does: its budgets are power bounds, not ε).
``--transcript FILE`` audits a recorded run instead (a ``vflcrypto party`` run record or
a Flower run's transcript: declared leakage); when the party kept its messages
(``--keep-messages``), its protocol's published attacks run on that party's view alone,
scored against ``--truth`` labels if given (:mod:`vflcrypto.runtime.record`). ``--security-md``
rewrites the generated leakage tables in SECURITY.md from the declarations.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path
from typing import Any

from ..errors import InputDataError
from ..spec import number

__all__ = ["checks_block", "flower_relay_table", "load_all_protocols", "register", "security_md_blocks"]

NET = "net"  # the runtime's own hello (not a protocol)


def load_all_protocols() -> list[str]:
    """Import every protocol (and the network runtime), so that all declarations are registered."""
    from ..protocols import registry
    from ..runtime import network  # noqa: F401  (declares net.*)

    return [*registry(), NET]


FLOWER_BLOCK = "flower-relay"


def flower_relay_table() -> str:
    """SECURITY.md's table of what the Flower App relays through the ServerApp, from the specs."""
    from ..protocols import registry

    rows = ["| protocol | ServerApp party | message relayed between two SuperNodes "
            "| why the ServerApp's party may see it |", "|---|---|---|---|"]
    for spec in registry().values():
        if spec.flower is None:
            continue
        if not spec.flower.relayed:
            rows.append(f"| `{spec.name}` | {spec.flower.server_party} | (none) | every message has the ServerApp's "
                        "party as sender or receiver |")
        for kind, why in spec.flower.relayed.items():
            rows.append(f"| `{spec.name}` | {spec.flower.server_party} | `{kind}` | {why} |")
    return "\n".join(rows)


def checks_block(protocol: str) -> str:
    """The name of SECURITY.md's generated block of ``protocol``'s declared checks."""
    return f"checks-{protocol}"


def security_md_blocks() -> dict[str, str]:
    """The generated blocks of SECURITY.md that are not a protocol's declarations: what the Flower App
    relays, and per protocol the checks its audit must run (per protection: the check and the failure
    it must detect)."""
    from ..audit.checks import checks_table
    from ..protocols import registry

    blocks = {FLOWER_BLOCK: flower_relay_table()}
    blocks.update({checks_block(name): checks_table(spec.checks) for name, spec in registry().items()})
    return blocks


def _names() -> list[str]:
    from ..protocols import registry

    return [*registry(), NET]


def _audit_recorded(path: Path, args: argparse.Namespace) -> int:
    from ..audit.ledger import AuditOutcome, audit
    from ..runtime.transcript import Transcript

    load_all_protocols()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputDataError(f"{path}: not a readable transcript ({exc})") from None
    entries = data["transcript"] if isinstance(data, dict) else data
    transcript = Transcript.from_dict(entries)
    report = audit(transcript)
    label = str(data.get("task", path.name)) if isinstance(data, dict) else path.name
    kept = data.get("messages") if isinstance(data, dict) else None
    if kept is None:
        if args.truth:
            raise InputDataError(f"{path}: the run kept no messages to attack (run the party with --keep-messages)")
        _outputs(AuditOutcome(label, report, transcripts=((f"recorded run {path.name}", transcript),)), args)
        print(report.to_json() if args.json else report.to_text())
        return 0
    findings = _attack_view(path.parent / str(kept), label, args)
    outcome = AuditOutcome(label, report, tuple(findings), transcripts=((f"recorded run {path.name}", transcript),))
    _outputs(outcome, args)
    print(json.dumps(outcome.to_dict(), indent=2) if args.json else outcome.to_text())
    return 0


def _attack_view(path: Path, task: str, args: argparse.Namespace) -> list[Any]:
    """The published attacks of ``task``'s protocol on the one party's view kept in ``path``, scored against
    ``--truth`` (labels by row ID) when given."""
    import numpy as np

    from ..data.tables import read_party_csv
    from ..runtime.record import read_messages
    from .party import _task_specs

    view = read_messages(path)
    found = _task_specs().get(view.task)
    if found is None or found[1].view_attacks is None:
        raise InputDataError(f"{path}: no attacks on a recorded view of {task!r} (they exist for: "
                             f"{', '.join(sorted(t for t, (_, s) in _task_specs().items() if s.view_attacks))})")
    y = None
    if args.truth:
        if not args.truth_id_column or not args.truth_label:
            raise InputDataError("--truth needs --truth-id-column and --truth-label")
        table = read_party_csv(args.truth, args.truth_id_column, label=args.truth_label, features=[])
        assert table.label is not None
        by_id = dict(zip(table.ids, table.label, strict=True))
        missing = [r for r in view.rows if r not in by_id]
        if missing:
            raise InputDataError(f"{args.truth}: no {args.truth_label!r} for {len(missing)} of the {len(view.rows)} "
                                 f"row IDs of the recorded run (first: {missing[0]!r})")
        y = np.asarray([by_id[r] for r in view.rows])
    for kind, count in sorted(view.undecoded.items()):
        print(f"{path.name}: {count} {kind} message(s) not decoded (ciphertexts under a key the file does not carry)",
              file=sys.stderr)
    return found[1].view_attacks(view, y)


def _outputs(outcome: object, args: argparse.Namespace) -> None:
    """``--html FILE`` and ``--plot DIR``: the report of the audit and its PNG figures, published together
    (:func:`~vflcrypto.data.files.atomic_set`: all of them, or none after a failed write)."""
    from ..audit.ledger import AuditOutcome
    from ..audit.report import render_html, write_plots
    from ..data.files import atomic_set, atomic_write_text

    assert isinstance(outcome, AuditOutcome)
    written: list[str | Path] = []
    with atomic_set():
        if args.html:
            atomic_write_text(args.html, render_html(outcome))
            written.append(args.html)
        if args.plot:
            written += write_plots(outcome, args.plot)
    for p in written:
        print(f"wrote {p}", file=sys.stderr)


def _budgets(text: str) -> list[float]:
    try:
        budgets = [float(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise InputDataError(f"--budgets takes comma-separated epsilons (dcor: weights), got {text!r}") from None
    if not budgets or any(not b > 0 or b == float("inf") for b in budgets):
        raise InputDataError(f"--budgets takes finite epsilons (dcor: weights) > 0, got {text!r}")
    return budgets


def _frontier(args: argparse.Namespace) -> int:
    from ..protocols import get

    spec = get(args.name)
    if spec.frontier is None or args.defence not in spec.defences:
        offered = ", ".join(spec.defences) or "none"
        raise InputDataError(f"{args.name} has no defence {args.defence!r} (its defences: {offered})")
    if args.repeats < 1:
        raise InputDataError(f"--repeats takes a count >= 1, got {args.repeats}")
    setting = {"binary": True} if args.binary else {}
    params = inspect.signature(spec.frontier).parameters
    if setting and "binary" not in params and not any(q.kind is q.VAR_KEYWORD for q in params.values()):
        raise InputDataError(f"--binary: {args.name}'s frontier has one setting only (split's runs on binary digits)")
    from ..data.files import atomic_set, atomic_write_text, check_output_dir, check_outputs

    if args.html:
        check_outputs({"HTML report": args.html})  # before the (long) runs
    if args.plot:
        check_output_dir(args.plot, "--plot directory")
    frontier = spec.frontier(args.defence, _budgets(args.budgets), args.repeats, **setting)
    written: list[str | Path] = []
    with atomic_set():  # the page and the figure published together, or neither
        if args.html:
            from ..audit.frontier_report import render_frontier_html

            atomic_write_text(args.html, render_frontier_html([frontier]))
            written.append(args.html)
        if args.plot:
            from ..audit.frontier_report import write_frontier_png

            written.append(write_frontier_png([frontier], Path(args.plot) / f"{args.name}-frontier-{args.defence}.png"))
    for p in written:
        print(f"wrote {p}", file=sys.stderr)
    print(json.dumps(frontier.to_dict(), indent=2) if args.json else frontier.to_text())
    return 0


def run(args: argparse.Namespace) -> int:
    if args.defence or args.budgets or args.binary:
        if not args.name or args.name == NET or not args.defence:
            raise InputDataError("--defence D [--budgets 1,2,4,8] needs a protocol with defences (e.g. split)")
        if args.transcript or args.security_md:
            raise InputDataError("--defence draws a frontier: no --transcript or --security-md")
        args.budgets = args.budgets or "1,2,4,8"
        return _frontier(args)
    if args.security_md:
        from ..audit.ledger import render_security_md

        load_all_protocols()
        path = Path(args.security_md)
        if not path.is_file():
            raise InputDataError(f"{path}: no such file (--security-md takes the repository's SECURITY.md, "
                                 "with its <!-- BEGIN leakage:... --> markers)")
        text = path.read_text(encoding="utf-8")
        new = render_security_md(text, security_md_blocks())
        if new != text:
            from ..data.files import atomic_write_text

            atomic_write_text(path, new)
            print(f"updated {path}")
        else:
            print(f"{path} is up to date")
        return 0
    from ..data.files import check_output_dir, check_outputs

    if args.html:
        check_outputs({"HTML report": args.html})  # before the (long) audit runs
    if args.plot:
        check_output_dir(args.plot, "--plot directory")
    if args.transcript:
        return _audit_recorded(Path(args.transcript), args)
    if not args.name:
        print("vflcrypto audit: name a protocol: " + ", ".join(_names()), file=sys.stderr)
        return 2
    if args.name == NET:
        from ..audit.net import audit_run

        outcome = audit_run(args.key_bits)
    else:
        from ..protocols import get

        outcome = get(args.name).run_audit(args.key_bits, allow_insecure=args.allow_insecure)
    _outputs(outcome, args)
    print(json.dumps(outcome.to_dict(), indent=2) if args.json else outcome.to_text())
    failures = outcome.failures()
    for line in failures:
        print(f"vflcrypto audit {args.name}: {line}", file=sys.stderr)
    return 1 if failures else 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("audit", help="per-role leakage of a protocol run (table or JSON)")
    p.add_argument("name", nargs="?", choices=_names(), help="protocol to run and audit")
    p.add_argument("--key-bits", type=number(int, at_least=512), default=2048)
    p.add_argument("--allow-insecure", action="store_true", help="accept keys below 2048 bits (tests only)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--transcript", metavar="FILE",
                   help="audit a recorded run (party run record or Flower transcript JSON) instead; a party run "
                        "with --keep-messages is also attacked from that party's view alone")
    p.add_argument("--truth", metavar="FILE", help="--transcript: a CSV of the true labels by row ID, which only "
                                                  "scores the attacks on the recorded view")
    p.add_argument("--truth-id-column", metavar="COL", help="--truth: its ID column")
    p.add_argument("--truth-label", metavar="COL", help="--truth: its label column")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report of the audited runs "
                                                 "(sequence diagrams, ledgers, checks, curves)")
    p.add_argument("--plot", metavar="DIR", help="also write the report's figures as PNG files in DIR")
    p.add_argument("--security-md", metavar="FILE",
                   help="regenerate the leakage tables in FILE (SECURITY.md) from the declarations")
    p.add_argument("--defence", metavar="D", help="draw the privacy-utility frontier of the protocol's defence D "
                                                  "(split: label-rr, label-lpmst, grad-gauss, marvell, "
                                                  "embed-gauss, dcor; oneshot, fewshot: label-rr, grad-gauss, "
                                                  "embed-gauss, dcor; logreg: label-rr; hfl: dp-fedavg; "
                                                  "secureboost: hist-gauss, active-only) instead of the audit")
    p.add_argument("--budgets", metavar="EPS,...", help="--defence: the epsilons to run at (default 1,2,4,8; "
                                                        "marvell: its power bounds s; dcor: NoPeek's weights; "
                                                        "secureboost active-only: numbers of rounds)")
    p.add_argument("--binary", action="store_true", help="--defence: split's frontier on the binary digits (digit 8 "
                                                         "against the rest; marvell always runs there)")
    p.add_argument("--repeats", type=int, default=1, help="--defence: runs per budget, averaged (default 1)")
    p.set_defaults(handler=run)
