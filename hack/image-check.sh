#!/usr/bin/env bash
# Checks what can be checked of the node-agent helper image without an image
# builder, a registry or PyPI: its root filesystem is built from the Debian
# packages in build/packages.txt (debootstrap, same suite as the
# Containerfile's base), the static kubectl-tt goes where the Containerfile
# copies it, and the agent and every host tool it runs are started inside it
# with chroot. tt-flash and tt-smi come from PyPI, which only the release
# pipeline reaches: they are not checked here.
#
# The root filesystem is cached in .cache/node-agent-rootfs (git-ignored; or
# $ROLLBOOK_IMAGE_CACHE, e.g. a directory kept across CI clones) and rebuilt
# only when the package list or the suite change. Needs root
# (debootstrap, chroot); installs debootstrap with apt-get when missing.
# DEBIAN_MIRROR overrides the mirror, which defaults to this machine's apt one.
set -euo pipefail
cd "$(dirname "$0")/.."

containerfile=build/Containerfile
packages_file=build/packages.txt
cache=${ROLLBOOK_IMAGE_CACHE:-.cache/node-agent-rootfs}
rootfs=$cache/root

fail() { echo "image-check: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap and chroot)"

# The suite is the one of the Containerfile's base image (FROM debian:SUITE-slim).
suite=$(sed -n 's/^FROM debian:\([a-z]*\)-slim.*/\1/p' "$containerfile" | head -1)
[ -n "$suite" ] || fail "$containerfile has no 'FROM debian:<suite>-slim' line"
mapfile -t packages < <(grep -v '^\s*#' "$packages_file" | grep -v '^\s*$')
grep -q "$packages_file" "$containerfile" || fail "$containerfile does not install $packages_file"

mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$( { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2; exit}'; } || true)
fi
if [ -z "$mirror" ]; then
  mirror=$( { grep -hE '^deb\s' /etc/apt/sources.list 2>/dev/null | awk '{print $2; exit}'; } || true)
fi
[ -n "$mirror" ] || fail "no Debian mirror: set DEBIAN_MIRROR"

key=$(printf '%s\n' "$suite" "${packages[@]}" | sha256sum | cut -c1-16)
start=$SECONDS
if [ "$(cat "$cache/key" 2>/dev/null)" != "$key" ]; then
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  rm -rf "$cache"
  mkdir -p "$cache"
  echo "image-check: debootstrap $suite (${packages[*]}) into $rootfs"
  include=$(IFS=,; echo "${packages[*]}")
  if ! debootstrap --variant=minbase --include="$include" "$suite" "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    tail -n 30 "$cache/debootstrap.log" >&2
    fail "debootstrap failed (log: $cache/debootstrap.log)"
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  echo "$key" >"$cache/key"
  echo "image-check: root filesystem built in $((SECONDS - start))s"
else
  echo "image-check: cached root filesystem ($cache, key $key)"
fi

# The binary exactly as the release builds it: static, no cgo.
CGO_ENABLED=0 go build -trimpath -o "$rootfs/usr/local/bin/kubectl-tt" ./cmd/kubectl-tt

in_image() { chroot "$rootfs" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
check() {
  local what=$1; shift
  local out
  if ! out=$(in_image "$@" 2>&1); then
    echo "$out" >&2
    fail "$what: \`$*\` failed inside the image"
  fi
  echo "ok  $what: $(head -n 1 <<<"$out")"
}

check "node agent" kubectl-tt node-agent --help
in_image kubectl-tt node-agent --help | grep -q 'kmd' || fail "kubectl-tt node-agent --help does not list the kmd task"
check git git --version
check make make --version
check gcc gcc --version
check kmod kmod --version
for tool in modinfo modprobe insmod rmmod; do
  check "$tool" sh -c "command -v $tool"
done
# The compiler links a program (kernel module builds need gcc and libc headers).
check "gcc builds" sh -c 'printf "#include <stdio.h>\nint main(void){puts(\"built\");return 0;}\n" >/tmp/c.c &&
  gcc -o /tmp/c /tmp/c.c && /tmp/c && rm -f /tmp/c /tmp/c.c'
check "python venv" python3 -m venv --help
echo "image-check: passed in $((SECONDS - start))s (tt-flash and tt-smi are installed from PyPI by the release build only)"
