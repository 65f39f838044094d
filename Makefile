# tidal: build, demo, test. The demo and the tests manage real cgroups: run them as root.
GO ?= go
BIN := bin/tidal
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build image demo test test-short lint bench fuzz faults soak reliability clean

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/tidal

# The container image deploy/ runs (Dockerfile): needs a Docker engine or a compatible builder.
IMAGE ?= ghcr.io/tidalqos/tidal:$(VERSION)
image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

# The live colocation demo on this host (about 80 s; Ctrl-C stops and cleans up).
demo: build
	./$(BIN) demo

# Every test, with the race detector, against real cgroups and real processes. One package
# at a time (-p 1): the integration tests measure what the node lends, and another package's
# CPU-heavy tests running beside them would be online load they must not see. vm-tools.sh
# prepares the cgroup v2 VM that tests/cgroupv2 boots (docs/cgroup-v2.md); bench-tools.sh
# installs the real servers the tests run as online work (Redis for its SLO probe).
test:
	./scripts/bench-tools.sh
	./scripts/kube-tools.sh
	./scripts/cri-tools.sh
	./scripts/vm-tools.sh
	./scripts/prom-tools.sh
	$(GO) vet ./...
	$(GO) test -race -count=1 -p 1 -timeout 30m ./...
	FUZZTIME=3s ./scripts/fuzz.sh

# Every fuzz target for longer (FUZZTIME each, default 2m: about 35 minutes). A failing input
# lands in the package's testdata/fuzz/: commit it with the fix (docs/reliability.md).
FUZZTIME ?= 2m
fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

# The fault-injection suite alone (real agent, arbiter, cgroups and processes; as root).
faults:
	$(GO) test -race -count=1 -v -timeout 20m ./tests/faults

# The soak: 200 workloads churned for SOAK_DURATION (default 30m), sampled; as root.
SOAK_DURATION ?= 30m
soak:
	TIDAL_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -v -run TestSoak -timeout 0 ./tests/faults

# docs/reliability.md, regenerated: fault suite, a soak of RELIABILITY_SOAK (default 5m) and
# RELIABILITY_FUZZTIME per fuzz target (default 30s), measured on this machine, as root.
RELIABILITY_SOAK ?= 5m
RELIABILITY_FUZZTIME ?= 30s
reliability:
	./scripts/reliability.sh $(RELIABILITY_SOAK) $(RELIABILITY_FUZZTIME)

# Only pure-logic tests (no root needed).
test-short:
	$(GO) test -short -count=1 ./...

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	$(GO) vet ./...

# The colocation benchmark on this host, as root (about four hours: 4 servers x 16 scenarios x 3
# rounds of about 70 s): four online servers (nginx, Apache httpd and Redis, installed by
# scripts/bench-tools.sh, and the Go one) through sixteen scenarios interleaved over three
# rounds, then the agent's overhead with 200 workloads. Writes results.md, results.json and a
# plot per scenario into bench-results/ (docs/benchmark.md).
bench:
	./scripts/bench-tools.sh
	$(GO) run ./tests/colocation -out bench-results

clean:
	rm -rf bin
