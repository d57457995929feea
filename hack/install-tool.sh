#!/usr/bin/env bash
# Builds a release tool from source through the Go module proxy (never a
# prebuilt download), at the version its wrapper module hack/tools/<tool>
# requires, into bin/<tool>-<version>/, and prints that directory on
# stdout (progress goes to stderr); a second run only prints it.
#
# Usage: hack/install-tool.sh helm|cosign|promtool
#   helm:     the chart's tests (make test-chart)
#   cosign:   signing a release (make release COSIGN_KEY=...)
#   promtool: the alerts' tests (make test-monitoring)
set -o errexit -o nounset -o pipefail
shopt -s inherit_errexit

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Never fetch a prebuilt Go toolchain; ignore any go.work around.
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

tool=${1:-}
TOOL_DIR="${ROOT}/hack/tools/${tool}"
mod_version() {
  awk -v m="$1" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m { print $2; exit }' "${TOOL_DIR}/go.mod"
}

ldflags="-s -w" tags=""
case "${tool}" in
  helm)
    module=helm.sh/helm/v3 pkg=helm.sh/helm/v3/cmd/helm
    version=$(mod_version "${module}")
    # helm's own Makefile's flags: without them helm believes it talks to
    # Kubernetes 1.20 in helm template and helm lint, and refuses a chart
    # whose kubeVersion asks for more. The version is that of the
    # Kubernetes modules helm is built with.
    kube_minor=$(mod_version k8s.io/client-go | cut -d. -f2)
    ldflags+=" -X helm.sh/helm/v3/internal/version.version=${version}"
    for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
      ldflags+=" -X ${p}.k8sVersionMajor=1 -X ${p}.k8sVersionMinor=${kube_minor}"
    done
    ;;
  cosign)
    module=github.com/sigstore/cosign/v2 pkg=github.com/sigstore/cosign/v2/cmd/cosign
    version=$(mod_version "${module}")
    ldflags+=" -X sigs.k8s.io/release-utils/version.gitVersion=${version}"
    ;;
  promtool)
    module=github.com/prometheus/prometheus pkg=github.com/prometheus/prometheus/cmd/promtool
    version=$(mod_version "${module}")
    # Prometheus 3.X.Y is published as the Go module v0.3XX.Y; promtool
    # --version says what its release Makefile (promu) stamps, the
    # release's own number. The module zip has no git history: the
    # revision is the module version.
    if [[ "${version}" =~ ^v0\.([0-9]+)([0-9]{2})\.([0-9]+)$ ]]; then
      release="${BASH_REMATCH[1]}.$((10#${BASH_REMATCH[2]})).${BASH_REMATCH[3]}"
      ldflags+=" -X github.com/prometheus/common/version.Version=${release}"
      ldflags+=" -X github.com/prometheus/common/version.Revision=${version}"
    fi
    # The tests run only `promtool check rules` and `promtool test rules`,
    # which discover no targets. Prometheus' own build tag leaves out every
    # service discovery but file and http (plugins/plugin_*.go): the cloud
    # providers' SDKs were most of a cold build (7 min of 2 cores).
    tags=remove_all_sd
    ;;
  *)
    echo "usage: hack/install-tool.sh helm|cosign|promtool" >&2
    exit 2
    ;;
esac
if [[ -z "${version}" ]]; then
  echo "install-tool: ${TOOL_DIR}/go.mod requires no ${module}" >&2
  exit 1
fi

dir="${ROOT}/bin/${tool}-${version}"
if [[ ! -x "${dir}/${tool}" ]]; then
  echo "install-tool: building ${tool} ${version}; minutes the first time" >&2
  mkdir -p "${dir}"
  (cd "${TOOL_DIR}" && go build -mod=readonly -trimpath -tags="${tags}" -ldflags "${ldflags}" -o "${dir}/${tool}.tmp" "${pkg}")
  mv "${dir}/${tool}.tmp" "${dir}/${tool}"
fi
echo "${dir}"
