#!/usr/bin/env bash
# Installs what a real node needs besides the kubelet (which
# hack/install-k8s-binaries.sh builds from source): Debian's containerd, runc
# and the CNI plugins (bridge, host-local, loopback). The node tests
# (harness/realnode, test/node) call it; it does nothing when everything is
# present, and needs root and apt-get otherwise.
#
# Usage: hack/install-node-deps.sh     (prints nothing on stdout)
set -o errexit -o nounset -o pipefail

log() { echo "install-node-deps: $*" >&2; }

# Debian puts the CNI plugins in /usr/lib/cni; upstream's tarball in /opt/cni/bin.
cni_dir=""
for d in /usr/lib/cni /opt/cni/bin; do
  if [[ -x "${d}/bridge" && -x "${d}/host-local" && -x "${d}/loopback" ]]; then
    cni_dir=${d}
    break
  fi
done

missing=()
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
[[ -n "${cni_dir}" ]] || missing+=(containernetworking-plugins)
if ((${#missing[@]} == 0)); then
  exit 0
fi

if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  log "missing ${missing[*]}; install them (Debian: apt-get install ${missing[*]}) as root"
  exit 1
fi
log "installing ${missing[*]} from Debian's packages"
apt-get update -qq >/dev/null
# The package's own service is never started here (no systemd as PID 1 in
# CI, and the tests run containerd with a private config instead).
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
