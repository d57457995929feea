#!/usr/bin/env bash
# Regenerates everything derived from the Go types in pkg/apis:
#   - deepcopy functions (zz_generated.deepcopy.go) for the internal version
#     (pkg/apis/barcontroller) and every served version
#   - conversions between each served version and the internal one
#     (zz_generated.conversion.go; conversion-gen runs for the packages
#     tagged +k8s:conversion-gen)
#   - the typed clientset, listers, informers and apply configurations
#     under pkg/generated (k8s.io/code-generator's kube_codegen.sh)
#   - the CustomResourceDefinition under artifacts/crd (controller-gen)
# Both generators are pinned in go.mod, so this runs from the module cache.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

# The generators are built as the release builds the controller
# (CGO_ENABLED=0, -trimpath): what they share with it, apimachinery,
# protobuf, kube-openapi and the standard library, is then compiled once,
# where CI would compile it again for them alone
# (docs/measurements/ci-and-control-plane.md, "A first CI under an hour").
export CGO_ENABLED=0
export GOFLAGS="-trimpath${GOFLAGS:+ ${GOFLAGS}}"

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

# Clients only for the versioned packages with +genclient types: gen_client
# looks for packages named like a version (v1, v1alpha1), so the internal
# package is never a client. Bar's spec uses core/v1's ResourceRequirements,
# whose apply configuration client-go already has.
kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --applyconfig-externals "k8s.io/api/core/v1.ResourceRequirements:k8s.io/client-go/applyconfigurations/core/v1" \
    --output-dir "${REPO_ROOT}/pkg/generated" \
    --output-pkg "${MODULE}/pkg/generated" \
    --boilerplate "${REPO_ROOT}/hack/boilerplate.go.txt" \
    "${REPO_ROOT}/pkg/apis"

# One CRD with every served version. Only the versioned packages: the
# internal version is never served. Which version is served, which one is
# stored and which is deprecated comes from markers on the Bar types
# (+kubebuilder:storageversion, +kubebuilder:deprecatedversion): v1 is
# stored, v1alpha1 served and deprecated.
echo "Generating the CRD with controller-gen"
go tool controller-gen \
    crd \
    paths="./pkg/apis/barcontroller/v1alpha1;./pkg/apis/barcontroller/v1" \
    output:crd:artifacts:config=artifacts/crd

# Serving two versions that put fields in different places needs the
# conversion webhook; controller-gen has no marker for it, so the CRD file
# gets its spec.conversion here (the Service of artifacts/install, no
# caBundle: the controller fills that in).
echo "Adding the conversion webhook to the CRD"
go run ./hack/crd-conversion artifacts/crd/barcontroller.dev_bars.yaml
