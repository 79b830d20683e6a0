"""ClientApp: a NumPyClient whose fit returns client k's example vector, under ``secaggplus_mod``.

Client k is SuperNode ``partition-id = k``; the last ``drop`` clients raise in fit, which
Flower's SecAgg+ sees as a dropout after the key sharing (as vflcrypto's ``drop``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.common import Context
from vflcrypto.protocols.secagg.flower import example_vector


class VectorClient(NumPyClient):  # type: ignore[misc]
    def __init__(self, index: int, length: int, drops: bool) -> None:
        self.index, self.length, self.drops = index, length, drops

    def fit(self, parameters: Any, config: Any) -> tuple[list[np.ndarray], int, dict[str, Any]]:
        if self.drops:
            raise RuntimeError(f"client {self.index} drops out (benchmark)")
        return [example_vector(self.index, self.length)], 1, {}


def client_fn(context: Context) -> Any:
    rc, k = context.run_config, int(context.node_config["partition-id"])
    n, drop = int(rc["clients"]), int(rc["drop"])
    return VectorClient(k, int(rc["length"]), drop > 0 and k >= n - drop).to_client()


app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod])
