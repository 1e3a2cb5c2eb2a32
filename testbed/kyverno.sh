#!/bin/bash
# Builds Kyverno's admission controller (the release testbed/kyverno/go.mod pins) from the Go
# module proxy, for the tests of sidecars another webhook injects, with go-tool.sh, and puts
# Kyverno's CRDs (from the same module) beside it: cached, a second run is a no-op.
#   usage: kyverno.sh [CACHE_DIR]   (default: $KYVERNO_CACHE or ~/.cache/sidecar-injector-kyverno)
# Prints the folder holding `kyverno` and `crds/` on its last line. With KYVERNO_BIN set to a
# folder holding both, it builds nothing and prints that folder.
set -euo pipefail
if [[ -n ${KYVERNO_BIN:-} ]]; then
  [[ -x $KYVERNO_BIN/kyverno && -d $KYVERNO_BIN/crds ]] || { echo "kyverno: KYVERNO_BIN=$KYVERNO_BIN has no executable kyverno and crds/" >&2; exit 1; }
  echo "$KYVERNO_BIN"; exit 0
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${1:-${KYVERNO_CACHE:-$HOME/.cache/sidecar-injector-kyverno}}
VERSION=$(awk '$1 == "require" && $2 == "github.com/kyverno/kyverno" { print $3; exit }' "$HERE/kyverno/go.mod")
[[ -n $VERSION ]] || { echo "kyverno: no github.com/kyverno/kyverno in $HERE/kyverno/go.mod" >&2; exit 1; }
BIN=$(bash "$HERE/go-tool.sh" kyverno "$HERE/kyverno" github.com/kyverno/kyverno/cmd/kyverno "$CACHE/$VERSION" | tail -1)
if [[ ! -f $BIN/crds/.complete ]]; then
  SRC=$(cd "$HERE/kyverno" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' github.com/kyverno/kyverno)
  rm -rf "$BIN/crds" && mkdir -p "$BIN/crds"
  for group in kyverno policies.kyverno.io policyreport reports; do
    cp "$SRC/config/crds/$group"/*.yaml "$BIN/crds/"
  done
  touch "$BIN/crds/.complete"
fi
echo "$BIN"
