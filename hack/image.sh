#!/usr/bin/env bash
# Builds the node-agent image, the one image helpers run from in the sim
# and in a release (`make image`): the root filesystem hack/image-rootfs.sh
# builds (as root, cached; or $ROLLBOOK_TT_IMAGE_ROOTFS, one built before),
# and the OCI image of it with this tree's static kubectl-tt on top
# (hack/nodeimage, internal/nodeimage: reproducible, seconds when only the
# agent changed), written to .cache/node-agent-image (or
# $ROLLBOOK_IMAGE_LAYOUT). Prints the layout's path last; the image's
# reference by digest goes to stderr with the build's summary.
# $ROLLBOOK_VERSION (vX.Y.Z) and $ROLLBOOK_REVISION (a commit) stamp a
# release's agent and labels.
#
# --optional: without root and without $ROLLBOOK_TT_IMAGE_ROOTFS, print
# nothing and succeed (make test then runs without an image, and the sim
# refuses helpers saying why); any other failure still fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

rootfs=${ROLLBOOK_TT_IMAGE_ROOTFS:-}
if [ -z "$rootfs" ]; then
  if [ "$(id -u)" != 0 ]; then
    [ "${1:-}" = --optional ] && exit 0
    echo "image: needs root to build the root filesystem (debootstrap, chroot), or ROLLBOOK_TT_IMAGE_ROOTFS" >&2
    exit 1
  fi
  rootfs=$(bash hack/image-rootfs.sh | tail -1)
fi
layout=${ROLLBOOK_IMAGE_LAYOUT:-$PWD/.cache/node-agent-image}
go run ./hack/nodeimage build --rootfs "$rootfs" --out "$layout" \
  --version "${ROLLBOOK_VERSION:-}" --revision "${ROLLBOOK_REVISION:-}" >&2
echo "$layout"
