#!/usr/bin/env bash
# The node-agent image of a release, in two steps a release workflow runs in
# two jobs (docs/release.md):
#
#   release-image.sh build VERSION COMMIT   (root) builds it with hack/image.sh,
#       the version and commit stamped into its agent and labels, into
#       .cache/release/node-agent-image; prints its reference by digest.
#   release-image.sh push LAYOUT VERSION    refuses an image that carries
#       stand-ins (its label dev.rollbook.node-agent.stand-ins: tools pinned
#       "unverified" in build/node-agent.pins) unless ROLLBOOK_ALLOW_STAND_INS=1
#       (a rehearsal, never a release); pushes the layout with crane to
#       $IMAGE_REPO:<version without v>; checks the registry serves the digest
#       built; writes the reference by digest to .cache/release/helper-image
#       (make release stamps it into both plugins) and .cache/release/digests.txt.
#
# $CRANE is the crane binary (the Makefile builds it from its Go module);
# the registry's credentials are crane's (docker config).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
fail() { echo "release-image: $*" >&2; exit 1; }
usage="usage: release-image.sh build VERSION COMMIT | push LAYOUT VERSION"
check_version() { [[ $1 =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || fail "version '$1' is not vX.Y.Z[-pre]"; }
out=$PWD/.cache/release
mkdir -p "$out"

case "${1:-}" in
  build)
    version=${2:?$usage} commit=${3:?$usage}
    check_version "$version"
    [[ $commit =~ ^[0-9a-f]{40}$ ]] || fail "commit '$commit' is not a full git commit"
    layout=$(ROLLBOOK_IMAGE_LAYOUT=$out/node-agent-image ROLLBOOK_VERSION=$version ROLLBOOK_REVISION=$commit bash hack/image.sh)
    go run ./hack/nodeimage ref "$layout"
    ;;
  push)
    layout=${2:?$usage} version=${3:?$usage}
    check_version "$version"
    repo=${IMAGE_REPO:-ghcr.io/rollbook/node-agent}
    [[ $repo =~ ^[a-z0-9.:-]+(/[a-z0-9._-]+)+$ ]] || fail "IMAGE_REPO '$repo' is not a repository"
    crane=${CRANE:?set CRANE to the crane binary}
    digest=$(go run ./hack/nodeimage ref "$layout")
    digest=${digest#*@}
    stand_ins=$(go run ./hack/nodeimage label "$layout" dev.rollbook.node-agent.stand-ins)
    if [ -n "$stand_ins" ] && [ "${ROLLBOOK_ALLOW_STAND_INS:-}" != 1 ]; then
      fail "the image carries stand-ins for $stand_ins (pinned unverified in build/node-agent.pins): pin the real artifacts first (docs/release.md)"
    fi
    tag=${version#v}
    "$crane" push "$layout" "$repo:$tag" >&2
    served=$("$crane" digest "$repo:$tag")
    [ "$served" = "$digest" ] || fail "$repo:$tag is $served in the registry, not the $digest built"
    echo "$repo@$digest" >"$out/helper-image"
    echo "$digest  $repo:$tag" >"$out/digests.txt"
    echo "release-image: pushed $repo:$tag ($digest)" >&2
    echo "$repo@$digest"
    ;;
  *) fail "$usage" ;;
esac
