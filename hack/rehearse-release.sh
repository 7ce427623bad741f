#!/usr/bin/env bash
# Rehearses a release end to end, offline, as CI runs it (.ci/run, `make
# rehearse`): every step a release takes, with a registry on localhost and a
# throwaway signing key in place of ghcr.io and the workflow's identity.
#  1. the node-agent image (hack/release-image.sh build, as root) stamped
#     with the snapshot's version and commit;
#  2. a registry on localhost (distribution/registry, a pinned Go module),
#     the image's OCI layout pushed to it by crane (hack/release-image.sh
#     push: refused while it carries stand-ins, then allowed, as CI has
#     them) and the digest the registry serves checked against the one built;
#  3. a throwaway cosign key: the image signed by digest and verified;
#  4. goreleaser's snapshot with that image's reference stamped into both
#     plugins (make dist), then checksums.txt signed into a Sigstore bundle
#     and verified, and every archive checked against checksums.txt;
#     The archives are built twice and must be the same bytes (what the
#     release workflow's publish job checks before it publishes);
#  5. test/e2e/krew (inside make dist): the krew manifests carry the
#     archives' real checksums, krew installs both plugins from them, and
#     the installed plugins carry the pushed image's reference; then the
#     first run README tells (TestFirstRunJourney): install applied, a user
#     bound only to its roles upgrades with the stamped image, on the sim.
# Nothing is published; no transparency log is written (offline).
#
# Tools come from the environment (the Makefile builds them from their Go
# modules): GORELEASER, COSIGN, CRANE, REGISTRY.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
start=$SECONDS
fail() { echo "rehearse: $*" >&2; exit 1; }
for t in GORELEASER COSIGN CRANE REGISTRY; do [ -x "${!t:-}" ] || fail "$t is not set to an executable"; done
[ "$(id -u)" = 0 ] || fail "needs root (the image's root filesystem: debootstrap)"

work=$(mktemp -d)
reg_pid=
cleanup() {
  [ -z "$reg_pid" ] || kill "$reg_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The version goreleaser gives the snapshot (.goreleaser.yaml: the patch
# after the last tag, -snapshot), so the image's agent reports the plugins'.
last=$(git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null || echo v0.0.0)
[[ $last =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+) ]] || fail "last tag $last is not vX.Y.Z"
version=v${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.$((BASH_REMATCH[3] + 1))-snapshot
commit=$(git rev-parse HEAD)

# 1. The image (what the release workflow's test job builds).
built=$(bash hack/release-image.sh build "$version" "$commit")
built=${built#*@}

# 2. A registry on localhost, and the image pushed to it.
for _ in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 20000))
  cat >"$work/registry.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $work/registry}}
http: {addr: 127.0.0.1:$port}
EOF
  "$REGISTRY" serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
  reg_pid=$!
  for _ in $(seq 50); do
    curl -fs "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && break
    kill -0 "$reg_pid" 2>/dev/null || break
    sleep 0.1
  done
  curl -fs "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && break
  kill "$reg_pid" 2>/dev/null || true
  reg_pid=
done
[ -n "$reg_pid" ] || { cat "$work/registry.log" >&2; fail "the registry did not start"; }
# What the publish job runs: stand-ins refused, then (allowed here) pushed.
repo=localhost:$port/rollbook/node-agent
push() { CRANE=$CRANE IMAGE_REPO=$repo bash hack/release-image.sh push .cache/release/node-agent-image "$version" 2>&1; }
out=$(push) && fail "an image with stand-ins was pushed without ROLLBOOK_ALLOW_STAND_INS"
[[ $out == *"carries stand-ins"* ]] || fail "release-image.sh push: $out"
ref=$(ROLLBOOK_ALLOW_STAND_INS=1 push | tail -1)
[ "$ref" = "$repo@$built" ] || fail "pushed $ref, built $built"
echo "rehearse: pushed $ref" >&2

# 3. The image signed by digest with a throwaway key, and verified.
export COSIGN_PASSWORD=
(cd "$work" && "$COSIGN" generate-key-pair >/dev/null 2>&1) || fail "cosign generate-key-pair failed"
"$COSIGN" sign --yes --key "$work/cosign.key" --tlog-upload=false --allow-http-registry "$ref" >/dev/null 2>&1 ||
  fail "cosign sign $ref failed"
"$COSIGN" verify --key "$work/cosign.pub" --insecure-ignore-tlog=true --allow-http-registry "$ref" >/dev/null 2>&1 ||
  fail "cosign verify $ref failed"
"$COSIGN" verify --key "$work/cosign.pub" --insecure-ignore-tlog=true --allow-http-registry "$repo@sha256:$(printf '%064d' 0)" \
  >/dev/null 2>&1 && fail "cosign verified an image that was never signed"

# 4 and 5. The archives stamped with the image, krew installing them.
ROLLBOOK_RELEASE_HELPER_IMAGE=$ref ROLLBOOK_EXPECT_HELPER_IMAGE=$ref ROLLBOOK_RELEASE_IMAGE_LAYOUT=$PWD/.cache/release/node-agent-image \
  make --no-print-directory dist GORELEASER="$GORELEASER"
(cd dist && sha256sum --quiet -c checksums.txt) || fail "an archive is not the one checksums.txt lists"
# The publish job rebuilds the archives and compares them with the tested
# ones: they must come out the same (the commit's time everywhere).
if grep -q '"commit":"none"' dist/metadata.json; then
  echo "rehearse: goreleaser reads no commit in this checkout (no git remote): archive reproducibility not checked" >&2
else
  cp dist/checksums.txt "$work/first-checksums.txt"
  ROLLBOOK_RELEASE_HELPER_IMAGE=$ref "$GORELEASER" release --snapshot --clean --skip=sign,sbom >"$work/rebuild.log" 2>&1 ||
    { tail -20 "$work/rebuild.log" >&2; fail "the second goreleaser build failed"; }
  diff "$work/first-checksums.txt" dist/checksums.txt >&2 || fail "a rebuild of the same commit gave other archives"
fi
"$COSIGN" sign-blob --yes --key "$work/cosign.key" --tlog-upload=false --new-bundle-format \
  --bundle dist/checksums.txt.sigstore.json dist/checksums.txt >/dev/null 2>&1 || fail "cosign sign-blob checksums.txt failed"
# Offline there is no TUF root to fetch: an empty trusted root, the key is the trust.
"$COSIGN" trusted-root create --out "$work/trusted-root.json" >/dev/null 2>&1 || fail "cosign trusted-root create failed"
verify_blob() {
  "$COSIGN" verify-blob --key "$work/cosign.pub" --insecure-ignore-tlog=true --new-bundle-format --trusted-root "$work/trusted-root.json" \
    --bundle dist/checksums.txt.sigstore.json "$1" >/dev/null 2>&1
}
verify_blob dist/checksums.txt || fail "cosign verify-blob checksums.txt failed"
cp dist/checksums.txt "$work/tampered" && echo "x" >>"$work/tampered"
verify_blob "$work/tampered" && fail "cosign verified a tampered checksums.txt"
echo "rehearse: $version — image $built pushed and verified, archives stamped with it, checksums signed and verified," \
  "krew installed both plugins, in $((SECONDS - start))s" >&2
