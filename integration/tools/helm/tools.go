//go:build tools

// Package tools pins the Helm CLI for watchmux's chart checks. The module's go.mod
// also names it with a `tool` directive; this file keeps `go mod tidy` from
// dropping the requirement on toolchains that ignore that directive.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
