# bar-controller. `make help` lists the targets.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GO_LDFLAGS := -X main.version=$(VERSION)
IMAGE ?= bar-controller:$(VERSION)

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build bin/bar-controller.
	CGO_ENABLED=0 go build -trimpath -ldflags "$(GO_LDFLAGS)" -o bin/bar-controller .

.PHONY: test
test: ## Run all tests with the race detector.
	go test -race -count=1 ./...

.PHONY: generate
generate: ## Regenerate clients, deepcopy and the CRD from pkg/apis.
	hack/update-codegen.sh

.PHONY: verify
verify: ## Check generated code is current, and run gofmt, go vet and shellcheck.
	hack/verify-codegen.sh
	hack/verify-lint.sh

.PHONY: image
image: ## Build the container image (needs a Docker engine).
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .
