#!/usr/bin/env bash
# Benchmarks `kubectl tt upgrade firmware --max-parallel K` on a simulated
# fleet whose flashes each take FLASH seconds, against the ideal
# ceil(N/K) × FLASH: what is left over is rollbook's own overhead (cordon,
# drain, helper start, verification, uncordon) per batch.
#   NODES=6 K=2 FLASH=3s bash hack/bench-firmware.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
SIM=${ROLLBOOK_SIM_BIN:-$root/.cache/bin/sim}
TT=${TT:-$root/bin/kubectl-tt}
NODES=${NODES:-6}
K=${K:-2}
FLASH=${FLASH:-3s}
base=$(mktemp -d /tmp/rollbook-bench-fw.XXXXXX)
dir=$base/sim
cleanup() { "$SIM" down --dir "$dir" >/dev/null 2>&1 || true; rm -rf "$base"; }
trap cleanup EXIT
ROLLBOOK_SIM_TT_FLASH_DELAY=$FLASH "$SIM" up --dir "$dir" --nodes "$NODES" --scenario tt-fleet --tt-agent "$TT" >"$base/sim.out" 2>&1 &
for _ in $(seq 900); do [ -f "$dir/ready" ] && break; sleep 0.1; done
export KUBECONFIG=$dir/kubeconfig
# A development build has no node-agent image of its own: use the one the sim's registry holds.
export ROLLBOOK_HELPER_IMAGE=ghcr.io/rollbook/node-agent:latest
start=$(date +%s.%N)
"$TT" upgrade firmware --version 19.0.0 --bundle-url "file://$dir/bundles/fw_pack-19.0.0.fwbundle" --max-parallel "$K" >"$base/run.out" 2>&1 || { cat "$base/run.out"; exit 1; }
end=$(date +%s.%N)
flash=$(echo "$FLASH" | sed 's/s$//')
batches=$(( (NODES + K - 1) / K ))
python3 - "$start" "$end" "$flash" "$batches" "$NODES" "$K" <<'PY'
import sys
start, end, flash, batches, nodes, k = map(float, sys.argv[1:])
total = end - start
ideal = batches * flash
print(f"{int(nodes)} nodes, --max-parallel {int(k)}, each flash {flash:.1f}s")
print(f"total {total:.2f}s, ideal ceil(N/K)×flash = {ideal:.2f}s, overhead {total-ideal:.2f}s ({(total-ideal)/batches:.2f}s per batch)")
PY
