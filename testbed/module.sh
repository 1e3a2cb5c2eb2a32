#!/bin/bash
# Writes the Go module testbed/build.sh builds one Kubernetes release from: go.mod requiring
# k8s.io/kubernetes VERSION with each of its staging modules (v0.0.0 in its go.mod, which no
# proxy serves) replaced by the v0.X.Y of the same release, tools.go naming the commands, and
# go.sum from `go mod tidy`. etcd is not in it: build.sh takes the testbed's own etcd.
#   usage: module.sh VERSION DIR      e.g. module.sh v1.33.13 testbed/matrix/v1.33
# Commit DIR's go.mod, go.sum and tools.go (they are source); the builds go to a cache.
set -euo pipefail
VERSION=${1:?usage: module.sh VERSION DIR}; DIR=${2:?usage: module.sh VERSION DIR}
[[ $VERSION =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "module.sh: $VERSION is not a release (v1.X.Y)" >&2; exit 1; }
STAGING=v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}
mkdir -p "$DIR"
GOMOD=$(cd "$DIR" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$VERSION" | awk -F'"' '/"GoMod"/ {print $4}')
GO=$(awk '$1 == "go" {print $2; exit}' "$GOMOD")
{
  echo "// Kubernetes $VERSION for the compatibility matrix (scripts/test-matrix), written by"
  echo "// testbed/module.sh: run it again rather than editing this file."
  echo "module github.com/sidecar-injector/testbed/matrix"
  echo
  echo "go $GO"
  echo
  echo "require k8s.io/kubernetes $VERSION"
  echo
  echo "replace ("
  awk -v v="$STAGING" '/=> \.\/staging\/src\// {printf "\t%s => %s %s\n", $1, $1, v}' "$GOMOD"
  echo ")"
} > "$DIR/go.mod"
cat > "$DIR/tools.go" <<'GO'
//go:build tools

// Package tools names the commands testbed/build.sh builds, so that `go mod tidy` keeps every
// module they need in go.sum. Nothing here is compiled into the project.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
(cd "$DIR" && GOTOOLCHAIN=local go mod tidy)
echo "$DIR"
