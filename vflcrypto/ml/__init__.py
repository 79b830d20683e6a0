"""Local machine learning of one party: nothing here crosses a party boundary.

* :mod:`.nn`: PyTorch extractors and heads of representation VFL (needs the ``deep`` extra);
* :mod:`.prototypes`: the prototype math of prototype VFL with unaligned rows;
* :mod:`.cluster`: k-means with k-means++ seeding;
* :mod:`.preprocess`: a party's imputation and standardization of its own columns;
* :mod:`.metrics`: numpy evaluation metrics (AUC, R², log loss, adjusted Rand index).

Imports: :mod:`vflcrypto.errors` only. Public names: the modules above.
"""

__all__ = ["cluster", "metrics", "nn", "preprocess", "prototypes"]
