//go:build tools

// Package tools pins the cosign CLI that `make dist` signs the release image
// with (integration/scripts/build-cosign.sh builds it). The module's go.mod
// also names it with a `tool` directive; this file keeps `go mod tidy` from
// dropping the requirement on toolchains that ignore that directive.
package tools

import _ "github.com/sigstore/cosign/v2/cmd/cosign"
