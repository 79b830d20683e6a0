"""The training parameters of secure linear regression: the one source of their flags and defaults."""

from __future__ import annotations

from dataclasses import dataclass

from vflcrypto.errors import InputDataError
from vflcrypto.he.ou import refuse_decryption_oracle
from vflcrypto.he.paillier import DEFAULT_KEY_BITS
from vflcrypto.spec import option

from .messages import SCHEMES

__all__ = ["LABEL_SCALING", "OU_REFUSAL", "PREPROCESSING", "LinRegConfig"]

#: why linreg refuses Okamoto-Uchiyama (named so the flag can offer it and say why not)
OU_REFUSAL = "its coordinator decrypts the masked gradients and predictions the data parties form and returns them"

PREPROCESSING = ("none", "standardize", "whiten")
LABEL_SCALING = ("standardize", "none")


@dataclass(frozen=True)
class LinRegConfig:
    """Public training parameters (B sends them in the plan; C and A check them)."""

    epochs: int = option(100, "training epochs")
    lr: float = option(0.1, "learning rate η")
    l2: float = option(0.0, "L2 penalty λ")
    batch_size: int | None = option(None, "rows per mini-batch (default: full batch)")
    tol: float | None = option(1e-6, "C stops when the epoch loss changes by <= tol (relative); 0 disables")
    scheme: str = option("paillier", "homomorphic scheme (OU is refused: the coordinator returns decryptions)",
                         choices=SCHEMES)
    key_bits: int = option(DEFAULT_KEY_BITS, "Paillier modulus bits", cli=False)  # a TrainOptions flag
    momentum: float = option(0.9, "heavy-ball momentum, applied locally by each party (0 = plain descent)")
    preprocess: str = option("standardize", "local per-party preprocessing", choices=PREPROCESSING)
    fit_intercept: bool = option(True, "an intercept column at the active party", flag="--intercept",
                                 negative="--no-intercept")
    label_scaling: str = option("standardize", "standardize: the active party trains on its label standardized "
                                "(mean 0, std 1 on its training rows) under every scheme, and the model, its "
                                "predictions and the reported losses are in the label's units; none: train on "
                                "the label as given (lr and tol then act in the label's units; CKKS refuses "
                                "labels too large for its masks)", choices=LABEL_SCALING)
    # on by default: faster epochs with the parties in separate processes, the same in one (see the package docstring)
    coordinator_obfuscators: bool = option(
        True, "the coordinator, which holds the key and mostly waits, precomputes the passive parties' "
        "obfuscators (encryptions of zero, by the CRT, on a low-priority pool) and sends them fresh each "
        "batch (Paillier only)")
    allow_small_batches: bool = option(
        False, "allow a batch (the last of an epoch included) of no more rows than a passive party's features: "
        "that party then solves its own gradient X_b^T d for the batch's residuals d, at the first iteration the "
        "labels (Weng et al. 2020's reverse multiplication; refused by default, by every passive party and by C)")
    seed: int | None = option(None, "public schedule seed (default: the active party draws one)", cli=False)

    def __post_init__(self) -> None:
        refuse_decryption_oracle(self.scheme, "linreg", OU_REFUSAL)
        if self.scheme not in SCHEMES:
            raise InputDataError(f"unknown scheme {self.scheme!r}; choose from {SCHEMES}")
        if self.epochs < 1 or not self.lr > 0 or self.l2 < 0 or not 0 <= self.momentum < 1:
            raise InputDataError("need epochs >= 1, lr > 0, l2 >= 0 and 0 <= momentum < 1")
        if self.preprocess not in PREPROCESSING:
            raise InputDataError(f"unknown preprocessing {self.preprocess!r}")
        if self.label_scaling not in LABEL_SCALING:
            raise InputDataError(f"unknown label scaling {self.label_scaling!r}; choose from {LABEL_SCALING}")
        if self.batch_size is not None and self.batch_size < 1:
            raise InputDataError("batch size must be >= 1")
        if self.tol is not None and self.tol <= 0:
            object.__setattr__(self, "tol", None)  # 0 (or less) disables the stopping test

    @property
    def supplies_obfuscators(self) -> bool:
        """Whether C sends the passive parties their obfuscators (the option, under Paillier)."""
        return self.coordinator_obfuscators and self.scheme == "paillier"

    @property
    def scales_label(self) -> bool:
        """Whether the active party standardizes the label (the default, under every scheme)."""
        return self.label_scaling == "standardize"
