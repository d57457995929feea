#!/usr/bin/env bash
# Fails if README.md or docs/**/*.md cite a file, line or declaration that is
# not where they say: in this repository, or in a k8s.io module at the
# version go.mod (or hack/tools/go.mod) builds with, or a claim's proof that
# is no test make test runs, or a proof table's line that is no assertion of
# the test it names (hack/verify-docs/proof.go), or a proof of the informer
# guide without a row in docs/informer-proofs.md; it prints how many claims cite a proof and fails below
# proofFloor (hack/verify-docs/check.go). The grammar of a
# citation is in hack/verify-docs/markdown.go. The checker downloads the
# modules it reads ("go mod download"), so it works on an empty module cache.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

# Built, then run, rather than "go run": go run adds its own "exit status 1"
# line to the report. With the release's flags, whose compile of the
# standard library it shares.
scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT
CGO_ENABLED=0 go build -trimpath -o "${scratch}/verify-docs" ./hack/verify-docs
"${scratch}/verify-docs" --root="${REPO_ROOT}"
