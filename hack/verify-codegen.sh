#!/usr/bin/env bash
# Fails if anything hack/update-codegen.sh produces is out of date: it
# regenerates into a scratch copy of the repository and compares.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="$(mktemp -d)"
trap 'rm -rf "${SCRATCH}"' EXIT

# Copy what git tracks plus new files it does not ignore, so the check also
# works before a commit and never sees build output.
cd "${REPO_ROOT}"
git ls-files --cached --others --exclude-standard -z \
    | while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done \
    | xargs -0 cp --parents -t "${SCRATCH}"

"${SCRATCH}/hack/update-codegen.sh" >/dev/null

status=0
for dir in pkg/apis pkg/generated artifacts/crd; do
    if ! diff -Naupr "${REPO_ROOT}/${dir}" "${SCRATCH}/${dir}"; then
        status=1
    fi
done
if [[ ${status} -ne 0 ]]; then
    echo "Generated code is out of date: run hack/update-codegen.sh and commit the result." >&2
    exit 1
fi
echo "Generated code is up to date."
