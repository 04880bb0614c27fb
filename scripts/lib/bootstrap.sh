# Sourced by scripts/up.sh and scripts/test.sh: makes sure this machine has what toolgate needs
# (Node >= 22, pnpm as pinned in package.json, the workspace's packages, redis-server) and puts
# them on PATH. Installs only from the npm registry and Debian's packages. Idempotent.

log() { printf '\033[1m[toolgate]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLCHAIN=${TOOLGATE_TOOLCHAIN:-$HOME/.cache/toolgate/toolchain}
PNPM_VERSION=$(sed -n 's/.*"packageManager": *"pnpm@\([^"]*\)".*/\1/p' "$ROOT/package.json")

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else die "need root for: $*"; fi; }

APT_UPDATED=
apt_install() {
  command -v apt-get >/dev/null || die "apt-get not found; install $* by hand"
  if [ -z "$APT_UPDATED" ]; then
    log "apt-get update"
    as_root apt-get update -qq >/dev/null
    APT_UPDATED=1
  fi
  log "installing Debian packages: $*"
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

ensure_node() {
  [ -x "$TOOLCHAIN/bin/node" ] && export PATH="$TOOLCHAIN/bin:$PATH"
  if [ "$(node_major)" -lt 22 ]; then
    command -v npm >/dev/null || apt_install nodejs npm
    log "installing Node.js 24 LTS from the npm registry into $TOOLCHAIN"
    npm install -g --silent --prefix "$TOOLCHAIN" node@24 >/dev/null 2>&1 || die "could not install node@24"
    export PATH="$TOOLCHAIN/bin:$PATH"
  fi
  [ "$(node_major)" -ge 22 ] || die "Node.js >= 22 is required (found $(node -v 2>/dev/null))"
  if [ "$(pnpm -v 2>/dev/null)" != "$PNPM_VERSION" ]; then
    log "installing pnpm $PNPM_VERSION"
    npm install -g --silent --prefix "$TOOLCHAIN" "pnpm@$PNPM_VERSION" >/dev/null 2>&1 || die "could not install pnpm"
    export PATH="$TOOLCHAIN/bin:$PATH"
  fi
}

ensure_packages() {
  local stamp="$ROOT/node_modules/.toolgate-lock"
  if [ ! -f "$stamp" ] || ! cmp -s "$ROOT/pnpm-lock.yaml" "$stamp"; then
    log "installing workspace packages (pnpm install --frozen-lockfile)"
    (cd "$ROOT" && pnpm install --frozen-lockfile --reporter=silent) || die "pnpm install failed"
    cp "$ROOT/pnpm-lock.yaml" "$stamp"
  fi
}

ensure_redis_server() {
  command -v redis-server >/dev/null || apt_install redis-server
  # Debian's package starts a system instance on 6379; toolgate starts its own where it needs one.
}

ensure_redis_sentinel() {
  # test/redis-ha starts its own master, replicas and sentinels, whatever REDIS_URL says.
  # Debian ships the sentinel as its own package (a system instance on 26379, left alone).
  command -v redis-server >/dev/null || apt_install redis-server
  command -v redis-sentinel >/dev/null || apt_install redis-sentinel
}

bootstrap() {
  ensure_node
  ensure_packages
  log "node $(node -v), pnpm $(pnpm -v)"
}
