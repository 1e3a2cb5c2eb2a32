#!/bin/bash
# Builds the OpenTelemetry Collector of testbed/otelcol (the OTLP receiver and the debug
# exporter, at the collector release its go.mod pins) from the Go module proxy, for the trace
# tests, with go-tool.sh: cached, a second run is a no-op.
#   usage: otelcol.sh [CACHE_DIR]   (default: $OTELCOL_CACHE or ~/.cache/sidecar-injector-otelcol)
# Prints the folder holding `otelcol` on its last line. With OTELCOL_BIN set to a folder holding
# an executable otelcol, it builds nothing and prints that folder.
set -euo pipefail
if [[ -n ${OTELCOL_BIN:-} ]]; then
  [[ -x $OTELCOL_BIN/otelcol ]] || { echo "otelcol: OTELCOL_BIN=$OTELCOL_BIN has no executable otelcol" >&2; exit 1; }
  echo "$OTELCOL_BIN"; exit 0
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${1:-${OTELCOL_CACHE:-$HOME/.cache/sidecar-injector-otelcol}}
VERSION=$(awk '$1 == "go.opentelemetry.io/collector/otelcol" { print $2; exit }' "$HERE/otelcol/go.mod")
[[ -n $VERSION ]] || { echo "otelcol: no go.opentelemetry.io/collector/otelcol in $HERE/otelcol/go.mod" >&2; exit 1; }
exec bash "$HERE/go-tool.sh" otelcol "$HERE/otelcol" sidecar-injector/testbed/otelcol "$CACHE/$VERSION"
