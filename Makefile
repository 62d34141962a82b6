# kube-proxy-ipvs. `make demo` shows the daemon working in a VM with IPVS;
# `make test` runs every test layer (unit, namespace integration, VM end-to-end).
SHELL := /bin/bash
GO ?= go
BIN := bin
export CGO_ENABLED ?= 0

.PHONY: all build test unit integration vmtest e2e soak outage demo bench lint image deps clean release release-test conformance conformance-ci conformance-prebuild

all: build

# The version (hack/version.sh: git describe, or v0.0.0-<commits>-g<hash> before
# the first tag) is stamped into --version and kubernetes_build_info.
VERSION ?= $(shell hack/version.sh)
LDFLAGS := $(shell VERSION=$(VERSION) hack/version.sh ldflags)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/kube-proxy ./cmd/kube-proxy

# Everything CI runs: the README's test command.
# (make release checks the release it writes; its cold cross-builds, ~10 min, stay
# out of CI's budget; hack/release's own tests run in make unit.)
test: deps conformance-prebuild lint unit integration vmtest e2e conformance-ci

deps:
	hack/install-deps.sh

# deploy/monitoring is a module of its own (Prometheus' parsers check the alert rules
# and the dashboard against the metrics the daemon registers).
unit:
	$(GO) test -count=1 ./...
	cd deploy/monitoring && $(GO) test -count=1 ./...

# Real ipset/iptables/conntrack in throwaway network namespaces (root).
integration:
	hack/integration.sh

# Kernel-layer tests (IPVS, dummy link, conntrack, sysctl) in the IPVS VM.
vmtest:
	hack/vmtest.sh

e2e: build
	test/e2e/run.sh

# Both nodes under churn for SOAK_DURATION with clients running all along
# (TestTwoNodeSoak; `make e2e` runs it for 5 minutes). Report: _output/soak/report.md.
SOAK_DURATION ?= 1h
soak: build
	KPI_E2E_RUN='^TestTwoNodeSoak$$' KPI_SOAK_DURATION=$(SOAK_DURATION) KPI_E2E_TIMEOUT=$${KPI_E2E_TIMEOUT:-4h} test/e2e/run.sh

# The apiserver outage scenarios with a long outage: the daemon started without
# the apiserver, and one running through it under traffic (`make e2e` runs them
# with KPI_E2E_OUTAGE's default, 90 s).
OUTAGE ?= 10m
outage: build
	KPI_E2E_RUN='^(TestStartWithoutAPIServer|TestLongAPIServerOutageUnderTraffic)$$' KPI_E2E_BACKENDS=iptables KPI_E2E_OUTAGE=$(OUTAGE) test/e2e/run.sh

demo: build
	test/e2e/demo.sh

# Upstream's [sig-network] e2e suite (e2e.test and ginkgo v1.37.2) against a fresh
# two-node cluster of VMs per column (test/conformance/run.sh; not part of `make
# test`). FOCUS (a ginkgo regex) and PROXIES (columns) narrow it; the table is
# _output/conformance/results.md.
conformance:
	FOCUS='$(FOCUS)' PROXIES='$(PROXIES)' PARALLEL='$(PARALLEL)' FAMILIES='$(FAMILIES)' test/conformance/run.sh

# make test's conformance step: the specs of test/conformance/ci.txt (ClusterIP,
# NodePort, session affinity, hairpin, cross-node) against ours-iptables on a fresh
# two-node cluster (test/conformance/ci.sh); fails when any of them did not pass.
conformance-ci:
	test/conformance/ci.sh

# make test starts the conformance step's build (binaries, images, node disk) in the
# background at nice 19 right after deps, so a cold build uses the CPU the other
# layers leave idle; conformance-ci waits for it (log: _output/conformance-ci/prebuild.log).
conformance-prebuild:
	test/conformance/ci.sh prebuild

# Scale benchmarks, never part of `test`: the fake kernel, then upstream (ipvs and
# nftables modes) against ours (both rules backends) and the kernel's tools in the
# VM, e.g. `make bench BENCH_SIZES=1000,10000` (hack/bench.sh lists the variables).
bench:
	hack/bench.sh

lint:
	hack/lint.sh

IMAGE ?= kube-proxy-ipvs:dev

image:
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$$(git rev-parse HEAD) \
		--build-arg CREATED=$$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ) -t $(IMAGE) .

# Static binaries for linux/amd64 and linux/arm64, the image as an OCI layout archive
# (both architectures, built without Docker or a registry), an SPDX SBOM and
# SHA256SUMS in _output/release/$(VERSION)/ (hack/release.sh; root, as
# hack/image-rootfs.sh), then checks what it wrote (TestRelease).
release:
	VERSION=$(VERSION) hack/release.sh
	cd hack/release && KPI_RELEASE_DIR=$(CURDIR)/_output/release/$(VERSION) $(GO) test -count=1 -run '^TestRelease$$' -v .

release-test: release

clean:
	rm -rf $(BIN) _output
