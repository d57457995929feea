#!/usr/bin/env bash
# Reruns the tests of one package that match a regexp N times, each run in
# a fresh process, and prints how many runs each test passed, the spread
# of its duration, and the spread of every figure its t.Log lines report
# (hack/flake-hunt reads the logs). The spread is the noise model a time
# bound is derived from; a pass rate below N/N is a flake to fix, not to
# rerun.
#
# The test binary is built once (go test -c) and run from the package's
# directory, as go test does (the tests read testdata relative to it),
# with the environment passed through: KUBE_BIN_DIR, BAR_REQUIRE_INTEGRATION,
# BAR_FAULTS_ALL, BAR_REQUIRE_NODE and the rest. Every run's output is kept
# in _output/flake-hunt/<package>-<time>/run-K.log.
set -o errexit -o nounset -o pipefail

usage() {
  cat >&2 <<'EOF'
usage: hack/flake-hunt.sh [options] PKG REGEX N

Runs "go test PKG -run REGEX" N times, each in a fresh process of one test
binary built once, and prints per test its pass count out of N and its
duration's min/median/max, and per figure its t.Log lines report its
min/median/max over all runs. Exits 0 if all N runs passed, 1 if one
did not, 2 if nothing could be run (usage, build).

  PKG    a package, as go test takes it: ".", "./test/faults", ...
  REGEX  the -run regexp, e.g. '^TestMetricsAuthFloodStarved$'
  N      how many runs

options:
  --race          build the test binary with -race (or FLAKE_HUNT_RACE=1)
  --stop-on-fail  stop after the first run that fails
  --markdown      print the report as tables for docs/measurements/gate-timing.md
  --timeout=D     each run's -test.timeout (default 30m)
  --min-runs=K    report only the figures logged in at least K runs
  --commit=REV    run the tests of commit REV, from a clone of it in a
                  temporary directory (PKG then names a package of the
                  module, e.g. ./test/faults). Without it the tests, and the
                  controller the real-cluster tests build from the module
                  root at each run's start, come from the working tree as it
                  is at that moment, uncommitted edits included
  -h, --help      this text

The environment is passed to every run: set KUBE_BIN_DIR,
BAR_REQUIRE_INTEGRATION, BAR_FAULTS_ALL or BAR_REQUIRE_NODE as for go test.
Example:
  KUBE_BIN_DIR=$(hack/install-k8s-binaries.sh | tail -n 1) BAR_REQUIRE_INTEGRATION=1 \
    BAR_FAULTS_ALL=1 hack/flake-hunt.sh ./test/faults '^TestMetricsAuthFloodStarved$' 10
EOF
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
race="${FLAKE_HUNT_RACE:-}"
stop_on_fail=false
markdown=false
timeout=30m
min_runs=1
commit=""
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --race) race=1 ;;
    --stop-on-fail) stop_on_fail=true ;;
    --markdown) markdown=true ;;
    --timeout=*) timeout="${1#--timeout=}" ;;
    --min-runs=*) min_runs="${1#--min-runs=}" ;;
    --commit=*) commit="${1#--commit=}" ;;
    -h | --help)
      usage
      exit 0
      ;;
    -*)
      echo "flake-hunt: unknown option $1" >&2
      usage
      exit 2
      ;;
    *) args+=("$1") ;;
  esac
  shift
done
if [[ ${#args[@]} -ne 3 ]]; then
  usage
  exit 2
fi
pkg="${args[0]}"
regex="${args[1]}"
runs="${args[2]}"
if ! [[ "${runs}" =~ ^[1-9][0-9]*$ ]]; then
  echo "flake-hunt: N must be a positive number, not ${runs}" >&2
  exit 2
fi

log() { echo "flake-hunt: $*" >&2; }

# What the runs test: a clone of one commit, or the working tree (which the
# report then names by its HEAD, marked dirty when it has uncommitted edits,
# since those are built too).
src="${ROOT}"
if [[ -n "${commit}" ]]; then
  if ! rev=$(git -C "${ROOT}" rev-parse --verify --quiet "${commit}^{commit}"); then
    echo "flake-hunt: ${commit} is not a commit" >&2
    exit 2
  fi
  clone=$(mktemp -d "${TMPDIR:-/tmp}/flake-hunt.XXXXXX")
  trap 'rm -rf "${clone}"' EXIT
  git clone --quiet --shared --no-checkout "${ROOT}" "${clone}/src"
  git -C "${clone}/src" checkout --quiet --detach "${rev}"
  src="${clone}/src"
  cd "${src}"
  tested="commit $(git rev-parse --short "${rev}")"
else
  tested="working tree at $(git -C "${ROOT}" rev-parse --short HEAD)"
  if [[ -n "$(git -C "${ROOT}" status --porcelain --untracked-files=no)" ]]; then
    tested+=" with uncommitted edits"
    log "note: the working tree has uncommitted edits; the runs build them (--commit=REV runs one commit)"
  fi
fi

# The package's directory, and its path in the module, which names the
# output directory ("." at the top is the module's root package). PKG is
# read from where the script was called, as go test would.
pkg_dir=$(go list -f '{{.Dir}}' "${pkg}")
module_dir=$(go list -f '{{.Module.Dir}}' "${pkg}")
cd "${src}"
name=${pkg_dir#"${module_dir}"}
name=${name#/}
name=${name//\//-}
name=${name:-root}
out="${ROOT}/_output/flake-hunt/${name}-$(date +%Y%m%d-%H%M%S)"
if [[ -e "${out}" ]]; then
  out+="-$$"
fi
mkdir -p "${out}"

build_flags=()
if [[ -n "${race}" && "${race}" != 0 ]]; then
  build_flags+=(-race)
fi
binary="${out}/${name}.test"
log "building ${pkg} ${build_flags[*]:-}"
if ! go test -c "${build_flags[@]}" -o "${binary}" "${pkg}"; then
  echo "flake-hunt: building the test binary of ${pkg} failed" >&2
  exit 2
fi
if [[ ! -x "${binary}" ]]; then
  echo "flake-hunt: ${pkg} has no tests to build" >&2
  exit 2
fi
# The report's reader is built before the runs, so that a broken build
# does not waste them.
if ! (cd "${ROOT}" && go build -o "${out}/flake-hunt" ./hack/flake-hunt); then
  echo "flake-hunt: building hack/flake-hunt failed" >&2
  exit 2
fi

env_note=""
for v in KUBE_BIN_DIR BAR_REQUIRE_INTEGRATION BAR_FAULTS_ALL BAR_REQUIRE_NODE; do
  if [[ -n "${!v:-}" ]]; then
    env_note+=" ${v}=${!v}"
  fi
done
log "${runs} runs of ${pkg} -run '${regex}' (${tested}) from ${pkg_dir}${env_note:+ with${env_note}}; logs in ${out}"

exits=()
logs=()
for ((k = 1; k <= runs; k++)); do
  run_log="${out}/run-${k}.log"
  started=${SECONDS}
  status=0
  (cd "${pkg_dir}" && "${binary}" -test.run "${regex}" -test.v -test.count=1 -test.timeout="${timeout}") >"${run_log}" 2>&1 || status=$?
  exits+=("${status}")
  logs+=("${run_log}")
  verdict=PASS
  if [[ ${status} -ne 0 ]]; then
    verdict="FAIL (exit ${status})"
  fi
  log "run ${k}/${runs}: ${verdict} in $((SECONDS - started))s"
  if [[ ${status} -ne 0 ]] && ${stop_on_fail}; then
    log "stopping after the first failed run (--stop-on-fail)"
    break
  fi
done

report_flags=(--title="hack/flake-hunt.sh ${pkg} '${regex}' ${runs} on $(nproc) cores${build_flags[*]:+ (${build_flags[*]})}, ${tested}" --min-runs="${min_runs}")
if ${markdown}; then
  report_flags+=(--markdown)
fi
exit_list=$(
  IFS=,
  echo "${exits[*]}"
)
# The report's own status says whether every run passed.
"${out}/flake-hunt" "${report_flags[@]}" --exits="${exit_list}" "${logs[@]}" | tee "${out}/report.txt"
