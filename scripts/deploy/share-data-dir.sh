#!/usr/bin/env bash
# Makes TOOLGATE_DATA_DIR (default /var/lib/toolgate) a shared mount on this host, which
# deploy/compose/warm-workspaces.yml needs (docker refuses an `rshared` bind whose source is not
# on a shared mount). Idempotent; not persistent across reboots — for that, an fstab line such as
#   /var/lib/toolgate  /var/lib/toolgate  none  bind,shared  0 0
# Undo: umount -l "$TOOLGATE_DATA_DIR" (with the workers stopped).
set -euo pipefail
dir=${TOOLGATE_DATA_DIR:-/var/lib/toolgate}
log() { printf '[share-data-dir] %s\n' "$*" >&2; }
[ "$(id -u)" = 0 ] || { log "error: needs root (mount)"; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd -P)
# mountinfo field 5 is the mount point, the optional fields (7…) carry shared:N.
entry=$(awk -v d="$dir" '$5 == d' /proc/self/mountinfo | tail -n1)
if [ -z "$entry" ]; then
  mount --bind "$dir" "$dir"
  log "bind-mounted $dir onto itself"
fi
if ! awk -v d="$dir" '$5 == d' /proc/self/mountinfo | tail -n1 | grep -q ' shared:'; then
  mount --make-rshared "$dir"
fi
log "$dir is a shared mount"
