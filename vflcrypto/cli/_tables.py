"""Reading the parties' CSV files and aligning their rows, shared by the ``train`` commands.

Every ``vflcrypto train MODEL`` command starts the same way: read the label holder's
file and each feature party's file, check that no feature party holds the label, then
either check that the files are pre-aligned (``--aligned``) or align them by private set
intersection (:mod:`vflcrypto.protocols.align`, ECDH, every party learns its rows of the common
IDs in one shared order).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..dataio import PartyTable, read_party_csv, require_same_ids
from ..errors import InputDataError

__all__ = ["align_tables", "read_tables"]


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
        if label in t.columns:
            raise InputDataError(f"{path}: a feature party must not hold the label {label!r}")
        if not t.columns:
            raise InputDataError(f"{path}: no feature columns")
    return [first, *others]


def align_tables(tables: list[PartyTable], names: Sequence[str], *,
                 aligned: bool) -> tuple[list[PartyTable], int]:
    """Tables restricted to the common IDs in one shared order, and the PSI bytes sent.

    With ``aligned=True`` the files must already list the same IDs in the same order
    (checked, no PSI, 0 bytes).
    """
    if aligned:
        require_same_ids(tables, names)
        return tables, 0
    from ..protocols import align

    ids = [list(t.ids) for t in tables]
    if len(tables) == 2:
        run = align.run_local(ids[0], ids[1], mode="both")
        results = [run.results[align.ACTIVE], run.results[align.PASSIVE]]
    else:
        run = align.run_multiparty_local(ids)
        results = [run.results[align.ACTIVE]] + [
            run.results[f"passive-{j}"] for j in range(len(tables) - 1)]
    out = []
    for t, res, name in zip(tables, results, names, strict=True):
        if res.rows is None or len(res.rows) == 0:
            raise InputDataError(f"{name}: no common IDs with the other parties")
        out.append(t.take(res.rows))
    return out, run.transcript.total_bytes
