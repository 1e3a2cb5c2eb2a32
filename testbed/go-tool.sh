#!/bin/bash
# Builds a Go program from a module the testbed commits (its go.mod and go.sum: every module
# is checked) with the Go module proxy, into a cache outside the repository; a no-op once built
# from the same sources. helm.sh and otelcol.sh build theirs with it.
#   usage: go-tool.sh NAME MODULE_DIR PACKAGE CACHE_DIR [LDFLAGS]
# Prints the folder holding NAME on its last line.
set -euo pipefail
NAME=$1
MOD=$2
PACKAGE=$3
W=$4
LD=${5:--s -w}
KEY=$( { cat "$MOD/go.mod" "$MOD/go.sum" "$MOD"/*.go; echo "$LD"; } | sha256sum | cut -c1-16)
if [[ $(cat "$W/bin/.built-from" 2>/dev/null) == "$KEY" && -x $W/bin/$NAME ]]; then
  echo "$W/bin"; exit 0
fi
command -v go >/dev/null || { echo "$NAME: no go on PATH" >&2; exit 1; }
mkdir -p "$W/bin"
export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOCACHE=$W/gocache GOTOOLCHAIN=${GOTOOLCHAIN:-local}
cd "$MOD"
start=$(date +%s)
echo "$NAME: building $PACKAGE (a few minutes on 2 cores the first time)" >&2
go build -trimpath -ldflags "$LD" -o "$W/bin/$NAME.tmp" "$PACKAGE"
mv "$W/bin/$NAME.tmp" "$W/bin/$NAME"
echo "$NAME: built in $(( $(date +%s) - start ))s" >&2
echo "$KEY" > "$W/bin/.built-from"
rm -rf "$W/gocache"
echo "$W/bin"
