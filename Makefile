# kube-proxy-ipvs. `make demo` shows the daemon working in a VM with IPVS;
# `make test` runs every test layer (unit, namespace integration, VM end-to-end).
SHELL := /bin/bash
GO ?= go
BIN := bin
export CGO_ENABLED ?= 0

.PHONY: all build test unit integration vmtest e2e soak demo bench lint image deps clean

all: build

build:
	$(GO) build -o $(BIN)/kube-proxy ./cmd/kube-proxy

# Everything CI runs: the README's test command.
test: deps lint unit integration vmtest e2e

deps:
	hack/install-deps.sh

unit:
	$(GO) test -count=1 ./...

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

demo: build
	test/e2e/demo.sh

bench:
	hack/bench.sh

lint:
	hack/lint.sh

IMAGE ?= kube-proxy-ipvs:dev
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)

image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

clean:
	rm -rf $(BIN) _output
