#!/usr/bin/env bash
# Builds the Kubernetes control-plane binaries from source, through the Go
# module proxy (never a prebuilt download), into a git-ignored cache keyed by
# version: bin/k8s-${KUBE_VERSION}/.
#
# Usage: hack/install-k8s-binaries.sh [component ...]
#   components: etcd kube-apiserver kube-controller-manager kube-scheduler
#               kubectl kubelet kwok   (default: all of them)
#
# Versions come from hack/k8s-versions.env; the wrapper modules that pin the
# sources live in hack/tools/{k8s,etcd,kwok} (see hack/tools/README.md).
# A binary is rebuilt only when its stamp (module@version and build flags)
# differs, so a second run is a no-op. Progress goes to stderr; the last (and
# only) line on stdout is the absolute directory, so callers can do
#   KUBEBUILDER_ASSETS=$(hack/install-k8s-binaries.sh | tail -1)
set -o errexit -o nounset -o pipefail
shopt -s inherit_errexit

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# hack/k8s-versions.env holds KEY=value lines only: nothing to follow.
# shellcheck source=/dev/null
source "${ROOT}/hack/k8s-versions.env"

# Never fetch a prebuilt Go toolchain; ignore any go.work around.
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

TOOLS="${ROOT}/hack/tools"
BIN_DIR="${ROOT}/bin/k8s-${KUBE_VERSION}"
STAMP_DIR="${BIN_DIR}/.stamps"
ALL_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kwok)

log() { echo "install-k8s-binaries: $*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

# component_info NAME sets: tool_dir, module, version, pkg.
component_info() {
  case "$1" in
    etcd)
      tool_dir=etcd module=go.etcd.io/etcd/server/v3 version=${ETCD_VERSION}
      pkg=go.etcd.io/etcd/server/v3
      ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kubelet)
      tool_dir=k8s module=k8s.io/kubernetes version=${KUBE_VERSION}
      pkg=k8s.io/kubernetes/cmd/$1
      ;;
    kwok)
      tool_dir=kwok module=sigs.k8s.io/kwok version=${KWOK_VERSION}
      pkg=sigs.k8s.io/kwok/cmd/kwok
      ;;
    *) die "unknown component '$1' (known: ${ALL_COMPONENTS[*]})" ;;
  esac
}

# check_pin DIR MODULE VERSION: fails unless DIR/go.mod requires MODULE at
# VERSION (and, for the k8s wrapper, replaces every staging module with the
# matching v0.x.y), i.e. unless go.mod agrees with hack/k8s-versions.env.
check_pin() {
  local dir=$1 mod=$2 want=$3 got
  got=$(awk -v m="${mod}" '$1 == "require" { $1 = "" ; $0 = $0 } $1 == m { print $2; exit }' "${dir}/go.mod")
  if [[ "${got}" != "${want}" ]]; then
    die "${dir#"${ROOT}/"}/go.mod requires ${mod} ${got:-(nothing)}, but hack/k8s-versions.env pins ${want}; run hack/gen-k8s-tools-replaces.sh"
  fi
  if [[ "${mod}" == k8s.io/kubernetes ]]; then
    local staging="v0.${want#v1.}" bad
    bad=$(awk -v v="${staging}" '$2 == "=>" && $1 ~ /^k8s\.io\// && $4 != v { print $1 " " $4 }' "${dir}/go.mod")
    if [[ -n "${bad}" ]]; then
      die "${dir#"${ROOT}/"}/go.mod replaces staging modules at a version other than ${staging}: ${bad//$'\n'/, }; run hack/gen-k8s-tools-replaces.sh"
    fi
  fi
}

# module_meta MODULE VERSION prints "<commit time>|<commit hash>" of the tag as
# the module proxy records it (either may be empty). Run in the tool dir.
module_meta() {
  go list -m -f '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}|{{with .Origin}}{{.Hash}}{{end}}' "$1@$2"
}

# ldflags_for NAME DATE HASH prints the -ldflags for component NAME at
# ${version}; DATE and HASH (from module_meta) are left out when empty.
ldflags_for() {
  local name=$1 date=$2 hash=$3 flags="-s -w"
  case "${name}" in
    etcd)
      if [[ -n "${hash}" ]]; then flags+=" -X go.etcd.io/etcd/api/v3/version.GitSHA=${hash:0:12}"; fi
      ;;
    kwok)
      flags+=" -X sigs.k8s.io/kwok/pkg/consts.Version=${version}"
      ;;
    *)
      # kubectl refuses a server whose version it cannot parse, and the
      # in-tree default is "v0.0.0-master+$Format:%H$": set the real one.
      local ver=${version#v} p
      local major=${ver%%.*} minor=${ver#*.}
      minor=${minor%%.*}
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X ${p}.gitVersion=${version} -X ${p}.gitMajor=${major} -X ${p}.gitMinor=${minor}"
        flags+=" -X ${p}.gitTreeState=clean"
        if [[ -n "${hash}" ]]; then flags+=" -X ${p}.gitCommit=${hash}"; fi
        if [[ -n "${date}" ]]; then flags+=" -X ${p}.buildDate=${date}"; fi
      done
      ;;
  esac
  echo "${flags}"
}

components=("$@")
if ((${#components[@]} == 0)) || [[ "${components[*]}" == all ]]; then
  components=("${ALL_COMPONENTS[@]}")
fi
# Validate every requested component and its pin before building anything.
checked=" "
for c in "${components[@]}"; do
  component_info "${c}"
  if [[ "${checked}" != *" ${tool_dir} "* ]]; then
    check_pin "${TOOLS}/${tool_dir}" "${module}" "${version}"
    checked+="${tool_dir} "
  fi
done

mkdir -p "${STAMP_DIR}"
# Serialise concurrent runs (e.g. tests and make run started together).
if command -v flock >/dev/null; then
  exec 9>"${BIN_DIR}/.lock"
  flock 9
fi

tmp=""
trap '[[ -z "${tmp}" ]] || rm -f "${tmp}"' EXIT

total_start=${SECONDS}
for c in "${components[@]}"; do
  component_info "${c}"
  dir="${TOOLS}/${tool_dir}"
  out="${BIN_DIR}/${c}"
  stamp_file="${STAMP_DIR}/${c}"
  # The stamp is what was built and how, without the proxy's commit metadata,
  # so checking it needs neither the go command nor the network.
  stamp="${pkg}@${version} CGO_ENABLED=0 -trimpath -ldflags=$(ldflags_for "${c}" "" "")"
  have=""
  if [[ -x "${out}" && -f "${stamp_file}" ]]; then read -r have <"${stamp_file}" || true; fi
  if [[ "${have}" == "${stamp}" ]]; then
    log "${c} ${version}: up to date"
    continue
  fi
  IFS='|' read -r date hash < <(cd "${dir}" && module_meta "${module}" "${version}")
  ldflags=$(ldflags_for "${c}" "${date}" "${hash}")
  log "${c} ${version}: building ${pkg} ..."
  start=${SECONDS}
  tmp="${out}.tmp.$$"
  (cd "${dir}" && go build -mod=readonly -trimpath -ldflags "${ldflags}" -o "${tmp}" "${pkg}")
  mv -f "${tmp}" "${out}"
  tmp=""
  printf '%s\n# built with -ldflags=%s\n' "${stamp}" "${ldflags}" >"${stamp_file}"
  log "${c} ${version}: built in $((SECONDS - start))s"
done
log "done in $((SECONDS - total_start))s: ${BIN_DIR}"
echo "${BIN_DIR}"
