#!/usr/bin/env bash
# Makes sure this host can run sandboxes: installs docker.io, bubblewrap and debootstrap from
# Debian when missing, and starts dockerd in the background when `docker info` does not
# answer, then waits for it. Safe to run any number of times.
#
# Env: DOCKERD_LOG (/tmp/toolgate-dockerd.log), DOCKER_WAIT_SECONDS (60).
set -euo pipefail

started=$(date +%s)
log() { printf '[ensure-docker +%ss] %s\n' "$(($(date +%s) - started))" "$*" >&2; }
die() { log "error: $*"; exit 1; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

missing=()
command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || missing+=(docker.io)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} (apt)"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "docker.io, bubblewrap, debootstrap present"
fi

if docker info >/dev/null 2>&1; then
  log "docker daemon answering"
  exit 0
fi

dockerd_bin=$(command -v dockerd || echo /usr/sbin/dockerd)
logfile=${DOCKERD_LOG:-/tmp/toolgate-dockerd.log}
log "starting $dockerd_bin in the background (log: $logfile)"
# setsid: the daemon must outlive this script and the CI step that ran it.
as_root setsid "$dockerd_bin" >"$logfile" 2>&1 </dev/null &
echo "$!" >/tmp/toolgate-dockerd.pid

wait_s=${DOCKER_WAIT_SECONDS:-60}
for _ in $(seq "$wait_s"); do
  if docker info >/dev/null 2>&1; then
    log "docker daemon answering (pid $(cat /tmp/toolgate-dockerd.pid))"
    exit 0
  fi
  sleep 1
done
tail -n 30 "$logfile" >&2 || true
die "dockerd did not answer within ${wait_s}s"
