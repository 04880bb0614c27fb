#!/usr/bin/env bash
# Builds the local images the deployment images start FROM, with no container registry:
#   toolgate/sandbox-base:<suite>  Debian from debootstrap + `docker import` (the tag and recipe of
#                                  scripts/sandbox/build-images.sh; reused when it already exists)
#   toolgate/node:24               that base + the node binary from the npm registry's
#                                  node-linux-<arch> package (what `npm i -g node@24` installs)
#   toolgate/node-build:24         toolgate/node:24 + pnpm (packageManager in package.json)
#   toolgate/redis:7               that base + Debian's redis-server
#   toolgate/prometheus:2          that base + Debian's prometheus (for hosts with no registry;
#                                  the compose test runs it; PROMETHEUS_IMAGE selects it)
#
# Idempotent: each image carries a `toolgate.hash` label (hash of its Dockerfile, its inputs and
# its parent image's id) and is skipped when that matches. FORCE=1 rebuilds.
#
# Env: SANDBOX_SUITE (bookworm), SANDBOX_MIRROR (the mirror apt already uses),
#      NODE_VERSION (exact, 24.21.0), PNPM_VERSION (from package.json),
#      TOOLGATE_CACHE (~/.cache/toolgate: npm tarballs), FORCE,
#      TOOLGATE_BUILD_CA_CERTS (files of extra CAs for the builder image;
#      default /usr/local/share/ca-certificates/*.crt).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
suite=${SANDBOX_SUITE:-bookworm}
node_version=${NODE_VERSION:-24.21.0}
pnpm_version=${PNPM_VERSION:-$(sed -n 's/.*"packageManager": *"pnpm@\([^"]*\)".*/\1/p' "$repo/package.json")}
cache=${TOOLGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolgate}/deploy
force=${FORCE:-0}
export DOCKER_BUILDKIT=0 # classic builder: no buildx plugin, no frontend image to pull

base_tag="toolgate/sandbox-base:$suite"
node_tag="toolgate/node:${node_version%%.*}"
build_tag="toolgate/node-build:${node_version%%.*}"
redis_tag="toolgate/redis:7"
prometheus_tag="toolgate/prometheus:2"
started=$(date +%s)

log() { printf '[deploy-base +%ss] %s\n' "$(($(date +%s) - started))" "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v docker >/dev/null || die "docker CLI missing (run scripts/sandbox/ensure-docker.sh)"
docker info >/dev/null 2>&1 || die "docker daemon not answering (run scripts/sandbox/ensure-docker.sh)"
[ -n "$pnpm_version" ] || die "no pnpm version (packageManager in package.json, or PNPM_VERSION)"
case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) die "no node-linux package for $(uname -m)" ;;
esac

label_of() { docker image inspect -f '{{ index .Config.Labels "toolgate.hash" }}' "$1" 2>/dev/null || true; }
id_of() { docker image inspect -f '{{ .Id }}' "$1"; }

# 1. Base: the sandbox images' base, built the same way (same tag, same label) when missing, so
#    scripts/sandbox/build-images.sh takes it as up to date and neither script builds it twice.
if [ "$force" != 1 ] && docker image inspect "$base_tag" >/dev/null 2>&1; then
  log "base $base_tag present, reused"
else
  command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] \
    || die "debootstrap missing (run scripts/sandbox/ensure-docker.sh)"
  mirror=${SANDBOX_MIRROR:-}
  if [ -z "$mirror" ]; then
    mirror=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -E '/debian/?$' | head -n1 || true)
    [ -n "$mirror" ] || mirror=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}' | grep -E '/debian/?$' | head -n1 || true)
    mirror=${mirror:-http://deb.debian.org/debian}
  fi
  # Must stay equal to scripts/sandbox/build-images.sh's base_hash.
  base_hash=$(printf 'suite=%s variant=minbase v1' "$suite" | sha256sum | cut -c1-16)
  root=$(mktemp -d /tmp/toolgate-debootstrap.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  log "debootstrap --variant=minbase $suite from $mirror (about a minute)"
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.log" 2>&1 \
    || { tail -n 20 "$root.log" >&2; die "debootstrap failed (log: $root.log)"; }
  security=${mirror%/debian}/debian-security
  cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
EOF
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  log "docker import -> $base_tag"
  tar -C "$root" --numeric-owner -c . \
    | docker import --change "LABEL toolgate.hash=$base_hash" --change 'CMD ["/bin/bash"]' - "$base_tag" >/dev/null
  rm -rf "$root" "$root.log"
  trap - EXIT
  log "base $base_tag built"
fi

# A tarball from the npm registry, fetched once into the cache (exact versions need no network).
npm_tarball() {
  local spec=$1 file=$2
  if [ ! -s "$cache/$file" ]; then
    command -v npm >/dev/null || die "npm missing (needed once to fetch $spec)"
    mkdir -p "$cache"
    log "npm pack $spec"
    (cd "$cache" && npm pack --silent --prefer-offline "$spec" >/dev/null) || die "npm pack $spec failed"
    [ -s "$cache/$file" ] || die "npm pack $spec did not produce $file"
  fi
  echo "$cache/$file"
}

# Builds deploy/base/<dir> as <tag> FROM <parent> with extra context files; skipped when the
# label matches the hash of the Dockerfile, the extra files and the parent image's id.
build_image() {
  local dir=$1 tag=$2 parent_arg=$3 parent=$4
  shift 4
  local hash ctx
  hash=$({
    cat "$repo/deploy/base/$dir/Dockerfile"
    for f in "$@"; do sha256sum <"$f"; done
    echo "parent=$(id_of "$parent")"
  } | sha256sum | cut -c1-16)
  if [ "$force" != 1 ] && [ "$(label_of "$tag")" = "$hash" ]; then
    log "$tag up to date ($hash)"
    return
  fi
  ctx=$(mktemp -d /tmp/toolgate-deploy-ctx.XXXXXX)
  cp "$repo/deploy/base/$dir/Dockerfile" "$ctx/"
  for f in "$@"; do cp "$f" "$ctx/"; done
  log "docker build $tag ($hash)"
  if ! docker build --force-rm --label "toolgate.hash=$hash" --build-arg "$parent_arg=$parent" -t "$tag" "$ctx" >"$ctx.log" 2>&1; then
    tail -n 30 "$ctx.log" >&2
    rm -rf "$ctx"
    die "docker build of $tag failed (log: $ctx.log)"
  fi
  rm -rf "$ctx" "$ctx.log"
  log "$tag built"
}

node_tgz=$(npm_tarball "node-linux-$arch@$node_version" "node-linux-$arch-$node_version.tgz")
pnpm_tgz=$(npm_tarball "pnpm@$pnpm_version" "pnpm-$pnpm_version.tgz")
# Docker COPY needs fixed names in the context; the node image gets the bare binary.
stage=$(mktemp -d /tmp/toolgate-deploy-files.XXXXXX)
trap 'rm -rf "$stage"' EXIT
tar -xzf "$node_tgz" -C "$stage" package/bin/node
mv "$stage/package/bin/node" "$stage/node"
ln -s "$pnpm_tgz" "$stage/pnpm.tgz"
# The host's extra CA certificates (e.g. a TLS-inspecting proxy in front of the npm registry)
# go into the builder image only, so `pnpm fetch` inside `docker build` trusts what npm here does.
: >"$stage/extra-ca.crt"
for f in ${TOOLGATE_BUILD_CA_CERTS:-/usr/local/share/ca-certificates/*.crt}; do
  [ -f "$f" ] && { cat "$f"; echo; } >>"$stage/extra-ca.crt"
done

build_image node "$node_tag" BASE "$base_tag" "$stage/node"
build_image node-build "$build_tag" NODE_IMAGE "$node_tag" "$stage/pnpm.tgz" "$stage/extra-ca.crt"
build_image redis "$redis_tag" BASE "$base_tag"
build_image prometheus "$prometheus_tag" BASE "$base_tag"

log "done: $base_tag $node_tag $build_tag $redis_tag $prometheus_tag"
