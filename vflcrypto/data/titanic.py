"""The Kaggle Titanic train file (bundled) split vertically for logistic regression.

Party 0 {Pclass, Sex (male = 1), intercept}, party 1 {Age, SibSp}, party 2 {Parch, Fare};
the label Survived stays with the label holder. Each party's features are imputed and
standardized on its own training rows (:func:`vflcrypto.ml.preprocess.local_features`).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from vflcrypto.errors import InputDataError
from vflcrypto.ml.preprocess import local_features

__all__ = ["TITANIC_FILES", "TITANIC_PARTIES", "TitanicSplit", "export_titanic_parties", "titanic_parties",
           "titanic_path"]


@dataclass(frozen=True)
class TitanicSplit:
    """The Titanic example split vertically into three feature parties and a label holder."""

    columns: tuple[tuple[str, ...], ...]
    X_train: tuple[np.ndarray, ...]
    X_test: tuple[np.ndarray, ...]
    y_train: np.ndarray
    y_test: np.ndarray
    ids_train: tuple[str, ...]
    ids_test: tuple[str, ...]


TITANIC_PARTIES: tuple[tuple[str, ...], ...] = (("Pclass", "Sex"), ("Age", "SibSp"), ("Parch", "Fare"))


def titanic_path() -> Path:
    """The bundled Kaggle Titanic train file (891 rows)."""
    return Path(str(resources.files("vflcrypto") / "data" / "titanic.csv"))


TITANIC_FILES: dict[str, tuple[str, ...]] = {
    "coordinator.csv": ("Survived",),
    "party0.csv": ("Pclass", "Sex"),
    "party1.csv": ("Age", "SibSp"),
    "party2.csv": ("Parch", "Fare"),
}


def export_titanic_parties(out_dir: str | Path, *, unaligned: bool = False) -> list[Path]:
    """Write the bundled Titanic file as the four per-party CSVs of the example.

    ``coordinator.csv`` (PassengerId, Survived), ``party0.csv`` (PassengerId, Pclass, Sex
    with male = 1), ``party1.csv`` (PassengerId, Age, SibSp), ``party2.csv`` (PassengerId,
    Parch, Fare); raw values (each party imputes and standardizes locally in training).
    With ``unaligned`` every party's rows are shuffled and each drops a few different
    passengers, so the IDs must be aligned by PSI first. Files are written atomically.
    """
    import csv

    from vflcrypto.data.files import write_csv_atomic

    with titanic_path().open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["Sex"] = "1" if r["Sex"].strip() == "male" else "0"
    out = Path(out_dir)
    rng = np.random.default_rng(1234)  # example data, not a secret shuffle
    written = []
    for k, (name, cols) in enumerate(TITANIC_FILES.items()):
        mine = list(rows)
        if unaligned:
            drop = set(rng.choice(len(mine), size=10 + k, replace=False).tolist())
            mine = [mine[i] for i in rng.permutation(len(mine)) if i not in drop]
        write_csv_atomic(out / name, ("PassengerId", *cols),
                         ([r["PassengerId"], *(r[c] for c in cols)] for r in mine))
        written.append(out / name)
    return written


def titanic_parties(path: str | Path | None = None, seed: int = 0,
                    test_fraction: float = 0.2) -> TitanicSplit:
    """Split Titanic as party 0 {Pclass, Sex, intercept}, 1 {Age, SibSp}, 2 {Parch, Fare}.

    Sex is encoded male = 1, female = 0. Rows are split 80/20 with
    :func:`vflcrypto.data.tables.train_test_split` (``seed``); missing values (Age) are imputed
    with the training-row median and every feature is standardized with training-row mean
    and standard deviation, so nothing about the test rows leaks into preprocessing. The
    label Survived stays with the active party.
    """
    import csv

    from vflcrypto.data.tables import train_test_split

    p = Path(path) if path is not None else titanic_path()
    try:
        with p.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise InputDataError(f"cannot read {p}: {exc.strerror}") from None
    if not rows:
        raise InputDataError(f"{p} has no rows")

    def num(text: str) -> float:
        return float(text) if text.strip() else float("nan")

    try:
        ids = [r["PassengerId"] for r in rows]
        y = np.array([num(r["Survived"]) for r in rows])
        raw = {c: np.array([num(r[c]) for r in rows]) for c in ("Pclass", "Age", "SibSp", "Parch", "Fare")}
        raw["Sex"] = np.array([1.0 if r["Sex"].strip() == "male" else 0.0 for r in rows])
    except (KeyError, ValueError) as exc:
        raise InputDataError(f"{p} is not a Titanic train file: {exc}") from None
    tr, te = train_test_split(len(rows), test_fraction, seed)
    blocks_tr, blocks_te = [], []
    for k, cols in enumerate(TITANIC_PARTIES):
        M = local_features(np.column_stack([raw[c] for c in cols]), tr, intercept=k == 0)
        blocks_tr.append(M[tr])
        blocks_te.append(M[te])
    columns = tuple(cols + (("intercept",) if k == 0 else ()) for k, cols in enumerate(TITANIC_PARTIES))
    return TitanicSplit(columns, tuple(blocks_tr), tuple(blocks_te), y[tr], y[te],
                        tuple(ids[i] for i in tr), tuple(ids[i] for i in te))
