"""The one protocol shape: what every protocol module offers the runtimes and entry points.

Each protocol of :mod:`vflcrypto.protocols` exports one :class:`ProtocolSpec` named
``SPEC``. Its ``name`` is the module's name, the prefix of its message kinds, the name of
its audit and of its command-line commands. The command line (``vflcrypto
train|party|audit|demo|align``), the Flower app and the generation of SECURITY.md list
protocols only through the registry (:func:`vflcrypto.protocols.registry`), so adding a
protocol means adding its module.

A spec names the protocol's roles (:class:`~vflcrypto.runtime.steps.Role` classes: named steps
that every runtime drives), its configuration dataclass (the single source of its
training flags and their defaults, see :func:`option`), ``run_local`` (every party in
this process), its audit, its demo step, its commands and its network task, and how a
Flower run builds each party's role (:class:`FlowerSpec`).

Low layer: nothing here names a protocol.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError, InputDataError

if TYPE_CHECKING:
    import numpy as np

    from .audit.checks import Check
    from .audit.defences import Frontier
    from .audit.ledger import AuditOutcome, EmpiricalFinding
    from .runtime.record import RecordedView
    from .runtime.steps import Role

__all__ = [
    "SCHEME_HELP",
    "Command",
    "DemoContext",
    "FlowerSpec",
    "PartyOutcome",
    "PartyTask",
    "ProtocolSpec",
    "TaskContext",
    "add_config_arguments",
    "check_config_args",
    "config_from_args",
    "number",
    "option",
]


# --------------------------------------------------------------------------- configuration


def option(default: Any, help: str, *, flag: str | None = None, aliases: Sequence[str] = (),
           choices: Sequence[Any] | None = None, negative: str | None = None, cli: bool = True) -> Any:
    """A configuration field: its default and help text are the CLI flag's (one source).

    ``flag`` overrides the flag name (default ``--field-name``), ``aliases`` adds others;
    a boolean gets ``--flag`` / ``negative`` (default ``--no-flag``); ``cli=False`` keeps a
    field out of the command line (set by code only).
    """
    meta = {"help": help, "flag": flag, "aliases": tuple(aliases), "negative": negative,
            "choices": tuple(choices) if choices else None, "cli": cli}
    return field(default=default, metadata=meta)


def number(kind: type = float, *, at_least: float | None = None, above: float | None = None,
           at_most: float | None = None, below: float | None = None) -> Callable[[str], Any]:
    """An argparse type: a finite ``int`` or ``float`` within the given bounds.

    A value out of range is refused while the command line is parsed, in one line naming
    the flag (``argument --chunk-size: must be at least 1, got 0``), before any file is
    read or any peer is contacted.
    """
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{'a whole number' if kind is int else 'a number'} is needed, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        for bound, fails, words in ((at_least, value < (at_least or 0), "at least"),
                                    (above, value <= (above or 0), "above"),
                                    (at_most, value > (at_most or 0), "at most"),
                                    (below, value >= (below or 0), "below")):
            if bound is not None and fails:
                raise argparse.ArgumentTypeError(f"must be {words} {bound:g}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse's fallback message names the type
    return parse


#: where :func:`add_config_arguments` lists the configuration classes of a parser's flags
CONFIG_CLASSES = "_vflcrypto_config_classes"


def check_config_args(args: argparse.Namespace) -> None:
    """Build and validate every configuration the parsed flags describe, right after parsing.

    Each class registered by :func:`add_config_arguments` is built from the flags and its
    ``validate()`` (if any) called, so a value the protocol refuses is refused before any
    file is read or any peer is contacted (a network party then never leaves its peers
    waiting to blame each other); :class:`InputDataError` or :class:`ConfigurationError`.
    """
    for cls in getattr(args, CONFIG_CLASSES, ()):
        cfg = config_from_args(cls, args)
        validate = getattr(cfg, "validate", None)
        if callable(validate) and all(p.default is not p.empty
                                      for p in inspect.signature(validate).parameters.values()):
            validate()


def _flag(f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _base_type(tp: Any) -> tuple[Any, bool]:
    """(the non-None type, whether None is allowed) of an annotation."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if len(args) == 1 else str), True
    return tp, False


def add_config_arguments(parser: argparse.ArgumentParser, cls: type, *, skip: Sequence[str] = ()) -> None:
    """One flag per CLI field of the configuration dataclass ``cls`` (defaults from ``cls``).

    Numbers must be finite (``--lr nan`` is refused while parsing); ``cls`` is registered
    on the parser, so that :func:`check_config_args` validates it right after parsing.
    """
    parser.set_defaults(**{CONFIG_CLASSES: (*(parser.get_default(CONFIG_CLASSES) or ()), cls)})
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.metadata.get("cli", False) or f.name in skip:
            continue
        tp, optional = _base_type(hints[f.name])
        default = f.default
        help_text = f.metadata["help"] + (f" (default {default})" if default is not None else "")
        flags = [_flag(f), *f.metadata.get("aliases", ())]
        if tp is bool:
            negative = f.metadata.get("negative") or "--no-" + _flag(f).removeprefix("--")
            group = parser.add_mutually_exclusive_group()
            group.add_argument(*flags, dest=f.name, action="store_true", default=default,
                               help=f.metadata["help"] + (" (default)" if default else ""))
            group.add_argument(negative, dest=f.name, action="store_false",
                               help="the opposite" + (" (default)" if not default else ""))
            continue
        kw: dict[str, Any] = {"dest": f.name, "help": help_text, "default": default}
        if f.metadata.get("choices"):
            kw["choices"] = f.metadata["choices"]
        seed = tp is int and (f.name == "seed" or f.name.endswith("_seed"))  # public seeds: numpy takes >= 0
        parser.add_argument(*flags, type=number(tp, at_least=0 if seed else None) if tp in (int, float) else str,
                            **kw)
        del optional


def config_from_args(cls: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """The configuration the parsed flags describe (fields without a flag keep their default)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
              if f.metadata.get("cli", False) and hasattr(args, f.name)}
    values.update(overrides)
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InputDataError | ConfigurationError):
            raise
        raise ConfigurationError(str(exc)) from None


# --------------------------------------------------------------------------- entry points


@dataclass
class DemoContext:
    """What every demo step receives: a scratch directory, the key size, and shared state.

    ``workdir`` is where the steps write (and read each other's outputs); ``shown``, if set, is
    where those outputs will be once the whole demo succeeded (``vflcrypto demo --out-dir``
    publishes them there together): messages name paths through :meth:`where`.
    """

    workdir: Path
    key_bits: int
    quick: bool
    state: dict[str, Any] = field(default_factory=dict)
    verbose: bool = True
    allow_insecure: bool = False  # keys below 2048 bits only when the caller opts in
    shown: Path | None = None

    def say(self, text: str) -> None:
        if self.verbose:
            print(text, flush=True)

    def where(self, path: str | Path) -> Path:
        """``path`` (under ``workdir``) as the user will find it after the demo."""
        p = Path(path)
        if self.shown is None:
            return p
        try:
            return self.shown / p.relative_to(self.workdir)
        except ValueError:
            return p


@dataclass(frozen=True)
class Command:
    """A command-line command of a protocol: ``vflcrypto GROUP NAME`` (or ``vflcrypto NAME``)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    group: str | None = "train"
    description: str | None = None


@dataclass
class PartyOutcome:
    """What a network task returns: a JSON-able summary and a function writing the output file(s)."""

    summary: dict[str, Any]
    write: Callable[[Path, dict[str, Any]], None]
    #: the IDs of the rows this party's messages are indexed by, in order (the aligned training rows), kept with
    #: its messages (``--keep-messages``) so that an attack on its view can be scored against labels by ID
    rows: tuple[str, ...] = ()


@dataclass
class TaskContext:
    """Who this party is and what it is connected to (handed to every network task)."""

    me: str
    role: str
    roles: dict[str, str]
    channels: Mapping[str, Any]
    config: Any  # vflcrypto.runtime.partyconfig.PartyConfig
    identity_key_path: Path | None = None

    def names(self, role: str) -> list[str]:
        return sorted(n for n, r in self.roles.items() if r == role)

    def one(self, role: str) -> str:
        names = self.names(role)
        if len(names) != 1:
            raise InputDataError(f"this task needs exactly one {role!r} party, the configuration "
                                 f"has {names}")
        return names[0]

    def only(self, names: Sequence[str]) -> dict[str, Any]:
        """The channels to ``names`` (a clear error if the configuration lacks a link)."""
        missing = [n for n in names if n not in self.channels]
        if missing:
            from .errors import ProtocolError

            raise ProtocolError(f"{self.me}: the configuration has no link to {missing}")
        return {n: self.channels[n] for n in names}

    def identity(self) -> Any:
        """This party's Ed25519 identity key, checked against its pin in the configuration."""
        from .runtime.certs import load_identity_key

        spec = self.config.party(self.me)
        path = self.identity_key_path or spec.identity_key_path
        if spec.identity is None or path is None:
            raise InputDataError(
                f"{self.me}: this task needs an Ed25519 identity key: set identity = \"ed25519:...\" "
                "and identity_key = <path> for it in the configuration (vflcrypto certs writes both)")
        key = load_identity_key(path)
        if key.public_key().public_bytes_raw() != spec.identity:
            raise InputDataError(f"{self.me}: identity key {path} does not match the identity "
                                 "pinned in the configuration")
        return key

    def peer_identity(self, name: str) -> bytes:
        """The raw Ed25519 public key pinned for party ``name``."""
        pin = self.config.party(name).identity
        if pin is None:
            raise InputDataError(f"this task needs an identity = \"ed25519:...\" pin for {name} "
                                 "in the configuration")
        return bytes(pin)


@dataclass(frozen=True)
class PartyTask:
    """``vflcrypto party ... TASK``: one party of the protocol over the network.

    ``needs_identity(args, ctx)`` says whether this party signs with its Ed25519 identity
    key (so a missing key fails before any peer waits on it). ``check(args, ctx)`` refuses this
    party's own inputs (e.g. a model file that is not its own) before it connects: ``ctx`` has
    no channels yet.
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, TaskContext], PartyOutcome]
    group: str | None = "train"
    needs_identity: Callable[[argparse.Namespace, TaskContext], bool] = lambda args, ctx: False
    check: Callable[[argparse.Namespace, TaskContext], None] = lambda args, ctx: None


@dataclass(frozen=True)
class FlowerSpec:
    """How the Flower app runs the protocol: the ServerApp plays ``server_party``.

    ``parties(run_config)`` maps every party name to its role name; ``make_role(party,
    run_config)`` builds that party's :class:`~vflcrypto.runtime.steps.Role` with its inputs (the
    bundled example data of the run config); ``summary(results, run_config)`` turns the
    parties' results into the lines the ServerApp prints and the dict it stores.
    ``relayed`` lists the message kinds that travel between two ClientApps through the
    ServerApp, each with why the ServerApp's party may see it (a kind not listed is
    refused by the app). ``clients_wait_first``: every client's ``start()`` sends nothing
    and waits for the server's first frame, so the ServerApp starts each client with that
    frame instead of a separate start round trip.
    """

    server_party: str
    parties: Callable[[Mapping[str, Any]], dict[str, str]]
    make_role: Callable[[str, Mapping[str, Any]], Role[Any]]
    summary: Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]
    relayed: Mapping[str, str] = field(default_factory=dict)
    clients_wait_first: bool = False


#: what ``--scheme`` offers, per scheme name (a protocol's help lists only its own :attr:`ProtocolSpec.schemes`)
SCHEME_HELP = {
    "paillier": "Paillier",
    "ou": "Okamoto-Uchiyama, conservative parameters (3072-bit n)",
    "ou-heu": "Okamoto-Uchiyama at HEU's parameters (2048-bit n, 112-bit randomness)",
    "ou-2048": "Okamoto-Uchiyama, 2048-bit n with 224-bit randomness (112-bit strength)",
    "ckks": "CKKS (TenSEAL), the fast approximate mode",
}


@dataclass(frozen=True)
class ProtocolSpec:
    """Everything the runtimes and entry points need to know about one protocol."""

    name: str
    title: str
    roles: Mapping[str, type[Role[Any]]]
    run_local: Callable[..., Any]
    audit: Callable[..., AuditOutcome]
    config: type | None = None
    demo: Callable[[DemoContext], dict[str, Any]] | None = None
    demo_order: int = 100
    commands: tuple[Command, ...] = ()
    party_tasks: tuple[PartyTask, ...] = ()
    flower: FlowerSpec | None = None
    schemes: tuple[str, ...] = ("paillier",)  # the additively homomorphic schemes it runs under, its default first
    oracle: str = ""  # why OU is refused: whose ciphertexts its key holder decrypts for whom
    #: the checks its audit must run, each on a declared protection (:mod:`vflcrypto.audit.checks`)
    checks: tuple[Check, ...] = ()
    #: the published attacks on one party's recorded view of a network run (``vflcrypto party ... --keep-messages``
    #: read back by ``vflcrypto audit --transcript``): ``(view, the true labels of its rows, or None) -> findings``;
    #: the labels only score the attacks
    view_attacks: Callable[[RecordedView, np.ndarray | None], list[EmpiricalFinding]] | None = None
    #: the defences it offers (names for ``vflcrypto audit NAME --defence``) and ``frontier(defence, budgets,
    #: repeats, **setting)``: its audit's attacks and utility re-measured at each privacy budget beside the
    #: undefended run (``setting``: the protocol's own keywords, e.g. split's ``binary=True``)
    defences: tuple[str, ...] = ()
    frontier: Callable[..., Frontier] | None = None

    def run_audit(self, key_bits: int = 2048, *, allow_insecure: bool = False, **kwargs: Any) -> AuditOutcome:
        """Run :attr:`audit` and hold its findings to :attr:`checks`: a declared check that did not run, or
        ran without the power to detect its failure, is a finding *not measured* (a failure of the audit)."""
        from .audit.checks import expect

        return expect(self.audit(key_bits, allow_insecure=allow_insecure, **kwargs), self.checks)

    def check_scheme(self, scheme: str) -> None:
        """Refuse a scheme this protocol does not run under, with the reason (OU: the decryption oracle)."""
        if scheme in self.schemes:
            return
        if scheme.startswith("ou") and self.oracle:
            from .he.ou import refuse_decryption_oracle

            refuse_decryption_oracle(scheme, self.name, self.oracle)
        raise ConfigurationError(f"{self.name} does not run under {scheme!r}: use one of {', '.join(self.schemes)}")

    def scheme_argument(self, parser: argparse.ArgumentParser) -> None:
        """Make ``parser``'s ``--scheme`` (if it has one) offer only :attr:`schemes`, in its choices and its help.

        Asked for a refused scheme, the parser names the reason (OU: the decryption oracle) in its
        one-line usage error, so ``--help`` never lists a scheme the command would refuse.
        """
        action = next((a for a in parser._actions if a.dest == "scheme" and a.option_strings), None)
        if action is None:
            return
        spec = self

        def scheme(value: str) -> str:
            if value not in spec.schemes:
                try:
                    spec.check_scheme(value)
                except ConfigurationError as exc:
                    raise argparse.ArgumentTypeError(str(exc)) from None
            return value

        action.type, action.choices = scheme, self.schemes
        names = "; ".join(f"{s}: {SCHEME_HELP.get(s, s)}" for s in self.schemes)
        refused = f"; OU is refused: {self.oracle}" if self.oracle else ""
        action.help = f"homomorphic scheme ({names}){refused} (default {action.default})"

    def kinds(self) -> list[str]:
        """The message kinds this protocol declares (all start with ``name + "."``)."""
        from .runtime.declarations import declarations

        return [d.kind for d in declarations(self.name)]
