# tidal: build, demo, test. The demo and the tests manage real cgroups: run them as root.
GO ?= go
BIN := bin/tidal
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build demo test test-short lint bench clean

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/tidal

# The live colocation demo on this host (about 80 s; Ctrl-C stops and cleans up).
demo: build
	./$(BIN) demo

# Every test, with the race detector, against real cgroups and real processes.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...

# Only pure-logic tests (no root needed).
test-short:
	$(GO) test -short -count=1 ./...

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	$(GO) vet ./...

clean:
	rm -rf bin
