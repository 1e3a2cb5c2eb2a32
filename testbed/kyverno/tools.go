//go:build tools

// The command testbed/kyverno.sh builds: Kyverno's admission controller, a real mutating
// webhook that is not ours, for the tests of sidecars other injectors add.
package tools

import _ "github.com/kyverno/kyverno/cmd/kyverno"
