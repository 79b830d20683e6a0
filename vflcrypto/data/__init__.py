"""Data: party tables from CSV, all-or-nothing output files, and the bundled example datasets.

* :mod:`.tables`: reading a party's CSV (errors name file, line and column), splits;
* :mod:`.validate`: the input checks every protocol shares (header, values, class labels,
  label columns, constant columns, few rows), each error naming the file, line and column;
* :mod:`.atomic`: atomic output files and :func:`~.atomic.atomic_set` (a command's files published
  together or not at all), re-exported by :mod:`.files`;
* :mod:`.files`: output checks, pickle-free model files, model directories with a manifest;
* :mod:`.titanic`, :mod:`.digits`, :mod:`.synthetic`: example data shipped with the
  package (the CSV files in this folder) or generated, no download.

Imports: :mod:`vflcrypto.psi` (canonical IDs), :mod:`vflcrypto.ml` (preprocessing),
:mod:`vflcrypto.errors`. Public names: the modules above.
"""

__all__ = ["atomic", "digits", "files", "synthetic", "tables", "titanic", "validate"]
