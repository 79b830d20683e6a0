"""End-to-end protocols of vflcrypto, one module (or package) per protocol.

Installed and imported as :mod:`vflcrypto.protocols` (the repository keeps them in the
top-level folder ``protocols/``). Every protocol exports a
:class:`~vflcrypto.spec.ProtocolSpec` named ``SPEC`` whose name is the module's; the
entry points find protocols only through :func:`registry`, so adding a protocol means
adding its module. Modules whose names start with ``_`` are shared helpers.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from vflcrypto.errors import ConfigurationError
from vflcrypto.spec import ProtocolSpec

__all__ = ["get", "registry"]


@cache
def registry() -> dict[str, ProtocolSpec]:
    """Every protocol's spec, by name (importing a module registers its message declarations)."""
    specs: dict[str, ProtocolSpec] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, ProtocolSpec):
            raise ConfigurationError(f"protocol module {info.name} exports no ProtocolSpec named SPEC")
        if spec.name != info.name:
            raise ConfigurationError(f"protocol module {info.name} names its spec {spec.name!r}: "
                                     "one name for the module, its message kinds, audit and CLI")
        specs[spec.name] = spec
    return specs


def get(name: str) -> ProtocolSpec:
    """The spec of protocol ``name``; a clear error listing the protocols if there is none."""
    specs = registry()
    if name not in specs:
        raise ConfigurationError(f"no protocol {name!r}; protocols: {', '.join(specs)}")
    return specs[name]
