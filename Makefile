# bar-controller. `make help` lists the targets.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The full commit, for --version, bar_controller_build_info and the
# User-Agent (internal/version).
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VERSION_PKG := github.com/barcontroller/bar-controller/internal/version
GO_LDFLAGS := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT)
IMAGE ?= bar-controller:$(VERSION)

SHELL := /bin/bash
.SHELLFLAGS := -o errexit -o nounset -o pipefail -c

# hack/install-k8s-binaries.sh builds etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kubelet and kwok from source once
# (many minutes; hack/install-tools.sh, one go build for every missing tool),
# caches them under bin/k8s-<version>/, and prints that directory; later
# runs only print it.
KUBE_BIN_DIR_CMD := hack/install-k8s-binaries.sh | tail -n 1

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build bin/bar-controller.
	CGO_ENABLED=0 go build -trimpath -ldflags "$(GO_LDFLAGS)" -o bin/bar-controller .

# The launcher is built and exec'd rather than "go run": then it is make's
# own child, and gets the SIGINT or SIGTERM that stops make, with nothing in
# between that could exit first and orphan it.
# It is built as the controller is (CGO_ENABLED=0, -trimpath), so that
# the client-go and standard library they share are compiled once.
# ARGS are passed to bar-controller: make run ARGS='--trace=default/example'.
ARGS ?=

.PHONY: run
run: build ## Start a local control plane with simulated nodes, run bar-controller against it (its flags in ARGS=...), apply the example Bar. Ctrl-C stops everything.
	CGO_ENABLED=0 go build -trimpath -o bin/local-up ./hack/local-up
	kube_bin_dir="$$($(KUBE_BIN_DIR_CMD))" && exec bin/local-up --bin-dir="$$kube_bin_dir" --controller=bin/bar-controller -- $(ARGS)

# The control plane make run uses, the controller with --trace and the
# flags make run gives it; each scenario waits for the Bar to converge and
# the controller's log to go quiet (about 35 s in all, the control plane's
# start included). test/traces reruns the same scenarios under make test
# and fails when the committed captures drift from the code.
.PHONY: traces
traces: build ## Rerun the scenarios of docs/informer-traces.md and the exercises of docs/exercises.md on a local control plane and rewrite their captures: the controller's --trace log, and what the exercises' commands print.
	go build -o bin/traces ./hack/traces
	kube_bin_dir="$$($(KUBE_BIN_DIR_CMD))" && bin/traces --bin-dir="$$kube_bin_dir" --controller=bin/bar-controller

.PHONY: test
# As root, the node tests' packages (containerd, runc, CNI plugins) are
# installed when missing, and the node tests must then run; as another user
# they skip, saying what is missing. test/node runs on its own, after the
# rest: its Pods get the CPU shares of their requests (100m), and a compile
# or another real-cluster suite beside them starves their probes.
#
# The package list is taken into a variable of its own first: as an
# argument, a go list that fails would leave go test with fewer packages
# (with none, only the current directory's), and errexit does not see the
# status of a command substitution inside another command.
#
# What ships is tested with the tools its users run: helm (the chart, its
# upgrade, the release installed from a registry), cosign (the release's
# signature) and promtool (every alert). Like the Kubernetes binaries they
# are built from source once (hack/install-tools.sh, all in one go build)
# and then required, so that none of those tests can skip.
# hack/install-test-deps.sh builds them with the Kubernetes binaries and
# installs (as root) the node's packages beside that build,
# and prints the environment below; an export of a failed command
# substitution would not stop the recipe, hence the variable first.
#
# The test binaries are built without DWARF (-dwarf=false: about 15 % less
# CPU for every package compiled, docs/measurements/ci-and-control-plane.md) and
# linked without it (-w: 5.5 CPU-s a link of test/e2e's size, not 8.5): nothing
# reads it, a test's stack traces come from the binary's own tables. And go
# test's own vet pass is off: make verify (hack/verify-lint.sh) runs go vet with
# every analyzer over the same compile, and the smaller set that go test runs
# cannot share its results.
TEST_FLAGS := -race -vet=off -gcflags=all=-dwarf=false -ldflags=-w

test: ## Run all tests (unit, real control plane, real node, chart, alerts, release; with -race); builds the control plane, kubelet, helm, cosign and promtool on first use.
	deps="$$(hack/install-test-deps.sh)"; \
	while IFS='=' read -r k v; do export "$$k=$$v"; done <<<"$$deps"; \
	export BAR_REQUIRE_INTEGRATION=1 BAR_REQUIRE_HELM=1 BAR_REQUIRE_COSIGN=1 BAR_REQUIRE_PROMTOOL=1; \
	pkgs="$$(go list ./... | grep -v /test/node)"; \
	go test $(TEST_FLAGS) -count=1 -timeout=30m $$pkgs; \
	go test $(TEST_FLAGS) -count=1 -timeout=20m ./test/node; \
	cd test/bench/peer && go test $(TEST_FLAGS) -count=1 ./...

.PHONY: test-unit
test-unit: ## Run only the unit tests (fake clients; seconds, nothing to build).
	go test $(TEST_FLAGS) -count=1 ./...

# N=... chooses the numbers of Bars (default 500,2000,5000), BENCH_ARGS
# passes other flags (go run ./test/bench --help); BENCH_ARGS=--breakdown=2000
# shows instead where the API server's CPU goes
# (docs/measurements/benchmarks-converge-and-concurrency.md).
N ?= 500,2000,5000
BENCH_ARGS ?=

.PHONY: bench
bench: build ## Measure converge time against a floor, writes per Bar, idle writes, memory and CPU on a real API server, beside a controller-runtime peer (test/bench/peer), then at 2,000 Bars a restart, latency under churn and an API server restart; writes docs/benchmarks.md and its plot, and refits docs/sizing-model.md.
	go build -o bin/bench ./test/bench
	cd test/bench/peer && go build -o ../../../bin/bench-peer .
	kube_bin_dir="$$(hack/install-k8s-binaries.sh etcd kube-apiserver kubectl | tail -n 1)" && bin/bench --bin-dir="$$kube_bin_dir" --controller=bin/bar-controller --peer=bin/bench-peer --n=$(N) $(BENCH_ARGS)
	go run ./test/bench/model/cmd/sizing-model -w

# The sharded part of docs/benchmarks-large.md: one replica's cost at
# 50,000 Bars with 6 shards over 1 and over 3 replicas (docs/sharding.md).
# Other sizes or shapes: make bench N=5000 BENCH_ARGS="--shards=6 --replicas=1,3 --out=".
.PHONY: bench-sharded
bench-sharded: build ## Measure one replica's memory and CPU at 50,000 Bars: unsharded, then 6 shards over 1 and over 3 replicas (about 45 minutes); writes the sharded part of docs/benchmarks-large.md.
	go build -o bin/bench ./test/bench
	kube_bin_dir="$$(hack/install-k8s-binaries.sh etcd kube-apiserver kubectl | tail -n 1)" && bin/bench --bin-dir="$$kube_bin_dir" --controller=bin/bar-controller --n=50000 --shards=6 --replicas=1,3 --out=docs/benchmarks-large.md --log-dir=_output/bench-sharded

# The GC headroom part of docs/benchmarks-large.md: a cold start's peak
# memory against --gc-headroom-percent at 5,000 and 50,000 Bars.
.PHONY: bench-gc
bench-gc: build ## Measure a cold start's peak RSS and live heap at 5,000 and 50,000 Bars for --gc-headroom-percent 0 (Go's GOGC=100), 50, 30 and 20; writes the GC headroom part of docs/benchmarks-large.md.
	go build -o bin/bench ./test/bench
	kube_bin_dir="$$(hack/install-k8s-binaries.sh etcd kube-apiserver kubectl | tail -n 1)" && bin/bench --bin-dir="$$kube_bin_dir" --controller=bin/bar-controller --n=5000,50000 --gc-headroom=0,50,30,20 --out=docs/benchmarks-large.md --log-dir=_output/bench-gc

# The large sizes take most of an hour on 2 cores (150,000 objects per
# floor), so they have a report of their own: one controller run per row,
# 5,000 Bars measured again in the same run for the linearity target.
# The test API server and etcd hold about 23 GB by the end of the
# 50,000-Bar row (docs/measurements/benchmarks-memory-and-50000-bars.md, 50,000
# Bars): a machine with 24 GB runs it; two controller runs per row (make bench
# N=50000) need more.
.PHONY: bench-large
bench-large: build ## Measure 5,000 and 50,000 Bars (one run each, then at 50,000 a restart, latency under churn and an API server restart); writes docs/benchmarks-large.md and its plot, and refits docs/sizing-model.md.
	go build -o bin/bench ./test/bench
	kube_bin_dir="$$(hack/install-k8s-binaries.sh etcd kube-apiserver kubectl | tail -n 1)" && bin/bench --bin-dir="$$kube_bin_dir" --controller=bin/bar-controller --n=5000,50000 --runs=1 --unrelated=0 --apf=0 --churn-n=50000 --out=docs/benchmarks-large.md --log-dir=_output/bench-large
	go run ./test/bench/model/cmd/sizing-model -w

# make test runs only the quick fault cases; BAR_FAULTS_ALL=1 adds the slow
# ones, over 40 s each (slow in test/faults/observe_test.go). CI (.ci/run)
# runs this target after make test, so the slow cases' evidence is checked
# on every run, alone on the machine and without -race, as their bounds
# were measured.
# FAULTS=slow runs only the slow cases: .ci/run's choice, right after make
# test ran the quick ones. The test binary is built as the release and the
# controller under test are (CGO_ENABLED=0, -trimpath), so that its
# dependencies' compile is theirs, already made, not a set of its own.
FAULTS ?= all

.PHONY: faults
faults: ## Kill kube-apiserver, freeze etcd, SIGKILL the controller or its leader, fight it, starve it with APF, start it without its CRD or API server, delete 2,000 Bars; print a pass/fail table with timings (FAULTS=slow: only the cases make test skips).
	kube_bin_dir="$$(hack/install-k8s-binaries.sh etcd kube-apiserver kubectl | tail -n 1)" && \
	slow_only="$$([[ "$(FAULTS)" == slow ]] && echo 1 || true)" && \
	KUBE_BIN_DIR="$$kube_bin_dir" BAR_REQUIRE_INTEGRATION=1 BAR_FAULTS_ALL=1 BAR_FAULTS_SLOW_ONLY="$$slow_only" \
	  CGO_ENABLED=0 go test -trimpath -count=1 -v -timeout=30m ./test/faults

# hack/flake-hunt.sh reruns tests in fresh processes and prints each one's
# pass rate and the spread of every figure it logs: the noise model a time
# bound in a test is derived from. PKG= the package (./test/faults), RUN=
# the -run regexp, N= the runs (10 here; bench's N means something else);
# FLAKE_HUNT_FLAGS passes --race, --markdown, --stop-on-fail. The
# environment is make faults' (the real-cluster tests must run, the slow
# fault cases too) and, as root for test/node, make test's.
PKG ?= .
RUN ?= .
FLAKE_HUNT_FLAGS ?=

.PHONY: flake-hunt
flake-hunt: N = 10
flake-hunt: ## Rerun the tests RUN= of package PKG= N= times (default 10) in fresh processes; print each test's pass rate and the min/median/max of every figure it logs (hack/flake-hunt.sh).
	dir="$$($(KUBE_BIN_DIR_CMD))"; \
	if [[ $$(id -u) -eq 0 && "$(PKG)" == *test/node* ]]; then hack/install-node-deps.sh; export BAR_REQUIRE_NODE=1; fi; \
	KUBE_BIN_DIR="$$dir" BAR_REQUIRE_INTEGRATION=1 BAR_FAULTS_ALL=1 \
	  hack/flake-hunt.sh $(FLAKE_HUNT_FLAGS) "$(PKG)" "$(RUN)" "$(N)"

FUZZTIME ?= 2m

.PHONY: fuzz
fuzz: ## Fuzz the desired state (FuzzNewDeployment) for FUZZTIME (default 2m); new crashers land in testdata/fuzz.
	go test -gcflags=all=-dwarf=false -run='^$$' -fuzz=FuzzNewDeployment -fuzztime=$(FUZZTIME) .

.PHONY: k8s-binaries
k8s-binaries: ## Build and cache the Kubernetes binaries the tests and make run use.
	$(KUBE_BIN_DIR_CMD)

.PHONY: generate
generate: ## Regenerate clients, deepcopy and the CRD from pkg/apis.
	hack/update-codegen.sh

.PHONY: verify
verify: ## Check generated code and diagrams are current, the docs' citations resolve, and run gofmt, go vet and shellcheck.
	hack/verify-codegen.sh
	hack/shared-deps.sh
	hack/verify-diagrams.sh
	hack/verify-docs.sh
	hack/verify-lint.sh

.PHONY: diagrams
diagrams: ## Render docs/diagrams/*.dot to SVG with Graphviz (installed from Debian if missing).
	hack/update-diagrams.sh

.PHONY: ci-fresh
ci-fresh: ## Run .ci/run as a fresh machine would: fresh clone of HEAD, empty Go caches, no bin/ (most of an hour).
	hack/ci-fresh.sh

# The same image as the Dockerfile's, built from this tree by
# go-containerregistry (hack/build-image): the static binary with the
# Dockerfile's flags as the only file, the entrypoint, user 65532. The
# commit time stamps it, so a rebuild of a commit gives the same digest.
IMAGE_DIR := _output/image

.PHONY: image-tar
image-tar: ## Build the container image as an OCI archive, _output/image/bar-controller.tar, with no Docker engine or registry.
	mkdir -p $(IMAGE_DIR)
	CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w $(GO_LDFLAGS)" -o $(IMAGE_DIR)/bar-controller .
	SOURCE_DATE_EPOCH="$$(git log -1 --format=%ct 2>/dev/null || echo 0)" \
	  go run ./hack/build-image --binary=$(IMAGE_DIR)/bar-controller --ref=$(IMAGE) --out=$(IMAGE_DIR)/bar-controller.tar

.PHONY: image
image: ## Build the container image (needs a Docker engine).
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) .

# A release of the commit HEAD (never uncommitted edits: hack/release
# builds from git archive), with no Docker engine: the static binary for
# linux/amd64 and linux/arm64 (-trimpath, -buildvcs=false, stamped by -X),
# each platform's image as image-tar builds it, one OCI image index over
# them, stamped with the commit's time so that a rebuild gives the same
# digests. REGISTRY=host/repo pushes the index there by digest, and tags
# it VERSION last, after every signature (credentials from the Docker
# config, as crane's); without it the index is an OCI layout in
# _output/release/oci, and install.yaml names REPO (default REGISTRY, else
# bar-controller). With REGISTRY the chart is pushed too, as helm push
# would, to CHART_REGISTRY/bar-controller (default: charts/ beside the
# image's repository), tagged X.Y.Z before the index is tagged.
# kubectl renders the manifests, as the real-cluster tests render
# artifacts/.
# COSIGN_KEY=<key reference> (a key file, env://VAR, a KMS URI; a file's
# password in $COSIGN_PASSWORD) signs with cosign, built from source once
# (hack/install-tool.sh cosign): the index and the chart in REGISTRY, the
# SBOMs and the SLSA provenance as attestations there, the chart's file
# and SHA256SUMS beside them; RELEASE_NOTES.md gives the command that verifies each. A push to
# REGISTRY needs COSIGN_KEY, or UNSIGNED=1 (exactly 1: 0, false or a
# value inherited from elsewhere do not) to publish unsigned on purpose.
REGISTRY ?=
CHART_REGISTRY ?=
REPO ?=
COSIGN_KEY ?=
UNSIGNED ?=
RELEASE_DIR := _output/release

.PHONY: release
release: ## Build release VERSION=vX.Y.Z of HEAD, no Docker: the image index for linux/amd64+arm64 pushed to REGISTRY=host/repo, tagged last, or written as an OCI layout, install.yaml and install-namespaced.yaml by digest, the Helm chart packaged (bar-controller-X.Y.Z.tgz) and pushed beside the image, SPDX SBOMs, SLSA provenance, SHA256SUMS, release notes, in _output/release/; COSIGN_KEY= signs the index, SBOMs, provenance, chart and SHA256SUMS.
	rm -rf $(RELEASE_DIR)
	kube_bin_dir="$$(hack/install-k8s-binaries.sh kubectl | tail -n 1)" && cosign=cosign && \
	if [[ -n "$(COSIGN_KEY)" ]]; then cosign="$$(hack/install-tool.sh cosign)/cosign"; fi && \
	CGO_ENABLED=0 go run -trimpath ./hack/release --version=$(VERSION) --registry=$(REGISTRY) --chart-registry=$(CHART_REGISTRY) --repo=$(REPO) --out=$(RELEASE_DIR) \
	  --kubectl="$$kube_bin_dir/kubectl" --cosign="$$cosign" --cosign-key="$(COSIGN_KEY)" $(if $(filter 1,$(UNSIGNED)),--unsigned)

# The chart's tests need helm, which no other target does: it is built
# from source once (hack/install-tool.sh helm, version in hack/k8s-versions.env)
# into bin/helm-<version>/, as the Kubernetes binaries are.
.PHONY: test-chart
test-chart: ## Build helm from source once, then test charts/bar-controller (make test does too): the same objects as kubectl kustomize of artifacts/ and artifacts/namespaced, helm lint --strict, the values schema refusing bad values, helm upgrade from the previous chart on a real API server.
	helm_dir="$$(hack/install-tool.sh helm)" && kube_bin_dir="$$(hack/install-k8s-binaries.sh etcd kube-apiserver kubectl | tail -n 1)" && \
	HELM="$$helm_dir/helm" KUBE_BIN_DIR="$$kube_bin_dir" BAR_REQUIRE_HELM=1 BAR_REQUIRE_INTEGRATION=1 go test -race -count=1 ./charts

# The alerts' tests need promtool, which no other target does: it is built
# from source once (hack/install-tool.sh promtool, version in
# hack/k8s-versions.env) into bin/promtool-<version>/, as helm is.
# make test builds it too and runs them with the rest of test/monitoring.
.PHONY: test-monitoring
test-monitoring: ## Build promtool from source once, then test artifacts/monitoring: promtool check rules and test rules (every alert fires and stays silent), a runbook section per alert, every metric the alerts and the dashboard query exported by the controller.
	promtool_dir="$$(hack/install-tool.sh promtool)" && \
	PROMTOOL="$$promtool_dir/promtool" BAR_REQUIRE_PROMTOOL=1 go test -count=1 ./test/monitoring
