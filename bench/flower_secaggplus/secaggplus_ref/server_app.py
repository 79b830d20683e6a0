"""ServerApp: Flower's DefaultWorkflow with SecAggPlusWorkflow as the fit workflow, metered.

The Grid is wrapped in :class:`vflcrypto.runtime.flower_meter.MeteredGrid` (the same meter as
vflcrypto's ServerApp with ``meter = true``); each SecAgg+ round and each of its stages
is timed around the workflow call, after a warm-up query has loaded every ClientApp.
``poll`` > 0 pulls replies at that interval instead of Flower's 3 s sleep in
``Grid.send_and_receive`` (vflcrypto's ServerApp pulls every 0.05 s). ``max-weight`` is
Flower's weight bound: each vector is scaled by num_examples / max-weight before
quantization (1 here: every weight is 1, full precision). The strategy starts from a
one-value model, so the messages to the clients carry the protocol and not a
100k-value global model; the clients ignore it. ``secaggplus.json`` gets the per-round
seconds, the traffic and the aggregate: Flower's SecAgg+ returns the weighted mean over
the survivors (every weight 1 here).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import flwr.compat.common.recorddict_compat as compat
import numpy as np
from flwr.app import Message
from flwr.common import Context, GetPropertiesIns, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.constant import MessageTypeLegacy
from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

from vflcrypto.runtime.flower_meter import MeteredGrid

app = ServerApp()


class KeepAggregate(FedAvg):  # type: ignore[misc]
    """FedAvg that keeps the last aggregate (the SecAgg+ mean) and its failure count."""

    aggregate: np.ndarray | None = None
    results = 0
    failures = 0

    def aggregate_fit(self, server_round: int, results: Any, failures: Any) -> Any:
        out = super().aggregate_fit(server_round, results, failures)
        if out[0] is not None:
            self.aggregate = parameters_to_ndarrays(out[0])[0]
        self.results, self.failures = len(results), len(failures)
        return out


class TimedSecAggPlus(SecAggPlusWorkflow):  # type: ignore[misc]
    """SecAggPlusWorkflow with the time of every round and of each of its four stages."""

    seconds: list[float]
    stages: list[dict[str, float]]

    def __call__(self, grid: Grid, context: Context) -> None:
        self.stages.append({})
        t0 = time.perf_counter()
        super().__call__(grid, context)
        self.seconds.append(time.perf_counter() - t0)

    def _timed(self, name: str, stage: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        ok = stage(*args)
        self.stages[-1][name] = time.perf_counter() - t0
        return ok

    def setup_stage(self, *args: Any) -> Any:
        return self._timed("setup", super().setup_stage, *args)

    def share_keys_stage(self, *args: Any) -> Any:
        return self._timed("share_keys", super().share_keys_stage, *args)

    def collect_masked_vectors_stage(self, *args: Any) -> Any:
        return self._timed("collect_masked_vectors", super().collect_masked_vectors_stage, *args)

    def unmask_stage(self, *args: Any) -> Any:
        return self._timed("unmask", super().unmask_stage, *args)


def warm_up(grid: Grid, n: int, timeout: float) -> None:
    """Wait for the n SuperNodes and load each ClientApp with one get_properties query (untimed,
    unmetered), as vflcrypto's ServerApp does with its ``query.hello`` before it starts."""
    deadline = time.monotonic() + timeout
    while len(nodes := sorted(grid.get_node_ids())) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    content = compat.getpropertiesins_to_recorddict(GetPropertiesIns({}))
    msgs = [Message(content, dst_node_id=nid, message_type=MessageTypeLegacy.GET_PROPERTIES) for nid in nodes]
    replies = list(MeteredGrid(grid, poll=0.05).send_and_receive(msgs, timeout=timeout))
    if len(replies) < n or any(r.has_error() for r in replies):
        raise RuntimeError(f"warm-up: {len(replies)} replies of {n}")


@app.main()  # type: ignore[misc]
def main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    n, rounds = int(rc["clients"]), int(rc["rounds"])
    strategy = KeepAggregate(fraction_fit=1.0, min_fit_clients=n, min_available_clients=n, fraction_evaluate=0.0,
                             initial_parameters=ndarrays_to_parameters([np.zeros(1)]))
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=rounds), strategy=strategy)
    fit = TimedSecAggPlus(num_shares=int(rc["num-shares"]), reconstruction_threshold=int(rc["threshold"]),
                          timeout=float(rc["timeout"]), max_weight=float(rc["max-weight"]))
    fit.seconds, fit.stages = [], []
    warm_up(grid, n, float(rc["timeout"]))
    metered = MeteredGrid(grid, poll=float(rc["poll"]) or None)
    DefaultWorkflow(fit_workflow=fit)(metered, legacy)
    out = str(rc.get("out-dir", "") or "")
    if out:
        agg = strategy.aggregate
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "secaggplus.json").write_text(json.dumps({
            "seconds": fit.seconds, "stages": fit.stages, "results": strategy.results, "failures": strategy.failures,
            "mean": None if agg is None else agg.tolist(), **metered.traffic.to_dict()}))
    print(f"[secaggplus] {strategy.results} results, {strategy.failures} failures, rounds {fit.seconds}", flush=True)
