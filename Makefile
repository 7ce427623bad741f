# rollbook — see README.md. Every target works on a fresh machine.
SHELL := bash
GO    ?= go
BIN   := $(CURDIR)/bin
SIM   := $(CURDIR)/.cache/bin/sim
GOTEST_FLAGS ?= -timeout 30m -count=1
# End-to-end tests (test/e2e/…: each package a scenario on a simulated
# cluster) build only with this tag: go test -short ./... builds and starts
# none of them.
E2E := -tags e2e
# As released (.goreleaser.yaml): grpcnotrace keeps grpc from linking
# golang.org/x/net/trace, whose html/template turns off the linker's dead-code
# removal of methods; kubectl-ate is then a third smaller (83 → 52 MB) and its status reads
# ~20 MB less of itself into memory (docs/performance.md).
BUILD_TAGS := grpcnotrace
# The sim module must be built with hack/build-sim.sh's -trimpath: other
# flags would recompile all of Kubernetes (~6 min, 4 GB of cache).
SIM_GOFLAGS := -trimpath
# Linters are Go modules at pinned versions, built into .cache (never a downloaded binary).
GOLANGCI_VERSION := v2.15.0
GOLANGCI := $(CURDIR)/.cache/bin/golangci-lint-$(GOLANGCI_VERSION)

.PHONY: all build sim demo unit test check lint bench bench-fleet bench-fleet-kmd docs clean chaos

all: build

build: ## both plugins into bin/ (static, as released: the sim runs kubectl-tt inside the image too)
	CGO_ENABLED=0 $(GO) build -tags $(BUILD_TAGS) -o $(BIN)/ ./cmd/kubectl-tt ./cmd/kubectl-ate

sim: ## the simulated cluster into .cache/bin/sim (first build ~6 min, then seconds)
	ROLLBOOK_SIM_BIN=$(SIM) bash hack/build-sim.sh

demo: build sim ## both plugins against a 3-node simulated cluster (helpers from the node-agent image when root)
	img=$(IMAGE) || exit 1; ROLLBOOK_TT_IMAGE=$$img ROLLBOOK_SIM_BIN=$(SIM) bash hack/demo.sh

check: lint ## gofmt, go vet (both modules) and golangci-lint
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(E2E) ./...
	$(GO) -C sim vet $(SIM_GOFLAGS) ./...

# The real-host root filesystem (Debian's headers, gcc-12, make, kmod, git)
# the node agent's real-tool tests run in: built (cached) when we are root,
# as CI is; without root those tests say why they skip.
REALHOST = $$( [ -n "$$ROLLBOOK_REALHOST_ROOTFS" ] && echo "$$ROLLBOOK_REALHOST_ROOTFS" || \
  { [ "$$(id -u)" = 0 ] && bash hack/realhost-rootfs.sh; } || true )

# The node-agent image (hack/image.sh): its root filesystem from
# build/node-agent.pins (debootstrap, cached, locked; needs root, or
# $ROLLBOOK_TT_IMAGE_ROOTFS) and this tree's kubectl-tt, as an OCI layout in
# .cache/node-agent-image. The sim runs every helper pod from it and pulls
# nothing else; the tests' plugins name it by digest. Without root (and no
# $ROLLBOOK_TT_IMAGE_ROOTFS) there is none, and the sim refuses helpers,
# saying why. Expands to a command substitution: use as img=$(IMAGE) || exit 1.
IMAGE = $$(bash hack/image.sh --optional)

.PHONY: image image-rootfs image-pins
image: ## the node-agent OCI image (build/node-agent.pins; needs root) into .cache/node-agent-image; prints it by digest
	@layout=$$(bash hack/image.sh) && $(GO) run ./hack/nodeimage ref "$$layout"

image-rootfs: ## the image's root filesystem alone (needs root; cached in .cache/node-agent-rootfs)
	bash hack/image-rootfs.sh

image-pins: ## take the Debian mirror's package versions into build/node-agent.pins (review the diff)
	ROLLBOOK_IMAGE_PINS=update bash hack/image-rootfs.sh

unit: ## the fast path: every test that needs no simulated cluster (go test -short; about a minute; starts no sim)
	$(GO) test -short ./...

# Each package's time is printed at the end (hack/test-times.sh), from the
# output kept in .cache/test.log.
test: check sim ## every test, on the real simulated control plane
	CGO_ENABLED=0 $(GO) build -o $(CURDIR)/.cache/bin/ ./cmd/kubectl-tt
	set -o pipefail; img=$(IMAGE) || exit 1; rh=$(REALHOST); log=$(CURDIR)/.cache/test.log; \
	ROLLBOOK_REALHOST_ROOTFS=$$rh ROLLBOOK_TT_IMAGE=$$img \
	  ROLLBOOK_SIM_BIN=$(SIM) ROLLBOOK_TT_AGENT=$(CURDIR)/.cache/bin/kubectl-tt \
	  $(GO) test $(GOTEST_FLAGS) $(E2E) ./... 2>&1 | tee $$log && \
	ROLLBOOK_REALHOST_ROOTFS=$$rh ROLLBOOK_TT_IMAGE=$$img $(GO) -C sim test $(SIM_GOFLAGS) -count=1 ./... 2>&1 | tee -a $$log; \
	rc=$$?; bash hack/test-times.sh $$log; exit $$rc

# make chaos SEED=n KILLS=n: the kill-anywhere tests with KILLS kills per
# scenario (three scenarios; default 60 each), seeded (default: the clock).
SEED  ?=
KILLS ?= 60
chaos: sim ## SIGKILL the plugins at random points, longer than make test (SEED=…, KILLS=… per scenario)
	CGO_ENABLED=0 $(GO) build -o $(CURDIR)/.cache/bin/ ./cmd/kubectl-tt
	set -o pipefail; img=$(IMAGE) || exit 1; ROLLBOOK_TT_IMAGE=$$img ROLLBOOK_SIM_BIN=$(SIM) ROLLBOOK_TT_AGENT=$(CURDIR)/.cache/bin/kubectl-tt \
	  ROLLBOOK_CHAOS_SEED=$(SEED) ROLLBOOK_CHAOS_KILLS=$(KILLS) \
	  $(GO) test $(E2E) -count=1 -timeout 120m -v -run 'KilledAnywhere|Secrets' ./test/e2e/tt/chaos ./test/e2e/ate/chaos \
	  | tee $(CURDIR)/.cache/chaos.log | grep -E '^(---|ok|FAIL)|FIGURES|chaos seed'
	set -o pipefail; img=$(IMAGE) || exit 1; ROLLBOOK_TT_IMAGE=$$img ROLLBOOK_SIM_BIN=$(SIM) ROLLBOOK_TT_AGENT=$(CURDIR)/.cache/bin/kubectl-tt \
	  $(GO) test $(E2E) -count=1 -timeout 30m -v ./test/e2e/tt/ctlfaults \
	  | tee -a $(CURDIR)/.cache/chaos.log | grep -E '^(---|ok|FAIL)|FIGURES'

lint: $(GOLANGCI) ## golangci-lint with .golangci.yml (main module; sim/ is vetted only)
	$(GOLANGCI) run ./...

$(GOLANGCI):
	mkdir -p $(CURDIR)/.cache/bin
	GOBIN=$(CURDIR)/.cache/tmp-lint $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	mv $(CURDIR)/.cache/tmp-lint/golangci-lint $@

bench: build sim ## every benchmark at a size that fits ~10 minutes; figures next to their targets
	ROLLBOOK_SIM_BIN=$(SIM) bash hack/bench-status.sh
	img=$(IMAGE) || exit 1; FLASH=10s ROLLBOOK_TT_IMAGE=$$img ROLLBOOK_SIM_BIN=$(SIM) bash hack/bench-firmware.sh && \
	  FLASH=3s STRESS=1 ROLLBOOK_TT_IMAGE=$$img ROLLBOOK_SIM_BIN=$(SIM) bash hack/bench-firmware.sh
	$(GO) test -run XXX -bench Inventory -benchtime 3x ./pkg/ateapi | grep -E 'Benchmark|ok'
	CGO_ENABLED=0 $(GO) build -o $(CURDIR)/.cache/bin/ ./cmd/kubectl-tt
	img=$(IMAGE) || exit 1; ROLLBOOK_TT_IMAGE=$$img ROLLBOOK_SIM_BIN=$(SIM) ROLLBOOK_TT_AGENT=$(CURDIR)/.cache/bin/kubectl-tt $(GO) test $(E2E) -count=1 -v \
	  -run 'TestKMDRequestsPerNode|TestFirmwareRequestsPerNode|TestFullRollAndRollbackOnSixNodes|TestPerNodeCost' \
	  ./test/e2e/tt/upgrade ./test/e2e/tt/situations ./test/e2e/ate/fleet | grep -E 'roll in|requests|^(---|ok|FAIL)'
	$(MAKE) --no-print-directory bench-fleet

# Per-node cost as a roll goes through a fleet (flat, or it fails). Small by
# default; FLEET_NODES=100 ACTORS=2000 is the size docs/performance.md records.
FLEET_NODES ?= 12
ACTORS ?= 200
# A parallel kmd roll over kernel groups against its ideal (one build round
# + ceil(N/K) x (drain + hit)), its builds (one per group) and its requests
# per node. The issue's size is FLEET_KMD_NODES=1000 (about 10 min on 2 cores);
# docs/performance.md records 40, 200 and 1000.
FLEET_KMD_NODES ?= 40
FLEET_KMD_PARALLEL ?= 20
FLEET_KMD_KERNELS ?= 4
FLEET_KMD_BUILD ?= 30s
FLEET_KMD_HIT ?= 5s
bench-fleet-kmd: sim ## kmd --max-parallel over a fleet in kernel groups: time vs ideal, builds, requests per node, rollbook's own time by cause
	CGO_ENABLED=0 $(GO) build -o $(CURDIR)/.cache/bin/ ./cmd/kubectl-tt
	img=$(IMAGE) || exit 1; ROLLBOOK_FLEET_NODES=$(FLEET_KMD_NODES) ROLLBOOK_FLEET_PARALLEL=$(FLEET_KMD_PARALLEL) ROLLBOOK_FLEET_KERNELS=$(FLEET_KMD_KERNELS) \
	  ROLLBOOK_FLEET_BUILD=$(FLEET_KMD_BUILD) ROLLBOOK_FLEET_HIT=$(FLEET_KMD_HIT) ROLLBOOK_FLEET_BENCH=1 ROLLBOOK_TT_IMAGE=$$img ROLLBOOK_SIM_BIN=$(SIM) \
	  ROLLBOOK_TT_AGENT=$(CURDIR)/.cache/bin/kubectl-tt $(GO) test $(E2E) -count=1 -v -timeout 600m ./test/e2e/tt/fleetbench \
	  | grep -E 'fleetbench_test|^(---|ok|FAIL)'

bench-fleet: sim ## per-node requests and seconds over a fleet: tt kmd and the ate node roll
	CGO_ENABLED=0 $(GO) build -o $(CURDIR)/.cache/bin/ ./cmd/kubectl-tt
	img=$(IMAGE) || exit 1; ROLLBOOK_FLEET_NODES=$(FLEET_NODES) ROLLBOOK_SIM_ATE_EXTRA_ACTORS=$(ACTORS) ROLLBOOK_TT_IMAGE=$$img ROLLBOOK_SIM_BIN=$(SIM) \
	  ROLLBOOK_TT_AGENT=$(CURDIR)/.cache/bin/kubectl-tt $(GO) test $(E2E) -count=1 -v -timeout 90m \
	  ./test/e2e/tt/fleetcurve ./test/e2e/ate/fleetcurve | grep -E 'curve_test|^ +[0-9]+  |^(---|ok|FAIL)'

docs: ## regenerate runbooks/*.md from the step registry and docs/cli/*.md from the command trees
	$(GO) run ./hack/gendocs

# Release tools are built from their Go modules at these pinned versions (no
# downloaded binary), once each, into .cache/tools (goreleaser's first build
# ~10 min). docs/release.md says how a release uses them.
.PHONY: dist image-check rehearse release release-build release-check release-image release-tools
GORELEASER_VERSION ?= v2.15.1
ACTIONLINT_VERSION ?= v1.7.12
COSIGN_VERSION     ?= v2.6.5
SYFT_VERSION       ?= v1.57.2
# crane pushes the node-agent image's OCI layout (the go-containerregistry of go.mod).
CRANE_VERSION      ?= v0.22.1
# The registry the release rehearsal pushes to, on localhost.
REGISTRY_VERSION   ?= v3.0.0
TOOLS      := $(CURDIR)/.cache/tools
GORELEASER := $(TOOLS)/goreleaser-$(GORELEASER_VERSION)/goreleaser
ACTIONLINT := $(TOOLS)/actionlint-$(ACTIONLINT_VERSION)/actionlint
COSIGN     := $(TOOLS)/cosign-$(COSIGN_VERSION)/cosign
SYFT       := $(TOOLS)/syft-$(SYFT_VERSION)/syft
CRANE      := $(TOOLS)/crane-$(CRANE_VERSION)/crane
REGISTRY   := $(TOOLS)/registry-$(REGISTRY_VERSION)/registry

$(GORELEASER):
	GOBIN=$(dir $@) $(GO) install -trimpath github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION)
$(ACTIONLINT):
	GOBIN=$(dir $@) $(GO) install -trimpath github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)
$(COSIGN):
	GOBIN=$(dir $@) $(GO) install -trimpath github.com/sigstore/cosign/v2/cmd/cosign@$(COSIGN_VERSION)
$(SYFT):
	GOBIN=$(dir $@) $(GO) install -trimpath github.com/anchore/syft/cmd/syft@$(SYFT_VERSION)
$(CRANE):
	GOBIN=$(dir $@) $(GO) install -trimpath github.com/google/go-containerregistry/cmd/crane@$(CRANE_VERSION)
$(REGISTRY):
	GOBIN=$(dir $@) $(GO) install -trimpath github.com/distribution/distribution/v3/cmd/registry@$(REGISTRY_VERSION)

release-check: $(ACTIONLINT) $(GORELEASER) ## lint .github/workflows (actionlint) and check .goreleaser.yaml
	$(ACTIONLINT) -no-color
	$(GORELEASER) check

# The SBOM and signing steps need syft and cosign on PATH: release-tools puts
# them in .cache/tools, and the release workflow adds those directories to PATH.
release-tools: $(GORELEASER) $(COSIGN) $(SYFT) $(CRANE) ## goreleaser, cosign, syft and crane for a real release
	@echo $(dir $(GORELEASER)) $(dir $(COSIGN)) $(dir $(SYFT)) $(dir $(CRANE))

# The release's node-agent image: built as root (hack/image.sh), refused
# while it carries stand-ins, pushed by crane; its reference by digest goes
# to .cache/release/helper-image, which make release stamps into both plugins.
IMAGE_REPO ?= ghcr.io/rollbook/node-agent
release-image: $(CRANE) ## build and push the node-agent image of the current tag (root; docs/release.md)
	tag=$$(git describe --tags --exact-match) && bash hack/release-image.sh build "$$tag" "$$(git rev-parse HEAD)" >/dev/null && \
	  CRANE=$(CRANE) IMAGE_REPO=$(IMAGE_REPO) bash hack/release-image.sh push .cache/release/node-agent-image "$$tag"

# The archives of the current tag, stamped with $$ROLLBOOK_RELEASE_HELPER_IMAGE,
# published nowhere, unsigned, no SBOMs: what the release workflow's test
# job builds and its publish job rebuilds to the same bytes.
release-build: $(GORELEASER) ## the current tag's archives and checksums into dist/, nothing published
	$(GORELEASER) release --clean --skip=publish,announce,sign,sbom

release: $(GORELEASER) ## publish the release of the current tag, stamped with the pushed image (make release-image first)
	@[ -s .cache/release/helper-image ] || { echo "make release: no .cache/release/helper-image: run make release-image first" >&2; exit 1; }
	ROLLBOOK_RELEASE_HELPER_IMAGE=$$(cat .cache/release/helper-image) $(GORELEASER) release --clean

# A snapshot signs nothing (there is no identity to sign with offline) and
# writes SBOMs only where syft is on PATH.
dist: $(GORELEASER) ## release snapshot into dist/: archives, checksums, krew manifests (make image builds the image)
	$(GORELEASER) check
	ROLLBOOK_COMMIT=$$(git rev-parse HEAD) $(GORELEASER) release --snapshot --clean --skip=sign \
	  $$(command -v syft >/dev/null || echo --skip=sbom)
	ROLLBOOK_DIST=$(CURDIR)/dist $(GO) test $(E2E) -count=1 ./test/e2e/krew

# The whole release offline (hack/rehearse-release.sh): the image pushed to a
# registry on localhost and signed with a throwaway key, the snapshot's
# archives stamped with it and signed, krew installing them. CI runs it.
rehearse: $(GORELEASER) $(COSIGN) $(CRANE) $(REGISTRY) ## rehearse a release offline: image, localhost registry, signatures, archives, krew (root)
	GORELEASER=$(GORELEASER) COSIGN=$(COSIGN) CRANE=$(CRANE) REGISTRY=$(REGISTRY) bash hack/rehearse-release.sh

image-check: ## build the node-agent image and check every agent requirement inside it (its layers unpacked, overlaid, chroot)
	bash hack/image-check.sh

clean:
	rm -rf $(BIN) .cache/bin
