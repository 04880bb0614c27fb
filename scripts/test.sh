#!/usr/bin/env bash
# One command to test toolgate: installs what is missing (Node 24, pnpm, redis-server and redis-sentinel, the
# Docker engine, bubblewrap, the sandbox images, chromium), then typechecks, lints, checks formatting and runs every test
# against the real Redis, Docker and bubblewrap.
set -euo pipefail
source "$(dirname "$0")/lib/bootstrap.sh"
bootstrap
[ -n "${REDIS_URL:-}" ] || ensure_redis_server
ensure_redis_sentinel
if [ "${TOOLGATE_SANDBOX:-on}" != off ]; then
  bash "$ROOT/scripts/sandbox/ensure-docker.sh"
  bash "$ROOT/scripts/sandbox/build-images.sh"
  # The compose test (test/deploy) brings the stack up with Debian's docker-compose from
  # locally built images; building them here keeps that work out of the test run.
  command -v docker-compose >/dev/null || apt_install docker-compose
  bash "$ROOT/scripts/deploy/build-images.sh"
fi
# The console's browser test (test/console) drives Debian's chromium: no browser download.
[ -x /usr/bin/chromium ] || apt_install --no-install-recommends chromium
cd "$ROOT"
log "typecheck"
pnpm exec tsc -b
log "console build (typed against the gateway's API; the gateway serves console/dist)"
pnpm --filter @toolgate/console build
pnpm --filter @toolgate/examples typecheck
log "lint"
pnpm exec eslint .
pnpm run lint:cycles
pnpm exec prettier --check . >/dev/null || { pnpm exec prettier --check . ; exit 1; }
log "tests"
pnpm exec vitest run "$@"
log "example assistant loops (real SDKs against a fake model server)"
pnpm --filter @toolgate/examples test
