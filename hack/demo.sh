#!/usr/bin/env bash
# The demo: simulated clusters with a Tenstorrent fleet and an Agent
# Substrate fleet, and both plugins rolling them through kubectl, the way a
# user would. Run it with `make demo`.
#   KEEP=1 make demo   leave the clusters running and print how to reach them
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
SIM=${ROLLBOOK_SIM_BIN:-$root/.cache/bin/sim}
base=$(mktemp -d /tmp/rollbook-demo.XXXXXX)
export PATH=$root/bin:$PATH

bold=$'\e[1m'; dim=$'\e[2m'; off=$'\e[0m'
[ -t 1 ] || { bold=; dim=; off=; }
say() { printf '\n%s==> %s%s\n' "$bold" "$*" "$off"; }
run() { printf '%s$ %s%s\n' "$dim" "$*" "$off"; "$@"; }

sims=()
cleanup() {
  rc=$?
  for d in "${sims[@]}"; do
    if [ -n "${KEEP:-}" ]; then
      say "left running: export KUBECONFIG=$d/kubeconfig PATH=$root/bin:\$PATH   (stop: $SIM down --dir $d)"
    else
      "$SIM" down --dir "$d" >/dev/null 2>&1 || true
    fi
  done
  [ "$rc" = 0 ] && [ -z "${KEEP:-}" ] && rm -rf "$base"
  [ "$rc" = 0 ] || echo "demo failed (exit $rc); sim output and logs under $base" >&2
}
trap cleanup EXIT

# start_sim NAME ARGS…: start a sim in $base/NAME and wait until it is ready.
start_sim() {
  local name=$1; shift
  local dir=$base/$name
  sims+=("$dir")
  "$SIM" up --dir "$dir" "$@" >"$base/$name.out" 2>&1 &
  for _ in $(seq 900); do
    [ -f "$dir/ready" ] && return 0
    kill -0 $! 2>/dev/null || { cat "$base/$name.out"; return 1; }
    sleep 0.1
  done
  echo "sim $name not ready after 90s" >&2; return 1
}

say "kubectl finds both plugins on PATH"
run kubectl plugin list 2>/dev/null | grep -E 'kubectl-(tt|ate)$' || true
run kubectl tt version

# ---------------------------------------------------------------- kubectl tt
# The sim runs each helper from the node-agent image (make demo builds it
# when root: $ROLLBOOK_TT_IMAGE, an OCI layout) and pulls nothing else. A
# development build has no image of its own, so the plugin is told this one
# by digest, as a release's plugin names its own. Without root there is no
# image: say so and use the sim's loudly-logged opt-out rather than fail
# every helper.
if [ -n "${ROLLBOOK_TT_IMAGE:-}" ]; then
  ROLLBOOK_HELPER_IMAGE=$(cd "$root" && go run ./hack/nodeimage ref "$ROLLBOOK_TT_IMAGE")
else
  echo "demo: no node-agent image (it needs root: sudo make demo); helpers run OUTSIDE the image" >&2
  export ROLLBOOK_SIM_HELPERS_OUTSIDE_IMAGE=1
  ROLLBOOK_HELPER_IMAGE=ghcr.io/rollbook/node-agent:latest
fi
export ROLLBOOK_HELPER_IMAGE
say "a simulated Tenstorrent fleet: 3 nodes at tt-kmd 2.7.0, telemetry and an inference workload holding /dev/tenstorrent"
start_sim tt --nodes 3 --scenario tt-fleet --tt-agent "$root/bin/kubectl-tt"
export KUBECONFIG=$base/tt/kubeconfig
run kubectl get pods -A -l 'tenstorrent.com/uses-device=true' -o wide
run kubectl tt status
say "what an upgrade to 2.8.0 would do (nothing is changed)"
run kubectl tt upgrade kmd --version 2.8.0 --dry-run --nodes kwok-node-0
say "upgrade tt-kmd to 2.8.0, one node at a time"
run kubectl tt upgrade kmd --version 2.8.0 --yes
run kubectl tt status
say "flash firmware 19.0.0, two nodes out of service at most"
run kubectl tt upgrade firmware --version 19.0.0 --bundle-url "file://$base/tt/bundles/fw_pack-19.0.0.fwbundle" --max-parallel 2 --yes
run kubectl tt status

# --------------------------------------------------------------- kubectl ate
say "a simulated Agent Substrate fleet at v0.2.0: two pools, running, paused and suspended actors, live traffic"
start_sim ate --nodes 3 --scenario ate-fleet
export KUBECONFIG=$base/ate/kubeconfig
run kubectl ate status
say "runbook steps 1–3 happen outside rollbook (ate-setup); here the sim deploys the new atelet"
run "$SIM" ate-setup deploy-atelet --dir "$base/ate" --version v0.3.0
run kubectl ate preflight
run kubectl ate roll clone-pools --image "gvisor=registry.example/ateom-gvisor:v0.3.0@sha256:$(printf '%064d' 3)" \
  --image "microvm=registry.example/ateom-microvm:v0.3.0@sha256:$(printf '%064d' 4)"
run kubectl ate status
say "move one node, then look"
run kubectl ate roll next-node
run kubectl ate status
say "move the rest"
run kubectl ate roll next-node --all --wait
run kubectl ate status
