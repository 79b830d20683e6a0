#!/usr/bin/env python3
"""Export the bundled Titanic file as the four per-party CSVs of the logistic-regression example.

    python scripts/split_titanic.py OUT_DIR [--unaligned]

A thin wrapper of :func:`vflcrypto.protocols.logreg.export_titanic_parties` (also
reachable as ``vflcrypto examples DIR``).
"""

from __future__ import annotations

import argparse

from vflcrypto.protocols.logreg import export_titanic_parties


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--unaligned", action="store_true", help="shuffle rows and drop a few per party")
    args = ap.parse_args()
    for path in export_titanic_parties(args.out_dir, unaligned=args.unaligned):
        print(path)


if __name__ == "__main__":
    main()
