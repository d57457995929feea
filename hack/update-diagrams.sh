#!/usr/bin/env bash
# Renders every docs/diagrams/*.dot to the .svg beside it with Graphviz, so
# the pictures in the docs always come from their committed source
# (hack/verify-diagrams.sh checks that in CI).
#
# Usage: hack/update-diagrams.sh [output-dir]
#   output-dir  render there instead of beside the sources (for verifying)
# Installs Debian's graphviz when dot is missing and this runs as root.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"
out_dir="${1:-docs/diagrams}"

if ! command -v dot >/dev/null; then
    echo "dot not found; installing Graphviz from Debian's packages" >&2
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        apt-get update -qq >/dev/null && apt-get install -y -qq graphviz >/dev/null
    else
        echo "install Graphviz (e.g. apt-get install graphviz) and run again" >&2
        exit 1
    fi
fi

mkdir -p "${out_dir}"
for src in docs/diagrams/*.dot; do
    svg="${out_dir}/$(basename "${src%.dot}").svg"
    # The output names nothing but the graph and dot's version: the same
    # source and Graphviz give the same bytes on every machine.
    dot -Tsvg "${src}" -o "${svg}"
    echo "${src} -> ${svg}"
done
