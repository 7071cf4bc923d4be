# memra — two commands on a fresh machine: `make run` and `make test`.
GO        ?= go
BIN       := bin/memra
# -buildvcs=auto stamps the commit (bench rows name it) even where GOFLAGS turns stamping off
GOFLAGS_BUILD := -trimpath -buildvcs=auto
export CGO_ENABLED := 0

.PHONY: run build gpu-build image plugins test test-tools test-go test-npm check bench clean

## run: serve the embedded default model on http://127.0.0.1:8080 (OpenAI-compatible)
run: build
	./$(BIN) serve

## build: the static memra binary (no cgo; GPU support is found at run time)
build:
	$(GO) build $(GOFLAGS_BUILD) -o $(BIN) ./cmd/memra

## gpu-build: the binaries scripts/gpu-battery.sh runs on a GPU machine (built here, no GPU needed),
## and their gzipped copies (a lent GPU machine takes at most 64 MiB with the tree; the battery unpacks them)
gpu-build:
	$(GO) build $(GOFLAGS_BUILD) -ldflags="-s -w" -o .gpu/memra ./cmd/memra
	$(GO) test -c -ldflags="-s -w" -o .gpu/cuda.test ./runtime/cuda
	gzip -kf .gpu/memra .gpu/cuda.test

## image: the container image (Dockerfile: the binary on distroless glibc; the NVIDIA container
## toolkit mounts the driver at run time). IMAGE names it; VERSION is stamped into the binary.
IMAGE   ?= memra:$(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
DOCKER  ?= docker
image:
	$(DOCKER) build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

## plugins: the example WebAssembly plugins (built from source; not committed)
plugins:
	GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -buildmode=c-shared -o bin/plugins/chatml.wasm ./serve/plugin/examples/chatml
	GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -buildmode=c-shared -o bin/plugins/regex.wasm ./serve/plugin/examples/regex

## test: every test: Go packages (with fuzz seed corpora), then the OpenAI SDK suite
## (which needs node, npm and curl: checked first, so a missing one is named at once)
test: test-tools test-go test-npm

test-tools:
	@bash serve/npmtest/run.sh --check

test-go: plugins
	$(GO) test -count=1 -timeout 20m ./...
	@$(GO) run ./internal/nvrtcgate

test-npm:
	bash serve/npmtest/run.sh

## check: formatting, vet, generated files and go.mod up to date
check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) generate ./...
	git diff --exit-code
	$(GO) mod tidy
	git diff --exit-code go.mod go.sum

## bench: prompt and generation speed of the embedded model on this machine
bench: build
	./$(BIN) bench -p 128 -n 64 -r 5

clean:
	rm -rf bin
