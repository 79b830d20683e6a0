"""The Flower App's run config, checked before anything runs: each bad key is one line naming it.

``flwr run --run-config`` accepts any TOML value for any key the app declares (an unknown key
fails deep inside the ServerApp, a wrong type or range as a raw Python error in a role).
:func:`check_run_config` checks every key against :data:`SCHEMA` (the keys of
``[tool.flwr.app.config]`` in ``flower/pyproject.toml``, their types and ranges): the
ServerApp calls it first, and ``scripts/flower_simulate.sh`` / ``flower_deploy.sh`` run this
module on their ``key=value`` overrides before starting Flower
(``python -m vflcrypto_flower.config key=value ...``: exit 2 and one line on stderr).
"""

from __future__ import annotations

import difflib
import math
import re
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vflcrypto.errors import ConfigurationError

__all__ = ["SCHEMA", "check_run_config", "main", "parse_overrides"]

Check = tuple[Callable[[Any], bool], str]


def _at_least(lo: float) -> Check:
    return (lambda v: v >= lo, f"at least {lo:g}")


def _above(lo: float) -> Check:
    return (lambda v: v > lo, f"above {lo:g}")


def _one_of(*values: Any) -> Check:
    return (lambda v: v in values, "one of " + ", ".join(repr(v) for v in values))


def _fraction() -> Check:
    return (lambda v: 0 <= v < 1, "in [0, 1)")


#: every run-config key: its type (as in pyproject.toml's defaults) and, if any, its range
SCHEMA: dict[str, tuple[type, Check | None]] = {
    "protocol": (str, None),  # checked against the registry (below)
    "secure": (bool, None),
    "steps": (int, _at_least(1)),
    "learning-rate": (float, _above(0)),
    "key-bits": (int, _at_least(512)),
    "allow-insecure": (bool, None),
    "num-parties": (int, _at_least(1)),
    "timeout": (float, _above(0)),
    "seed": (int, _at_least(0)),
    "rows": (int, _at_least(2)),
    "return-results": (bool, None),
    "reveal": (str, _one_of("active", "passive", "both")),
    "epochs": (int, _at_least(1)),
    "lr": (float, _above(0)),
    "scheme": (str, _one_of("default", "paillier", "ckks", "ou", "ou-heu", "ou-2048")),
    "psi": (str, _one_of("ecdh", "kkrt", "rr22", "hash")),
    "mode": (str, _one_of("both", "left", "size")),
    "party-config": (str, None),
    "overlap": (int, _at_least(1)),
    "variant": (str, _one_of("gradient", "partition")),
    "ssl-epochs": (int, _at_least(0)),
    "head-epochs": (int, _at_least(0)),
    "aligned": (int, _at_least(1)),
    "rounds": (int, _at_least(0)),
    "local-epochs": (int, _at_least(0)),
    "fewshot-mode": (str, _one_of("server", "client")),
    "clients": (int, _at_least(1)),
    "length": (int, _at_least(1)),
    "drop": (int, _at_least(0)),
    "degree": (int, _at_least(0)),
    "threshold": (int, _at_least(0)),
    "ring-bits": (int, _one_of(32, 64)),
    "frac-bits": (int, _at_least(0)),
    "value-bits": (int, _at_least(1)),
    "hfl-algorithm": (str, _one_of("fedavg", "fedprox", "scaffold")),
    "hfl-rounds": (int, _at_least(1)),
    "skew": (float, _fraction()),
    "trees": (int, _at_least(1)),
    "depth": (int, _at_least(1)),
    "max-bin": (int, _at_least(2)),
    "plaintext": (bool, None),
    "checkpoint-dir": (str, None),
    "resume": (bool, None),
    "features": (int, _at_least(1)),
    "meter": (bool, None),
    "out-dir": (str, None),
    "dp-epsilon": (float, _at_least(0)),
    "dp-noise": (float, _at_least(0)),
    "dp-clip": (float, _above(0)),
    "dp-delta": (float, (lambda v: 0 < v < 1, "in (0, 1)")),
    "dp-min-clients": (int, _at_least(0)),
}

_WORDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a quoted text ('...')"}


def _typed(value: Any, tp: type) -> bool:
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, tp)


def check_run_config(config: Mapping[str, Any]) -> None:
    """Refuse an unknown key, a value of the wrong type or out of range, and a protocol without a
    Flower App: :class:`ConfigurationError` naming the key (keys starting with ``_`` are the app's own)."""
    for key, value in config.items():
        if key.startswith("_"):
            continue
        if key not in SCHEMA:
            close = difflib.get_close_matches(key, SCHEMA, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (keys: {', '.join(SCHEMA)})"
            raise ConfigurationError(f"unknown run-config key {key!r}{hint}")
        tp, check = SCHEMA[key]
        if not _typed(value, tp):
            raise ConfigurationError(f"run config {key}={value!r}: {key} must be {_WORDS[tp]}")
        if check is not None and not check[0](value):
            raise ConfigurationError(f"run config {key}={value!r}: {key} must be {check[1]}")
    if "protocol" in config:
        from vflcrypto.protocols import registry

        flower = [name for name, spec in registry().items() if spec.flower is not None]
        if config["protocol"] not in flower:
            raise ConfigurationError(f"run config protocol={config['protocol']!r}: protocols with a Flower App: "
                                     f"{', '.join(flower)}")


#: flwr's own reading of a --run-config string: space-separated key=value pairs, values in TOML
_PAIR = re.compile(r"(\S+?)=('[^']*'|\"[^\"]*\"|\S+)")


def parse_overrides(args: Sequence[str]) -> dict[str, Any]:
    """The ``key=value`` run-config overrides (as ``flwr run --run-config`` reads them), each value
    parsed as TOML; :class:`ConfigurationError` for a pair that is not one."""
    out: dict[str, Any] = {}
    for arg in args:
        pairs = _PAIR.findall(arg)
        if not pairs or _PAIR.sub("", arg).strip():
            raise ConfigurationError(f"run config {arg!r} is not key=value (e.g. steps=5 protocol='linreg')")
        for key, text in pairs:
            try:
                out[key] = tomllib.loads(f"v = {text}")["v"]
            except tomllib.TOMLDecodeError:
                raise ConfigurationError(f"run config {key}={text}: not a value Flower reads (quote text: "
                                         f"{key}='{text}'; numbers and true/false as they are)") from None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Check the overrides given as arguments: exit 0, or 2 with one line on stderr."""
    try:
        check_run_config(parse_overrides(sys.argv[1:] if argv is None else argv))
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
