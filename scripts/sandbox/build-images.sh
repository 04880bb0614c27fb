#!/usr/bin/env bash
# Builds the sandbox images with no container registry: a Debian base from debootstrap
# (`docker import`), then deploy/sandbox/{common,python,shell,node} with `docker build` (apt
# inside the build reaches Debian's mirror; node's Node.js and MCP servers come from the npm
# registry, staged on the host with npm). Exports each image's root filesystem to
# deploy/sandbox/.build/rootfs/<name> for the bwrap driver, and compiles the seccomp policy
# (packages/sandbox/seccomp/profile.json) into deploy/sandbox/.build/seccomp/sandbox.bpf, the
# filter the bwrap driver loads (Debian's python3-seccomp, inside an image build).
#
# Idempotent: an image whose `toolgate.hash` label matches the hash of its build inputs is
# kept, and so is a rootfs whose stamp matches. Force a rebuild with FORCE=1.
#
# Env: SANDBOX_SUITE (bookworm), SANDBOX_MIRROR (the Debian mirror apt already uses),
#      SANDBOX_BUILD_DIR (deploy/sandbox/.build), SANDBOX_IMAGES ("python shell node"), FORCE,
#      SANDBOX_NODE_VERSION (24.21.0: Node.js in the node image, the npm package
#      node-linux-<arch>), SANDBOX_NPM_SERVERS (extra "<package>@<version> ..." for upstreams'
#      `npm:`, installed into the node image next to deploy/sandbox/node/mcp/package.json's).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
src="$repo/deploy/sandbox"
build_dir=${SANDBOX_BUILD_DIR:-$src/.build}
suite=${SANDBOX_SUITE:-bookworm}
images=${SANDBOX_IMAGES:-python shell node}
node_version=${SANDBOX_NODE_VERSION:-24.21.0}
npm_servers=${SANDBOX_NPM_SERVERS:-}
force=${FORCE:-0}
export DOCKER_BUILDKIT=0 # the classic builder needs no buildx plugin and no frontend image

build_labels=()
base_tag="toolgate/sandbox-base:$suite"
common_tag="toolgate/sandbox-common:local"
started=$(date +%s)

log() { printf '[sandbox-images +%ss] %s\n' "$(($(date +%s) - started))" "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v docker >/dev/null || die "docker CLI missing (run scripts/sandbox/ensure-docker.sh)"
docker info >/dev/null 2>&1 || die "docker daemon not answering (run scripts/sandbox/ensure-docker.sh)"

# The Debian mirror apt on this host already uses (deb822 or one-line sources), else deb.debian.org.
detect_mirror() {
  local m=""
  m=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -E '/debian/?$' | head -n1 || true)
  if [ -z "$m" ]; then
    m=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}' | grep -E '/debian/?$' | head -n1 || true)
  fi
  echo "${m:-http://deb.debian.org/debian}"
}
mirror=${SANDBOX_MIRROR:-$(detect_mirror)}

label_of() { docker image inspect -f '{{ index .Config.Labels "toolgate.hash" }}' "$1" 2>/dev/null || true; }

# Hash of a build context plus its parent's hash, so a changed base rebuilds its children.
context_hash() {
  local dir=$1 parent=$2
  (cd "$dir" && find . -type f -print0 | sort -z | xargs -0 sha256sum; echo "parent=$parent") | sha256sum | cut -c1-16
}

# 1. Base image from debootstrap.
base_hash=$(printf 'suite=%s variant=minbase v1' "$suite" | sha256sum | cut -c1-16)
if [ "$force" != 1 ] && [ "$(label_of "$base_tag")" = "$base_hash" ]; then
  log "base $base_tag up to date ($base_hash)"
else
  command -v debootstrap >/dev/null || die "debootstrap missing (run scripts/sandbox/ensure-docker.sh)"
  root="$build_dir/debootstrap-$suite"
  rm -rf "$root"
  mkdir -p "$root"
  log "debootstrap --variant=minbase $suite from $mirror (about a minute)"
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$build_dir/debootstrap.log" 2>&1 \
    || { tail -n 20 "$build_dir/debootstrap.log"; die "debootstrap failed (log: $build_dir/debootstrap.log)"; }
  # Same suites the host uses: updates and security fixes, from the same mirror family.
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
  rm -rf "$root"
  log "base $base_tag built ($base_hash)"
fi

build_image() {
  local name=$1 tag=$2 parent_tag=$3 parent_hash=$4 context hash
  context=${5:-$src/$name}
  hash=${6:-$(context_hash "$context" "$parent_hash")}
  if [ "$force" != 1 ] && [ "$(label_of "$tag")" = "$hash" ]; then
    log "$tag up to date ($hash)"
  else
    # A 7th argument stages the context first (only when the image is out of date).
    [ -z "${7:-}" ] || "$7" "$context"
    log "docker build $tag ($hash)"
    mkdir -p "$build_dir"
    docker build --label "toolgate.hash=$hash" ${build_labels[@]+"${build_labels[@]}"} \
      --build-arg "BASE=$parent_tag" -t "$tag" "$context" \
      >"$build_dir/build-$name.log" 2>&1 \
      || { tail -n 30 "$build_dir/build-$name.log" >&2; die "docker build of $tag failed (log: $build_dir/build-$name.log)"; }
    log "$tag built"
  fi
  echo "$hash"
}

# 2. Images.
common_hash=$(build_image common "$common_tag" "$base_tag" "$base_hash")

# 3. The seccomp filter for bwrap: compiled in an image build, then copied out. The context is
# deploy/sandbox/seccomp plus the policy, which lives with the driver code that also hands it
# to Docker.
seccomp_ctx="$build_dir/seccomp-context"
rm -rf "$seccomp_ctx"
mkdir -p "$seccomp_ctx" "$build_dir/seccomp"
cp "$src/seccomp/Dockerfile" "$src/seccomp/compile.py" "$seccomp_ctx/"
cp "$repo/packages/sandbox/seccomp/profile.json" "$seccomp_ctx/profile.json"
seccomp_tag="toolgate/sandbox-seccomp:local"
seccomp_hash=$(build_image seccomp "$seccomp_tag" "$common_tag" "$common_hash" "$seccomp_ctx")
bpf="$build_dir/seccomp/sandbox.bpf"
if [ "$force" != 1 ] && [ -s "$bpf" ] && [ "$(cat "$bpf.hash" 2>/dev/null)" = "$seccomp_hash" ]; then
  log "seccomp filter $bpf up to date"
else
  cid=$(docker create --label toolgate.export=1 "$seccomp_tag")
  docker cp "$cid:/seccomp.bpf" "$bpf.tmp.$$" >/dev/null
  docker rm -f "$cid" >/dev/null
  [ -s "$bpf.tmp.$$" ] || die "seccomp filter came out empty"
  mv "$bpf.tmp.$$" "$bpf"
  echo "$seccomp_hash" >"$bpf.hash"
  log "seccomp filter $bpf ready ($(($(stat -c %s "$bpf") / 8)) BPF instructions)"
fi
rm -rf "$seccomp_ctx"

# The node image's context, staged only when the image is out of date: Node.js (the npm
# registry's node-linux-<arch> package) and `npm ci` of the pinned servers, plus
# SANDBOX_NPM_SERVERS. npm is the host's (the toolchain scripts/lib/bootstrap.sh installs).
stage_node() {
  local ctx=$1 arch
  command -v npm >/dev/null || export PATH="$HOME/.cache/toolgate/toolchain/bin:$PATH"
  command -v npm >/dev/null || die "npm missing (source scripts/lib/bootstrap.sh && bootstrap)"
  case "$(uname -m)" in x86_64) arch=x64 ;; aarch64) arch=arm64 ;; *) die "no Node.js package for $(uname -m)" ;; esac
  rm -rf "$ctx"
  mkdir -p "$ctx/node" "$ctx/mcp"
  cp "$src/node/Dockerfile" "$ctx/"
  cp "$src/node/mcp/package.json" "$src/node/mcp/package-lock.json" "$src/node/mcp/run.mjs" "$ctx/mcp/"
  log "staging node-linux-$arch@$node_version and the MCP servers (npm)"
  (cd "$ctx/node" && npm pack --silent "node-linux-$arch@$node_version" >/dev/null \
    && tar -xzf ./*.tgz --strip-components=1 && rm -f ./*.tgz) >&2 \
    || die "npm pack node-linux-$arch@$node_version failed"
  # --ignore-scripts: no install script runs on the host; the servers are plain JavaScript.
  (cd "$ctx/mcp" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error) >&2 \
    || die "npm ci of deploy/sandbox/node/mcp failed"
  if [ -n "$npm_servers" ]; then
    # shellcheck disable=SC2086 # a list of package@version words
    (cd "$ctx/mcp" && npm install --no-save --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error $npm_servers) >&2 \
      || die "npm install of SANDBOX_NPM_SERVERS ($npm_servers) failed"
  fi
}

# "<package>@<version> ..." the node image has for upstreams' `npm:` (its label, for doctor).
node_servers() {
  # shellcheck disable=SC2016 # node code, not shell
  node -e 'const p = require(process.argv[1]); const extra = process.argv.slice(2).map((s) => s.slice(0, s.lastIndexOf("@")));
    console.log([...Object.keys(p.dependencies), ...extra].map((n) => `${n}@${require(`${process.argv[1].replace(/package.json$/, "")}node_modules/${n}/package.json`).version}`).join(" "))' \
    "$1/mcp/package.json" $npm_servers
}

mkdir -p "$build_dir/rootfs"
for name in $images; do
  tag="toolgate/sandbox-$name:local"
  if [ "$name" = node ]; then
    # Hashed from its inputs, not the staged tree: an up-to-date image needs no npm at all.
    node_hash=$( (context_hash "$src/node" "$common_hash"; echo "node=$node_version servers=$npm_servers") | sha256sum | cut -c1-16)
    # The pinned servers (and SANDBOX_NPM_SERVERS) as the image's label, once they are staged.
    build_labels=()
    label_node() { stage_node "$1" && build_labels=(--label "toolgate.npm-servers=$(node_servers "$1")"); }
    hash=$(build_image node "$tag" "$common_tag" "$common_hash" "$build_dir/node-context" "$node_hash" label_node)
    build_labels=()
    rm -rf "$build_dir/node-context"
  else
    hash=$(build_image "$name" "$tag" "$common_tag" "$common_hash")
  fi

  # 4. Root filesystem for bwrap, swapped in atomically.
  dest="$build_dir/rootfs/$name"
  stamp="$build_dir/rootfs/$name.hash"
  stamp_value="$hash export-v2"
  if [ "$force" != 1 ] && [ -d "$dest" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$stamp_value" ]; then
    log "rootfs $dest up to date"
    continue
  fi
  log "exporting $tag -> $dest"
  tmp="$dest.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cid=$(docker create --label toolgate.export=1 "$tag")
  docker export "$cid" | tar -C "$tmp" --numeric-owner -x
  docker rm -f "$cid" >/dev/null
  # docker export leaves these as empty placeholders; bwrap needs them to be plain files.
  : >"$tmp/etc/resolv.conf"
  # The image's ENV is not part of its filesystem; the bwrap driver reads it from here.
  docker image inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$tag" | sed '/^$/d' >"$tmp/etc/toolgate-sandbox.env"
  rm -rf "$dest.old"
  [ -d "$dest" ] && mv "$dest" "$dest.old"
  mv "$tmp" "$dest"
  rm -rf "$dest.old"
  echo "$stamp_value" >"$stamp"
  log "rootfs $dest ready"
done

log "done: images $(for n in $images; do printf 'toolgate/sandbox-%s:local ' "$n"; done)"
