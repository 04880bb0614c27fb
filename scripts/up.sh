#!/usr/bin/env bash
# One command to run toolgate locally: installs what is missing (Node, pnpm, the workspace's
# packages, redis-server unless REDIS_URL is set), then hands over to `toolgate up`, which
# starts Redis (unless REDIS_URL is set), builds the sandbox images (unless
# TOOLGATE_SANDBOX=off) and the operator console (when console/ changed since its last build),
# then the worker and the gateway. Ctrl-C stops everything it started.
# Arguments go to `toolgate up` (e.g. --json, --config FILE).
set -euo pipefail
source "$(dirname "$0")/lib/bootstrap.sh"
bootstrap
[ -n "${REDIS_URL:-}" ] || ensure_redis_server
cd "$ROOT"
exec node packages/cli/bin/toolgate.mjs up "$@"
