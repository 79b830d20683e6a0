# Shared helpers of scripts/flower_simulate.sh and scripts/flower_deploy.sh (sourced, not run).
#
# Why a wrapper at all: `flwr run --stream` exits 0 even when the ServerApp failed, and the
# local SuperLink that `flwr run` starts for a simulation stays running (detached) after it.
# These helpers submit the run, stream its logs, read the run's *final status* from
# `flwr ls --format json`, and kill every process the calling script started (whole trees).
#
# Environment (all optional):
#   VENV           virtualenv with vflcrypto and flwr (default: <repo>/.venv)
#   FLWR_TIMEOUT   seconds the whole run may take before it counts as failed (default 900)
#   FLWR_KEEP_LOGS=1  keep the temporary FLWR_HOME (logs, state) instead of deleting it
#   FLWR_WORKDIR   directory for that temporary FLWR_HOME (default: TMPDIR or /tmp)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${VENV:-$ROOT/.venv}/bin"
APP="${FLWR_APP:-$ROOT/flower}"  # FLWR_APP: another Flower project (bench/flower_secaggplus)
FLWR_TIMEOUT="${FLWR_TIMEOUT:-900}"

for tool in flwr flower-superlink flower-supernode python; do
  if [[ ! -x "$BIN/$tool" ]]; then
    echo "error: $BIN/$tool not found; install with: make  (or pip install -e '.[dev,flower]')" >&2
    exit 2
  fi
done

# The run-config overrides ("$@" of the calling script) are checked before anything starts: an
# unknown key, a value of the wrong type or out of range ends the script with one line, exit 2.
if [[ -f "$APP/vflcrypto_flower/config.py" ]]; then
  PYTHONWARNINGS=ignore PYTHONPATH="$APP${PYTHONPATH:+:$PYTHONPATH}" "$BIN/python" -m vflcrypto_flower.config "$@" \
    || exit 2
fi

# Flower spawns flower-superexec / flwr-serverapp / flwr-clientapp by name: they must be on PATH.
export PATH="$BIN:$PATH"
# No telemetry, no update checks, no runtime `uv pip install` of the app's dependencies
# (they are installed in the venv; the FAB's own package is imported from the FAB).
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
# flwr 1.42's gRPC stubs were generated with protobuf 5.29; silence the per-file notice.
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore:Protobuf gencode version:UserWarning}"
export RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0  # (simulation) silence Ray's accelerator-env notice
# A private Flower home per invocation: apps, state DB, logs and CLI config never clash
# with another run (or with the user's ~/.flwr).
# FLWR_WORKDIR: where to create it (default TMPDIR or /tmp; keep it short: Ray puts
# AF_UNIX sockets, limited to 107 bytes, under TMPDIR, so TMPDIR itself is left alone).
FLWR_HOME="$(mktemp -d "${FLWR_WORKDIR:-${TMPDIR:-/tmp}}/vflcrypto-flwr.XXXXXX")"
export FLWR_HOME

STARTED=()   # PIDs started by the calling script (each is a process-tree root)
CHILD=""     # the foreground step currently awaited by bgwait

bgwait() {  # run "$@" as a child and wait for it: bash defers INT/TERM traps until a
  # foreground command ends, but `wait` returns at once, so cleanup runs immediately.
  "$@" &
  CHILD=$!
  local rc=0
  wait "$CHILD" || rc=$?
  CHILD=""
  return "$rc"
}

free_port() {  # an unused loopback TCP port
  "$BIN/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

_descendants() {  # all descendants of the given PIDs (children first found by PPID)
  local frontier=("$@") found=() next pid ppid line rest
  while ((${#frontier[@]})); do
    next=()
    for stat in /proc/[0-9]*/stat; do
      line="$(cat "$stat" 2>/dev/null)" || continue
      pid="${line%% *}"
      rest="${line##*) }"       # after "(comm) ", which may itself contain spaces
      read -r _ ppid _ <<<"$rest"
      for p in "${frontier[@]}"; do
        if [[ "$ppid" == "$p" ]]; then next+=("$pid"); fi
      done
    done
    found+=("${next[@]}")
    frontier=("${next[@]}")
  done
  echo "${found[@]}"
}

_pids_with_arg() {  # PIDs whose command line contains the (unique, private) string $1
  local d
  for d in /proc/[0-9]*; do
    # 2>/dev/null before the redirection: a process that ended since the glob has no cmdline, and
    # the shell (not tr) reports a failed "<file", on the stderr in effect at that moment
    if tr '\0' ' ' 2>/dev/null <"$d/cmdline" | grep -qF -- "$1"; then echo "${d#/proc/}"; fi
  done
}

_own_children() {  # those of the given PIDs that are still children of this shell (no reused PIDs)
  local pid line rest ppid
  for pid in "$@"; do
    line="$(cat "/proc/$pid/stat" 2>/dev/null)" || continue
    rest="${line##*) }"
    read -r _ ppid _ <<<"$rest"
    if [[ "$ppid" == "$$" ]]; then echo "$pid"; fi
  done
}

kill_trees() {  # TERM the given PIDs and all their descendants (snapshot first), KILL after 5 s
  local roots=("$@") all
  ((${#roots[@]})) || return 0
  # shellcheck disable=SC2207
  all=("${roots[@]}" $(_descendants "${roots[@]}"))
  kill -TERM "${all[@]}" 2>/dev/null || true
  for _ in $(seq 50); do
    kill -0 "${all[@]}" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "${all[@]}" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # Processes detached by Flower (the local SuperLink) carry our private FLWR_HOME in argv.
  # shellcheck disable=SC2207
  local extra=($(_pids_with_arg "$FLWR_HOME/"))
  # shellcheck disable=SC2207
  local own=($(_own_children "${STARTED[@]}" $CHILD))
  kill_trees "${own[@]}" "${extra[@]}"
  if [[ "${FLWR_KEEP_LOGS:-0}" == 1 || $rc -ne 0 ]]; then
    echo "logs and state kept in $FLWR_HOME" >&2
  else
    rm -rf "$FLWR_HOME"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND until it succeeds
  local secs=$1 what=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "error: timed out after ${secs}s waiting for $what" >&2
      return 1
    fi
    sleep 0.5
  done
}

json_field() {  # json_field EXPR: evaluate EXPR on the JSON document j read from stdin
  "$BIN/python" -c "import json, sys; j = json.load(sys.stdin); print($1)"
}

run_and_check() {  # run_and_check CONNECTION [flwr run options...]: submit, stream, check final status
  local conn=$1; shift
  local deadline=$((SECONDS + FLWR_TIMEOUT)) out run_id status details
  cd "$APP"
  if ! bgwait timeout 120 flwr run . "$conn" --format json "$@" >"$FLWR_HOME/run.json"; then
    echo "error: flwr run failed: $(cat "$FLWR_HOME/run.json")" >&2
    return 1
  fi
  out="$(cat "$FLWR_HOME/run.json")"
  run_id="$(json_field 'j.get("run-id") or ""' <<<"$out")"
  if [[ -z "$run_id" ]]; then
    echo "error: flwr run did not start a run: $out" >&2
    return 1
  fi
  echo "started run $run_id"
  # The log stream ends when the run finishes; it is bounded by the overall deadline.
  bgwait timeout "$((deadline - SECONDS > 1 ? deadline - SECONDS : 1))" flwr log "$run_id" "$conn" --stream || true
  # `flwr log`/`flwr run --stream` exit 0 whatever happened: the run's status is the verdict.
  status=""
  while ((SECONDS < deadline + 30)); do
    bgwait timeout 30 flwr ls "$conn" --run-id "$run_id" --format json >"$FLWR_HOME/ls.json" 2>/dev/null || true
    out="$(cat "$FLWR_HOME/ls.json")"
    status="$(json_field '(j.get("runs") or [{}])[0].get("status", "")' <<<"$out" 2>/dev/null || true)"
    [[ "$status" == finished* ]] && break
    sleep 1
  done
  details="$(json_field '(j.get("runs") or [{}])[0].get("status-details", "")' <<<"$out" 2>/dev/null || true)"
  [[ "$details" == "N/A" ]] && details=""
  echo "run $run_id status: ${status:-unknown}${details:+ ($details)}"
  if [[ "$status" != "finished:completed" ]]; then
    if [[ "$status" != finished* ]]; then
      bgwait timeout 30 flwr stop "$run_id" "$conn" >/dev/null 2>&1 || true
    fi
    return 1
  fi
}
