#!/usr/bin/env bash
# Benchmarks `kubectl tt status` and `kubectl ate status` on a large
# simulated fleet against what a person runs by hand for the same facts
# (kubectl get nodes with the version columns; the Agent Substrate runbook's
# own three "check your progress" commands). Prints wall time and peak
# memory of each, on two fleets: one no roll has been through (no records,
# the atelet DaemonSets, no WorkerPools), then the same nodes carrying what
# kmd and firmware rolls leave on them.
#   NODES=5000 RUNS=5 bash hack/bench-status.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
SIM=${ROLLBOOK_SIM_BIN:-$root/.cache/bin/sim}
TT=${TT:-$root/bin/kubectl-tt}
NODES=${NODES:-5000}
RUNS=${RUNS:-5}
base=$(mktemp -d /tmp/rollbook-bench.XXXXXX)
dir=$base/sim
cleanup() { "$SIM" down --dir "$dir" >/dev/null 2>&1 || true; rm -rf "$base"; }
trap cleanup EXIT

"$SIM" up --dir "$dir" --nodes 0 --node-lease-seconds "${LEASE_SECONDS:-1200}" >"$base/sim.out" 2>&1 &
for _ in $(seq 600); do [ -f "$dir/ready" ] && break; sleep 0.1; done
export KUBECONFIG=$dir/kubeconfig
labels="feature.node.kubernetes.io/pci-1200_1e52.present=true,driver.tenstorrent.com/kmd-version=2.7.0"
labels="$labels,tt-smi.driver.tenstorrent.com/version=3.0.5,firmware.tenstorrent.com/fw-version=18.3.0.0,driver.tenstorrent.com/install-mode=container"
labels="$labels,ate.dev/substrate-version=v0.2.0,feature.node.kubernetes.io/kernel-version.full=6.1.0-29-amd64"
# What a kmd and a firmware roll leave on a node (the probe's record, the
# module's and the flash's results): status reads them on every node, so the
# second fleet times what a user's does.
cat >"$base/records.json" <<'JSON'
{
  "rollbook.dev/tt-probe": "{\"run\":\"20261204-120000-aaaaaa\",\"at\":\"2026-12-04T12:01:00Z\",\"kernel\":\"6.1.0-29-amd64\",\"kmd\":\"2.6.0\",\"headers\":true,\"toolchain\":true,\"smi\":\"3.0.5\",\"agentVersion\":\"v0.9.0\",\"firmware\":[\"18.3.0.0\",\"18.3.0.0\"],\"boards\":[\"n300\",\"n300\"],\"holders\":[{\"pid\":40718,\"comm\":\"inference\",\"via\":\"fd\",\"podUID\":\"ae42fc10-7b8a-4dbd-b561-414d601447f1\",\"containerID\":\"cfc2b282ae3dc52e2b7e6a6545c5c42351ba97f7245bdd8e69af08921d5ba64b\"},{\"pid\":41578,\"comm\":\"telemetry\",\"via\":\"fd\",\"podUID\":\"fc928715-980c-42ff-b98e-a6b164620065\",\"containerID\":\"9dc239dc31c0037e8bc76a1e8b6b920af8c2a4c1939f6ac65fe8e35ac952550b\"}],\"tag\":{\"tag\":\"ttkmd-2.7.0\",\"url\":\"https://github.com/tenstorrent/tt-kmd.git\",\"found\":true,\"commit\":\"6a8145181d14672aef0bc9ab6773cc9f49026eb2\"},\"pciDevices\":2,\"boundDevices\":2}",
  "rollbook.dev/tt-kmd-result": "{\"before\":\"2.6.0\",\"after\":\"2.7.0\",\"kernel\":\"6.1.0-29-amd64\",\"commit\":\"6a8145181d14672aef0bc9ab6773cc9f49026eb2\",\"cacheHit\":true,\"persisted\":true,\"kernels\":[\"6.1.0-29-amd64\"],\"durationMs\":5449,\"run\":\"20261204-120000-aaaaaa\",\"at\":\"2026-12-04T12:01:30Z\"}",
  "rollbook.dev/tt-firmware-result": "{\"readback\":\"18.3.0.0\",\"devices\":[{\"index\":0,\"board\":\"n300\",\"before\":\"18.2.0.0\",\"after\":\"18.3.0.0\",\"ok\":true},{\"index\":1,\"board\":\"n300\",\"before\":\"18.2.0.0\",\"after\":\"18.3.0.0\",\"ok\":true}],\"changed\":true,\"durationMs\":61000,\"run\":\"20261204-130000-bbbbbb\",\"at\":\"2026-12-04T13:01:00Z\"}"
}
JSON
"$SIM" add-nodes --dir "$dir" --count "$NODES" --parallel 64 --labels "$labels"
# a handful of nodes mid-roll, so status has something to explain
kubectl label nodes kwok-node-0 kwok-node-1 driver.tenstorrent.com/kmd-version=2.8.0 --overwrite >/dev/null
kubectl cordon kwok-node-2 >/dev/null
echo "fleet: $(kubectl get nodes --no-headers | wc -l) nodes"

# A fleet just created keeps the control plane busy for minutes (leases,
# DaemonSet pods); timing then measures the machine, not the client. Wait
# until the sim uses under a quarter of a core.
settle() {
  local pid t0=$SECONDS a b
  pid=$(cat "$dir/pid")
  while [ $((SECONDS - t0)) -lt 600 ]; do
    a=$(awk '{print $14+$15}' "/proc/$pid/stat"); sleep 3; b=$(awk '{print $14+$15}' "/proc/$pid/stat")
    [ $(((b - a) * 100 / 300)) -lt 25 ] && break
  done
  echo "settled after $((SECONDS - t0)) s (sim at $(((b - a) * 100 / 300)) % of a core)"
}

# measure times a command RUNS times. Each run is paired with a run of the
# floor just before it, and the ratio is to the best of those paired floor
# runs: the control plane drifts over a bench (garbage collection after a
# big list, leases), and a floor timed once at the start would charge that
# drift to whichever command ran last.
time1() { # command... → "secs kb" of one run, its output in $base/out
  /usr/bin/time -f "%e %M" -o "$base/t" "$@" >"$base/out" 2>/dev/null
  cat "$base/t"
}
measure() { # name, command...
  local name=$1; shift
  local best=999 worst=0 mem=0 fbest=999 secs kb
  for _ in $(seq "$RUNS"); do
    if [ -n "${FLOOR_PAIRED:-}" ]; then
      read -r secs kb < <(time1 "$FLOOR")
      fbest=$(echo "if ($secs < $fbest) $secs else $fbest" | bc)
    fi
    read -r secs kb < <(time1 "$@")
    best=$(echo "if ($secs < $best) $secs else $best" | bc)
    worst=$(echo "if ($secs > $worst) $secs else $worst" | bc)
    [ "$kb" -gt "$mem" ] && mem=$kb
  done
  local ratio=""
  [ -n "${FLOOR_PAIRED:-}" ] && ratio=$(printf '  %.2f× floor (%.2fs)' "$(echo "$best / $fbest" | bc -l)" "$fbest")
  printf '%-44s best %6.2fs  worst %6.2fs  peak RSS %5d MiB  (%d lines)%s\n' "$name" "$best" "$worst" $((mem / 1024)) \
    "$(wc -l <"$base/out")" "$ratio"
}
FLOOR=$base/floor
go -C "$root" build -o "$FLOOR" ./hack/floor
cols="-L driver.tenstorrent.com/kmd-version,tt-smi.driver.tenstorrent.com/version,firmware.tenstorrent.com/fw-version,driver.tenstorrent.com/install-mode"
ATE=${ATE:-$root/bin/kubectl-ate}
cat >"$base/progress.sh" <<'SH'
kubectl get ds -n ate-system -l app=atelet -L ate.dev/substrate-version
kubectl get nodes -L ate.dev/substrate-version
kubectl get workerpools -A 2>&1 || true
SH

kubectl create namespace ate-system >/dev/null
"$SIM" ate-setup deploy-atelet --dir "$dir" --version v0.2.0 >/dev/null
kubectl rollout status -n ate-system daemonset -l app=atelet --timeout=10m >/dev/null 2>&1 || true

# Each fleet: the floor first, then every command against it.
fleet() {
  settle
  FLOOR_PAIRED=
  measure "floor: one metadata-only protobuf node list" "$FLOOR"
  FLOOR_PAIRED=1
  measure "kubectl get nodes (by hand, version columns)" kubectl get nodes -l feature.node.kubernetes.io/pci-1200_1e52.present=true $cols
  measure "kubectl tt status" "$TT" status
  measure "kubectl tt status -o json" "$TT" status -o json
  measure "runbook's 'check your progress' (3 kubectl)" bash "$base/progress.sh"
  measure "kubectl ate status --no-api" "$ATE" status --no-api
}

echo "== a fleet no roll has been through: no records, atelet DaemonSets, no WorkerPools"
fleet

# The probe's record and both results on every node (~2.3 KB a node),
# written 16 nodes' patches at a time.
echo "== the same fleet with what kmd and firmware rolls leave on each node"
patch=$(python3 -c 'import json,sys; print(json.dumps({"metadata":{"annotations":json.load(open(sys.argv[1]))}}))' "$base/records.json")
kubectl get nodes -o name | xargs -P 16 -n 50 kubectl patch --type merge -p "$patch" >/dev/null
fleet

# The control API with a big inventory: ACTORS actors on WORKERS workers over the same nodes.
ACTORS=${ACTORS:-50000}
WORKERS=${WORKERS:-$NODES}
go -C "$root" build -o "$base/fakeapi" ./hack/fakeapi
api=$base/api; mkdir -p "$api"
"$base/fakeapi" -dir "$api" -nodes "$NODES" -workers "$WORKERS" -actors "$ACTORS" >"$base/api.out" 2>&1 &
api_pid=$!
for _ in $(seq 600); do [ -f "$api/endpoint" ] && break; sleep 0.1; done
measure "kubectl ate status ($ACTORS actors, $WORKERS workers)" "$ATE" status \
  --ate-endpoint "$(cat "$api/endpoint")" --ate-ca-file "$api/ca.pem" --ate-token-file "$api/token"
kill "$api_pid"
echo "targets: tt status and ate status --no-api within 1.3× floor on both fleets; ate status with the API ≤ 1.5 s; all under 150 MiB"
