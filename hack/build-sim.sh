#!/usr/bin/env bash
# Builds the simulated cluster (sim/) into $ROLLBOOK_SIM_BIN (default .cache/bin/sim)
# and the fake host tools alone into $ROLLBOOK_SIM_BIN-tools.
# The Kubernetes version is stamped in (without it the apiserver reports
# v0.0.0-master and kubectl/clients fail to parse it). Keep these flags identical
# everywhere: any change to -trimpath/-ldflags invalidates the whole build cache
# (another ~6 minutes on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${ROLLBOOK_SIM_BIN:-$root/.cache/bin/sim}
KV=v1.37.2
P=k8s.io/component-base/version
LDF="-s -w -X $P.gitVersion=$KV -X $P.gitMajor=1 -X $P.gitMinor=37 -X $P.gitTreeState=clean"
LDF="$LDF -X $P.gitCommit=0000000000000000000000000000000000000000 -X $P.buildDate=2026-01-01T00:00:00Z"
LDF="$LDF -X k8s.io/client-go/pkg/version.gitVersion=$KV -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37"
mkdir -p "$(dirname "$out")"
go -C "$root/sim" build -trimpath -ldflags "$LDF" -o "$out" .
# The fake host tools alone, next to the sim: a tool call then costs a small
# binary's start, not Kubernetes' package initialisation (sim/cmd/sim-tools).
# Static: helper containers run it inside the node-agent image (sim/helperns).
CGO_ENABLED=0 go -C "$root/sim" build -trimpath -o "$out-tools" ./cmd/sim-tools
