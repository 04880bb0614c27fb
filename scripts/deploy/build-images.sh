#!/usr/bin/env bash
# Builds the deployment images with no container registry: first the local FROM images
# (scripts/deploy/build-base-images.sh), then toolgate/gateway and toolgate/worker from
# deploy/node/Dockerfile. Docker's layer cache makes a rerun with unchanged sources take
# seconds; the dependency layer is rebuilt only when pnpm-lock.yaml changes.
#
# The sandbox images the worker starts are built separately: scripts/sandbox/build-images.sh.
#
# Env: TOOLGATE_IMAGE_TAG (local), SKIP_BASE=1 (assume the base images exist), plus those of
#      build-base-images.sh.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tag=${TOOLGATE_IMAGE_TAG:-local}
export DOCKER_BUILDKIT=0
started=$(date +%s)
log() { printf '[deploy-images +%ss] %s\n' "$(($(date +%s) - started))" "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "${SKIP_BASE:-0}" = 1 ] || bash "$repo/scripts/deploy/build-base-images.sh"

logdir=$(mktemp -d /tmp/toolgate-deploy-build.XXXXXX)
for target in gateway worker; do
  log "docker build --target $target -> toolgate/$target:$tag"
  if ! docker build --force-rm --label toolgate.deploy=1 -f "$repo/deploy/node/Dockerfile" --target "$target" -t "toolgate/$target:$tag" \
    "$repo" >"$logdir/$target.log" 2>&1; then
    tail -n 40 "$logdir/$target.log" >&2
    die "docker build of toolgate/$target:$tag failed (log: $logdir/$target.log)"
  fi
  log "toolgate/$target:$tag ready ($(docker image inspect -f '{{.Id}}' "toolgate/$target:$tag" | cut -c8-19))"
done
rm -rf "$logdir"
# Earlier builds of these tags, now untagged (only ours: labelled toolgate.deploy=1).
docker image prune -f --filter label=toolgate.deploy=1 >/dev/null 2>&1 || true
log "done"
