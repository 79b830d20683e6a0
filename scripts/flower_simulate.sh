#!/usr/bin/env bash
# Run the vflcrypto Flower App (flower/) in Flower's local simulation: `flwr run` starts a
# private local SuperLink with NODES (default 3) simulated SuperNodes (partition-id 0.. = the
# protocol's non-server parties in order).
# Exits 0 only if the run's final status is finished:completed; stops the local SuperLink.
#   scripts/flower_simulate.sh [secure=true] [key-bits=2048] [steps=20] ...   (run-config overrides)
set -euo pipefail
# shellcheck source=scripts/flower_common.sh
source "$(dirname "$0")/flower_common.sh"

# `flwr run` against the built-in "local" connection (address ":local:") starts the
# SuperLink itself; give it private ports so parallel invocations do not share one.
FLWR_LOCAL_SUPERLINK_HTTP_API_PORT="$(free_port)"
FLWR_LOCAL_CONTROL_API_PORT="$(free_port)"
export FLWR_LOCAL_SUPERLINK_HTTP_API_PORT FLWR_LOCAL_CONTROL_API_PORT

OVERRIDES=()
for kv in "$@"; do OVERRIDES+=(--run-config "$kv"); done
run_and_check local --federation-config "num-supernodes=${NODES:-3}" "${OVERRIDES[@]}"
