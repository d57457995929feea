#!/usr/bin/env bash
# Checks that every module the controller's binary is built from is, where a
# tool of hack/install-tools.sh builds it too, at the same version in both
# modules; with --raise-tools, raises hack/tools/go.mod to the controller's
# version where the controller is ahead.
#
# Why: the tools and the controller are both compiled with CGO_ENABLED=0
# -trimpath, and the go command's build cache keys a package by its files
# and its dependencies' keys, not by the module that asked for it (nor by
# build tags). With one version of client-go, apimachinery, golang.org/x/net
# ... in both, the cold tools' build has already compiled nearly every
# package of the controller, and the controllers that test/e2e, test/faults,
# hack/release and `make run` build are a link away; with another version of
# any of them, that package and everything above it is compiled twice
# (docs/measurements/ci-and-control-plane.md, "A first CI under an hour").
#
# Usage: hack/shared-deps.sh [--raise-tools]
#   Without flags it prints each disagreement and exits 1 if there is one.
#   Where the tools are ahead, raise the controller: go get <module>@<version>
#   in the repository root. hack/gen-k8s-tools-replaces.sh runs
#   --raise-tools after it regenerates hack/tools/go.mod.
set -o errexit -o nounset -o pipefail
shopt -s inherit_errexit

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 LC_ALL=C

# What is built with the release's flags from the root module: the
# controller, the local cluster's launcher and the CRD generator's helper.
# (hack/release itself is left out: it shares go-containerregistry with
# cosign, whose release pins an older one that its code needs.)
PRODUCT=(. ./hack/local-up ./hack/crd-conversion)
TOOL_PKGS=(
  go.etcd.io/etcd/server/v3
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet
  sigs.k8s.io/kwok/cmd/kwok helm.sh/helm/v3/cmd/helm
  github.com/sigstore/cosign/v2/cmd/cosign github.com/prometheus/prometheus/cmd/promtool
)

# modules DIR TAGS PKG... prints "path version" for the module of every
# package the packages are built from (the replaced version where there is one).
modules() {
  local dir=$1 tags=$2
  shift 2
  (cd "${dir}" && go list -mod=readonly -tags="${tags}" -deps \
    -f '{{with .Module}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}' "$@") | sort -u
}

product=$(modules "${ROOT}" "" "${PRODUCT[@]}")
tools=$(modules "${ROOT}/hack/tools" remove_all_sd "${TOOL_PKGS[@]}")

# differences prints "path controller-version tools-version" for each
# module both build at different versions.
differences() {
  join <(echo "${product}") <(echo "${tools}") | awk '$2 != $3'
}

diffs=$(differences)
if [[ -z "${diffs}" ]]; then
  echo "shared-deps: the controller and the tools build every module they share at one version"
  exit 0
fi

if [[ "${1:-}" == --raise-tools ]]; then
  raise=()
  while read -r path mine theirs; do
    # The higher of the two, by the go command's own ordering.
    higher=$(printf '%s\n%s\n' "${mine}" "${theirs}" | sort -V | tail -n 1)
    if [[ "${higher}" == "${mine}" ]]; then raise+=("${path}@${mine}"); fi
  done <<<"${diffs}"
  if ((${#raise[@]} > 0)); then
    echo "shared-deps: raising in hack/tools: ${raise[*]}" >&2
    (cd "${ROOT}/hack/tools" && go get "${raise[@]}" && go mod tidy)
  fi
  tools=$(modules "${ROOT}/hack/tools" remove_all_sd "${TOOL_PKGS[@]}")
  diffs=$(differences)
  [[ -z "${diffs}" ]] && exit 0
fi

echo "shared-deps: the controller and the tools build these modules at different versions" >&2
echo "(module, the controller's, the tools'); raise the lower: go get in the root," >&2
echo "or hack/gen-k8s-tools-replaces.sh for hack/tools:" >&2
echo "${diffs}" >&2
exit 1
