#!/usr/bin/env bash
# Builds the "real host" root filesystem the contract tests run real host
# tools in: Debian bookworm with linux-headers-amd64 (Debian's split header
# tree), the compiler those headers name (gcc-12), make, kmod and git. The
# tests mount it read-only under an overlay per test and run the node
# agent's kmd build against it for real (chroot ROOT make …), and the real
# git, modinfo, depmod and modprobe beside the fakes.
#
# Cached in .cache/realhost-rootfs (git-ignored; or $ROLLBOOK_REALHOST_CACHE,
# e.g. a directory kept across CI clones) and rebuilt only when the package
# list changes. Prints the root's path last. Needs root (debootstrap);
# installs debootstrap with apt-get when missing. DEBIAN_MIRROR overrides the
# mirror, which defaults to this machine's apt one.
set -euo pipefail
cd "$(dirname "$0")/.."

suite=bookworm
packages=(linux-headers-amd64 gcc-12 make kmod git)
cache=${ROLLBOOK_REALHOST_CACHE:-$PWD/.cache/realhost-rootfs}
rootfs=$cache/root

fail() { echo "realhost-rootfs: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap)"

mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$( { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2; exit}'; } || true)
fi
if [ -z "$mirror" ]; then
  mirror=$( { grep -hE '^deb\s' /etc/apt/sources.list 2>/dev/null | awk '{print $2; exit}'; } || true)
fi
[ -n "$mirror" ] || fail "no Debian mirror: set DEBIAN_MIRROR"

key=$(printf '%s\n' "$suite" "${packages[@]}" | sha256sum | cut -c1-16)
start=$SECONDS
if [ "$(cat "$cache/key" 2>/dev/null)" != "$key" ]; then
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  rm -rf "$cache"
  mkdir -p "$cache"
  echo "realhost-rootfs: debootstrap $suite (${packages[*]}) into $rootfs" >&2
  include=$(IFS=,; echo "${packages[*]}")
  if ! debootstrap --variant=minbase --include="$include" "$suite" "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    tail -n 30 "$cache/debootstrap.log" >&2
    fail "debootstrap failed (log: $cache/debootstrap.log)"
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  ls "$rootfs/lib/modules" | grep -q . || fail "no /lib/modules/<kver> in $rootfs (linux-headers-amd64?)"
  echo "$key" >"$cache/key"
  echo "realhost-rootfs: built in $((SECONDS - start))s" >&2
else
  echo "realhost-rootfs: cached ($cache, key $key)" >&2
fi
echo "$rootfs"
