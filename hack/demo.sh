#!/usr/bin/env bash
# The demo: start a simulated cluster, put the plugins on PATH and use them
# the way a user would, through kubectl. Run it with `make demo`.
#   KEEP=1 make demo   leave the cluster running and print how to reach it
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
SIM=${ROLLBOOK_SIM_BIN:-$root/.cache/bin/sim}
base=$(mktemp -d /tmp/rollbook-demo.XXXXXX)
dir=$base/sim   # sim takes only an empty directory or one it made

bold=$'\e[1m'; dim=$'\e[2m'; off=$'\e[0m'
[ -t 1 ] || { bold=; dim=; off=; }
say() { printf '\n%s==> %s%s\n' "$bold" "$*" "$off"; }
run() { printf '%s$ %s%s\n' "$dim" "$*" "$off"; "$@"; }

cleanup() {
  rc=$?
  if [ -n "${KEEP:-}" ]; then
    say "cluster left running: export KUBECONFIG=$dir/kubeconfig PATH=$root/bin:\$PATH; stop it with: $SIM down --dir $dir"
  else
    "$SIM" down --dir "$dir" >/dev/null 2>&1 || true
    [ "$rc" = 0 ] && rm -rf "$base"
  fi
  [ "$rc" = 0 ] || echo "demo failed (exit $rc); sim output: $base/sim.out, component logs: $dir/sim.log" >&2
}
trap cleanup EXIT

say "starting a simulated cluster (kube-apiserver, etcd, controller-manager, scheduler, 3 kwok nodes)"
"$SIM" up --dir "$dir" --nodes 3 --scenario "${SCENARIO:-empty}" >"$base/sim.out" 2>&1 &
for _ in $(seq 600); do
  [ -f "$dir/ready" ] && break
  kill -0 $! 2>/dev/null || { cat "$base/sim.out"; exit 1; }
  sleep 0.1
done
[ -f "$dir/ready" ] || { echo "sim not ready after 60s" >&2; exit 1; }
grep startup_seconds "$dir/ready"

export KUBECONFIG=$dir/kubeconfig PATH=$root/bin:$PATH
run kubectl get nodes -o wide
say "kubectl finds both plugins on PATH"
run kubectl plugin list 2>/dev/null | grep -E 'kubectl-(tt|ate)$'
run kubectl tt version
run kubectl ate version -o json
