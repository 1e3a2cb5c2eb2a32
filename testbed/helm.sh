#!/bin/bash
# Builds helm (v4, the release testbed/helm/go.mod pins) from the Go module proxy, for the
# chart's tests (charts/sidecar-injector), with go-tool.sh: cached, a second run is a no-op.
#   usage: helm.sh [CACHE_DIR]      (default: $HELM_CACHE or ~/.cache/sidecar-injector-helm)
# Prints the folder holding `helm` on its last line. With HELM_BIN set to a folder holding
# an executable helm, it builds nothing and prints that folder.
set -euo pipefail
if [[ -n ${HELM_BIN:-} ]]; then
  [[ -x $HELM_BIN/helm ]] || { echo "helm: HELM_BIN=$HELM_BIN has no executable helm" >&2; exit 1; }
  echo "$HELM_BIN"; exit 0
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${1:-${HELM_CACHE:-$HOME/.cache/sidecar-injector-helm}}
VERSION=$(awk '$1 == "require" && $2 == "helm.sh/helm/v4" { print $3; exit }' "$HERE/helm/go.mod")
[[ $VERSION =~ ^v4\. ]] || { echo "helm: no helm.sh/helm/v4 version in $HERE/helm/go.mod" >&2; exit 1; }
exec bash "$HERE/go-tool.sh" helm "$HERE/helm" helm.sh/helm/v4/cmd/helm "$CACHE/$VERSION" \
  "-s -w -X helm.sh/helm/v4/internal/version.version=$VERSION"
