#!/usr/bin/env bash
# Gets everything make test needs, side by side: the Kubernetes components
# (hack/install-k8s-binaries.sh), helm, cosign and promtool
# (hack/install-tool.sh) and, as root, the real node's packages
# (hack/install-node-deps.sh). On a fresh machine each is minutes of
# downloading modules or Debian packages and compiling; one after the other,
# every download left both cores idle and every link step one of them
# (docs/measurements.md, "A first CI under an hour"). Side by side the
# compilers fill each other's gaps; the Go build cache is shared safely
# between go commands.
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
run k8s "${ROOT}/hack/install-k8s-binaries.sh"
run helm "${ROOT}/hack/install-tool.sh" helm
run cosign "${ROOT}/hack/install-tool.sh" cosign
run promtool "${ROOT}/hack/install-tool.sh" promtool
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

echo "KUBE_BIN_DIR=$(tail -n 1 "${out}/k8s")"
echo "HELM=$(tail -n 1 "${out}/helm")/helm"
echo "COSIGN=$(tail -n 1 "${out}/cosign")/cosign"
echo "PROMTOOL=$(tail -n 1 "${out}/promtool")/promtool"
if [[ -f "${out}/node.rc" ]]; then echo "BAR_REQUIRE_NODE=1"; fi
