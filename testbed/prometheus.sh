#!/bin/bash
# Fetches Debian's `prometheus` package (Prometheus and promtool 2.42) and unpacks it into a cache
# outside the repository, without installing it (no service is started, nothing is left on the
# system). Cached: a second run is a no-op.
#   usage: prometheus.sh [CACHE_DIR]   (default: $PROMETHEUS_CACHE or ~/.cache/sidecar-injector-prometheus)
# Prints the folder holding `prometheus` and `promtool` on its last line. With PROMETHEUS_BIN set
# to such a folder, it fetches nothing and prints that folder.
set -euo pipefail
if [[ -n ${PROMETHEUS_BIN:-} ]]; then
  for b in prometheus promtool; do
    [[ -x $PROMETHEUS_BIN/$b ]] || { echo "prometheus: PROMETHEUS_BIN=$PROMETHEUS_BIN has no executable $b" >&2; exit 1; }
  done
  echo "$PROMETHEUS_BIN"; exit 0
fi
CACHE=${1:-${PROMETHEUS_CACHE:-$HOME/.cache/sidecar-injector-prometheus}}
BIN=$CACHE/root/usr/bin
if [[ -x $BIN/prometheus && -x $BIN/promtool ]]; then
  echo "$BIN"; exit 0
fi
mkdir -p "$CACHE/download"
cd "$CACHE/download"
echo "prometheus: fetching Debian's prometheus package" >&2
if ! apt-get download prometheus >/dev/null 2>&1; then
  apt-get update >/dev/null
  apt-get download prometheus >/dev/null 2>&1
fi
rm -rf "$CACHE/root"
dpkg-deb -x "$(ls -t prometheus_*.deb | head -1)" "$CACHE/root"
rm -f prometheus_*.deb
"$BIN/promtool" --version >&2
echo "$BIN"
