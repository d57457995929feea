#!/usr/bin/env bash
# Regenerates everything derived from the Go types in pkg/apis:
#   - deepcopy functions (zz_generated.deepcopy.go)
#   - the typed clientset, listers, informers and apply configurations
#     under pkg/generated (k8s.io/code-generator's kube_codegen.sh)
#   - the CustomResourceDefinition under artifacts/crd (controller-gen)
# Both generators are pinned in go.mod, so this runs from the module cache.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

MODULE="$(go list -m)"
# `go list -m -f {{.Dir}}` only reports where a module already is and prints
# an empty string on a machine whose module cache does not hold it yet (no
# build or test imports code-generator): download it first.
go mod download k8s.io/code-generator
CODEGEN_PKG="$(go list -m -f '{{.Dir}}' k8s.io/code-generator)"
if [[ ! -f "${CODEGEN_PKG}/kube_codegen.sh" ]]; then
    echo "k8s.io/code-generator not found in the module cache (got '${CODEGEN_PKG}')" >&2
    exit 1
fi

# kube_codegen.sh `go install`s the generators; keep them inside the project
# instead of the user's GOPATH/bin.
export GOBIN="${REPO_ROOT}/bin/codegen"
mkdir -p "${GOBIN}"

# shellcheck source=/dev/null # lives in the module cache
source "${CODEGEN_PKG}/kube_codegen.sh"

kube::codegen::gen_helpers \
    --boilerplate "${REPO_ROOT}/hack/boilerplate.go.txt" \
    "${REPO_ROOT}/pkg/apis"

kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --output-dir "${REPO_ROOT}/pkg/generated" \
    --output-pkg "${MODULE}/pkg/generated" \
    --boilerplate "${REPO_ROOT}/hack/boilerplate.go.txt" \
    "${REPO_ROOT}/pkg/apis"

echo "Generating the CRD with controller-gen"
go tool controller-gen \
    crd \
    paths="./pkg/apis/..." \
    output:crd:artifacts:config=artifacts/crd
