#!/usr/bin/env bash
# Builds the Kubernetes control-plane binaries, the node's kubelet and kwok
# from source, through the Go module proxy (never a prebuilt download), into
# a git-ignored cache keyed by version: bin/k8s-${KUBE_VERSION}/.
#
# Usage: hack/install-k8s-binaries.sh [component ...]
#   components: etcd kube-apiserver kube-controller-manager kube-scheduler
#               kubectl kubelet kwok   (default: all of them)
#
# hack/install-tools.sh does the work (one go build for whatever is missing,
# from the one module hack/tools; see hack/tools/README.md); this keeps the
# interface callers use. Progress goes to stderr; the last (and only) line
# on stdout is the absolute directory, so callers can do
#   KUBEBUILDER_ASSETS=$(hack/install-k8s-binaries.sh | tail -1)
set -o errexit -o nounset -o pipefail
shopt -s inherit_errexit

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ALL_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kwok)

components=("$@")
if ((${#components[@]} == 0)) || [[ "${components[*]}" == all ]]; then
  components=("${ALL_COMPONENTS[@]}")
fi
# helm, cosign and promtool live elsewhere (hack/install-tool.sh).
for c in "${components[@]}"; do
  if [[ " ${ALL_COMPONENTS[*]} " != *" ${c} "* ]]; then
    echo "install-k8s-binaries: ERROR: unknown component '${c}' (known: ${ALL_COMPONENTS[*]})" >&2
    exit 1
  fi
done

built=$("${ROOT}/hack/install-tools.sh" "${components[@]}")
last=${built##*$'\n'}
dir=$(dirname "${last#* }")
echo "install-k8s-binaries: ${dir}" >&2
echo "${dir}"
