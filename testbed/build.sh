#!/bin/bash
# Builds a real kube-apiserver and kube-controller-manager (v1.20.2) from Debian bookworm's `kubernetes`
# source package with Debian's Go 1.19, and installs etcd 3.4 from Debian's `etcd-server`.
# Needs root (apt-get) and only Debian's package archive. Cached: a second run is a no-op.
#   usage: build.sh [CACHE_DIR]      (default: $K8S_TESTBED_CACHE or ~/.cache/k8s-testbed)
# Prints the folder holding the binaries on its last line.
# With K8S_TESTBED_BIN set to a folder holding kube-apiserver, kube-controller-manager and etcd
# (prebuilt elsewhere), it builds nothing and prints that folder.
# Adapted from the project's tested reference recipe (shared/testbed).
set -euo pipefail
if [[ -n ${K8S_TESTBED_BIN:-} ]]; then
  for b in kube-apiserver kube-controller-manager; do
    [[ -x $K8S_TESTBED_BIN/$b ]] || { echo "k8s-testbed: K8S_TESTBED_BIN=$K8S_TESTBED_BIN has no executable $b" >&2; exit 1; }
  done
  # etcd may sit beside them or on PATH (Debian's etcd-server), as up.sh takes it.
  [[ -x $K8S_TESTBED_BIN/etcd ]] || command -v etcd >/dev/null \
    || { echo "k8s-testbed: no etcd in K8S_TESTBED_BIN=$K8S_TESTBED_BIN nor on PATH" >&2; exit 1; }
  echo "$K8S_TESTBED_BIN"; exit 0
fi
CACHE=${1:-${K8S_TESTBED_CACHE:-$HOME/.cache/k8s-testbed}}
W=$CACHE/v1.20.2
if [[ -x $W/bin/kube-apiserver && -x $W/bin/kube-controller-manager ]] && command -v etcd >/dev/null; then
  echo "$W/bin"; exit 0
fi
mkdir -p "$W/apt/lists/partial" "$W/apt/parts" "$W/bin"
cd "$W"
echo "k8s-testbed: installing golang-go, etcd-server, reflect2 from Debian" >&2
if ! dpkg -s golang-go etcd-server golang-github-modern-go-reflect2-dev >/dev/null 2>&1; then
  apt-get update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    golang-go etcd-server golang-github-modern-go-reflect2-dev >/dev/null
fi
# deb-src through a private apt configuration: the system's sources stay untouched
cat > apt/parts/src.sources <<'EOS'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
APTO=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$W/apt/parts" -o "Dir::State::Lists=$W/apt/lists")
echo "k8s-testbed: fetching Debian's kubernetes source package" >&2
apt-get "${APTO[@]}" update >/dev/null
[[ -f $(ls kubernetes_*.orig.tar.gz 2>/dev/null | head -1) ]] || apt-get "${APTO[@]}" source --download-only kubernetes >/dev/null 2>&1
rm -rf kubernetes-1.20.2 && tar xzf kubernetes_*.orig.tar.gz
mkdir -p gopath/src/k8s.io && ln -sfn "$W/kubernetes-1.20.2" gopath/src/k8s.io/kubernetes
cd gopath/src/k8s.io/kubernetes
# fix 1: the vendored reflect2 v1.0.1 crashes under Go >= 1.18 (the apiserver segfaults on the first
# webhook-mutated pod); swap in Debian's 1.0.2
R=vendor/github.com/modern-go/reflect2
rm -rf $R && mkdir $R
cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go /usr/share/gocode/src/github.com/modern-go/reflect2/*.s $R/
rm -f $R/*_test.go
export CGO_ENABLED=0 GO111MODULE=off GOPROXY=off GOFLAGS= GOPATH=$W/gopath GOCACHE=$W/gocache
# fix 2: pkg/generated/openapi is not in the tarball; generate it with the vendored openapi-gen
echo "k8s-testbed: generating OpenAPI definitions" >&2
go build -o "$W/bin/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
DIRS=$(grep -rl --include='*.go' '+k8s:openapi-gen=' pkg staging/src/k8s.io cmd plugin | xargs grep -l '^// *+k8s:' | xargs -n1 dirname | sort -u \
  | grep -v -e staging/src/k8s.io/code-generator -e staging/src/k8s.io/sample-apiserver -e '^pkg/generated/openapi' \
  | sed -e 's#^staging/src/##' -e 's#^\(pkg\|cmd\|plugin\)/#k8s.io/kubernetes/\1/#' | paste -sd,)
"$W/bin/openapi-gen" -i "$DIRS" -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
  -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt -r "$W/openapi-violations.report"
V=k8s.io/kubernetes/vendor/k8s.io/component-base/version
LD="-s -w -X $V.gitVersion=v1.20.2 -X $V.gitMajor=1 -X $V.gitMinor=20 -X $V.gitTreeState=clean"
for c in kube-apiserver kube-controller-manager; do
  echo "k8s-testbed: building $c (a few minutes on 2 cores)" >&2
  go build -ldflags "$LD" -o "$W/bin/$c.tmp" ./cmd/$c && mv "$W/bin/$c.tmp" "$W/bin/$c"
done
rm -rf "$W/kubernetes-1.20.2" "$W/gopath" "$W/gocache"
echo "$W/bin"
