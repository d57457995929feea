#!/usr/bin/env bash
# Builds helm from source through the Go module proxy (never a prebuilt
# download), at the version hack/tools/helm/go.mod requires, into
# bin/helm-<version>/, and prints that directory on stdout (progress goes
# to stderr); a second run only prints it. charts/chart_test.go runs it
# (make test-chart).
#
# The -X flags are helm's own Makefile's: without them helm believes it
# talks to Kubernetes 1.20 in helm template and helm lint, and refuses a
# chart whose kubeVersion asks for more. The version given is that of the
# Kubernetes modules helm is built with.
set -o errexit -o nounset -o pipefail
shopt -s inherit_errexit

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOL_DIR="${ROOT}/hack/tools/helm"
# Never fetch a prebuilt Go toolchain; ignore any go.work around.
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

mod_version() {
  awk -v m="$1" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m { print $2; exit }' "${TOOL_DIR}/go.mod"
}
version=$(mod_version helm.sh/helm/v3)
client_go=$(mod_version k8s.io/client-go)
if [[ -z "${version}" || -z "${client_go}" ]]; then
  echo "install-helm: ${TOOL_DIR}/go.mod requires no helm.sh/helm/v3 or k8s.io/client-go" >&2
  exit 1
fi
kube_minor=$(cut -d. -f2 <<<"${client_go}")

dir="${ROOT}/bin/helm-${version}"
if [[ ! -x "${dir}/helm" ]]; then
  echo "install-helm: building helm ${version} (Kubernetes 1.${kube_minor} modules); minutes the first time" >&2
  mkdir -p "${dir}"
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${version}"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${kube_minor}"
  done
  (cd "${TOOL_DIR}" && go build -mod=readonly -trimpath -ldflags "${ldflags}" -o "${dir}/helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv "${dir}/helm.tmp" "${dir}/helm"
fi
echo "${dir}"
