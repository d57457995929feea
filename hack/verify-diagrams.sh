#!/usr/bin/env bash
# Fails if a committed docs/diagrams/*.svg differs from what its .dot source
# renders to: the picture in the docs must be the one its source describes.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT
hack/update-diagrams.sh "${scratch}" >/dev/null

status=0
for src in docs/diagrams/*.dot; do
    name="$(basename "${src%.dot}").svg"
    if ! diff -q "docs/diagrams/${name}" "${scratch}/${name}" >/dev/null 2>&1; then
        echo "docs/diagrams/${name} is not what ${src} renders to; run make diagrams" >&2
        status=1
    fi
done
if [[ ${status} -eq 0 ]]; then
    echo "Diagrams are current."
fi
exit "${status}"
