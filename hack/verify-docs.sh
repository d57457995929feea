#!/usr/bin/env bash
# Fails if README.md or docs/*.md cite a file, line or declaration that is
# not where they say: in this repository, or in a k8s.io module at the
# version go.mod (or hack/tools/*/go.mod) builds with. The grammar of a
# citation is in hack/verify-docs/markdown.go. The checker downloads the
# modules it reads ("go mod download"), so it works on an empty module cache.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

go run ./hack/verify-docs --root="${REPO_ROOT}"
