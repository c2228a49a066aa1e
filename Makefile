# nodehub: build, test, demo and bench. `make test` is what CI runs.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# Third-party packages (k8s.io and what it pulls in): no inlining — their generated
# (de)serialisation code is most of the binary and is off the hot path (nodehub passes bodies
# through as bytes); measured -0.63 MiB on arm64 and no change in the filter benchmarks — and every
# package-level map literal is built in a function of its own (-d=wrapglobalmapctl=2; by default
# only maps of 20 or more nodes are), so the linker drops the maps nothing reads: k8s.io/api's ~200
# small SwaggerDoc maps were built at start (80 KB of heap, 700 inserts) and linked with their
# strings; -0.19 MiB on arm64. Standard packages that only run when a certificate is parsed or
# checked, or with --profiling (COLDSTD), are not inlined either: -0.09 MiB. Our code and the rest
# of the standard library are compiled as usual.
TPFLAGS := -l -d=wrapglobalmapctl=2
COLDSTD := math/big crypto/x509 encoding/asn1 regexp/syntax runtime/pprof
GCFLAGS := $(foreach p,k8s.io sigs.k8s.io github.com go.yaml.in gopkg.in,"-gcflags=$(p)/...=$(TPFLAGS)") \
	$(foreach p,$(COLDSTD),-gcflags=$(p)=-l)
GOBUILD := CGO_ENABLED=0 GOOS=linux go build -trimpath $(GCFLAGS) -ldflags "$(LDFLAGS)"

.PHONY: build binary arm test unit e2e deps controlplane coredns flannel kubeproxy demo bench fuzz vet clean

build: ## static amd64 binary ./nodehub
	GOARCH=amd64 $(GOBUILD) -o nodehub .

binary: ## one binary: make binary OUT=path GOARCH=arm64 (GOARM=7 for armv7); what tests and bench build
	$(GOBUILD) -o $(OUT) .

arm: ## arm64 and armv7 binaries into build/arm/
	GOARCH=arm64 $(GOBUILD) -o build/arm/nodehub-arm64 .
	GOARCH=arm GOARM=7 $(GOBUILD) -o build/arm/nodehub-armv7 .

vet:
	go vet ./...
	cd test/e2e && go vet ./...
	cd bench && go vet ./...

# Every parser that sees bytes from a client or the cloud has a fuzz target (package:target).
# Budgets are execution counts, not durations: Go 1.26's fuzz coordinator can fail a run at the
# end of a -fuzztime duration with 'context deadline exceeded' on a loaded machine (go.dev/issue/75804).
FUZZ_TARGETS := \
	wire:FuzzParseURL wire:FuzzDecodeProtoEnvelope wire:FuzzJSONListSplitter wire:FuzzProtoListSplitter \
	wire:FuzzWatchSplitters wire:FuzzJSONMember wire:FuzzExtractMeta wire:FuzzConvert wire:FuzzDecodeProtoWatchEvent \
	wire:FuzzSelector wire:FuzzBearerToken hub/local:FuzzApplyPatch \
	wire:FuzzReadNodeFacts hub/tokens:FuzzDecode hub/tokens:FuzzJWTExpiry \
	node/certs:FuzzParseYAML node/certs:FuzzClusterInfo node/certs:FuzzKubeconfig hub/identity:FuzzOf \
	hub/endpointfix:FuzzCorrections cache:FuzzResync cache:FuzzLZDecode
# make test: a short run of each (seconds); make fuzz: a long one (FUZZ_EXECS each, ~minutes).
FUZZ_SHORT ?= 20000
FUZZ_EXECS ?= 2000000

unit: ## unit tests and short fuzz runs of every parser of client or cloud bytes
	go test -count=1 ./...
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} ($(FUZZ_SHORT)x)"; \
		go test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZ_SHORT)x ./$${t%%:*}; \
	done

fuzz: ## long fuzz runs of every parser (FUZZ_EXECS executions each; one target: make fuzz FUZZ_TARGETS=wire:FuzzConvert)
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} ($(FUZZ_EXECS)x)"; \
		go test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZ_EXECS)x ./$${t%%:*}; \
	done

deps: ## install what the e2e tests run: promtool, busybox, qemu-user-static (build/deps.sh)
	sh build/deps.sh

controlplane: ## build (once per go.sum) etcd, kube-apiserver, kube-controller-manager, kubectl and kubemark from the Go module proxy, at v1.34 and v1.37
	sh test/e2e/controlplane/build.sh test/e2e/controlplane
	sh test/e2e/controlplane/build.sh test/e2e/controlplane137

coredns: ## build (once per go.sum) CoreDNS with its kubernetes plugin from the Go module proxy
	sh test/e2e/coredns/build.sh

flannel: ## build (once per go.sum) flanneld from the Go module proxy
	sh test/e2e/flannel/build.sh

kubeproxy: controlplane ## build (once per go.sum) the real kube-proxy of v1.34 and v1.37 from the control planes' modules (unchanged)
	for m in controlplane controlplane137; do sh test/e2e/kubeproxy/build.sh test/e2e/$$m >/dev/null || exit 1; done

e2e: deps controlplane coredns flannel kubeproxy ## end-to-end tests against the real control plane
	cd test/e2e && go test -count=1 -timeout 60m ./...

test: deps vet unit e2e ## everything CI runs (.ci/run); installs what it needs first

demo: build controlplane ## a local real control plane, nodehub in front of it, kubectl through it
	cd test/e2e && NODEHUB_BIN=$(CURDIR)/nodehub go run ./cmd/demo

bench: controlplane ## figures: binary sizes, RSS, latency, offline, cache, filters
	cd bench && go run .
	go test -run '^$$' -bench . -benchmem ./filter ./cache

clean:
	rm -f nodehub build/arm/nodehub-arm64 build/arm/nodehub-armv7
