#!/usr/bin/env bash
# Builds the node-agent image's root filesystem without an image builder:
# the Debian packages of build/packages.txt (debootstrap, the suite of the
# Containerfile's base; hack/lib/rootfs.sh, locked and cached), STAND-INS at
# the paths the Containerfile installs what only the release can fetch
# (tt-smi's release binary, tt-flash in a real virtualenv made with the
# image's python3; they only answer --version), and the static
# (CGO_ENABLED=0) kubectl-tt where the Containerfile copies it. Prints the
# root's path last. hack/image-check.sh checks it; the sim runs helper pods
# inside it (sim up --tt-image-rootfs, env ROLLBOOK_TT_IMAGE_ROOTFS).
#
# Cached in .cache/node-agent-rootfs (git-ignored; or $ROLLBOOK_IMAGE_CACHE,
# e.g. a directory kept across CI clones); debootstrap runs again only when
# the package list or the suite change, the stand-ins and the agent are
# refreshed on every run (atomically: running helpers keep their files).
# Needs root (debootstrap, chroot). DEBIAN_MIRROR overrides the mirror.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

containerfile=${ROLLBOOK_CONTAINERFILE:-build/Containerfile}
packages_file=${ROLLBOOK_PACKAGES_FILE:-build/packages.txt}
cache=${ROLLBOOK_IMAGE_CACHE:-$PWD/.cache/node-agent-rootfs}
rootfs=$cache/root

fail() { echo "image-rootfs: $*" >&2; exit 1; }
# shellcheck source=lib/rootfs.sh
. "$(dirname "$0")/lib/rootfs.sh"
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap and chroot)"

base=$(sed -n 's/^ARG DEBIAN_BASE=//p' "$containerfile" | head -1)
[[ $base =~ ^debian:([a-z]+)-slim@ ]] || fail "$containerfile: ARG DEBIAN_BASE=$base is not debian:<suite>-slim@…"
suite=${BASH_REMATCH[1]}
# Where the Containerfile puts what only the release can fetch, and its PATH.
smi_dest=$(sed -n 's/^COPY --from=tt-smi \/tt-smi \(\/[^ ]*\)$/\1/p' "$containerfile")
[ -n "$smi_dest" ] || fail "$containerfile has no 'COPY --from=tt-smi /tt-smi <path>' line"
venv=$(grep -oE 'python3 -m venv /[^ ]+' "$containerfile" | head -1 | cut -d' ' -f4)
[ -n "$venv" ] || fail "$containerfile makes no virtualenv for tt-flash"
image_path=$(sed -n 's/^ENV PATH=//p' "$containerfile" | head -1)
[ -n "$image_path" ] || fail "$containerfile sets no ENV PATH"
agent_dest=$(sed -n 's/^COPY \$TARGETPLATFORM\/kubectl-tt \(\/[^ ]*\)$/\1/p' "$containerfile")
[ -n "$agent_dest" ] || fail "$containerfile does not copy \$TARGETPLATFORM/kubectl-tt"
grep -q "build/packages.txt" "$containerfile" || fail "$containerfile does not install build/packages.txt"

mapfile -t packages < <(grep -v '^\s*#' "$packages_file" | grep -v '^\s*$')
# Holds the cache's lock (fd 9) until this script exits.
cached_rootfs image-rootfs "$suite" "$cache" "${packages[@]}"

in_image() { chroot "$rootfs" /usr/bin/env -i PATH="$image_path" "$@"; }

# Stand-ins, rewritten on every run (a moved path leaves none behind).
while read -r old; do rm -rf "${rootfs:?}$old"; done < <(cat "$cache/stand-ins" 2>/dev/null || true)
printf '%s\n' "$venv" "$smi_dest" "$agent_dest" >"$cache/stand-ins"
in_image python3 -m venv "$venv" || fail "python3 -m venv $venv failed inside the image (python3-venv?)"
stand_in() { # path version tool
  mkdir -p "$rootfs$(dirname "$1")"
  printf '#!/bin/sh\n# STAND-IN written by hack/image-rootfs.sh: the release installs the real %s here.\n' "$3" >"$rootfs$1.tmp"
  printf 'case "$1" in --version) echo "%s";; *) echo "%s stand-in: only --version" >&2; exit 2;; esac\n' "$2" "$3" >>"$rootfs$1.tmp"
  chmod 0755 "$rootfs$1.tmp"
  mv -f "$rootfs$1.tmp" "$rootfs$1"
}
smi_version=$(sed -n 's/^ARG TT_SMI_VERSION=//p' "$containerfile")
flash_version=$(sed -n 's/^ARG TT_FLASH_VERSION=//p' "$containerfile")
stand_in "$smi_dest" "$smi_version" tt-smi
stand_in "$venv/bin/tt-flash" "tt-flash $flash_version" tt-flash
echo "image-rootfs: STAND-INS (not the real tools): tt-smi $smi_version at $smi_dest, tt-flash $flash_version at $venv/bin/tt-flash" >&2

# The agent, as the release builds it (static, no cgo); renamed into place so
# a helper running the old one keeps it.
mkdir -p "$rootfs$(dirname "$agent_dest")"
CGO_ENABLED=0 go build -trimpath -o "$rootfs$agent_dest.new" ./cmd/kubectl-tt
mv -f "$rootfs$agent_dest.new" "$rootfs$agent_dest"
# What the sim needs to run a container of this image: its PATH (ENV PATH).
printf 'PATH=%s\n' "$image_path" >"$cache/image.env"
echo "image-rootfs: ready in $((SECONDS - start))s" >&2
echo "$rootfs"
