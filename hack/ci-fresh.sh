#!/usr/bin/env bash
# Runs .ci/run the way CI runs it on a fresh machine: in a fresh clone of the
# committed HEAD, with CI=true, empty GOPATH, GOMODCACHE and GOCACHE in
# temporary directories, and no bin/. A green .ci/run in a working checkout
# can hide a missing install step, because the module cache, the build cache
# and bin/ remember what an earlier run downloaded or built; this cannot.
#
# Usage: hack/ci-fresh.sh [--keep]
#   --keep  leave the temporary directory (clone, caches, ci.log) in place and
#           print its path, e.g. to copy bin/k8s-*/ from it.
# Uncommitted changes are not part of the run: CI sees commits only.
# It takes as long as a first CI run: most of an hour on 2 cores, a third
# of it building the Kubernetes components and the tools from source
# (docs/measurements/ci-and-control-plane.md, "A first CI under an hour").
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
keep=false
case "${1:-}" in
  "") ;;
  --keep) keep=true ;;
  *)
    echo "usage: $0 [--keep]" >&2
    exit 2
    ;;
esac

log() { echo "ci-fresh: $*" >&2; }

if [[ -n "$(git -C "${ROOT}" status --porcelain)" ]]; then
  log "note: the working tree has uncommitted changes; they are not part of this run"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/bar-ci-fresh.XXXXXX")
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  if ${keep}; then
    log "kept ${work}"
    return
  fi
  # The module cache is written read-only; go clean knows how to remove it.
  GOMODCACHE="${work}/gopath/pkg/mod" go clean -modcache 2>/dev/null || true
  rm -rf "${work}"
}
trap cleanup EXIT

git clone --quiet --no-hardlinks "${ROOT}" "${work}/bar-controller"
# CI finds the developers' shared folder beside the project.
if [[ -d "${ROOT}/../shared" ]]; then
  ln -s "$(cd "${ROOT}/../shared" && pwd)" "${work}/shared"
fi
mkdir -p "${work}/gopath" "${work}/gocache"
log "$(git -C "${work}/bar-controller" log -1 --format='%h %s') in ${work}"

start=${SECONDS}
status=0
(
  cd "${work}/bar-controller"
  export CI=true GOPATH="${work}/gopath" GOMODCACHE="${work}/gopath/pkg/mod" GOCACHE="${work}/gocache"
  .ci/run
) 2>&1 | tee "${work}/ci.log" || status=$?
elapsed=$((SECONDS - start))
if ((status == 0)); then
  log "PASSED in $((elapsed / 60))m$((elapsed % 60))s"
else
  log "FAILED (exit ${status}) after $((elapsed / 60))m$((elapsed % 60))s; log: ${work}/ci.log"
  keep=true
fi
exit "${status}"
