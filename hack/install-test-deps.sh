#!/usr/bin/env bash
# Gets everything make test needs, side by side: the tools built from source
# (the Kubernetes components, kubelet and kwok, helm, cosign and promtool, in
# one go build by hack/install-tools.sh) and, as root, the real node's
# packages (hack/install-node-deps.sh). On a fresh machine each is minutes,
# and the node's downloads overlap the compile
# (docs/measurements/ci-and-control-plane.md, "A first CI under an hour"). The
# tools used to be four go builds side by side; one build compiles what they
# share once and keeps both cores busy on its own (hack/tools/README.md).
#
# Prints, on stdout, the environment make test exports (KEY=value lines,
# values without spaces); each job's progress goes to stderr with its name
# in front. Exits non-zero, after every job ended, if any job failed.
#
# Usage: hack/install-test-deps.sh
set -o errexit -o nounset -o pipefail
shopt -s inherit_errexit

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/bar-test-deps.XXXXXX")
trap 'rm -rf "${out}"' EXIT

# run NAME CMD...: CMD in the background, its stdout kept in $out/NAME, its
# stderr prefixed with NAME, its time and status in $out/NAME.rc.
pids=()
run() {
  local name=$1
  shift
  (
    start=${SECONDS}
    status=0
    "$@" >"${out}/${name}" 2> >(sed -u "s/^/[${name}] /" >&2) || status=$?
    echo "install-test-deps: ${name} done in $((SECONDS - start))s (exit ${status})" >&2
    echo "${status}" >"${out}/${name}.rc"
  ) &
  pids+=($!)
}

start=${SECONDS}
run tools "${ROOT}/hack/install-tools.sh"
if [[ $(id -u) -eq 0 ]]; then
  run node "${ROOT}/hack/install-node-deps.sh"
fi
wait "${pids[@]}"

failed=()
for rc in "${out}"/*.rc; do
  name=$(basename "${rc}" .rc)
  if [[ "$(cat "${rc}")" != 0 ]]; then failed+=("${name}"); fi
done
if ((${#failed[@]} > 0)); then
  echo "install-test-deps: failed: ${failed[*]}" >&2
  exit 1
fi
echo "install-test-deps: all done in $((SECONDS - start))s" >&2

# install-tools.sh printed "<tool> <path>" for each of them.
path_of() { awk -v t="$1" '$1 == t { print $2 }' "${out}/tools"; }
echo "KUBE_BIN_DIR=$(dirname "$(path_of kube-apiserver)")"
echo "HELM=$(path_of helm)"
echo "COSIGN=$(path_of cosign)"
echo "PROMTOOL=$(path_of promtool)"
if [[ -f "${out}/node.rc" ]]; then echo "BAR_REQUIRE_NODE=1"; fi
