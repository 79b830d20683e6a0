"""What every protocol's ``train`` command and network task share: tables, alignment, outputs.

Every ``vflcrypto train NAME`` command starts the same way: read the label holder's file
and each feature party's file, check that no feature party holds the label, then either
check that the files are pre-aligned (``--aligned``) or align them by private set
intersection (:mod:`vflcrypto.protocols.align`, ECDH, every party learns its rows of the
common IDs in one shared order). A network party (``vflcrypto party ... train NAME``)
reads only its own file and aligns with its peers over the network first.

The options every training job has (IDs, label, split, alignment, key size, timeout) are
defined once here (:class:`TrainOptions`); each protocol's own parameters come from its
configuration dataclass (:func:`vflcrypto.spec.option`).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from vflcrypto.data.files import atomic_write_text
from vflcrypto.data.tables import PartyTable, read_party_csv, train_test_split
from vflcrypto.data.validate import refuse_constant_columns, refuse_label_column, warn_few_rows
from vflcrypto.errors import InputDataError
from vflcrypto.runtime.channel import AuditTap, Channel, Endpoint, LocalNetwork, Transcript, run_parties
from vflcrypto.spec import PartyOutcome, TaskContext, add_config_arguments, config_from_args, option

from .align.tables import align_rows, align_tables, sorted_rows

__all__ = [
    "TrainOptions",
    "add_pair_train_arguments",
    "add_train_options",
    "align_rows",
    "align_tables",
    "exact_columns",
    "json_outcome",
    "metrics_path",
    "pair_split",
    "pair_weights",
    "read_own",
    "read_pair",
    "read_tables",
    "run_star",
    "split_rows",
    "train_config",
    "training_rows",
    "write_metrics",
]


@dataclass(frozen=True)
class TrainOptions:
    """The options of every training job (in-process ``train`` and network ``party ... train``)."""

    test_fraction: float = option(0.0, "fraction of the aligned rows held out for evaluation")
    split_seed: int = option(0, "public seed of the train/test split", aliases=("--seed",))
    aligned: bool = option(False, "the files already list the same IDs in the same order (skip PSI)",
                           negative="--psi")
    key_bits: int = option(2048, "modulus bits (Paillier; OU: at least 3072, or HEU's 2048 with ou-heu)")
    scheme: str = option("paillier", "additively homomorphic scheme: paillier, ou (Okamoto-Uchiyama, conservative "
                         "parameters), ou-heu (HEU's parameters) or ou-2048 (2048-bit n, 224-bit randomness); "
                         "protocols whose key holder returns decryptions to other parties refuse OU",
                         choices=("paillier", "ou", "ou-heu", "ou-2048"))
    allow_insecure: bool = option(False, "accept keys below 2048 bits (tests only)",
                                  aliases=("--allow-insecure-key",), negative="--secure-keys-only")
    timeout: float = option(120.0, "seconds a party waits for a peer message before failing")

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise InputDataError(f"--timeout must be a positive number of seconds, got {self.timeout}")
        if not 0 <= self.test_fraction < 1:
            raise InputDataError(f"--test-fraction must lie in [0, 1), got {self.test_fraction}")


def add_train_options(parser: argparse.ArgumentParser, *, test_fraction: float | None = None,
                      skip: Sequence[str] = ()) -> None:
    """The :class:`TrainOptions` flags (``test_fraction`` overrides that default for a protocol; ``skip``
    leaves out flags the protocol defines itself, e.g. linreg's ``--scheme`` with CKKS)."""
    add_config_arguments(parser, TrainOptions, skip=skip)
    if test_fraction is not None:
        parser.set_defaults(test_fraction=test_fraction)


def split_rows(n_rows: int, opts: TrainOptions) -> tuple[np.ndarray, np.ndarray]:
    """The public, seeded train/test split of ``n_rows`` aligned rows; refuse fewer than 2 training rows.

    Fewer than :data:`~vflcrypto.data.validate.FEW_ROWS` training rows still train, with a warning on stderr.
    """
    train, test = train_test_split(n_rows, opts.test_fraction, seed=opts.split_seed)
    if len(train) < 2:
        raise InputDataError(f"only {len(train)} training row(s) of {n_rows} common rows after the split: too few "
                             "to train (check the IDs, the alignment and --test-fraction)")
    warn_few_rows(len(train), of=n_rows)
    return train, test


def exact_columns(table: PartyTable, result: str = "the model") -> PartyTable:
    """For protocols that standardize every column exactly (sshelr, poisson, pearson): refuse a
    missing value or a column constant over the aligned rows (naming the file, line and column),
    and warn when the rows are few. Returns ``table``."""
    refuse_constant_columns(table)
    warn_few_rows(len(table), what="aligned rows", result=result)
    return table


# --------------------------------------------------------------------------- in-process


def read_tables(label_path: str, feature_paths: Sequence[str], id_column: str, label: str, *,
                label_party_features: bool = True) -> list[PartyTable]:
    """Read the label holder's table (first) and every feature party's table.

    ``label_party_features=False`` reads only the ID and label of the first file (a label
    holder without features, as in vertical logistic regression).
    """
    if not feature_paths:
        raise InputDataError("at least one feature party file is required")
    first = read_party_csv(label_path, id_column, label=label,
                           features=None if label_party_features else [])
    others = [read_party_csv(p, id_column) for p in feature_paths]
    for path, t in zip(feature_paths, others, strict=True):
        refuse_label_column(t, label)
        if not t.columns:
            raise InputDataError(f"{path}: no feature columns")
    return [first, *others]


# --------------------------------------------------------------------------- network


def training_rows(args: argparse.Namespace, ctx: TaskContext, table: PartyTable) -> tuple[PartyTable, int]:
    """This party's table restricted to the common IDs (PSI first unless ``--aligned``), sorted
    by canonical ID (every party gets the same order, the same in every run), and the number of rows."""
    table.check_unique_ids()
    if args.aligned:
        return table, len(table)
    res = align_rows(ctx, list(table.ids))
    if res.rows is None or len(res.rows) == 0:
        raise InputDataError(f"{ctx.me}: no common IDs with the other parties")
    return table.take(sorted_rows(table.ids, res.rows)), int(res.size)


def read_own(args: argparse.Namespace, ctx: TaskContext, *, label_role: str) -> PartyTable:
    """This party's CSV: the label only at the ``label_role`` party, never at another."""
    if not args.data:
        raise InputDataError(f"the {ctx.role} party needs --data")
    table = read_party_csv(args.data, args.id_column, label=args.label if ctx.role == label_role else None)
    if ctx.role == label_role and table.label is None:
        raise InputDataError(f"the {label_role} party needs --label")
    if ctx.role != label_role:
        refuse_label_column(table, args.label, f"a {ctx.role} party")
    return table


def add_party_data_arguments(parser: argparse.ArgumentParser, *, data_required: bool = True) -> None:
    """``--data``, ``--id-column``, ``--label``, ``--out`` of a network training task."""
    parser.add_argument("--data", required=data_required,
                        help="this party's CSV (ID column, features; the label at the active party)")
    parser.add_argument("--id-column", required=data_required)
    parser.add_argument("--label", help="label column (active party)")
    parser.add_argument("--out", required=True, help="this party's output file (.npz); the "
                                                     "active party also writes <out>.metrics.json")


def metrics_path(out: Path) -> Path:
    """Where the label holder's evaluation metrics of output ``out`` go."""
    return out.with_name(out.name + ".metrics.json")


def write_metrics(out: Path, meta: dict[str, Any], metrics: dict[str, Any]) -> None:
    atomic_write_text(metrics_path(out), json.dumps({**meta, **metrics}, indent=1, default=str))


class _Validated(Protocol):
    def validate(self) -> None: ...


P = TypeVar("P", bound=_Validated)


def train_config(cls: type[P], args: argparse.Namespace) -> tuple[P, TrainOptions]:
    """The protocol's parameters (``cls``, validated) and the training options the flags describe."""
    params: P = config_from_args(cls, args)
    params.validate()
    opts: TrainOptions = config_from_args(TrainOptions, args)
    return params, opts


def json_outcome(summary: dict[str, Any]) -> PartyOutcome:
    """A network task's outcome whose output file is its summary (with the run's metadata) as JSON."""
    def write(out: Path, meta: dict[str, Any]) -> None:
        atomic_write_text(out, json.dumps({**meta, **summary}, indent=1))

    return PartyOutcome(summary, write)


def run_star(active: Callable[[Mapping[str, Channel]], Any],
             passives: Sequence[Callable[[Mapping[str, Channel]], Any]], *, timeout: float,
             allow_insecure: bool = False, tap: AuditTap | None = None,
             overrides: Mapping[str, Callable[[Mapping[str, Channel]], Any]] | None = None
             ) -> tuple[dict[str, Any], Transcript, float]:
    """The active party and passive parties ``passive-0`` … in-process, one link each to the active party.

    Each task receives its channels; ``overrides`` replaces a party's task (tests: a
    stalling or hostile party). Returns the results by party, the transcript and seconds.
    """
    names = [f"passive-{k}" for k in range(len(passives))]
    net = LocalNetwork([Endpoint("active", "active")] + [Endpoint(n, "passive") for n in names],
                       links=[("active", n) for n in names], timeout=timeout, allow_insecure=allow_insecure,
                       transcript=Transcript(tap))
    # Callable[..., T], not [[], T]: the lambdas below bind loop variables as default arguments
    tasks: dict[str, Callable[..., Any]] = {"active": lambda: active(net.channels("active"))}
    for name, fn in [*zip(names, passives, strict=True), *(overrides or {}).items()]:
        tasks[name] = (lambda fn=fn, name=name: fn(net.channels(name)))
    t0 = time.perf_counter()
    out = run_parties(tasks, network=net)
    return out, net.transcript, time.perf_counter() - t0


# --------------------------------------------------------------------------- two data parties, one label


def add_pair_train_arguments(p: argparse.ArgumentParser, cls: type, label: str) -> None:
    """The flags of ``train X`` for a label holder and one feature party (``label``: what the label is)."""
    p.add_argument("--active", required=True, help=f"label holder's CSV (ID, {label}, optional columns)")
    p.add_argument("--passive", required=True, help="the feature party's CSV (ID and columns)")
    p.add_argument("--id-column", required=True)
    p.add_argument("--label", required=True, help=f"the {label} column of the active file")
    add_config_arguments(p, cls)
    add_train_options(p)
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")


def read_pair(args: argparse.Namespace, opts: TrainOptions
              ) -> tuple[list[PartyTable], np.ndarray, np.ndarray | None, int]:
    """Both files read and aligned (PSI unless ``--aligned``): tables, labels, the active
    party's columns (``None`` without any) and the alignment's bytes."""
    tables = read_tables(args.active, [args.passive], args.id_column, args.label)
    tables, align_bytes = align_tables(tables, ["active", "passive-0"], aligned=opts.aligned)
    exact_columns(tables[0])
    refuse_constant_columns(tables[1])
    y = tables[0].label
    assert y is not None  # read_tables requires the label at the active party
    return tables, y, (tables[0].X if tables[0].columns else None), align_bytes


def pair_weights(tables: Sequence[PartyTable], active: np.ndarray, passive: np.ndarray) -> dict[str, Any]:
    """Each party's learned weights by column name (the active party's intercept last)."""
    return {"active_weights": dict(zip([*tables[0].columns, "(intercept)"], active.tolist(), strict=True)),
            "passive_weights": dict(zip(tables[1].columns, passive.tolist(), strict=True))}


def pair_split(tables: Sequence[PartyTable], opts: TrainOptions) -> tuple[list[PartyTable], list[PartyTable]]:
    """The aligned tables of both parties split into training and held-out rows by the public, seeded
    ``--test-fraction`` split (:func:`split_rows`); without a fraction every aligned row trains (no held-out
    tables)."""
    if not opts.test_fraction:
        return list(tables), []
    train, test = split_rows(len(tables[0]), opts)
    return [t.take(train) for t in tables], ([t.take(test) for t in tables] if len(test) else [])
