#!/usr/bin/env bash
# Checks the node-agent image as it is published: builds it (hack/image.sh:
# the root filesystem from build/node-agent.pins, the OCI image of it with
# this tree's kubectl-tt), unpacks the OCI layout's layers (each checked
# against its digest), mounts them as an overlay in a mount namespace of
# its own and runs `kubectl-tt node-agent requirements --check-image`
# inside (chroot, the image config's PATH): every program and file the
# agent's requirements table places in the image must resolve there and
# run. There is no list of tools in this script. Tools pinned "unverified"
# are stand-ins that answer --version only: they prove the paths and PATH
# order, not the tools; the image's label says so. Last, the image is built
# again from the same inputs into a fresh layout (nothing cached): the
# digest must be the same.
#
# Needs root (debootstrap, chroot, mount).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
start=$SECONDS

fail() { echo "image-check: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, chroot, mount)"

layout=$(bash hack/image.sh)
ref=$(go run ./hack/nodeimage ref "$layout")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/layers"
lower=$(go run ./hack/nodeimage unpack "$layout" "$tmp/layers")
image_path=$(go run ./hack/nodeimage env "$layout" PATH)
[ -n "$image_path" ] || fail "the image config sets no PATH"
mkdir -p "$tmp/upper" "$tmp/work" "$tmp/root"
# The mounts die with the namespace: nothing is left mounted.
unshare --mount --propagation private sh -eu -c '
  root=$2/root
  mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$root"
  mount -t proc proc "$root/proc"
  mount -t tmpfs -o mode=0755 tmpfs "$root/dev"
  for d in null zero random urandom; do : >"$root/dev/$d"; mount --bind "/dev/$d" "$root/dev/$d"; done
  in_image() { chroot "$root" /usr/bin/env -i PATH="$PATH_IN_IMAGE" "$@"; }
  PATH_IN_IMAGE=$3
  in_image kubectl-tt node-agent --help | grep -q requirements || { echo "image-check: kubectl-tt node-agent --help does not list requirements" >&2; exit 1; }
  in_image kubectl-tt node-agent requirements --check-image || {
    echo "image-check: the image lacks what the node agent runs (see MISSING above; the table: kubectl-tt node-agent requirements)" >&2
    exit 1
  }
' sh "$lower" "$tmp" "$image_path"
again=$(ROLLBOOK_IMAGE_LAYOUT=$tmp/again bash hack/image.sh 2>/dev/null)
again_ref=$(go run ./hack/nodeimage ref "$again")
[ "$again_ref" = "$ref" ] || fail "two builds from the same inputs differ: $ref, then $again_ref"
echo "image-check: $ref passed, rebuilt to the same digest, in $((SECONDS - start))s (tt-smi and tt-flash are stand-ins while build/node-agent.pins pins them unverified)"
