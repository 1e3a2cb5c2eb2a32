//go:build tools

// The command testbed/helm.sh builds.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
