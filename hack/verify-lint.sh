#!/usr/bin/env bash
# gofmt, go vet and shellcheck over the hand-written code. Generated code
# under pkg/generated is gofmt'ed by its generator and left out here.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

unformatted="$(git ls-files '*.go' | grep -v '^pkg/generated/' | xargs gofmt -l)"
if [[ -n "${unformatted}" ]]; then
    echo "gofmt needed on:" >&2
    echo "${unformatted}" >&2
    exit 1
fi

# vet type-checks every package, tests included, against its
# dependencies compiled; with make test's flags (-race, no DWARF) those are the
# compile make test already made of every package, where with the
# release's flags it shared only the binary's dependencies and compiled
# the tests' again (docs/measurements/ci-and-control-plane.md, "A first CI under
# an hour"). Under -race the files built only without it are not vetted: they
# are, with the release's flags, whose compile the release already made.
go vet -race -gcflags=all=-dwarf=false ./...
CGO_ENABLED=0 go vet -trimpath ./harness/localcluster/
# The bench's controller-runtime peer is a module of its own (so that the
# product's go.mod never names controller-runtime): ./... stops at it.
(cd test/bench/peer && go vet -race -gcflags=all=-dwarf=false ./...)

# The tree of docs/development.md: the root tells the controller's story
# in at most 14 files; internal/ is what ships, so every package there is
# in the binary or in the release hack/release makes of it (the image),
# and nothing of the harness or the test suites is in the binary.
root_files=$(git ls-files '*.go' | grep -c -v -e / -e '_test\.go$')
if ((root_files > 14)); then
    echo "the root holds ${root_files} non-test Go files; docs/development.md's tree allows 14" >&2
    exit 1
fi
module=$(go list -m)
deps=$(go list -deps .)
shipped=$(go list -deps . ./hack/release)
while IFS= read -r p; do
    if ! grep -qxF "${p}" <<<"${shipped}"; then
        echo "${p} is in internal/ but neither in the binary nor in the release: internal/ is what ships (docs/development.md)" >&2
        exit 1
    fi
done < <(go list ./internal/...)
if grep -E "^${module}/(harness|test|hack)/" <<<"${deps}"; then
    echo "the binary imports the packages above, which only run or test it (docs/development.md)" >&2
    exit 1
fi

if ! command -v shellcheck >/dev/null; then
    echo "shellcheck not found; installing it from Debian's packages" >&2
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        apt-get update -qq >/dev/null && apt-get install -y -qq shellcheck >/dev/null
    else
        echo "install shellcheck (e.g. apt-get install shellcheck) and run again" >&2
        exit 1
    fi
fi
# `go list -m -f {{.Dir}}` prints an empty string for a module that is not in
# the module cache yet, so whatever reads a module's files must download it
# first ("go mod download"); a warm cache hides the bug (hack/ci-fresh.sh
# shows it).
while IFS= read -r f; do
    if ! grep -q 'go mod download' "${f}"; then
        echo "${f} reads a module's directory with 'go list -m' but never runs 'go mod download' first" >&2
        exit 1
    fi
done < <(git ls-files '*.sh' '*.go' Makefile .ci/run | xargs grep -l -E "go list -m -f '\{\{\.Dir\}\}'|\"list\", \"-m\", \"-f\", \"\{\{\.Dir\}\}\"" 2>/dev/null || true)

mapfile -t scripts < <(git ls-files 'hack/*.sh' '.ci/run')
shellcheck "${scripts[@]}"
echo "Lint clean."
