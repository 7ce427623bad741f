#!/usr/bin/env bash
# Benchmarks `kubectl tt upgrade firmware --max-parallel K` on a simulated
# fleet whose flashes each take FLASH seconds, against the ideal
# ceil(N/K) × FLASH: what is left over is rollbook's own overhead (cordon,
# drain, helper start, verification, uncordon) per batch.
# With 5 or more nodes the fleet's last node has a host process holding the
# device (it blocks by design) and is left out: NODES=7 flashes 6.
#   NODES=7 K=2 FLASH=3s bash hack/bench-firmware.sh
# The 1.10× target is judged at a realistic flash (make bench: 10 s; real
# flashes take 10–120 s). STRESS=1 marks a shorter flash run as a stress
# figure: the fixed overhead per batch is what it shows, with no target.
# The scenario's PodDisruptionBudget lets K replicas go at once
# (ROLLBOOK_SIM_TT_PDB_DISRUPTIONS, default K), as the kmd fleet bench's
# does: at the scenario's own 1, K drains queue on one PDB and the ideal
# is not ceil(N/K) × (drain + flash). The cores' busy share is printed;
# above 80 % no verdict is given (the machine was the limit).
#   ROLLBOOK_SIM_TT_PDB_DISRUPTIONS=20 NODES=1001 K=20 FLASH=30s …: 1,000
# flashed at the issue's size (docs/performance.md).
# KEEP=1 keeps the run's directory (run.json, run.out, the sim's logs);
# TT_ARGS=-v=6 adds client-go's timestamped request log to run.out.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
SIM=${ROLLBOOK_SIM_BIN:-$root/.cache/bin/sim}
TT=${TT:-$root/bin/kubectl-tt}
NODES=${NODES:-7}
K=${K:-2}
FLASH=${FLASH:-3s}
base=$(mktemp -d /tmp/rollbook-bench-fw.XXXXXX)
dir=$base/sim
cleanup() { "$SIM" down --dir "$dir" >/dev/null 2>&1 || true; [ -n "${KEEP:-}" ] && echo "kept $base" >&2 || rm -rf "$base"; }
trap cleanup EXIT
ROLLBOOK_SIM_TT_PDB_DISRUPTIONS=${ROLLBOOK_SIM_TT_PDB_DISRUPTIONS:-$K} ROLLBOOK_SIM_TT_FLASH_DELAY=$FLASH "$SIM" up --dir "$dir" --nodes "$NODES" --scenario tt-fleet --tt-agent "$TT" >"$base/sim.out" 2>&1 &
for _ in $(seq 900); do [ -f "$dir/ready" ] && break; sleep 0.1; done
export KUBECONFIG=$dir/kubeconfig
# A development build has no node-agent image of its own: name the one the
# sim runs helpers from ($ROLLBOOK_TT_IMAGE, make bench builds it) by digest.
if [ -n "${ROLLBOOK_TT_IMAGE:-}" ]; then
  ROLLBOOK_HELPER_IMAGE=$(cd "$root" && go run ./hack/nodeimage ref "$ROLLBOOK_TT_IMAGE")
else
  ROLLBOOK_HELPER_IMAGE=ghcr.io/rollbook/node-agent:latest # helpers outside the image
fi
export ROLLBOOK_HELPER_IMAGE
flashing=$NODES
[ "$NODES" -ge 5 ] && flashing=$((NODES - 1))
targets=$(seq -s, -f 'kwok-node-%g' 0 $((flashing - 1)))
cpu0=$(head -1 /proc/stat)
start=$(date +%s.%N)
# shellcheck disable=SC2086 # TT_ARGS holds extra flags, split on purpose
"$TT" upgrade firmware --version 19.0.0 --bundle-url "file://$dir/bundles/fw_pack-19.0.0.fwbundle" --max-parallel "$K" \
  -o json ${TT_ARGS:-} \
  --nodes "$targets" \
  >"$base/run.json" 2>"$base/run.out" || { cat "$base/run.out"; exit 1; }
end=$(date +%s.%N)
cpu1=$(head -1 /proc/stat)
flash=$(echo "$FLASH" | sed 's/s$//')
python3 - "$start" "$end" "$flash" "$flashing" "$K" "$base/run.json" "$dir/hosts/runner.log" "${STRESS:-}" \
  "$cpu0" "$cpu1" <<'PY'
import datetime, json, math, statistics, sys
start, end, flash = map(float, sys.argv[1:4])
stress = sys.argv[8] != ""
nodes, k = int(sys.argv[4]), int(sys.argv[5])
run = json.load(open(sys.argv[6]))
drains = []
for t in run["targets"]:
    drains.append(sum(s.get("durationNs", 0) for s in t["steps"] if "evict" in s["id"] or "drain" in s["id"]) / 1e9)
drain = statistics.median(drains) if drains else 0.0
batches = math.ceil(nodes / k)
total = end - start
ideal = batches * (drain + flash)
print(f"{nodes} nodes, --max-parallel {k}, each flash {flash:.1f}s, median drain {drain:.2f}s")
# The machine's cores busy during the run, whoever used them (the sim's
# control plane, kubelets and helpers share them): above 80 % the run
# waited on the cores, and its ratio measures the machine, not rollbook.
def ticks(line):
    v = [int(x) for x in line.split()[1:]]
    return sum(v), v[3] + v[4]  # all, idle + iowait
(all0, idle0), (all1, idle1) = ticks(sys.argv[9]), ticks(sys.argv[10])
busy = 1 - (idle1 - idle0) / max(1, all1 - all0)
limited = busy > 0.80
verdict = ("stress run, no target: the fixed overhead dominates a flash this short" if stress else
           f"no verdict: the cores were {100*busy:.0f} % busy (limit 80 %), the machine was the limit" if limited else
           f"target ≤ 1.10×: {'met' if total <= 1.10*ideal else 'NOT met'}")
print(f"total {total:.2f}s, ideal ceil(N/K)×(drain+flash) = {ideal:.2f}s, overhead {total-ideal:.2f}s "
      f"({(total-ideal)/batches:.2f}s per batch); {total/ideal:.2f}× the ideal ({verdict}); "
      f"the machine's cores {100*busy:.0f} % busy")
# Where the time goes, from the sim's helper runner log (flash helpers only):
# lead-in (start → first flash), each flash helper's run beyond the flash
# itself, each slot's hand-over (a flash ends → the next flash on that slot
# starts: record, gates, uncordon, next cordon, gates, drain, helper start)
# and the tail (last flash ends → the command exits).
def at(line):
    ts = line.split()[0].rstrip("Z")
    whole, _, frac = ts.partition(".")
    t = datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.timezone.utc).timestamp()
    return t + float("0." + (frac or "0"))
starts, ends = [], []
for line in open(sys.argv[7]):
    f = line.split()
    if len(f) > 2 and "/rollbook-flash-" in f[2]:
        (starts if f[1] == "START" else ends if f[1] == "END" else []).append(at(line))
starts.sort(); ends.sort()
if starts and len(starts) == len(ends):
    runs = [e - s for s, e in zip(starts, ends)]
    hand = [starts[j] - ends[j - k] for j in range(k, len(starts))]
    print(f"breakdown: lead-in {starts[0]-start:.2f}s; flash helper beyond {flash:.1f}s: median "
          f"{statistics.median(runs)-flash:.2f}s; slot hand-over (incl. drain): median "
          f"{statistics.median(hand) if hand else 0:.2f}s; tail {end-ends[-1]:.2f}s")
PY
