#!/usr/bin/env bash
# One command to run toolgate locally: installs what is missing, starts Redis (unless REDIS_URL
# is set), builds the sandbox images (unless TOOLGATE_SANDBOX=off), then the worker and the
# gateway. Ctrl-C stops everything it started.
set -euo pipefail
source "$(dirname "$0")/lib/bootstrap.sh"
bootstrap

pids=()
redis_pid=
cleanup() {
  # Services first (they finish their calls, then let go of Redis), Redis last.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "$redis_pid" ]; then kill -TERM "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${REDIS_URL:-}" ]; then
  ensure_redis_server
  port=${TOOLGATE_REDIS_PORT:-6379}
  if redis-cli -p "$port" ping >/dev/null 2>&1; then
    log "using the Redis already answering on 127.0.0.1:$port"
  else
    log "starting redis-server on 127.0.0.1:$port"
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --loglevel warning &
    redis_pid=$!
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  export REDIS_URL="redis://127.0.0.1:$port"
fi

if [ "${TOOLGATE_SANDBOX:-on}" != off ]; then
  bash "$ROOT/scripts/sandbox/ensure-docker.sh"
  bash "$ROOT/scripts/sandbox/build-images.sh"
fi

# Tracing turns on when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER) is set.
# exec: the background job is the node process itself, so the cleanup signal reaches it.
run() { exec node --conditions=@toolgate/source --import tsx --import ./packages/telemetry/src/register.ts "$@"; }
cd "$ROOT"
run services/worker/src/main.ts &
pids+=($!)
run services/gateway/src/main.ts &
pids+=($!)
wait -n "${pids[@]}"
