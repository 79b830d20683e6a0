"""``vflcrypto examples DIR``: write the bundled example data sets as per-party CSV files.

* ``bank.csv`` and ``shop.csv``: two parties with partially overlapping customer IDs
  (1,500 and 1,200 rows, 800 in common; synthetic, made by ``scripts/make_demo_data.py``);
  the bank holds the label ``defaulted`` and a numeric ``credit_score``, both of which depend on
  the bank's and the shop's columns (least squares on both parties' columns explains about 80 %
  of ``credit_score``'s variance on the common rows, on the bank's alone about 60 %).
* ``titanic/coordinator.csv`` and ``titanic/party0..2.csv``: the Kaggle Titanic train file
  split as in the vertical logistic regression example (labels / {Pclass, Sex} /
  {Age, SibSp} / {Parch, Fare}); ``--unaligned`` shuffles and thins each party's rows so
  the IDs need PSI alignment first.
* ``digits/server.csv`` and ``digits/party0..1.csv``: the bundled digits for the
  representation-VFL protocols (seed 000): the server holds ``id`` and the label
  ``digit`` of the aligned rows (100 training + 360 test rows); each party its half of
  the pixel columns of those rows and of its own unaligned rows.
* ``protovfl/server.csv`` and ``protovfl/party0..2.csv``: the digits for prototype VFL
  (seed 002): three parties with bands of pixel rows, 20 aligned training + 360 test
  rows labelled at the server, unaligned pools of 130 / 1,300 / 2 rows (some rows on
  party 0 and 1 only).
* ``hfl/client0..2.csv``: the digits dealt to three clients for horizontal FL (the same
  64 pixel columns and ``digit`` everywhere, different rows).
* ``claims/insurer.csv`` and ``claims/pharmacy.csv``: synthetic counts for Poisson
  regression (the insurer holds the number of ``claims``, age and a health score; the
  pharmacy prescriptions, visits and a noise column); 400 and 360 rows, 320 in common.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["register"]


def run(args: argparse.Namespace) -> int:
    """Write every example file, all-or-nothing (:func:`~vflcrypto.data.files.atomic_set`), then list them."""
    from vflcrypto.data.files import atomic_set, atomic_write_bytes, check_output_dir
    from vflcrypto.protocols.logreg import export_titanic_parties

    out = check_output_dir(args.dir)
    data = resources.files("vflcrypto") / "data"
    written = []
    with atomic_set():  # a full disk at any file leaves none of them
        for name in ("bank.csv", "shop.csv"):
            atomic_write_bytes(out / name, (data / name).read_bytes())
            written.append(out / name)
        written += export_titanic_parties(out / "titanic", unaligned=args.unaligned)
        written += [*_digits_vfl(out / "digits"), *_digits_proto(out / "protovfl"), *_digits_hfl(out / "hfl"),
                    *_claims(out / "claims")]
    for path in written:
        print(path)
    return 0


def _claims(out: Path) -> list[Path]:
    """The Poisson example split between an insurer (labels) and a pharmacy, partly overlapping."""
    from vflcrypto.data.files import write_csv_atomic
    from vflcrypto.protocols.poisson import example

    Xa, y, ca, Xp, cp = example(440)
    ids = [f"m{i:04d}" for i in range(440)]
    insurer, pharmacy = out / "insurer.csv", out / "pharmacy.csv"
    write_csv_atomic(insurer, ["id", "claims", *ca],
                     [[ids[i], int(y[i]), *(f"{v:.6g}" for v in Xa[i])] for i in range(400)])
    write_csv_atomic(pharmacy, ["id", *cp], [[ids[i], *(f"{v:.6g}" for v in Xp[i])] for i in range(80, 440)])
    return [insurer, pharmacy]


def _digits_vfl(out: Path) -> list[Path]:
    from vflcrypto.protocols._repvfl_cli import _digits_tables

    server, parties, _ = _digits_tables(100, 0)
    return _write_tables(out, server, parties)


def _digits_proto(out: Path) -> list[Path]:
    from vflcrypto.protocols.protovfl import digits_tables

    server, parties, _ = digits_tables(20, seed=0)
    return _write_tables(out, server, parties)


def _write_tables(out: Path, server: Any, parties: Sequence[Any]) -> list[Path]:
    """The server's ``id``/``digit`` file and one ``id`` + columns file per party."""
    from vflcrypto.data.files import write_csv_atomic

    assert server.label is not None
    paths = [out / "server.csv"]
    write_csv_atomic(paths[0], ["id", "digit"], [[i, int(y)] for i, y in zip(server.ids, server.label, strict=True)])
    for k, t in enumerate(parties):
        paths.append(out / f"party{k}.csv")
        write_csv_atomic(paths[-1], ["id", *t.columns],
                         [[i, *(f"{v:g}" for v in row)] for i, row in zip(t.ids, t.X.tolist(), strict=True)])
    return paths


def _digits_hfl(out: Path) -> list[Path]:
    import numpy as np

    from vflcrypto.data.files import write_csv_atomic
    from vflcrypto.protocols.hfl import digits_clients

    paths = []
    for k, c in enumerate(digits_clients(3, seed=0, test_fraction=0.0)):
        paths.append(out / f"client{k}.csv")
        write_csv_atomic(paths[-1], [*(f"px{j}" for j in range(c.X.shape[1])), "digit"],
                         [[*(f"{v:g}" for v in row), int(y)] for row, y in zip(np.asarray(c.X).tolist(), c.y,
                                                                              strict=True)])
    return paths


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("examples", help="write the bundled example data as per-party CSV files",
                       description=__doc__)
    p.add_argument("dir", help="output directory")
    p.add_argument("--unaligned", action="store_true",
                   help="Titanic parties with shuffled, partly different rows (needs PSI)")
    p.set_defaults(handler=run)
