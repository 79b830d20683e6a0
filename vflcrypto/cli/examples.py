"""``vflcrypto examples DIR``: write the bundled example data sets as per-party CSV files.

* ``bank.csv`` and ``shop.csv``: two parties with partially overlapping customer IDs
  (1,500 and 1,200 rows, 800 in common; synthetic, made by ``scripts/make_demo_data.py``);
  the bank holds the label ``defaulted`` and a numeric ``credit_score``.
* ``titanic/coordinator.csv`` and ``titanic/party0..2.csv``: the Kaggle Titanic train file
  split as in the vertical logistic regression example (labels / {Pclass, Sex} /
  {Age, SibSp} / {Parch, Fare}); ``--unaligned`` shuffles and thins each party's rows so
  the IDs need PSI alignment first.
"""

from __future__ import annotations

import argparse
import shutil
from importlib import resources
from pathlib import Path

__all__ = ["register"]


def run(args: argparse.Namespace) -> int:
    from vflcrypto.protocols.logreg import export_titanic_parties

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    data = resources.files("vflcrypto") / "data"
    for name in ("bank.csv", "shop.csv"):
        with resources.as_file(data / name) as src:
            shutil.copyfile(src, out / name)
        print(out / name)
    for path in export_titanic_parties(out / "titanic", unaligned=args.unaligned):
        print(path)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("examples", help="write the bundled example data as per-party CSV files",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", help="output directory")
    p.add_argument("--unaligned", action="store_true",
                   help="Titanic parties with shuffled, partly different rows (needs PSI)")
    p.set_defaults(handler=run)
