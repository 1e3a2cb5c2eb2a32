#!/bin/bash
# Builds helm (v4, the release testbed/helm/go.mod pins) from the Go module proxy, for the
# chart's tests (charts/sidecar-injector): go.sum is committed, so every module is checked.
# Cached: a second run with the same module is a no-op.
#   usage: helm.sh [CACHE_DIR]      (default: $HELM_CACHE or ~/.cache/sidecar-injector-helm)
# Prints the folder holding `helm` on its last line. With HELM_BIN set to a folder holding
# an executable helm, it builds nothing and prints that folder.
set -euo pipefail
if [[ -n ${HELM_BIN:-} ]]; then
  [[ -x $HELM_BIN/helm ]] || { echo "helm: HELM_BIN=$HELM_BIN has no executable helm" >&2; exit 1; }
  echo "$HELM_BIN"; exit 0
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MOD=$HERE/helm
CACHE=${1:-${HELM_CACHE:-$HOME/.cache/sidecar-injector-helm}}
VERSION=$(awk '$1 == "require" && $2 == "helm.sh/helm/v4" { print $3; exit }' "$MOD/go.mod")
[[ $VERSION =~ ^v4\. ]] || { echo "helm: no helm.sh/helm/v4 version in $MOD/go.mod" >&2; exit 1; }
W=$CACHE/$VERSION
LD="-s -w -X helm.sh/helm/v4/internal/version.version=$VERSION"
KEY=$( { grep -v '^//' "$MOD/go.mod"; cat "$MOD/go.sum"; echo "$LD"; } | sha256sum | cut -c1-16)
if [[ $(cat "$W/bin/.built-from" 2>/dev/null) == "$KEY" && -x $W/bin/helm ]]; then
  echo "$W/bin"; exit 0
fi
command -v go >/dev/null || { echo "helm: no go on PATH" >&2; exit 1; }
mkdir -p "$W/bin"
export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOCACHE=$W/gocache GOTOOLCHAIN=${GOTOOLCHAIN:-local}
cd "$MOD"
start=$(date +%s)
echo "helm: building helm $VERSION (a minute or two on 2 cores the first time)" >&2
go build -trimpath -ldflags "$LD" -o "$W/bin/helm.tmp" helm.sh/helm/v4/cmd/helm
mv "$W/bin/helm.tmp" "$W/bin/helm"
echo "helm: built in $(( $(date +%s) - start ))s" >&2
echo "$KEY" > "$W/bin/.built-from"
rm -rf "$W/gocache"
echo "$W/bin"
