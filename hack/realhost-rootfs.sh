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
# shellcheck source=lib/rootfs.sh
. "$(dirname "$0")/lib/rootfs.sh"
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap)"

cached_rootfs realhost-rootfs "$suite" "$cache" "${packages[@]}"
ls "$rootfs/lib/modules" | grep -q . || fail "no /lib/modules/<kver> in $rootfs (linux-headers-amd64?)"
echo "$rootfs"
