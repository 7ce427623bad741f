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

fail() { echo "image-check: $*" >&2; exit 1; }
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

# 2 and 3: the root filesystem, its stand-ins and the static agent
# (hack/image-rootfs.sh, which the sim's helper runner uses too).
rootfs=$(bash hack/image-rootfs.sh)
image_path=$(sed -n 's/^ENV PATH=//p' "$containerfile" | head -1)
in_image() { chroot "$rootfs" /usr/bin/env -i PATH="$image_path" "$@"; }

# 4. The agent's requirements table, checked inside the image.
in_image kubectl-tt node-agent --help | grep -q 'requirements' || fail "kubectl-tt node-agent --help does not list requirements"
if ! in_image kubectl-tt node-agent requirements --check-image; then
  fail "the image lacks what the node agent runs (see MISSING above; the table: kubectl-tt node-agent requirements)"
fi
echo "image-check: passed in $((SECONDS - start))s (tt-smi and tt-flash were stand-ins; the release installs the real ones)"
