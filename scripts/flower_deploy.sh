#!/usr/bin/env bash
# Deploy the vflcrypto Flower App (flower/) on loopback: one SuperLink and three SuperNodes
# (node config partition-id=0,1,2 = passive-0..2), all --insecure (no TLS: loopback only),
# submit the run, stream its logs, and exit 0 only if its final status is finished:completed.
# Every process started here is killed on exit; every wait has a timeout.
#   scripts/flower_deploy.sh [secure=true] [key-bits=2048] [steps=20] ...   (run-config overrides)
set -euo pipefail
# shellcheck source=scripts/flower_common.sh
source "$(dirname "$0")/flower_common.sh"

NODES=${NODES:-3}
LINK_PORT="$(free_port)"   # SuperLink: Fleet, Control and runtime HTTP APIs share one port

flower-superlink --insecure --isolation subprocess --disable-runtime-dependency-installation \
  --host 127.0.0.1 --port "$LINK_PORT" \
  --database "$FLWR_HOME/state.db" >"$FLWR_HOME/superlink.log" 2>&1 &
STARTED+=($!)
wait_for 60 "the SuperLink on 127.0.0.1:$LINK_PORT" \
  "$BIN/python" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$LINK_PORT/health', timeout=1)"

for ((k = 0; k < NODES; k++)); do
  flower-supernode --insecure --superlink "127.0.0.1:$LINK_PORT" --isolation subprocess \
    --host 127.0.0.1 --port "$(free_port)" --max-retries 20 --max-wait-time 60 \
    --node-config "partition-id=$k num-partitions=$NODES" >"$FLWR_HOME/supernode-$k.log" 2>&1 &
  STARTED+=($!)
done

cat >"$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "loopback"

[superlink.loopback]
address = "127.0.0.1:$LINK_PORT"
insecure = true
TOML

OVERRIDES=()
for kv in "$@"; do OVERRIDES+=(--run-config "$kv"); done
# The ServerApp itself waits (run config `timeout`) until all SuperNodes have joined.
if ! run_and_check loopback "${OVERRIDES[@]}"; then
  for f in "$FLWR_HOME"/super*.log; do
    echo "---- tail of $f" >&2
    tail -n 15 "$f" >&2
  done
  exit 1
fi
