#!/usr/bin/env bash
# Builds a release tool from source through the Go module proxy (never a
# prebuilt download), at the version hack/k8s-versions.env pins, into
# bin/<tool>-<version>/, and prints that directory on stdout (progress goes
# to stderr); a second run only prints it.
#
# Usage: hack/install-tool.sh helm|cosign|promtool
#   helm:     the chart's tests (make test-chart)
#   cosign:   signing a release (make release COSIGN_KEY=...)
#   promtool: the alerts' tests (make test-monitoring)
#
# hack/install-tools.sh does the work, from the one module hack/tools
# (hack/tools/README.md); this keeps the interface callers use.
set -o errexit -o nounset -o pipefail
shopt -s inherit_errexit

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

tool=${1:-}
case "${tool}" in
  helm | cosign | promtool) ;;
  *)
    echo "usage: hack/install-tool.sh helm|cosign|promtool" >&2
    exit 2
    ;;
esac
built=$("${ROOT}/hack/install-tools.sh" "${tool}")
dirname "${built#* }"
