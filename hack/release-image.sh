#!/usr/bin/env bash
# The node-agent image of a release: builds it (hack/image.sh, as root) with
# the release's version and commit stamped into its agent and labels,
# refuses one that carries stand-ins (tools pinned "unverified" in
# build/node-agent.pins) unless ROLLBOOK_ALLOW_STAND_INS=1 (a rehearsal,
# never a release), pushes it with crane to $IMAGE_REPO (tag: the version
# without its "v") and checks that the registry serves it at the digest
# built. Writes the reference by digest to .cache/release/helper-image (make
# release stamps it into both plugins) and .cache/release/digests.txt.
#
#   hack/release-image.sh VERSION COMMIT     e.g. v0.3.0 $(git rev-parse HEAD)
#
# $CRANE is the crane binary (make release-image builds it from its Go
# module); the registry's credentials are crane's (docker config).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
version=${1:?usage: release-image.sh VERSION COMMIT}
commit=${2:?usage: release-image.sh VERSION COMMIT}
repo=${IMAGE_REPO:-ghcr.io/rollbook/node-agent}
crane=${CRANE:?set CRANE to the crane binary}
fail() { echo "release-image: $*" >&2; exit 1; }
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || fail "version '$version' is not vX.Y.Z[-pre]"
[[ $commit =~ ^[0-9a-f]{40}$ ]] || fail "commit '$commit' is not a full git commit"
[[ $repo =~ ^[a-z0-9.:-]+(/[a-z0-9._-]+)+$ ]] || fail "IMAGE_REPO '$repo' is not a repository"

out=$PWD/.cache/release
mkdir -p "$out"
layout=$(ROLLBOOK_IMAGE_LAYOUT=$out/node-agent-image ROLLBOOK_VERSION=$version ROLLBOOK_REVISION=$commit bash hack/image.sh)
digest=$(go run ./hack/nodeimage ref "$layout")
digest=${digest#*@}
stand_ins=$(awk '{sub(/#.*/, "")} $1 == "tool" && $6 == "unverified" {print $2}' build/node-agent.pins | paste -sd, -)
if [ -n "$stand_ins" ] && [ "${ROLLBOOK_ALLOW_STAND_INS:-}" != 1 ]; then
  fail "the image carries stand-ins for $stand_ins (pinned unverified in build/node-agent.pins): pin the real artifacts' SHA-256 first (docs/release.md)"
fi
tag=${version#v}
"$crane" push "$layout" "$repo:$tag" >&2
served=$("$crane" digest "$repo:$tag")
[ "$served" = "$digest" ] || fail "$repo:$tag is $served in the registry, not the $digest built"
echo "$repo@$digest" >"$out/helper-image"
echo "$digest  $repo:$tag" >"$out/digests.txt"
echo "release-image: pushed $repo:$tag ($digest)" >&2
echo "$repo@$digest"
