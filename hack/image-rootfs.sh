#!/usr/bin/env bash
# Builds the node-agent image's root filesystem: the image's base layer.
# `make image` (internal/nodeimage) adds the static kubectl-tt on top and
# writes the OCI image the sim runs every helper pod from and the release
# pushes; nothing else makes the image. What it holds is pinned in
# build/node-agent.pins:
#  - Debian (the pins' suite) by debootstrap of build/packages.txt
#    (hack/lib/rootfs.sh: locked, cached), made reproducible as Debian's own
#    images are (no logs, caches or backup files, no hostname or resolv.conf
#    of this machine, /etc/shadow's dates the epoch's day, documentation
#    trimmed as the slim images trim it); every installed package must be
#    at its pinned version, else the build stops (`make image-pins` takes
#    the mirror's versions, for review);
#  - each `tool` pin at its path: fetched and checked against its SHA-256,
#    or, when that is "unverified", a STAND-IN that answers --version only
#    (tt-flash's in a real virtualenv made with the image's python3).
# Prints the root's path last.
#
# Cached in .cache/node-agent-rootfs (git-ignored; or $ROLLBOOK_IMAGE_CACHE,
# e.g. a directory kept across CI clones): debootstrap runs again only when
# the package list or the suite change, the rest when the pins or this
# script change. Needs root (debootstrap, chroot). DEBIAN_MIRROR overrides
# the mirror: the pins' snapshot when reachable, else this machine's.
# ROLLBOOK_IMAGE_PINS=update rewrites the pins' deb records, epoch and
# snapshot from the root filesystem instead of checking them.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

pins=${ROLLBOOK_IMAGE_PINS_FILE:-build/node-agent.pins}
packages_file=${ROLLBOOK_PACKAGES_FILE:-build/packages.txt}
cache=${ROLLBOOK_IMAGE_CACHE:-$PWD/.cache/node-agent-rootfs}
rootfs=$cache/root

fail() { echo "image-rootfs: $*" >&2; exit 1; }
# shellcheck source=lib/rootfs.sh
. "$(dirname "$0")/lib/rootfs.sh"
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap and chroot)"

record() { awk -v k="$1" '{sub(/#.*/, "")} $1 == k {$1 = ""; sub(/^ /, ""); print}' "$pins"; }
suite=$(record suite)
epoch=$(record epoch)
snapshot=$(record snapshot)
[[ $suite =~ ^[a-z]+$ ]] || fail "$pins: suite '$suite'"
[[ $epoch =~ ^[0-9]+$ ]] || fail "$pins: epoch '$epoch'"
[[ $snapshot =~ ^[0-9]{8}T[0-9]{6}Z$ ]] || fail "$pins: snapshot '$snapshot'"
if [ -z "${DEBIAN_MIRROR:-}" ]; then
  snap=https://snapshot.debian.org/archive/debian/$snapshot/
  if curl -fsI -m 5 "${snap}dists/$suite/Release" >/dev/null 2>&1; then
    export DEBIAN_MIRROR=$snap
  fi
fi

mapfile -t packages < <(grep -v '^\s*#' "$packages_file" | grep -v '^\s*$')
# Holds the cache's lock (fd 9) until this script exits; the image build
# takes it too while it reads the root.
cached_rootfs image-rootfs "$suite" "$cache" "${packages[@]}"

# Everything below runs again when the pins or this script change.
key=$(cat "$cache/key" "$pins" "$0" | sha256sum | cut -c1-16)
if [ "${ROLLBOOK_IMAGE_PINS:-}" != update ] && [ "$(cat "$cache/image-key" 2>/dev/null)" = "$key" ]; then
  echo "image-rootfs: cached ($cache, key $key)" >&2
  echo "$rootfs"
  exit 0
fi
rm -f "$cache/image-key"
export SOURCE_DATE_EPOCH=$epoch
in_image() { chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SOURCE_DATE_EPOCH="$epoch" "$@"; }

# What debootstrap leaves that differs from build to build, or belongs to
# the node the container runs on (its runtime provides hostname and
# resolv.conf).
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/* \
  "$rootfs"/var/log/* "$rootfs"/var/cache/ldconfig/aux-cache "$rootfs"/var/cache/debconf/*-old \
  "$rootfs"/var/lib/dpkg/*-old "$rootfs"/etc/hostname "$rootfs"/etc/resolv.conf "$rootfs"/etc/machine-id \
  "$rootfs"/root/.bash_history "$rootfs"/tmp/* "$rootfs"/var/tmp/*
day=$((epoch / 86400))
for f in shadow shadow-; do
  [ -f "$rootfs/etc/$f" ] && sed -i -E "s/^([^:]*:[^:]*:)[0-9]+:/\1$day:/" "$rootfs/etc/$f"
done
# Documentation, as Debian's slim images drop it (copyright files stay), and
# dpkg told to keep it out, as they do.
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/rollbook-slim" <<'EOF'
# written by hack/image-rootfs.sh, as Debian's slim images do
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/groff/* "$rootfs"/usr/share/info/* \
  "$rootfs"/usr/share/lintian/* "$rootfs"/usr/share/linda/*

# The packages, against the pins.
installed=$(in_image dpkg-query -W -f '${db:Status-Abbrev}|${Package}|${Version}|${Architecture}\n' |
  awk -F'|' '$1 ~ /^ii/ {print "deb", $2, $3, $4}' | LC_ALL=C sort)
if [ "${ROLLBOOK_IMAGE_PINS:-}" = update ]; then
  marker='# Generated by `make image-pins` below this line.'
  grep -qxF "$marker" "$pins" || fail "$pins has no line '$marker'"
  {
    awk -v m="$marker" '{print} $0 == m {exit}' "$pins"
    echo "epoch $(( $(date -u +%s) / 86400 * 86400 ))"
    echo "snapshot $(date -u +%Y%m%dT%H%M%SZ)"
    echo "$installed"
  } >"$pins.new"
  mv "$pins.new" "$pins"
  echo "image-rootfs: $pins rewritten from $rootfs ($(grep -c '^deb ' "$pins") packages); review the diff" >&2
  exit 0
fi
pinned=$(awk '{sub(/#.*/, "")} $1 == "deb" {print $1, $2, $3, $4}' "$pins" | LC_ALL=C sort)
if [ "$installed" != "$pinned" ]; then
  diff <(echo "$pinned") <(echo "$installed") | grep '^[<>]' | head -20 | sed 's/^</pinned:   /; s/^>/installed:/' >&2
  fail "the mirror ($(debian_mirror)) installs other packages than $pins pins (above). Build from the pins' snapshot, or take the mirror's versions with \`make image-pins\` and review the diff"
fi

# The tools. A stale path from an older recipe goes first.
while read -r old; do rm -rf "${rootfs:?}$old"; done < <(cat "$cache/tools" 2>/dev/null || true)
rm -f "$rootfs/usr/local/bin/kubectl-tt" # the image's top layer, never the root's
: >"$cache/tools"
stand_in() { # path version name
  mkdir -p "$rootfs$(dirname "$1")"
  {
    printf '#!/bin/sh\n# STAND-IN written by hack/image-rootfs.sh: %s %s is pinned "unverified" in build/node-agent.pins.\n' "$3" "$2"
    printf 'case "$1" in --version) echo "%s";; *) echo "%s stand-in: only --version" >&2; exit 2;; esac\n' "$4" "$3"
  } >"$rootfs$1"
  chmod 0755 "$rootfs$1"
}
while read -r name version path url sha; do
  case "$path" in
    */venv/bin/*)
      venv=${path%/bin/*}
      echo "$venv" >>"$cache/tools"
      rm -rf "${rootfs:?}$venv"
      in_image python3 -m venv "$venv" || fail "python3 -m venv $venv failed inside the image (python3-venv?)"
      [ "$sha" = unverified ] ||
        fail "$name: a verified install into a virtualenv needs a hash-locked requirements set, which $pins cannot express yet"
      stand_in "$path" "$version" "$name" "$name $version"
      ;;
    *)
      echo "$path" >>"$cache/tools"
      if [ "$sha" = unverified ]; then
        stand_in "$path" "$version" "$name" "$version"
        continue
      fi
      mkdir -p "$rootfs$(dirname "$path")"
      curl -fsSL -o "$rootfs$path.part" "$url" || fail "$name: fetching $url failed"
      echo "$sha  $rootfs$path.part" | sha256sum -c --quiet - || { rm -f "$rootfs$path.part"; fail "$name: $url is not the pinned SHA-256"; }
      chmod 0755 "$rootfs$path.part"
      mv "$rootfs$path.part" "$rootfs$path"
      ;;
  esac
done < <(record tool)
stand_ins=$(record tool | awk '$5 == "unverified" {print $1}' | paste -sd, -)
[ -z "$stand_ins" ] || echo "image-rootfs: STAND-INS (not the real tools): $stand_ins" >&2
echo "$key" >"$cache/image-key"
echo "image-rootfs: ready in $((SECONDS - start))s" >&2
echo "$rootfs"
