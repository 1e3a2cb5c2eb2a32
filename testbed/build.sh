#!/bin/bash
# Builds a real Kubernetes control plane and node of one current release from the Go module proxy:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl from
# k8s.io/kubernetes, and etcd from go.etcd.io/etcd/server/v3, at the versions testbed/k8s/go.mod
# pins (go.sum is committed, so every module is checked against it). Needs Go (the version
# testbed/k8s/go.mod names, or newer) and the Go module proxy; nothing else, no root.
# Cached: a second run with the same testbed/k8s module and this script is a no-op.
#   usage: build.sh [CACHE_DIR]      (default: $K8S_TESTBED_CACHE or ~/.cache/k8s-testbed)
# Prints the folder holding the binaries on its last line.
# K8S_TESTBED_MODULE=DIR builds the release of another module instead (testbed/matrix/*, written
# by testbed/module.sh): its etcd is the testbed's own.
# With K8S_TESTBED_BIN set to a folder holding kube-apiserver, kube-controller-manager and etcd
# (prebuilt elsewhere), it builds nothing and prints that folder.
set -euo pipefail
if [[ -n ${K8S_TESTBED_BIN:-} ]]; then
  for b in kube-apiserver kube-controller-manager etcd; do
    [[ -x $K8S_TESTBED_BIN/$b ]] || { echo "k8s-testbed: K8S_TESTBED_BIN=$K8S_TESTBED_BIN has no executable $b" >&2; exit 1; }
  done
  echo "$K8S_TESTBED_BIN"; exit 0
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MOD=${K8S_TESTBED_MODULE:-$HERE/k8s}
MOD=$(cd "$MOD" && pwd)
CACHE=${1:-${K8S_TESTBED_CACHE:-$HOME/.cache/k8s-testbed}}
VERSION=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit } $1 == "require" && $2 == "k8s.io/kubernetes" { print $3; exit }' "$MOD/go.mod")
[[ $VERSION =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || { echo "k8s-testbed: no k8s.io/kubernetes version in $MOD/go.mod" >&2; exit 1; }
MINOR=${BASH_REMATCH[1]}
W=$CACHE/$VERSION
COMMANDS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl etcd"
V=k8s.io/component-base/version
LD="-s -w -X $V.gitVersion=$VERSION -X $V.gitMajor=1 -X $V.gitMinor=$MINOR -X $V.gitTreeState=clean"
# What the binaries are built from: the modules (go.sum, and go.mod's requirements and
# replacements, not its comments), the commands and the flags.
KEY=$( { grep -v '^//' "$MOD/go.mod"; cat "$MOD/go.sum"; echo "$COMMANDS $LD"; } | sha256sum | cut -c1-16)
built() {
  [[ $(cat "$W/bin/.built-from" 2>/dev/null) == "$KEY" ]] || return 1
  for c in $COMMANDS; do [[ -x $W/bin/$c ]] || return 1; done
}
if built; then echo "$W/bin"; exit 0; fi

command -v go >/dev/null || { echo "k8s-testbed: no go on PATH; Go $(awk '$1 == "go" { print $2 }' "$MOD/go.mod") or newer is needed" >&2; exit 1; }
mkdir -p "$W/bin"
export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOCACHE=$W/gocache GOTOOLCHAIN=${GOTOOLCHAIN:-local}
cd "$MOD"
for c in $COMMANDS; do
  if [[ $c == etcd ]] && ! grep -q 'go.etcd.io/etcd/server/v3 v' "$MOD/go.mod"; then
    cp "$(K8S_TESTBED_MODULE= bash "$HERE/build.sh" "$CACHE" | tail -1)/etcd" "$W/bin/etcd"
    continue
  fi
  case $c in
    etcd) pkg=go.etcd.io/etcd/server/v3 ;;
    *) pkg=k8s.io/kubernetes/cmd/$c ;;
  esac
  start=$(date +%s)
  echo "k8s-testbed: building $c $( [[ $c == etcd ]] && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3 || echo "$VERSION") (minutes on 2 cores the first time)" >&2
  go build -trimpath -ldflags "$LD" -o "$W/bin/$c.tmp" "$pkg"
  mv "$W/bin/$c.tmp" "$W/bin/$c"
  echo "k8s-testbed: $c built in $(( $(date +%s) - start ))s" >&2
done
echo "$KEY" > "$W/bin/.built-from"
# The build cache is GBs and only serves a rebuild.
rm -rf "$W/gocache"
echo "$W/bin"
