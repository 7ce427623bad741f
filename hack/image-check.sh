#!/usr/bin/env bash
# Checks the node-agent helper image without an image builder, a registry,
# GitHub release assets or PyPI:
#  1. build/Containerfile pins its base by digest and checks every download
#     (sha256sum -c, pip --require-hashes); placeholders the release pipeline
#     fills are listed.
#  2. The image's root filesystem is built from build/packages.txt
#     (debootstrap, the suite of the Containerfile's base).
#  3. What only the release can fetch gets a STAND-IN at the path the
#     Containerfile installs it to: tt-smi (a release binary) where the
#     Containerfile copies it, tt-flash (PyPI) in a real virtualenv made with
#     the image's python3 where the Containerfile makes it. The stand-ins
#     only answer --version; they prove the paths and PATH order, not the
#     tools.
#  4. The static kubectl-tt goes where the Containerfile copies it, and
#     `kubectl-tt node-agent requirements --check-image` runs inside the root
#     filesystem (chroot, the Containerfile's PATH): every program and file
#     the agent's requirements table places in the image must resolve there
#     and run. There is no list of tools in this script.
#
# The root filesystem is cached in .cache/node-agent-rootfs (git-ignored; or
# $ROLLBOOK_IMAGE_CACHE, e.g. a directory kept across CI clones) and rebuilt
# only when the package list or the suite change. Needs root (debootstrap,
# chroot); installs debootstrap with apt-get when missing. DEBIAN_MIRROR
# overrides the mirror, which defaults to this machine's apt one.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

containerfile=${ROLLBOOK_CONTAINERFILE:-build/Containerfile}
packages_file=${ROLLBOOK_PACKAGES_FILE:-build/packages.txt}
cache=${ROLLBOOK_IMAGE_CACHE:-.cache/node-agent-rootfs}
rootfs=$cache/root

fail() { echo "image-check: $*" >&2; exit 1; }
# shellcheck source=lib/rootfs.sh
. "$(dirname "$0")/lib/rootfs.sh"
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap and chroot)"

# 1. Pins.
base=$(sed -n 's/^ARG DEBIAN_BASE=//p' "$containerfile" | head -1)
[[ $base =~ ^debian:([a-z]+)-slim@sha256:([0-9a-f]{64}|__PIN_[A-Z0-9_]+__)$ ]] ||
  fail "$containerfile: ARG DEBIAN_BASE=$base is not debian:<suite>-slim@sha256:<digest>"
suite=${BASH_REMATCH[1]}
grep -qE '^FROM \$\{DEBIAN_BASE\}' "$containerfile" || fail "$containerfile: FROM is not \${DEBIAN_BASE}"
if grep -E '^FROM ' "$containerfile" | grep -vqE '^FROM \$\{DEBIAN_BASE\}'; then
  fail "$containerfile: every stage must start FROM \${DEBIAN_BASE} (the pinned digest)"
fi
if grep -q 'curl ' "$containerfile" && ! grep -q 'sha256sum -c' "$containerfile"; then
  fail "$containerfile downloads with curl without a sha256sum -c check"
fi
if grep -q 'pip install' "$containerfile" && ! grep -q 'pip install.*--require-hashes' "$containerfile"; then
  fail "$containerfile: pip install without --require-hashes"
fi
mapfile -t placeholders < <(grep -oE '__PIN_[A-Z0-9_]+__' "$containerfile" | sort -u)
echo "image-check: base $base; ${#placeholders[@]} pin(s) the release pipeline fills: ${placeholders[*]:-none}"

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

# 2. The root filesystem.
mapfile -t packages < <(grep -v '^\s*#' "$packages_file" | grep -v '^\s*$')
cached_rootfs image-check "$suite" "$cache" "${packages[@]}"

in_image() { chroot "$rootfs" /usr/bin/env -i PATH="$image_path" "$@"; }

# 3. Stand-ins, rewritten on every run (a moved path leaves none behind).
while read -r old; do rm -rf "${rootfs:?}$old"; done < <(cat "$cache/stand-ins" 2>/dev/null || true)
printf '%s\n' "$venv" "$smi_dest" "$agent_dest" >"$cache/stand-ins"
in_image python3 -m venv "$venv" || fail "python3 -m venv $venv failed inside the image (python3-venv?)"
stand_in() { # path version tool
  mkdir -p "$rootfs$(dirname "$1")"
  printf '#!/bin/sh\n# STAND-IN written by hack/image-check.sh: the release installs the real %s here.\n' "$3" >"$rootfs$1"
  printf 'case "$1" in --version) echo "%s";; *) echo "%s stand-in: only --version" >&2; exit 2;; esac\n' "$2" "$3" >>"$rootfs$1"
  chmod 0755 "$rootfs$1"
}
smi_version=$(sed -n 's/^ARG TT_SMI_VERSION=//p' "$containerfile")
flash_version=$(sed -n 's/^ARG TT_FLASH_VERSION=//p' "$containerfile")
stand_in "$smi_dest" "$smi_version" tt-smi
stand_in "$venv/bin/tt-flash" "tt-flash $flash_version" tt-flash
echo "image-check: STAND-INS (not the real tools): tt-smi $smi_version at $smi_dest, tt-flash $flash_version at $venv/bin/tt-flash"

# 4. The agent, as the release builds it (static, no cgo), and its table.
mkdir -p "$rootfs$(dirname "$agent_dest")"
CGO_ENABLED=0 go build -trimpath -o "$rootfs$agent_dest" ./cmd/kubectl-tt
in_image kubectl-tt node-agent --help | grep -q 'requirements' || fail "kubectl-tt node-agent --help does not list requirements"
if ! in_image kubectl-tt node-agent requirements --check-image; then
  fail "the image lacks what the node agent runs (see MISSING above; the table: kubectl-tt node-agent requirements)"
fi
echo "image-check: passed in $((SECONDS - start))s (tt-smi and tt-flash were stand-ins; the release installs the real ones)"
