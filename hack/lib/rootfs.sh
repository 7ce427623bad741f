# Sourced by hack/image-check.sh and hack/realhost-rootfs.sh: a Debian root
# filesystem from a package list, by debootstrap, kept in a cache folder and
# rebuilt only when the suite or the package list change.
#
#   cached_rootfs NAME SUITE CACHE PACKAGE...
#
# builds CACHE/root (NAME prefixes the messages, on stderr) and returns 0
# whether it built or found it; it exits 1 on failure. DEBIAN_MIRROR
# overrides the mirror, which defaults to this machine's apt one.

debian_mirror() {
  local mirror=${DEBIAN_MIRROR:-}
  if [ -z "$mirror" ]; then
    mirror=$( { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2; exit}'; } || true)
  fi
  if [ -z "$mirror" ]; then
    mirror=$( { grep -hE '^deb\s' /etc/apt/sources.list 2>/dev/null | awk '{print $2; exit}'; } || true)
  fi
  echo "$mirror"
}

cached_rootfs() {
  local name=$1 suite=$2 cache=$3
  shift 3
  local rootfs=$cache/root mirror key start=$SECONDS include
  mirror=$(debian_mirror)
  [ -n "$mirror" ] || { echo "$name: no Debian mirror: set DEBIAN_MIRROR" >&2; exit 1; }
  key=$(printf '%s\n' "$suite" "$@" | sha256sum | cut -c1-16)
  # One builder at a time: a second run waits, then finds the root built
  # (two at once once removed the root under a running debootstrap).
  mkdir -p "$(dirname "$cache")"
  exec 9>"$cache.lock"
  flock 9
  if [ "$(cat "$cache/key" 2>/dev/null)" = "$key" ]; then
    echo "$name: cached root filesystem ($cache, key $key)" >&2
    return 0
  fi
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  # Never delete through a mount: a debootstrap killed mid-run leaves /proc
  # mounted inside the root.
  local m
  while read -r m; do
    umount "$m" || { echo "$name: $m is mounted inside the cache; unmount it first" >&2; exit 1; }
  done < <(awk -v c="$cache/" 'index($2, c) == 1 {print $2}' /proc/mounts | sort -r)
  rm -rf "$cache"
  mkdir -p "$cache"
  echo "$name: debootstrap $suite ($*) into $rootfs" >&2
  include=$(IFS=,; echo "$*")
  if ! debootstrap --variant=minbase --include="$include" "$suite" "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    tail -n 30 "$cache/debootstrap.log" >&2
    echo "$name: debootstrap failed (log: $cache/debootstrap.log)" >&2
    exit 1
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  echo "$key" >"$cache/key"
  echo "$name: root filesystem built in $((SECONDS - start))s" >&2
}
