#!/usr/bin/env bash
# Builds the test and release tools from source through the Go module proxy
# (never a prebuilt download), all from the one module hack/tools, in ONE
# go build: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, kubelet and kwok into bin/k8s-<KUBE_VERSION>/, helm, cosign and
# promtool into bin/<tool>-<version>/.
#
# Why one go build: the tools share most of their dependencies (client-go,
# grpc, otel, ...). Built from one module in one go command, each package is
# compiled once and the go command schedules all of them on one graph, so
# both cores stay busy to the end; separate go builds compiled the same
# packages at the same time, or each its own version of them
# (hack/tools/README.md, docs/measurements/ci-and-control-plane.md "A first CI
# under an hour").
#
# Usage: hack/install-tools.sh [tool ...]
#   tools: etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
#          kubelet kwok helm cosign promtool   (default: all of them)
#
# Versions come from hack/k8s-versions.env; hack/tools/go.mod must agree
# (hack/gen-k8s-tools-replaces.sh writes it). A binary is rebuilt only when
# its stamp differs: the package, the hash of hack/tools/go.mod (a version
# bump of any tool can move the shared dependencies of every other) and the
# build flags. Checking stamps needs neither the go command nor the network,
# so a second run is a no-op. Progress goes to stderr; stdout has one line
# per requested tool, "<tool> <absolute path of the binary>", in the order
# asked. hack/install-k8s-binaries.sh and hack/install-tool.sh wrap it.
set -o errexit -o nounset -o pipefail
shopt -s inherit_errexit

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# hack/k8s-versions.env holds KEY=value lines only: nothing to follow.
# shellcheck source=/dev/null
source "${ROOT}/hack/k8s-versions.env"

# Never fetch a prebuilt Go toolchain; ignore any go.work around.
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

TOOLS="${ROOT}/hack/tools"
ALL=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kwok helm cosign promtool)
# Prometheus' own build tag leaves out every service discovery but file and
# http (plugins/plugin_*.go): `promtool check rules` and `test rules`
# discover no targets, and the cloud providers' SDKs were most of promtool's
# cold build. No other tool has a file behind this tag.
TAGS=remove_all_sd

log() { echo "install-tools: $*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

# tool_info NAME sets: pkg (what go build builds), built (the name go build
# gives the binary) and out (where it lives).
tool_info() {
  built=$1
  case "$1" in
    etcd)
      # package main is the module root; go build names it after "server".
      pkg=go.etcd.io/etcd/server/v3 built=server
      out="${ROOT}/bin/k8s-${KUBE_VERSION}/etcd"
      ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kubelet)
      pkg=k8s.io/kubernetes/cmd/$1 out="${ROOT}/bin/k8s-${KUBE_VERSION}/$1"
      ;;
    kwok) pkg=sigs.k8s.io/kwok/cmd/kwok out="${ROOT}/bin/k8s-${KUBE_VERSION}/kwok" ;;
    helm) pkg=helm.sh/helm/v3/cmd/helm out="${ROOT}/bin/helm-${HELM_VERSION}/helm" ;;
    cosign) pkg=github.com/sigstore/cosign/v2/cmd/cosign out="${ROOT}/bin/cosign-${COSIGN_VERSION}/cosign" ;;
    promtool)
      pkg=github.com/prometheus/prometheus/cmd/promtool
      out="${ROOT}/bin/promtool-${PROMETHEUS_VERSION}/promtool"
      ;;
    *) die "unknown tool '$1' (known: ${ALL[*]})" ;;
  esac
}

# check_pins fails unless hack/tools/go.mod requires each module at the
# version hack/k8s-versions.env pins and replaces every k8s.io staging module
# with the matching v0.x.y.
check_pins() {
  local pin mod want got bad staging="v0.${KUBE_VERSION#v1.}"
  for pin in "k8s.io/kubernetes ${KUBE_VERSION}" "go.etcd.io/etcd/server/v3 ${ETCD_VERSION}" \
    "sigs.k8s.io/kwok ${KWOK_VERSION}" "helm.sh/helm/v3 ${HELM_VERSION}" \
    "github.com/sigstore/cosign/v2 ${COSIGN_VERSION}" \
    "github.com/prometheus/prometheus ${PROMETHEUS_VERSION}"; do
    mod=${pin% *} want=${pin#* }
    got=$(awk -v m="${mod}" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m { print $2; exit }' "${TOOLS}/go.mod")
    if [[ "${got}" != "${want}" ]]; then
      die "hack/tools/go.mod requires ${mod} ${got:-(nothing)}, but hack/k8s-versions.env pins ${want}; run hack/gen-k8s-tools-replaces.sh"
    fi
  done
  bad=$(awk -v v="${staging}" '$2 == "=>" && $1 ~ /^k8s\.io\// && $4 != v { print $1 " " $4 }' "${TOOLS}/go.mod")
  if [[ -n "${bad}" ]]; then
    die "hack/tools/go.mod replaces staging modules at a version other than ${staging}: ${bad//$'\n'/, }; run hack/gen-k8s-tools-replaces.sh"
  fi
}

# module_meta MODULE VERSION prints "<commit time>|<commit hash>" of the tag as
# the module proxy records it (either may be empty).
module_meta() {
  (cd "${TOOLS}" && go list -m -f '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}|{{with .Origin}}{{.Hash}}{{end}}' "$1@$2")
}

# ldflags KUBE_DATE KUBE_HASH ETCD_HASH prints the -ldflags of the one build:
# the union of every tool's -X settings (empty metadata left out). The
# linker ignores -X for a package a binary does not link, and no two tools
# set the same symbol to different values: the Kubernetes version below
# reaches helm, kwok, cosign and promtool too (client-go's user agent), and
# is true there, as every tool now links the Kubernetes libraries at
# v0.<KUBE minor> (the replace block of hack/tools/go.mod).
ldflags() {
  local kube_date=$1 kube_hash=$2 etcd_hash=$3 flags="-s -w" p
  local ver=${KUBE_VERSION#v}
  local major=${ver%%.*} minor=${ver#*.}
  minor=${minor%%.*}
  # kubectl refuses a server whose version it cannot parse, and the in-tree
  # default is "v0.0.0-master+$Format:%H$": set the real one.
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${p}.gitVersion=${KUBE_VERSION} -X ${p}.gitMajor=${major} -X ${p}.gitMinor=${minor}"
    flags+=" -X ${p}.gitTreeState=clean"
    if [[ -n "${kube_hash}" ]]; then flags+=" -X ${p}.gitCommit=${kube_hash}"; fi
    if [[ -n "${kube_date}" ]]; then flags+=" -X ${p}.buildDate=${kube_date}"; fi
  done
  if [[ -n "${etcd_hash}" ]]; then flags+=" -X go.etcd.io/etcd/api/v3/version.GitSHA=${etcd_hash:0:12}"; fi
  flags+=" -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION}"
  # helm's own Makefile's flags: without them helm believes it talks to
  # Kubernetes 1.20 in helm template and helm lint, and refuses a chart
  # whose kubeVersion asks for more. The version is that of the Kubernetes
  # modules helm is built with: KUBE_VERSION's, by the replace block.
  flags+=" -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    flags+=" -X ${p}.k8sVersionMajor=${major} -X ${p}.k8sVersionMinor=${minor}"
  done
  flags+=" -X sigs.k8s.io/release-utils/version.gitVersion=${COSIGN_VERSION}"
  # promtool --version says what Prometheus' release Makefile (promu)
  # stamps: the release's own number, 3.X.Y for the Go module v0.3XX.Y. The
  # module zip has no git history: the revision is the module version.
  if [[ "${PROMETHEUS_VERSION}" =~ ^v0\.([0-9]+)([0-9]{2})\.([0-9]+)$ ]]; then
    flags+=" -X github.com/prometheus/common/version.Version=${BASH_REMATCH[1]}.$((10#${BASH_REMATCH[2]})).${BASH_REMATCH[3]}"
    flags+=" -X github.com/prometheus/common/version.Revision=${PROMETHEUS_VERSION}"
  fi
  echo "${flags}"
}

tools=("$@")
if ((${#tools[@]} == 0)) || [[ "${tools[*]}" == all ]]; then tools=("${ALL[@]}"); fi
for t in "${tools[@]}"; do tool_info "${t}"; done
check_pins

# The stamp is what was built and how, without the proxy's commit metadata.
modsum=$(sha256sum "${TOOLS}/go.mod")
modsum=${modsum%% *}
buildflags="CGO_ENABLED=0 -mod=readonly -trimpath -tags=${TAGS} -gcflags=all=-dwarf=false(but-shared) -ldflags=$(ldflags "" "" "")"

# One lock for every tool: concurrent callers (make test beside make run,
# install-test-deps' jobs) wait for the one build rather than start another,
# then find its stamps current.
mkdir -p "${ROOT}/bin"
if command -v flock >/dev/null; then
  exec 9>"${ROOT}/bin/.tools.lock"
  flock 9
fi

missing=() pkgs=()
for t in "${tools[@]}"; do
  tool_info "${t}"
  stamp_file="$(dirname "${out}")/.stamps/${t}"
  have=""
  if [[ -x "${out}" && -f "${stamp_file}" ]]; then read -r have <"${stamp_file}" || true; fi
  if [[ "${have}" == "${pkg} go.mod=${modsum} ${buildflags}" ]]; then
    log "${t}: up to date"
  elif [[ " ${missing[*]} " != *" ${t} "* ]]; then
    missing+=("${t}")
    pkgs+=("${pkg}")
  fi
done

if ((${#missing[@]} > 0)); then
  IFS='|' read -r kube_date kube_hash < <(module_meta k8s.io/kubernetes "${KUBE_VERSION}")
  IFS='|' read -r _ etcd_hash < <(module_meta go.etcd.io/etcd/server/v3 "${ETCD_VERSION}")
  flags=$(ldflags "${kube_date}" "${kube_hash}" "${etcd_hash}")
  # Built into a directory beside the outputs (so that mv is a rename): a
  # reader never sees half a binary, and a failed build leaves none.
  tmp=$(mktemp -d "${ROOT}/bin/.build.XXXXXX")
  trap 'rm -rf "${tmp}"' EXIT
  # The tools are linked without DWARF (-w), so their compiles leave it
  # out too (-dwarf=false: 15 % less CPU for client-go's packages, measured
  # in docs/measurements/ci-and-control-plane.md), except the packages the
  # controller is built from, which compile here exactly as the controller's own
  # build compiles them (an empty -gcflags; the later pattern wins), so that the
  # controllers and releases the tests build find them in the build cache
  # (hack/shared-deps.sh says why the versions agree).
  gcflags=(-gcflags=all=-dwarf=false)
  while read -r p; do gcflags+=("-gcflags=${p}="); done < <(
    cd "${ROOT}" && go list -deps . ./hack/local-up ./hack/crd-conversion
  )
  log "building ${missing[*]} in one go build; many minutes with an empty build cache ..."
  start=${SECONDS}
  (cd "${TOOLS}" && go build -mod=readonly -trimpath -tags="${TAGS}" "${gcflags[@]}" -ldflags "${flags}" -o "${tmp}/" "${pkgs[@]}")
  for t in "${missing[@]}"; do
    tool_info "${t}"
    mkdir -p "$(dirname "${out}")/.stamps"
    mv -f "${tmp}/${built}" "${out}"
    printf '%s\n# built with -ldflags=%s\n' "${pkg} go.mod=${modsum} ${buildflags}" "${flags}" \
      >"$(dirname "${out}")/.stamps/${t}"
  done
  log "built ${#missing[@]} in $((SECONDS - start))s"
fi

for t in "${tools[@]}"; do
  tool_info "${t}"
  echo "${t} ${out}"
done
